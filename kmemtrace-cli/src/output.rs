//! The one policy for what the programs write (logs, reports, exports):
//!
//! - `-` is standard output, for formats that stream; a binary one is
//!   refused on a terminal (a usage error);
//! - the parent directory must exist: nothing is created on the way (a
//!   mistyped path fails instead of filling a stray tree);
//! - a symbolic link is refused (one planted in a shared directory would
//!   send kernel addresses elsewhere); a new file is owner-only (0600), a
//!   new directory 0700;
//! - an existing regular file is kept as `NAME.old` (replacing an older
//!   `NAME.old`), as perf keeps `perf.data.old`; a device or FIFO is
//!   written as it is; an existing directory is replaced only where it is
//!   an earlier output of the same kind (kept as `NAME.old` likewise) or
//!   empty;
//! - a run that fails before it wrote anything of use puts things back
//!   ([`OutputFile::restore`]): the new file goes, `NAME.old` is `NAME`
//!   again, so a mistyped command never costs the previous capture;
//! - any failure to create or write an output exits
//!   [`crate::exit::OUTPUT`].

use crate::exit::{self, Code};
use std::fs::{File, OpenOptions};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an output was refused: the exit code and one line.
#[derive(Debug)]
pub struct Refused {
    pub code: Code,
    pub msg: String,
}

impl Refused {
    fn output(msg: String) -> Self {
        Refused {
            code: exit::OUTPUT,
            msg,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

/// `NAME.old` beside `NAME`.
pub fn old_name(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".old");
    PathBuf::from(s)
}

/// `the previous NAME is kept as NAME.old`, where one was kept.
fn kept_note(path: &Path, kept_old: Option<&Path>) -> Option<String> {
    kept_old.map(|o| format!("the previous {} is kept as {}", path.display(), o.display()))
}

/// Moves the existing output `p` out of the way, to `old`.
fn keep_as_old(p: &Path, old: &Path) -> Result<(), Refused> {
    std::fs::rename(p, old).map_err(|e| {
        Refused::output(format!(
            "cannot keep the existing {} as {}: {e}",
            p.display(),
            old.display()
        ))
    })
}

/// Gives the output kept as `NAME.old` its name back, after a run that
/// wrote nothing of use.
fn give_name_back(path: &Path, kept_old: Option<&Path>) -> std::io::Result<()> {
    match kept_old {
        Some(old) => std::fs::rename(old, path),
        None => Ok(()),
    }
}

/// Standard output as a file, for `-o -` of a binary format: refused on a
/// terminal (`what` names the data, as in "the binary log").
pub fn stdout_binary(what: &str) -> Result<File, Refused> {
    let out = std::io::stdout();
    if out.is_terminal() {
        return Err(Refused {
            code: exit::USAGE,
            msg: format!(
                "refusing to write {what} to a terminal: redirect standard output or give a file"
            ),
        });
    }
    let fd = out
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Refused::output(format!("standard output: {e}")))?;
    Ok(File::from(fd))
}

/// An output file opened under the policy.
#[derive(Debug)]
pub struct OutputFile {
    pub file: File,
    pub path: PathBuf,
    /// Where an existing file of the same name was kept.
    pub kept_old: Option<PathBuf>,
    /// Whether the file is new (not a device or FIFO written as it is).
    created: bool,
}

impl OutputFile {
    /// Undoes [`create`] after a run that wrote nothing of use: removes the
    /// new file and gives `NAME.old` its name back.
    pub fn restore(self) -> std::io::Result<()> {
        drop(self.file);
        if self.created {
            std::fs::remove_file(&self.path)?;
        }
        give_name_back(&self.path, self.kept_old.as_deref())
    }

    /// The line that tells the user where the previous file went, if one
    /// was kept.
    pub fn kept_note(&self) -> Option<String> {
        kept_note(&self.path, self.kept_old.as_deref())
    }
}

/// The directory `p` goes in, which must exist.
fn parent_must_exist(p: &Path) -> Result<(), Refused> {
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => return Ok(()),
    };
    if parent.is_dir() {
        Ok(())
    } else {
        Err(Refused::output(format!(
            "{}: the directory {} does not exist (outputs never create directories on the way)",
            p.display(),
            parent.display()
        )))
    }
}

