//! The report as plain data: what the printers (`kmemtrace-print`: text,
//! JSON, HTML) show, and what `kmemtrace-diff` reads back from a stored
//! JSON document (Serialize and Deserialize write and read the same keys).
//! Field meanings are documented in `JSON.md`; every number is exact. A key
//! added to the document later takes `#[serde(default)]`, so that documents
//! stored before it still load (the golden ones in `tests/data/golden` are
//! such documents: a test loads them); names from the analysis' own tables
//! are [`Name`]s, which a document can give back.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;

/// A name the analysis takes from its own tables (a kind, a title), or one
/// read back from a report document.
pub type Name = Cow<'static, str>;

/// How serious a finding is; ordered, so that `--fail-on` compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Info, Severity::Warning, Severity::Error];
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A sort key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Callsite,
    Bytes,
    Req,
    Hit,
    Frag,
    Waste,
    Pingpong,
    Live,
    Peak,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Callsite => "callsite",
            SortKey::Bytes => "bytes",
            SortKey::Req => "req",
            SortKey::Hit => "hit",
            SortKey::Frag => "frag",
            SortKey::Waste => "waste",
            SortKey::Pingpong => "pingpong",
            SortKey::Live => "live",
            SortKey::Peak => "peak",
        }
    }
}

/// The page tables' sort keys (`perf kmem --page -s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSortKey {
    Page,
    Callsite,
    Bytes,
    Hit,
    Order,
    Migtype,
    Gfp,
}

/// What live pages are grouped by (`page_owner_sort --cull`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CullKey {
    Stack,
    Callsite,
    Pid,
    Comm,
}

impl CullKey {
    pub fn name(self) -> &'static str {
        match self {
            CullKey::Stack => "stack",
            CullKey::Callsite => "callsite",
            CullKey::Pid => "pid",
            CullKey::Comm => "comm",
        }
    }
}

/// `--cull`: comma-separated `stack`, `callsite`, `pid`, `comm`.
pub fn parse_cull(s: &str) -> Result<Vec<CullKey>, String> {
    let mut v = Vec::new();
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        let key = match k {
            "stack" | "stacktrace" => CullKey::Stack,
            "callsite" => CullKey::Callsite,
            "pid" => CullKey::Pid,
            "comm" | "name" => CullKey::Comm,
            _ => {
                return Err(format!(
                    "unknown grouping {k:?}: use stack, callsite, pid, comm"
                ))
            }
        };
        if !v.contains(&key) {
            v.push(key);
        }
    }
    if v.is_empty() {
        return Err("empty grouping list".into());
    }
    Ok(v)
}

/// Keys that only the page tables have.
const PAGE_ONLY_KEYS: [&str; 4] = ["page", "order", "migtype", "gfp"];

/// The page tables' keys among `-s`'s (the slab-only ones are theirs);
/// `bytes,hit` (perf's default) if there is none.
pub fn parse_page_sort(s: &str) -> Vec<PageSortKey> {
    let v: Vec<PageSortKey> = s
        .split(',')
        .map(str::trim)
        .filter_map(|k| {
            Some(match k {
                "page" => PageSortKey::Page,
                "callsite" => PageSortKey::Callsite,
                "bytes" | "alloc" => PageSortKey::Bytes,
                "hit" | "hits" => PageSortKey::Hit,
                "order" => PageSortKey::Order,
                "migtype" => PageSortKey::Migtype,
                "gfp" => PageSortKey::Gfp,
                _ => return None,
            })
        })
        .collect();
    if v.is_empty() {
        vec![PageSortKey::Bytes, PageSortKey::Hit]
    } else {
        v
    }
}

/// `-s`: sort keys, comma-separated, first key first. Keys of the page
/// tables only ([`parse_page_sort`]) are left to them; with none for the
/// slab tables, theirs are `frag,hit,bytes`.
pub fn parse_sort(s: &str) -> Result<Vec<SortKey>, String> {
    let mut v = Vec::new();
    let mut page_keys = 0;
    for k in s.split(',').map(str::trim).filter(|k| !k.is_empty()) {
        if PAGE_ONLY_KEYS.contains(&k) {
            page_keys += 1;
            continue;
        }
        v.push(match k {
            "callsite" | "ptr" => SortKey::Callsite,
            "bytes" | "alloc" => SortKey::Bytes,
            "req" => SortKey::Req,
            "hit" | "hits" => SortKey::Hit,
            "frag" => SortKey::Frag,
            "waste" => SortKey::Waste,
            "pingpong" => SortKey::Pingpong,
            "live" => SortKey::Live,
            "peak" => SortKey::Peak,
            _ => {
                return Err(format!(
                    "unknown sort key {k:?}: use callsite, bytes, req, hit, frag, waste, pingpong, live, peak (slab), page, order, migtype, gfp (page)"
                ))
            }
        });
    }
    if v.is_empty() && page_keys > 0 {
        return Ok(vec![SortKey::Frag, SortKey::Hit, SortKey::Bytes]);
    }
    if v.is_empty() {
        return Err("empty sort key list".into());
    }
    Ok(v)
}

