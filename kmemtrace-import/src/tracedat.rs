//! trace-cmd's `trace.dat`, versions 6 and 7, read as a dump: its header
//! texts, event formats, kallsyms, cmdlines and options become the files a
//! tracefs dump would hold (`events/header_page`, `events/<sys>/<ev>/format`,
//! `kallsyms`, `saved_cmdlines`, `per_cpu/cpuN/stats`, `uname_*`,
//! `trace_clock`, `endianness`), and each CPU's flyrecord data (the
//! kernel's ring-buffer pages, in v7 possibly compressed in chunks) is
//! streamed like a `trace_pipe_raw`. The layout is written down in
//! `format-spec/TRACE-DAT.md`.
//!
//! Numbers are in the file's byte order (its header says which); the
//! kernel's long size comes from `header_page`, as the import reads it.

use crate::ImportError;
use kmemtrace_kernel::{Endian, RunTimeEndian};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// The trace.dat versions read.
pub const VERSIONS: std::ops::RangeInclusive<u32> = 6..=7;

/// [`VERSIONS`] as `--version` names them (read here, and written by
/// kmemtrace-export).
pub fn versions_named() -> String {
    format!("trace.dat {}-{}", VERSIONS.start(), VERSIONS.end())
}
/// `\x17\x08\x44tracing`: the first ten bytes of every trace.dat.
pub const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";
/// Largest metadata text read (kallsyms of a big kernel).
const MAX_TEXT: u64 = 64 << 20;

/// How v7 compresses sections and CPU data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Zstd,
    Zlib,
}

/// One compressed chunk of a CPU's data: where its bytes are and how many
/// they become.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub offset: u64,
    pub csize: u32,
    pub usize: u32,
}

/// Where a CPU's ring-buffer pages are in the file.
#[derive(Debug, Clone)]
pub enum CpuData {
    Plain { offset: u64, len: u64 },
    Chunked { algo: Algo, chunks: Vec<Chunk> },
}

impl CpuData {
    /// Bytes of pages.
    pub fn bytes(&self) -> u64 {
        match self {
            CpuData::Plain { len, .. } => *len,
            CpuData::Chunked { chunks, .. } => chunks.iter().map(|c| u64::from(c.usize)).sum(),
        }
    }
}

/// A trace.dat, read.
#[derive(Debug)]
pub struct TraceDat {
    pub version: u32,
    /// Files as a dump would hold them.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Where in the trace.dat each file's content is (the metadata block,
    /// option or section it came from; 0: the file header).
    pub at: BTreeMap<String, u64>,
    /// The chosen buffer's CPUs.
    pub cpus: BTreeMap<u32, CpuData>,
    /// What the import should say about the file (NOTE lines).
    pub notes: Vec<String>,
}

fn bad(path: &Path, why: impl std::fmt::Display) -> ImportError {
    ImportError::Dump(format!("{}: {why}", path.display()))
}

/// Whether `head` starts like a trace.dat.
pub fn looks_like(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// A reader of the file's numbers and strings at a position.
struct Src {
    f: File,
    order: RunTimeEndian,
    /// The file's length: no count can ask for more than it holds.
    len: u64,
}

impl Src {
    fn seek(&mut self, at: u64) -> io::Result<()> {
        self.f.seek(SeekFrom::Start(at)).map(drop)
    }
    fn pos(&mut self) -> io::Result<u64> {
        self.f.stream_position()
    }
    /// `count` items of at least `each` bytes must fit in the file.
    fn fits(&self, count: u64, each: u64) -> io::Result<()> {
        if count.saturating_mul(each) > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{count} entries of {each} bytes: more than the file holds"),
            ));
        }
        Ok(())
    }
    fn bytes(&mut self, n: u64) -> io::Result<Vec<u8>> {
        if n > MAX_TEXT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a block of {n} bytes: too large to be metadata"),
            ));
        }
        let mut b = vec![0u8; n as usize];
        self.f.read_exact(&mut b)?;
        Ok(b)
    }
    fn num(&mut self, width: usize) -> io::Result<u64> {
        let b = self.bytes(width as u64)?;
        Ok(number(self.order, &b))
    }
    fn u16(&mut self) -> io::Result<u16> {
        self.num(2).map(|v| v as u16)
    }
    fn u32(&mut self) -> io::Result<u32> {
        self.num(4).map(|v| v as u32)
    }
    fn u64(&mut self) -> io::Result<u64> {
        self.num(8)
    }
    fn cstr(&mut self) -> io::Result<String> {
        let mut out = Vec::new();
        let mut one = [0u8; 1];
        loop {
            self.f.read_exact(&mut one)?;
            if one[0] == 0 || out.len() > 4096 {
                return Ok(String::from_utf8_lossy(&out).into_owned());
            }
            out.push(one[0]);
        }
    }
}

