//! # kmemtrace-cli
//!
//! What every kmemtrace program shares on its command line, kept in one
//! place so that the programs agree:
//!
//! - [`exit`]: the one table of exit codes, and the `Exit status` help
//!   text each program prints from it;
//! - [`args`]: values of arguments as people write them (durations);
//! - [`colour`]: whether to colour (a terminal, `NO_COLOR`), and how;
//! - [`output`]: how an output file or directory is created (one policy:
//!   an existing one is kept as `NAME.old`, never through a symbolic link,
//!   owner-only, the parent directory must exist);
//! - [`markup`]: escaping text for HTML and XML;
//! - [`progress`]: the progress line shown on a terminal;
//! - [`generate`]: man pages and shell completions from the same clap
//!   definitions as `--help`;
//! - [`long_version`]: `--version` with the file formats a program reads
//!   and writes;
//! - [`VERSION`]: the version with the commit it was built from.
#![forbid(unsafe_code)]

pub mod args;
pub mod colour;
pub mod exit;
pub mod generate;
pub mod markup;
pub mod output;
pub mod progress;
pub mod table;

/// `0.1.0 (commit 0123456789ab)`, or the version alone where the sources
/// were built outside a git checkout. For clap's `version`.
pub const VERSION: &str = if env!("KMEMTRACE_COMMIT").is_empty() {
    env!("CARGO_PKG_VERSION")
} else {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (commit ",
        env!("KMEMTRACE_COMMIT"),
        ")"
    )
};

/// `--version`'s long form: [`VERSION`], then a line for the formats the
/// program reads and one for those it writes (each where there are any),
/// e.g. `reads: kmemtrace log 1.0-1.3, trace.dat 6-7`. Made once per run
/// (clap wants it for as long as the program runs).
pub fn long_version(reads: &[String], writes: &[String]) -> &'static str {
    let mut s = String::from(VERSION);
    for (verb, list) in [("reads", reads), ("writes", writes)] {
        if !list.is_empty() {
            s.push_str(&format!("\n{verb}: {}", list.join(", ")));
        }
    }
    Box::leak(s.into_boxed_str())
}