pub mod stalls;
pub use stalls::Stalls;

/// A kernel address or pointer: an integer in the model, written
/// `0xffff...` in JSON and text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub u64);

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:x}", self.0)
    }
}

impl Serialize for Addr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        s.strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .map(Addr)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not a 0x address")))
    }
}

/// Generates [`PassSections`] from the list.
macro_rules! pass_sections_struct {
    ($($field:ident: $pass:ty => $section:ty,)*) => {
        /// The sections the passes make themselves
        /// ([`crate::passes::MakesSection`]), one field per pass of the
        /// list, named as the pass; a document without one loads it empty.
        #[derive(Clone, Debug, Default, Serialize, Deserialize)]
        pub struct PassSections {
            $(#[serde(default, skip_serializing_if = "SectionSkip::skip")] pub $field: $section,)*
        }
    };
}

/// Whether a pass's section is left out of the JSON document: a section
/// of events the log may not have (the stalls) is absent rather than
/// empty, so that documents of logs without them stay as they were.
pub trait SectionSkip {
    fn skip(&self) -> bool {
        false
    }
}

impl SectionSkip for CrossCpu {}

impl SectionSkip for Stalls {
    fn skip(&self) -> bool {
        self.is_empty()
    }
}

crate::for_each_pass_section!(pass_sections_struct);

/// The JSON document's schema tag.
pub const SCHEMA: &str = "kmemtrace-report/1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub schema: Name,
    pub generator: String,
    /// Documents stored without it (the golden ones) still load.
    #[serde(default = "Input::unknown")]
    pub input: Input,
    pub kernel: Kernel,
    pub filters: Filters,
    pub capture: Capture,
    pub summary: Summary,
    pub sort: Vec<String>,
    /// The `-l N` that cut the row arrays; `None`: they are complete.
    pub lines: Option<usize>,
    pub callsites: Vec<CallsiteRow>,
    pub caches: Vec<CacheRow>,
    pub size_classes: Vec<CacheRow>,
    /// The sections the passes make themselves, each under its pass's name
    /// ([`crate::for_each_pass_section`]).
    #[serde(flatten)]
    pub sections: PassSections,
    pub misuse: Vec<Finding>,
    pub trace_completeness: TraceCompleteness,
    pub leaks: Leaks,
    /// Per pointer (`--alloc` only), else null.
    pub allocs: Option<Vec<AllocRow>>,
    pub page_allocator: PageStats,
    /// Page frames followed from allocation to free.
    pub pages: PageReport,
    /// Live slab bytes over time, for plots and counter tracks (not in
    /// the JSON document).
    #[serde(skip)]
    pub live_timeline: TimeSeries,
    /// Page-allocator bytes allocated minus freed since the start, over
    /// time (the page stats' `alloc_bytes - free_bytes` at the end).
    #[serde(skip)]
    pub page_timeline: TimeSeries,
    /// Rates per CPU and live bytes per call site over time, when asked
    /// for ([`crate::run::Options::timelines`]; not in the JSON document).
    #[serde(skip)]
    pub timelines: Option<Timelines>,
    pub problems: Vec<Problem>,
    /// Source lines of the call sites the tables name (`--vmlinux`): absent
    /// without debug info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Sources>,
}

/// Source lines from the recorded kernel's debug info.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sources {
    /// The file, and how its addresses were matched to the log's (the
    /// KASLR offset).
    pub debug_info: String,
    /// Each call site of the slab, leak and page call-site tables and of
    /// the allocation stall episodes once, in that order.
    pub callsites: Vec<SourceRow>,
}

/// One call site's source chain.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceRow {
    pub callsite: String,
    pub addr: Addr,
    /// Innermost first: the function inlined deepest at the call, each
    /// function that inlined it, then the function the code is in (as
    /// `scripts/faddr2line` prints them); empty where the debug info does
    /// not cover the address.
    pub frames: Vec<crate::SourceFrame>,
}

/// A value over time, at the end of each time bin that changed it: a
/// running total (live slab bytes, page bytes held) or a count per bin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeSeries {
    /// The bins' width, nanoseconds: a power of two; bin `i` spans
    /// `[i * bin_ns, (i + 1) * bin_ns)` of the trace clock.
    pub bin_ns: u64,
    pub points: Vec<crate::passes::timeline::BinPoint>,
}

