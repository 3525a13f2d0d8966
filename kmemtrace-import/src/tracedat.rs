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
use kmemtrace_kernel::{Endian, RunTimeEndian, LINUX_MAX_NR_CPUS};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::rc::Rc;

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
    /// Buffered: the options and tables are read a few bytes at a time.
    f: BufReader<File>,
    order: RunTimeEndian,
    /// The file's length: no count can ask for more than it holds.
    len: u64,
    /// Where the next read starts.
    at: u64,
}

/// The file is damaged: `why`.
fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

impl Src {
    fn seek(&mut self, at: u64) -> io::Result<()> {
        self.f.seek(SeekFrom::Start(at))?;
        self.at = at;
        Ok(())
    }
    /// Moves on `n` bytes from where the last read ended, within the
    /// buffer where it can (a seek to an offset drops the buffer: a table
    /// of tiny chunks would read 8 KiB a chunk).
    fn skip(&mut self, n: u32) -> io::Result<()> {
        self.f.seek_relative(i64::from(n))?;
        self.at += u64::from(n);
        Ok(())
    }
    fn pos(&self) -> u64 {
        self.at
    }
    /// `count` items of at least `each` bytes must fit in the file.
    fn fits(&self, count: u64, each: u64) -> io::Result<()> {
        if count.saturating_mul(each) > self.len {
            return Err(invalid(format!(
                "{count} entries of {each} bytes: more than the file holds"
            )));
        }
        Ok(())
    }
    /// `n` bytes, which must be in the file: a size read from it is
    /// checked before anything is allocated for it.
    fn bytes(&mut self, n: u64) -> io::Result<Vec<u8>> {
        if n > MAX_TEXT {
            return Err(invalid(format!(
                "a block of {n} bytes: too large to be metadata"
            )));
        }
        if n > self.len.saturating_sub(self.at) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{n} bytes at offset {}: past the end of the file ({} bytes)",
                    self.at, self.len
                ),
            ));
        }
        let mut b = vec![0u8; n as usize];
        self.f.read_exact(&mut b)?;
        self.at += n;
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
            self.at += 1;
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

/// Most bytes a compressed section may give: trace-cmd compresses a
/// section's text whole (kallsyms of a big kernel: tens of MiB, within
/// [`MAX_TEXT`]); a claim above this is damage, and reserving it would
/// cost memory the file never holds.
const MAX_INFLATED: u32 = 64 << 20;
/// Most bytes all of a file's compressed sections may give together, as a
/// tracefs dump's files ([`crate::dump`]'s 1 GiB): each section is bounded
/// by [`MAX_INFLATED`], but 10,000 of them in a chain, 2 KiB each, would
/// ask for 640 GiB.
const MAX_SECTIONS_INFLATED: u64 = if cfg!(test) { 96 << 20 } else { 1 << 30 };
/// trace-cmd compresses CPU data in chunks of this many of the buffer's
/// pages (its `PAGES_IN_CHUNK`); a page is a ring-buffer sub-buffer.
const PAGES_IN_CHUNK: u64 = 10;
/// The largest sub-buffer a kernel makes: 128 pages (`buffer_subbuf_size_kb`
/// takes orders up to 7) of 256 KiB, Linux's largest page.
const MAX_SUBBUF: u64 = 128 * (256 << 10);

/// Most bytes a chunk of CPU data may give, with pages of `page_size`
/// bytes (the file's word, bounded by what a kernel makes).
fn max_chunk(page_size: u32) -> u64 {
    (PAGES_IN_CHUNK * u64::from(page_size).min(MAX_SUBBUF)).max(u64::from(MAX_INFLATED))
}
/// Most bytes one stored byte can give: zstd's densest block (3 bytes of
/// header and one repeated byte) gives 128 KiB, zlib's at most 1032 bytes.
/// A chunk claiming more than its bytes can give is damage.
const MAX_RATIO: u64 = 32 << 10;

/// Decompresses `data`, which should give `claim` bytes (at most
/// [`MAX_INFLATED`]): the output grows as it decompresses, and a stream
/// that gives more than the claim is an error.
fn decompress(algo: Algo, data: &[u8], claim: u32) -> io::Result<Vec<u8>> {
    if claim > MAX_INFLATED {
        return Err(invalid(format!(
            "{claim} bytes claimed uncompressed: more than {MAX_INFLATED}, which trace-cmd never writes"
        )));
    }
    let limit = u64::from(claim) + 1;
    let mut out = Vec::new();
    match algo {
        // trace-cmd writes zstd frames without their content size.
        Algo::Zstd => zstd::stream::read::Decoder::with_buffer(data)?
            .take(limit)
            .read_to_end(&mut out)?,
        Algo::Zlib => flate2::read::ZlibDecoder::new(data)
            .take(limit)
            .read_to_end(&mut out)?,
    };
    if out.len() as u64 > u64::from(claim) {
        return Err(invalid(format!(
            "a compressed block gives more than the {claim} bytes it claims"
        )));
    }
    Ok(out)
}

