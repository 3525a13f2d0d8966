//! Reading a dump: a directory laid out like a tracefs instance, or a tar
//! (optionally gzip'd) of one, possibly under a leading directory.
//!
//! Everything but the ring-buffer data is small and read into memory up
//! front; each CPU's `trace_pipe_raw` is only measured and its head kept
//! (for the byte-order check), and is streamed later, once the log's
//! metadata is written: from the file for a directory, in a second pass
//! over the archive for a tar.

use crate::ustar::{self, Archive, Kind, TarError};
use crate::ImportError;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

/// Bytes of each `trace_pipe_raw` kept for the byte-order check.
pub const HEAD_BYTES: usize = 256 << 10;
/// Largest metadata file read (kallsyms of a big kernel with modules is
/// tens of MiB; a META block holds at most 64 MiB).
pub const MAX_META_FILE: u64 = 48 << 20;
/// Metadata bytes read from one dump at most.
const MAX_META_TOTAL: u64 = 1 << 30;

/// A dump holding more than [`MAX_META_TOTAL`] bytes of files to keep.
fn too_much(input: &Path) -> ImportError {
    bad(format!(
        "{}: more than {MAX_META_TOTAL} bytes of files besides the ring-buffer data: not a tracefs dump",
        input.display()
    ))
}

/// `trace_pipe_raw` files a dump may have (whose heads it holds): one a
/// CPU, as many as Linux's largest machine has, wherever in the archive.
const MAX_RAW_FILES: usize = kmemtrace_kernel::LINUX_MAX_NR_CPUS as usize;

/// A member's name as a warning quotes it: at most 256 bytes of it (tar
/// names may be 1 MiB, and a warning is kept for each such member).
fn shortened(path: &str) -> String {
    const MAX: usize = 256;
    if path.len() <= MAX {
        return path.to_string();
    }
    let mut cut = MAX;
    while !path.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes)", &path[..cut], path.len())
}

/// A dump with more than [`MAX_RAW_FILES`] data files.
fn too_many_raw(input: &Path) -> ImportError {
    bad(format!(
        "{}: more than {MAX_RAW_FILES} trace_pipe_raw files (one a CPU): not a tracefs dump",
        input.display()
    ))
}

/// One CPU's ring-buffer data.
#[derive(Debug, Clone)]
pub struct RawFile {
    pub len: u64,
    /// The first [`HEAD_BYTES`] (or fewer).
    pub head: Vec<u8>,
    /// Where it is: a file, or the member's offset in the archive.
    loc: RawLoc,
}

#[derive(Debug, Clone)]
enum RawLoc {
    File(PathBuf),
    Member(u64),
    /// A CPU's flyrecord data in a trace.dat.
    TraceDat(crate::tracedat::CpuData),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    Dir,
    Tar,
    TarGz,
    /// trace-cmd's trace.dat, of this version.
    TraceDat(u32),
}

/// A dump, read.
#[derive(Debug)]
pub struct Dump {
    pub input: PathBuf,
    pub container: Container,
    /// The directory (or member prefix) holding `events/header_page`, when
    /// not the top: shown in notes.
    pub root: String,
    files: BTreeMap<String, Vec<u8>>,
    /// Where in the input a file's content is, where that is one place
    /// (a trace.dat's metadata blocks and options).
    at: BTreeMap<String, u64>,
    pub raw: BTreeMap<u32, RawFile>,
    /// Things left out while reading (too large, unsafe paths).
    pub warnings: Vec<String>,
    /// What the input says of itself (NOTE lines, not warnings).
    pub notes: Vec<String>,
}

fn bad(msg: impl Into<String>) -> ImportError {
    ImportError::Dump(msg.into())
}

fn io_err(what: &Path, e: io::Error) -> ImportError {
    ImportError::Dump(format!("reading {}: {e}", what.display()))
}

fn tar_err(input: &Path, e: TarError) -> ImportError {
    ImportError::Dump(format!("{}: {e}", input.display()))
}

/// `per_cpu/cpuN/trace_pipe_raw` → N.
fn raw_cpu(rel: &str) -> Option<u32> {
    let rest = rel.strip_prefix("per_cpu/cpu")?;
    let (n, file) = rest.split_once('/')?;
    if file != "trace_pipe_raw" {
        return None;
    }
    cpu_number(n)
}