/// The series a picture of the capture needs, beyond the live totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timelines {
    /// Selected slab allocation (also failed) and free events per CPU.
    pub slab_rates: Vec<CpuRateSeries>,
    /// Selected successful page allocations and frees per CPU.
    pub page_rates: Vec<CpuRateSeries>,
    /// Live bytes of the call sites with the highest peaks (at most
    /// [`Timelines::TOP_SITES`]), highest first.
    pub site_live: Vec<SiteSeries>,
}

impl Timelines {
    pub const TOP_SITES: usize = 8;
}

/// One CPU's events per bin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuRateSeries {
    pub cpu: u32,
    pub allocs: TimeSeries,
    pub frees: TimeSeries,
}

/// One call site's live bytes over time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteSeries {
    pub callsite: String,
    pub peak_live_bytes: u64,
    pub live: TimeSeries,
}

/// Something in the log that limits what the report can say, written in
/// JSON as its sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The container: a damaged, missing or unreadable block.
    Log(kmemtrace_import::log::Problem),
    /// A kmem event format the decoder cannot fully use.
    Format(String),
    /// A CPU's data: a sub-buffer or record that does not decode.
    Data {
        cpu: u32,
        problem: kmemtrace_import::log::Problem,
    },
    /// More data problems on a CPU than are listed.
    NotListed { cpu: u32, count: u64 },
    /// A problem read back from a report document: its sentence.
    Read(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Log(p) | Problem::Data { problem: p, .. } => p.fmt(f),
            Problem::Format(w) => write!(f, "format: {w}"),
            Problem::NotListed { cpu, count } => {
                write!(f, "CPU {cpu}: {count} more problems not listed")
            }
            Problem::Read(sentence) => f.write_str(sentence),
        }
    }
}

impl Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A document's problem: its sentence, or an object with its `message`.
impl<'de> Deserialize<'de> for Problem {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Sentence(String),
            Object { message: String },
        }
        Ok(match Written::deserialize(d)? {
            Written::Sentence(s) | Written::Object { message: s } => Problem::Read(s),
        })
    }
}

/// Page-allocator counts (events in the time window on selected CPUs and
/// pids).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PageStats {
    /// `mm_page_alloc` events.
    pub allocs: u64,
    /// `page_size << order` summed over successful allocations.
    pub alloc_bytes: u64,
    /// `mm_page_alloc` with no page (`pfn` -1).
    pub failed: u64,
    /// `mm_page_free` events: every page freed, batched ones included.
    pub frees: u64,
    /// `page_size << order` summed over `mm_page_free`.
    pub free_bytes: u64,
    /// `mm_page_free_batched` events: frees among `frees` that went through
    /// the batched path (each also has its `mm_page_free`).
    pub batched_frees: u64,
    pub zone_locked: u64,
    pub pcpu_drains: u64,
    pub extfrag: u64,
    /// Successful allocations by order (index = order; the last one
    /// collects orders of 10 and more).
    pub allocs_by_order: Vec<u64>,
}

/// Requests and the bytes they asked for.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PageRequests {
    pub requests: u64,
    pub bytes: u64,
}

