//! kmemtrace-export: a log written in other tools' formats. One module a
//! format; each reads the log through `kmemtrace-format` (or, for a
//! trace.dat given as input, through `kmemtrace-import`'s `open_log`).
#![forbid(unsafe_code)]

pub mod parquet;
pub mod perfetto;
pub mod progress;
mod proto;
mod repage;
pub mod tracedat;

pub use kmemtrace_format::private_file::{create as private_file, create_dir as private_dir};
