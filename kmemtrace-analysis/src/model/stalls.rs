//! The stall analysis' section of the model ([`Stalls`]): what allocations
//! waited in (reclaim, compaction, throttling, the OOM killer), episode by
//! episode, and the background work they woke.

use super::Gfp;
use serde::{Deserialize, Serialize};

/// Allocation stalls: the report's `stalls` key, absent from documents of
/// logs that did not record stall events.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Stalls {
    /// The log recorded stall events (has the format of one): none may
    /// have fired.
    pub recorded: bool,
    /// Stall events read (the tracepoints of `kmemtrace_kernel::stalls`).
    pub events: u64,
    /// Episodes: a task's waits from its first stall event to the
    /// allocation that ends them.
    pub episodes: u64,
    /// Time in reclaim, compaction and throttling, over every episode.
    pub stall_ns: u64,
    /// Episodes that overlap a loss window (their figures may be short).
    pub uncertain_episodes: u64,
    /// Each way of waiting: its phases, time and pages reclaimed.
    pub kinds: Vec<StallKindRow>,
    /// By call site, order, GFP flags, task name and the first way waited:
    /// count, time, percentiles and a histogram of each episode's stall
    /// time. Longest total first.
    pub sites: Vec<StallSiteRow>,
    /// The longest episodes, longest first.
    pub longest: Vec<Episode>,
    /// Every episode, by start, for the exports (Perfetto slices, the
    /// Parquet table); not in the JSON document.
    #[serde(skip)]
    pub all: Vec<Episode>,
    /// Per task, most stall time first: its episodes and each way it
    /// waited.
    pub tasks: Vec<StallTaskRow>,
    /// Episodes and stall time over the trace's time.
    pub over_time: StallSeries,
    /// kswapd and kcompactd, per node.
    pub background: Vec<BackgroundRow>,
    /// Who woke kswapd and kcompactd: call site and order.
    pub wakers: Vec<WakerRow>,
    pub oom_kills: Vec<OomKill>,
    /// Per shrinker, with the busy events (`kmemtraced --stall-detail`).
    pub shrinkers: Vec<ShrinkerRow>,
    /// Memory cgroup reclaim asked for by a write to the cgroup's files
    /// (`memory.reclaim`, lowering `memory.high` or `memory.max`): the
    /// writer waits, but no allocation does; left out of the episodes.
    pub proactive: ProactiveReclaim,
    /// Pairs the capture broke.
    pub unpaired: Unpaired,
    /// Stall events the kernel has and the log lacks: `system:name`.
    pub not_recorded: Vec<String>,
}

impl Stalls {
    /// The log did not record stall events: the section is left out.
    pub fn is_empty(&self) -> bool {
        !self.recorded
    }
}

/// One way of waiting.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StallKindRow {
    /// `direct reclaim`, `memcg reclaim`, `memcg soft limit reclaim`,
    /// `node reclaim`, `compaction`, `throttle`.
    pub kind: String,
    pub phases: u64,
    /// Time in it (a phase nested in another counts in the outer one only).
    pub ns: u64,
    /// Reclaim: pages the kernel says it reclaimed.
    pub pages_reclaimed: u64,
}

/// One task's stalls.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StallTaskRow {
    pub pid: i32,
    pub comm: Option<String>,
    pub episodes: u64,
    pub stall_ns: u64,
    /// Each way it waited (`kind`, `phases`, `ns`, `pages_reclaimed`).
    pub waits: Vec<StallKindRow>,
}

/// Latency of one (call site, order, GFP, task name, kind) group.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StallSiteRow {
    /// The first way the episodes waited.
    pub kind: String,
    /// From the stack the kernel took with the first stall event, or the
    /// slab call site the ending allocation served; `None`: no stack.
    pub callsite: Option<String>,
    pub order: Option<u32>,
    pub gfp: Option<Gfp>,
    pub comm: Option<String>,
    pub episodes: u64,
    pub total_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub pages_reclaimed: u64,
    /// Episodes by stall time, in power-of-two buckets.
    pub histogram: Vec<HistBucket>,
}

/// Episodes whose stall time is below `below_ns` (and at least half it).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HistBucket {
    pub below_ns: u64,
    pub count: u64,
}

