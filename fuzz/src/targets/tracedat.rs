//! trace.dat import (versions 6 and 7, either byte order, compressed or
//! not) over arbitrary bytes: no panic, no hang, bounded memory; what an
//! import that succeeds writes is a log that opens.

use super::scratch;
use kmemtrace_format::Compression;
use kmemtrace_import::{import, Log};

/// One run.
pub fn run(data: &[u8]) {
    let mut out = Vec::new();
    if import(scratch(data), &mut out, Compression::None, String::new()).is_ok() {
        Log::from_bytes("imported", &out).expect("an imported log opens");
    }
}
