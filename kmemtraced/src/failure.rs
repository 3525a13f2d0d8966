//! Why kmemtraced stops with a non-zero exit status: one line and a code.

use std::fmt;

/// Exit codes, as documented in `--help`.
pub const EXIT_RUNTIME: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_TRACEFS: u8 = 3;

#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    pub fn runtime(msg: impl Into<String>) -> Self {
        Failure {
            code: EXIT_RUNTIME,
            msg: msg.into(),
        }
    }
    pub fn usage(msg: impl Into<String>) -> Self {
        Failure {
            code: EXIT_USAGE,
            msg: msg.into(),
        }
    }
    pub fn tracefs(msg: impl Into<String>) -> Self {
        Failure {
            code: EXIT_TRACEFS,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

pub type Result<T> = std::result::Result<T, Failure>;