/// One episode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Episode {
    pub pid: i32,
    pub comm: Option<String>,
    pub cpu: u32,
    /// Its first stall event (its phase's start: a throttle's sleep).
    pub start_ns: u64,
    /// From its start to the allocation that ended it (or its last stall
    /// event).
    pub span_ns: u64,
    /// Time in reclaim, compaction and throttling.
    pub stall_ns: u64,
    pub kind: String,
    pub callsite: Option<String>,
    /// `callsite`'s address, for its source lines (`--vmlinux`); not in
    /// the JSON document, whose `sources` has them.
    #[serde(skip)]
    pub callsite_addr: Option<u64>,
    pub order: Option<u32>,
    pub gfp: Option<Gfp>,
    pub reclaims: u64,
    pub reclaim_ns: u64,
    pub pages_reclaimed: u64,
    pub compactions: u64,
    pub compaction_ns: u64,
    /// Compaction's zone results (`mm_compaction_end` status), by name.
    pub compaction_results: Vec<Count>,
    pub throttles: u64,
    pub throttle_ns: u64,
    /// Reclaim retry loops (`reclaim_retry_zone` runs) and compaction
    /// retries (`compact_retry`).
    pub retries: u32,
    /// kswapd wakes it asked for.
    pub kswapd_wakeups: u32,
    /// The task the OOM killer chose while this one waited.
    pub oom_victim: Option<i32>,
    /// `page allocation`, `failed page allocation`, `slab allocation`,
    /// `capture end` (still waiting when the capture ended).
    pub ended_by: String,
    /// The phases, in order (the first 32).
    pub phases: Vec<Phase>,
    /// It overlaps a loss window.
    pub uncertain: bool,
}

/// One wait inside an episode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Phase {
    pub kind: String,
    pub start_ns: u64,
    pub ns: u64,
    /// Reclaim: pages reclaimed; compaction: its zones' results; throttle:
    /// the reason.
    pub detail: String,
}

/// A name and how often.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Count {
    pub name: String,
    pub count: u64,
}

/// Episodes and stall time per time bin.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StallSeries {
    /// The bins' width: a power of two nanoseconds, near a fiftieth of the
    /// capture.
    pub bin_ns: u64,
    /// Bins with episodes, by start.
    pub bins: Vec<StallBin>,
}

/// Episodes that started in `[start_ns, start_ns + bin_ns)`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StallBin {
    pub start_ns: u64,
    pub episodes: u64,
    pub stall_ns: u64,
}

/// kswapd or kcompactd of one node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BackgroundRow {
    /// `kswapd` or `kcompactd`.
    pub thread: String,
    pub node: i32,
    /// Wakes from sleep (a wake event while asleep).
    pub wakes: u64,
    /// Wake events: kernels before 6.x's kswapd write one per reclaim pass,
    /// also without sleeping in between.
    pub wake_events: u64,
    /// Between each wake and the sleep after it.
    pub awake_ns: u64,
    /// Orders it was woken for, by order.
    pub orders: Vec<OrderCount>,
    /// Still awake when the capture ended.
    pub awake_at_end: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OrderCount {
    pub order: i32,
    pub count: u64,
}

/// Who woke a background thread.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WakerRow {
    /// `kswapd` or `kcompactd`.
    pub thread: String,
    pub callsite: Option<String>,
    pub order: i32,
    pub wakeups: u64,
}

/// One OOM kill.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OomKill {
    pub ts_ns: u64,
    pub victim_pid: i32,
    pub victim_comm: Option<String>,
    /// `anon_rss + file_rss + shmem_rss`, KiB, where the kernel records them.
    pub victim_rss_kb: Option<u64>,
    /// The task whose allocation invoked the killer.
    pub killer_pid: i32,
    pub killer_comm: Option<String>,
    pub callsite: Option<String>,
    pub order: Option<u32>,
    pub gfp: Option<Gfp>,
    /// The killer's episode until the kill: its stall time and length.
    pub stalled_ns: u64,
    pub waited_ns: u64,
    pub phases_before: u64,
    /// The OOM reaper's work on the victim, if recorded.
    pub reaped_ns: Option<u64>,
}

/// One shrinker (by its `scan_objects` function).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ShrinkerRow {
    pub shrinker: String,
    pub calls: u64,
    pub scanned: u64,
    pub freed: u64,
    pub ns: u64,
}

/// Reclaim a write to a memory cgroup's files asked for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProactiveReclaim {
    pub reclaims: u64,
    pub ns: u64,
    pub pages_reclaimed: u64,
}

/// Begin and end events the capture did not pair.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Unpaired {
    /// An end with no begin before it (the capture's start, a loss).
    pub ends_without_begin: u64,
    /// A begin whose end never came (a loss; or cut by the capture's end).
    pub begins_without_end: u64,
    /// Episodes still open when the capture ended.
    pub open_at_end: u64,
}
