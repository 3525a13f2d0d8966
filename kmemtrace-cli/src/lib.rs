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
//! - [`VERSION`]: the version with the commit it was built from.
#![forbid(unsafe_code)]

pub mod args;
pub mod colour;
pub mod exit;
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
