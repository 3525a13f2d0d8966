//! The report model: what the checks found in one log. Built by
//! [`crate::checks`], printed by [`crate::human`] and [`crate::json`]; the
//! JSON form is documented field by field in `JSON.md`.

use kmemtrace_import::log::Origin;
use serde::Serialize;

/// The JSON document's schema name and version.
pub const SCHEMA: &str = "kmemtrace-check/1";

/// At most this many problems (and as many warnings) are kept per log, so
/// memory stays bounded whatever the input; the rest are counted.
pub const MAX_KEPT: usize = 10_000;

/// The one-word verdict on a log, worst last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Intact, and the kernel lost nothing.
    #[default]
    Ok,
    /// Intact, but the kernel lost events (buffer overruns, drops).
    Lost,
    /// Problems: damage, truncation, ordering violations, undecodable data,
    /// missing metadata.
    Damaged,
    /// Not a log, an unsupported major version, unreadable.
    Unusable,
}

impl Verdict {
    /// The exit status for this verdict, from the one table of every
    /// kmemtrace program.
    pub fn exit(self) -> kmemtrace_cli::exit::Code {
        use kmemtrace_cli::exit;
        match self {
            Verdict::Ok => exit::OK,
            Verdict::Lost => exit::NO,
            Verdict::Damaged => exit::DAMAGED,
            Verdict::Unusable => exit::INPUT,
        }
    }

    /// [`Verdict::exit`]'s number, as the JSON document gives it.
    pub fn exit_code(self) -> u8 {
        self.exit().code
    }
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "OK",
            Verdict::Lost => "LOST",
            Verdict::Damaged => "DAMAGED",
            Verdict::Unusable => "UNUSABLE",
        }
    }
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Noted; does not change the verdict.
    Warning,
    /// Makes the log DAMAGED (exit 2).
    Error,
}

/// What kind of thing a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Bytes that are not intact blocks (bad sync word, length, CRC), or a
    /// block whose payload does not decode (decompression, TLV, CPU_DATA
    /// header); the reader resynchronised after it.
    Damage,
    /// The log ends inside a block, or without an END block.
    Truncation,
    /// Blocks out of place: ARCH not first, blocks after END, a second END.
    Structure,
    /// The arch tag or file header is implausible or inconsistent.
    Arch,
    /// A CPU's `block_seq` / `first_subbuf` skip (lost blocks) or repeat.
    Sequence,
    /// The END block's totals disagree with what the log holds.
    EndTotals,
    /// A sub-buffer that does not decode to the end of its commit.
    SubBuffer,
    /// A time stamp earlier than the one before it on the same CPU.
    Ordering,
    /// Events whose id no format in the log describes.
    UnknownEvent,
    /// Metadata needed for analysis is missing or does not parse.
    Metadata,
    /// The two sources of loss figures disagree, or one is missing.
    Losses,
    /// A NOTE the recorder left, or a part of the log this checker skipped.
    Note,
}

/// Where a finding is. `offset` is always a file offset: the exact byte
/// when it can be addressed, else the start of the enclosing block (for
/// data inside compressed blocks), with `exact` false.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Location {
    pub offset: u64,
    pub exact: bool,
    /// File offset of the enclosing block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// Index of the sub-buffer in its CPU's stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subbuf: Option<u64>,
    /// Index of the sub-buffer inside its block (0-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subbuf_in_block: Option<u32>,
    /// Byte offset inside the sub-buffer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subbuf_offset: Option<u64>,
}

