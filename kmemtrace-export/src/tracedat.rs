//! A log written as trace-cmd's trace.dat, version 7 (as trace-cmd 3
//! writes it: sections, the metadata and the CPU data compressed with
//! zstd) or version 6 (uncompressed, the version every trace-cmd and
//! KernelShark reads): the kernel's header texts, event formats, kallsyms,
//! printk formats and cmdlines as recorded, options (trace clock, uname,
//! per-CPU statistics at the end, CPU count), and each CPU's sub-buffers,
//! stored by the log exactly as the kernel wrote them, as the flyrecord
//! pages. Layout: `format-spec/TRACE-DAT.md`. Numbers are in the recorded
//! kernel's byte order.
//!
//! Both versions hold the same pages: sub-buffers bigger than the
//! machine's page are cut into pages for both (`repage.rs`), as trace-cmd
//! (3.1 to 3.4) reads the top buffer's pages by the header's page size.

use crate::progress::Progress;
use crate::repage::Cutter;
use kmemtrace_format::records::{MetaKind, StatsPhase};
use kmemtrace_import::log::{BlockScratch, CpuBlockRef, Log};
use kmemtrace_import::tracedat::{opt, sec, MAGIC};
use kmemtrace_kernel::{Endian, RunTimeEndian, LINUX_MAX_NR_CPUS};
use std::collections::BTreeMap;
use std::io::{self, Seek, Write};

/// The version of the file written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Version {
    /// Version 6: no sections, nothing compressed.
    V6,
    /// Version 7: sections; metadata and CPU data compressed with zstd.
    #[default]
    V7,
}

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    /// 6 or 7.
    pub version: u32,
    pub cpus: u32,
    pub pages: u64,
    pub formats: usize,
    /// Sub-buffers that could not be read back from the log, written as
    /// empty pages.
    pub unreadable_pages: u64,
    /// Bytes of pages, and what they take in the file (less in version 7).
    pub page_bytes: u64,
    pub stored_page_bytes: u64,
    /// CPU data blocks of CPUs numbered past Linux's largest machine (a
    /// damaged log's), left out.
    pub blocks_left_out: usize,
}

/// Numbers in the recorded kernel's byte order; `pos` counts the bytes
/// written, so that the writer need not ask a buffered file where it is.
struct Out<W> {
    w: W,
    order: RunTimeEndian,
    pos: u64,
}

impl<W: Write> Out<W> {
    fn new(w: W, order: RunTimeEndian) -> Self {
        Out { w, order, pos: 0 }
    }
    fn num(&mut self, v: u64, width: usize) -> io::Result<()> {
        let mut n = Vec::with_capacity(8);
        self.order.write_uint(&mut n, v, width);
        self.bytes(&n)
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
        self.pos += b.len() as u64;
        self.w.write_all(b)
    }
    fn cstr(&mut self, s: &str) -> io::Result<()> {
        self.bytes(s.as_bytes())?;
        self.bytes(&[0])
    }
    /// A text with its size first, `width` bytes wide.
    fn sized(&mut self, width: usize, text: &[u8]) -> io::Result<()> {
        self.num(text.len() as u64, width)?;
        self.bytes(text)
    }
    /// An option: u16 id, u32 size, payload.
    fn option(&mut self, id: u16, payload: &[u8]) -> io::Result<()> {
        self.u16(id)?;
        self.u32(payload.len() as u32)?;
        self.bytes(payload)
    }
    /// Zeros up to the next multiple of `align`.
    fn pad_to(&mut self, align: u64) -> io::Result<()> {
        let n = self.pos.div_ceil(align) * align - self.pos;
        self.bytes(&vec![0u8; n as usize])
    }
}

