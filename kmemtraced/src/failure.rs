//! Why kmemtraced stops with a non-zero exit status: one line and a code
//! from the one table of every kmemtrace program (`kmemtrace_cli::exit`).

use kmemtrace_cli::exit;
use std::fmt;

#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    fn with(code: exit::Code, msg: impl Into<String>) -> Self {
        Failure {
            code: code.code,
            msg: msg.into(),
        }
    }
    /// The recording failed while it ran (a thread, a system call).
    pub fn runtime(msg: impl Into<String>) -> Self {
        Self::with(exit::FAILED, msg)
    }
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::with(exit::USAGE, msg)
    }
    /// tracefs (the recorder's input) unavailable or not permitted; a dump
    /// or trace.dat that cannot be imported.
    pub fn input(msg: impl Into<String>) -> Self {
        Self::with(exit::INPUT, msg)
    }
    /// The log could not be created or written.
    pub fn output(msg: impl Into<String>) -> Self {
        Self::with(exit::OUTPUT, msg)
    }
}

impl From<kmemtrace_cli::output::Refused> for Failure {
    fn from(r: kmemtrace_cli::output::Refused) -> Self {
        Failure {
            code: r.code.code,
            msg: r.msg,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

pub type Result<T> = std::result::Result<T, Failure>;
