//! Shared by the library's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// `../shared/data` beside the repository (the real foreign-kernel
/// captures), or `None` after printing why `test` skips.
pub fn data_dir(test: &str) -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if d.join("armhf").is_dir() && d.join("s390x").is_dir() {
        Some(d)
    } else {
        eprintln!(
            "SKIP {test}: capture directory {} not found (expected ../shared/data beside the repository)",
            d.display()
        );
        None
    }
}

/// `O_NONBLOCK` of this platform, for opening `trace_pipe_raw`.
pub const O_NONBLOCK: i32 = nix::libc::O_NONBLOCK;
