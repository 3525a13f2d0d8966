//! kmemtrace-import: the inputs. Every program reads a capture through
//! [`open_log`], whatever it is: a kmemtrace log, a trace-cmd trace.dat or
//! a `kmemtrace-capture.sh` dump, each opened in place as one [`Log`] (its
//! metadata, and its per-CPU sub-buffers read on demand through the one
//! walker, [`walk`]). Reading only: no system call beyond files, so it
//! builds and runs anywhere.
//!
//! - [`log`]: a capture opened for analysis (formats, symbols, tasks,
//!   per-CPU blocks, problems); [`walk`]: the one walker over its
//!   sub-buffers behind the source trait; [`completeness`]: what a damaged
//!   or cut log lacks; what the recorder saved beside the events:
//!   [`tasks`], [`stacks`], [`pagetypes`];
//! - [`import`] (`kmemtraced --import`): a dump turned into a kmemtrace log
//!   with the content a live recording would have had; [`tracedat`],
//!   [`byteorder`], [`sniff`]: reading trace.dat files, telling a dump's
//!   byte order, naming files that are no capture.
//!
//! A dump is a directory laid out like a tracefs instance, or a tar of one
//! (plain or gzip'd, possibly under a leading directory):
//! `events/header_page`, `events/header_event`,
//! `events/<system>/<event>/{format,id}`, `per_cpu/cpuN/trace_pipe_raw`
//! (every sub-buffer read, concatenated), `per_cpu/cpuN/stats`, `kallsyms`,
//! `saved_cmdlines`, `saved_tgids`, `uname`, ... as `kmemtrace-capture.sh`
//! writes them. Metadata files may also carry a `.txt` suffix (`uname.txt`,
//! `saved_cmdlines.txt`, ...), as in captures made by other scripts.
//!
//! Statistics: `per_cpu/cpuN/stats.start` is the start snapshot; the end
//! snapshot is `stats.after_drain` if present (then `stats`, read before the
//! drain, is stored as a periodic one), else `stats`.
//!
//! The arch tag comes from the dump, never from this host: `long` size,
//! data offset and sub-buffer size from `header_page`; the byte order, which
//! `header_page` does not give, from (in this order) the dump's `endianness`
//! file, the `uname -m` machine, or which byte order makes the sub-buffers
//! decode ([`byteorder`]). The log says which, in the arch tag's
//! `byte_order_source` and in a NOTE block.
//!
//! [`ImportError`] tells a dump that is not usable (missing or malformed
//! `events/header_page`, sizes that do not fit the data, a damaged archive)
//! from a log that could not be written.
#![forbid(unsafe_code)]

pub mod byteorder;
pub mod capture;
pub mod completeness;
mod dump;
mod in_place;
pub mod log;
pub mod pagetypes;
pub mod sniff;
pub mod stacks;
pub mod tasks;
pub mod tracedat;
mod ustar;
pub mod walk;

pub use log::{Log, LogError, Problem, ProblemKind};

use byteorder::{ByteOrder, Evidence, Plausibility};
use dump::{Container, Dump};
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{
    cpu_data_block_bytes, Meta, MetaKind, NoteRecord, StatsPhase, StatsRecord,
};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::{
    parse_subbuf, CpuCounters, CpuStats, HeaderEvent, HeaderPage, RunTimeEndian, SubBufLayout,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write};
use std::path::Path;

/// Other top-level files of a dump are kept as META `other` up to this size.
const MAX_OTHER: usize = 4 << 20;

/// Why an import failed.
#[derive(Debug)]
pub enum ImportError {
    /// The dump is not usable.
    Dump(String),
    /// Writing the log failed.
    Io(io::Error),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Dump(m) => f.write_str(m),
            ImportError::Io(e) => write!(f, "writing the log: {e}"),
        }
    }
}

