//! kmemtrace-export: a log written in other tools' formats. One module a
//! format; each reads the log through `kmemtrace-format` (or, for a
//! trace.dat given as input, through `kmemtrace-import`'s `open_log`).
#![forbid(unsafe_code)]

pub mod parquet;
pub mod perfetto;
mod proto;
mod repage;
pub mod tracedat;

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// An output file, created readable by its owner only (0600), as the
/// recorder creates its log: exports keep the log's kernel addresses and
/// symbol table, which tell the kernel's layout. An existing file is
/// truncated and keeps its mode.
pub fn private_file(path: &Path) -> io::Result<File> {
    File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// An output directory (and its parents), created owner-only (0700).
pub fn private_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}
