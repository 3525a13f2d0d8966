//! The guardian: a small process started beside each live recording that
//! stops tracing in the recorder's instance and removes it if the recorder
//! dies without doing so (SIGKILL, the OOM killer, a crash). Otherwise the
//! instance would keep `tracing_on` at 1 and cost the machine every kmem
//! event until the next run or `--cleanup`.
//!
//! It is this program again (`kmemtraced --guard DIR`), in a process
//! group of its own so that the terminal's signals do not reach it, reading
//! a pipe whose write end only the recorder holds (close-on-exec, so the
//! traced command does not inherit it). A recorder that ends in order
//! writes one byte first (the handle's `Drop`); end of file with no byte
//! means it died.

use crate::sys;
use crate::tracefs::{Instance, TraceDir};
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The recorder's end of the guardian's pipe.
pub struct Guardian {
    pipe: std::fs::File,
}

/// The byte a recorder sends when it has cleaned up after itself.
const FINISHED: &[u8] = b"F";
/// How long the guardian retries removing an instance still held busy by
/// the dead recorder's files (the kernel closes them as the process exits).
const REMOVE_FOR: Duration = Duration::from_secs(5);

impl Guardian {
    /// Starts a guardian for `instance`.
    pub fn start(instance: &Instance) -> io::Result<Guardian> {
        let (read, write) = sys::pipe()?;
        // Named as this program (a comm of `exe` would say nothing in ps);
        // /proc/self/exe where the path cannot be had.
        let exe = std::env::current_exe()
            .ok()
            .filter(|p| p.exists())
            .unwrap_or_else(|| "/proc/self/exe".into());
        Command::new(exe)
            .arg("--guard")
            .arg(&instance.dir.path)
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Guardian {
            pipe: std::fs::File::from(write),
        })
    }
}

/// Any orderly end of the recorder (a return, an error, a panic unwinding)
/// drops the guardian handle, and the recorder's own `Instance` removes the
/// instance: the guardian is told so and exits without acting. Only a
/// recorder that dies without unwinding leaves it end of file alone.
impl Drop for Guardian {
    fn drop(&mut self) {
        let _ = self.pipe.write_all(FINISHED);
    }
}

/// The guardian's side (`--guard DIR`): waits for the recorder to finish or
/// die, and cleans up after a dead one. Returns what it did, if anything.
pub fn watch(instance: &Path) -> Option<String> {
    sys::ignore_terminal_signals();
    let mut byte = [0u8; 1];
    let finished = loop {
        match io::stdin().read(&mut byte) {
            Ok(0) => break false,
            Ok(_) => break true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break false,
        }
    };
    if finished || !instance.is_dir() {
        return None;
    }
    let dir = TraceDir {
        path: PathBuf::from(instance),
    };
    // Stop the cost at once, then remove the instance when the dead
    // recorder's files are closed.
    let _ = dir.write("tracing_on", "0");
    let _ = dir.write("events/enable", "0");
    let until = Instant::now() + REMOVE_FOR;
    let name = instance.display();
    loop {
        match std::fs::remove_dir(instance) {
            Ok(()) => {
                return Some(format!(
                    "the recorder died without finishing: stopped tracing in {name} and removed it"
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) if Instant::now() >= until => {
                return Some(format!(
                    "the recorder died without finishing: stopped tracing in {name}, but could not remove it ({e}); `kmemtraced --cleanup` will"
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}