impl From<io::Error> for ImportError {
    fn from(e: io::Error) -> Self {
        ImportError::Io(e)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct Imported {
    pub machine: Option<String>,
    pub byte_order: Option<RunTimeEndian>,
    pub byte_order_source: String,
    pub cpus: usize,
    pub subbufs: u64,
    pub events: u64,
    /// Events the kernel lost, by the end-minus-start statistics.
    pub lost: u64,
    /// Warning NOTEs written.
    pub warnings: Vec<String>,
}

/// `uname -a` split into (sysname, nodename, release, version, machine),
/// helped by `uname -m` / `uname -r` when known. GNU and busybox print
/// `sysname nodename release version... machine [processor] [platform]
/// [os]`; the version has spaces, so it is what lies between the release
/// and the machine.
fn parse_uname(all: &str, machine: Option<&str>, release: Option<&str>) -> [Option<String>; 5] {
    let t: Vec<&str> = all.split_whitespace().collect();
    if t.len() < 4 {
        return [
            t.first().map(|s| s.to_string()),
            t.get(1).map(|s| s.to_string()),
            release
                .map(str::to_string)
                .or(t.get(2).map(|s| s.to_string())),
            None,
            machine.map(str::to_string),
        ];
    }
    let mut end = t.len();
    // Operating system (GNU/Linux, Linux) at the end.
    if end > 4 && (t[end - 1].contains('/') || t[end - 1] == t[0]) {
        end -= 1;
    }
    let m = machine
        .map(str::to_string)
        .unwrap_or_else(|| t[end - 1].to_string());
    // Machine, processor and platform usually repeat the machine: the
    // version ends before the first of the trailing run that does.
    let mut vend = end;
    while vend > 4 && t[vend - 1] == m {
        vend -= 1;
    }
    let version = (vend > 3).then(|| t[3..vend].join(" "));
    [
        Some(t[0].to_string()),
        Some(t[1].to_string()),
        Some(release.unwrap_or(t[2]).to_string()),
        version,
        Some(m),
    ]
}

/// `key=value` lines (capture_info).
fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// `[local] global counter` → `local`.
fn selected(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// `4096`, `KernelPageSize:        4 kB`, `4 kB` → bytes.
fn parse_page_size(text: &str) -> Option<u32> {
    let t = text.trim();
    let t = t.rsplit_once(':').map(|(_, v)| v.trim()).unwrap_or(t);
    let mut it = t.split_whitespace();
    let n: u32 = it.next()?.parse().ok()?;
    match it.next() {
        None => Some(n),
        Some(u) if u.eq_ignore_ascii_case("kb") => n.checked_mul(1024),
        Some(u) if u.eq_ignore_ascii_case("mb") => n.checked_mul(1 << 20),
        _ => None,
    }
}

/// `node cpulist` lines → `cpu node` lines (META cpu_node_map).
fn cpu_node_map(text: &str) -> Vec<u8> {
    let lists = text.lines().filter_map(|l| {
        let (node, list) = l.trim().split_once(char::is_whitespace)?;
        Some((node.trim().parse::<u32>().ok()?, list.to_string()))
    });
    kmemtrace_format::records::cpu_node_map(lists)
}

/// Per-CPU decoding tallies while the data is written.
#[derive(Debug, Default, Clone)]
struct CpuTally {
    subbufs: u64,
    events: u64,
    bad_subbufs: u64,
    first_error: Option<String>,
    missed_flags: u64,
    stored_lost: u64,
}

impl CpuTally {
    /// Counts the events of whole sub-buffers `pages`.
    fn count(&mut self, order: RunTimeEndian, layout: &SubBufLayout, pages: &[u8]) {
        for page in pages.chunks(layout.subbuf_size) {
            self.subbufs += 1;
            match parse_subbuf(order, layout, page)
                .and_then(|s| Ok((s.count_data_events(order)?, s)))
            {
                Ok((n, s)) => {
                    self.events += n as u64;
                    if s.missed_events {
                        self.missed_flags += 1;
                    }
                    self.stored_lost = self.stored_lost.saturating_add(s.lost_events.unwrap_or(0));
                }
                Err(e) => self.bad(format!("sub-buffer {}: {e}", self.subbufs - 1)),
            }
        }
    }

    /// One sub-buffer that does not decode, and why.
    fn bad(&mut self, why: String) {
        self.bad_subbufs += 1;
        if self.first_error.is_none() {
            self.first_error = Some(why);
        }
    }
}

/// Streams one CPU's sub-buffers into CPU_DATA blocks, decoding each to
/// count its events.
struct DataWriter<'a, W: Write> {
    w: &'a mut LogWriter<W>,
    layout: SubBufLayout,
    order: RunTimeEndian,
    cur: Option<u32>,
    pending: Vec<u8>,
    block: usize,
    tallies: BTreeMap<u32, CpuTally>,
}

impl<W: Write> DataWriter<'_, W> {
    fn push(&mut self, cpu: u32, mut chunk: &[u8]) -> io::Result<()> {
        if self.cur != Some(cpu) {
            self.finish_cpu()?;
            self.cur = Some(cpu);
        }
        while !chunk.is_empty() {
            let room = self.block - self.pending.len();
            let k = room.min(chunk.len());
            self.pending.extend_from_slice(&chunk[..k]);
            chunk = &chunk[k..];
            if self.pending.len() == self.block {
                self.flush_whole()?;
            }
        }
        Ok(())
    }

    /// Writes the whole sub-buffers pending; keeps a partial one.
    fn flush_whole(&mut self) -> io::Result<()> {
        let Some(cpu) = self.cur else { return Ok(()) };
        let sb = self.layout.subbuf_size;
        let whole = self.pending.len() / sb * sb;
        if whole == 0 {
            return Ok(());
        }
        self.tallies.entry(cpu).or_default().count(
            self.order,
            &self.layout,
            &self.pending[..whole],
        );
        self.w.write_cpu_data(cpu, &self.pending[..whole])?;
        self.pending.drain(..whole);
        Ok(())
    }

    fn finish_cpu(&mut self) -> io::Result<()> {
        self.flush_whole()?;
        // A partial last sub-buffer is left out (dump_cpus warns of it).
        self.pending.clear();
        if let Some(cpu) = self.cur.take() {
            self.w.end_cpu(cpu);
        }
        Ok(())
    }
}

/// Where an import's records go: a log file being written
/// (`kmemtraced --import`), or a log opened in place ([`in_place`]). `at`
/// is where the record's content is in the input (0: not one place), for
/// a log that names the input's offsets.
trait RecordSink {
    fn meta(&mut self, at: u64, m: &Meta) -> io::Result<()>;
    fn stats(&mut self, at: u64, s: &StatsRecord) -> io::Result<()>;
    fn note(&mut self, n: &NoteRecord) -> io::Result<()>;
}

impl<W: Write> RecordSink for LogWriter<W> {
    fn meta(&mut self, _: u64, m: &Meta) -> io::Result<()> {
        self.write_meta(m)
    }
    fn stats(&mut self, _: u64, s: &StatsRecord) -> io::Result<()> {
        self.write_stats(s)
    }
    fn note(&mut self, n: &NoteRecord) -> io::Result<()> {
        self.write_note(n)
    }
}

fn note(w: &mut impl RecordSink, warning: bool, text: impl Into<String>) -> io::Result<()> {
    w.note(&NoteRecord {
        warning,
        text: text.into(),
    })
}

/// Imports `input` into a log written to `out`.
pub fn import<W: Write>(
    input: &Path,
    out: W,
    compression: Compression,
    command_line: String,
) -> Result<Imported, ImportError> {
    let d = Dump::open(input)?;
    let mut plan = Plan::new(&d, command_line)?;
    let mut w = LogWriter::new(out, &plan.arch, compression)?;
    plan.write_head(&mut w)?;
    let tallies = write_ring_buffers(&mut w, &d, plan.layout, plan.bo.order)?;
    let lost = plan.write_tail(&mut w, &tallies)?;
    let mut out = w.finish(plan.end_wall_ns, END_REASON, plan.exit_status())?;
    out.flush()?;
    Ok(plan.imported(&tallies, lost))
}

/// The reason an imported log's END gives.
const END_REASON: &str = "import";

/// What an import decides from the dump before writing anything: its
/// headers, CPUs, byte order and arch tag, and the warnings so far.
struct Plan<'d> {
    d: &'d Dump,
    warnings: Vec<String>,
    /// Taken when the metadata is written.
    headers: Option<Headers>,
    layout: SubBufLayout,
    cpus: BTreeSet<u32>,
    machine: Option<String>,
    bo: ByteOrder,
    info: BTreeMap<String, String>,
    start_stats: BTreeMap<u32, Vec<u8>>,
    arch: ArchTag,
    end_wall_ns: Option<u64>,
}

