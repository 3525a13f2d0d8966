//! A log written as trace-cmd's trace.dat, version 6 (uncompressed, the
//! version every trace-cmd and KernelShark reads): the kernel's header
//! texts, event formats, kallsyms, printk formats and cmdlines as recorded,
//! options (trace clock, uname, per-CPU statistics at the end, CPU count),
//! and each CPU's sub-buffers, stored by the log exactly as the kernel
//! wrote them, as the flyrecord pages. Layout: `format-spec/TRACE-DAT.md`.
//! Numbers are in the recorded kernel's byte order.

use crate::repage::Cutter;
use kmemtrace_format::log::{BlockScratch, Log};
use kmemtrace_format::records::{MetaKind, StatsPhase};
use kmemtrace_format::{Endian, RunTimeEndian};
use std::collections::BTreeMap;
use std::io::{self, Seek, Write};

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    pub cpus: u32,
    pub pages: u64,
    pub formats: usize,
    /// Sub-buffers that could not be read back from the log, written as
    /// empty pages.
    pub unreadable_pages: u64,
}

/// Numbers in the recorded kernel's byte order.
struct Out<W> {
    w: W,
    order: RunTimeEndian,
}

impl<W: Write> Out<W> {
    fn num(&mut self, v: u64, width: usize) -> io::Result<()> {
        let mut n = Vec::with_capacity(8);
        self.order.write_uint(&mut n, v, width);
        self.w.write_all(&n)
    }
    fn u16(&mut self, v: u16) -> io::Result<()> {
        self.num(u64::from(v), 2)
    }
    fn u32(&mut self, v: u32) -> io::Result<()> {
        self.num(u64::from(v), 4)
    }
    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.num(v, 8)
    }
    fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)
    }
    fn cstr(&mut self, s: &str) -> io::Result<()> {
        self.w.write_all(s.as_bytes())?;
        self.w.write_all(&[0])
    }
    /// A text with its size first, `width` bytes wide.
    fn sized(&mut self, width: usize, text: &[u8]) -> io::Result<()> {
        self.num(text.len() as u64, width)?;
        self.w.write_all(text)
    }
    /// An option: u16 id, u32 size, payload.
    fn option(&mut self, id: u16, payload: &[u8]) -> io::Result<()> {
        self.u16(id)?;
        self.u32(payload.len() as u32)?;
        self.w.write_all(payload)
    }
}

/// The latest content of a META kind (by name when given), kallsyms
/// reassembled from its parts.
fn meta(log: &Log, kind: MetaKind, prefer: Option<&str>) -> Option<Vec<u8>> {
    let of_kind = || log.metas.iter().filter(move |m| m.kind == kind);
    prefer
        .and_then(|n| of_kind().find(|m| m.name == n))
        .or_else(|| of_kind().next_back())
        .map(|m| m.content.clone())
}

fn kallsyms_text(log: &Log) -> Vec<u8> {
    if let Some(k) = meta(log, MetaKind::Kallsyms, None).filter(|k| !k.is_empty()) {
        return k;
    }
    let mut parts: Vec<(u32, &[u8])> = log
        .metas
        .iter()
        .filter(|m| m.kind == MetaKind::KallsymsPart)
        .map(|m| (m.part.map_or(0, |p| p.0), m.content.as_slice()))
        .collect();
    parts.sort_by_key(|p| p.0);
    parts
        .into_iter()
        .flat_map(|p| p.1.iter().copied())
        .collect()
}

/// Format texts.
type Texts = Vec<Vec<u8>>;

/// Event formats by system, `ftrace` apart (trace-cmd keeps it apart).
fn formats(log: &Log) -> (Texts, BTreeMap<String, Texts>) {
    let mut ftrace = Vec::new();
    let mut systems: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for m in log.metas.iter().filter(|m| m.kind == MetaKind::EventFormat) {
        let system = m.name.split('/').next().unwrap_or("").to_string();
        if system == "ftrace" {
            ftrace.push(m.content.clone());
        } else {
            systems.entry(system).or_default().push(m.content.clone());
        }
    }
    (ftrace, systems)
}

/// Each CPU's blocks in stream order.
fn cpu_blocks(log: &Log) -> BTreeMap<u32, Vec<&kmemtrace_format::log::CpuBlockRef>> {
    let mut by_cpu: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    for b in &log.blocks {
        by_cpu.entry(b.cpu).or_default().push(b);
    }
    for v in by_cpu.values_mut() {
        v.sort_by_key(|b| (b.block_seq, b.first_subbuf));
    }
    by_cpu
}