impl<W: Write + Seek> Out<W> {
    /// Writes the number `v` at `at`, back in the file, and returns to its
    /// end.
    fn patch(&mut self, at: u64, v: u64, width: usize) -> io::Result<()> {
        let mut n = Vec::with_capacity(8);
        self.order.write_uint(&mut n, v, width);
        self.w.seek(io::SeekFrom::Start(at))?;
        self.w.write_all(&n)?;
        self.w.seek(io::SeekFrom::Start(self.pos))?;
        Ok(())
    }
}

/// `width` bytes of `v` in `order`.
fn encode(order: RunTimeEndian, v: u64, width: usize) -> Vec<u8> {
    let mut n = Vec::with_capacity(width);
    order.write_uint(&mut n, v, width);
    n
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

/// The six metadata blocks (header info, ftrace formats, other formats,
/// kallsyms, printk formats, cmdlines), each in trace-cmd's encoding, and
/// how many formats they hold.
fn metadata(log: &Log, cut: Option<&Cutter>) -> io::Result<([Vec<u8>; 6], usize)> {
    let mut blocks: [Vec<u8>; 6] = Default::default();
    let [header, ftrace_block, events, kallsyms, printk, cmdlines] = &mut blocks;
    let mut o = Out::new(header, log.endian);
    for (tag, kind) in [
        ("header_page", MetaKind::HeaderPage),
        ("header_event", MetaKind::HeaderEvent),
    ] {
        o.cstr(tag)?;
        let mut text = meta(log, kind, None).unwrap_or_default();
        if let (Some(c), MetaKind::HeaderPage) = (cut, kind) {
            text = c.header_page(&text);
        }
        o.sized(8, &text)?;
    }
    let (ftrace, systems) = formats(log);
    let mut o = Out::new(ftrace_block, log.endian);
    o.u32(ftrace.len() as u32)?;
    for f in &ftrace {
        o.sized(8, f)?;
    }
    let mut o = Out::new(events, log.endian);
    o.u32(systems.len() as u32)?;
    for (system, list) in &systems {
        o.cstr(system)?;
        o.u32(list.len() as u32)?;
        for f in list {
            o.sized(8, f)?;
        }
    }
    let count = ftrace.len() + systems.values().map(Vec::len).sum::<usize>();
    Out::new(kallsyms, log.endian).sized(4, &log.kallsyms_text())?;
    Out::new(printk, log.endian).sized(
        4,
        &meta(log, MetaKind::PrintkFormats, None).unwrap_or_default(),
    )?;
    // The log's whole pid map: the kernel's saved_cmdlines and the
    // recorder's /proc walks merged (FORMAT.md §7.2), as our own tools name
    // tasks.
    Out::new(cmdlines, log.endian).sized(8, log.pids.cmdlines_text().as_bytes())?;
    Ok((blocks, count))
}

/// What both versions share: the page size, each CPU's blocks, and the
/// pages read from them.
struct Pages<'a, 'p> {
    log: &'a Log,
    cut: Option<Cutter>,
    page: u64,
    blocks: BTreeMap<u32, Vec<&'a CpuBlockRef>>,
    /// The CPUs the file has room for.
    cpus: u32,
    /// Blocks of CPUs past Linux's largest machine, not written.
    left_out: usize,
    scratch: BlockScratch,
    buf: Vec<u8>,
    progress: Progress,
    report: &'p mut dyn FnMut(Progress),
}

impl<'a, 'p> Pages<'a, 'p> {
    fn new(log: &'a Log, report: &'p mut dyn FnMut(Progress)) -> Self {
        let cut = Cutter::new(log);
        let page = cut.as_ref().map_or(log.layout.subbuf_size, |c| c.page) as u64;
        // A CPU number past Linux's largest machine is damage: the table
        // has an entry for every CPU up to the highest, so one such block
        // would make the file gigabytes of empty entries (and a number of
        // 2^32 - 1 would overflow the count).
        let mut blocks = log.blocks_by_cpu();
        let left_out = blocks.split_off(&LINUX_MAX_NR_CPUS);
        let named = log.arch.nr_cpus.unwrap_or(0).min(LINUX_MAX_NR_CPUS);
        let cpus = named.max(blocks.keys().next_back().map_or(0, |c| c + 1));
        let total = blocks.values().flatten().map(|b| u64::from(b.count)).sum();
        Pages {
            log,
            cut,
            page,
            blocks,
            cpus,
            left_out: left_out.values().map(Vec::len).sum(),
            scratch: BlockScratch::default(),
            buf: Vec::new(),
            progress: Progress {
                step: "writing",
                done: 0,
                total,
            },
            report,
        }
    }

    /// Hands `cpu`'s pages to `sink` in order, a block's at a time:
    /// sub-buffers cut into pages where they are bigger, and an empty page
    /// (commit 0) for each sub-buffer the log cannot give back.
    fn each(
        &mut self,
        cpu: u32,
        done: &mut Written,
        mut sink: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let log = self.log;
        let Some(list) = self.blocks.get(&cpu).cloned() else {
            return Ok(());
        };
        for b in list {
            let want = b.count as usize * log.layout.subbuf_size;
            let (bytes, n): (&[u8], u64) = match log.read_cpu_block_into(b, &mut self.scratch) {
                Ok(data) if data.len() >= want => match &self.cut {
                    Some(c) => {
                        self.buf.clear();
                        let n = c.pages(&data[..want], &mut self.buf);
                        (&self.buf, n)
                    }
                    // The kernel's pages as they are, not copied again.
                    None => (&data[..want], u64::from(b.count)),
                },
                _ => {
                    done.unreadable_pages += u64::from(b.count);
                    self.buf.clear();
                    self.buf.resize(b.count as usize * self.page as usize, 0);
                    (&self.buf, u64::from(b.count))
                }
            };
            sink(bytes)?;
            done.pages += n;
            done.page_bytes += bytes.len() as u64;
            self.progress.done += u64::from(b.count);
            (self.report)(self.progress);
        }
        Ok(())
    }
}

/// Writes `log` to `w` as a trace.dat of `version`, telling `progress` how
/// far it has got after each block of the log.
pub fn write<W: Write + Seek>(
    log: &Log,
    w: W,
    version: Version,
    progress: &mut dyn FnMut(Progress),
) -> io::Result<Written> {
    let mut pages = Pages::new(log, progress);
    let (blocks, formats) = metadata(log, pages.cut.as_ref())?;
    let mut done = Written {
        cpus: pages.cpus,
        blocks_left_out: pages.left_out,
        formats,
        ..Written::default()
    };
    let mut o = Out::new(w, log.endian);
    // Header: magic, version, byte order, long size, page size.
    o.bytes(MAGIC)?;
    o.cstr(match version {
        Version::V6 => "6",
        Version::V7 => "7",
    })?;
    o.bytes(&[
        u8::from(log.endian == RunTimeEndian::Big),
        log.arch.long_size,
    ])?;
    o.u32(pages.page as u32)?;
    match version {
        Version::V6 => v6(&mut o, log, &blocks, &mut pages, &mut done)?,
        Version::V7 => v7(&mut o, log, &blocks, &mut pages, &mut done)?,
    }
    o.w.flush()?;
    Ok(done)
}

/// Version 6 after the header: the metadata blocks back to back, the CPU
/// count, the options, and the flyrecord table before each CPU's pages,
/// page-aligned.
fn v6<W: Write + Seek>(
    o: &mut Out<W>,
    log: &Log,
    blocks: &[Vec<u8>; 6],
    pages: &mut Pages<'_, '_>,
    done: &mut Written,
) -> io::Result<()> {
    done.version = 6;
    for b in blocks {
        o.bytes(b)?;
    }
    let cpus = pages.cpus;
    o.u32(cpus)?;
    o.bytes(b"options  \0")?;
    for (id, payload) in options(log, cpus) {
        o.option(id, &payload)?;
    }
    o.u16(opt::DONE)?;

    // The flyrecord table: each CPU's pages, page-aligned, after the clock
    // text that a TRACECLOCK option announces. Its figures are known once
    // the pages are written (cut pages are as many as they come out).
    o.bytes(b"flyrecord\0")?;
    let table_at = o.pos;
    for _ in 0..cpus {
        o.u64(0)?;
        o.u64(0)?;
    }
    let clock = format!("[{}]", log.arch.trace_clock.as_deref().unwrap_or("local"));
    o.sized(8, clock.as_bytes())?;
    o.pad_to(pages.page)?;
    let list: Vec<u32> = pages.blocks.keys().copied().collect();
    for cpu in list {
        let start = o.pos;
        pages.each(cpu, done, |b| o.bytes(b))?;
        let size = o.pos - start;
        if size > 0 {
            o.patch(table_at + 16 * u64::from(cpu), start, 8)?;
            o.patch(table_at + 16 * u64::from(cpu) + 8, size, 8)?;
        }
    }
    done.stored_page_bytes = done.page_bytes;
    Ok(())
}

/// Section descriptions: NUL-terminated strings, named by their offset in
/// the STRINGS section.
#[derive(Default)]
struct Strings(Vec<u8>);

impl Strings {
    fn add(&mut self, s: &str) -> u32 {
        let at = self.0.len() as u32;
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        at
    }
}

/// zstd as trace-cmd uses it: its default level, and frames that do not
/// say their content size (the chunk headers do).
struct Zstd {
    c: zstd::bulk::Compressor<'static>,
    out: Vec<u8>,
}

impl Zstd {
    fn new() -> io::Result<Self> {
        let mut c = zstd::bulk::Compressor::new(0)?;
        c.include_contentsize(false)?;
        Ok(Zstd { c, out: Vec::new() })
    }

    /// One frame of `data`.
    fn frame(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        self.out.clear();
        self.out
            .reserve(zstd::zstd_safe::compress_bound(data.len()));
        self.c.compress_to_buffer(data, &mut self.out)?;
        Ok(&self.out)
    }

    /// A compressed block as a section holds it: `u32 csize, u32 usize`,
    /// the frame.
    fn block(&mut self, order: RunTimeEndian, data: &[u8]) -> io::Result<Vec<u8>> {
        let frame = self.frame(data)?;
        let mut b = encode(order, frame.len() as u64, 4);
        b.extend(encode(order, data.len() as u64, 4));
        b.extend_from_slice(frame);
        Ok(b)
    }
}

/// Pages per compressed chunk of CPU data (trace-cmd's `PAGES_IN_CHUNK`).
const PAGES_IN_CHUNK: u64 = 10;

/// A section header: u16 id, u16 flags, u32 description, u64 size.
fn section<W: Write>(o: &mut Out<W>, id: u16, flags: u16, desc: u32, size: u64) -> io::Result<()> {
    o.u16(id)?;
    o.u16(flags)?;
    o.u32(desc)?;
    o.u64(size)
}

/// Version 7 after the header, laid out as `trace-cmd record` lays it: the
/// compression's name and version and the first options' offset, the six
/// metadata sections (compressed), the options (the metadata sections'
/// offsets among them), the BUFFER section with each CPU's pages in
/// compressed chunks of ten pages, the options naming it, and the section
/// descriptions (STRINGS).
fn v7<W: Write + Seek>(
    o: &mut Out<W>,
    log: &Log,
    blocks: &[Vec<u8>; 6],
    pages: &mut Pages<'_, '_>,
    done: &mut Written,
) -> io::Result<()> {
    done.version = 7;
    let order = log.endian;
    let mut z = Zstd::new()?;
    let mut strings = Strings::default();
    o.cstr("zstd")?;
    o.cstr(zstd::zstd_safe::version_string())?;
    let first_options = o.pos;
    o.u64(0)?;

    let mut opts: Vec<(u16, Vec<u8>)> = Vec::new();
    for (&(id, desc), data) in SEC_METADATA.iter().zip(blocks) {
        opts.push((id, encode(order, o.pos, 8)));
        let block = z.block(order, data)?;
        section(
            o,
            id,
            sec::FL_COMPRESS,
            strings.add(desc),
            block.len() as u64,
        )?;
        o.bytes(&block)?;
    }
    opts.extend(options(log, pages.cpus));

    // The options; DONE's offset, of the next options, comes once known.
    o.patch(first_options, o.pos, 8)?;
    let mut payload = Vec::new();
    let mut p = Out::new(&mut payload, order);
    for (id, data) in &opts {
        p.option(*id, data)?;
    }
    p.option(opt::DONE, &[0; 8])?;
    section(
        o,
        sec::OPTIONS,
        0,
        strings.add("options"),
        payload.len() as u64,
    )?;
    let next_options = o.pos + payload.len() as u64 - 8;
    o.bytes(&payload)?;

    // The CPU data: each CPU page-aligned, a count of chunks (known at its
    // end) and the chunks.
    let buffer_at = o.pos;
    section(
        o,
        opt::BUFFER,
        sec::FL_COMPRESS,
        strings.add("buffer flyrecord "),
        0,
    )?;
    let chunk = (PAGES_IN_CHUNK * pages.page) as usize;
    let mut cpus: Vec<(u32, u64, u64)> = Vec::new();
    let mut pending: Vec<u8> = Vec::with_capacity(chunk);
    let list: Vec<u32> = pages.blocks.keys().copied().collect();
    for cpu in list {
        o.pad_to(pages.page)?;
        let start = o.pos;
        o.u32(0)?;
        let mut count = 0u32;
        let mut put = |o: &mut Out<W>, z: &mut Zstd, data: &[u8]| -> io::Result<()> {
            let frame = z.frame(data)?;
            o.u32(frame.len() as u32)?;
            o.u32(data.len() as u32)?;
            o.bytes(frame)?;
            count += 1;
            Ok(())
        };
        let before = done.page_bytes;
        pages.each(cpu, done, |mut b| {
            // Whole chunks straight from the block, the rest kept for the
            // next.
            if !pending.is_empty() {
                let take = (chunk - pending.len()).min(b.len());
                pending.extend_from_slice(&b[..take]);
                b = &b[take..];
                if pending.len() == chunk {
                    put(o, &mut z, &pending)?;
                    pending.clear();
                }
            }
            while b.len() >= chunk {
                put(o, &mut z, &b[..chunk])?;
                b = &b[chunk..];
            }
            pending.extend_from_slice(b);
            Ok(())
        })?;
        if !pending.is_empty() {
            put(o, &mut z, &pending)?;
            pending.clear();
        }
        o.patch(start, u64::from(count), 4)?;
        if done.page_bytes > before {
            cpus.push((cpu, start, o.pos - start));
        }
    }
    done.stored_page_bytes = cpus.iter().map(|c| c.2).sum();
    o.patch(buffer_at + 8, o.pos - (buffer_at + 16), 8)?;

    // The options naming the buffer: offset, name ("" for the top one),
    // clock, page size, and each CPU's data.
    o.patch(next_options, o.pos, 8)?;
    let mut payload = Vec::new();
    let mut p = Out::new(&mut payload, order);
    let mut buffer = Vec::new();
    let mut b = Out::new(&mut buffer, order);
    b.u64(buffer_at)?;
    b.cstr("")?;
    b.cstr(log.arch.trace_clock.as_deref().unwrap_or("local"))?;
    b.u32(pages.page as u32)?;
    b.u32(cpus.len() as u32)?;
    for &(cpu, offset, size) in &cpus {
        b.u32(cpu)?;
        b.u64(offset)?;
        b.u64(size)?;
    }
    p.option(opt::BUFFER, &buffer)?;
    p.option(opt::DONE, &[0; 8])?;
    section(
        o,
        sec::OPTIONS,
        0,
        strings.add("options"),
        payload.len() as u64,
    )?;
    o.bytes(&payload)?;

    let desc = strings.add("strings");
    let block = z.block(order, &strings.0)?;
    section(o, sec::STRINGS, sec::FL_COMPRESS, desc, block.len() as u64)?;
    o.bytes(&block)
}

/// The metadata blocks' sections, in order, with trace-cmd's descriptions.
const SEC_METADATA: [(u16, &str); 6] = [
    (sec::HEADER_INFO, "headers"),
    (sec::FTRACE_EVENTS, "ftrace events"),
    (sec::EVENT_FORMATS, "events format"),
    (sec::KALLSYMS, "kallsyms"),
    (sec::PRINTK, "printk"),
    (sec::CMDLINES, "command lines"),
];

/// The options both versions hold: trace clock, uname, CPU count, the
/// writer's version, and each CPU's statistics at the end.
fn options(log: &Log, cpus: u32) -> Vec<(u16, Vec<u8>)> {
    let mut out = Vec::new();
    let clock = log.arch.trace_clock.as_deref().unwrap_or("local");
    out.push((opt::TRACECLOCK, format!("[{clock}]\n\0").into_bytes()));
    let a = &log.arch;
    let field = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let uname = format!(
        "{} {} {} {}\0",
        field(&a.sysname),
        field(&a.hostname),
        field(&a.release),
        field(&a.machine)
    );
    out.push((opt::UNAME, uname.into_bytes()));
    out.push((opt::CPUCOUNT, encode(log.endian, u64::from(cpus), 4)));
    let version = format!("kmemtrace-export {}\0", env!("CARGO_PKG_VERSION"));
    out.push((opt::VERSION, version.into_bytes()));
    // How page stacks were taken (which allocations have one, and the
    // sample): the report reads it back from the option.
    use kmemtrace_import::stacks::PAGE_STACKS_META;
    if let Some(m) = log.meta(MetaKind::Other, PAGE_STACKS_META) {
        let mut payload = format!("{PAGE_STACKS_META}\0").into_bytes();
        payload.extend_from_slice(&m.content);
        out.push((opt::KMEMTRACE_META, payload));
    }
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
        out.push((opt::CPUSTAT, t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_import::tracedat::{self as input, CpuData};
    use kmemtrace_testkit::synth::{LogBuilder, Rng};

    /// A log of `endian` and `long_size` with events on CPUs 0 and 2 (1
    /// has none), many pages each, and statistics at the end.
    fn log(endian: RunTimeEndian, long_size: u8) -> Log {
        let mut b = LogBuilder::new(endian, long_size, 4096);
        b.arch.nr_cpus = Some(3);
        let mut rng = Rng(7 + u64::from(long_size));
        for cpu in [0, 2] {
            let mut ts = 1_000_000u64;
            for i in 0..3000u64 {
                ts += 1 + rng.below(5000);
                let len = 8 + 4 * rng.below(20) as usize;
                let payload: Vec<u8> = (0..len).map(|j| (i as usize * 7 + j) as u8).collect();
                b.event(cpu, ts, payload);
            }
            b.stats(cpu, StatsPhase::End, &format!("CPU: {cpu}\nentries: 0\n"));
        }
        Log::from_bytes("synth", &b.build().unwrap()).unwrap()
    }

    #[test]
    fn cpus_past_linux_s_largest_are_left_out() {
        // A damaged log: ARCH names 2^32 - 1 CPUs, and a block is of CPU
        // 2^32 - 1 (the table would have had 2^32 entries, its count
        // overflowed).
        let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
        b.arch.nr_cpus = Some(u32::MAX);
        for cpu in [0, u32::MAX] {
            b.event(cpu, 1_000, vec![1; 16]);
        }
        let log = Log::from_bytes("synth", &b.build().unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        for version in [Version::V6, Version::V7] {
            let w = written(&log, version, &dir.path().join("t.dat"));
            assert_eq!((w.cpus, w.blocks_left_out), (LINUX_MAX_NR_CPUS, 1));
            assert!(w.pages >= 1);
        }
    }

    fn written(log: &Log, version: Version, path: &std::path::Path) -> Written {
        let f = std::fs::File::create(path).unwrap();
        let mut seen = Vec::new();
        let w = write(log, io::BufWriter::new(f), version, &mut |p| seen.push(p)).unwrap();
        // Progress comes after each block written, up to all of them.
        assert!(seen.windows(2).all(|p| p[0].done < p[1].done));
        let total: u64 = log
            .blocks
            .iter()
            .filter(|b| b.cpu < LINUX_MAX_NR_CPUS)
            .map(|b| u64::from(b.count))
            .sum();
        let last = seen.last().unwrap();
        assert_eq!(
            (last.step, last.done, last.total),
            ("writing", total, total)
        );
        w
    }

    fn pages_of(path: &std::path::Path, d: &CpuData) -> Vec<u8> {
        let mut out = Vec::new();
        input::stream_cpu(path, d, |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        out
    }

    /// Version 7, in each byte order and long size, read back by the
    /// importer: zstd chunks of ten pages that give back the pages version
    /// 6 stores, the same metadata, and the numbers in the kernel's order.
    #[test]
    fn version_7_holds_version_6s_pages_and_metadata_compressed() {
        let dir = tempfile::tempdir().unwrap();
        for endian in [RunTimeEndian::Little, RunTimeEndian::Big] {
            for long_size in [4u8, 8] {
                let log = log(endian, long_size);
                let (p6, p7) = (dir.path().join("6.dat"), dir.path().join("7.dat"));
                let w6 = written(&log, Version::V6, &p6);
                let w7 = written(&log, Version::V7, &p7);
                assert_eq!((w6.version, w7.version), (6, 7));
                assert_eq!((w6.pages, w6.cpus), (w7.pages, w7.cpus));
                assert_eq!(w6.cpus, 3);
                assert!(w6.pages > 40, "{} pages", w6.pages);
                assert_eq!(w7.page_bytes, w6.pages * 4096);
                assert!(w7.stored_page_bytes < w7.page_bytes / 2);
                let bytes = std::fs::read(&p7).unwrap();
                let zstd = bytes.windows(5).position(|w| w == b"zstd\0");
                assert_eq!(zstd, Some(18), "{endian:?}");
                assert_eq!(&bytes[10..12], b"7\0");
                assert_eq!(bytes[12], u8::from(endian == RunTimeEndian::Big));

                let (a, b) = (input::open(&p6).unwrap(), input::open(&p7).unwrap());
                assert_eq!((a.version, b.version), (6, 7));
                assert_eq!(a.files, b.files, "{endian:?} {long_size}");
                assert_eq!(
                    b.files["endianness"],
                    if endian == RunTimeEndian::Big {
                        &b"big"[..]
                    } else {
                        b"little"
                    }
                );
                assert!(b.files.contains_key("per_cpu/cpu2/stats"));
                assert_eq!(b.cpus.keys().collect::<Vec<_>>(), [&0, &2]);
                for (cpu, d) in &b.cpus {
                    let CpuData::Chunked { algo, chunks } = d else {
                        panic!("CPU {cpu}: not compressed");
                    };
                    assert_eq!(*algo, input::Algo::Zstd);
                    assert!(chunks.len() > 1);
                    let (last, whole) = chunks.split_last().unwrap();
                    assert!(whole.iter().all(|c| c.usize == 40960));
                    assert!(last.usize > 0 && last.usize <= 40960 && last.usize % 4096 == 0);
                    assert_eq!(pages_of(&p7, d), pages_of(&p6, &a.cpus[cpu]), "CPU {cpu}");
                }
            }
        }
    }
}