/// What the metadata blocks are read from: the file itself (v6) or a
/// section's decompressed payload (v7).
trait Input {
    fn num(&mut self, width: u64) -> io::Result<u64>;
    fn take_vec(&mut self, n: u64) -> io::Result<Vec<u8>>;
    fn cstring(&mut self) -> io::Result<String>;
    /// Up to `n` bytes: all of them where the block ends first. trace-cmd
    /// writes a tracefs file's size from one read and its text from a
    /// second (`save_tracing_file_data`), so a file that changed between
    /// the two (`saved_cmdlines` while tasks start) leaves a text shorter
    /// than its size. In v7 the block is a section of its own, so the rest
    /// is still found; v6 has no such boundary, and reads strictly.
    fn take_up_to(&mut self, n: u64) -> io::Result<Vec<u8>> {
        self.take_vec(n)
    }
}

impl Input for Src {
    fn num(&mut self, width: u64) -> io::Result<u64> {
        Src::num(self, width as usize)
    }
    fn take_vec(&mut self, n: u64) -> io::Result<Vec<u8>> {
        self.bytes(n)
    }
    fn cstring(&mut self) -> io::Result<String> {
        self.cstr()
    }
}

impl Input for Buf<'_> {
    fn num(&mut self, width: u64) -> io::Result<u64> {
        Buf::num(self, width)
    }
    fn take_vec(&mut self, n: u64) -> io::Result<Vec<u8>> {
        self.take(n).map(<[u8]>::to_vec)
    }
    fn take_up_to(&mut self, n: u64) -> io::Result<Vec<u8>> {
        let left = (self.b.len() - self.at.min(self.b.len())) as u64;
        self.take(n.min(left)).map(<[u8]>::to_vec)
    }
    fn cstring(&mut self) -> io::Result<String> {
        self.cstr()
    }
}

/// A number of `b.len()` (2, 4 or 8) bytes in `order`.
fn number(order: RunTimeEndian, b: &[u8]) -> u64 {
    order.read_uint(b, 0, b.len()).unwrap_or(0)
}

/// A slice read as the file's numbers and strings (a decompressed section).
struct Buf<'a> {
    b: &'a [u8],
    at: usize,
    order: RunTimeEndian,
}