/// Writes `log` to `w` as a trace.dat version 6.
pub fn write<W: Write + Seek>(log: &Log, w: W) -> io::Result<Written> {
    let cut = Cutter::new(log);
    let page = cut.as_ref().map_or(log.layout.subbuf_size, |c| c.page) as u64;
    let mut o = Out {
        w,
        order: log.endian,
    };
    let mut done = Written::default();
    // Header: magic, version, byte order, long size, page size.
    o.bytes(b"\x17\x08\x44tracing")?;
    o.cstr("6")?;
    o.bytes(&[
        u8::from(log.endian == RunTimeEndian::Big),
        log.arch.long_size,
    ])?;
    o.u32(page as u32)?;
    for (tag, kind) in [
        ("header_page", MetaKind::HeaderPage),
        ("header_event", MetaKind::HeaderEvent),
    ] {
        o.cstr(tag)?;
        let mut text = meta(log, kind, None).unwrap_or_default();
        if let (Some(c), MetaKind::HeaderPage) = (&cut, kind) {
            text = c.header_page(&text);
        }
        o.sized(8, &text)?;
    }
    let (ftrace, systems) = formats(log);
    o.u32(ftrace.len() as u32)?;
    for f in &ftrace {
        o.sized(8, f)?;
    }
    o.u32(systems.len() as u32)?;
    for (system, list) in &systems {
        o.cstr(system)?;
        o.u32(list.len() as u32)?;
        for f in list {
            o.sized(8, f)?;
        }
    }
    done.formats = ftrace.len() + systems.values().map(Vec::len).sum::<usize>();
    o.sized(4, &kallsyms_text(log))?;
    o.sized(
        4,
        &meta(log, MetaKind::PrintkFormats, None).unwrap_or_default(),
    )?;
    // The log's whole pid map: the kernel's saved_cmdlines and the
    // recorder's /proc walks merged (FORMAT.md §7.2), as our own tools name
    // tasks.
    o.sized(8, log.pids.cmdlines_text().as_bytes())?;

    let blocks = cpu_blocks(log);
    let cpus = log
        .arch
        .nr_cpus
        .unwrap_or(0)
        .max(blocks.keys().next_back().map_or(0, |c| c + 1));
    done.cpus = cpus;
    o.u32(cpus)?;
    options(&mut o, log, cpus)?;

    // The flyrecord table: each CPU's pages, page-aligned, after the clock
    // text that a TRACECLOCK option announces. Its figures are known once
    // the pages are written (cut pages are as many as they come out).
    o.bytes(b"flyrecord\0")?;
    let table_at = o.w.stream_position()?;
    for _ in 0..cpus {
        o.u64(0)?;
        o.u64(0)?;
    }
    let clock = format!("[{}]", log.arch.trace_clock.as_deref().unwrap_or("local"));
    o.sized(8, clock.as_bytes())?;
    let here = o.w.stream_position()?;
    o.bytes(&vec![0u8; (here.div_ceil(page) * page - here) as usize])?;
    let mut table = vec![(0u64, 0u64); cpus as usize];
    let mut scratch = BlockScratch::default();
    let mut pages = Vec::new();
    for (&cpu, list) in &blocks {
        let start = o.w.stream_position()?;
        for b in list {
            let want = b.count as usize * log.layout.subbuf_size;
            done.pages += match log.read_cpu_block_into(b, &mut scratch) {
                Ok(data) if data.len() >= want => match &cut {
                    Some(c) => {
                        pages.clear();
                        let n = c.pages(&data[..want], &mut pages);
                        o.bytes(&pages)?;
                        n
                    }
                    // The kernel's pages as they are, not copied again.
                    None => {
                        o.bytes(&data[..want])?;
                        u64::from(b.count)
                    }
                },
                _ => {
                    // An empty page (commit 0) for each one lost.
                    done.unreadable_pages += u64::from(b.count);
                    o.bytes(&vec![0u8; b.count as usize * page as usize])?;
                    u64::from(b.count)
                }
            };
        }
        let end = o.w.stream_position()?;
        if end > start {
            table[cpu as usize] = (start, end - start);
        }
    }
    o.w.seek(io::SeekFrom::Start(table_at))?;
    for &(offset, size) in &table {
        o.u64(offset)?;
        o.u64(size)?;
    }
    o.w.seek(io::SeekFrom::End(0))?;
    o.w.flush()?;
    Ok(done)
}

/// Option ids (trace-cmd's `enum tracecmd_option`).
const OPT_CPUSTAT: u16 = 2;
const OPT_TRACECLOCK: u16 = 4;
const OPT_UNAME: u16 = 5;
const OPT_CPUCOUNT: u16 = 8;
const OPT_VERSION: u16 = 9;

fn options<W: Write>(o: &mut Out<W>, log: &Log, cpus: u32) -> io::Result<()> {
    o.bytes(b"options  \0")?;
    let clock = log.arch.trace_clock.as_deref().unwrap_or("local");
    o.option(OPT_TRACECLOCK, format!("[{clock}]\n\0").as_bytes())?;
    let a = &log.arch;
    let field = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let uname = format!(
        "{} {} {} {}\0",
        field(&a.sysname),
        field(&a.hostname),
        field(&a.release),
        field(&a.machine)
    );
    o.option(OPT_UNAME, uname.as_bytes())?;
    let mut count = Vec::new();
    let mut c = Out {
        w: &mut count,
        order: o.order,
    };
    c.u32(cpus)?;
    o.option(OPT_CPUCOUNT, &count)?;
    let version = format!("kmemtrace-export {}\0", env!("CARGO_PKG_VERSION"));
    o.option(OPT_VERSION, version.as_bytes())?;
    // The statistics at the end, one per CPU in CPU order.
    let mut end: BTreeMap<u32, &[u8]> = BTreeMap::new();
    for s in &log.stats {
        if s.record.phase == StatsPhase::End {
            end.insert(s.record.cpu, &s.record.text);
        }
    }
    for (cpu, text) in end {
        let mut t = text.to_vec();
        if !String::from_utf8_lossy(&t).starts_with("CPU:") {
            t.splice(0..0, format!("CPU: {cpu}\n").into_bytes());
        }
        t.push(0);
        o.option(OPT_CPUSTAT, &t)?;
    }
    o.u16(0)
}
