//! Files the tools write that hold a capture's kernel addresses and
//! symbols (exports, reports): readable by their owner only, as the
//! recorder makes its logs, and never written through a symbolic link
//! (a link planted in a shared directory would send them elsewhere).

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Creates (or truncates) `path` for writing, mode 0600 when new; refuses
/// a symbolic link. An existing file keeps its mode.
pub fn create(path: &Path) -> io::Result<File> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link: refusing to write through it",
        ));
    }
    File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Creates directory `path` and its parents, owner-only (0700).
pub fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}
