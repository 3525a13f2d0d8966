//! Finding (and if need be mounting) tracefs, reading and writing its files,
//! and the life of the recorder's own instance: a unique name that encodes
//! the recorder's pid and start time, removal on exit, and removal of stale
//! instances whose recorder is gone.

use crate::failure::{Failure, Result};
use crate::sys;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// Where tracefs usually is, in order of preference.
const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
/// Prefix of every instance name this program creates.
pub const INSTANCE_PREFIX: &str = "kmemtraced-";

/// A tracing directory: the top level of tracefs, or one instance.
#[derive(Debug, Clone)]
pub struct TraceDir {
    pub path: PathBuf,
}

impl TraceDir {
    pub fn file(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }
    pub fn exists(&self, rel: &str) -> bool {
        self.file(rel).exists()
    }
    pub fn read_bytes(&self, rel: &str) -> io::Result<Vec<u8>> {
        read_whole(&self.file(rel))
    }
    pub fn read_string(&self, rel: &str) -> io::Result<String> {
        self.read_bytes(rel)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }
    /// Writes `value` to a control file (truncating, as `echo value > file`).
    pub fn write(&self, rel: &str, value: &str) -> Result<()> {
        self.write_io(rel, value)
            .map_err(|e| self.write_failure(rel, value, &e))
    }
    /// [`TraceDir::write`] with the system's error, for callers that tell
    /// errors apart.
    pub fn write_io(&self, rel: &str, value: &str) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.file(rel))
            .and_then(|mut f| f.write_all(value.as_bytes()))
    }
    /// What a failed [`TraceDir::write`] says.
    pub fn write_failure(&self, rel: &str, value: &str, e: &io::Error) -> Failure {
        let msg = format!(
            "writing `{}` to {}: {e}",
            value.trim(),
            self.file(rel).display()
        );
        if e.kind() == io::ErrorKind::PermissionDenied {
            Failure::input(msg + " (run kmemtraced as root)")
        } else {
            Failure::runtime(msg)
        }
    }
    /// The selected entry of a `[a] b c` list file such as `trace_clock`.
    pub fn selected(&self, rel: &str) -> Option<String> {
        let s = self.read_string(rel).ok()?;
        let start = s.find('[')?;
        let end = s[start..].find(']')? + start;
        Some(s[start + 1..end].to_string())
    }
}

/// Reads a whole file with large reads. Some tracefs files
/// (`events/header_page`, `events/header_event`) answer only the first
/// read(2) and return 0 after it, so the first read must ask for all of it
/// (`fs::read` starts with a 32-byte probe for files that report size 0).
pub fn read_whole(p: &Path) -> io::Result<Vec<u8>> {
    let mut f = fs::File::open(p)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// The mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    pub top: TraceDir,
}

impl Tracefs {
    /// Finds tracefs (`explicit`, else the usual places), mounting it at
    /// /sys/kernel/tracing when we are root and it is not mounted.
    pub fn find(explicit: Option<&Path>) -> Result<Tracefs> {
        let ok = |p: &Path| p.join("events").is_dir() && p.join("per_cpu").is_dir();
        if let Some(p) = explicit {
            if ok(p) {
                return Ok(Tracefs {
                    top: TraceDir { path: p.into() },
                });
            }
            return Err(Failure::input(format!(
                "{} is not a mounted tracefs (no events/ and per_cpu/ in it)",
                p.display()
            )));
        }
        for c in CANDIDATES {
            if ok(Path::new(c)) {
                return Ok(Tracefs {
                    top: TraceDir { path: c.into() },
                });
            }
        }
        let main = Path::new(CANDIDATES[0]);
        if !sys::is_root() {
            return Err(Failure::input(format!(
                "tracefs is not available at {} (or {}): run kmemtraced as root, which mounts it, or `mount -t tracefs nodev {}`",
                CANDIDATES[0], CANDIDATES[1], CANDIDATES[0]
            )));
        }
        if !main.is_dir() {
            return Err(Failure::input(format!(
                "{} does not exist: this kernel was built without tracing (CONFIG_TRACING), or sysfs is not mounted",
                main.display()
            )));
        }
        sys::mount_tracefs(main).map_err(|e| {
            Failure::input(format!(
                "tracefs is not mounted and `mount -t tracefs nodev {}` failed: {e}",
                main.display()
            ))
        })?;
        if ok(main) {
            Ok(Tracefs {
                top: TraceDir { path: main.into() },
            })
        } else {
            Err(Failure::input(format!(
                "mounted tracefs at {} but it has no events/: this kernel has no event tracing",
                main.display()
            )))
        }
    }

