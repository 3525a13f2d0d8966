//! Builds kmemtrace logs from the real foreign-kernel captures in
//! `../shared/data/<arch>/<raw|raw_overflow>` with the library's
//! `LogWriter`, the way the recorder would have written them: ARCH (from
//! the capture's uname, endianness, page size and `header_page`), META
//! (header_page, header_event, every kmem format with its id, kallsyms,
//! saved_cmdlines), STATS at start, the CPU data exactly as drained from
//! `trace_pipe_raw`, STATS at end (the capture's `per_cpu/cpuN/stats`), END.
//!
//! One thing is synthesised, and labelled so in the log: the *start*
//! statistics. The captures were made in freshly created tracefs instances
//! whose counters start at zero, but the capture did not save them; the
//! builder writes zero counters as the start snapshot, so that the end
//! snapshot's counters are the capture's losses.
#![allow(dead_code)]

use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{Meta, MetaKind, NoteRecord, StatsPhase, StatsRecord};
use kmemtrace_format::writer::{CpuBlockEncoder, LogWriter};
use kmemtrace_kernel::{HeaderPage, RunTimeEndian};
use std::fs;
use std::path::{Path, PathBuf};

/// The zero counters written as the start snapshot (see the module doc).
pub const ZERO_STATS: &str = "entries: 0\noverrun: 0\ncommit overrun: 0\nbytes: 0\n\
oldest event ts:     0.000000\nnow ts:     0.000000\ndropped events: 0\nread events: 0\n";

/// How to build.
#[derive(Debug, Clone)]
pub struct Build {
    pub compression: Compression,
    /// Sub-buffers per CPU_DATA block.
    pub subbufs_per_block: usize,
    pub kallsyms: bool,
    /// Event names whose formats are left out.
    pub drop_formats: Vec<String>,
    /// Write the END block.
    pub end: bool,
    /// Write STATS blocks.
    pub stats: bool,
    /// (cpu, block_seq) of CPU_DATA blocks encoded but not written.
    pub skip_blocks: Vec<(u32, u64)>,
    /// Changes the raw sub-buffer bytes of a CPU before they are encoded.
    pub edit: Option<fn(u32, &mut [u8])>,
}

impl Default for Build {
    fn default() -> Self {
        Build {
            compression: Compression::Zstd(1),
            subbufs_per_block: 16,
            kallsyms: true,
            drop_formats: vec![],
            end: true,
            stats: true,
            skip_blocks: vec![],
            edit: None,
        }
    }
}

/// A capture directory: `<data>/<arch>/<raw|raw_overflow>`.
pub fn capture_dir(data: &Path, arch: &str, which: &str) -> PathBuf {
    data.join(arch).join(which)
}

fn text(dir: &Path, f: &str) -> String {
    fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{}/{f}: {e}", dir.display()))
}

/// Number of CPUs of a capture.
pub fn ncpus(dir: &Path) -> u32 {
    text(dir, "n_percpu_dirs.txt").trim().parse().unwrap()
}

/// The raw sub-buffers of one CPU.
pub fn raw_cpu(dir: &Path, cpu: u32) -> Vec<u8> {
    fs::read(dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))).unwrap()
}

/// The capture's arch tag.
pub fn arch_tag(dir: &Path) -> ArchTag {
    let hp = HeaderPage::parse(&text(dir, "events/header_page")).unwrap();
    let page: u32 = text(dir, "page_size_bytes.txt").trim().parse().unwrap();
    let order = match text(dir, "endianness.txt").trim() {
        "big" => RunTimeEndian::Big,
        _ => RunTimeEndian::Little,
    };
    let mut a = ArchTag::new(order, hp.long_size() as u8, page, hp.data_offset() as u32);
    a.page_size = Some(page);
    a.nr_cpus = Some(ncpus(dir));
    a.sysname = Some("Linux".into());
    a.release = Some(text(dir, "uname_r.txt").trim().into());
    a.machine = Some(text(dir, "uname_m.txt").trim().into());
    a.trace_clock = Some("local".into());
    a.recorder = Some("kmemtrace-tests capture builder".into());
    a.byte_order_source = Some("recording host".into());
    a
}

/// Builds a log from a capture directory.
pub fn build(dir: &Path, b: &Build) -> Vec<u8> {
    let arch = arch_tag(dir);
    let mut w = LogWriter::new(Vec::new(), &arch, b.compression).unwrap();
    w.write_note(&NoteRecord {
        warning: false,
        text: "built by the tests from a raw capture; start statistics are zero counters".into(),
    })
    .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::HeaderPage,
        text(dir, "events/header_page"),
    ))
    .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::HeaderEvent,
        text(dir, "events/header_event"),
    ))
    .unwrap();
    let mut events: Vec<_> = fs::read_dir(dir.join("events/kmem"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    events.sort();
    for ev in events {
        if b.drop_formats.contains(&ev) {
            continue;
        }
        let id: u32 = text(dir, &format!("events/kmem/{ev}/id"))
            .trim()
            .parse()
            .unwrap();
        w.write_meta(&Meta::event_format(
            "kmem",
            &ev,
            id,
            text(dir, &format!("events/kmem/{ev}/format")),
        ))
        .unwrap();
    }
    if b.kallsyms {
        w.write_meta(&Meta::new(
            MetaKind::Kallsyms,
            fs::read(dir.join("kallsyms")).unwrap(),
        ))
        .unwrap();
    }
    w.write_meta(&Meta::new(
        MetaKind::SavedCmdlines,
        fs::read(dir.join("saved_cmdlines.txt")).unwrap(),
    ))
    .unwrap();
    let n = ncpus(dir);
    if b.stats {
        for cpu in 0..n {
            w.write_stats(&StatsRecord {
                cpu,
                phase: StatsPhase::Start,
                wall_ns: None,
                text: ZERO_STATS.as_bytes().to_vec(),
            })
            .unwrap();
        }
    }
    let sb = arch.subbuf_size as usize;
    for cpu in 0..n {
        let mut raw = raw_cpu(dir, cpu);
        if let Some(edit) = b.edit {
            edit(cpu, &mut raw);
        }
        let mut enc = CpuBlockEncoder::new(cpu, arch.subbuf_size, b.compression);
        for (seq, chunk) in raw.chunks(sb * b.subbufs_per_block).enumerate() {
            let blk = enc.encode(chunk).unwrap();
            if !b.skip_blocks.contains(&(cpu, seq as u64)) {
                w.write_encoded(&blk).unwrap();
            }
        }
    }
    if b.stats {
        for cpu in 0..n {
            w.write_stats(&StatsRecord {
                cpu,
                phase: StatsPhase::End,
                wall_ns: None,
                text: fs::read(dir.join(format!("per_cpu/cpu{cpu}/stats"))).unwrap(),
            })
            .unwrap();
        }
    }
    if b.end {
        w.finish(None, "import", None).unwrap()
    } else {
        w.into_inner_unfinished()
    }
}

/// Offsets of every block in a log (parsed from the framing, no checks).
pub fn block_offsets(bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut off = 16usize;
    while off + 20 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        let end = off + 20 + len;
        v.push((off as u64, end as u64));
        off = end;
    }
    v
}

/// The block containing `pos`: (start, end).
pub fn block_containing(bytes: &[u8], pos: u64) -> Option<(u64, u64)> {
    block_offsets(bytes)
        .into_iter()
        .find(|(s, e)| *s <= pos && pos < *e)
}