/// A CPU's number as tracefs writes it in `cpuN`: decimal digits without
/// a sign or a leading zero. Any other spelling (`cpu01`, `cpu+1`) would
/// be a second name for one CPU, whose files (`per_cpu/cpuN/stats`) are
/// looked up by the one spelling.
pub(crate) fn cpu_number(n: &str) -> Option<u32> {
    let canonical =
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    canonical.then(|| n.parse().ok()).flatten()
}

/// Member path → normalised relative path (`./a//b` → `a/b`); `None` for
/// paths with `..`.
fn normalise(p: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

impl Dump {
    /// Opens a directory, a tar or a tar.gz.
    pub fn open(input: &Path) -> Result<Dump, ImportError> {
        let md = fs::metadata(input).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => bad(format!("{} does not exist", input.display())),
            _ => io_err(input, e),
        })?;
        if md.is_dir() {
            return Self::open_dir(input);
        }
        let mut f = File::open(input).map_err(|e| io_err(input, e))?;
        let mut magic = [0u8; 512];
        let n = read_up_to(&mut f, &mut magic).map_err(|e| io_err(input, e))?;
        if crate::tracedat::looks_like(&magic[..n]) {
            Self::open_tracedat(input)
        } else if n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
            Self::open_tar(input, true)
        } else if ustar::looks_like_tar(&magic[..n]) {
            Self::open_tar(input, false)
        } else {
            Err(bad(format!(
                "{} is neither a directory, a tar archive (plain or gzip'd) nor a trace.dat",
                input.display()
            )))
        }
    }

    /// A trace.dat: its metadata as the files of a dump, its CPU data
    /// where the file has it.
    fn open_tracedat(input: &Path) -> Result<Dump, ImportError> {
        let t = crate::tracedat::open(input)?;
        let mut raw = BTreeMap::new();
        for (cpu, data) in t.cpus {
            let mut head = Vec::new();
            // The head is what reads back of it: data that does not (a
            // damaged chunk, a file cut short) is found again where it is,
            // streaming it for an import fails there, a log read in place
            // names it.
            let _ = crate::tracedat::stream_cpu(input, &data, |chunk| {
                let room = HEAD_BYTES - head.len();
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if head.len() < HEAD_BYTES {
                    Ok(())
                } else {
                    Err(io::Error::new(io::ErrorKind::Interrupted, "head read"))
                }
            });
            let len = data.bytes();
            raw.insert(
                cpu,
                RawFile {
                    len,
                    head,
                    loc: RawLoc::TraceDat(data),
                },
            );
        }
        Ok(Dump {
            input: input.to_path_buf(),
            container: Container::TraceDat(t.version),
            root: String::new(),
            files: t.files,
            at: t.at,
            raw,
            warnings: Vec::new(),
            notes: t.notes,
        })
    }

    fn open_dir(input: &Path) -> Result<Dump, ImportError> {
        let has_hp = |d: &Path| d.join("events/header_page").is_file();
        let (root_dir, root) = if has_hp(input) {
            (input.to_path_buf(), String::new())
        } else {
            let mut found = Vec::new();
            if let Ok(rd) = fs::read_dir(input) {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.is_dir() && has_hp(&p) {
                        found.push(p);
                    }
                }
            }
            match found.len() {
                1 => {
                    let p = found.pop().unwrap();
                    let name = p
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    (p, name)
                }
                0 => {
                    return Err(bad(format!(
                        "{} is not a tracefs dump: no events/header_page in it (or in a directory inside it)",
                        input.display()
                    )))
                }
                _ => {
                    return Err(bad(format!(
                        "{} holds several dumps ({} directories with events/header_page): import one of them",
                        input.display(),
                        found.len()
                    )))
                }
            }
        };
        let mut d = Dump {
            input: input.to_path_buf(),
            container: Container::Dir,
            root,
            files: BTreeMap::new(),
            at: BTreeMap::new(),
            raw: BTreeMap::new(),
            warnings: Vec::new(),
            notes: Vec::new(),
        };
        let mut total = 0u64;
        // Top-level files.
        for (rel, path) in list_files(&root_dir, "") {
            d.load_file(&rel, &path, &mut total)?;
        }
        // events/<system>/<event>/{format,id}, events/header_*.
        for (rel, path) in list_files(&root_dir.join("events"), "events/") {
            d.load_file(&rel, &path, &mut total)?;
        }
        for (sys, sys_path) in list_dirs(&root_dir.join("events")) {
            for (ev, ev_path) in list_dirs(&sys_path) {
                for f in ["format", "id"] {
                    let p = ev_path.join(f);
                    if p.is_file() {
                        d.load_file(&format!("events/{sys}/{ev}/{f}"), &p, &mut total)?;
                    }
                }
            }
        }
        // per_cpu/cpuN/*.
        for (cpu, cpu_path) in list_dirs(&root_dir.join("per_cpu")) {
            for (rel, path) in list_files(&cpu_path, &format!("per_cpu/{cpu}/")) {
                if let Some(n) = raw_cpu(&rel) {
                    let len = fs::metadata(&path).map_err(|e| io_err(&path, e))?.len();
                    let mut head = vec![0u8; (len as usize).min(HEAD_BYTES)];
                    let mut f = File::open(&path).map_err(|e| io_err(&path, e))?;
                    let got = read_up_to(&mut f, &mut head).map_err(|e| io_err(&path, e))?;
                    head.truncate(got);

                    d.raw.insert(
                        n,
                        RawFile {
                            len,
                            head,
                            loc: RawLoc::File(path),
                        },
                    );
                    if d.raw.len() > MAX_RAW_FILES {
                        return Err(too_many_raw(&d.input));
                    }
                } else {
                    d.load_file(&rel, &path, &mut total)?;
                }
            }
        }
        Ok(d)
    }

    fn load_file(&mut self, rel: &str, path: &Path, total: &mut u64) -> Result<(), ImportError> {
        let len = fs::metadata(path).map_err(|e| io_err(path, e))?.len();
        if len > MAX_META_FILE {
            self.warnings.push(format!(
                "{rel} ({len} bytes) is larger than {MAX_META_FILE} bytes and was left out"
            ));
            return Ok(());
        }
        *total += len;
        if *total > MAX_META_TOTAL {
            return Err(too_much(&self.input));
        }
        let v = fs::read(path).map_err(|e| io_err(path, e))?;
        self.files.insert(rel.to_string(), v);
        Ok(())
    }

    fn reader(input: &Path, gz: bool) -> Result<Box<dyn Read>, ImportError> {
        let f = File::open(input).map_err(|e| io_err(input, e))?;
        let r = BufReader::with_capacity(1 << 16, f);
        Ok(if gz {
            Box::new(flate2::read::MultiGzDecoder::new(r))
        } else {
            Box::new(r)
        })
    }

    fn open_tar(input: &Path, gz: bool) -> Result<Dump, ImportError> {
        let mut ar = Archive::new(Self::reader(input, gz)?);
        let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        // Full path → (len, head, member offset).
        let mut raws: BTreeMap<String, (u64, Vec<u8>, u64)> = BTreeMap::new();
        let mut warnings = Vec::new();
        let mut total = 0u64;
        while let Some(e) = ar.next_entry().map_err(|e| tar_err(input, e))? {
            if e.kind != Kind::File {
                continue;
            }
            // Names count as kept bytes too: an archive of many members
            // with long names (up to 1 MiB each) and no data is no dump.
            total += e.path.len() as u64;
            if total > MAX_META_TOTAL {
                return Err(too_much(input));
            }
            let Some(path) = normalise(&e.path) else {
                warnings.push(format!(
                    "member {} (a path with ..) was ignored",
                    shortened(&e.path)
                ));
                continue;
            };
            if path == "trace_pipe_raw" || path.ends_with("/trace_pipe_raw") {
                let mut head = Vec::new();
                ar.read_data(&e, HEAD_BYTES as u64, &mut head)
                    .map_err(|e| tar_err(input, e))?;
                raws.insert(path, (e.size, head, e.offset));
                if raws.len() > MAX_RAW_FILES {
                    return Err(too_many_raw(input));
                }
                continue;
            }
            if e.size > MAX_META_FILE {
                warnings.push(format!(
                    "{} ({} bytes) is larger than {MAX_META_FILE} bytes and was left out",
                    shortened(&path),
                    e.size
                ));
                continue;
            }
            total += e.size;
            if total > MAX_META_TOTAL {
                return Err(too_much(input));
            }
            let mut v = Vec::with_capacity(e.size as usize);
            ar.read_data(&e, e.size, &mut v)
                .map_err(|e| tar_err(input, e))?;
            files.insert(path, v);
        }
        // The dump's root: where events/header_page is.
        let mut roots: Vec<String> = files
            .keys()
            .filter_map(|k| {
                let r = k.strip_suffix("events/header_page")?;
                (r.is_empty() || r.ends_with('/')).then(|| r.to_string())
            })
            .collect();
        roots.dedup();
        let prefix = match roots.len() {
            1 => roots.pop().unwrap(),
            0 => {
                return Err(bad(format!(
                    "{} is not a tracefs dump: the archive has no events/header_page",
                    input.display()
                )))
            }
            n => {
                return Err(bad(format!(
                    "{} holds {n} dumps (events/header_page under {}): unpack it and import one directory",
                    input.display(),
                    roots.join(", ")
                )))
            }
        };
        let strip = |k: &str| k.strip_prefix(prefix.as_str()).map(str::to_string);
        let files = files
            .into_iter()
            .filter_map(|(k, v)| Some((strip(&k)?, v)))
            .collect();
        let mut raw = BTreeMap::new();
        for (k, (len, head, off)) in raws {
            if let Some(cpu) = strip(&k).as_deref().and_then(raw_cpu) {
                raw.insert(
                    cpu,
                    RawFile {
                        len,
                        head,
                        loc: RawLoc::Member(off),
                    },
                );
            }
        }
        Ok(Dump {
            input: input.to_path_buf(),
            container: if gz { Container::TarGz } else { Container::Tar },
            root: prefix.trim_end_matches('/').to_string(),
            files,
            at: BTreeMap::new(),
            raw,
            warnings,
            notes: Vec::new(),
        })
    }

    /// A file's bytes: `name`, else `name.txt` (the layout of the shared
    /// foreign-kernel captures).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.files
            .get(name)
            .or_else(|| self.files.get(&format!("{name}.txt")))
            .map(|v| v.as_slice())
    }

    /// Where `name` (or `name.txt`) is in the input: 0 where it is not
    /// one place of it.
    pub fn offset_of(&self, name: &str) -> u64 {
        self.which(name)
            .and_then(|n| self.at.get(&n).copied())
            .unwrap_or(0)
    }

    /// A trace.dat's CPUs and where each one's data is in it.
    pub fn tracedat_cpus(&self) -> impl Iterator<Item = (u32, &crate::tracedat::CpuData)> {
        self.raw.iter().filter_map(|(&cpu, r)| match &r.loc {
            RawLoc::TraceDat(data) => Some((cpu, data)),
            _ => None,
        })
    }

    /// A directory dump's `trace_pipe_raw` files: CPU, path, and the bytes
    /// of it read (its length when the dump was opened).
    pub fn dir_raw_files(&self) -> impl Iterator<Item = (u32, &Path, u64)> {
        self.raw.iter().filter_map(|(&cpu, r)| match &r.loc {
            RawLoc::File(p) => Some((cpu, p.as_path(), r.len)),
            _ => None,
        })
    }

    /// Which of `name` / `name.txt` is present.
    pub fn which(&self, name: &str) -> Option<String> {
        if self.files.contains_key(name) {
            Some(name.to_string())
        } else {
            let t = format!("{name}.txt");
            self.files.contains_key(&t).then_some(t)
        }
    }

    /// A file as trimmed text; `None` if absent or empty.
    pub fn text(&self, name: &str) -> Option<String> {
        let s = String::from_utf8_lossy(self.get(name)?).trim().to_string();
        (!s.is_empty()).then_some(s)
    }

    /// Every metadata file, by relative path.
    pub fn files(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.files.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Feeds each CPU's `trace_pipe_raw` to `sink` in chunks, one CPU after
    /// another, stopping after `raw[cpu].len` bytes.
    pub fn stream_raw(
        &self,
        mut sink: impl FnMut(u32, &[u8]) -> io::Result<()>,
    ) -> Result<(), ImportError> {
        match self.container {
            Container::TraceDat(_) => {
                for (&cpu, r) in &self.raw {
                    let RawLoc::TraceDat(data) = &r.loc else {
                        continue;
                    };
                    crate::tracedat::stream_cpu(&self.input, data, |chunk| sink(cpu, chunk))
                        .map_err(|e| bad(format!("{}: CPU {cpu}: {e}", self.input.display())))?;
                }
                Ok(())
            }
            Container::Dir => {
                let mut buf = vec![0u8; 1 << 20];
                for (&cpu, r) in &self.raw {
                    let RawLoc::File(p) = &r.loc else { continue };
                    let mut f = File::open(p).map_err(|e| io_err(p, e))?;
                    let mut left = r.len;
                    while left > 0 {
                        let k = left.min(buf.len() as u64) as usize;
                        let n = read_up_to(&mut f, &mut buf[..k]).map_err(|e| io_err(p, e))?;
                        if n == 0 {
                            return Err(bad(format!("{} shrank while being read", p.display())));
                        }
                        sink(cpu, &buf[..n]).map_err(ImportError::Io)?;
                        left -= n as u64;
                    }
                }
                Ok(())
            }
            Container::Tar | Container::TarGz => {
                let by_offset: BTreeMap<u64, (u32, u64)> = self
                    .raw
                    .iter()
                    .filter_map(|(&cpu, r)| match r.loc {
                        RawLoc::Member(off) => Some((off, (cpu, r.len))),
                        _ => None,
                    })
                    .collect();
                let mut ar = Archive::new(Self::reader(
                    &self.input,
                    self.container == Container::TarGz,
                )?);
                let mut seen = 0;
                while seen < by_offset.len() {
                    let Some(e) = ar.next_entry().map_err(|e| tar_err(&self.input, e))? else {
                        return Err(bad(format!(
                            "{}: the archive changed between two reads",
                            self.input.display()
                        )));
                    };
                    let Some(&(cpu, len)) = by_offset.get(&e.offset) else {
                        continue;
                    };
                    seen += 1;
                    let mut sink_err = None;
                    let r = ar.read_data_with(&e, len, |chunk| {
                        sink(cpu, chunk).inspect_err(|e| {
                            sink_err = Some(io::Error::new(e.kind(), e.to_string()));
                        })
                    });
                    if let Some(e) = sink_err {
                        return Err(ImportError::Io(e));
                    }
                    r.map_err(|e| tar_err(&self.input, e))?;
                }
                Ok(())
            }
        }
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Regular files (symlinks followed) directly in `dir`, as
/// (`prefix` + name, path), sorted.
fn list_files(dir: &Path, prefix: &str) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_file())
                .filter_map(|e| Some((format!("{prefix}{}", e.file_name().to_str()?), e.path())))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Directories directly in `dir`, as (name, path), sorted.
fn list_dirs(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<(String, PathBuf)> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_testkit::tar::files as tar;

    #[test]
    fn paths() {
        assert_eq!(raw_cpu("per_cpu/cpu12/trace_pipe_raw"), Some(12));
        assert_eq!(raw_cpu("per_cpu/cpu/trace_pipe_raw"), None);
        assert_eq!(raw_cpu("per_cpu/cpu1/stats"), None);
        assert_eq!(raw_cpu("x/per_cpu/cpu1/trace_pipe_raw"), None);
        assert_eq!(raw_cpu("per_cpu/cpu0/trace_pipe_raw"), Some(0));
        for alias in ["01", "+1", "00", "1 ", "4294967296"] {
            let path = format!("per_cpu/cpu{alias}/trace_pipe_raw");
            assert_eq!(raw_cpu(&path), None, "{alias}");
        }
        assert_eq!(normalise("./a//b/").as_deref(), Some("a/b"));
        assert_eq!(normalise("/abs/x").as_deref(), Some("abs/x"));
        assert_eq!(normalise("a/../b"), None);
    }

    #[test]
    fn a_long_name_is_quoted_short_in_a_warning() {
        let dots = format!("../{}", "é".repeat(200_000));
        let t = tar(&[
            (dots.as_str(), &b"x"[..]),
            ("events/header_page", b"hp"),
            ("per_cpu/cpu0/trace_pipe_raw", b""),
        ]);
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("a.tar"), &t).unwrap();
        let d = Dump::open(&tmp.path().join("a.tar")).unwrap();
        let w = &d.warnings[0];
        assert!(w.contains("(400003 bytes)") && w.len() < 400, "{w}");
        assert_eq!(shortened("per_cpu"), "per_cpu");
    }

    fn write(dir: &Path, files: &[(&str, &[u8])]) {
        for (n, d) in files {
            let p = dir.join(n);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, d).unwrap();
        }
    }

    #[test]
    fn directory_tar_and_gz_read_the_same() {
        let raw0: Vec<u8> = (0..10000u32).map(|i| i as u8).collect();
        let files: Vec<(&str, &[u8])> = vec![
            ("events/header_page", b"hp"),
            ("events/kmem/kfree/format", b"fmt"),
            ("events/kmem/kfree/id", b"7\n"),
            ("per_cpu/cpu0/trace_pipe_raw", &raw0),
            ("per_cpu/cpu0/stats", b"entries: 0\n"),
            ("per_cpu/cpu1/trace_pipe_raw", b""),
            ("uname.txt", b"Linux x 1 #1 s390x GNU/Linux\n"),
        ];
        let tmp = tempfile::tempdir().unwrap();
        // A directory, and the same under a top directory.
        write(&tmp.path().join("d"), &files);
        write(&tmp.path().join("top/inner"), &files);
        // Tars, with ./ and with a prefix.
        let dotted: Vec<(String, &[u8])> =
            files.iter().map(|(n, d)| (format!("./{n}"), *d)).collect();
        let dotted: Vec<(&str, &[u8])> = dotted.iter().map(|(n, d)| (n.as_str(), *d)).collect();
        let t = tar(&dotted);
        fs::write(tmp.path().join("a.tar"), &t).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &t).unwrap();
        fs::write(tmp.path().join("a.tar.gz"), gz.finish().unwrap()).unwrap();
        let pre: Vec<(String, &[u8])> = files
            .iter()
            .map(|(n, d)| (format!("dump/{n}"), *d))
            .collect();
        let pre: Vec<(&str, &[u8])> = pre.iter().map(|(n, d)| (n.as_str(), *d)).collect();
        fs::write(tmp.path().join("b.tar"), tar(&pre)).unwrap();

        for name in ["d", "top", "a.tar", "a.tar.gz", "b.tar"] {
            let d = Dump::open(&tmp.path().join(name)).unwrap();
            assert_eq!(d.get("events/header_page"), Some(&b"hp"[..]), "{name}");
            assert_eq!(d.text("events/kmem/kfree/id").as_deref(), Some("7"));
            assert_eq!(
                d.text("uname").as_deref(),
                Some("Linux x 1 #1 s390x GNU/Linux")
            );
            assert_eq!(d.which("uname").as_deref(), Some("uname.txt"));
            assert_eq!(d.raw.len(), 2, "{name}");
            assert_eq!(d.raw[&0].len, 10000);
            assert_eq!(d.raw[&0].head, raw0);
            let mut got: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
            d.stream_raw(|cpu, chunk| {
                got.entry(cpu).or_default().extend_from_slice(chunk);
                Ok(())
            })
            .unwrap();
            assert_eq!(got.get(&0), Some(&raw0), "{name}");
            assert_eq!(got.get(&1).map(Vec::len).unwrap_or(0), 0);
        }
    }

    #[test]
    fn not_a_dump() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), &[("x/per_cpu/cpu0/trace_pipe_raw", b"")]);
        let e = Dump::open(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("no events/header_page"), "{e}");
        fs::write(tmp.path().join("f"), b"hello").unwrap();
        let e = Dump::open(&tmp.path().join("f")).unwrap_err().to_string();
        assert!(e.contains("neither a directory, a tar archive"), "{e}");
        let e = Dump::open(&tmp.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        fs::write(tmp.path().join("t.tar"), tar(&[("a/b", b"c")])).unwrap();
        let e = Dump::open(&tmp.path().join("t.tar"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no events/header_page"), "{e}");
        let two = tar(&[
            ("a/events/header_page", b"1"),
            ("b/events/header_page", b"2"),
        ]);
        fs::write(tmp.path().join("two.tar"), two).unwrap();
        let e = Dump::open(&tmp.path().join("two.tar"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds 2 dumps"), "{e}");
        // A tar cut in the middle of a member.
        let t = tar(&[
            ("events/header_page", b"1"),
            ("per_cpu/cpu0/trace_pipe_raw", &[0u8; 5000]),
        ]);
        fs::write(tmp.path().join("cut.tar"), &t[..3000]).unwrap();
        let e = Dump::open(&tmp.path().join("cut.tar"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ends inside member"), "{e}");
        // More data files than a machine has CPUs, under other prefixes
        // (each would keep a head).
        let names: Vec<String> = (0..=MAX_RAW_FILES)
            .map(|i| format!("d{i}/per_cpu/cpu0/trace_pipe_raw"))
            .collect();
        let members: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        fs::write(tmp.path().join("many.tar"), tar(&members)).unwrap();
        let e = Dump::open(&tmp.path().join("many.tar"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 8192 trace_pipe_raw files"), "{e}");
        let t = tar(&members[..MAX_RAW_FILES]);
        fs::write(tmp.path().join("enough.tar"), t).unwrap();
        let e = Dump::open(&tmp.path().join("enough.tar"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no events/header_page"), "as many as CPUs: {e}");
    }
}
