//! Logs built from tracefs-like dumps (`../shared/data/<arch>/raw`), and
//! an independent reading of the kernel's own text rendering of the same
//! events (`trace.txt.gz`) for per-callsite totals.

use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{Meta, MetaKind, StatsPhase, StatsRecord};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::RunTimeEndian;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Builds a log from a dump directory the way an importer would: ARCH from
/// what the dump says, header_page/header_event, every kmem format,
/// kallsyms, saved_cmdlines, each CPU's `trace_pipe_raw` in blocks of at
/// most 64 sub-buffers, the `stats` files as end statistics.
pub fn log_from_raw_dir(dir: &Path, big_endian: bool, long_size: u8) -> Vec<u8> {
    let read = |p: &str| std::fs::read(dir.join(p)).unwrap_or_default();
    let text = |p: &str| String::from_utf8_lossy(&read(p)).trim().to_string();
    let page: u32 = text("page_size_bytes.txt").parse().unwrap_or(4096);
    let mut arch = ArchTag::new(
        if big_endian {
            RunTimeEndian::Big
        } else {
            RunTimeEndian::Little
        },
        long_size,
        page,
        8 + u32::from(long_size),
    );
    arch.page_size = Some(page);
    arch.sysname = Some("Linux".into());
    arch.release = Some(text("uname_r.txt"));
    arch.machine = Some(text("uname_m.txt"));
    arch.trace_clock = Some("local".into());
    let cpus: Vec<u32> = (0..64)
        .filter(|c| dir.join(format!("per_cpu/cpu{c}")).is_dir())
        .collect();
    arch.nr_cpus = Some(cpus.len() as u32);
    let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
    w.write_meta(&Meta::new(MetaKind::HeaderPage, read("events/header_page")))
        .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::HeaderEvent,
        read("events/header_event"),
    ))
    .unwrap();
    let mut evs: Vec<_> = std::fs::read_dir(dir.join("events/kmem"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("format").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    evs.sort();
    for e in evs {
        let f = read(&format!("events/kmem/{e}/format"));
        let id: u32 = String::from_utf8_lossy(&f)
            .lines()
            .find_map(|l| l.strip_prefix("ID: "))
            .and_then(|x| x.trim().parse().ok())
            .unwrap_or(0);
        w.write_meta(&Meta::event_format("kmem", &e, id, f))
            .unwrap();
    }
    w.write_meta(&Meta::new(MetaKind::Kallsyms, read("kallsyms")))
        .unwrap();
    w.write_meta(&Meta::new(
        MetaKind::SavedCmdlines,
        read("saved_cmdlines.txt"),
    ))
    .unwrap();
    let sb = page as usize;
    for &c in &cpus {
        let data = read(&format!("per_cpu/cpu{c}/trace_pipe_raw"));
        let whole = data.len() / sb * sb;
        for chunk in data[..whole].chunks(64 * sb) {
            w.write_cpu_data(c, chunk).unwrap();
        }
        w.write_stats(&StatsRecord {
            cpu: c,
            phase: StatsPhase::End,
            wall_ns: None,
            text: read(&format!("per_cpu/cpu{c}/stats")),
        })
        .unwrap();
    }
    w.finish(None, "import", None).unwrap()
}

/// Per-callsite totals read from the kernel's text: hits, bytes_req,
/// bytes_alloc of allocation events, and free events per call site.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TextTotals {
    pub hits: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub free_calls: u64,
}

/// Reads `call_site=func+0xoff/0xsize [mod]` lines of kmalloc,
/// kmem_cache_alloc, kfree and kmem_cache_free events; keys are
/// `func+0xoff` (the size dropped), as kmemtrace-report prints them.
pub fn text_totals(text: &str) -> BTreeMap<String, TextTotals> {
    let mut m: BTreeMap<String, TextTotals> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(i) = line.find(": call_site=") else {
            continue;
        };
        let head = &line[..i];
        let event = head.rsplit(' ').next().unwrap_or("");
        let rest = &line[i + ": call_site=".len()..];
        // The symbol runs to " ptr=" (a module suffix may hold a space).
        let Some(p) = rest.find(" ptr=") else {
            continue;
        };
        let sym = &rest[..p];
        let key = match sym.split_once('/') {
            Some((a, b)) => match b.split_once(' ') {
                Some((_, module)) => format!("{a} {module}"),
                None => a.to_string(),
            },
            None => sym.to_string(),
        };
        let field = |name: &str| -> u64 {
            rest.split(' ')
                .find_map(|kv| kv.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let t = m.entry(key).or_default();
        match event {
            "kmalloc" | "kmem_cache_alloc" | "kmalloc_node" | "kmem_cache_alloc_node" => {
                t.hits += 1;
                t.bytes_req += field("bytes_req=");
                t.bytes_alloc += field("bytes_alloc=");
            }
            "kfree" | "kmem_cache_free" => t.free_calls += 1,
            _ => {}
        }
    }
    m
}

pub fn gunzip(path: &Path) -> String {
    let f = std::fs::File::open(path).unwrap();
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    s
}