fn refuse_symlink(p: &Path) -> Result<Option<std::fs::Metadata>, Refused> {
    let m = std::fs::symlink_metadata(p).ok();
    if m.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
        return Err(Refused::output(format!(
            "{}: is a symbolic link: refusing to write through it",
            p.display()
        )));
    }
    Ok(m)
}

/// Creates output file `p` (not `-`): see the module's policy.
pub fn create(p: &Path) -> Result<OutputFile, Refused> {
    let existing = refuse_symlink(p)?;
    parent_must_exist(p)?;
    let mut opts = OpenOptions::new();
    opts.write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW);
    let mut kept_old = None;
    let created = match &existing {
        Some(m) if m.is_dir() => {
            return Err(Refused::output(format!("{}: is a directory", p.display())))
        }
        Some(m) if m.is_file() => {
            let old = old_name(p);
            if refuse_symlink(&old)?.is_some_and(|m| m.is_dir()) {
                return Err(Refused::output(format!(
                    "cannot keep the existing {} as {}: that is a directory",
                    p.display(),
                    old.display()
                )));
            }
            keep_as_old(p, &old)?;
            kept_old = Some(old);
            true
        }
        Some(_) => false,
        None => true,
    };
    opts.create_new(created);
    match opts.open(p) {
        Ok(file) => Ok(OutputFile {
            file,
            path: p.to_path_buf(),
            kept_old,
            created,
        }),
        Err(e) => {
            // Put the previous file back: this run wrote nothing.
            if let Some(old) = &kept_old {
                let _ = std::fs::rename(old, p);
            }
            Err(Refused::output(format!(
                "cannot create {}: {e}",
                p.display()
            )))
        }
    }
}

/// An output directory created under the policy (Parquet datasets).
#[derive(Debug)]
pub struct OutputDir {
    pub path: PathBuf,
    pub kept_old: Option<PathBuf>,
}

impl OutputDir {
    /// Undoes [`create_dir`] after a run that failed: removes what it
    /// wrote there and gives `NAME.old` its name back.
    pub fn restore(self) -> std::io::Result<()> {
        std::fs::remove_dir_all(&self.path)?;
        give_name_back(&self.path, self.kept_old.as_deref())
    }