/// A chunk of CPU data decompressed: its claim is bounded already (by
/// [`chunks`], against the page size and its stored bytes), so the output
/// is reserved at once and zstd decodes in one call.
fn inflate_chunk(algo: Algo, data: &[u8], claim: u32) -> io::Result<Vec<u8>> {
    match algo {
        Algo::Zstd => zstd::bulk::decompress(data, claim as usize),
        Algo::Zlib => {
            // One byte more than the claim: a stream giving more is found.
            let mut out = Vec::with_capacity(claim as usize + 1);
            flate2::read::ZlibDecoder::new(data)
                .take(u64::from(claim) + 1)
                .read_to_end(&mut out)?;
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

/// The files a dump would hold, and where in the trace.dat each came from.
#[derive(Debug, Default)]
struct Files {
    content: BTreeMap<String, Vec<u8>>,
    /// [`TraceDat::at`].
    at: BTreeMap<String, u64>,
}

impl Files {
    /// `name` holds `bytes`, read from the block, option or section at
    /// `at`; a name given again keeps where it was first read.
    fn put(&mut self, name: String, bytes: Vec<u8>, at: u64) {
        if !self.at.contains_key(&name) {
            self.at.insert(name.clone(), at);
        }
        self.content.insert(name, bytes);
    }
}

/// Parses one metadata block (its encoding in trace-cmd's layout), found
/// at `at`, into the files a dump would hold.
fn metadata(id: u16, b: &mut dyn Input, files: &mut Files, at: u64) -> io::Result<()> {
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
                files.put(format!("events/{name}"), b.take_vec(n)?, at);
            }
        }
        FTRACE_EVENTS => formats(b, "ftrace", files, at)?,
        EVENT_FORMATS => {
            let systems = b.num(4)?;
            for _ in 0..systems {
                let system = b.cstring()?;
                formats(b, &system, files, at)?;
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
                files.put(name.into(), text, at);
            }
        }
        CMDLINES => {
            let n = b.num(8)?;
            files.put("saved_cmdlines".into(), b.take_up_to(n)?, at);
        }
        _ => {}
    }
    Ok(())
}

/// A count and that many (u64 size, format text) of `system`.
fn formats(b: &mut dyn Input, system: &str, files: &mut Files, at: u64) -> io::Result<()> {
    let count = b.num(4)?;
    for _ in 0..count {
        let n = b.num(8)?;
        let text = b.take_vec(n)?;
        if let Some(ev) = format_name(&text) {
            files.put(format!("events/{system}/{ev}/format"), text, at);
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
    files: Files,
    buffers: Vec<Buffer>,
    /// CPUSTAT texts, and where their option is, by buffer name and CPU.
    /// CPUSTAT texts by buffer name and CPU; the name is shared by all of
    /// its buffer's CPUs, not copied into each key (a long name and many
    /// CPUs would cost their product).
    stats: BTreeMap<(Rc<str>, u32), (Vec<u8>, u64)>,
    stat_buffer: Rc<str>,
    /// Section offsets from v7 options.
    sections: BTreeMap<u16, u64>,
    /// Bytes the compressed sections read so far claimed to give.
    inflated: u64,
    notes: Vec<String>,
}

impl Reader {
    fn err(&self, why: impl std::fmt::Display) -> ImportError {
        bad(&self.path, why)
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
                    self.stat_buffer = name.trim().into();
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
                    if n > u64::from(LINUX_MAX_NR_CPUS) {
                        return Err(invalid(format!(
                            "buffer {:?} lists {n} CPUs: more than Linux's {LINUX_MAX_NR_CPUS}",
                            buf.name
                        )));
                    }
                    for _ in 0..n {
                        let cpu = b.num(4)? as u32;
                        buf.cpus.push((cpu, b.num(8)?, b.num(8)?));
                    }
                }
                self.buffers.push(buf);
            }
            opt::TRACECLOCK => {
                self.files.put("trace_clock".into(), text().into_bytes(), at);
            }
            opt::UNAME => {
                // `sysname nodename release machine`.
                let t = text();
                let parts: Vec<&str> = t.split_whitespace().collect();
                for (i, name) in ["uname_s", "uname_n", "uname_r", "uname_m"].iter().enumerate() {
                    if let Some(p) = parts.get(i) {
                        self.files.put(name.to_string(), p.as_bytes().to_vec(), at);
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
                        self.files.put(name, data[at0 + 1..].to_vec(), at);
                    }
                }
            }
            id @ HEADER_INFO..=CMDLINES if self.version >= 7 => {
                self.sections.insert(id, b.num(8)?);
            }
            _ => {}
        }
        Ok(())
    }
}