impl<'d> Plan<'d> {
    fn new(d: &'d Dump, command_line: String) -> Result<Self, ImportError> {
        let mut warnings: Vec<String> = d.warnings.clone();
        let headers = read_headers(d, &mut warnings)?;
        let layout = headers.layout;
        let cpus = dump_cpus(d, &layout, &mut warnings)?;
        let machine = uname_fields(d)[4].clone();
        let bo = infer_byte_order(d, &layout, machine.clone())?;
        warnings.extend(bo.warnings.iter().cloned());
        let info = d
            .text("capture_info")
            .map(|t| key_values(&t))
            .unwrap_or_default();
        let start_stats: BTreeMap<u32, Vec<u8>> = cpus
            .iter()
            .filter_map(|&c| Some((c, d.get(&format!("per_cpu/cpu{c}/stats.start"))?.to_vec())))
            .collect();
        let arch = arch_tag(d, &info, &bo, &layout, &cpus, &start_stats, command_line);
        let end_wall_ns = wall_ns(&info, "end_wall_s");
        Ok(Plan {
            d,
            warnings,
            headers: Some(headers),
            layout,
            cpus,
            machine,
            bo,
            info,
            start_stats,
            arch,
            end_wall_ns,
        })
    }

    /// What comes before the CPU data: where the log came from, the
    /// metadata, the start statistics.
    fn write_head(&mut self, w: &mut impl RecordSink) -> io::Result<()> {
        let d = self.d;
        write_origin_notes(w, d, &self.info, &self.bo, &mut self.warnings)?;
        if let Some(headers) = self.headers.take() {
            write_metadata(w, d, headers, &mut self.warnings)?;
        }
        for (&cpu, text) in &self.start_stats {
            w.stats(
                d.offset_of(&format!("per_cpu/cpu{cpu}/stats.start")),
                &StatsRecord {
                    cpu,
                    phase: StatsPhase::Start,
                    wall_ns: self.arch.start_wall_ns,
                    text: text.clone(),
                },
            )?;
        }
        Ok(())
    }

    /// What comes after the CPU data, whose sub-buffers held `tallies`:
    /// the end statistics and the warnings. Returns the events the kernel
    /// lost, by its counters.
    fn write_tail(
        &mut self,
        w: &mut impl RecordSink,
        tallies: &BTreeMap<u32, CpuTally>,
    ) -> io::Result<u64> {
        let end = EndOfCapture {
            dump: self.d,
            start_stats: &self.start_stats,
            tallies,
            long_size: self.layout.long_size,
            end_wall_ns: self.end_wall_ns,
        };
        let mut lost_total = 0u64;
        for &cpu in &self.cpus {
            let lost = write_end_stats(w, &end, cpu, &mut self.warnings)?;
            lost_total = lost_total.saturating_add(lost);
        }
        if self.start_stats.is_empty() {
            note(
                w,
                false,
                "the dump has no statistics from before the capture (stats.start): the end statistics are the buffer's totals since it was created or reset",
            )?;
        }
        for msg in &self.warnings {
            note(w, true, msg.clone())?;
        }
        Ok(lost_total)
    }