/// The page-allocator report: `perf kmem stat --page`'s summary and more.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageReport {
    /// The recorded kernel's migratetype names by number.
    pub migratetypes: Vec<String>,
    /// Why the names are a guess (the log has no /proc/pagetypeinfo).
    pub migratetype_names_fallback: Option<String>,
    pub pageblock_order: Option<u32>,
    /// Successful `mm_page_alloc`.
    pub allocations: PageRequests,
    /// `mm_page_free`.
    pub frees: PageRequests,
    /// Frees of blocks allocated in the capture (whoever allocated them):
    /// `frees` = `alloc_freed` + `free_only`, as in perf's summary.
    pub alloc_freed: PageRequests,
    /// Allocations still live at the end. Without filters, `allocations`
    /// = `alloc_freed` + `alloc_only` + `allocated_while_live`, but for
    /// blocks the recorder (whose events are left out) allocated or freed.
    pub alloc_only: PageRequests,
    /// Frees of blocks not allocated in the capture.
    pub free_only: PageRequests,
    pub allocation_failures: u64,
    /// Frees of a live block with another order than its allocation
    /// (split_page(), alloc_pages_exact()): `misuse`'s two counts added.
    pub order_mismatch_frees: u64,
    /// Allocations returning a block the trace had live
    /// (`misuse.allocated_while_live.count`).
    pub allocated_while_live: u64,
    /// Frames freed twice, blocks allocated while live, frees with
    /// another order: informational (see JSON.md).
    pub misuse: PageMisuseReport,
    /// Allocations by order: `order` ("10+" for 10 and more) and counts by
    /// migratetype number (the last column also takes unknown ones).
    pub by_order_migratetype: Vec<OrderRow>,
    /// Blocks still allocated at the end, by order and migratetype.
    pub live_by_order_migratetype: Vec<OrderRow>,
    pub live_oldest_age_ns: Option<u64>,
    /// Per-CPU page lists (events-kmem.rst section 4).
    pub per_cpu_lists: Vec<PcpRow>,
    /// Pages drained by a CPU from another CPU's list: (list's CPU,
    /// draining CPU, pages).
    pub drained_from_other_cpus: Vec<(u32, u32, u64)>,
    /// External fragmentation (section 5): `mm_page_alloc_extfrag` by its
    /// fields, the most first.
    pub fallbacks: Vec<FallbackRow>,
    pub fallbacks_total: u64,
    /// Fallbacks from a block smaller than a pageblock (`fallback_order <
    /// pageblock_order`): these split pageblocks between migratetypes.
    pub fallbacks_fragmenting: u64,
    /// Fallbacks per second of the capture: (second from the first event,
    /// count).
    pub fallbacks_per_second: Vec<(u64, u64)>,
    /// ... of them fragmenting (seconds with none left out).
    pub fallbacks_fragmenting_per_second: Vec<(u64, u64)>,
    /// What the per-CPU-list and fragmentation figures suggest, as
    /// events-kmem.rst reads them (see JSON.md for the thresholds).
    pub advice: Vec<PageAdvice>,
    /// The kernel stacks taken with allocations.
    pub stacks: PageStacks,
    /// The recorded kernel's functions the page-allocator rule matched
    /// (see `page_callers`): frames of these (and of the tracing
    /// machinery) are passed over to find the call site.
    pub allocator_functions: Vec<String>,
    /// Allocations by call site, order, migratetype and GFP flags, as
    /// `perf kmem stat --page --caller` groups them; sorted by `-s`.
    pub callsites: Vec<PageCallsiteRow>,
    /// The GFP flag names the tables use in short form, with the recorded
    /// kernel's full names and values.
    pub gfp_legend: Vec<GfpLegendEntry>,
    /// Allocations by page frame (`--page --alloc` only), as `perf kmem
    /// stat --page --alloc` groups them.
    pub by_pfn: Option<Vec<PfnRow>>,
    /// Blocks still allocated at the end, grouped by `--cull` (default:
    /// stack), the most bytes first.
    pub live: Vec<LiveGroupRow>,
    /// What `live` is grouped by.
    pub live_grouped_by: Vec<String>,
}

/// What a page figure suggests.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageAdvice {
    /// `per_cpu_lists_small`, `per_cpu_imbalance`, `cross_cpu_frees` or
    /// `fragmentation_sustained`.
    pub kind: Name,
    /// The figures behind it.
    pub observed: String,
    pub suggests: String,
    /// For sustained fragmentation: the document's `min_free_kbytes`
    /// step, with the recorded kernel's numbers.
    pub min_free_kbytes: Option<MinFreeKbytes>,
}

/// events-kmem.rst: raise `min_free_kbytes` in steps of 3 x pageblock
/// size x online nodes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MinFreeKbytes {
    /// The recorded kernel's value, if the log has it.
    pub current: Option<u64>,
    pub pageblock_kb: u64,
    pub nodes: u32,
    /// Where `nodes` comes from: `pagetypeinfo`, `cpu_node_map` or
    /// `assumed`.
    pub nodes_from: Name,
    pub step: u64,
    /// `current + step`.
    pub suggested: Option<u64>,
}

/// Page misuse as the trace shows it. The kernel hands out pages without
/// `mm_page_alloc` (the bulk allocator, compaction, alloc_contig_range), so
/// every finding here is `info`: none is counted by `--fail-on`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageMisuseReport {
    /// Frees of a frame the capture saw freed (itself, or inside a freed
    /// buddy block), with no traced allocation of it since.
    pub freed_twice: PageFinding,
    /// Frees of frames the capture saw neither allocated nor freed before:
    /// allocated before the capture (or freed so long before that the
    /// bounded memory of freed frames forgot them).
    pub freed_unseen: PageRequests,
    /// Frees of a live block with a larger order than its allocation's,
    /// and with a smaller one (split_page(), alloc_pages_exact()).
    pub freed_with_larger_order: u64,
    pub freed_with_smaller_order: u64,
    /// Allocations returning a block the trace had live: its free was not
    /// traced, or lost.
    pub allocated_while_live: PageFinding,
}