impl<'a> Buf<'a> {
    fn take(&mut self, n: u64) -> io::Result<&'a [u8]> {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a section ends early",
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn num(&mut self, w: u64) -> io::Result<u64> {
        let o = self.order;
        self.take(w).map(|b| number(o, b))
    }
    fn cstr(&mut self) -> io::Result<String> {
        let rest = &self.b[self.at..];
        let n = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.at += (n + 1).min(rest.len());
        Ok(s)
    }
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

fn decompress(algo: Algo, data: &[u8], usize: u32) -> io::Result<Vec<u8>> {
    match algo {
        // trace-cmd writes zstd frames without their content size.
        Algo::Zstd => zstd::bulk::decompress(data, usize as usize),
        Algo::Zlib => {
            let mut out = Vec::with_capacity(usize as usize);
            flate2::read::ZlibDecoder::new(data).read_to_end(&mut out)?;
            Ok(out)
        }
    }
}

/// Decompresses `data` into all of `out`, which must be exactly what it
/// gives: a chunk of CPU data read in place.
pub(crate) fn decompress_into(algo: Algo, data: &[u8], out: &mut [u8]) -> io::Result<()> {
    let want = out.len();
    let short = |n: usize| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a chunk gave {n} bytes, {want} expected"),
        )
    };
    match algo {
        Algo::Zstd => {
            let n = zstd::bulk::decompress_to_buffer(data, &mut *out)?;
            if n != out.len() {
                return Err(short(n));
            }
        }
        Algo::Zlib => {
            let mut z = flate2::read::ZlibDecoder::new(data);
            let mut n = 0;
            while n < out.len() {
                match z.read(&mut out[n..])? {
                    0 => return Err(short(n)),
                    k => n += k,
                }
            }
            if z.read(&mut [0u8; 1])? != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a chunk gives more than the {want} bytes expected"),
                ));
            }
        }
    }
    Ok(())
}

/// `e` with where it happened.
fn context(what: String, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Section ids of version 7 (in trace-cmd's `enum tracecmd_option`, after
/// the options proper), and the section flags; the reader here and the
/// writer in kmemtrace-export share them.
pub mod sec {
    /// The strings section.
    pub const STRINGS: u16 = 15;
    /// The metadata blocks, each in its encoding (16..=21, in this order).
    pub const HEADER_INFO: u16 = 16;
    pub const FTRACE_EVENTS: u16 = 17;
    pub const EVENT_FORMATS: u16 = 18;
    pub const KALLSYMS: u16 = 19;
    pub const PRINTK: u16 = 20;
    pub const CMDLINES: u16 = 21;
    /// The section id of an options section (the id of the DONE option).
    pub const OPTIONS: u16 = super::opt::DONE;
    /// `TRACECMD_SEC_FL_COMPRESS`.
    pub const FL_COMPRESS: u16 = 1;
}

use sec::{CMDLINES, EVENT_FORMATS, FTRACE_EVENTS, HEADER_INFO, KALLSYMS, PRINTK};

/// Option ids (trace-cmd's `enum tracecmd_option`).
pub mod opt {
    pub const DONE: u16 = 0;
    pub const DATE: u16 = 1;
    pub const CPUSTAT: u16 = 2;
    pub const BUFFER: u16 = 3;
    pub const TRACECLOCK: u16 = 4;
    pub const UNAME: u16 = 5;
    pub const OFFSET: u16 = 7;
    pub const CPUCOUNT: u16 = 8;
    pub const VERSION: u16 = 9;
    pub const TIME_SHIFT: u16 = 12;
    pub const TSC2NSEC: u16 = 14;
    pub const BUFFER_TEXT: u16 = 22;
    /// Not trace-cmd's: a log's META record that the analysis reads and
    /// trace.dat has no place for (how page stacks were taken), written
    /// by kmemtrace-export as `name\0content`; the id is far above
    /// trace-cmd's own, which skips options it does not know.
    pub const KMEMTRACE_META: u16 = 0x4b4d;
}

/// `name: kmalloc` of a format text.
fn format_name(text: &[u8]) -> Option<String> {
    let t = String::from_utf8_lossy(text);
    let line = t.lines().find_map(|l| l.strip_prefix("name:"))?;
    Some(line.trim().to_string())
}

/// Parses one metadata block (its encoding in trace-cmd's layout) into
/// the files a dump would hold.
fn metadata(id: u16, b: &mut dyn Input, files: &mut BTreeMap<String, Vec<u8>>) -> io::Result<()> {
    match id {
        HEADER_INFO => {
            for name in ["header_page", "header_event"] {
                let tag = b.cstring()?;
                if tag != name {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("expected {name}, found {tag:?}"),
                    ));
                }
                let n = b.num(8)?;
                files.insert(format!("events/{name}"), b.take_vec(n)?);
            }
        }
        FTRACE_EVENTS => formats(b, "ftrace", files)?,
        EVENT_FORMATS => {
            let systems = b.num(4)?;
            for _ in 0..systems {
                let system = b.cstring()?;
                formats(b, &system, files)?;
            }
        }
        KALLSYMS | PRINTK => {
            let n = b.num(4)?;
            let text = b.take_up_to(n)?;
            let name = if id == KALLSYMS {
                "kallsyms"
            } else {
                "printk_formats"
            };
            if !text.is_empty() {
                files.insert(name.into(), text);
            }
        }
        CMDLINES => {
            let n = b.num(8)?;
            files.insert("saved_cmdlines".into(), b.take_up_to(n)?);
        }
        _ => {}
    }
    Ok(())
}