    pub fn kept_note(&self) -> Option<String> {
        kept_note(&self.path, self.kept_old.as_deref())
    }
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

/// Creates output directory `p` (mode 0700). An existing one is used if
/// empty, kept as `NAME.old` if `earlier_output` says it is an earlier
/// output of the same kind (an older `NAME.old` of that kind is removed
/// first), and refused otherwise: a mistyped `-o` never moves a directory
/// that is not ours.
pub fn create_dir(p: &Path, earlier_output: impl Fn(&Path) -> bool) -> Result<OutputDir, Refused> {
    let existing = refuse_symlink(p)?;
    parent_must_exist(p)?;
    let mut kept_old = None;
    match existing {
        Some(m) if !m.is_dir() => {
            return Err(Refused::output(format!(
                "{}: exists and is not a directory",
                p.display()
            )))
        }
        Some(_) if is_empty_dir(p) => {
            return Ok(OutputDir {
                path: p.to_path_buf(),
                kept_old: None,
            })
        }
        Some(_) if !earlier_output(p) => {
            return Err(Refused::output(format!(
                "{}: exists, and is not an earlier output of this kind: give a new directory",
                p.display()
            )))
        }
        Some(_) => {
            let old = old_name(p);
            if let Some(m) = refuse_symlink(&old)? {
                if !(m.is_dir() && earlier_output(&old)) {
                    return Err(Refused::output(format!(
                        "cannot keep the existing {} as {}: that exists and is not an earlier output of this kind",
                        p.display(),
                        old.display()
                    )));
                }
                std::fs::remove_dir_all(&old).map_err(|e| {
                    Refused::output(format!("cannot remove {}: {e}", old.display()))
                })?;
            }
            keep_as_old(p, &old)?;
            kept_old = Some(old);
        }
        None => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(p)
        .map_err(|e| Refused::output(format!("cannot create {}: {e}", p.display())))?;
    Ok(OutputDir {
        path: p.to_path_buf(),
        kept_old,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn an_existing_file_is_kept_as_old_and_the_new_one_is_private() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.kmt");
        std::fs::write(&p, b"precious").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let o = create(&p).unwrap();
        assert_eq!(o.kept_old.as_deref(), Some(old_name(&p).as_path()));
        assert_eq!(std::fs::read(old_name(&p)).unwrap(), b"precious");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(o.kept_note().unwrap().contains("x.kmt.old"));
        drop(o);
        assert!(create(&d.path().join("new.kmt"))
            .unwrap()
            .kept_old
            .is_none());
        assert!(create(Path::new("/dev/null")).unwrap().kept_old.is_none());
    }

    #[test]
    fn restore_gives_the_previous_file_its_name_back() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("keep.kmt");
        std::fs::write(&p, b"precious").unwrap();
        // Twice: the second run must not push the first's file out either.
        for _ in 0..2 {
            let mut o = create(&p).unwrap();
            std::io::Write::write_all(&mut o.file, b"junk").unwrap();
            o.restore().unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"precious");
            assert!(!old_name(&p).exists());
        }
        // Nothing was there: nothing is left.
        let q = d.path().join("fresh.kmt");
        create(&q).unwrap().restore().unwrap();
        assert!(!q.exists());
        // A device written as it is stays.
        create(Path::new("/dev/null")).unwrap().restore().unwrap();
        assert!(Path::new("/dev/null").exists());
    }

    #[test]
    fn refused_outputs_exit_4_and_touch_nothing() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("l.kmt");
        std::os::unix::fs::symlink(d.path().join("target"), &link).unwrap();
        assert_eq!(create(&link).unwrap_err().code, exit::OUTPUT);
        assert!(!d.path().join("target").exists());
        let deep = d.path().join("no/such/dir/x.dat");
        let e = create(&deep).unwrap_err();
        assert_eq!(e.code, exit::OUTPUT);
        assert!(e.msg.contains("does not exist"), "{}", e.msg);
        assert!(!d.path().join("no").exists());
        let e = create_dir(&d.path().join("no/such/ds"), |_| true).unwrap_err();
        assert_eq!(e.code, exit::OUTPUT);
        assert!(!d.path().join("no").exists());
        assert_eq!(create(d.path()).unwrap_err().code, exit::OUTPUT);
    }

    #[test]
    fn a_directory_is_replaced_only_if_it_is_an_earlier_output() {
        let d = tempfile::tempdir().unwrap();
        let ours = |p: &Path| p.join("manifest.json").exists();
        let ds = d.path().join("ds");
        // New, then empty and reused.
        assert!(create_dir(&ds, ours).unwrap().kept_old.is_none());
        assert!(create_dir(&ds, ours).unwrap().kept_old.is_none());
        std::fs::write(ds.join("manifest.json"), "1").unwrap();
        let o = create_dir(&ds, ours).unwrap();
        assert_eq!(o.kept_old.as_deref(), Some(old_name(&ds).as_path()));
        assert!(old_name(&ds).join("manifest.json").exists());
        assert!(is_empty_dir(&ds));
        // Again: the older .old (ours) goes, the previous one is kept.
        std::fs::write(ds.join("manifest.json"), "2").unwrap();
        create_dir(&ds, ours).unwrap();
        assert_eq!(
            std::fs::read_to_string(old_name(&ds).join("manifest.json")).unwrap(),
            "2"
        );
        // A failed run puts the previous one back.
        std::fs::write(ds.join("manifest.json"), "3").unwrap();
        let o = create_dir(&ds, ours).unwrap();
        std::fs::write(ds.join("partial.parquet"), "x").unwrap();
        o.restore().unwrap();
        assert_eq!(
            std::fs::read_to_string(ds.join("manifest.json")).unwrap(),
            "3"
        );
        assert!(!ds.join("partial.parquet").exists());
        // Someone else's directory is never moved.
        let home = d.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("thesis.tex"), "x").unwrap();
        assert_eq!(create_dir(&home, ours).unwrap_err().code, exit::OUTPUT);
        assert!(home.join("thesis.tex").exists());
    }
}
