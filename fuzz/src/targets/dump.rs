//! The import of a capture dump (`kmemtrace-capture.sh`'s tar or tar.gz of
//! tracefs files), as a tar built from a list of entries
//! (`kmemtrace_testkit::fuzz::tar_of`: names and data reach the importer
//! past the tar checksums) or, where the first byte is 0xff, the raw bytes
//! as the archive. No panic, no hang, bounded memory; what an import that
//! succeeds writes is a log that opens.

use super::scratch;
use kmemtrace_format::Compression;
use kmemtrace_import::{import, Log};
use kmemtrace_testkit::fuzz::tar_of;

/// One run.
pub fn run(data: &[u8]) {
    let archive = match data.split_first() {
        Some((0xff, raw)) => raw.to_vec(),
        _ => tar_of(data),
    };
    let mut out = Vec::new();
    if import(
        scratch(&archive),
        &mut out,
        Compression::None,
        String::new(),
    )
    .is_ok()
    {
        Log::from_bytes("imported", &out).expect("an imported log opens");
    }
}
