//! The log's destination: standard output (never a terminal) or a file.
//!
//! A file is opened only once everything else has been checked and set up,
//! so a run refused for a wrong option leaves the user's files alone. An
//! existing regular file is kept as `FILE.old` (perf's convention for
//! `perf.data`), never truncated: a mistaken second run loses nothing.

use crate::failure::{Failure, Result};
use std::fs::{File, OpenOptions};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// An opened output.
pub struct Output {
    pub file: File,
    /// How to name it to the user.
    pub name: String,
    /// Where an existing file of the same name was kept.
    pub kept_old: Option<PathBuf>,
}

/// `FILE.old` beside `FILE`.
pub fn old_name(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".old");
    PathBuf::from(s)
}

/// Opens the output: `-` is standard output (refused if a terminal); a file
/// is created with mode 0600, never through a symlink; an existing regular
/// file is first renamed to `FILE.old`. Other existing files (a device such
/// as /dev/null, a FIFO) are opened for writing as they are.
pub fn open(p: &Path) -> Result<Output> {
    if p.as_os_str() == "-" {
        let out = std::io::stdout();
        if out.is_terminal() {
            return Err(Failure::usage(
                "refusing to write the binary log to a terminal: redirect standard output or use -o FILE",
            ));
        }
        let fd = out
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::runtime(format!("duplicating standard output: {e}")))?;
        return Ok(Output {
            file: File::from(fd),
            name: "standard output".into(),
            kept_old: None,
        });
    }
    let existing = std::fs::symlink_metadata(p).ok();
    if existing
        .as_ref()
        .is_some_and(|m| m.file_type().is_symlink())
    {
        return Err(refused_symlink(p));
    }
    let mut kept_old = None;
    let mut opts = OpenOptions::new();
    opts.write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW);
    match existing {
        Some(m) if m.is_file() => {
            let old = old_name(p);
            std::fs::rename(p, &old).map_err(|e| {
                Failure::usage(format!(
                    "cannot keep the existing {} as {}: {e}",
                    p.display(),
                    old.display()
                ))
            })?;
            kept_old = Some(old);
            opts.create_new(true);
        }
        Some(_) => {}
        None => {
            opts.create_new(true);
        }
    }
    let file = opts.open(p).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            refused_symlink(p)
        } else {
            Failure::usage(format!("cannot create the log {}: {e}", p.display()))
        }
    })?;
    Ok(Output {
        file,
        name: p.display().to_string(),
        kept_old,
    })
}

fn refused_symlink(p: &Path) -> Failure {
    Failure::usage(format!(
        "refusing to write the log through the symlink {}",
        p.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_existing_log_is_kept_as_old_and_the_new_one_is_private() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.kmt");
        std::fs::write(&p, b"precious").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let o = open(&p).unwrap();
        assert_eq!(o.kept_old.as_deref(), Some(old_name(&p).as_path()));
        assert_eq!(std::fs::read(old_name(&p)).unwrap(), b"precious");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(o);
        // A fresh name keeps nothing; a device is written as it is.
        assert!(open(&d.path().join("new.kmt")).unwrap().kept_old.is_none());
        assert!(open(Path::new("/dev/null")).unwrap().kept_old.is_none());
    }

    #[test]
    fn a_symlink_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("l.kmt");
        std::os::unix::fs::symlink(d.path().join("target"), &link).unwrap();
        assert_eq!(open(&link).err().unwrap().code, crate::failure::EXIT_USAGE);
        assert!(!d.path().join("target").exists());
    }
}