/// Opens `path` as a trace.dat and reads everything but the CPU data.
pub fn open(path: &Path) -> Result<TraceDat, ImportError> {
    let f = File::open(path).map_err(|e| bad(path, e))?;
    let len = f.metadata().map_err(|e| bad(path, e))?.len();
    let mut src = Src {
        f: BufReader::new(f),
        order: RunTimeEndian::Little,
        len,
        at: 0,
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
        files: Files::default(),
        buffers: Vec::new(),
        stats: BTreeMap::new(),
        stat_buffer: "".into(),
        sections: BTreeMap::new(),
        inflated: 0,
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
        let at = r.src.pos();
        metadata(id, &mut r.src, &mut r.files, at)?;
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
                let at = r.src.pos();
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
    r.buffers = read_v6_tables(r, cpus, clock_text)?;
    Ok(())
}

/// Longest clock text of a v6 flyrecord table: tracefs' `trace_clock`
/// lists a dozen clocks. Tables may be many, and each keeps its text.
const MAX_CLOCK_TEXT: u64 = 1024;

/// v6's flyrecord tables, each of `cpus` (offset, size) entries and, with
/// a TRACECLOCK option, a clock text: the top buffer's, which follows, and
/// each instance's, at its BUFFER option's offset behind a `flyrecord`
/// tag of its own. Each table is its own bytes of the file: a table named
/// twice, or more entries than the file holds, is damage (read as given,
/// options naming one table would read it again and again).
fn read_v6_tables(r: &mut Reader, cpus: u32, clock_text: bool) -> io::Result<Vec<Buffer>> {
    if cpus > LINUX_MAX_NR_CPUS {
        return Err(invalid(format!(
            "{cpus} CPUs: more than Linux's {LINUX_MAX_NR_CPUS}"
        )));
    }
    let mut tables = vec![(String::new(), r.src.pos())];
    for b in &r.buffers {
        let at = b.offset.checked_add(10).ok_or_else(|| {
            invalid(format!(
                "buffer {:?}: its flyrecord tag at offset {} is past any file",
                b.name, b.offset
            ))
        })?;
        tables.push((b.name.clone(), at));
    }
    let mut seen = BTreeMap::new();
    for (name, at) in &tables {
        if let Some(first) = seen.insert(*at, name) {
            return Err(invalid(format!(
                "buffers {first:?} and {name:?} name the same flyrecord table (offset {at})"
            )));
        }
    }
    r.src
        .fits((tables.len() as u64).saturating_mul(u64::from(cpus)), 16)?;
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
            if n > MAX_CLOCK_TEXT {
                return Err(invalid(format!(
                    "buffer {:?}: a clock text of {n} bytes (tracefs' trace_clock is under {MAX_CLOCK_TEXT})",
                    b.name
                )));
            }
            b.clock = Some(String::from_utf8_lossy(&r.src.bytes(n)?).into_owned());
        }
        buffers.push(b);
    }
    Ok(buffers)
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
    r.inflated = r.inflated.saturating_add(u64::from(usize));
    if r.inflated > MAX_SECTIONS_INFLATED {
        return Err(invalid(format!(
            "the compressed sections claim more than {MAX_SECTIONS_INFLATED} bytes together, which trace-cmd never writes"
        )));
    }
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
    // Each section once: a chain that comes back to one would read it (up
    // to 64 MiB from a few KiB) and take its options again, each time.
    let mut seen = std::collections::BTreeSet::new();
    while next != 0 {
        if !seen.insert(next) || seen.len() > 10_000 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the options sections loop (at offset {next})"),
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
        metadata(id, &mut b, &mut r.files, at)
            .map_err(|e| context(format!("section {id} at {at} ({} bytes)", payload.len()), e))?;
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
    let compressed = if r.version >= 7 {
        let (flags, _) =
            section_header(&mut r.src, buffer.offset, opt::BUFFER).map_err(|e| r.err(e))?;
        flags & 1 != 0
    } else {
        false
    };
    let algo = r.algo.filter(|_| compressed);
    let cpus =
        place_cpus(&mut r.src, algo, buffer.page_size, &buffer.cpus).map_err(|e| r.err(e))?;
    for ((name, cpu), (text, at)) in std::mem::take(&mut r.stats) {
        if *name == *buffer.name {
            let file = format!("per_cpu/cpu{cpu}/stats");
            r.files.content.insert(file.clone(), text);
            r.files.at.insert(file, at);
        }
    }
    // The rest is the file header's (0).
    if let Some(clock) = &buffer.clock {
        // `[local]` (v6's text after the table) or `local` (v7's option).
        let c = clock.trim().trim_start_matches('[').trim_end_matches(']');
        if !r.files.content.contains_key("trace_clock") {
            r.files
                .put("trace_clock".into(), format!("[{c}]").into_bytes(), 0);
        }
    }
    let order = match r.src.order {
        RunTimeEndian::Little => "little",
        RunTimeEndian::Big => "big",
    };
    r.files
        .put("endianness".into(), order.as_bytes().to_vec(), 0);
    r.files
        .put("page_size".into(), r.page_size.to_string().into_bytes(), 0);
    if buffer.page_size != r.page_size {
        r.files.put(
            "buffer_subbuf_size_kb".into(),
            (buffer.page_size / 1024).to_string().into_bytes(),
            0,
        );
    }
    r.notes.push(
        "a trace.dat holds the kernel's statistics at the end only: events lost before the recording started are not known".into(),
    );
    Ok(TraceDat {
        version: r.version,
        files: r.files.content,
        at: r.files.at,
        cpus,
        notes: r.notes,
    })
}