    /// The exit status the capture script recorded.
    fn exit_status(&self) -> Option<i32> {
        self.info
            .get("exit_status")
            .and_then(|s| s.parse::<i32>().ok())
    }

    fn imported(self, tallies: &BTreeMap<u32, CpuTally>, lost: u64) -> Imported {
        Imported {
            machine: self.machine,
            byte_order: Some(self.bo.order),
            byte_order_source: self.bo.source.to_string(),
            cpus: self.cpus.len(),
            subbufs: tallies.values().map(|t| t.subbufs).sum(),
            events: tallies.values().map(|t| t.events).sum(),
            lost,
            warnings: self.warnings,
        }
    }
}

/// A dump that cannot be imported, with why.
fn unusable(why: String) -> ImportError {
    ImportError::Dump(why)
}

/// The dump's `events/header_page` (required) and `events/header_event`
/// (optional), as read, and the sub-buffer layout the first describes.
struct Headers {
    header_page: Vec<u8>,
    header_event: Option<Vec<u8>>,
    layout: SubBufLayout,
}

/// Reads and checks the dump's header_page and header_event; a
/// `buffer_subbuf_size_kb` that disagrees with header_page is a warning.
fn read_headers(d: &Dump, warnings: &mut Vec<String>) -> Result<Headers, ImportError> {
    let hp_bytes = d
        .get("events/header_page")
        .ok_or_else(|| unusable("the dump has no events/header_page".into()))?
        .to_vec();
    let hp = HeaderPage::parse(&String::from_utf8_lossy(&hp_bytes))
        .map_err(|e| unusable(format!("events/header_page: {e}")))?;
    let layout = SubBufLayout::from_header_page(&hp);
    layout.validate().map_err(|e| {
        unusable(format!(
            "events/header_page describes an unusable sub-buffer: {e}"
        ))
    })?;
    let he_bytes = d.get("events/header_event").map(<[u8]>::to_vec);
    match &he_bytes {
        Some(b) => {
            HeaderEvent::parse(&String::from_utf8_lossy(b))
                .map_err(|e| unusable(format!("events/header_event: {e}")))?;
        }
        None => warnings.push(
            "the dump has no events/header_event; the kernel's standard event header is assumed"
                .into(),
        ),
    }
    if let Some(kb) = d.text("buffer_subbuf_size_kb") {
        if let Ok(kb) = kb.parse::<u64>() {
            // In u128: the file's number may be anything.
            let bytes = u128::from(kb) * 1024;
            if bytes != layout.subbuf_size as u128 {
                warnings.push(format!(
                    "buffer_subbuf_size_kb says {bytes} bytes but header_page {} bytes; header_page is used",
                    layout.subbuf_size
                ));
            }
        }
    }
    Ok(Headers {
        header_page: hp_bytes,
        header_event: he_bytes,
        layout,
    })
}

/// The CPUs the dump has a `per_cpu/cpuN/` directory or ring-buffer data
/// for; an error when no CPU has data, a warning for each CPU without it
/// and for data that is not a whole number of sub-buffers.
fn dump_cpus(
    d: &Dump,
    layout: &SubBufLayout,
    warnings: &mut Vec<String>,
) -> Result<BTreeSet<u32>, ImportError> {
    let mut cpus: BTreeSet<u32> = d.raw.keys().copied().collect();
    for (k, _) in d.files() {
        if let Some(rest) = k.strip_prefix("per_cpu/cpu") {
            if let Some((n, _)) = rest.split_once('/') {
                if let Some(n) = dump::cpu_number(n) {
                    cpus.insert(n);
                }
            }
        }
    }
    if d.raw.is_empty() {
        return Err(unusable(
            "the dump has no per_cpu/cpuN/trace_pipe_raw: no ring-buffer data to import".into(),
        ));
    }
    for c in &cpus {
        if !d.raw.contains_key(c) {
            warnings.push(format!(
                "per_cpu/cpu{c} has no trace_pipe_raw: no data for CPU {c}"
            ));
        }
    }
    let sb = layout.subbuf_size as u64;
    for (c, r) in &d.raw {
        if r.len % sb != 0 {
            warnings.push(format!(
                "per_cpu/cpu{c}/trace_pipe_raw is {} bytes, not a whole number of {sb}-byte sub-buffers (header_page): its last {} bytes are left out",
                r.len,
                r.len % sb
            ));
        }
    }
    Ok(cpus)
}

