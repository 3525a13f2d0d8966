//! One module per target, each with its `run`: the fuzz target
//! (`fuzz_targets/NAME.rs`) calls it, and the workspace's
//! `tests/tests/fuzz_regressions.rs` replays through it the inputs that
//! once failed (`fuzz/regressions/NAME/`), on the stable compiler.

pub mod check;
pub mod diff;
pub mod dump;
pub mod event_format;
pub mod kpack;
pub mod log_reader;
pub mod metadata;
pub mod report;
pub mod subbuf;
pub mod tracedat;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A path that reads as `data`, for the readers that take a path
/// (trace.dat, capture dumps, report documents). The file lives in
/// `/dev/shm` where there is one (no disk I/O per run) and is unlinked at
/// once: it is reached through `/proc/self/fd`, so a campaign that ends by
/// `exit` or by a crash leaves nothing behind.
pub fn scratch(data: &[u8]) -> &'static Path {
    static FILE: OnceLock<(File, PathBuf)> = OnceLock::new();
    let (f, path) = FILE.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let name = dir.join(format!("kmemtrace-fuzz-{}", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&name)
            .expect("a scratch file");
        std::fs::remove_file(&name).expect("the scratch file unlinked");
        let path = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
        (f, path)
    });
    f.set_len(0).expect("the scratch file truncated");
    f.write_all_at(data, 0).expect("the scratch file written");
    path
}
