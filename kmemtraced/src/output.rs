//! The log's destination: standard output (never a terminal) or a file,
//! under the output policy every kmemtrace program follows
//! ([`kmemtrace_cli::output`]: an existing log is kept as `FILE.old`, a
//! symlink refused, the new file owner-only). A file is opened only once
//! everything else has been checked and set up, and a run that records
//! nothing of what was asked puts the previous log back ([`Written::restore`]).

use crate::failure::Result;
use kmemtrace_cli::output::{self, OutputFile};
use std::fs::File;
use std::path::Path;

/// An opened output.
pub struct Destination {
    pub file: File,
    /// How to name it to the user.
    pub name: String,
    /// The file, where the output is one (not standard output).
    target: Option<OutputFile>,
}

/// Opens the output: `-` is standard output (refused if a terminal).
pub fn open(p: &Path) -> Result<Destination> {
    if p.as_os_str() == "-" {
        return Ok(Destination {
            file: output::stdout_binary("the binary log")?,
            name: "standard output".into(),
            target: None,
        });
    }
    let target = output::create(p)?;
    // The session writes through its own handle; `target` keeps the name
    // and what it replaced, for restore.
    let file = target
        .file
        .try_clone()
        .map_err(|e| crate::failure::Failure::output(format!("{}: {e}", p.display())))?;
    Ok(Destination {
        file,
        name: p.display().to_string(),
        target: Some(target),
    })
}

/// Handed the output file back from [`Destination`] for what follows the run.
pub struct Written {
    target: Option<OutputFile>,
}

impl Destination {
    /// Splits off the file the session writes.
    pub fn split(self) -> (File, Written) {
        (
            self.file,
            Written {
                target: self.target,
            },
        )
    }
}

impl Written {
    /// Where the previous log went, to tell the user.
    pub fn kept_note(&self) -> Option<String> {
        self.target.as_ref().and_then(OutputFile::kept_note)
    }

    /// After a run that recorded nothing of what was asked: the new log
    /// goes and the previous one gets its name back. Says what it could
    /// not undo.
    pub fn restore(self) -> Option<String> {
        let t = self.target?;
        let path = t.path.display().to_string();
        let had_old = t.kept_old.is_some();
        match t.restore() {
            Ok(()) if had_old => Some(format!("{path}: the previous log is left as it was")),
            Ok(()) => None,
            Err(e) => Some(format!("{path}: could not put the previous log back: {e}")),
        }
    }
}