/// The bytes of the file each CPU's data takes, by where they start: where
/// they end, and the CPU.
#[derive(Debug, Default)]
struct Regions(BTreeMap<u64, (u64, u32)>);

impl Regions {
    /// Bytes `start..end` of `cpu`'s data are no other CPU's: trace-cmd
    /// writes each CPU's after the last, and bytes shared would be read,
    /// decoded and written once for each CPU naming them.
    fn check(&self, cpu: u32, start: u64, end: u64) -> io::Result<()> {
        // Regions are apart: only the last one starting before `end` can
        // reach past `start`.
        match self.0.range(..end).next_back() {
            Some((&s, &(e, other))) if start < end && e > start => Err(invalid(format!(
                "CPU {cpu}'s data (offsets {start} to {end}) shares bytes with CPU {other}'s ({s} to {e})"
            ))),
            _ => Ok(()),
        }
    }

    /// `cpu`'s data takes bytes `start..end` ([`Regions::check`]).
    fn claim(&mut self, cpu: u32, start: u64, end: u64) -> io::Result<()> {
        self.check(cpu, start, end)?;
        if start < end {
            self.0.insert(start, (end, cpu));
        }
        Ok(())
    }
}

/// Where each CPU's data is, from the buffer's (cpu, offset, size) list:
/// as is, or in chunks of `algo`. No two CPUs' data may share bytes
/// ([`Regions::claim`]); a CPU's may run past the end of the file (a file
/// cut short: what is there is read).
fn place_cpus(
    src: &mut Src,
    algo: Option<Algo>,
    page_size: u32,
    list: &[(u32, u64, u64)],
) -> io::Result<BTreeMap<u32, CpuData>> {
    // Each CPU's data is streamed, but its head is kept for the byte-order
    // check: a table of millions of empty CPUs (v6 16 bytes, v7 20 each)
    // would hold gigabytes.
    if list.len() > LINUX_MAX_NR_CPUS as usize {
        return Err(invalid(format!(
            "{} CPUs: more than Linux's {LINUX_MAX_NR_CPUS}",
            list.len()
        )));
    }
    let mut regions = Regions::default();
    let mut cpus = BTreeMap::new();
    for &(cpu, offset, size) in list {
        let in_cpu = |e: io::Error| context(format!("CPU {cpu}"), e);
        let data = match algo {
            // trace-cmd writes nothing for a CPU without data: its offset
            // is the next CPU's.
            Some(algo) if size == 0 => CpuData::Chunked {
                algo,
                chunks: Vec::new(),
            },
            Some(algo) => {
                // Its count, before its chunks are read: a table another
                // CPU's data holds is not read again. (One that starts
                // before another's and runs over it is read once, as far
                // as the file goes, and then refused.)
                regions
                    .check(cpu, offset, offset.saturating_add(4))
                    .map_err(in_cpu)?;
                let (chunks, end) = chunks(src, offset, page_size).map_err(in_cpu)?;
                regions.claim(cpu, offset, end).map_err(in_cpu)?;
                CpuData::Chunked { algo, chunks }
            }
            None => {
                let end = offset.checked_add(size).ok_or_else(|| {
                    in_cpu(invalid(format!(
                        "{size} bytes at offset {offset} end past any file"
                    )))
                })?;
                regions.claim(cpu, offset, end).map_err(in_cpu)?;
                CpuData::Plain { offset, len: size }
            }
        };
        cpus.insert(cpu, data);
    }
    Ok(cpus)
}