/// A count and that many (u64 size, format text) of `system`.
fn formats(
    b: &mut dyn Input,
    system: &str,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> io::Result<()> {
    let count = b.num(4)?;
    for _ in 0..count {
        let n = b.num(8)?;
        let text = b.take_vec(n)?;
        if let Some(ev) = format_name(&text) {
            files.insert(format!("events/{system}/{ev}/format"), text);
        }
    }
    Ok(())
}

/// One buffer (instance) as the options describe it.
#[derive(Debug, Default)]
struct Buffer {
    name: String,
    clock: Option<String>,
    /// v6: the offset of its `flyrecord` table; v7: its section's.
    offset: u64,
    page_size: u32,
    /// v7: (cpu, offset, size).
    cpus: Vec<(u32, u64, u64)>,
}

/// What the file says, before the buffer is chosen.
struct Reader {
    src: Src,
    path: std::path::PathBuf,
    version: u32,
    page_size: u32,
    algo: Option<Algo>,
    files: BTreeMap<String, Vec<u8>>,
    /// Where each file came from ([`TraceDat::at`]).
    at: BTreeMap<String, u64>,
    buffers: Vec<Buffer>,
    /// CPUSTAT texts, and where their option is, by buffer name and CPU.
    stats: BTreeMap<(String, u32), (Vec<u8>, u64)>,
    stat_buffer: String,
    /// Section offsets from v7 options.
    sections: BTreeMap<u16, u64>,
    notes: Vec<String>,
}

impl Reader {
    fn err(&self, why: impl std::fmt::Display) -> ImportError {
        bad(&self.path, why)
    }

    /// Files read since the last call came from `at`.
    fn mark(&mut self, at: u64) {
        for k in self.files.keys() {
            if !self.at.contains_key(k) {
                self.at.insert(k.clone(), at);
            }
        }
    }

    /// One option (both versions), from its payload, found at `at`.
    fn option(&mut self, id: u16, data: &[u8], at: u64) -> io::Result<()> {
        let text = || {
            let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
            String::from_utf8_lossy(&data[..end]).into_owned()
        };
        let mut b = Buf {
            b: data,
            at: 0,
            order: self.src.order,
        };
        match id {
            opt::CPUSTAT => {
                let t = text();
                if let Some(name) = t.trim().strip_prefix("Buffer:") {
                    self.stat_buffer = name.trim().to_string();
                } else if let Some(cpu) = t
                    .lines()
                    .find_map(|l| l.strip_prefix("CPU:"))
                    .and_then(|c| c.trim().parse().ok())
                {
                    self.stats
                        .insert((self.stat_buffer.clone(), cpu), (t.into_bytes(), at));
                }
            }
            opt::BUFFER => {
                let offset = b.num(8)?;
                let name = b.cstr()?;
                let mut buf = Buffer {
                    name,
                    offset,
                    page_size: self.page_size,
                    ..Buffer::default()
                };
                if self.version >= 7 {
                    buf.clock = Some(b.cstr()?);
                    buf.page_size = b.num(4)? as u32;
                    let n = b.num(4)?;
                    for _ in 0..n {
                        let cpu = b.num(4)? as u32;
                        buf.cpus.push((cpu, b.num(8)?, b.num(8)?));
                    }
                }
                self.buffers.push(buf);
            }
            opt::TRACECLOCK => {
                self.files.insert("trace_clock".into(), text().into_bytes());
            }
            opt::UNAME => {
                // `sysname nodename release machine`.
                let t = text();
                let parts: Vec<&str> = t.split_whitespace().collect();
                for (i, name) in ["uname_s", "uname_n", "uname_r", "uname_m"].iter().enumerate() {
                    if let Some(p) = parts.get(i) {
                        self.files.insert(name.to_string(), p.as_bytes().to_vec());
                    }
                }
            }
            opt::VERSION => self
                .notes
                .push(format!("written by trace-cmd {}", text().trim())),
            opt::DATE | opt::OFFSET => self.notes.push(format!(
                "the file asks for timestamps to be shifted ({} {}): the log keeps the kernel's own",
                if id == opt::DATE { "DATE" } else { "OFFSET" },
                text().trim()
            )),
            opt::TSC2NSEC => self.notes.push(
                "the file converts TSC counts to ns (TSC2NSEC): the log keeps the raw counts".into(),
            ),
            opt::TIME_SHIFT => self.notes.push(
                "a guest's trace with host time sync (TIME_SHIFT): the log keeps the guest's timestamps".into(),
            ),
            opt::BUFFER_TEXT => self
                .notes
                .push("a latency (text) buffer is left out: it holds no ring-buffer pages".into()),
            opt::KMEMTRACE_META => {
                if let Some(at0) = data.iter().position(|&c| c == 0) {
                    let name = String::from_utf8_lossy(&data[..at0]).into_owned();
                    if !name.is_empty() && !name.contains('/') {
                        self.files.insert(name, data[at0 + 1..].to_vec());
                    }
                }
            }
            id @ HEADER_INFO..=CMDLINES if self.version >= 7 => {
                self.sections.insert(id, b.num(8)?);
            }
            _ => {}
        }
        self.mark(at);
        Ok(())
    }
}

/// Opens `path` as a trace.dat and reads everything but the CPU data.
pub fn open(path: &Path) -> Result<TraceDat, ImportError> {
    let f = File::open(path).map_err(|e| bad(path, e))?;
    let len = f.metadata().map_err(|e| bad(path, e))?.len();
    let mut src = Src {
        f,
        order: RunTimeEndian::Little,
        len,
    };
    let head = src.bytes(10).map_err(|e| bad(path, e))?;
    if !looks_like(&head) {
        return Err(bad(path, "not a trace.dat (no trace-cmd magic)"));
    }
    let version: u32 = src
        .cstr()
        .map_err(|e| bad(path, e))?
        .trim()
        .parse()
        .map_err(|_| bad(path, "the trace.dat version is not a number"))?;
    if !VERSIONS.contains(&version) {
        let (a, b) = (VERSIONS.start(), VERSIONS.end());
        return Err(bad(
            path,
            format!("trace.dat version {version}: only {a} and {b} are read"),
        ));
    }
    let fixed = src.bytes(2).map_err(|e| bad(path, e))?;
    src.order = match fixed[0] {
        0 => RunTimeEndian::Little,
        1 => RunTimeEndian::Big,
        b => return Err(bad(path, format!("endianness byte {b}: neither 0 nor 1"))),
    };
    let page_size = src.u32().map_err(|e| bad(path, e))?;
    let mut r = Reader {
        src,
        path: path.to_path_buf(),
        version,
        page_size,
        algo: None,
        files: BTreeMap::new(),
        at: BTreeMap::new(),
        buffers: Vec::new(),
        stats: BTreeMap::new(),
        stat_buffer: String::new(),
        sections: BTreeMap::new(),
        notes: Vec::new(),
    };
    let io = |e: io::Error| bad(path, e);
    if version == 6 {
        read_v6(&mut r).map_err(io)?;
    } else {
        read_v7(&mut r).map_err(io)?;
    }
    finish(r)
}

/// v6: the metadata blocks back to back, the CPU count, options, and the
/// `flyrecord` table (CPU offsets and sizes).
fn read_v6(r: &mut Reader) -> io::Result<()> {
    for id in HEADER_INFO..=CMDLINES {
        let at = r.src.pos()?;
        metadata(id, &mut r.src, &mut r.files)?;
        r.mark(at);
    }
    let cpus = r.src.u32()?;
    r.src.fits(u64::from(cpus), 16)?;
    let mut clock_text = false;
    loop {
        let tag = r.src.bytes(10)?;
        if tag.starts_with(b"options") {
            loop {
                let id = r.src.u16()?;
                if id == opt::DONE {
                    break;
                }
                let size = r.src.u32()?;
                let at = r.src.pos()?;
                let data = r.src.bytes(u64::from(size))?;
                clock_text |= id == opt::TRACECLOCK;
                r.option(id, &data, at)
                    .map_err(|e| context(format!("option {id} ({size} bytes)"), e))?;
            }
        } else if tag.starts_with(b"latency") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a latency trace.dat holds the trace as text, not ring-buffer pages",
            ));
        } else if tag.starts_with(b"flyrecord") {
            break;
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unknown section tag {:?}", String::from_utf8_lossy(&tag)),
            ));
        }
    }
    // The top buffer's table follows; instances' tables are at their
    // BUFFER options' offsets, behind a `flyrecord` tag of their own.
    let top = r.src.pos()?;
    let mut tables = vec![(String::new(), top)];
    for b in &r.buffers {
        tables.push((b.name.clone(), b.offset + 10));
    }
    let mut buffers = Vec::new();
    for (name, at) in tables {
        r.src.seek(at)?;
        let mut b = Buffer {
            name,
            page_size: r.page_size,
            ..Buffer::default()
        };
        for cpu in 0..cpus {
            let (offset, size) = (r.src.u64()?, r.src.u64()?);
            if size > 0 {
                b.cpus.push((cpu, offset, size));
            }
        }
        if clock_text {
            let n = r.src.u64()?;
            b.clock = Some(String::from_utf8_lossy(&r.src.bytes(n)?).into_owned());
        }
        buffers.push(b);
    }
    r.buffers = buffers;
    Ok(())
}

