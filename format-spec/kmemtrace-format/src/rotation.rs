//! The names of a rotated capture's files (FORMAT.md §13): the output
//! name given to the recorder with the file's index before its extension,
//! `trace.kmt` → `trace.000000.kmt`, `trace.000001.kmt`, ... (six digits
//! at least, so that a shell's sorted glob lists them in order).

use std::path::{Path, PathBuf};

/// The digits an index is written with, at least.
const DIGITS: usize = 6;

/// The path of file `index` of the capture recorded as `output`.
pub fn file_path(output: &Path, index: u32) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let numbered = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{index:0DIGITS$}.{ext}"),
        _ => format!("{name}.{index:0DIGITS$}"),
    };
    output.with_file_name(numbered)
}

/// The index of `path` if it is a file of the capture recorded as
/// `output` (named by [`file_path`]).
pub fn index_of(output: &Path, path: &Path) -> Option<u32> {
    if output.parent() != path.parent() {
        return None;
    }
    let name = output.file_name()?.to_str()?;
    let candidate = path.file_name()?.to_str()?;
    let digits = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => candidate
            .strip_prefix(stem)?
            .strip_prefix('.')?
            .strip_suffix(ext)?
            .strip_suffix('.')?,
        _ => candidate.strip_prefix(name)?.strip_prefix('.')?,
    };
    if digits.len() < DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of the capture recorded as `output` that exist now, in
/// index order (empty if `output`'s directory cannot be read).
pub fn files_of(output: &Path) -> Vec<(u32, PathBuf)> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<(u32, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let p = output.with_file_name(e.file_name());
            Some((index_of(output, &p)?, p))
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indexes() {
        let o = Path::new("/data/trace.kmt");
        assert_eq!(file_path(o, 3), Path::new("/data/trace.000003.kmt"));
        assert_eq!(file_path(o, 1234567), Path::new("/data/trace.1234567.kmt"));
        assert_eq!(file_path(Path::new("cap"), 0), Path::new("cap.000000"));
        assert_eq!(
            file_path(Path::new(".hidden"), 1),
            Path::new(".hidden.000001")
        );
        for i in [0, 3, 999_999, 1_234_567] {
            assert_eq!(index_of(o, &file_path(o, i)), Some(i));
            let bare = Path::new("cap");
            assert_eq!(index_of(bare, &file_path(bare, i)), Some(i));
        }
        assert_eq!(index_of(o, Path::new("/data/trace.kmt")), None);
        assert_eq!(index_of(o, Path::new("/data/trace.12.kmt")), None);
        assert_eq!(index_of(o, Path::new("/data/trace.00000x.kmt")), None);
        assert_eq!(index_of(o, Path::new("/other/trace.000001.kmt")), None);
        assert_eq!(index_of(o, Path::new("/data/trace.000001.kmt.tmp")), None);
    }

    #[test]
    fn the_files_that_exist_in_index_order() {
        let d = tempfile::tempdir().unwrap();
        let o = d.path().join("t.kmt");
        for i in [10, 2, 0] {
            std::fs::write(file_path(&o, i), b"").unwrap();
        }
        std::fs::write(d.path().join("t.kmt"), b"").unwrap();
        std::fs::write(d.path().join("u.000001.kmt"), b"").unwrap();
        let got: Vec<u32> = files_of(&o).into_iter().map(|(i, _)| i).collect();
        assert_eq!(got, [0, 2, 10]);
    }
}