    pub fn instances_dir(&self) -> PathBuf {
        self.top.file("instances")
    }

    /// Removes instances of recorders that are no longer running. Returns
    /// the names removed; names it could not remove are reported in `errors`.
    pub fn remove_stale(&self, errors: &mut Vec<String>) -> Vec<String> {
        let mut removed = Vec::new();
        let Ok(rd) = fs::read_dir(self.instances_dir()) else {
            return removed;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((pid, start)) = parse_instance_name(&name) else {
                continue;
            };
            if process_start_time(pid) == Some(start) {
                continue; // its recorder is alive
            }
            match fs::remove_dir(e.path()) {
                Ok(()) => removed.push(name),
                // Another recorder's cleanup got there first.
                // Another recorder removed it first: the kernel answers
                // ENOENT, or ENODEV when the rmdir races with it.
                Err(err) if gone(&err) => {}
                Err(err) => errors.push(format!("{name}: {err}")),
            }
        }
        removed
    }
}

/// Whether an rmdir of an instance failed because it is already gone:
/// ENOENT, or ENODEV from `instance_rmdir()` when another process's rmdir of
/// the same instance got there first.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ENODEV)
}

/// `kmemtraced-<pid>-<start>` → (pid, start time in clock ticks since boot).
pub fn parse_instance_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(INSTANCE_PREFIX)?;
    let (pid, start) = rest.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks
/// since boot. With the pid it identifies a process across pid reuse.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The comm (field 2) may hold spaces and parentheses: skip past the last ')'.
    let after = &s[s.rfind(')')? + 1..];
    // Fields from 3 on; the start time is field 22.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The recorder's own instance, removed when dropped.
#[derive(Debug)]
pub struct Instance {
    pub name: String,
    pub dir: TraceDir,
    removed: bool,
}

impl Instance {
    /// Creates `instances/kmemtraced-<pid>-<start>`.
    pub fn create(tfs: &Tracefs) -> Result<Instance> {
        let pid = std::process::id();
        let start = process_start_time(pid).unwrap_or(0);
        let name = format!("{INSTANCE_PREFIX}{pid}-{start}");
        let path = tfs.instances_dir().join(&name);
        if let Err(e) = fs::create_dir(&path) {
            let msg = format!("creating tracefs instance {}: {e}", path.display());
            return Err(match e.kind() {
                io::ErrorKind::PermissionDenied => {
                    Failure::input(msg + " (run kmemtraced as root)")
                }
                io::ErrorKind::NotFound => {
                    Failure::input(msg + " (this kernel has no tracefs instances)")
                }
                _ => Failure::runtime(msg),
            });
        }
        Ok(Instance {
            name,
            dir: TraceDir { path },
            removed: false,
        })
    }

    /// Removes the instance (every file in it must be closed).
    pub fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        // Removal can race with the kernel releasing the last reader; retry
        // briefly on EBUSY.
        let mut last = None;
        for _ in 0..50 {
            match fs::remove_dir(&self.dir.path) {
                Ok(()) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(e) if gone(&e) => {
                    self.removed = true;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                    last = Some(e);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("instance busy")))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_names() {
        assert_eq!(parse_instance_name("kmemtraced-12-345"), Some((12, 345)));
        assert_eq!(parse_instance_name("kmemtraced-12"), None);
        assert_eq!(parse_instance_name("other-12-345"), None);
        assert_eq!(parse_instance_name("kmemtraced-x-345"), None);
    }

    #[test]
    fn own_start_time_is_known() {
        let me = std::process::id();
        assert!(process_start_time(me).is_some());
        assert_eq!(process_start_time(u32::MAX), None);
    }
}
