//! A whole log opened for analysis: its metadata decoded, its CPU data
//! blocks indexed, and each CPU's sub-buffers visited in order.
//!
//! [`Log::open`] reads the log once from front to back (a file, or stdin
//! spooled to an unlinked temporary file), checks every block's CRC, keeps
//! the metadata and an index of the CPU data blocks, and records every
//! problem with its offset instead of stopping. Analyses then read each
//! CPU's blocks back by offset, from several threads at once if they like
//! (`Log` is `Sync`): memory grows with the metadata and the index, not with
//! the log's length.
//!
//! Another input is opened as a `Log` in place with a [`LogBuilder`]: the
//! records it amounts to, judged as a log's blocks are, and a
//! [`ChunkStore`] its CPU data is read from on demand, so that nothing
//! downstream knows which input it reads.

use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::{decode_payload_into, BlockHeader, BlockType, BLOCK_HEADER_LEN};
use kmemtrace_format::reader::{Item, LogReader, OpenError, RawBlock, Truncation};
use kmemtrace_format::records::{
    CpuDataHeader, CpuTotal, EndRecord, Meta, MetaKind, NoteRecord, Record, SegmentRecord,
    StatsPhase, StatsRecord, CPU_DATA_HEADER_LEN,
};
use kmemtrace_kernel::{
    CpuCounters, CpuStats, EventFormat, HeaderEvent, HeaderPage, Kallsyms, KallsymsError,
    KmemDecoder, PidMap, RunTimeEndian, SubBufError, SubBufLayout, SubBuffer,
};
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Something wrong in a log, found while opening it. Opening goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// File offset (of the block, or of the damage).
    pub offset: u64,
    pub kind: ProblemKind,
    pub what: String,
}

/// What sort of thing a [`Problem`] is, for tools that sort or count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// Bytes that are not intact blocks, skipped to the next intact one
    /// (FORMAT.md §5.2).
    Damage { skipped: u64 },
    /// The file header is damaged; the log is read on from its intact
    /// ARCH block.
    FileHeader,
    /// An intact block whose payload cannot be used: it does not
    /// decompress, or its record does not decode.
    BadBlock,
    /// A block out of its place: after END, a second ARCH or END, ARCH not
    /// first, CPU data before ARCH.
    Structure,
    /// The arch tag is implausible, or disagrees with the log's header_page.
    Arch,
    /// A META or STATS record whose content does not parse.
    Metadata,
    /// Found in the sub-buffers of a CPU_DATA block.
    Data,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.what)
    }
}

/// Why a log cannot be analysed at all.
#[derive(Debug)]
pub enum LogError {
    Io(io::Error),
    /// Not a log, or a format version this library does not read.
    Header(OpenError),
    /// No intact ARCH block: nothing in the log can be decoded.
    NoArch(String),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io(e) => write!(f, "{e}"),
            LogError::Header(e) => write!(f, "{e}"),
            LogError::NoArch(s) => write!(f, "{s}"),
        }
    }
}
impl std::error::Error for LogError {}

impl From<io::Error> for LogError {
    fn from(e: io::Error) -> Self {
        LogError::Io(e)
    }
}

/// Where a CPU_DATA block is, and what its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuBlockRef {
    /// File offset of the block header.
    pub offset: u64,
    pub header: BlockHeader,
    pub cpu: u32,
    pub block_seq: u64,
    pub first_subbuf: u64,
    pub count: u32,
}

/// Buffers and a zstd context for reading CPU_DATA blocks back with
/// [`Log::read_cpu_block_into`], kept by the caller (one per thread) so
/// that reading a block allocates nothing and creates no zstd context
/// once the buffers have grown to a block's size.
#[derive(Default)]
pub struct BlockScratch {
    /// The block as stored (header and payload).
    stored: Vec<u8>,
    /// The decoded payload (may be longer than the last one).
    out: Vec<u8>,
    dec: kmemtrace_format::block::PayloadDecoder,
    /// A piece of an input read in place ([`crate::in_place`]).
    inflated: crate::in_place::Inflated,
}

impl BlockScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// The two buffers, for a [`ChunkStore`] to read a chunk with: one for
    /// the bytes as stored, one for the sub-buffers they give.
    pub fn buffers(&mut self) -> (&mut Vec<u8>, &mut Vec<u8>) {
        (&mut self.stored, &mut self.out)
    }

    /// [`BlockScratch::buffers`], and the decompressed piece an input read
    /// in place keeps.
    pub(crate) fn piece_buffers(
        &mut self,
    ) -> (&mut Vec<u8>, &mut Vec<u8>, &mut crate::in_place::Inflated) {
        (&mut self.stored, &mut self.out, &mut self.inflated)
    }
}

impl fmt::Debug for BlockScratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockScratch")
            .field("stored", &self.stored.len())
            .field("out", &self.out.len())
            .field("dec", &self.dec)
            .finish_non_exhaustive()
    }
}

/// A statistics snapshot, parsed where its text parses.
#[derive(Debug, Clone)]
pub struct StatsSnapshot {
    pub offset: u64,
    pub record: StatsRecord,
    pub parsed: Option<CpuStats>,
}

/// One CPU's counters over a capture ([`Log::cpu_counters`]) and the
/// snapshots they run between.
#[derive(Debug, Clone, Copy)]
pub struct CountersRun<'a> {
    /// The start snapshot; `None`: counted from the buffer's creation.
    pub start: Option<&'a StatsSnapshot>,
    /// The last snapshot taken: the end, else a periodic one.
    pub end: &'a StatsSnapshot,
    pub counters: CpuCounters,
}

/// A CPU's counters from its snapshots that parse, in file order
/// ([`Log::cpu_counters`]).
fn counters_run<'a>(mine: &[&'a StatsSnapshot]) -> Option<CountersRun<'a>> {
    let last_in = |phase| mine.iter().rev().find(|s| s.record.phase == phase).copied();
    let start = mine
        .iter()
        .find(|s| s.record.phase == StatsPhase::Start)
        .copied();
    let end = last_in(StatsPhase::End).or_else(|| last_in(StatsPhase::Periodic))?;
    let from = start.map_or(0, |s| s.offset);
    let looks = mine
        .iter()
        .filter(|s| s.record.phase != StatsPhase::Start && s.offset > from)
        .take_while(|s| s.offset <= end.offset)
        .filter_map(|s| s.parsed.as_ref());
    let zero = CpuStats::default();
    let first = start.and_then(|s| s.parsed.as_ref()).unwrap_or(&zero);
    Some(CountersRun {
        start,
        end,
        counters: CpuCounters::over(first, looks),
    })
}

/// One sub-buffer handed to [`Log::visit_cpu`].
#[derive(Debug)]
pub struct SubBufVisit<'a> {
    pub block: &'a CpuBlockRef,
    /// Index in this CPU's stream (`first_subbuf` + position in the block).
    pub index: u64,
    /// The decoded header, or why it does not decode.
    pub subbuf: Result<SubBuffer<'a>, SubBufError>,
    /// The raw bytes.
    pub raw: &'a [u8],
}

/// Where the CPU data of a log opened from another input is (a trace-cmd
/// trace.dat or a capture-script dump read in place): its chunks are read
/// from there, on demand, as a log's CPU_DATA blocks are read from the
/// log.
pub trait ChunkStore: Send + Sync {
    /// A chunk's sub-buffer bytes, read into `scratch`.
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem>;
    /// The input's byte offset of sub-buffer `index` of a chunk, where the
    /// input stores it as is (`None`: compressed).
    fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64>;
}

/// Where the log's CPU data is read back from.
pub(crate) enum Backing {
    /// The log file itself.
    File(File),
    /// The files of a rotated capture, each from its offset in the
    /// capture read as one log ([`crate::capture`]), in that order.
    Files(Vec<(u64, File)>),
    /// Another input, read in place.
    Store(Box<dyn ChunkStore>),
}

/// What a [`Log`] was opened from: a kmemtrace log, or another input read
/// in place as the log its import (`kmemtraced --import`) would write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    /// A kmemtrace log.
    #[default]
    Log,
    /// A trace-cmd trace.dat.
    TraceDat,
    /// A kmemtrace-capture.sh dump (a directory, or a tar).
    Dump,
}

impl Origin {
    /// What the input is, where it is not a kmemtrace log.
    pub fn foreign(self) -> Option<&'static str> {
        match self {
            Origin::Log => None,
            Origin::TraceDat => Some("a trace-cmd trace.dat"),
            Origin::Dump => Some("a kmemtrace-capture.sh dump"),
        }
    }

    /// Whether the log's sizes and offsets are the input file's own. A
    /// dump's are those of the log its import would write: its data is
    /// spread over files, in a tar compressed as a whole.
    pub fn offsets_are_the_inputs(self) -> bool {
        self != Origin::Dump
    }

    /// What [`crate::open_log`] appends to the input's name, so that
    /// messages say what was read.
    pub(crate) fn name_suffix(self) -> &'static str {
        match self {
            Origin::Log => "",
            Origin::TraceDat => " (trace.dat)",
            Origin::Dump => " (capture-script dump)",
        }
    }
}

/// A log opened for analysis.
pub struct Log {
    /// A label for messages: the path, or `<stdin>`.
    pub name: String,
    /// What it was opened from.
    pub origin: Origin,
    pub version: (u16, u16),
    pub arch: ArchTag,
    pub endian: RunTimeEndian,
    pub layout: SubBufLayout,
    pub header_page: Option<HeaderPage>,
    pub header_event: Option<HeaderEvent>,
    /// Every META block, latest per (kind, name), in first-seen order.
    pub metas: Vec<Meta>,
    /// Parsed event formats (those that parse).
    pub formats: Vec<EventFormat>,
    pub kallsyms: Option<Kallsyms>,
    pub pids: PidMap,
    /// CPU -> NUMA node.
    pub cpu_nodes: BTreeMap<u32, u32>,
    pub stats: Vec<StatsSnapshot>,
    pub notes: Vec<NoteRecord>,
    pub end: Option<EndRecord>,
    /// Offset of the END block, if any.
    pub end_offset: Option<u64>,
    /// Damage, undecodable blocks and metadata that does not parse.
    pub problems: Vec<Problem>,
    /// Where the input was cut, if it was.
    pub truncated: Option<Truncation>,
    /// CPU_DATA blocks in file order.
    pub blocks: Vec<CpuBlockRef>,
    /// Bytes in the log.
    pub len: u64,
    /// Blocks of types this version does not know, skipped.
    pub unknown_blocks: u64,
    /// Intact blocks read before the END block (all of them if there is
    /// none), ARCH included: what END's `blocks` total counts.
    pub blocks_before_end: u64,
    /// Where the files read lie in their rotated capture, and what of it
    /// rotation removed (`None`: not a rotated capture).
    pub rotation: Option<crate::capture::Rotation>,
    pub(crate) backing: Backing,
}