/// A v7 section's header at `at`, which must be section `want`: its flags
/// and payload size.
fn section_header(src: &mut Src, at: u64, want: u16) -> io::Result<(u16, u64)> {
    src.seek(at)?;
    let id = src.u16()?;
    let flags = src.u16()?;
    let _desc = src.u32()?;
    let size = src.u64()?;
    if id != want {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("section at {at} is id {id}, expected {want}"),
        ));
    }
    Ok((flags, size))
}

/// Reads a v7 section's payload at `at`, checking its id and
/// decompressing a compressed one.
fn section(r: &mut Reader, at: u64, want: u16) -> io::Result<Vec<u8>> {
    let (flags, size) = section_header(&mut r.src, at, want)?;
    if flags & 1 == 0 {
        return r.src.bytes(size);
    }
    let algo = r.algo.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a compressed section in a file without compression",
        )
    })?;
    let csize = r.src.u32()?;
    let usize = r.src.u32()?;
    let data = r.src.bytes(u64::from(csize))?;
    decompress(algo, &data, usize)
}

/// v7: the compression, the chain of options sections, then each
/// metadata section through its option's offset.
fn read_v7(r: &mut Reader) -> io::Result<()> {
    let name = r.src.cstr()?;
    let _version = r.src.cstr()?;
    r.algo = match name.as_str() {
        "none" | "" => None,
        "zstd" => Some(Algo::Zstd),
        "zlib" => Some(Algo::Zlib),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("compression {other:?}: only zstd and zlib are read"),
            ))
        }
    };
    if let Some(a) = r.algo {
        r.notes
            .push(format!("trace.dat version 7, {a:?}-compressed"));
    }
    let mut next = r.src.u64()?;
    let mut seen = 0;
    while next != 0 {
        seen += 1;
        if seen > 10_000 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the options sections loop",
            ));
        }
        let at = next;
        let payload = section(r, at, sec::OPTIONS)?;
        next = 0;
        let order = r.src.order;
        let mut b = Buf {
            b: &payload,
            at: 0,
            order,
        };
        while !b.done() {
            let id = b.num(2)? as u16;
            let size = b.num(4)?;
            let data = b.take(size)?;
            if id == opt::DONE {
                next = if data.len() == 8 {
                    number(order, data)
                } else {
                    0
                };
                break;
            }
            r.option(id, data, at)
                .map_err(|e| context(format!("option {id} ({size} bytes)"), e))?;
        }
    }
    for id in HEADER_INFO..=CMDLINES {
        let Some(&at) = r.sections.get(&id) else {
            continue;
        };
        let payload = section(r, at, id)?;
        let order = r.src.order;
        let mut b = Buf {
            b: &payload,
            at: 0,
            order,
        };
        metadata(id, &mut b, &mut r.files)
            .map_err(|e| context(format!("section {id} at {at} ({} bytes)", payload.len()), e))?;
        r.mark(at);
    }
    Ok(())
}

