//! Cuts the seed corpora of the fuzz targets (`fuzz/`) from the real
//! captures in the repository (and from `../shared/data`, where present):
//!
//! ```text
//! fuzz-seeds REPO_ROOT OUT_DIR
//! ```
//!
//! writes `OUT_DIR/TARGET/NAME` for the targets whose inputs come from
//! logs, metadata and dumps. The trace.dat and report-document seeds come
//! from the programs themselves (`scripts/fuzz.sh` exports them).
//!
//! ```text
//! fuzz-seeds --log INPUT OUT.kmt
//! ```
//!
//! writes the log that an input of the `check` or `report` target stands
//! for (its first byte even: framed; odd: the log itself), so that a
//! finding can be looked at with the programs.

use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::{BlockType, Meta, MetaKind};
use kmemtrace_testkit::fuzz::{cut_text, entries_of_dir, frame_of_log, log_of_input, Cut};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Metadata texts are cut to this (whole lines): a run should not spend
/// its time parsing a megabyte of kallsyms.
const META_BYTES: usize = 16 << 10;

/// In the logs the log-level targets start from, metadata is cut further,
/// and only the formats of the events analysed are kept: each run parses
/// all of it, and a run should take a fraction of a millisecond.
const LOG_META_BYTES: usize = 2 << 10;
/// Real sub-buffers are cut to this size (whole records): 64 KiB ones
/// would make every run decode thousands of events.
const SUBBUF: u32 = 4096;
const SYSTEMS: &[&str] = &["kmem", "vmscan", "compaction", "oom", "ftrace", "sched"];

/// Files of a dump are cut to this (four 4 KiB sub-buffers of
/// `trace_pipe_raw`).
const DUMP_FILE_BYTES: usize = 16 << 10;

fn main() -> io::Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if let [flag, input, log] = &args[..] {
        if flag.as_os_str() == "--log" {
            let bytes = log_of_input(&fs::read(input)?).unwrap_or_default();
            return fs::write(log, bytes);
        }
    }
    let [root, out] = &args[..] else {
        eprintln!("usage: fuzz-seeds REPO_ROOT OUT_DIR | fuzz-seeds --log INPUT OUT.kmt");
        std::process::exit(2);
    };
    let mut seeds = Seeds { out: out.clone() };
    for log in logs(root)? {
        seeds.log(&log)?;
    }
    for dir in dumps(root) {
        let name = dir.strip_prefix(root.join("..")).unwrap_or(&dir);
        let name = name.to_string_lossy().replace('/', "_");
        seeds.put("dump", &name, &entries_of_dir(&dir, DUMP_FILE_BYTES)?)?;
        for cpu in ["cpu0", "cpu1"] {
            if let Ok(stats) = fs::read(dir.join("per_cpu").join(cpu).join("stats")) {
                seeds.put(
                    "metadata",
                    &format!("{name}-{cpu}-stats"),
                    &[&[4], &stats[..]].concat(),
                )?;
            }
        }
    }
    Ok(())
}

struct Seeds {
    out: PathBuf,
}

impl Seeds {
    fn put(&self, target: &str, name: &str, data: &[u8]) -> io::Result<()> {
        let dir = self.out.join(target);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(name), data)
    }

    /// A log's seeds: framed (with and without kpack) for the log-level
    /// targets, its bytes as they are where small, and its metadata texts.
    fn log(&mut self, path: &Path) -> io::Result<()> {
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        let bytes = fs::read(path)?;
        for kpack in [false, true] {
            let cut = Cut {
                subbufs_per_cpu: 2,
                meta_bytes: LOG_META_BYTES,
                kpack,
                systems: SYSTEMS,
                subbuf_size: Some(SUBBUF),
            };
            let Some(framed) = frame_of_log(&bytes, cut) else {
                continue;
            };
            let seed = [&[0u8][..], &framed].concat();
            let tag = if kpack { "kpack" } else { "plain" };
            self.put("check", &format!("{name}-{tag}"), &seed)?;
            self.put("report", &format!("{name}-{tag}"), &seed)?;
        }
        if bytes.len() <= 64 << 10 {
            let raw = [&[1u8][..], &bytes].concat();
            self.put("check", &format!("{name}-raw"), &raw)?;
            self.put("report", &format!("{name}-raw"), &raw)?;
            self.put("log_reader", &name, &bytes)?;
        }
        self.metas(&name, &bytes)
    }

    fn metas(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let Ok(mut r) = LogReader::new(bytes) else {
            return Ok(());
        };
        let mut formats = 0;
        while let Ok(Some(item)) = r.next_item() {
            let Item::Block(b) = item else { continue };
            if b.header.block_type != BlockType::Meta {
                continue;
            }
            let Some(m) = b.payload().ok().and_then(|p| Meta::decode(&p).ok()) else {
                continue;
            };
            let text = cut_text(&m.content, META_BYTES);
            let which: u8 = match m.kind {
                MetaKind::Kallsyms | MetaKind::KallsymsPart => 0,
                MetaKind::SavedCmdlines => 1,
                MetaKind::HeaderPage => 2,
                MetaKind::HeaderEvent => 3,
                MetaKind::EventFormat if formats < 40 => {
                    formats += 1;
                    let file = m.name.replace('/', "_");
                    // A record's worth of bytes after the NUL: the
                    // fuzzer's mutations start from a payload of the
                    // format's size.
                    let seed = [text, &[0u8], &[0x5a; 48]].concat();
                    self.put("event_format", &format!("{name}-{file}"), &seed)?;
                    continue;
                }
                _ => continue,
            };
            let seed = [&[which][..], text].concat();
            self.put("metadata", &format!("{name}-{which}-{:?}", m.kind), &seed)?;
        }
        Ok(())
    }
}

/// The logs the seeds are cut from: the test vectors and the real
/// captures under `tests/data`.
fn logs(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for dir in [
        "format-spec/test-vectors",
        "format-spec/test-vectors/v1.0",
        "format-spec/test-vectors/v1.2",
        "tests/data",
    ] {
        let Ok(rd) = fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in rd {
            let p = e?.path();
            if p.extension().is_some_and(|x| x == "kmt") {
                v.push(p);
            }
        }
    }
    v.sort();
    Ok(v)
}

/// Capture dumps (tracefs as files) from other kernels, where the shared
/// data is at hand.
fn dumps(root: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let shared = root.join("../shared/data");
    for arch in ["armhf", "s390x"] {
        for d in ["raw", "raw_overflow"] {
            let p = shared.join(arch).join(d);
            if p.is_dir() {
                v.push(p);
            }
        }
    }
    v
}