/// Copies everything read into a spool file, so a pipe can be read back.
struct Tee<R, W> {
    src: R,
    spool: W,
}
impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read(buf)?;
        self.spool.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// An unlinked temporary file (gone when closed, whatever happens).
fn anonymous_temp_file() -> io::Result<File> {
    let dir = std::env::var_os("TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/tmp".into());
    for n in 0..100u32 {
        let p = dir.join(format!(
            ".kmemtrace-spool-{}-{}-{n}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => {
                std::fs::remove_file(&p)?;
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("cannot create a temporary spool file"))
}

/// Parses `cpu node` lines.
fn parse_cpu_nodes(text: &str) -> BTreeMap<u32, u32> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// Indexes a CPU_DATA block from its fixed header. A compressed payload
/// is decompressed only as far as the header (the first zstd block, which
/// writers end right after the header, FORMAT.md §5), not whole: the rest
/// is decompressed, and checked against `raw_len`, when the block is read
/// back ([`Log::read_cpu_block`]). `dctx` is kept from block to block.
fn cpu_block_ref(
    b: &RawBlock,
    subbuf_size: u32,
    dctx: &mut Option<zstd::zstd_safe::DCtx<'static>>,
) -> Result<CpuBlockRef, String> {
    use kmemtrace_format::block::{FLAG_KPACK, FLAG_ZSTD, KNOWN_FLAGS};
    let h = &b.header;
    let what = |e: kmemtrace_format::tlv::TlvError| format!("CPU_DATA block: {e}");
    let d = if h.flags == FLAG_KPACK {
        // Packed, not compressed: the header is the stored bytes' first.
        let head = b.stored.get(..CPU_DATA_HEADER_LEN).unwrap_or(&b.stored);
        CpuDataHeader::parse(head, u64::from(h.raw_len), subbuf_size).map_err(what)?
    } else if h.flags & FLAG_ZSTD == 0 || h.flags & !KNOWN_FLAGS != 0 {
        let p = b.payload()?;
        CpuDataHeader::parse(&p, p.len() as u64, subbuf_size).map_err(what)?
    } else {
        let mut head = [0u8; CPU_DATA_HEADER_LEN];
        if (h.raw_len as usize) >= CPU_DATA_HEADER_LEN {
            zstd_head(&b.stored, &mut head, dctx)
                .map_err(|e| format!("CPU_DATA block: zstd payload does not decompress: {e}"))?;
        }
        CpuDataHeader::parse(&head, u64::from(h.raw_len), subbuf_size).map_err(what)?
    };
    Ok(CpuBlockRef {
        offset: b.offset,
        header: b.header,
        cpu: d.cpu,
        block_seq: d.block_seq,
        first_subbuf: d.first_subbuf,
        count: d.count,
    })
}

/// Where the first block of a zstd frame ends (RFC 8878 §3.1.1), if the
/// frame header is well formed.
fn zstd_first_block_end(frame: &[u8]) -> Option<usize> {
    if frame.get(..4)? != [0x28, 0xb5, 0x2f, 0xfd] {
        return None;
    }
    let fhd = *frame.get(4)?;
    let single_segment = fhd & 0x20 != 0;
    let did = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let header = 5 + usize::from(!single_segment) + did + fcs;
    let bh = frame.get(header..header + 3)?;
    let bh = u32::from(bh[0]) | u32::from(bh[1]) << 8 | u32::from(bh[2]) << 16;
    let size = match (bh >> 1) & 3 {
        1 => 1, // RLE: one byte, repeated
        3 => return None,
        _ => (bh >> 3) as usize,
    };
    Some(header + 3 + size)
}

/// Decompresses the first `out.len()` bytes of a zstd frame. The frame's
/// first block is given to zstd alone first: when it holds the wanted
/// bytes (as writers arrange for CPU_DATA headers), nothing more is
/// decompressed.
fn zstd_head(
    frame: &[u8],
    out: &mut [u8],
    dctx: &mut Option<zstd::zstd_safe::DCtx<'static>>,
) -> Result<(), String> {
    use zstd::zstd_safe::{get_error_name, DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};
    let d = match dctx {
        Some(d) => d,
        None => {
            let mut d = DCtx::try_create().ok_or("no memory for a zstd context")?;
            // Payloads are at most 64 MiB: refuse frames asking for a larger
            // window rather than allocate it.
            d.set_parameter(DParameter::WindowLogMax(26))
                .map_err(|c| get_error_name(c).to_string())?;
            dctx.insert(d)
        }
    };
    d.reset(ResetDirective::SessionOnly)
        .map_err(|c| get_error_name(c).to_string())?;
    let want = out.len();
    let first = zstd_first_block_end(frame)
        .unwrap_or(frame.len())
        .min(frame.len());
    let mut output = OutBuffer::around(out);
    for part in [&frame[..first], &frame[first..]] {
        let mut input = InBuffer::around(part);
        while output.pos() < want {
            let (in_before, out_before) = (input.pos(), output.pos());
            d.decompress_stream(&mut output, &mut input)
                .map_err(|c| get_error_name(c).to_string())?;
            if input.pos() == in_before && output.pos() == out_before {
                break;
            }
        }
    }
    if output.pos() < want {
        return Err(format!(
            "the frame ends after {} of {want} bytes",
            output.pos()
        ));
    }
    Ok(())
}

/// `f` of each item, in the items' order, computed on as many threads as
/// there are cores: opening a log waits for its metadata (a serial phase of
/// every analysis), and a full kallsyms table is megabytes to decompress
/// and parse. Each thread takes the next item not yet taken, so a few large
/// items among many small ones do not leave threads idle.
fn map_on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_unstable_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Each kallsyms part parsed, on every core.
fn parse_kallsyms_parts(parts: &[&Meta]) -> Vec<Result<Kallsyms, KallsymsError>> {
    map_on_every_core(parts, |m| Kallsyms::parse(&text_of(&m.content)))
}

/// Below this many decompressed bytes of META blocks a log's metadata is
/// decoded on the opening thread: threads would cost more than they save
/// (small logs, and the fuzz targets that open one on every run). Unit
/// tests take the threaded path on every log.
const META_BYTES_FOR_THREADS: u64 = 1 << 20;

/// A META block met in the scan, with its place among the scan's
/// problems. It is decoded once the scan is over: its decompression, copy
/// and (kallsyms) parsing, nearly all of a log's opening on a full kallsyms
/// table, then run on every core, each block's parsed while its text is
/// still in the cache.
struct UndecodedMeta {
    block: RawBlock,
    /// The problems the scan had found before this block: the block's own
    /// come after them, in file order.
    problems_before: usize,
}

/// A META block decoded, and its kallsyms (a whole table or a part)
/// parsed.
struct DecodedMeta {
    meta: Result<Meta, String>,
    kallsyms: Option<Result<Kallsyms, KallsymsError>>,
}

/// Kallsyms tables parsed while their blocks were decoded, by block offset.
type ParsedKallsyms = HashMap<u64, Result<Kallsyms, KallsymsError>>;

/// Kallsyms parts `[from, to)` (0-based) as said to a user (1-based).
fn part_range(from: u32, to: u32) -> String {
    if to - from == 1 {
        format!("part {to}")
    } else {
        format!("parts {} to {to}", from + 1)
    }
}

/// The table parsed from the block at `offset`, taken out of `parsed`.
fn take_parsed(
    parsed: &mut ParsedKallsyms,
    offset: u64,
) -> Option<Result<Kallsyms, KallsymsError>> {
    parsed.remove(&offset)
}

impl UndecodedMeta {
    fn decode(&self) -> DecodedMeta {
        let meta = self.block.payload().and_then(|payload| {
            match Record::decode(BlockType::Meta, &payload, None) {
                Ok(Record::Meta(m)) => Ok(m),
                Ok(_) => unreachable!("a META block decodes as a META record"),
                Err(e) => Err(e.to_string()),
            }
        });
        let kallsyms = meta
            .as_ref()
            .ok()
            .filter(|m| matches!(m.kind, MetaKind::Kallsyms | MetaKind::KallsymsPart))
            .map(|m| Kallsyms::parse(&text_of(&m.content)));
        DecodedMeta { meta, kallsyms }
    }
}

/// Metadata as text, invalid UTF-8 replaced: `from_utf8` first, which
/// checks valid text faster than `from_utf8_lossy` does.
fn text_of(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The problem a damaged file header is (the ARCH block after it being
/// intact, the log is read on).
fn header_damage_problem(h: &kmemtrace_format::block::FileHeaderError) -> Problem {
    use kmemtrace_format::block::{FileHeaderError, MAGIC};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let what = match h {
        FileHeaderError::BadMagic { found } => {
            format!("magic {} instead of {}", hex(found), hex(&MAGIC))
        }
        FileHeaderError::BadCrc { stored, computed } => {
            format!("CRC {stored:08x}, computed {computed:08x}")
        }
        other => other.to_string(),
    };
    Problem {
        offset: 0,
        kind: ProblemKind::FileHeader,
        what: format!(
            "damaged file header ({what}); the ARCH block after it is intact, so the log is read as format {}.0",
            kmemtrace_format::block::VERSION_MAJOR
        ),
    }
}

/// A META block's kind, name and part: a later block of the same replaces
/// it.
type MetaKey = (MetaKind, String, Option<(u32, u32)>);

/// What [`Log::build`] gathers reading a log's blocks front to back: the
/// records kept, the CPU_DATA index, and every problem in file order.
struct BlockScan {
    arch: Option<ArchTag>,
    /// With the offset of the block each came from (the last of a kind
    /// and name wins).
    metas: Vec<(u64, Meta)>,
    /// Where in `metas` each kind, name and part is: a search of `metas`
    /// per META block would be quadratic in a log of many.
    meta_index: HashMap<MetaKey, usize>,
    problems: Vec<Problem>,
    stats: Vec<StatsSnapshot>,
    notes: Vec<NoteRecord>,
    end: Option<EndRecord>,
    end_offset: Option<u64>,
    truncated: Option<Truncation>,
    blocks: Vec<CpuBlockRef>,
    unknown_blocks: u64,
    pids: PidMap,
    /// No block has been read yet (the ARCH block must be the first).
    first_block: bool,
    /// The zstd context indexing compressed CPU_DATA blocks, kept from
    /// block to block.
    index_dctx: Option<zstd::zstd_safe::DCtx<'static>>,
    blocks_before_end: u64,
    segment: Option<SegmentRecord>,
    /// META blocks not yet decoded, in file order ([`Self::finish`]).
    undecoded_metas: Vec<UndecodedMeta>,
    /// Their kallsyms, parsed as they were decoded: for [`Log::decode_metas`].
    parsed_kallsyms: ParsedKallsyms,
    /// What the blocks decoded so far (all but CPU_DATA and unknown
    /// kinds) decode to beyond [`RECORDS_RATIO`] times what they store, by
    /// their `raw_len`: META, STATS and NOTE blocks are held at once, and
    /// any kind may come many times over.
    records_amplified: u64,
    /// At most this much ([`MAX_RECORDS_AMPLIFIED`]; less in tests).
    records_budget: u64,
}

/// What a block other than CPU_DATA may decode to, per byte stored,
/// without counting toward [`MAX_RECORDS_AMPLIFIED`]: the recorder's text
/// compresses a few times over; a hostile block 64 MiB from a few KiB.
pub const RECORDS_RATIO: u64 = 64;

/// What a log's blocks other than CPU_DATA (META, STATS and NOTE, and the
/// ARCH, ARCH_COPY, END and SEGMENT blocks a damaged log may repeat) may
/// decode to beyond [`RECORDS_RATIO`] times their stored bytes, in all
/// (FORMAT.md §5.2): what opening a log holds and the time it takes then
/// grow with the file, however long a recording it is, not with what a
/// few KiB can claim.
pub const MAX_RECORDS_AMPLIFIED: u64 = 1 << 30;

impl BlockScan {
    fn new(header_damage: Option<Problem>) -> Self {
        BlockScan {
            arch: None,
            metas: Vec::new(),
            meta_index: HashMap::new(),
            problems: header_damage.into_iter().collect(),
            stats: Vec::new(),
            notes: Vec::new(),
            end: None,
            end_offset: None,
            truncated: None,
            blocks: Vec::new(),
            unknown_blocks: 0,
            pids: PidMap::new(),
            first_block: true,
            index_dctx: None,
            blocks_before_end: 0,
            segment: None,
            undecoded_metas: Vec::new(),
            parsed_kallsyms: HashMap::new(),
            records_amplified: 0,
            records_budget: MAX_RECORDS_AMPLIFIED,
        }
    }

    fn problem(&mut self, offset: u64, kind: ProblemKind, what: String) {
        self.problems.push(Problem { offset, kind, what });
    }

    /// One item from the reader: a block, damage skipped, or the log's cut
    /// end.
    fn item(&mut self, item: Item) {
        match item {
            Item::Block(b) => self.block(b),
            Item::Damage(d) => {
                self.problems.push(Problem {
                    offset: d.offset,
                    kind: ProblemKind::Damage { skipped: d.skipped },
                    what: d.description(),
                });
            }
            Item::Truncated(t) => self.truncated = Some(t),
        }
    }

    /// One intact block: a CPU_DATA block is indexed from its fixed header,
    /// any other decoded and kept (a META block once the scan is over,
    /// [`Self::finish`]); one that does not decode is a problem.
    fn block(&mut self, b: RawBlock) {
        let was_first = std::mem::replace(&mut self.first_block, false);
        let bt = b.header.block_type;
        if self.end_offset.is_none() && bt != BlockType::End {
            self.blocks_before_end += 1;
        }
        if self.end_offset.is_some() {
            self.problem(
                b.offset,
                ProblemKind::Structure,
                format!("{} block after the END block", bt.name()),
            );
        }
        if bt == BlockType::CpuData {
            // Only the fixed header is needed for the index.
            let Some(a) = &self.arch else {
                self.problem(
                    b.offset,
                    ProblemKind::Structure,
                    "CPU_DATA block before the ARCH block".into(),
                );
                return;
            };
            match cpu_block_ref(&b, a.subbuf_size, &mut self.index_dctx) {
                Ok(r) => self.blocks.push(r),
                Err(what) => self.problem(b.offset, ProblemKind::BadBlock, what),
            }
            return;
        }
        if let BlockType::Unknown(t) = bt {
            // A newer recorder's: skipped unread, so its payload is not
            // decompressed (a few KiB of zstd can claim 64 MiB).
            self.record(b.offset, Record::Unknown(t), was_first);
            return;
        }
        // Every other block is decoded: the budget.
        let amplified = u64::from(b.header.raw_len)
            .saturating_sub(RECORDS_RATIO * u64::from(b.header.stored_len));
        if self.records_amplified + amplified > self.records_budget {
            let what = format!(
                "{} block not read: with the blocks decoded before it, more than {} bytes to decode beyond {RECORDS_RATIO} times what they store",
                bt.name(),
                self.records_budget
            );
            self.problem(b.offset, ProblemKind::BadBlock, what);
            return;
        }
        self.records_amplified += amplified;
        if bt == BlockType::Meta {
            self.undecoded_metas.push(UndecodedMeta {
                block: b,
                problems_before: self.problems.len(),
            });
            return;
        }
        let payload = match b.payload() {
            Ok(p) => p,
            Err(e) => {
                self.problem(b.offset, ProblemKind::BadBlock, e);
                return;
            }
        };
        let subbuf_size = self.arch.as_ref().map(|a| a.subbuf_size);
        match Record::decode(bt, &payload, subbuf_size) {
            Ok(rec) => self.record(b.offset, rec, was_first),
            Err(e) => self.problem(b.offset, ProblemKind::BadBlock, e.to_string()),
        }
    }

    /// The META blocks put off by [`Self::block`], decoded (on every core
    /// when they are large) and taken in file order, their problems put
    /// where the scan met them. Nothing else in the scan reads a META
    /// block, so only the order among them and their problems' places
    /// matter.
    fn finish(&mut self) {
        let metas = std::mem::take(&mut self.undecoded_metas);
        let raw_bytes: u64 = metas
            .iter()
            .map(|m| u64::from(m.block.header.raw_len))
            .sum();
        let decoded = if cfg!(test) || raw_bytes >= META_BYTES_FOR_THREADS {
            map_on_every_core(&metas, UndecodedMeta::decode)
        } else {
            metas.iter().map(UndecodedMeta::decode).collect()
        };
        let mut earlier = std::mem::take(&mut self.problems).into_iter();
        let mut taken = 0;
        for (undecoded, decoded) in metas.iter().zip(decoded) {
            let (offset, before) = (undecoded.block.offset, undecoded.problems_before);
            self.problems.extend(earlier.by_ref().take(before - taken));
            taken = before;
            if let Some(k) = decoded.kallsyms {
                self.parsed_kallsyms.insert(offset, k);
            }
            match decoded.meta {
                Ok(m) => self.meta(offset, m),
                Err(e) => self.problem(offset, ProblemKind::BadBlock, e),
            }
        }
        self.problems.extend(earlier);
    }

    /// A decoded block other than CPU_DATA, from `offset`.
    fn record(&mut self, offset: u64, rec: Record, was_first: bool) {
        match rec {
            Record::Arch(a) => self.arch_block(offset, *a, was_first),
            Record::ArchCopy(a) => self.arch_copy(offset, *a),
            Record::Meta(m) => self.meta(offset, m),
            Record::CpuData(_) => unreachable!("handled above"),
            Record::Stats(s) => {
                let parsed = match kmemtrace_kernel::stats::CpuStats::parse(&text_of(&s.text)) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.problem(
                            offset,
                            ProblemKind::Metadata,
                            format!("STATS of CPU {}: {e}", s.cpu),
                        );
                        None
                    }
                };
                self.stats.push(StatsSnapshot {
                    offset,
                    record: s,
                    parsed,
                });
            }
            Record::End(e) => {
                if self.end.is_some() {
                    self.problem(offset, ProblemKind::Structure, "second END block".into());
                }
                let mut e = e;
                // By CPU (stable: a CPU listed twice keeps its first entry
                // first), for end_total's binary search.
                e.cpus.sort_by_key(|t| t.cpu);
                self.end = Some(e);
                self.end_offset = Some(offset);
            }
            Record::Note(n) => self.notes.push(n),
            Record::Segment(g) => {
                if self.segment.is_some() {
                    self.problem(
                        offset,
                        ProblemKind::Structure,
                        "second SEGMENT block".into(),
                    );
                } else {
                    self.segment = Some(g);
                }
            }
            Record::Unknown(_) => self.unknown_blocks += 1,
        }
    }

    /// The ARCH block: the first one is used, wherever it is.
    fn arch_block(&mut self, offset: u64, a: ArchTag, was_first: bool) {
        if !was_first {
            self.problem(
                offset,
                ProblemKind::Structure,
                "ARCH block is not the first block".into(),
            );
        }
        if let Err(e) = a.validate() {
            self.problem(
                offset,
                ProblemKind::Arch,
                format!("implausible arch tag: {e}"),
            );
        }
        if self.arch.is_some() {
            self.problem(
                offset,
                ProblemKind::Structure,
                "second ARCH block ignored".into(),
            );
        } else {
            self.arch = Some(a);
        }
    }

    /// An ARCH_COPY block: used when the ARCH block was lost, else checked
    /// against it.
    fn arch_copy(&mut self, offset: u64, a: ArchTag) {
        match &self.arch {
            // The ARCH block was lost (damaged): its copy decodes.
            None => {
                self.problem(
                    offset,
                    ProblemKind::Structure,
                    "no intact ARCH block before this: the log is decoded with this ARCH_COPY"
                        .into(),
                );
                self.arch = Some(a);
            }
            Some(x) if *x != a => self.problem(
                offset,
                ProblemKind::Arch,
                "ARCH_COPY differs from the ARCH block (the ARCH block is used)".into(),
            ),
            Some(_) => {}
        }
    }

    /// A META block: saved cmdlines and tgids are merged into the pid map
    /// at once; every META is kept, a later one of the same kind, name and
    /// part replacing an earlier one.
    fn meta(&mut self, offset: u64, m: Meta) {
        let merged = match m.kind {
            MetaKind::SavedCmdlines => Some(self.pids.merge_cmdlines(&text_of(&m.content))),
            MetaKind::SavedTgids => Some(self.pids.merge_tgids(&text_of(&m.content))),
            _ => None,
        };
        if let Some(Err(e)) = merged {
            self.problem(
                offset,
                ProblemKind::Metadata,
                format!("META {}: {e}", m.kind.name()),
            );
        }
        match self.meta_index.entry((m.kind, m.name.clone(), m.part)) {
            Entry::Occupied(at) => self.metas[*at.get()] = (offset, m),
            Entry::Vacant(at) => {
                at.insert(self.metas.len());
                self.metas.push((offset, m));
            }
        }
    }
}

/// A log assembled from records made elsewhere (an input read in place)
/// rather than read from a log file: the records are taken as if read
/// from blocks at the offsets given, in the order given, and judged as
/// [`Log::open`] judges a log's blocks.
pub struct LogBuilder {
    scan: BlockScan,
}

impl Default for LogBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LogBuilder {
    pub fn new() -> Self {
        LogBuilder {
            scan: BlockScan::new(None),
        }
    }

    /// A record from `offset` of the input; CPU data comes as chunks
    /// ([`LogBuilder::chunk`]), a CPU_DATA record is a problem.
    pub fn record(&mut self, offset: u64, rec: Record) {
        let scan = &mut self.scan;
        if matches!(rec, Record::CpuData(_)) {
            scan.problem(
                offset,
                ProblemKind::Structure,
                "CPU data given as a record, not as a chunk: left out".into(),
            );
            return;
        }
        let was_first = std::mem::replace(&mut scan.first_block, false);
        if scan.end_offset.is_none() && !matches!(rec, Record::End(_)) {
            scan.blocks_before_end += 1;
        }
        scan.record(offset, rec, was_first);
    }

    /// A chunk of CPU data, read back later through the [`ChunkStore`].
    pub fn chunk(&mut self, r: CpuBlockRef) {
        let scan = &mut self.scan;
        scan.first_block = false;
        if scan.end_offset.is_none() {
            scan.blocks_before_end += 1;
        }
        scan.blocks.push(r);
    }

    /// Records and chunks taken so far before an END: what an END record
    /// of this log counts.
    pub fn blocks(&self) -> u64 {
        self.scan.blocks_before_end
    }

    /// Something wrong in the input, found while reading it.
    pub fn problem(&mut self, p: Problem) {
        self.scan.problems.push(p);
    }

    /// The log of the input `origin`: `name` for messages, `version` the
    /// log format it reads as, `len` the input's bytes, its chunks read
    /// from `store`.
    pub fn finish(
        self,
        name: String,
        origin: Origin,
        version: (u16, u16),
        len: u64,
        store: Box<dyn ChunkStore>,
    ) -> Result<Log, LogError> {
        let log = Log::assemble(name, version, len, self.scan, Backing::Store(store))?;
        Ok(Log { origin, ..log })
    }
}

impl Log {
    /// Opens a log file, or standard input for `-`.
    pub fn open(path: &Path) -> Result<Log, LogError> {
        if path.as_os_str() == "-" {
            let spool = anonymous_temp_file()?;
            let tee = Tee {
                src: io::stdin().lock(),
                spool: io::BufWriter::with_capacity(1 << 20, spool.try_clone()?),
            };
            Self::build("<stdin>".into(), tee, spool)
        } else {
            let f = File::open(path)?;
            let reader = f.try_clone()?;
            Self::build(
                path.display().to_string(),
                io::BufReader::with_capacity(1 << 20, reader),
                f,
            )
        }
    }

    /// Opens a log held in memory (tests, fuzzing); it is spooled to a
    /// temporary file.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Log, LogError> {
        let mut spool = anonymous_temp_file()?;
        spool.write_all(bytes)?;
        Self::build(name.into(), bytes, spool)
    }

    fn build<R: Read>(name: String, src: R, file: File) -> Result<Log, LogError> {
        let mut reader = LogReader::new(src).map_err(|e| match e {
            OpenError::Io(e) => LogError::Io(e),
            e => LogError::Header(e),
        })?;
        let version = reader.version();
        let mut scan = BlockScan::new(reader.header_damage().map(header_damage_problem));
        while let Some(item) = reader.next_item()? {
            scan.item(item);
        }
        scan.finish();
        let len = reader.offset();
        drop(reader);
        Self::assemble(name, version, len, scan, Backing::File(file))
    }

    /// The log of what `scan` gathered, its CPU data in `backing`.
    fn assemble(
        name: String,
        version: (u16, u16),
        len: u64,
        scan: BlockScan,
        backing: Backing,
    ) -> Result<Log, LogError> {
        let BlockScan {
            arch,
            metas,
            problems,
            mut stats,
            notes,
            end,
            end_offset,
            truncated,
            blocks,
            unknown_blocks,
            pids,
            blocks_before_end,
            segment,
            parsed_kallsyms,
            ..
        } = scan;
        let arch = arch.ok_or_else(|| {
            LogError::NoArch(format!(
                "{name}: no intact ARCH block: the log cannot be decoded{}",
                problems
                    .first()
                    .map(|p| format!(" ({p})"))
                    .unwrap_or_default()
            ))
        })?;
        // The counters are the kernel's longs (a 32-bit one prints its high
        // values negative): the arch tag says how wide.
        for snapshot in &mut stats {
            snapshot.parsed = snapshot
                .parsed
                .map(|p| p.with_long_size(usize::from(arch.long_size)));
        }
        let endian = arch.byte_order;
        let layout = SubBufLayout {
            long_size: usize::from(arch.long_size),
            data_offset: arch.data_offset as usize,
            subbuf_size: arch.subbuf_size as usize,
        };

        let rotation = segment
            .as_ref()
            .map(|g| crate::capture::Rotation::of_file(&name, len, g));
        let mut log = Log {
            name,
            origin: Origin::Log,
            version,
            arch,
            endian,
            layout,
            header_page: None,
            header_event: None,
            metas: Vec::new(),
            formats: Vec::new(),
            kallsyms: None,
            pids,
            cpu_nodes: BTreeMap::new(),
            stats,
            notes,
            end,
            end_offset,
            problems,
            truncated,
            blocks,
            len,
            unknown_blocks,
            blocks_before_end,
            rotation,
            backing,
        };
        log.decode_metas(metas, parsed_kallsyms);
        Ok(log)
    }

    /// `parsed`: the kallsyms tables already parsed, by block offset (the
    /// others are parsed here).
    fn decode_metas(&mut self, metas: Vec<(u64, Meta)>, mut parsed: ParsedKallsyms) {
        for (offset, m) in &metas {
            // Only for the kinds read here: kallsyms parts run to megabytes.
            let text = || text_of(&m.content);
            let mut problem_of = |kind: ProblemKind, what: String| {
                self.problems.push(Problem {
                    offset: *offset,
                    kind,
                    what: format!("META {} {}: {what}", m.kind.name(), m.name),
                })
            };
            let mut problem = |what: String| problem_of(ProblemKind::Metadata, what);
            match m.kind {
                MetaKind::HeaderPage => match HeaderPage::parse(&text()) {
                    Ok(h) => {
                        let from_page = SubBufLayout::from_header_page(&h);
                        if from_page.long_size != self.layout.long_size
                            || from_page.data_offset != self.layout.data_offset
                        {
                            problem_of(ProblemKind::Arch, format!(
                                "header_page says long size {} and data offset {}, the arch tag {} and {}",
                                from_page.long_size,
                                from_page.data_offset,
                                self.layout.long_size,
                                self.layout.data_offset
                            ));
                        }
                        self.header_page = Some(h);
                    }
                    Err(e) => problem(e.to_string()),
                },
                MetaKind::HeaderEvent => match HeaderEvent::parse(&text()) {
                    Ok(h) => self.header_event = Some(h),
                    Err(e) => problem(e.to_string()),
                },
                MetaKind::EventFormat => {
                    let system = m.name.split('/').next().filter(|s| !s.is_empty());
                    match EventFormat::parse(&text(), system) {
                        Ok(f) => {
                            if let Some(id) = m.id {
                                if id != f.id {
                                    problem(format!(
                                        "block says id {id}, format text says {}",
                                        f.id
                                    ));
                                }
                            }
                            self.formats.push(f)
                        }
                        Err(e) => problem(e.to_string()),
                    }
                }
                MetaKind::Kallsyms => match take_parsed(&mut parsed, *offset)
                    .unwrap_or_else(|| Kallsyms::parse(&text()))
                {
                    Ok(k) => self.kallsyms = Some(k),
                    Err(e) => problem(e.to_string()),
                },
                MetaKind::KallsymsPart => {} // joined below
                MetaKind::CpuNodeMap => self.cpu_nodes = parse_cpu_nodes(&text()),
                _ => {}
            }
        }
        self.join_kallsyms_parts(&metas, parsed);
        self.metas = metas.into_iter().map(|(_, m)| m).collect();
    }

    /// Kallsyms written in parts (1.1): each part parsed on its own, so a
    /// damaged part costs its own symbols only; a missing or unreadable one
    /// is named and its addresses resolve to nothing.
    fn join_kallsyms_parts(&mut self, metas: &[(u64, Meta)], mut parsed: ParsedKallsyms) {
        let parts: Vec<(u64, u32, u32, &Meta)> = metas
            .iter()
            .filter(|(_, m)| m.kind == MetaKind::KallsymsPart)
            .filter_map(|(o, m)| m.part.map(|(i, n)| (*o, i, n, m)))
            .collect();
        let Some(count) = parts.iter().map(|p| p.2).max() else {
            return;
        };
        let mut parsed: Vec<Option<_>> = parts
            .iter()
            .map(|p| take_parsed(&mut parsed, p.0))
            .collect();
        let unparsed: Vec<usize> = (0..parts.len()).filter(|&i| parsed[i].is_none()).collect();
        let metas: Vec<&Meta> = unparsed.iter().map(|&i| parts[i].3).collect();
        for (i, k) in unparsed.into_iter().zip(parse_kallsyms_parts(&metas)) {
            parsed[i] = Some(k);
        }
        // Present parts in index order (the first of a repeated index is
        // read); the missing ones between them are named as runs, each a
        // `None` (a gap) for the join, so a damaged part count costs
        // nothing per part it claims.
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by_key(|&k| parts[k].1);
        // Offsets of the parts from each position of `order` on.
        let mut later_min = vec![u64::MAX; order.len() + 1];
        for j in (0..order.len()).rev() {
            later_min[j] = later_min[j + 1].min(parts[order[j]].0);
        }
        let mut damage: Vec<u64> = self
            .problems
            .iter()
            .filter(|p| matches!(p.kind, ProblemKind::Damage { .. }))
            .map(|p| p.offset)
            .collect();
        damage.sort_unstable();
        let mut tables = Vec::with_capacity(parts.len());
        let mut next = 0u32; // the first index not yet accounted for
        let mut earlier_max: Option<u64> = None;
        for (j, &k) in order.iter().enumerate() {
            let (offset, i) = (parts[k].0, parts[k].1);
            if i >= next {
                if i > next {
                    self.missing_parts((next, i, count), (earlier_max, later_min[j]), &damage);
                    tables.push(None);
                }
                match parsed[k].take().expect("every part parsed above") {
                    Ok(k) => tables.push(Some(k)),
                    Err(e) => {
                        let what = format!("META kallsyms part {} of {count}: {e}", i + 1);
                        self.metadata_problem(offset, what);
                        tables.push(None);
                    }
                }
                next = i + 1;
            }
            earlier_max = Some(earlier_max.map_or(offset, |m| m.max(offset)));
        }
        if next < count {
            tables.push(None);
            // Parts after the last one present in a log cut short: lost
            // with the rest of the file, said once, at the cut.
            let cut_at = self
                .truncated
                .as_ref()
                .map(|t| t.offset)
                .or_else(|| self.end.is_none().then_some(self.len));
            match cut_at {
                Some(at) => self.metadata_problem(
                    at,
                    format!(
                        "kallsyms {} of {count} lie past where the log was cut short: call sites in them are not resolved",
                        part_range(next, count)
                    ),
                ),
                None => self.missing_parts((next, count, count), (earlier_max, u64::MAX), &damage),
            }
        }
        self.kallsyms = Some(Kallsyms::join(tables));
    }

    /// Kallsyms parts `[from, to)` of `count` are missing from a log that
    /// goes on after them: named at the damage between the parts around
    /// them (`around`: the latest offset of a part before, the earliest
    /// of one after), else just after the part before.
    ///
    /// `damage` is where the log is damaged, sorted: searched, not scanned,
    /// for each run of missing parts.
    fn missing_parts(
        &mut self,
        (from, to, count): (u32, u32, u32),
        around: (Option<u64>, u64),
        damage: &[u64],
    ) {
        let (lo, hi) = (around.0.unwrap_or(0), around.1);
        let at = damage
            .get(damage.partition_point(|&d| d < lo))
            .filter(|&&d| d < hi)
            .map_or(lo, |&d| d);
        let (verb, pronoun) = if to - from == 1 {
            ("is", "it")
        } else {
            ("are", "them")
        };
        let which = part_range(from, to);
        self.metadata_problem(
            at,
            format!(
                "kallsyms {which} of {count} {verb} missing (damaged?): call sites in {pronoun} are not resolved"
            ),
        );
    }

    fn metadata_problem(&mut self, offset: u64, what: String) {
        self.problems.push(Problem {
            offset,
            kind: ProblemKind::Metadata,
            what,
        });
    }

    /// The META block of a kind (and name, for formats and `other`).
    pub fn meta(&self, kind: MetaKind, name: &str) -> Option<&Meta> {
        self.metas
            .iter()
            .find(|m| m.kind == kind && (name.is_empty() || m.name == name))
    }

    /// The kallsyms text as the recorded kernel printed it: the last whole
    /// META, else its parts (format 1.1) that the log holds, joined in
    /// order. For writers of other formats (trace.dat); the log's own
    /// symbol table is [`Log::kallsyms`].
    pub fn kallsyms_text(&self) -> Vec<u8> {
        let whole = self
            .metas
            .iter()
            .rev()
            .find(|m| m.kind == MetaKind::Kallsyms)
            .filter(|m| !m.content.is_empty());
        if let Some(m) = whole {
            return m.content.clone();
        }
        let mut parts: Vec<(u32, &[u8])> = self
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

    /// A kmem event decoder for this log's formats.
    pub fn kmem_decoder(&self) -> KmemDecoder {
        KmemDecoder::new(&self.formats)
    }

    /// The event format with this id.
    pub fn format_by_id(&self, id: u32) -> Option<&EventFormat> {
        self.formats.iter().find(|f| f.id == id)
    }

    /// CPUs that have data blocks, ascending.
    pub fn cpus(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.blocks.iter().map(|b| b.cpu).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// What the END block says the recorder wrote for `cpu` (`None` in a
    /// log cut short, or for a CPU it does not list): blocks and
    /// sub-buffers missing after the last one present count from it. In
    /// a file of a rotated capture, END counts the file's own: they are
    /// given here from the start of the capture's sequence (the last
    /// file's start added), as the blocks' numbers are.
    pub fn end_total(&self, cpu: u32) -> Option<CpuTotal> {
        let listed = &self.end.as_ref()?.cpus;
        // Sorted by CPU as the log was opened: a search, not a scan (a
        // damaged END may list millions of CPUs, each looked up).
        let at = listed.partition_point(|t| t.cpu < cpu);
        let t = *listed.get(at).filter(|t| t.cpu == cpu)?;
        let (seq, subbuf) = self
            .rotation
            .as_ref()
            .map_or((0, 0), |r| r.last_start_of(cpu));
        Some(CpuTotal {
            blocks: t.blocks.saturating_add(seq),
            subbufs: t.subbufs.saturating_add(subbuf),
            ..t
        })
    }

    /// The SEGMENT block of a file of a rotated capture (FORMAT.md §13);
    /// for several files read as one capture, the first's.
    pub fn segment(&self) -> Option<&SegmentRecord> {
        Some(&self.rotation.as_ref()?.files.first()?.segment)
    }

    /// The spans of `cpu`'s stream that rotation removed (none outside a
    /// rotated capture).
    pub fn dropped(&self, cpu: u32) -> &[crate::capture::DroppedSpan] {
        self.rotation.as_ref().map_or(&[], |r| r.dropped_of(cpu))
    }

    /// `cpu`'s sub-buffer index ranges removed by rotation, `[from, to)`,
    /// for a [`kmemtrace_kernel::LossTracker`] or
    /// [`kmemtrace_kernel::SubBufSequence`].
    pub fn dropped_subbufs(&self, cpu: u32) -> Vec<(u64, u64)> {
        self.dropped(cpu)
            .iter()
            .map(|d| (d.subbufs.start, d.subbufs.end))
            .collect()
    }

    /// Every CPU's data blocks in sequence order, by CPU: one pass over
    /// the blocks, where [`Log::cpu_blocks`] for each CPU passes over them
    /// once per CPU (a damaged log may name a new CPU in every block).
    pub fn blocks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
        crate::walk::group_by_cpu(&self.blocks)
    }

    /// A CPU's data blocks in sequence order.
    pub fn cpu_blocks(&self, cpu: u32) -> Vec<&CpuBlockRef> {
        let mut v: Vec<&CpuBlockRef> = self.blocks.iter().filter(|b| b.cpu == cpu).collect();
        v.sort_by_key(|b| (b.block_seq, b.offset));
        v
    }

    /// Statistics snapshots of a CPU in a phase, in file order.
    pub fn cpu_stats(&self, cpu: u32, phase: StatsPhase) -> impl Iterator<Item = &StatsSnapshot> {
        self.stats
            .iter()
            .filter(move |s| s.record.cpu == cpu && s.record.phase == phase)
    }

    /// The last statistics snapshot of each CPU in a phase, in file order:
    /// one pass, where [`Log::cpu_stats`] for each CPU passes over them
    /// once per CPU (a damaged log may name a new CPU in every block).
    pub fn last_stats_by_cpu(&self, phase: StatsPhase) -> BTreeMap<u32, &StatsSnapshot> {
        let mut by_cpu = BTreeMap::new();
        for s in self.stats.iter().filter(|s| s.record.phase == phase) {
            by_cpu.insert(s.record.cpu, s);
        }
        by_cpu
    }

    /// What `cpu`'s counters did over the capture ([`CpuCounters`]): from
    /// its first start snapshot (without one, from 0: the ring buffer's
    /// creation) over every later snapshot in file order, up to its last
    /// end snapshot, or its last periodic one in a log cut short. Only
    /// snapshots that parse count. `None` without such an end.
    pub fn cpu_counters(&self, cpu: u32) -> Option<CountersRun<'_>> {
        let mine: Vec<&StatsSnapshot> = self
            .stats
            .iter()
            .filter(|s| s.record.cpu == cpu && s.parsed.is_some())
            .collect();
        counters_run(&mine)
    }

    /// [`Log::cpu_counters`] of every CPU with statistics: one pass over
    /// them, where a call per CPU passes over them once per CPU (a damaged
    /// log may name a new CPU in every snapshot).
    pub fn counters_by_cpu(&self) -> BTreeMap<u32, CountersRun<'_>> {
        let mut by_cpu: BTreeMap<u32, Vec<&StatsSnapshot>> = BTreeMap::new();
        for s in self.stats.iter().filter(|s| s.parsed.is_some()) {
            by_cpu.entry(s.record.cpu).or_default().push(s);
        }
        by_cpu
            .into_iter()
            .filter_map(|(cpu, mine)| Some((cpu, counters_run(&mine)?)))
            .collect()
    }

    /// Reads a CPU_DATA block back and returns its sub-buffer bytes (the
    /// payload after the 24-byte CPU_DATA header) in `out`. Creates a zstd
    /// context per call: loops should prefer [`Log::read_cpu_block_into`].
    pub fn read_cpu_block(
        &self,
        r: &CpuBlockRef,
        stored: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<(), Problem> {
        let mut s = BlockScratch {
            stored: std::mem::take(stored),
            out: Vec::new(),
            dec: Default::default(),
            inflated: Default::default(),
        };
        let res = self.read_cpu_block_into(r, &mut s).map(|data| {
            out.clear();
            out.extend_from_slice(data);
        });
        *stored = s.stored;
        res
    }

    /// Reads a CPU_DATA block back and returns its sub-buffer bytes (the
    /// payload after the 24-byte CPU_DATA header), in `scratch`: read in
    /// place for a block stored plain, decompressed with the scratch's zstd
    /// context otherwise.
    pub fn read_cpu_block_into<'s>(
        &self,
        r: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        let (f, at) = match &self.backing {
            Backing::File(f) => (f, r.offset),
            Backing::Files(files) => {
                let i = files.partition_point(|(base, _)| *base <= r.offset);
                let (base, f) = &files[i.saturating_sub(1)];
                (f, r.offset - base)
            }
            Backing::Store(store) => return store.read_chunk(r, scratch),
        };
        let err = |what: String| Problem {
            offset: r.offset,
            kind: ProblemKind::BadBlock,
            what,
        };
        let BlockScratch {
            stored, out, dec, ..
        } = scratch;
        let len = BLOCK_HEADER_LEN + r.header.stored_len as usize;
        // Only grown: reading overwrites what is kept.
        if stored.len() < len {
            stored.resize(len, 0);
        }
        let stored = &mut stored[..len];
        f.read_exact_at(stored, at)
            .map_err(|e| err(format!("reading the block back: {e}")))?;
        let h: [u8; BLOCK_HEADER_LEN] = stored[..BLOCK_HEADER_LEN].try_into().unwrap();
        if BlockHeader::parse(&h).ok() != Some(r.header)
            || BlockHeader::compute_crc(&h, &stored[BLOCK_HEADER_LEN..]) != r.header.crc
        {
            return Err(err("block changed since it was indexed".into()));
        }
        let payload = match decode_payload_into(&r.header, &stored[BLOCK_HEADER_LEN..], dec, out)
            .map_err(err)?
        {
            None => &stored[BLOCK_HEADER_LEN..],
            Some(n) => &out[..n],
        };
        Ok(payload.get(CPU_DATA_HEADER_LEN..).unwrap_or_default())
    }

    /// Calls `f` for every sub-buffer of `cpu`, in stream order. Blocks that
    /// cannot be read back are passed to `on_error` and skipped.
    pub fn visit_cpu(
        &self,
        cpu: u32,
        mut f: impl FnMut(SubBufVisit<'_>),
        on_error: impl FnMut(Problem),
    ) {
        crate::walk::walk_cpu(
            self,
            self.endian,
            cpu,
            |block, item| {
                f(SubBufVisit {
                    block,
                    index: item.index,
                    subbuf: item.subbuf,
                    raw: item.raw,
                })
            },
            on_error,
        )
    }

    /// Calls `f` for every sub-buffer of every CPU, CPU by CPU in
    /// ascending order, each CPU's in stream order (one pass to take the
    /// blocks apart, where [`Log::visit_cpu`] per CPU is one per CPU).
    /// Blocks that cannot be read back are passed to `on_error` and skipped.
    pub fn visit_all(&self, mut f: impl FnMut(SubBufVisit<'_>), on_error: impl FnMut(Problem)) {
        crate::walk::walk_all(
            self,
            self.endian,
            |block, item| {
                f(SubBufVisit {
                    block,
                    index: item.index,
                    subbuf: item.subbuf,
                    raw: item.raw,
                })
            },
            on_error,
        )
    }

    /// File offset of sub-buffer `i` of a block, where the block is stored
    /// uncompressed (`None` if compressed: offsets then name the block).
    pub fn subbuf_file_offset(&self, r: &CpuBlockRef, i: u64) -> Option<u64> {
        if let Backing::Store(store) = &self.backing {
            return store.subbuf_offset(r, i);
        }
        // Read in place only when stored plain: a zstd or kpack block can
        // store as many bytes as it holds.
        let plain = r.header.flags == 0 && r.header.stored_len == r.header.raw_len;
        plain.then(|| {
            r.offset
                + (BLOCK_HEADER_LEN + CPU_DATA_HEADER_LEN) as u64
                + (i - r.first_subbuf) * self.layout.subbuf_size as u64
        })
    }
}

impl crate::walk::SubBufSource for Log {
    fn endian(&self) -> RunTimeEndian {
        self.endian
    }
    fn layout(&self) -> &SubBufLayout {
        &self.layout
    }
    fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
        self.blocks_by_cpu()
    }
    fn chunks_of(&self, cpu: u32) -> Vec<&CpuBlockRef> {
        self.cpu_blocks(cpu)
    }
    fn dropped_subbufs(&self, cpu: u32) -> Vec<(u64, u64)> {
        Log::dropped_subbufs(self, cpu)
    }
}

impl ChunkStore for Log {
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        self.read_cpu_block_into(chunk, scratch)
    }

    fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64> {
        self.subbuf_file_offset(chunk, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_format::block::Compression;
    use kmemtrace_format::records::StatsRecord;
    use kmemtrace_format::writer::LogWriter;

    #[test]
    fn cpu_data_header_is_the_first_zstd_block_alone() {
        use kmemtrace_format::writer::{CpuBlockEncoder, EncodedBlock};
        // 200 pages of varied, compressible bytes: a 800 KiB block.
        let mut pages = vec![0u8; 200 * 4096];
        let mut x = 0x9e37_79b9_u32;
        for (i, b) in pages.iter_mut().enumerate() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = if i % 16 == 0 {
                (x & 0x0f) as u8
            } else {
                (i / 256) as u8
            };
        }
        let mut enc = CpuBlockEncoder::new(3, 4096, Compression::Zstd(1));
        let mut out = EncodedBlock::default();
        enc.encode_into(&pages[..4096], &mut out).unwrap();
        enc.encode_into(&pages, &mut out).unwrap();
        let h = BlockHeader::parse(out.bytes[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!(
            h.flags & kmemtrace_format::block::FLAG_ZSTD,
            kmemtrace_format::block::FLAG_ZSTD
        );
        let frame = &out.bytes[BLOCK_HEADER_LEN..];
        assert!(frame.len() < pages.len() / 2, "compressed: {}", frame.len());
        // The first zstd block is the 24-byte header alone: frame header
        // (at most 18 bytes), a 3-byte block header, at most 24 bytes.
        let first = zstd_first_block_end(frame).unwrap();
        assert!(first <= 18 + 3 + 24, "first block ends at {first}");
        let mut d = zstd::zstd_safe::DCtx::create();
        let mut big = vec![0u8; 4096];
        let mut input = zstd::zstd_safe::InBuffer::around(&frame[..first]);
        let mut output = zstd::zstd_safe::OutBuffer::around(&mut big[..]);
        d.decompress_stream(&mut output, &mut input).unwrap();
        assert_eq!((input.pos(), output.pos()), (first, CPU_DATA_HEADER_LEN));
        let head: [u8; CPU_DATA_HEADER_LEN] = big[..CPU_DATA_HEADER_LEN].try_into().unwrap();
        assert_eq!(
            head,
            kmemtrace_format::records::encode_cpu_data_header(3, 200, 1, 1)
        );
        let mut dctx = None;
        let mut again = [0u8; CPU_DATA_HEADER_LEN];
        zstd_head(frame, &mut again, &mut dctx).unwrap();
        assert_eq!(again, head);
        // The whole frame is the payload.
        let all = kmemtrace_format::block::decode_payload(&h, frame).unwrap();
        assert_eq!(&all[..CPU_DATA_HEADER_LEN], &head);
        assert_eq!(&all[CPU_DATA_HEADER_LEN..], &pages[..]);
        // A cut frame is an error, not a hang.
        assert!(zstd_head(&frame[..10], &mut again, &mut dctx).is_err());
        assert!(zstd_head(&frame[..first - 1], &mut again, &mut dctx).is_err());
        // A frame whose first block is large (bulk compression, as older
        // writers made) still gives its head.
        let bulk = zstd::bulk::compress(&all, 1).unwrap();
        assert!(zstd_first_block_end(&bulk).unwrap() > 1000);
        zstd_head(&bulk, &mut again, &mut dctx).unwrap();
        assert_eq!(again, head);
    }

    #[test]
    fn per_cpu_lookups_are_one_pass_and_agree_with_the_scans() {
        use kmemtrace_format::block::{encode_block, BlockType};
        use kmemtrace_format::records::{CpuTotal, EndRecord};
        let mut arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        // A damaged arch tag's CPU count: only as many as a kernel can
        // have are listed without data.
        arch.nr_cpus = Some(u32::MAX);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::None).unwrap();
        let page = vec![0u8; 4096];
        for cpu in [9000, 3, 1, 3, 9000, 1] {
            w.write_cpu_data(cpu, &page).unwrap();
        }
        let cut = Log::from_bytes("t", &w.get_mut().clone()).unwrap();
        let by_cpu = cut.blocks_by_cpu();
        assert_eq!(by_cpu.keys().copied().collect::<Vec<_>>(), cut.cpus());
        for (cpu, blocks) in &by_cpu {
            assert_eq!(*blocks, cut.cpu_blocks(*cpu));
        }
        let last_read = cut.incomplete().unwrap().last_read;
        assert_eq!(last_read.len(), 8192 + 1, "0 to 8191, and 9000");
        assert_eq!(last_read.last().unwrap().0, 9000);

        // An END listing its CPUs out of order, one twice: each found, the
        // first of the two.
        let total = |cpu, blocks| CpuTotal {
            cpu,
            blocks,
            subbufs: blocks,
            bytes: blocks * 4096,
        };
        let end = EndRecord {
            wall_ns: None,
            reason: "test".into(),
            blocks: w.blocks_written() + 1,
            cpus: vec![total(9000, 2), total(1, 2), total(3, 2), total(1, 7)],
            exit_status: None,
        };
        let mut block = Vec::new();
        encode_block(BlockType::End, &end.encode(), Compression::None, &mut block).unwrap();
        w.write_block_bytes(&block).unwrap();
        let log = Log::from_bytes("t", &w.into_inner_unfinished()).unwrap();
        for cpu in [1, 3, 9000] {
            assert_eq!(log.end_total(cpu).map(|t| t.blocks), Some(2), "CPU {cpu}");
        }
        assert_eq!(log.end_total(2), None);
        assert_eq!(log.end_total(u32::MAX), None);
    }

    #[test]
    fn meta_problems_name_their_block() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
        w.write_meta(&Meta::new(MetaKind::CpuNodeMap, "0 0\n"))
            .unwrap();
        let at = w.bytes_written();
        w.write_meta(&Meta::new(MetaKind::HeaderPage, "not a header_page"))
            .unwrap();
        let bytes = w.finish(None, "test", None).unwrap();
        let log = Log::from_bytes("t", &bytes).unwrap();
        let p: Vec<_> = log
            .problems
            .iter()
            .filter(|p| p.kind == ProblemKind::Metadata)
            .collect();
        assert_eq!(p.len(), 1, "{:?}", log.problems);
        assert_eq!(p[0].offset, at, "{}", p[0]);
        assert!(p[0].what.starts_with("META header_page"), "{}", p[0]);
    }

    /// Kallsyms parts missing between those present, and after them up to
    /// a damaged part count, are named as runs (a count of 2^32 - 1 costs
    /// no more than one of 4), and the symbols around them still resolve.
    #[test]
    fn missing_kallsyms_parts_are_named_as_runs() {
        let open = |count: u32, present: &[u32]| {
            let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
            let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
            for &i in present {
                let text = format!("{:016x} T f{i}\n", 0x1000 * (u64::from(i) + 1));
                let m = Meta {
                    part: Some((i, count)),
                    ..Meta::new(MetaKind::KallsymsPart, text.as_bytes())
                };
                w.write_meta(&m).unwrap();
            }
            let bytes = w.finish(None, "test", None).unwrap();
            Log::from_bytes("t", &bytes).unwrap()
        };
        let said = |log: &Log| -> Vec<String> {
            let p = log
                .problems
                .iter()
                .filter(|p| p.kind == ProblemKind::Metadata);
            p.map(|p| p.what.clone()).collect()
        };
        let log = open(4, &[0, 3]);
        assert_eq!(
            said(&log),
            ["kallsyms parts 2 to 3 of 4 are missing (damaged?): call sites in them are not resolved"]
        );
        let k = log.kallsyms.as_ref().unwrap();
        assert_eq!(k.resolve(0x1000).unwrap().name, "f0");
        assert_eq!(k.resolve(0x4000).unwrap().name, "f3");
        // The gap: nothing, not f0 plus an offset spanning it.
        assert!(k.resolve(0x2000).is_none());
        let log = open(u32::MAX, &[0, 2]);
        assert_eq!(
            said(&log),
            [
                "kallsyms part 2 of 4294967295 is missing (damaged?): call sites in it are not resolved",
                "kallsyms parts 4 to 4294967295 of 4294967295 are missing (damaged?): call sites in them are not resolved"
            ]
        );
    }

    #[test]
    fn work_on_every_core_comes_back_in_order() {
        // Uneven work (every tenth item slow), so threads finish out of turn.
        let items: Vec<u64> = (0..500).collect();
        let out = map_on_every_core(&items, |&i| {
            if i % 10 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            i * 3
        });
        assert_eq!(out, items.iter().map(|i| i * 3).collect::<Vec<_>>());
        assert!(map_on_every_core(&[] as &[u8], |_| 0).is_empty());
    }

    #[test]
    fn a_later_meta_of_one_kind_name_and_part_replaces_the_earlier() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::None).unwrap();
        let other = |name: &str, text: &str| {
            let mut m = Meta::new(MetaKind::Other, text);
            m.name = name.into();
            m
        };
        for round in 0..3 {
            for name in ["a", "b", "c"] {
                w.write_meta(&other(name, &format!("{name}{round}")))
                    .unwrap();
            }
        }
        w.write_meta(&Meta::new(MetaKind::Modules, "m")).unwrap();
        let bytes = w.finish(None, "test", None).unwrap();
        let log = Log::from_bytes("t", &bytes).unwrap();
        let kept: Vec<(MetaKind, &str, &[u8])> = log
            .metas
            .iter()
            .map(|m| (m.kind, m.name.as_str(), m.content.as_slice()))
            .collect();
        // In the order first seen, each with its last content.
        assert_eq!(
            kept,
            [
                (MetaKind::Other, "a", &b"a2"[..]),
                (MetaKind::Other, "b", b"b2"),
                (MetaKind::Other, "c", b"c2"),
                (MetaKind::Modules, "", b"m"),
            ]
        );
        assert_eq!(log.meta(MetaKind::Other, "b").unwrap().content, b"b2");
    }

    #[test]
    fn records_past_the_budget_are_problems_not_read() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
        // Text that compresses as the recorder's does is not counted,
        // however much of it; one byte repeated (a few hundred times over)
        // is, beyond RECORDS_RATIO times its stored bytes.
        let text: String = (0..20_000)
            .map(|i| format!("{} task{}\n", i * 7919 % 100_003, i % 977))
            .collect();
        for _ in 0..10 {
            w.write_meta(&Meta::new(MetaKind::SavedCmdlines, text.as_str()))
                .unwrap();
        }
        for name in ["a", "b", "c"] {
            let mut m = Meta::new(MetaKind::Other, vec![b'x'; 100_000]);
            m.name = name.into();
            w.write_meta(&m).unwrap();
        }
        w.write_cpu_data(0, &[0u8; 4096]).unwrap();
        let bytes = w.finish(None, "test", None).unwrap();
        let mut reader = LogReader::new(&bytes[..]).unwrap();
        let mut scan = BlockScan::new(None);
        // Room for two of the repeated bytes' blocks, not three.
        scan.records_budget = 2 * 100_000;
        while let Some(item) = reader.next_item().unwrap() {
            scan.item(item);
        }
        scan.finish();
        let names: Vec<&str> = scan.metas.iter().map(|(_, m)| m.name.as_str()).collect();
        assert_eq!(names, ["", "a", "b"], "saved_cmdlines, then two");
        assert_eq!(scan.problems.len(), 1, "{:?}", scan.problems);
        assert!(
            scan.problems[0].what.contains("META block not read"),
            "{:?}",
            scan.problems
        );
        assert!(
            scan.end.is_some() && scan.blocks.len() == 1,
            "the rest is read"
        );
    }

    #[test]
    fn meta_blocks_decoded_after_the_scan_keep_file_order() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
        w.write_meta(&Meta::new(MetaKind::SavedCmdlines, "7 sh\n"))
            .unwrap();
        let first_damage = w.bytes_written();
        w.write_cpu_data(0, &[1u8; 4096]).unwrap();
        let bad_meta = w.bytes_written();
        let many: String = (100..1100).map(|p| format!("{p} task{p}\n")).collect();
        w.write_meta(&Meta::new(MetaKind::SavedCmdlines, many))
            .unwrap();
        let second_damage = w.bytes_written();
        w.write_cpu_data(1, &[2u8; 4096]).unwrap();
        w.write_meta(&Meta::new(MetaKind::SavedCmdlines, "7 bash\n"))
            .unwrap();
        let mut bytes = w.finish(None, "test", None).unwrap();
        // The CPU_DATA blocks fail their CRC (damage found by the reader,
        // in the scan); the large META's zstd frame is damaged under a
        // mended CRC (found when it is decoded, after the scan).
        for at in [first_damage, second_damage] {
            bytes[at as usize + BLOCK_HEADER_LEN] ^= 0x55;
        }
        let (off, end) = {
            let off = bad_meta as usize;
            let h: [u8; BLOCK_HEADER_LEN] = bytes[off..off + BLOCK_HEADER_LEN].try_into().unwrap();
            let h = BlockHeader::parse(&h).unwrap();
            assert_ne!(h.flags & kmemtrace_format::block::FLAG_ZSTD, 0);
            (off, off + BLOCK_HEADER_LEN + h.stored_len as usize)
        };
        bytes[end - 6] ^= 0x55;
        let h: [u8; BLOCK_HEADER_LEN] = bytes[off..off + BLOCK_HEADER_LEN].try_into().unwrap();
        let crc = BlockHeader::compute_crc(&h, &bytes[off + BLOCK_HEADER_LEN..end]);
        bytes[off + 16..off + 20].copy_from_slice(&crc.to_le_bytes());
        let log = Log::from_bytes("t", &bytes).unwrap();
        let found: Vec<_> = log
            .problems
            .iter()
            .map(|p| (p.offset, matches!(p.kind, ProblemKind::Damage { .. })))
            .collect();
        assert_eq!(
            found,
            [
                (first_damage, true),
                (bad_meta, false),
                (second_damage, true)
            ],
            "{:?}",
            log.problems
        );
        assert_eq!(log.problems[1].kind, ProblemKind::BadBlock);
        // The later cmdline wins, as it would read front to back.
        assert_eq!(log.pids.comm(7), Some("bash"));
        assert_eq!(log.pids.comm(100), None);
    }

    #[test]
    fn last_stats_by_cpu_is_each_cpus_last_snapshot_of_the_phase() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::None).unwrap();
        for i in 0..40u32 {
            let phase = [StatsPhase::Start, StatsPhase::Periodic, StatsPhase::End][i as usize % 3];
            w.write_stats(&StatsRecord {
                cpu: (i / 3) % 9,
                phase,
                wall_ns: None,
                text: format!("entries: {i}\noverrun: 0\n").into_bytes(),
            })
            .unwrap();
        }
        let bytes = w.finish(None, "test", None).unwrap();
        let log = Log::from_bytes("t", &bytes).unwrap();
        for phase in [StatsPhase::Start, StatsPhase::Periodic, StatsPhase::End] {
            let all = log.last_stats_by_cpu(phase);
            for cpu in 0..10 {
                let one = log.cpu_stats(cpu, phase).last();
                assert_eq!(all.get(&cpu).map(|s| s.offset), one.map(|s| s.offset));
            }
            assert_eq!(all.len(), 9);
        }
    }

    #[test]
    fn opens_indexes_and_reads_back() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
        w.write_meta(&Meta::new(MetaKind::CpuNodeMap, "0 0\n1 1\n"))
            .unwrap();
        w.write_meta(&Meta::new(MetaKind::SavedCmdlines, "7 sh\n"))
            .unwrap();
        w.write_stats(&StatsRecord {
            cpu: 1,
            phase: StatsPhase::Start,
            wall_ns: None,
            text: b"entries: 0\noverrun: 0\n".to_vec(),
        })
        .unwrap();
        let mut pages = vec![0u8; 8192];
        pages[4096] = 0xaa;
        w.write_cpu_data(1, &pages).unwrap();
        w.write_cpu_data(0, &pages[..4096]).unwrap();
        w.write_meta(&Meta::new(MetaKind::SavedCmdlines, "8 cat\n"))
            .unwrap();
        let bytes = w.finish(None, "test", None).unwrap();
        let log = Log::from_bytes("t", &bytes).unwrap();
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        assert_eq!(log.cpus(), [0, 1]);
        assert_eq!(log.cpu_nodes.get(&1), Some(&1));
        assert_eq!(log.pids.comm(7), Some("sh"));
        assert_eq!(log.pids.comm(8), Some("cat"));
        assert!(log.end.is_some());
        assert_eq!(log.blocks_before_end, log.end.as_ref().unwrap().blocks);
        assert_eq!(log.cpu_stats(1, StatsPhase::Start).count(), 1);
        let mut seen = Vec::new();
        log.visit_cpu(1, |v| seen.push((v.index, v.raw[0])), |p| panic!("{p}"));
        assert_eq!(seen, [(0, 0), (1, 0xaa)]);
        // Truncated: every complete block still indexed, truncation noted.
        let cut = Log::from_bytes("t", &bytes[..bytes.len() - 5]).unwrap();
        assert!(cut.truncated.is_some());
        assert!(cut.end.is_none());
        assert_eq!(cut.blocks.len(), 2);
    }

    #[test]
    fn compressed_blocks_are_indexed_from_their_header_and_checked_when_read() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(1)).unwrap();
        // 40 pages of varied bytes: several zstd blocks.
        let pages: Vec<u8> = (0..40 * 4096u32).map(|i| (i * 7 % 251) as u8).collect();
        w.write_cpu_data(3, &pages).unwrap();
        let mut bytes = w.finish(None, "test", None).unwrap();
        let log = Log::from_bytes("t", &bytes).unwrap();
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        let r = log.blocks[0];
        assert_eq!((r.cpu, r.count, r.block_seq, r.first_subbuf), (3, 40, 0, 0));
        assert_ne!(r.header.stored_len, r.header.raw_len);
        let (mut st, mut out) = (Vec::new(), Vec::new());
        log.read_cpu_block(&r, &mut st, &mut out).unwrap();
        assert_eq!(out, pages);
        // Damage the end of the zstd frame and fix the CRC: the header
        // still indexes, reading the block back fails with its offset.
        let off = r.offset as usize;
        let end = off + BLOCK_HEADER_LEN + r.header.stored_len as usize;
        bytes[end - 6] ^= 0x55;
        bytes[end - 30] ^= 0x55;
        let h: [u8; BLOCK_HEADER_LEN] = bytes[off..off + BLOCK_HEADER_LEN].try_into().unwrap();
        let crc = BlockHeader::compute_crc(&h, &bytes[off + BLOCK_HEADER_LEN..end]);
        bytes[off + 16..off + 20].copy_from_slice(&crc.to_le_bytes());
        let log = Log::from_bytes("t", &bytes).unwrap();
        assert!(log.problems.is_empty(), "{:?}", log.problems);
        assert_eq!(log.blocks.len(), 1);
        let mut errors = Vec::new();
        log.visit_cpu(3, |_| {}, |p| errors.push(p));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].offset, r.offset);
        // A damaged frame header: not even the header decompresses.
        bytes[off + BLOCK_HEADER_LEN] ^= 0xff;
        let h: [u8; BLOCK_HEADER_LEN] = bytes[off..off + BLOCK_HEADER_LEN].try_into().unwrap();
        let crc = BlockHeader::compute_crc(&h, &bytes[off + BLOCK_HEADER_LEN..end]);
        bytes[off + 16..off + 20].copy_from_slice(&crc.to_le_bytes());
        let log = Log::from_bytes("t", &bytes).unwrap();
        assert_eq!(log.blocks.len(), 0);
        assert_eq!(log.problems.len(), 1);
        assert_eq!(log.problems[0].kind, ProblemKind::BadBlock);
        assert!(
            log.problems[0].what.contains("does not decompress"),
            "{:?}",
            log.problems
        );
    }

    #[test]
    fn a_built_log_reads_its_chunks_from_its_store() {
        /// Sub-buffers whose first byte is their chunk's CPU.
        struct Pages(usize);
        impl ChunkStore for Pages {
            fn read_chunk<'s>(
                &self,
                chunk: &CpuBlockRef,
                scratch: &'s mut BlockScratch,
            ) -> Result<&'s [u8], Problem> {
                let out = scratch.buffers().1;
                out.clear();
                out.resize(chunk.count as usize * self.0, 0);
                out[0] = chunk.cpu as u8;
                Ok(&out[..])
            }
            fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64> {
                Some(chunk.offset + index)
            }
        }
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut b = LogBuilder::new();
        b.record(0, Record::Arch(Box::new(arch)));
        b.record(
            5,
            Record::Meta(Meta::new(MetaKind::SavedCmdlines, "7 sh\n")),
        );
        let chunk = |cpu: u32, offset: u64| CpuBlockRef {
            offset,
            header: BlockHeader::empty(BlockType::CpuData),
            cpu,
            block_seq: 0,
            first_subbuf: 0,
            count: 2,
        };
        b.chunk(chunk(3, 100));
        b.chunk(chunk(1, 900));
        let data = kmemtrace_format::records::CpuData {
            cpu: 0,
            count: 0,
            block_seq: 0,
            first_subbuf: 0,
            data: &[],
        };
        b.record(7, Record::CpuData(data));
        assert_eq!(b.blocks(), 4, "ARCH, META, two chunks");
        let log = b
            .finish(
                "t".into(),
                Origin::Dump,
                (1, 1),
                1000,
                Box::new(Pages(4096)),
            )
            .unwrap();
        assert_eq!(log.cpus(), [1, 3]);
        assert_eq!(log.pids.comm(7), Some("sh"));
        assert_eq!(log.problems.len(), 1, "{:?}", log.problems);
        assert_eq!(log.problems[0].kind, ProblemKind::Structure);
        let mut seen = Vec::new();
        log.visit_cpu(3, |v| seen.push((v.index, v.raw[0])), |p| panic!("{p}"));
        assert_eq!(seen, [(0, 3), (1, 0)]);
        assert_eq!(log.subbuf_file_offset(&log.blocks[1], 1), Some(901));
    }

    /// A block of a kind this reader does not know is skipped unread: its
    /// payload is not decompressed (a zstd frame that does not decompress,
    /// flags it does not know: neither is a problem).
    #[test]
    fn unknown_blocks_are_skipped_unread() {
        use kmemtrace_format::block::{put_block, FLAG_ZSTD};
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut out = LogWriter::new(Vec::new(), &arch, Compression::None)
            .unwrap()
            .into_inner_unfinished();
        put_block(
            BlockType::Unknown(99),
            FLAG_ZSTD,
            b"not zstd",
            1 << 20,
            &mut out,
        );
        put_block(BlockType::Unknown(100), 0x40, b"x", 1, &mut out);
        let log = Log::from_bytes("t", &out).unwrap();
        assert_eq!(log.unknown_blocks, 2);
        assert!(log.problems.is_empty(), "{:?}", log.problems);
    }

    /// ARCH_COPY, END and SEGMENT blocks count to the budget of what
    /// blocks decode to, as META, STATS and NOTE blocks do: a damaged log
    /// may repeat any of them, each a few KiB of zstd for 64 MiB.
    #[test]
    fn every_kind_decoded_counts_to_the_budget() {
        use kmemtrace_format::block::encode_block;
        use kmemtrace_format::records::{CpuTotal, EndRecord};
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut out = LogWriter::new(Vec::new(), &arch, Compression::None)
            .unwrap()
            .into_inner_unfinished();
        let mut copy = arch.clone();
        copy.hostname = Some("h".repeat(100_000));
        let end = EndRecord {
            wall_ns: None,
            reason: "r".repeat(100_000),
            blocks: 1,
            cpus: vec![CpuTotal {
                cpu: 0,
                blocks: 0,
                subbufs: 0,
                bytes: 0,
            }],
            exit_status: None,
        };
        let z = Compression::Zstd(1);
        for _ in 0..3 {
            encode_block(BlockType::ArchCopy, &copy.encode(), z, &mut out).unwrap();
        }
        encode_block(BlockType::End, &end.encode(), z, &mut out).unwrap();
        let mut reader = LogReader::new(&out[..]).unwrap();
        let mut scan = BlockScan::new(None);
        // Room for two of them, not three.
        scan.records_budget = 2 * 100_000;
        while let Some(item) = reader.next_item().unwrap() {
            scan.item(item);
        }
        scan.finish();
        let not_read: Vec<&str> = scan
            .problems
            .iter()
            .filter(|p| p.what.contains("block not read"))
            .map(|p| p.what.split(' ').next().unwrap_or_default())
            .collect();
        assert_eq!(not_read, ["ARCH_COPY", "END"], "{:?}", scan.problems);
        assert!(scan.end.is_none());
    }

    /// Sub-buffers have file offsets only in a block stored plain, not in
    /// a compressed one that happens to store as many bytes as it holds.
    #[test]
    fn sub_buffer_offsets_only_in_plain_blocks() {
        use kmemtrace_format::block::{put_block, FLAG_ZSTD};
        use kmemtrace_format::records::encode_cpu_data_header;
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut out = LogWriter::new(Vec::new(), &arch, Compression::None)
            .unwrap()
            .into_inner_unfinished();
        // A zstd frame padded by a skippable frame (RFC 8878 §3.1.2) to
        // exactly the payload's length.
        let mut raw = encode_cpu_data_header(0, 1, 0, 0).to_vec();
        raw.extend((0..4096u32).map(|i| (i % 7) as u8));
        let mut frame = zstd::bulk::compress(&raw, 1).unwrap();
        let pad = raw.len() - frame.len() - 8;
        frame.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        frame.extend_from_slice(&(pad as u32).to_le_bytes());
        frame.resize(raw.len(), 0);
        put_block(BlockType::CpuData, FLAG_ZSTD, &frame, raw.len(), &mut out);
        let mut raw1 = encode_cpu_data_header(0, 1, 1, 1).to_vec();
        raw1.resize(CPU_DATA_HEADER_LEN + 4096, 0);
        put_block(BlockType::CpuData, 0, &raw1, raw1.len(), &mut out);
        let log = Log::from_bytes("t", &out).unwrap();
        assert_eq!(log.blocks.len(), 2, "{:?}", log.problems);
        let (z, p) = (&log.blocks[0], &log.blocks[1]);
        assert_eq!(z.header.stored_len, z.header.raw_len);
        assert_eq!(log.subbuf_file_offset(z, 0), None);
        assert_eq!(
            log.subbuf_file_offset(p, 1),
            Some(p.offset + (BLOCK_HEADER_LEN + CPU_DATA_HEADER_LEN) as u64)
        );
        let mut scratch = BlockScratch::new();
        assert_eq!(
            log.read_cpu_block_into(z, &mut scratch).unwrap(),
            &raw[24..]
        );
    }

    #[test]
    fn a_log_without_arch_is_unusable() {
        let bytes = kmemtrace_format::block::encode_file_header();
        let e = Log::from_bytes("t", &bytes).err().unwrap();
        assert!(matches!(e, LogError::NoArch(_)), "{e}");
    }
}