/// A compressed CPU stream's chunks: `u32 count`, then count x (u32
/// csize, u32 usize, csize bytes), and where the last one ends. The BUFFER
/// option's size is not used: trace-cmd before mid-2023 left the count's 4
/// bytes out of it. A chunk claiming more than ten pages of `page_size`
/// ([`max_chunk`]), or more than its bytes can give ([`MAX_RATIO`]), is
/// damage.
fn chunks(src: &mut Src, at: u64, page_size: u32) -> io::Result<(Vec<Chunk>, u64)> {
    let max = max_chunk(page_size);
    src.seek(at)?;
    let count = src.u32()?;
    src.fits(u64::from(count), 8)?;
    let mut out = Vec::with_capacity(count.min(1 << 20) as usize);
    let mut pos = at + 4;
    for i in 0..count {
        let csize = src.u32()?;
        let usize = src.u32()?;
        pos += 8;
        // trace-cmd writes no chunk of nothing (the in-place reader
        // tells pieces apart by where their output begins).
        if usize == 0 || u64::from(usize) > max || u64::from(usize) > u64::from(csize) * MAX_RATIO {
            return Err(invalid(format!(
                "chunk {i} at offset {pos}: {csize} bytes claim to give {usize} (1 to {max}, and {MAX_RATIO} per byte)"
            )));
        }
        out.push(Chunk {
            offset: pos,
            csize,
            usize,
        });
        pos += u64::from(csize);
        src.skip(csize)?;
    }
    Ok((out, pos))
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
            let len = f.metadata()?.len();
            for c in chunks {
                // A chunk's size is checked before its bytes are allocated.
                if u64::from(c.csize) > len.saturating_sub(c.offset) {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "a chunk of {} bytes at offset {} runs past the end of the file ({len} bytes)",
                            c.csize, c.offset
                        ),
                    ));
                }
                f.seek(SeekFrom::Start(c.offset))?;
                let mut comp = vec![0u8; c.csize as usize];
                f.read_exact(&mut comp)?;
                let plain = inflate_chunk(*algo, &comp, c.usize)?;
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
        let mut files = Files::default();
        let order = RunTimeEndian::Little;
        let mut b = Buf {
            b: &block,
            at: 0,
            order,
        };
        metadata(CMDLINES, &mut b, &mut files, 0).unwrap();
        assert_eq!(files.content["saved_cmdlines"], b"1 init\n2 kthreadd\n");
        // A format list that ends early is still an error.
        let mut short = 2u32.to_le_bytes().to_vec();
        short.extend(50u64.to_le_bytes());
        short.extend(b"name: x\n");
        let mut b = Buf {
            b: &short,
            at: 0,
            order,
        };
        assert!(metadata(FTRACE_EVENTS, &mut b, &mut files, 0).is_err());
    }

    /// A trace.dat built in a test, in either byte order.
    struct Out {
        b: Vec<u8>,
        big: bool,
        /// Where each option's payload starts.
        options: Vec<u64>,
    }

    impl Out {
        fn new(big: bool) -> Self {
            Out {
                b: Vec::new(),
                big,
                options: Vec::new(),
            }
        }
        /// The u64 at `at` made `v`.
        fn patch(&mut self, at: u64, v: u64) {
            let b = if self.big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            self.b[at as usize..at as usize + 8].copy_from_slice(&b);
        }
        fn n(&mut self, v: u64, width: usize) -> &mut Self {
            let all = if self.big {
                v.to_be_bytes()[8 - width..].to_vec()
            } else {
                v.to_le_bytes()[..width].to_vec()
            };
            self.b.extend(all);
            self
        }
        fn u16(&mut self, v: u16) -> &mut Self {
            self.n(v.into(), 2)
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.n(v.into(), 4)
        }
        fn u64(&mut self, v: u64) -> &mut Self {
            self.n(v, 8)
        }
        fn raw(&mut self, b: &[u8]) -> &mut Self {
            self.b.extend_from_slice(b);
            self
        }
        fn pos(&self) -> u64 {
            self.b.len() as u64
        }
        /// An option: id, size, payload.
        fn opt(&mut self, id: u16, payload: &[u8]) -> &mut Self {
            self.u16(id).u32(payload.len() as u32);
            self.options.push(self.pos());
            self.raw(payload)
        }
        /// Written to a file, opened.
        fn open(&self) -> (tempfile::NamedTempFile, Result<TraceDat, ImportError>) {
            let f = tempfile::NamedTempFile::new().unwrap();
            std::fs::write(f.path(), &self.b).unwrap();
            let t = open(f.path());
            (f, t)
        }
    }

    /// The file header of `version`, and for v6 the metadata blocks (all
    /// empty) and the CPU count.
    fn head(version: u32, big: bool, cpus: u32) -> Out {
        let mut o = Out::new(big);
        o.raw(MAGIC)
            .raw(format!("{version}\0").as_bytes())
            .raw(&[big as u8, 8])
            .u32(4096);
        if version == 6 {
            o.raw(b"header_page\0").u64(0).raw(b"header_event\0").u64(0);
            o.u32(0).u32(0).u32(0).u32(0).u64(0).u32(cpus);
        }
        o
    }

    /// A v6 file whose options are `options` (id, payload) and whose top
    /// table gives each CPU the (offset, size) `table` says, offsets from
    /// the end of the table; `data` follows the table.
    fn v6(big: bool, options: &[(u16, Vec<u8>)], table: &[(u64, u64)], data: &[u8]) -> Out {
        let mut o = head(6, big, table.len() as u32);
        o.raw(b"options  \0");
        for (id, payload) in options {
            o.opt(*id, payload);
        }
        o.u16(opt::DONE).raw(b"flyrecord\0");
        let data_at = o.pos() + 16 * table.len() as u64;
        for &(offset, size) in table {
            o.u64(data_at + offset).u64(size);
        }
        o.raw(data);
        o
    }

    /// A v7 file, zstd-compressed when `chunked`, with one options section
    /// holding the top buffer's BUFFER option: its CPUs at the (cpu,
    /// offset, size) `cpus` says, offsets from the start of `data`, which
    /// is the buffer section's payload.
    fn v7(big: bool, chunked: bool, cpus: &[(u32, u64, u64)], data: &[u8]) -> Out {
        let mut o = head(7, big, 0);
        o.raw(if chunked {
            b"zstd\x001.5\0"
        } else {
            b"none\0\0"
        });
        let options_at = o.pos() + 8;
        // The BUFFER option (6 + 8 + 7 + 4 + 4 bytes and 20 a CPU) and DONE.
        let options_len = 6 + 23 + 20 * cpus.len() as u64 + 14;
        let section_at = options_at + 16 + options_len;
        let data_at = section_at + 16;
        let mut buffer = Out::new(big);
        buffer.u64(section_at).raw(b"\0local\0").u32(4096);
        buffer.u32(cpus.len() as u32);
        for &(cpu, offset, size) in cpus {
            buffer.u32(cpu).u64(data_at.wrapping_add(offset)).u64(size);
        }
        o.u64(options_at);
        o.u16(sec::OPTIONS).u16(0).u32(0).u64(options_len);
        o.opt(opt::BUFFER, &buffer.b);
        o.u16(opt::DONE).u32(8).u64(0);
        assert_eq!(o.pos(), section_at);
        o.u16(opt::BUFFER).u16(chunked as u16).u32(0);
        o.u64(data.len() as u64).raw(data);
        o
    }

    /// zstd chunks of `pages` (a count, then csize, usize and the frame of
    /// each), in `big` order or not.
    fn chunk_table(big: bool, pages: &[&[u8]]) -> Vec<u8> {
        let mut o = Out::new(big);
        o.u32(pages.len() as u32);
        for p in pages {
            let z = zstd::bulk::compress(p, 1).unwrap();
            o.u32(z.len() as u32).u32(p.len() as u32).raw(&z);
        }
        o.b
    }

    /// Every CPU's data as `stream_cpu` gives it.
    fn streams(path: &Path, t: &TraceDat) -> BTreeMap<u32, Vec<u8>> {
        let mut all = BTreeMap::new();
        for (&cpu, data) in &t.cpus {
            let mut bytes = Vec::new();
            stream_cpu(path, data, |b| {
                bytes.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            all.insert(cpu, bytes);
        }
        all
    }

    fn refused(t: Result<TraceDat, ImportError>, why: &str) {
        match t {
            Ok(t) => panic!("opened, {} CPUs; {why} expected", t.cpus.len()),
            Err(e) => assert!(e.to_string().contains(why), "{e}"),
        }
    }

    #[test]
    fn cpus_whose_data_shares_bytes_are_refused_apart_ones_read() {
        let page = |n: u8| vec![n; 4096];
        for big in [false, true] {
            // v6: each CPU after the last (a CPU without data: 0, 0).
            let data = [page(1), page(2)].concat();
            let o = v6(big, &[], &[(0, 4096), (0, 0), (4096, 4096)], &data);
            let (f, t) = o.open();
            let t = t.unwrap();
            let got = streams(f.path(), &t);
            assert_eq!(got.keys().copied().collect::<Vec<_>>(), [0, 2]);
            assert!(got[&0] == page(1) && got[&2] == page(2));
            // v6: four CPUs naming one page, or one the whole file.
            let o = v6(big, &[], &[(0, 4096); 4], &page(1));
            refused(o.open().1, "CPU 1's data (offsets");
            let o = v6(big, &[], &[(0, 8192), (4096, 4096)], &data);
            refused(o.open().1, "shares bytes with CPU 0's");
            // v7, plain: the same, and a region ending past 2^64.
            let o = v7(big, false, &[(0, 0, 4096), (1, 4096, 4096)], &data);
            let (f, t) = o.open();
            assert_eq!(streams(f.path(), &t.unwrap())[&1], page(2));
            let o = v7(big, false, &[(0, 0, 8192), (1, 0, 8192)], &data);
            refused(o.open().1, "shares bytes");
            let o = v7(big, false, &[(0, 0, 4096), (1, 4096, u64::MAX)], &data);
            refused(o.open().1, "end past any file");
        }
    }

    #[test]
    fn a_chunk_table_is_read_for_one_cpu_only() {
        let (a, b) = (vec![1u8; 4096], vec![2u8; 4096]);
        for big in [false, true] {
            let t0 = chunk_table(big, &[&a, &b]);
            let t1 = chunk_table(big, &[&b]);
            let data = [t0.clone(), t1].concat();
            let at1 = t0.len() as u64;
            // CPU 1 without data (size 0) has CPU 2's offset, as trace-cmd
            // writes it.
            let cpus = [(0, 0, at1), (1, at1, 0), (2, at1, 10)];
            let (f, t) = v7(big, true, &cpus, &data).open();
            let got = streams(f.path(), &t.unwrap());
            assert!(got[&0] == [a.clone(), b.clone()].concat());
            assert!(got[&1].is_empty() && got[&2] == b);
            // Three CPUs naming one table: each would be given its chunks.
            let cpus = [(0, 0, at1), (1, 0, at1), (2, 0, at1)];
            refused(v7(big, true, &cpus, &data).open().1, "shares bytes");
            // One naming a table inside another's.
            let inside = at1 - 8;
            let cpus = [(0, 0, at1), (1, inside, 4)];
            refused(v7(big, true, &cpus, &data).open().1, "shares bytes");
        }
    }

    #[test]
    fn no_more_cpus_than_linux_has() {
        let n = LINUX_MAX_NR_CPUS;
        // CPUs without data take no bytes but their entry.
        let cpus: Vec<(u32, u64, u64)> = (0..n).map(|c| (c, 0, 0)).collect();
        assert_eq!(
            v7(false, true, &cpus, &[]).open().1.unwrap().cpus.len(),
            n as usize
        );
        let more: Vec<(u32, u64, u64)> = (0..=n).map(|c| (c, 0, 0)).collect();
        refused(
            v7(false, true, &more, &[]).open().1,
            "more than Linux's 8192",
        );
        let mut table = vec![(0, 0); n as usize + 1];
        table[0].1 = 4096;
        refused(v6(false, &[], &table, &[1; 4096]).open().1, "8193 CPUs");
    }

    #[test]
    fn compressed_sections_are_bounded_together() {
        // A chain of options sections, each giving 40 MiB (an unknown
        // option, then DONE with the next section's offset): each alone
        // is within MAX_INFLATED, but not three together.
        let chain = |sections: u64| {
            let mut o = head(7, false, 0);
            o.raw(b"zstd\x001.5\0");
            let first = o.pos() + 8;
            let at = |k: u64| first + k * 65536;
            o.u64(at(0));
            for k in 0..sections {
                o.raw(&vec![0; (at(k) - o.pos()) as usize]);
                let next = if k + 1 < sections { at(k + 1) } else { 0 };
                let mut payload = Out::new(false);
                payload.u16(0xfff0).u32(40 << 20).raw(&vec![0; 40 << 20]);
                payload.u16(opt::DONE).u32(8).u64(next);
                let z = zstd::bulk::compress(&payload.b, 1).unwrap();
                o.u16(sec::OPTIONS).u16(1).u32(0).u64(8 + z.len() as u64);
                o.u32(z.len() as u32).u32(payload.b.len() as u32).raw(&z);
            }
            o
        };
        // Two read (and then no buffer is found).
        let e = chain(2).open().1.unwrap_err().to_string();
        assert!(!e.contains("together"), "{e}");
        refused(
            chain(3).open().1,
            "claim more than 100663296 bytes together",
        );
    }

    #[test]
    fn a_v6_flyrecord_table_is_read_once() {
        let page = vec![7u8; 4096];
        let mut table = [(0, 0); 8];
        table[0] = (0, 4096);
        for big in [false, true] {
            // Instances (BUFFER options, their offsets set once the layout
            // is known) naming the top table: 10 bytes after its tag.
            let instances = |n: usize| {
                let mut o = Out::new(big);
                o.u64(0).raw(b"i\0");
                let o = v6(big, &vec![(opt::BUFFER, o.b); n], &table, &page);
                let top_tag = o.pos() - 4096 - 8 * 16 - 10;
                (o, top_tag)
            };
            let (mut o, top_tag) = instances(2);
            for at in o.options.clone() {
                o.patch(at, top_tag);
            }
            refused(o.open().1, "name the same flyrecord table");
            // Tables 16 bytes apart: more entries than the file holds.
            let (mut o, top_tag) = instances(59);
            for (k, at) in o.options.clone().into_iter().enumerate() {
                o.patch(at, top_tag + 16 * (k as u64 + 1));
            }
            refused(o.open().1, "more than the file holds");
            // An instance's table of its own is read.
            let (mut o, _) = instances(1);
            o.patch(o.options[0], o.pos());
            o.raw(b"flyrecord\0");
            for _ in 0..8 {
                o.u64(0).u64(0);
            }
            let (_f, t) = o.open();
            assert_eq!(t.unwrap().cpus.len(), 1);
            // A BUFFER offset whose table would be past 2^64.
            let (mut o, _) = instances(1);
            o.patch(o.options[0], u64::MAX - 5);
            refused(o.open().1, "past any file");
        }
    }

    #[test]
    fn a_v6_clock_text_longer_than_tracefs_writes_is_refused() {
        let page = vec![7u8; 4096];
        for big in [false, true] {
            for (text, ok) in [(&b"[local] global"[..], true), (&[b'x'; 2000][..], false)] {
                let mut d = Out::new(big);
                d.u64(text.len() as u64).raw(text).raw(&page);
                let table = [(8 + text.len() as u64, 4096)];
                let o = v6(big, &[(opt::TRACECLOCK, b"local\0".to_vec())], &table, &d.b);
                match ok {
                    true => assert_eq!(o.open().1.unwrap().cpus.len(), 1),
                    false => refused(o.open().1, "a clock text of 2000 bytes"),
                }
            }
        }
    }

    #[test]
    fn an_options_chain_coming_back_is_refused() {
        for big in [false, true] {
            let mut o = v7(big, false, &[(0, 0, 4096)], &[1; 4096]);
            assert!(o.open().1.is_ok());
            // The options section: its header (16 bytes) and the BUFFER
            // option's (6) before the payload; DONE's next after the
            // payload (one CPU: 43 bytes) and its own 6.
            let options_at = o.options[0] - 22;
            let header_says = &o.b[options_at as usize - 8..options_at as usize];
            let want = if big {
                options_at.to_be_bytes()
            } else {
                options_at.to_le_bytes()
            };
            assert_eq!(header_says, want);
            o.patch(o.options[0] + 43 + 6, options_at);
            // At once: the section is not read again before that is seen.
            refused(
                o.open().1,
                &format!("the options sections loop (at offset {options_at})"),
            );
        }
    }

    #[test]
    fn a_chunk_may_hold_ten_of_the_largest_sub_buffers() {
        // 4 KiB pages: the sections' bound. 64 KiB pages and 128-page
        // sub-buffers (8 MiB): 80 MiB chunks. A file's page size past any
        // kernel's counts as the largest sub-buffer.
        assert_eq!(max_chunk(4096), 64 << 20);
        assert_eq!(max_chunk(8 << 20), 80 << 20);
        assert_eq!(max_chunk(u32::MAX), 10 * 128 * (256 << 10));
    }

    #[test]
    fn claimed_sizes_are_checked_before_anything_is_reserved() {
        let page = vec![3u8; 4096];
        let mut z = Vec::new();
        let mut enc = flate2::write::ZlibEncoder::new(&mut z, flate2::Compression::best());
        std::io::Write::write_all(&mut enc, &page).unwrap();
        enc.finish().unwrap();
        let zs = zstd::bulk::compress(&page, 1).unwrap();
        for (algo, data) in [(Algo::Zlib, &z), (Algo::Zstd, &zs)] {
            assert!(decompress(algo, data, 4096).unwrap() == page);
            // A claim of 4 GiB, and a stream giving more than it claims.
            let e = decompress(algo, data, u32::MAX).unwrap_err();
            assert!(e.to_string().contains("claimed uncompressed"), "{e}");
            let e = decompress(algo, data, 100).unwrap_err();
            assert!(e.to_string().contains("more than the 100 bytes"), "{e}");
        }
        for big in [false, true] {
            // A chunk claiming more than MAX_INFLATED, or more than its
            // bytes can give.
            // A chunk of nothing, which trace-cmd never writes.
            for (csize, usize) in [
                (4096, MAX_INFLATED + 4096),
                (16, 16 * 32768 + 4096),
                (16, 0),
            ] {
                let mut t = Out::new(big);
                t.u32(1).u32(csize).u32(usize).raw(&vec![0; csize as usize]);
                let o = v7(big, true, &[(0, 0, t.pos())], &t.b);
                refused(o.open().1, "claim to give");
            }
        }
        // A chunk of 4 GiB in a small file: refused before it is read.
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), [0u8; 64]).unwrap();
        let chunk = Chunk {
            offset: 8,
            csize: u32::MAX,
            usize: 4096,
        };
        let data = CpuData::Chunked {
            algo: Algo::Zstd,
            chunks: vec![chunk],
        };
        let e = stream_cpu(f.path(), &data, |_| Ok(())).unwrap_err();
        assert!(
            e.to_string().contains("runs past the end of the file"),
            "{e}"
        );
    }

    #[test]
    fn cpu_stats_go_to_their_own_buffer_only() {
        // The top buffer's CPUs (no `Buffer:` line before them), then an
        // instance with a long name and many CPUs: its name is kept once,
        // not once a CPU, and none of its texts lands on the top buffer.
        let mut options = vec![(opt::CPUSTAT, b"CPU: 0\nentries: 5\n".to_vec())];
        let long = format!("Buffer: {}", "i".repeat(64 << 10));
        options.push((opt::CPUSTAT, long.into_bytes()));
        for cpu in 0..2_000 {
            let text = format!("CPU: {cpu}\nentries: 7\n");
            options.push((opt::CPUSTAT, text.into_bytes()));
        }
        let o = v6(true, &options, &[(0, 4096)], &[1; 4096]);
        let (_f, t) = o.open();
        let t = t.unwrap();
        assert_eq!(&t.files["per_cpu/cpu0/stats"][..], b"CPU: 0\nentries: 5\n");
        assert!(!t.files.contains_key("per_cpu/cpu1/stats"));
    }

    #[test]
    fn files_in_options_are_placed_where_each_was_first_read() {
        // Each file's place is noted as it is read (noting them all again
        // after each option was quadratic in their number).
        let mut options: Vec<(u16, Vec<u8>)> = (0..2_000)
            .map(|i| (opt::KMEMTRACE_META, format!("f{i}\0x").into_bytes()))
            .collect();
        // f1 again: its place stays the first, its content is the last.
        options.push((opt::KMEMTRACE_META, b"f1\0y".to_vec()));
        let o = v6(true, &options, &[(0, 4096)], &[1; 4096]);
        let (_f, t) = o.open();
        let t = t.unwrap();
        assert_eq!(
            (&t.files["f1999"][..], &t.files["f1"][..]),
            (&b"x"[..], &b"y"[..])
        );
        for i in [0, 1, 1000, 1999] {
            assert_eq!(t.at[&format!("f{i}")], o.options[i], "f{i}");
        }
        assert_eq!(t.at["page_size"], 0);
    }
}