/// `uname`'s sysname, nodename, release, version and machine, each from its
/// own file (`uname_s`, ...) or else from the dump's `uname -a` line.
fn uname_fields(d: &Dump) -> [Option<String>; 5] {
    let uname_all = d.text("uname").map(|a| {
        parse_uname(
            &a,
            d.text("uname_m").as_deref(),
            d.text("uname_r").as_deref(),
        )
    });
    let files = ["uname_s", "uname_n", "uname_r", "uname_v", "uname_m"];
    std::array::from_fn(|i| {
        d.text(files[i])
            .or_else(|| uname_all.as_ref().and_then(|u| u[i].clone()))
    })
}

/// The recorded kernel's byte order, from the dump's `endianness` file, the
/// machine, or which order makes the sub-buffers decode ([`byteorder`]).
fn infer_byte_order(
    d: &Dump,
    layout: &SubBufLayout,
    machine: Option<String>,
) -> Result<ByteOrder, ImportError> {
    let plaus: Plausibility = byteorder::plausibility(d.raw.values().map(|r| &r.head[..]), layout);
    byteorder::infer(
        &Evidence {
            endianness_file: d.text("endianness"),
            from_tracedat: matches!(d.container, Container::TraceDat(_)),
            machine,
        },
        &plaus,
        layout,
    )
    .map_err(unusable)
}

/// A wall-clock time in whole seconds from `capture_info`, in nanoseconds.
fn wall_ns(info: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    info.get(key)
        .and_then(|s| s.parse::<u64>().ok())
        .and_then(|s| s.checked_mul(1_000_000_000))
}

/// The log's arch tag, all from the dump (never from this host).
fn arch_tag(
    d: &Dump,
    info: &BTreeMap<String, String>,
    bo: &ByteOrder,
    layout: &SubBufLayout,
    cpus: &BTreeSet<u32>,
    start_stats: &BTreeMap<u32, Vec<u8>>,
    command_line: String,
) -> ArchTag {
    let [sysname, hostname, release, version, machine] = uname_fields(d);
    let mut arch = ArchTag::new(
        bo.order,
        layout.long_size as u8,
        layout.subbuf_size as u32,
        layout.data_offset as u32,
    );
    arch.byte_order_source = Some(bo.source.to_string());
    arch.page_size = d
        .text("page_size_bytes")
        .or_else(|| d.text("page_size"))
        .and_then(|t| parse_page_size(&t));
    arch.nr_cpus = cpus.iter().next_back().and_then(|c| c.checked_add(1));
    arch.sysname = sysname;
    arch.hostname = hostname;
    arch.release = release;
    arch.version = version;
    arch.machine = machine;
    arch.trace_clock = d.text("trace_clock").and_then(|t| selected(&t));
    arch.start_wall_ns = wall_ns(info, "start_wall_s");
    arch.start_trace_ns = start_stats
        .values()
        .next()
        .and_then(|t| CpuStats::from_kernel(t, layout.long_size)?.now_ts?.ns());
    arch.recorder = Some(format!("kmemtraced {} --import", env!("CARGO_PKG_VERSION")));
    arch.command_line = Some(command_line);
    arch.instance = info.get("instance").cloned();
    arch.buffer_size_kb = d
        .text("buffer_size_kb")
        .and_then(|t| t.split_whitespace().next()?.parse().ok());
    arch.events = d
        .text("enabled_events")
        .map(|t| {
            t.split(|c: char| c.is_whitespace() || c == ',')
                .filter(|e| !e.is_empty())
                .map(|e| e.replacen('/', ":", 1))
                .collect::<Vec<_>>()
                .join(",")
        })
        .or_else(|| info.get("events").map(|e| e.replace('/', ":")));
    arch.online_cpus = d.text("cpus_online");
    arch
}

/// The NOTE blocks on where the log came from: how the byte order was
/// decided, the dump and what wrote it, the dump's own notes, why the
/// capture stopped; an incomplete drain is a warning.
fn write_origin_notes(
    w: &mut impl RecordSink,
    d: &Dump,
    info: &BTreeMap<String, String>,
    bo: &ByteOrder,
    warnings: &mut Vec<String>,
) -> io::Result<()> {
    note(w, false, bo.note.clone())?;
    let container = match d.container {
        Container::Dir => "directory".to_string(),
        Container::Tar => "tar archive".to_string(),
        Container::TarGz => "gzip'd tar archive".to_string(),
        Container::TraceDat(v) => format!("trace-cmd trace.dat (version {v})"),
    };
    let mut origin = format!("imported from the {container} {}", d.input.display());
    if !d.root.is_empty() {
        origin.push_str(&format!(" (dump in {}/)", d.root));
    }
    match (info.get("tool"), info.get("version")) {
        (Some(t), Some(v)) => origin.push_str(&format!(", written by {t} version {v}")),
        (Some(t), None) => origin.push_str(&format!(", written by {t}")),
        _ => {
            if d.which("uname").is_some_and(|n| n.ends_with(".txt")) {
                origin.push_str(", metadata in *.txt files");
            }
        }
    }
    note(w, false, origin)?;
    for n in &d.notes {
        note(w, false, n.clone())?;
    }
    if let Some(r) = info.get("stop_reason") {
        let mut t = format!("the capture stopped: {r}");
        if let Some(c) = info.get("command") {
            t.push_str(&format!(" (command: {c})"));
        }
        note(w, false, t)?;
    }
    if info.get("drain").is_some_and(|v| v != "complete") {
        warnings.push(
            "the capture script could not drain every CPU's ring buffer: the last events may be missing"
                .into(),
        );
    }
    Ok(())
}