/// One page finding.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageFinding {
    pub kind: Name,
    pub severity: Severity,
    pub count: u64,
    pub bytes: u64,
    /// Occurrences where events were lost between the frame's two events
    /// (judged at about a millisecond, erring towards uncertain).
    pub uncertain: u64,
    /// (order, occurrences), orders of 10 and more as `10+`.
    pub by_order: Vec<(String, u64)>,
    /// The tasks of the revealing events by name, the most first (at most
    /// 10).
    pub tasks: Vec<(String, u64)>,
    pub first: Option<PageOccurrenceRow>,
    /// What explains the occurrences besides misuse.
    pub judgement: String,
}

/// The first occurrence of a page finding, and the frame's earlier event
/// (the earlier free; the live block's allocation).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageOccurrenceRow {
    pub ts_ns: u64,
    /// Seconds from the first event.
    pub rel_s: f64,
    pub pfn: Addr,
    pub order: u32,
    pub cpu: u32,
    pub pid: i32,
    pub comm: Option<String>,
    pub earlier_ts_ns: u64,
    pub earlier_order: u32,
    pub earlier_cpu: u32,
    pub earlier_pid: i32,
    pub earlier_comm: Option<String>,
    pub uncertain: bool,
}

/// The kernel stacks taken with page allocations (`kmemtraced
/// --page-stacks`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageStacks {
    /// The log holds the stack record's format (stacks were asked for).
    pub recorded: bool,
    /// `kernel_stack` records, and those matched to their allocation.
    pub records: u64,
    pub matched: u64,
    /// Successful allocations (in the filters) that have a stack.
    pub allocations_with_stack: u64,
    /// Allocations (any) still waiting for their stack when their CPU's
    /// stream ended: the kernel takes the stack after the event, and the
    /// capture stopped in between.
    pub cut_at_end: u64,
    /// `kernel_stack` records at the start of their CPU's stream that no
    /// allocation took: tracing came on between an allocation (not
    /// recorded, but kept in a scratch buffer for the trigger's filter)
    /// and its stack (recorded). Added after the first documents.
    #[serde(default)]
    pub cut_at_start: u64,
    /// Distinct stacks.
    pub distinct: u64,
    /// How the stacks sampled the allocations, where they did (absent: a
    /// stack with every allocation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<PageStackSampling>,
}

/// Page stacks taken for a sample of page frames (`kmemtraced
/// --page-stacks N`): the call-site table's hits and bytes are estimates.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageStackSampling {
    /// Stacks for 1 in this many page frames.
    pub one_in: u64,
    /// Those whose frame number has these bits clear (the trigger's
    /// `!(pfn & MASK)`).
    pub pfn_mask: Addr,
    /// What one sampled allocation stands for, by order from 0: `one_in`
    /// until the order whose blocks are aligned past the mask's lowest bit,
    /// then half as much per order, down to 1.
    pub weight_by_order: Vec<u64>,
    /// Successful allocations (in the filters) outside the sample, counted
    /// in every total but in no call-site row.
    pub not_sampled: u64,
}

/// One row of the page call-site table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PageCallsiteRow {
    /// `function+0xoff` of the first frame outside the allocator; `-`
    /// without a stack.
    pub callsite: String,
    /// 0 without a stack.
    pub addr: Addr,
    pub order: u32,
    pub migratetype: String,
    pub gfp: Gfp,
    /// Allocations, and their bytes; estimates where the stacks were
    /// sampled (see `sampled`).
    pub hits: u64,
    pub bytes: u64,
    /// Where the stacks were sampled: the allocations seen in the sample,
    /// each counted in `hits` as the allocations it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<u64>,
    /// Where the stacks were sampled: the 95 % margin of `hits`, counted in
    /// the regions the sample takes or leaves whole (frames reused in place
    /// widen it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<u64>,
    /// Of these, still allocated at the end.
    pub live_blocks: u64,
    pub live_bytes: u64,
    /// Distinct stacks behind the row, and the most frequent one
    /// (innermost first, from the call site; with `--stacks`, else empty).
    pub stacks: u64,
    pub top_stack: Arc<[String]>,
    /// The most frequent stack whatever `--stacks` says (empty without
    /// one), for the HTML page, which shows it folded; not in the JSON,
    /// whose `top_stack` keeps its meaning.
    #[serde(skip)]
    pub commonest_stack: Arc<[String]>,
}

/// A GFP flag's short name, as the kernel names it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GfpLegendEntry {
    pub short: String,
    pub name: String,
    pub value: String,
}

/// One row of the per-page-frame table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PfnRow {
    pub pfn: Addr,
    pub hits: u64,
    pub bytes: u64,
    pub order: u32,
    pub migratetype: String,
    pub gfp: Gfp,
    pub callsite: String,
}