/// Chooses the buffer (the top instance, else the first with data), and
/// places each CPU's data.
fn finish(mut r: Reader) -> Result<TraceDat, ImportError> {
    // v6 always has the top buffer's table, empty when only instances
    // were recorded (`trace-cmd record -B`).
    let pick = r
        .buffers
        .iter()
        .position(|b| b.name.is_empty() && !b.cpus.is_empty())
        .or_else(|| r.buffers.iter().position(|b| !b.cpus.is_empty()))
        .ok_or_else(|| {
            r.err("the trace.dat holds no ring-buffer data (no flyrecord buffer with CPU data)")
        })?;
    let others: Vec<String> = r
        .buffers
        .iter()
        .enumerate()
        .filter(|&(i, b)| i != pick && !b.cpus.is_empty())
        .map(|(_, b)| format!("{:?}", b.name))
        .collect();
    let buffer = r.buffers.swap_remove(pick);
    if !others.is_empty() {
        r.notes.push(format!(
            "the trace.dat holds further buffers (instances {}): the {} one is imported",
            others.join(", "),
            if buffer.name.is_empty() {
                "top".to_string()
            } else {
                format!("{:?}", buffer.name)
            }
        ));
    }
    let mut cpus = BTreeMap::new();
    let compressed = if r.version >= 7 {
        let (flags, _) =
            section_header(&mut r.src, buffer.offset, opt::BUFFER).map_err(|e| r.err(e))?;
        flags & 1 != 0
    } else {
        false
    };
    for &(cpu, offset, size) in &buffer.cpus {
        let data = match (compressed, r.algo) {
            (true, Some(algo)) => CpuData::Chunked {
                algo,
                chunks: chunks(&mut r.src, offset).map_err(|e| r.err(format!("CPU {cpu}: {e}")))?,
            },
            _ => CpuData::Plain { offset, len: size },
        };
        cpus.insert(cpu, data);
    }
    for ((name, cpu), (text, at)) in std::mem::take(&mut r.stats) {
        if name == buffer.name {
            let file = format!("per_cpu/cpu{cpu}/stats");
            r.files.insert(file.clone(), text);
            r.at.insert(file, at);
        }
    }
    if let Some(clock) = &buffer.clock {
        // `[local]` (v6's text after the table) or `local` (v7's option).
        let c = clock.trim().trim_start_matches('[').trim_end_matches(']');
        r.files
            .entry("trace_clock".into())
            .or_insert_with(|| format!("[{c}]").into_bytes());
    }
    let order = match r.src.order {
        RunTimeEndian::Little => "little",
        RunTimeEndian::Big => "big",
    };
    r.files
        .insert("endianness".into(), order.as_bytes().to_vec());
    r.files
        .insert("page_size".into(), r.page_size.to_string().into_bytes());
    if buffer.page_size != r.page_size {
        r.files.insert(
            "buffer_subbuf_size_kb".into(),
            (buffer.page_size / 1024).to_string().into_bytes(),
        );
    }
    r.notes.push(
        "a trace.dat holds the kernel's statistics at the end only: events lost before the recording started are not known".into(),
    );
    // The rest is the file header's (0).
    r.mark(0);
    Ok(TraceDat {
        version: r.version,
        files: r.files,
        at: r.at,
        cpus,
        notes: r.notes,
    })
}