/// The META blocks: the headers, the event formats, kallsyms, the saved
/// cmdlines and tgids, printk formats, modules, the CPU->node map, the /proc
/// files the analysis reads, and every other small top-level file.
fn write_metadata<S: RecordSink>(
    w: &mut S,
    d: &Dump,
    headers: Headers,
    warnings: &mut Vec<String>,
) -> io::Result<()> {
    let mut used: BTreeSet<String> = BTreeSet::new();
    let at = |name: &str| d.offset_of(name);
    w.meta(
        at("events/header_page"),
        &Meta::new(MetaKind::HeaderPage, headers.header_page),
    )?;
    if let Some(b) = headers.header_event {
        w.meta(
            at("events/header_event"),
            &Meta::new(MetaKind::HeaderEvent, b),
        )?;
    }
    write_event_formats(w, d, warnings)?;
    if let Some(n) = d.which("kallsyms") {
        used.insert(n);
        for m in kmemtrace_format::records::kallsyms_metas(d.get("kallsyms").unwrap_or_default()) {
            w.meta(at("kallsyms"), &m)?;
        }
    }
    let mut meta_file = |w: &mut S, kind: MetaKind, name: &str| -> io::Result<()> {
        if let Some(n) = d.which(name) {
            let b = d.get(name).unwrap_or_default();
            used.insert(n);
            if !b.is_empty() {
                w.meta(at(name), &Meta::new(kind, b))?;
            }
        }
        Ok(())
    };
    meta_file(w, MetaKind::SavedCmdlines, "saved_cmdlines.start")?;
    meta_file(w, MetaKind::SavedCmdlines, "saved_cmdlines")?;
    meta_file(w, MetaKind::SavedTgids, "saved_tgids.start")?;
    meta_file(w, MetaKind::SavedTgids, "saved_tgids")?;
    meta_file(w, MetaKind::PrintkFormats, "printk_formats")?;
    meta_file(w, MetaKind::Modules, "modules")?;
    if let Some(n) = d.which("node_cpulist") {
        used.insert(n);
        let m = cpu_node_map(&d.text("node_cpulist").unwrap_or_default());
        if !m.is_empty() {
            w.meta(at("node_cpulist"), &Meta::new(MetaKind::CpuNodeMap, m))?;
        }
    }
    // /proc files the analysis reads under their recorder names.
    for (file, name) in [
        ("pagetypeinfo", crate::pagetypes::PAGETYPEINFO_META),
        ("min_free_kbytes", crate::pagetypes::MIN_FREE_KBYTES_META),
    ] {
        if let (Some(n), Some(b)) = (d.which(file), d.get(file)) {
            used.insert(n);
            let mut m = Meta::new(MetaKind::Other, b.to_vec());
            m.name = name.into();
            w.meta(at(file), &m)?;
        }
    }
    if d.get("kallsyms").is_none() {
        warnings.push("the dump has no kallsyms: call sites cannot be named".into());
    }
    // Every other top-level file, for the record.
    for (k, b) in d.files() {
        if k.contains('/') || used.contains(k) || b.len() > MAX_OTHER {
            continue;
        }
        let mut m = Meta::new(MetaKind::Other, b);
        m.name = k.to_string();
        w.meta(at(k), &m)?;
    }
    Ok(())
}

/// One META block per `events/<system>/<event>/format`, with its id from
/// the `id` file (or else the format's `ID:` line); a format without either
/// is left out with a warning, as is a dump without any.
fn write_event_formats(
    w: &mut impl RecordSink,
    d: &Dump,
    warnings: &mut Vec<String>,
) -> io::Result<()> {
    let mut formats = 0;
    for (k, fmt_bytes) in d.files() {
        let Some(rest) = k.strip_prefix("events/") else {
            continue;
        };
        let Some(se) = rest.strip_suffix("/format") else {
            continue;
        };
        let Some((system, event)) = se.split_once('/') else {
            continue;
        };
        if event.contains('/') {
            continue;
        }
        let id_file = d
            .get(&format!("events/{system}/{event}/id"))
            .map(|b| String::from_utf8_lossy(b).trim().to_string());
        let from_format = kmemtrace_kernel::format_id(fmt_bytes);
        let id = match (id_file.as_deref().map(str::parse::<u32>), from_format) {
            (Some(Ok(i)), f) => {
                if f.is_some_and(|f| f != i) {
                    warnings.push(format!(
                        "events/{system}/{event}: id file says {i}, format says ID {}; the id file is used",
                        f.unwrap_or(0)
                    ));
                }
                i
            }
            (_, Some(f)) => f,
            (Some(Err(_)), None) | (None, None) => {
                warnings.push(format!(
                    "events/{system}/{event}/format has no usable id (no id file, no ID: line): left out"
                ));
                continue;
            }
        };
        w.meta(
            d.offset_of(k),
            &Meta::event_format(system, event, id, fmt_bytes),
        )?;
        formats += 1;
    }
    if formats == 0 {
        warnings.push(
            "the dump has no events/<system>/<event>/format files: events cannot be decoded".into(),
        );
    }
    Ok(())
}

