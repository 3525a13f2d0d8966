//! # kmemtrace-check
//!
//! Proves that a kmemtrace log can be trusted, or says exactly why not:
//! every block's CRC, the per-CPU sequence numbers, every sub-buffer decoded
//! to the end, time stamps in order, events lost by the kernel (from the
//! sub-buffers' flags and from the kernel's statistics), truncation and
//! missing metadata, each problem with its file offset.
//!
//! Data flows one way: a [`Log`] opened by the format library ->
//! [`checks`] -> the report model in [`findings`] -> the printers
//! [`human`] and [`json`].
#![forbid(unsafe_code)]

pub mod checks;
pub mod cli;
pub mod findings;
pub mod human;
pub mod json;

pub use checks::Options;
pub use findings::{Report, Verdict};

use kmemtrace_import::log::{Log, LogError};
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// A report for a log that cannot be checked at all.
pub fn unusable(name: &str, error: String) -> Report {
    Report {
        file: name.to_string(),
        verdict: Verdict::Unusable,
        exit_code: Verdict::Unusable.exit_code(),
        summary: format!("UNUSABLE: {error}"),
        error: Some(error),
        ..Default::default()
    }
}

/// The report for a log that cannot be opened: damaged (exit 5) when it is
/// a kmemtrace log whose file header or ARCH block is damaged, unusable
/// (exit 3) when it is not a log, has a major version this checker does
/// not read, or cannot be read.
fn open_failure(name: &str, e: LogError) -> Report {
    use kmemtrace_format::block::FileHeaderError;
    use kmemtrace_format::reader::OpenError;
    let damaged = |offset: u64, what: String| {
        let f = findings::Finding::error(
            findings::Kind::Damage,
            findings::Location::block(offset),
            what,
        );
        let problems = findings::Findings {
            kept: vec![f],
            total: 1,
        };
        let summary = checks::summary(Verdict::Damaged, &Default::default(), &problems);
        Report {
            file: name.to_string(),
            verdict: Verdict::Damaged,
            exit_code: Verdict::Damaged.exit_code(),
            summary,
            problems_total: 1,
            problems: problems.kept,
            ..Default::default()
        }
    };
    match e {
        // What the file is instead, and what to run (kmemtrace_import::sniff).
        LogError::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            unusable(name, e.to_string())
        }
        LogError::Io(e) => unusable(name, format!("cannot read: {e}")),
        LogError::Header(OpenError::Header(h @ FileHeaderError::BadCrc { .. })) => damaged(
            0,
            format!(
                "damaged file header ({}): nothing can be read",
                h.to_string().trim_start_matches("offset 12: ")
            ),
        ),
        LogError::NoArch(s) => damaged(
            16,
            s.split_once(": ")
                .map_or(s.as_str(), |(_, rest)| rest)
                .to_string(),
        ),
        e => unusable(name, e.to_string()),
    }
}

/// Checks an opened log.
pub fn check_log(log: &Log, opts: &Options, progress: &AtomicU64) -> Report {
    checks::check_log(log, opts, progress)
}

/// Checks a log file, or standard input for `-`.
pub fn check_path(path: &Path, opts: &Options, progress: &AtomicU64) -> Report {
    let name = if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    };
    // The name a rotated capture was recorded under checks its files as
    // one capture; each file named checks on its own.
    match kmemtrace_import::open_capture(&[path.to_path_buf()]) {
        Ok(log) => check_log(&log, opts, progress),
        Err(e) => {
            let mut r = open_failure(&name, e);
            r.bytes = std::fs::metadata(path).map_or(0, |m| m.len());
            r
        }
    }
}

/// Checks a log held in memory (tests, fuzzing).
pub fn check_bytes(name: &str, bytes: &[u8]) -> Report {
    match Log::from_bytes(name, bytes) {
        Ok(log) => check_log(&log, &Options { threads: 1 }, &AtomicU64::new(0)),
        Err(e) => Report {
            bytes: bytes.len() as u64,
            ..open_failure(name, e)
        },
    }
}