impl Location {
    /// A plain file offset.
    pub fn at(offset: u64) -> Self {
        Location {
            offset,
            exact: true,
            ..Default::default()
        }
    }
    /// A whole block.
    pub fn block(offset: u64) -> Self {
        Location {
            offset,
            exact: true,
            block: Some(offset),
            ..Default::default()
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.exact, self.block, self.subbuf_in_block) {
            (false, Some(b), Some(i)) => {
                write!(f, "in block at offset {b}, sub-buffer {i}")?;
                if let Some(o) = self.subbuf_offset {
                    write!(f, " +{o}")?;
                }
            }
            (false, Some(b), None) => write!(f, "in block at offset {b}")?,
            (false, None, _) => write!(f, "in the log")?,
            _ => write!(f, "offset {}", self.offset)?,
        }
        let mut extra = Vec::new();
        if let Some(c) = self.cpu {
            extra.push(format!("CPU {c}"));
        }
        if let Some(s) = self.subbuf {
            extra.push(format!("sub-buffer {s} of the CPU"));
        }
        if self.exact && self.subbuf_in_block.is_some() {
            if let Some(b) = self.block {
                extra.push(format!("block at {b}"));
            }
        }
        if !extra.is_empty() {
            write!(f, " ({})", extra.join(", "))?;
        }
        Ok(())
    }
}

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub kind: Kind,
    #[serde(flatten)]
    pub location: Location,
    pub message: String,
    /// Ordering violations: the earlier event's time stamp (ns) ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_ts: Option<u64>,
    /// ... and the later event's, which is smaller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<u64>,
}

impl Finding {
    pub fn error(kind: Kind, location: Location, message: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Error,
            kind,
            location,
            message: message.into(),
            previous_ts: None,
            ts: None,
        }
    }
    pub fn warning(kind: Kind, location: Location, message: impl Into<String>) -> Self {
        Finding {
            severity: Severity::Warning,
            ..Finding::error(kind, location, message)
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// A bounded list of findings, counting what it does not keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub kept: Vec<Finding>,
    pub total: u64,
}

impl Findings {
    pub fn push(&mut self, f: Finding) {
        self.total += 1;
        if self.kept.len() < MAX_KEPT {
            self.kept.push(f);
        }
    }
    /// Adds the finding `f` makes, made only if it is kept: a hostile log
    /// has millions, each a message formatted.
    #[inline]
    pub fn push_with(&mut self, f: impl FnOnce() -> Finding) {
        self.total += 1;
        if self.kept.len() < MAX_KEPT {
            self.kept.push(f());
        }
    }
    pub fn extend(&mut self, other: Findings) {
        let dropped = other.total - other.kept.len() as u64;
        for f in other.kept {
            self.push(f);
        }
        self.total += dropped;
    }
}

/// Kernel statistics deltas (end minus start) for one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatsDelta {
    /// Events overwritten (overwrite mode): `overrun`.
    pub overrun: u64,
    /// Events lost while the writer wrapped into uncommitted data:
    /// `commit overrun`.
    pub commit_overrun: u64,
    /// Events dropped because the buffer was full (non-overwrite mode):
    /// `dropped events`.
    pub dropped_events: u64,
    /// The three added up.
    pub total: u64,
    /// File offsets of the STATS blocks used (`start_offset` 0 when the
    /// log has no start snapshot).
    pub start_offset: u64,
    /// What the counters are counted from: `start` (the start snapshot) or
    /// `buffer creation` (no start snapshot: the end counters whole).
    pub since: &'static str,
    pub end_offset: u64,
    /// `end`, or `periodic` when the log has no end snapshot (truncated).
    pub end_phase: &'static str,
}

/// Lost events of one CPU (or all of them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Lost {
    /// The best figure: the statistics delta where there is one (it
    /// includes what sub-buffers cannot say), else the stored counts.
    pub events: u64,
    /// True when some losses have no count (missed-events flag without a
    /// stored count, and no statistics): `events` is then a lower bound.
    pub lower_bound: bool,
    /// `events / (recorded + events)`: the share of the kernel's events
    /// that are missing. 0 when nothing was recorded or lost.
    pub fraction: f64,
    /// Where `events` comes from: `stats`, `subbufs` or `none`.
    pub source: &'static str,
    /// Sum of the counts stored in sub-buffers (`RB_MISSED_STORED`).
    pub subbuf_stored: u64,
    /// Sub-buffers with the missed-events flag (`RB_MISSED_EVENTS`).
    pub subbuf_flagged: u64,
    /// Those of them without a stored count.
    pub subbuf_flag_only: u64,
    /// Kernel statistics deltas, when the log has start and end snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<StatsDelta>,
}