/// The CPU_DATA blocks: every CPU's ring-buffer data, in blocks of whole
/// sub-buffers; returns what each CPU's sub-buffers held.
fn write_ring_buffers<W: Write>(
    w: &mut LogWriter<W>,
    d: &Dump,
    layout: SubBufLayout,
    order: RunTimeEndian,
) -> Result<BTreeMap<u32, CpuTally>, ImportError> {
    let block = cpu_data_block_bytes(layout.subbuf_size as u64) as usize;
    let mut dw = DataWriter {
        w,
        layout,
        order,
        cur: None,
        pending: Vec::with_capacity(block),
        block,
        tallies: BTreeMap::new(),
    };
    d.stream_raw(|cpu, chunk| dw.push(cpu, chunk))?;
    dw.finish_cpu()?;
    Ok(dw.tallies)
}

/// What a CPU's end-of-capture statistics are written with and checked
/// against.
struct EndOfCapture<'a> {
    dump: &'a Dump,
    start_stats: &'a BTreeMap<u32, Vec<u8>>,
    tallies: &'a BTreeMap<u32, CpuTally>,
    long_size: usize,
    end_wall_ns: Option<u64>,
}

/// Writes `cpu`'s statistics from the end of the capture and returns the
/// events the kernel lost on it, by its counters; events decoded that the
/// counters do not account for, missing statistics and undecodable
/// sub-buffers are warnings.
fn write_end_stats(
    w: &mut impl RecordSink,
    end: &EndOfCapture,
    cpu: u32,
    warnings: &mut Vec<String>,
) -> io::Result<u64> {
    let d = end.dump;
    let mut lost_total = 0u64;
    let stats = d
        .get(&format!("per_cpu/cpu{cpu}/stats"))
        .map(<[u8]>::to_vec);
    let after = d
        .get(&format!("per_cpu/cpu{cpu}/stats.after_drain"))
        .map(<[u8]>::to_vec);
    let (periodic, end_text) = match (stats, after) {
        (s, Some(a)) => (s, Some(a)),
        (s, None) => (None, s),
    };
    // Snapshots in the order taken: start, before the drain, after it.
    let periodic_stats = periodic
        .as_ref()
        .and_then(|t| CpuStats::from_kernel(t, end.long_size));
    let at = d.offset_of(&format!("per_cpu/cpu{cpu}/stats"));
    if let Some(text) = periodic {
        w.stats(
            at,
            &StatsRecord {
                cpu,
                phase: StatsPhase::Periodic,
                wall_ns: end.end_wall_ns,
                text,
            },
        )?;
    }
    let start = end
        .start_stats
        .get(&cpu)
        .and_then(|t| CpuStats::from_kernel(t, end.long_size));
    let t = end.tallies.get(&cpu).cloned().unwrap_or_default();
    if let Some(text) = end_text {
        let end_stats = CpuStats::from_kernel(&text, end.long_size);
        let after = d.offset_of(&format!("per_cpu/cpu{cpu}/stats.after_drain"));
        w.stats(
            if after > 0 { after } else { at },
            &StatsRecord {
                cpu,
                phase: StatsPhase::End,
                wall_ns: end.end_wall_ns,
                text,
            },
        )?;
        if let Some(es) = end_stats {
            let start = start.unwrap_or_default();
            // Followed snapshot by snapshot, as kmemtrace-check and the
            // report count them: a reset between two counts the value
            // after it, a 32-bit counter's pass over 2^32 its step.
            let counters = CpuCounters::over(&start, periodic_stats.iter().chain([&es]));
            let lost = counters.lost();
            lost_total = lost_total.saturating_add(lost);
            // Events the kernel handed out, by its own counters.
            let read = es.read_events.map(|_| counters.read_events.total());
            let expected = if d
                .get(&format!("per_cpu/cpu{cpu}/stats.after_drain"))
                .is_some()
            {
                read
            } else {
                es.entries.map(|e| e.saturating_add(read.unwrap_or(0)))
            };
            if let Some(x) = expected {
                if x != t.events && d.raw.contains_key(&cpu) {
                    warnings.push(format!(
                        "cpu{cpu}: {} events decoded, but the kernel's statistics count {x}",
                        t.events
                    ));
                }
            }
            if lost > 0 || t.missed_flags > 0 {
                note(
                    w,
                    false,
                    format!(
                        "cpu{cpu}: the kernel lost {lost} events (statistics: overrun, commit overrun, dropped); {} sub-buffers flag missed events, {} lost events stored in them",
                        t.missed_flags, t.stored_lost
                    ),
                )?;
            }
        }
    } else {
        warnings.push(format!(
            "per_cpu/cpu{cpu} has no stats file: lost events unknown"
        ));
    }
    if t.bad_subbufs > 0 {
        warnings.push(format!(
            "cpu{cpu}: {} of {} sub-buffers do not decode ({})",
            t.bad_subbufs,
            t.subbufs,
            t.first_error.as_deref().unwrap_or("?")
        ));
    }
    Ok(lost_total)
}