/// Live blocks of one group.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveGroupRow {
    /// The call site (`-` without a stack).
    pub callsite: String,
    /// The whole stack, innermost first (when grouped by stack).
    pub stack: Option<Arc<[String]>>,
    pub pid: Option<i32>,
    pub comm: Option<String>,
    pub blocks: u64,
    pub bytes: u64,
    /// Age at the end of the capture of the oldest block.
    pub oldest_age_ns: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OrderRow {
    pub order: String,
    pub by_migratetype: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PcpRow {
    pub cpu: u32,
    /// Pages refilled into the CPU's list (`mm_page_alloc_zone_locked`
    /// with `percpu_refill`).
    pub refilled: u64,
    /// Pages drained from a list by this CPU (`mm_page_pcpu_drain`).
    pub drained: u64,
    /// Runs of consecutive refills on this CPU, each one acquisition of
    /// `zone->lock` (in the `--time` window, whatever the other filters).
    pub refill_lock_acquisitions: u64,
    /// Runs of consecutive drains.
    pub drain_lock_acquisitions: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FallbackRow {
    pub alloc_order: u32,
    pub fallback_order: i32,
    pub alloc_migratetype: String,
    pub fallback_migratetype: String,
    /// -1 where the kernel has no `change_ownership` (before 3.17).
    pub change_ownership: i32,
    pub fragmenting: Option<bool>,
    pub count: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    pub bytes: u64,
    pub format_version: String,
    /// The log ends with an END block.
    pub complete: bool,
    pub end_reason: Option<String>,
    /// Where the input was cut, if it was.
    pub truncated: Option<String>,
    pub recorder: Option<String>,
    pub kallsyms: String,
}

impl Input {
    /// What a document stored without its `input` stands for: nothing
    /// known of the file, and nothing said against its being whole (as a
    /// document that does not say it is cut short).
    pub fn unknown() -> Input {
        Input {
            complete: true,
            ..Input::default()
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Kernel {
    pub sysname: Option<String>,
    pub release: Option<String>,
    pub version: Option<String>,
    pub machine: Option<String>,
    pub hostname: Option<String>,
    pub byte_order: Name,
    pub long_size: u8,
    pub page_size: Option<u32>,
    pub nr_cpus: Option<u32>,
    pub trace_clock: Option<String>,
    /// The GFP flag names come from the recorded kernel's format files.
    pub gfp_table: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Filters {
    pub cpus: Option<Vec<u32>>,
    pub pids: Option<Vec<i32>>,
    pub comm: Option<String>,
    /// Set when the pids are a pid-filtered recording's traced tree.
    pub traced_tasks: Option<TracedTree>,
    pub time_start_ns: Option<u64>,
    pub time_end_ns: Option<u64>,
    pub callsite: Option<String>,
    pub min_age_ns: u64,
    /// The recorder's own threads (listed by the log): their own events
    /// are left out of the figures (interrupt work recorded while one was
    /// current is not).
    pub recorder_tasks: Vec<i32>,
}

/// The tasks a pid-filtered recording traced (kmemtrace_import::tasks).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TracedTree {
    /// The pids the recorder was asked for (threads, or the command).
    pub asked: Vec<i32>,
    /// Tasks in the tree: the asked ones and their descendants.
    pub tasks: u64,
    /// Forks of traced tasks recorded.
    pub forks: u64,
    /// Whether the log records forks (else the tree is the asked pids).
    pub forks_recorded: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CpuRow {
    pub cpu: u32,
    pub node: Option<u32>,
    pub subbufs: u64,
    pub events: u64,
    pub kmem_events: u64,
    pub slab_events: u64,
    pub missed_subbufs: u64,
    pub lost_stored: u64,
    /// Lost events by the kernel's own statistics (end minus start).
    pub lost_stats: Option<u64>,
    pub missing_subbufs: u64,
    pub bad_subbufs: u64,
    pub decode_errors: u64,
    pub backwards: u64,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LostWindow {
    pub cpu: u32,
    /// 0: before the CPU's first event.
    pub start_ns: u64,
    /// null: after the CPU's last event.
    pub end_ns: Option<u64>,
    /// Why: `overwritten`, `missing`, `damaged`, or `rotated` (files of a
    /// rotated capture removed, or not given). Absent from documents
    /// written before it was added.
    #[serde(default)]
    pub cause: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Capture {
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    pub duration_ns: u64,
    pub events: u64,
    pub kmem_events: u64,
    pub slab_events: u64,
    pub cpus: Vec<CpuRow>,
    pub lost_windows_total: usize,
    /// Of them, where files of a rotated capture are not here (removed
    /// by the size budget, or not given): not lost by the kernel.
    #[serde(default)]
    pub lost_windows_rotated: usize,
    /// The first 1000.
    pub lost_windows: Vec<LostWindow>,
    /// Pointers tracked at the end (live objects and freed pointers
    /// remembered for double-free detection).
    pub tracked_pointers: usize,
}

/// Totals as `perf kmem stat` prints them, and what it cannot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub alloc_events: u64,
    pub failed_allocs: u64,
    pub free_events: u64,
    pub null_frees: u64,
    pub bytes_requested: u64,
    pub bytes_allocated: u64,
    /// `bytes_alloc` of the objects whose free the capture shows.
    pub bytes_freed: u64,
    pub net_bytes_allocated: i64,
    pub bytes_wasted: u64,
    pub fragmentation_pct: f64,
    /// Frees matched to an allocation in the capture.
    pub matched_frees: u64,
    /// Of those, made on another CPU than the allocation (perf's
    /// "Ping-pong").
    pub cross_cpu_frees: u64,
    /// Allocations that asked for a node other than the allocating CPU's
    /// (what perf mislabels "Cross CPU allocations"); null if the log has
    /// no CPU->node map.
    pub cross_node_allocs: Option<u64>,
    /// Allocations naming a node (not -1).
    pub node_requests: u64,
    /// Allocations whose format records a node at all.
    pub allocs_with_node_field: u64,
    /// The count `perf kmem stat` would print as "Cross CPU allocations".
    pub perf_cross_cpu_allocations: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Gfp {
    pub value: String,
    pub flags: String,
    pub compact: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallsiteRow {
    pub callsite: String,
    pub addr: Addr,
    /// Which events came from here: kmalloc, kmem_cache_alloc, kfree,
    /// kmem_cache_free.
    pub kinds: Vec<Name>,
    pub hits: u64,
    pub failed: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub req_per_hit: u64,
    pub alloc_per_hit: u64,
    pub bytes_wasted: u64,
    pub fragmentation_pct: f64,
    pub frees: u64,
    pub cross_cpu_frees: u64,
    pub free_calls: u64,
    pub missed_frees: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    pub cache: Option<String>,
    /// Misuse occurrences by kind whose object was allocated here: all of
    /// them, as `top_alloc_callsites` counts them (uncertain and explained
    /// ones included); kinds with none left out.
    pub misuse: std::collections::BTreeMap<Name, u64>,
    pub gfp: Vec<Gfp>,
    /// Allocations with GFP values beyond the 8 listed.
    pub gfp_other: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheRow {
    pub name: String,
    /// The object size (size classes only).
    pub object_size: Option<u64>,
    pub hits: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub bytes_wasted: u64,
    pub fragmentation_pct: f64,
    pub frees: u64,
    pub cross_cpu_frees: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CrossCpu {
    /// Row and column labels.
    pub cpus: Vec<u32>,
    /// `matrix[i][j]`: objects allocated on `cpus[i]` and freed on `cpus[j]`.
    pub matrix: Vec<Vec<u64>>,
    pub same_cpu_frees: u64,
    pub cross_cpu_frees: u64,
    /// CPUs with frees that are not in `cpus` (beyond [`Self::MAX_CPUS`]).
    #[serde(default)]
    pub cpus_left_out: u64,
    /// Frees allocated or made on those CPUs, so not in `matrix`.
    #[serde(default)]
    pub frees_left_out: u64,
}

impl CrossCpu {
    /// The most CPUs the matrix labels: the busiest, so that its cells
    /// stay a readable table and a bounded document.
    pub const MAX_CPUS: usize = 256;
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SiteCount {
    pub callsite: String,
    pub addr: Addr,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OccurrenceRow {
    pub ts_ns: u64,
    /// Seconds from the first event.
    pub rel_s: f64,
    pub cpu: u32,
    pub pid: i32,
    pub comm: Option<String>,
    pub ptr: Addr,
    pub alloc_callsite: Option<String>,
    pub free_callsite: Option<String>,
    pub earlier_ts_ns: Option<u64>,
    pub earlier_cpu: Option<u32>,
    pub alloc_cache: Option<String>,
    pub free_cache: Option<String>,
    pub bytes_req: Option<u64>,
    pub bytes_alloc: Option<u64>,
    pub uncertain: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub kind: Name,
    pub title: Name,
    /// `error`, `warning` or `info`.
    pub severity: Severity,
    /// Every occurrence (the raw count).
    pub count: u64,
    /// Occurrences where the log lost events that could explain them.
    pub uncertain: u64,
    /// Occurrences whose lacking event (the allocation between two frees,
    /// the free between two allocations) falls where the trace did not
    /// have that kind of event yet or any more: the capture's edges.
    pub at_capture_edges: u64,
    /// Occurrences the capture's own untraced traffic explains
    /// ([`TraceCompleteness`]); `reasons` says which.
    pub explained: u64,
    /// `count - uncertain - at_capture_edges - explained`: what
    /// `--fail-on` counts.
    pub certain: u64,
    /// Why this severity (for kfree of kmem_cache objects: the kernel
    /// release rule).
    pub judgement: String,
    /// Per cache (or kmalloc size, and call site): why occurrences were
    /// set apart or kept, the most first (at most 10).
    pub reasons: Vec<FindingReason>,
    pub first: Option<OccurrenceRow>,
    pub first_certain: Option<OccurrenceRow>,
    pub top_alloc_callsites: Vec<SiteCount>,
    pub top_free_callsites: Vec<SiteCount>,
    /// Cache mismatches: "alloc-cache -> free-cache" with counts.
    pub cache_pairs: Vec<(String, String, u64)>,
}

/// Why a group's occurrences of a finding were kept or set apart.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FindingReason {
    /// The cache, or `kmalloc-N` (N: bytes_alloc).
    pub cache: String,
    /// For double frees the second free's call site; for live pointers
    /// returned the replaced object's allocation call site.
    pub callsite: Option<String>,
    #[serde(skip)]
    pub addr: Addr,
    /// Occurrences neither uncertain nor at the capture's edges.
    pub count: u64,
    /// Kept as a finding (no untraced traffic explains it) or set apart.
    pub kept: bool,
    pub because: String,
}

/// What the capture shows of allocations and frees the kernel did not
/// trace, per cache (or kmalloc size): see JSON.md.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceCompleteness {
    /// The log was recorded with a pid filter: other tasks' events,
    /// including RCU callbacks and interrupts run beside them, are missing.
    pub pid_filtered: bool,
    /// Tasks that ran during the capture (switched to from the idle task,
    /// in the log's `sched_switch` events) with no event of their own: the
    /// kernel does not record them, and the trace lacks what they allocate
    /// and free.
    pub unrecorded_tasks: Vec<UnrecordedTask>,
    /// Groups with any mark of untraced traffic, the most first.
    pub groups: Vec<UntracedRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UnrecordedTask {
    pub pid: i32,
    pub comm: Option<String>,
    pub switched_in_from_idle: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UntracedRow {
    pub cache: String,
    /// Frees of pointers never seen allocated.
    pub unseen_frees: u64,
    /// Frees of pointers already freed, no traced allocation between.
    pub freed_again: u64,
    /// ... whose earlier free had no traced allocation either.
    pub freed_again_twice: u64,
    /// Allocations returning a pointer the trace had live.
    pub live_returned: u64,
    /// `none`, `one` or `many` pointers among them.
    pub live_returned_pointers: Name,
    /// Untraced allocations shown (unseen frees, or pointers freed again
    /// twice).
    pub untraced_allocs: bool,
    /// Untraced frees shown (live pointers returned on more than one
    /// object).
    pub untraced_frees: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeakExample {
    pub ptr: Addr,
    pub age_ns: u64,
    pub cpu: u32,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeakRow {
    pub callsite: String,
    pub addr: Addr,
    pub objects: u64,
    pub bytes: u64,
    /// The ages of the oldest and newest of `objects`; `None` (null) for a
    /// row with none, only objects counted apart (`freed_untraced`).
    pub oldest_age_ns: Option<u64>,
    pub newest_age_ns: Option<u64>,
    pub uncertain: u64,
    /// Objects of this call site whose free the trace never showed (their
    /// pointer came back from another allocation): a site freed by an
    /// untraced path (`kmem_cache_free_bulk`, `kfree_bulk`) leaves
    /// objects that only look leaked.
    pub site_missed_frees: u64,
    /// Live objects (and bytes), not in `objects`, whose free may have
    /// taken a path the kernel does not trace: their cache (or kmalloc
    /// size) shows pointers returned while live on more than one object,
    /// or this call site has `site_missed_frees`.
    pub freed_untraced: u64,
    pub freed_untraced_bytes: u64,
    pub examples: Vec<LeakExample>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Leaks {
    pub min_age_ns: u64,
    pub end_ts_ns: u64,
    pub objects: u64,
    pub bytes: u64,
    pub uncertain: u64,
    /// Live objects (and bytes) counted apart: their free may have been
    /// untraced (see `LeakRow::freed_untraced`).
    pub freed_untraced: u64,
    pub freed_untraced_bytes: u64,
    pub groups_total: usize,
    pub groups: Vec<LeakRow>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AllocRow {
    pub ptr: Addr,
    pub callsite: String,
    pub hits: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub fragmentation_pct: f64,
    pub cross_cpu_frees: u64,
    pub live: bool,
}

/// perf's `fragmentation()`: `100 - 100 * req / alloc`, 0 with nothing
/// allocated.
pub fn fragmentation(req: u64, alloc: u64) -> f64 {
    if alloc == 0 {
        0.0
    } else {
        100.0 - 100.0 * req as f64 / alloc as f64
    }
}