/// Where and when a CPU's stream lost events: a window of the one
/// [`kmemtrace_kernel::LossTracker`], as `kmemtrace-report` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LossWindow {
    /// Where the loss was noticed: the flagged or damaged sub-buffer, the
    /// first present after missing ones.
    #[serde(flatten)]
    pub location: Location,
    /// `overwritten`, `missing` or `damaged` (the first, when one window
    /// joins several).
    pub cause: &'static str,
    /// Events lost, when known: the stored count(s); `None` when a
    /// sub-buffer has only the flag, or sub-buffers are missing or damaged.
    pub count: Option<u64>,
    /// Time stamp of the last event before the loss (none: the loss came
    /// before the CPU's first event in the log).
    pub after_ts: Option<u64>,
    /// Time stamp of the first event after it (none: no event followed).
    pub before_ts: Option<u64>,
}

/// What a stream of sub-buffers holds: one CPU's (or a stretch of it, as
/// it is scanned), or all CPUs' together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// CPU_DATA blocks read (intact and decompressed).
    pub blocks: u64,
    pub subbufs: u64,
    /// Sub-buffer bytes stored (uncompressed).
    pub data_bytes: u64,
    /// Data events decoded.
    pub events: u64,
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
}

impl Counts {
    /// `last_ts - first_ts`, ns (0 without events).
    pub fn span_ns(&self) -> u64 {
        match (self.first_ts, self.last_ts) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    /// Adds the stretch of the same CPU's stream that follows this one:
    /// its first event is this one's first, its last that stretch's (time
    /// may go backwards, so these are not the smallest and largest).
    pub fn then(&mut self, next: &Counts) {
        self.add_counts(next);
        self.first_ts = self.first_ts.or(next.first_ts);
        self.last_ts = next.last_ts.or(self.last_ts);
    }

    /// Adds another CPU's: the first event is the earliest, the last the
    /// latest.
    pub fn add(&mut self, other: &Counts) {
        self.add_counts(other);
        self.first_ts = match (self.first_ts, other.first_ts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ts = self.last_ts.max(other.last_ts);
    }

    fn add_counts(&mut self, other: &Counts) {
        self.blocks += other.blocks;
        // Sub-buffers not walked are counted as their blocks claim.
        self.subbufs = self.subbufs.saturating_add(other.subbufs);
        self.data_bytes = self.data_bytes.saturating_add(other.data_bytes);
        self.events += other.events;
    }
}

/// One CPU's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuReport {
    pub cpu: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// `last_ts - first_ts`, ns.
    pub span_ns: u64,
    pub lost: Lost,
    /// Blocks and sub-buffers missing from the sequence numbering.
    pub missing_blocks: u64,
    pub missing_subbufs: u64,
    /// Sub-buffers whose header does not decode.
    pub bad_subbufs: u64,
    /// Sub-buffers whose events do not decode to the end of the commit.
    pub bad_event_streams: u64,
    pub ordering_violations: u64,
    /// Events whose id has no format in the log.
    pub unknown_events: u64,
}

/// The arch tag, as reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArchInfo {
    pub byte_order: &'static str,
    pub long_size: u8,
    pub subbuf_size: u32,
    pub data_offset: u32,
    pub page_size: Option<u32>,
    pub nr_cpus: Option<u32>,
    pub machine: Option<String>,
    pub release: Option<String>,
    pub hostname: Option<String>,
    pub trace_clock: Option<String>,
    pub recorder: Option<String>,
    pub instance: Option<String>,
    pub buffer_size_kb: Option<u32>,
}

/// Block counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BlockCounts {
    /// Intact blocks before END (what END's total counts), ARCH included.
    pub before_end: u64,
    pub cpu_data: u64,
    /// The CPU_DATA blocks by how they are stored.
    pub cpu_data_codecs: Codecs,
    pub unknown_type: u64,
    /// Damaged regions, and the bytes they cover.
    pub damaged_regions: u64,
    pub damaged_bytes: u64,
}