/// A compressed CPU stream's chunks: `u32 count`, then count x (u32
/// csize, u32 usize, csize bytes). The BUFFER option's size is not used:
/// trace-cmd before mid-2023 left the count's 4 bytes out of it.
fn chunks(src: &mut Src, at: u64) -> io::Result<Vec<Chunk>> {
    src.seek(at)?;
    let count = src.u32()?;
    src.fits(u64::from(count), 8)?;
    let mut out = Vec::with_capacity(count.min(1 << 20) as usize);
    let mut pos = at + 4;
    for _ in 0..count {
        let csize = src.u32()?;
        let usize = src.u32()?;
        pos += 8;
        out.push(Chunk {
            offset: pos,
            csize,
            usize,
        });
        pos += u64::from(csize);
        src.seek(pos)?;
    }
    Ok(out)
}

/// Feeds one CPU's pages to `sink`, decompressing chunk by chunk.
pub fn stream_cpu(
    path: &Path,
    data: &CpuData,
    mut sink: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let mut f = File::open(path)?;
    match data {
        CpuData::Plain { offset, len } => {
            f.seek(SeekFrom::Start(*offset))?;
            let mut left = *len;
            let mut buf = vec![0u8; 1 << 20];
            while left > 0 {
                let k = left.min(buf.len() as u64) as usize;
                f.read_exact(&mut buf[..k])?;
                sink(&buf[..k])?;
                left -= k as u64;
            }
        }
        CpuData::Chunked { algo, chunks } => {
            for c in chunks {
                f.seek(SeekFrom::Start(c.offset))?;
                let mut comp = vec![0u8; c.csize as usize];
                f.read_exact(&mut comp)?;
                let plain = decompress(*algo, &comp, c.usize)?;
                if plain.len() != c.usize as usize {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("a chunk gave {} bytes, {} expected", plain.len(), c.usize),
                    ));
                }
                sink(&plain)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_shorter_than_its_size_is_kept_within_its_section() {
        // saved_cmdlines changed while trace-cmd copied it: the size says
        // 100 bytes, the section holds 18.
        let mut block = 100u64.to_le_bytes().to_vec();
        block.extend(b"1 init\n2 kthreadd\n");
        let mut files = BTreeMap::new();
        let order = RunTimeEndian::Little;
        let mut b = Buf {
            b: &block,
            at: 0,
            order,
        };
        metadata(CMDLINES, &mut b, &mut files).unwrap();
        assert_eq!(files["saved_cmdlines"], b"1 init\n2 kthreadd\n");
        // A format list that ends early is still an error.
        let mut short = 2u32.to_le_bytes().to_vec();
        short.extend(50u64.to_le_bytes());
        short.extend(b"name: x\n");
        let mut b = Buf {
            b: &short,
            at: 0,
            order,
        };
        assert!(metadata(FTRACE_EVENTS, &mut b, &mut files).is_err());
    }
}