/// Opens what the user named as one log: one path as [`open_log`] opens
/// it, where the name a rotated capture was recorded under (`-o`), which
/// no file has, stands for its files there now; several paths, the files
/// of one rotated capture, read as one ([`capture::join`]).
pub fn open_capture(paths: &[std::path::PathBuf]) -> Result<crate::log::Log, crate::log::LogError> {
    let found: Vec<std::path::PathBuf>;
    let paths = match paths {
        [one] if one.as_os_str() != "-" && !one.exists() => {
            found = kmemtrace_format::rotation::files_of(one)
                .into_iter()
                .map(|(_, p)| p)
                .collect();
            if found.is_empty() {
                return open_log(one);
            }
            &found[..]
        }
        _ => paths,
    };
    match paths {
        [] => Err(capture::refused("no input given".into())),
        [one] => open_log(one),
        many => {
            let mut logs = Vec::with_capacity(many.len());
            let mut left_out = Vec::new();
            for p in many {
                let opened = open_log(p);
                if capture::begun_only(p, &opened) {
                    left_out.push(format!(
                        "{}: cut before its start was written (the recorder stopped as it began the file): left out",
                        p.display()
                    ));
                    continue;
                }
                let log = opened?;
                if let Some(what) = log.origin.foreign() {
                    return Err(capture::refused(format!(
                        "{}: {what}, not a file of a rotated capture: give it alone",
                        p.display()
                    )));
                }
                logs.push(log);
            }
            let mut log = capture::join(logs)?;
            if let Some(r) = &mut log.rotation {
                r.left_out = left_out;
            }
            Ok(log)
        }
    }
}

/// Opens `path` for reading as a log: a kmemtrace log as it is; a
/// trace-cmd trace.dat or a kmemtrace-capture.sh dump (a directory, or a
/// tar, gzip'd or not) read in place as the log its import would write
/// (the `in_place` module: no file is written), so every tool reads them
/// directly; the log's [`crate::log::Origin`] says which. Anything else is
/// refused with what it is and what to run ([`sniff`]).
pub fn open_log(path: &Path) -> Result<crate::log::Log, crate::log::LogError> {
    use crate::log::{Log, LogError};
    let kind = if path.as_os_str() == "-" {
        sniff::Input::Log
    } else {
        sniff::sniff(path)
    };
    let invalid = |e: String| LogError::Io(io::Error::new(io::ErrorKind::InvalidData, e));
    match kind {
        sniff::Input::Log => Log::open(path),
        sniff::Input::Other(what) => Err(invalid(what)),
        sniff::Input::TraceDat | sniff::Input::Dump => {
            in_place::open(path).map_err(|e| invalid(e.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_lines() {
        let s390 =
            "Linux (none) 6.1.0-50-s390x #1 SMP Debian 6.1.176-1 (2026-07-02) s390x GNU/Linux";
        let u = parse_uname(s390, None, None);
        assert_eq!(u[0].as_deref(), Some("Linux"));
        assert_eq!(u[1].as_deref(), Some("(none)"));
        assert_eq!(u[2].as_deref(), Some("6.1.0-50-s390x"));
        assert_eq!(
            u[3].as_deref(),
            Some("#1 SMP Debian 6.1.176-1 (2026-07-02)")
        );
        assert_eq!(u[4].as_deref(), Some("s390x"));
        let gnu = "Linux h 6.8.0 #1 SMP PREEMPT_DYNAMIC Mon x86_64 x86_64 x86_64 GNU/Linux";
        let u = parse_uname(gnu, Some("x86_64"), None);
        assert_eq!(u[3].as_deref(), Some("#1 SMP PREEMPT_DYNAMIC Mon"));
        assert_eq!(u[4].as_deref(), Some("x86_64"));
        let u = parse_uname("Linux h", None, Some("6.1"));
        assert_eq!(u[2].as_deref(), Some("6.1"));
        assert_eq!(parse_uname("", None, None)[0], None);
    }

    #[test]
    fn small_parsers() {
        assert_eq!(parse_page_size("4096\n"), Some(4096));
        assert_eq!(parse_page_size("KernelPageSize:        4 kB\n"), Some(4096));
        assert_eq!(parse_page_size("64 kB"), Some(65536));
        assert_eq!(parse_page_size("lots"), None);
        assert_eq!(
            selected("[local] global counter\n").as_deref(),
            Some("local")
        );
        assert_eq!(selected("local"), None);
        assert_eq!(
            kmemtrace_kernel::format_id(b"name: kfree\nID: 612\nformat:\n"),
            Some(612)
        );
        assert_eq!(kmemtrace_kernel::format_id(b"name: kfree\n"), None);
        assert_eq!(
            cpu_node_map("0 0-1,4\n1 2-3\n"),
            b"0 0\n1 0\n2 1\n3 1\n4 0\n"
        );
        let kv = key_values("a=1\nb = two words\nnoeq\n");
        assert_eq!(kv.get("b").map(String::as_str), Some("two words"));
        assert_eq!(kv.len(), 2);
    }
}