/// CPU_DATA blocks by how they are stored (FORMAT.md §5, §8.2, §8.3):
/// a writer may fall back block by block (kpack to zstd alone where packing
/// does not make a block smaller, zstd to plain likewise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Codecs {
    pub kpack_zstd: u64,
    pub kpack: u64,
    pub zstd: u64,
    pub plain: u64,
}

impl Codecs {
    /// Counts a block with header flags `flags`.
    pub fn count(&mut self, flags: u16) {
        use kmemtrace_format::block::{FLAG_KPACK, FLAG_ZSTD};
        let n = match (flags & FLAG_KPACK != 0, flags & FLAG_ZSTD != 0) {
            (true, true) => &mut self.kpack_zstd,
            (true, false) => &mut self.kpack,
            (false, true) => &mut self.zstd,
            (false, false) => &mut self.plain,
        };
        *n += 1;
    }

    /// `kpack + zstd 80, zstd 1`: the codecs used, most blocks first.
    pub fn describe(&self) -> String {
        let mut used = [
            ("kpack + zstd", self.kpack_zstd),
            ("kpack", self.kpack),
            ("zstd", self.zstd),
            ("plain", self.plain),
        ];
        used.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        let used: Vec<_> = used.iter().filter(|&&(_, n)| n > 0).collect();
        match used[..] {
            [(codec, _)] => codec.to_string(),
            _ => used
                .iter()
                .map(|(codec, n)| format!("{codec} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The END block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EndInfo {
    pub offset: u64,
    pub reason: String,
    pub blocks: u64,
    pub exit_status: Option<i32>,
}

/// All CPUs together.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// CPUs with data.
    pub cpus: u64,
    #[serde(flatten)]
    pub counts: Counts,
    pub span_ns: u64,
    pub lost: Lost,
    pub ordering_violations: u64,
}

/// Everything found in one log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The file as named on the command line (`<stdin>` for `-`).
    pub file: String,
    pub verdict: Verdict,
    pub exit_code: u8,
    /// The verdict line's text after `FILE: `.
    pub summary: String,
    /// Why the log is unusable (verdict `unusable` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `major.minor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format_version: Option<String>,
    /// What the file is: a kmemtrace log, or another input read as the log
    /// its import would write (the JSON's `converted_from` names it).
    #[serde(
        rename = "converted_from",
        skip_serializing_if = "is_a_log",
        serialize_with = "serialize_foreign"
    )]
    pub origin: Origin,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<ArchInfo>,
    pub blocks: BlockCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<EndInfo>,
    pub cpus: Vec<CpuReport>,
    pub total: Totals,
    pub loss_windows: Vec<LossWindow>,
    /// Errors, by file offset; at most [`MAX_KEPT`].
    pub problems: Vec<Finding>,
    /// All errors, including those not kept.
    pub problems_total: u64,
    pub warnings: Vec<Finding>,
    pub warnings_total: u64,
    /// Where the file(s) lie in a rotated capture (none: not one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationInfo>,
}

/// A rotated capture's files as checked (FORMAT.md §13).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RotationInfo {
    /// The capture's id, 16 hex digits.
    pub capture: String,
    /// The indexes of the files checked, in order.
    pub files: Vec<u32>,
    /// The capture's files not checked, as `[first, last]` runs: before
    /// the first and between two that do not follow each other (removed
    /// by the size budget, or not given).
    pub not_read: Vec<[u32; 2]>,
}

impl RotationInfo {
    pub fn of(r: &kmemtrace_import::capture::Rotation) -> Self {
        RotationInfo {
            capture: format!("{:016x}", r.capture_id),
            files: r.files.iter().map(|f| f.index).collect(),
            not_read: r
                .files_missing()
                .into_iter()
                .map(|g| [g.start, g.end - 1])
                .collect(),
        }
    }
}

fn is_a_log(o: &Origin) -> bool {
    *o == Origin::Log
}

fn serialize_foreign<S: serde::Serializer>(o: &Origin, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(o.foreign().unwrap_or_default())
}

pub use kmemtrace_kernel::human::thousands;

