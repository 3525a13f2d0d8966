//! Saying that a test skips, where people and CI see it. Shared by the
//! workspace's test crates (included with `#[path]`).
//!
//! libtest captures what `eprintln!` prints in a passing test, so a skipped
//! test would show only `ok`. A skip is therefore written straight to the
//! process's standard error, which libtest does not capture, and appended
//! to the file named by `KMEMTRACE_SKIP_LOG` (one line: `what<TAB>test<TAB>why`)
//! for `.ci/run`, which lists the skips after the test summary and fails
//! when a real-kernel test skipped on a machine that can trace.

use std::io::Write;

/// What a skipped test lacked. `.ci/run` fails on every kind but
/// [`Missing::Machine`] and [`Missing::OptIn`] when it runs as root with tracefs mounted.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub enum Missing {
    /// Root or a mounted tracefs.
    Tracefs,
    /// A program the test drives (busybox, stress-ng, taskset).
    Tool,
    /// `../shared/data`, the real foreign captures.
    SharedData,
    /// Something only some machines have (a second CPU to take offline).
    Machine,
    /// A large input a test reads only when asked to (a Debian kernel's
    /// debug package, `KMEMTRACE_LINUX_DBG`).
    OptIn,
}

impl Missing {
    fn word(self) -> &'static str {
        match self {
            Missing::Tracefs => "tracefs",
            Missing::Tool => "tool",
            Missing::SharedData => "shared-data",
            Missing::Machine => "machine",
            Missing::OptIn => "opt-in",
        }
    }
}

/// Reports that `test` skips because `missing` is not there (`why`).
pub fn skip(test: &str, missing: Missing, why: &str) {
    let line = format!("SKIP {test}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("KMEMTRACE_SKIP_LOG") {
        log_skip(std::path::Path::new(&path), test, missing, why);
    }
}

/// Appends a skip to the log `.ci/run` reads.
pub fn log_skip(log: &std::path::Path, test: &str, missing: Missing, why: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = writeln!(f, "{}\t{test}\t{why}", missing.word());
    }
}