/// Nanoseconds as `seconds.nanoseconds`.
pub fn secs(ns: u64) -> String {
    kmemtrace_kernel::human::secs(ns, 9)
}

/// A duration in ns, short: `34.9 ms`, `2.50 s`.
pub fn duration(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

/// A fraction as a percentage with one decimal, never rounding a loss
/// down to 0.0% or up to 100.0%.
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p > 0.0 && p < 0.1 {
        "<0.1%".into()
    } else if p < 100.0 && p > 99.9 {
        ">99.9%".into()
    } else {
        format!("{p:.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_helpers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(17279), "17,279");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(secs(15_347_582_576), "15.347582576");
        assert_eq!(duration(34_924_000), "34.9 ms");
        assert_eq!(percent(17279.0 / 18518.0), "93.3%");
        assert_eq!(percent(0.00001), "<0.1%");
        assert_eq!(percent(0.0), "0.0%");
    }

    #[test]
    fn counts_follow_a_stream_or_add_up_across_cpus() {
        let at = |events, first_ts, last_ts| Counts {
            events,
            first_ts,
            last_ts,
            ..Counts::default()
        };
        // The second stretch starts earlier than the first ended.
        let (first, second) = (at(2, Some(100), Some(300)), at(1, Some(200), Some(250)));
        let mut stream = first;
        stream.then(&second);
        stream.then(&at(0, None, None));
        assert_eq!(stream, at(3, Some(100), Some(250)));
        assert_eq!(stream.span_ns(), 150);
        let mut all = first;
        all.add(&second);
        assert_eq!(all, at(3, Some(100), Some(300)));
        let mut none = Counts::default();
        none.add(&second);
        assert_eq!(none, second);
        assert_eq!(Counts::default().span_ns(), 0);
    }

    #[test]
    fn findings_are_bounded() {
        let mut f = Findings::default();
        for i in 0..(MAX_KEPT as u64 + 5) {
            f.push(Finding::error(Kind::Ordering, Location::at(i), "x"));
        }
        assert_eq!(f.kept.len(), MAX_KEPT);
        assert_eq!(f.total, MAX_KEPT as u64 + 5);
        // Past the cap a finding is counted, not made.
        f.push_with(|| unreachable!("a finding past the cap is made"));
        assert_eq!(f.total, MAX_KEPT as u64 + 6);
        let mut g = Findings::default();
        g.push_with(|| Finding::error(Kind::Ordering, Location::at(0), "y"));
        assert_eq!(g.kept.len(), 1);
        g.extend(f);
        assert_eq!(g.total, MAX_KEPT as u64 + 7);
    }

    #[test]
    fn locations_say_where() {
        let l = Location {
            offset: 100,
            exact: false,
            block: Some(100),
            cpu: Some(1),
            subbuf: Some(7),
            subbuf_in_block: Some(3),
            subbuf_offset: Some(64),
        };
        assert_eq!(
            l.to_string(),
            "in block at offset 100, sub-buffer 3 +64 (CPU 1, sub-buffer 7 of the CPU)"
        );
        assert_eq!(Location::at(5).to_string(), "offset 5");
        let whole = Location {
            exact: false,
            cpu: Some(2),
            ..Location::at(0)
        };
        assert_eq!(whole.to_string(), "in the log (CPU 2)");
    }

    #[test]
    fn codecs_counted_and_said_most_blocks_first() {
        use kmemtrace_format::block::{FLAG_KPACK, FLAG_ZSTD};
        let mut c = Codecs::default();
        assert_eq!(c.describe(), "");
        c.count(FLAG_KPACK | FLAG_ZSTD);
        assert_eq!(c.describe(), "kpack + zstd");
        for flags in [FLAG_ZSTD, 0, FLAG_ZSTD, FLAG_KPACK] {
            c.count(flags);
        }
        assert_eq!(
            c,
            Codecs {
                kpack_zstd: 1,
                kpack: 1,
                zstd: 2,
                plain: 1
            }
        );
        assert_eq!(c.describe(), "zstd 2, kpack + zstd 1, kpack 1, plain 1");
    }
}
