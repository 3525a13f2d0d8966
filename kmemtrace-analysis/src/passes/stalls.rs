//! Allocation stalls: what a task's allocation waited in when it was not
//! cheap, joined into one **episode** from its first stall event to the
//! allocation that ends it. The kernel traces each step in the waiting
//! task (`mm/page_alloc.c`'s slow path, `mm/vmscan.c`, `mm/compaction.c`,
//! `mm/memcontrol.c`'s charge loop, `mm/oom_kill.c`):
//!
//! - reclaim, as a begin and an end (direct, memcg, memcg soft limit,
//!   node), the end with the pages reclaimed; a soft-limit reclaim nests
//!   inside a direct one (its time counts once, in the outer);
//! - compaction: `try_to_compact_pages`, then a begin and end per zone (its
//!   result) or a deferral; its phase lasts to its last zone's event;
//! - throttling: one event once the task woke, with how long it slept;
//! - the retry loops (`reclaim_retry_zone`, `compact_retry`), kswapd
//!   wakes, and `mark_victim` when the OOM killer chose a task.
//!
//! The allocation that ends an episode comes as a mark
//! ([`Delivery::TaskMarks`]): the task's first allocation after a stall
//! event on the same CPU, or its first in a block of a CPU. Where the task
//! moved between its last wait and its allocation to a CPU it had already
//! allocated on in that CPU's current block, the mark comes with its first
//! allocation in the next block instead. A memcg charge's allocation came
//! before the charge: its episode ends at its last wait, and at the latest
//! when the next allocation's direct reclaim or compaction begins. An
//! episode still open when the capture ends is counted to its end.
//!
//! Events recorded in an interrupt are not the interrupted task's; memcg
//! reclaim asked for by a write to a cgroup's files (its stack passes
//! through the file's handler) is proactive, counted apart in the section.
//!
//! The call site is the first frame of the stack the kernel took with the
//! episode's first stacked event outside the tracing, reclaim, compaction,
//! charge, slab and page allocator functions ([`stall_site_index`]); with
//! no stack, the slab call site of the allocation that ended it.
//!
//! kswapd and kcompactd are followed per node (wake to sleep), with who
//! woke them; the shrinkers per function, where the busy events were
//! recorded. Everything is keyed by task, so a shard sees a task's events
//! in order; what joins tasks (OOM reaping) is joined in the section.

use super::{Consumes, MakesSection, Pass, PassSetup, SectionContext};
use crate::event::{Event, ShardKey, Tracepoint};
use crate::intern::{FastMap, NO_STACK};
use crate::model::stalls::*;
use crate::stream::tracepoints::{Delivery, Request};
use crate::stream::OrderKey;
use kmemtrace_kernel::stalls as tp;

mod folded;
mod kept;
mod section;

/// What each request is, by its place in [`StallsPass::TRACEPOINTS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Begin(Wait),
    End(Wait),
    Throttled,
    WakeupKswapd,
    KswapdWake,
    KswapdSleep,
    TryToCompact,
    CompactionBegin,
    CompactionEnd,
    CompactionDeferred,
    WakeupKcompactd,
    KcompactdWake,
    KcompactdSleep,
    ReclaimRetry,
    CompactRetry,
    MarkVictim,
    StartReaping,
    FinishReaping,
    ShrinkStart,
    ShrinkEnd,
    PageAlloc,
    SlabAlloc,
    WakeReaper,
}

/// A way of waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wait {
    Direct,
    Memcg,
    MemcgSoftLimit,
    Node,
    Compaction,
    Throttle,
    /// An episode whose first event was a retry or the OOM killer's (its
    /// waits before were not seen: the capture's start, lost events).
    Other,
}

impl Wait {
    pub const ALL: [Wait; 7] = [
        Wait::Direct,
        Wait::Memcg,
        Wait::MemcgSoftLimit,
        Wait::Node,
        Wait::Compaction,
        Wait::Throttle,
        Wait::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Wait::Direct => "direct reclaim",
            Wait::Memcg => "memcg reclaim",
            Wait::MemcgSoftLimit => "memcg soft limit reclaim",
            Wait::Node => "node reclaim",
            Wait::Compaction => "compaction",
            Wait::Throttle => "throttle",
            Wait::Other => "retry or OOM",
        }
    }

    fn is_reclaim(self) -> bool {
        !matches!(self, Wait::Compaction | Wait::Throttle | Wait::Other)
    }

    /// A memory cgroup's charge: the kernel traces the reclaim's order (0)
    /// and mask, and the charged allocation came before it.
    fn is_charge(self) -> bool {
        matches!(self, Wait::Memcg | Wait::MemcgSoftLimit)
    }
}

const fn req(tracepoint: &'static str, fields: &'static [&'static str]) -> Request {
    Request {
        tracepoint,
        fields,
        shard: ShardKey::Task,
        delivery: Delivery::Each,
    }
}

const fn mark(tracepoint: &'static str, fields: &'static [&'static str]) -> Request {
    Request {
        tracepoint,
        fields,
        shard: ShardKey::Task,
        delivery: Delivery::TaskMarks,
    }
}

const RECLAIM_BEGIN: &[&str] = &["order", "gfp_flags"];
const RECLAIM_END: &[&str] = &["nr_reclaimed"];
const SLAB_MARK: &[&str] = &["call_site", "gfp_flags"];

/// The requests, and what each is ([`EVS`], the same order).
const REQUESTS: [Request; 32] = [
    req(tp::DIRECT_RECLAIM_BEGIN, RECLAIM_BEGIN),
    req(tp::DIRECT_RECLAIM_END, RECLAIM_END),
    req(tp::MEMCG_RECLAIM_BEGIN, RECLAIM_BEGIN),
    req(tp::MEMCG_RECLAIM_END, RECLAIM_END),
    req(tp::MEMCG_SOFTLIMIT_BEGIN, RECLAIM_BEGIN),
    req(tp::MEMCG_SOFTLIMIT_END, RECLAIM_END),
    req(tp::NODE_RECLAIM_BEGIN, RECLAIM_BEGIN),
    req(tp::NODE_RECLAIM_END, RECLAIM_END),
    req(tp::THROTTLED, &["usec_delayed", "reason"]),
    req(tp::WAKEUP_KSWAPD, &["nid", "order", "gfp_flags"]),
    req(tp::KSWAPD_WAKE, &["nid", "order"]),
    req(tp::KSWAPD_SLEEP, &["nid"]),
    req(tp::TRY_TO_COMPACT, &["order", "gfp_mask"]),
    req(tp::COMPACTION_BEGIN, &[]),
    req(tp::COMPACTION_END, &["status"]),
    req(tp::COMPACTION_DEFERRED, &[]),
    req(tp::WAKEUP_KCOMPACTD, &["nid", "order"]),
    req(tp::KCOMPACTD_WAKE, &["nid", "order"]),
    req(tp::KCOMPACTD_SLEEP, &["nid"]),
    req(tp::RECLAIM_RETRY_ZONE, &[]),
    req(tp::COMPACT_RETRY, &[]),
    req(
        tp::MARK_VICTIM,
        &["pid", "comm", "anon_rss", "file_rss", "shmem_rss"],
    ),
    req(tp::START_TASK_REAPING, &["pid"]),
    req(tp::FINISH_TASK_REAPING, &["pid"]),
    req(tp::SHRINK_SLAB_START, &["shrink", "total_scan"]),
    req(tp::SHRINK_SLAB_END, &["shrink", "retval", "total_scan"]),
    mark("kmem:mm_page_alloc", &["order", "gfp_flags", "pfn"]),
    mark("kmem:kmalloc", SLAB_MARK),
    mark("kmem:kmem_cache_alloc", SLAB_MARK),
    mark("kmem:kmalloc_node", SLAB_MARK),
    mark("kmem:kmem_cache_alloc_node", SLAB_MARK),
    req(tp::WAKE_REAPER, &["pid"]),
];

const EVS: [Ev; 32] = [
    Ev::Begin(Wait::Direct),
    Ev::End(Wait::Direct),
    Ev::Begin(Wait::Memcg),
    Ev::End(Wait::Memcg),
    Ev::Begin(Wait::MemcgSoftLimit),
    Ev::End(Wait::MemcgSoftLimit),
    Ev::Begin(Wait::Node),
    Ev::End(Wait::Node),
    Ev::Throttled,
    Ev::WakeupKswapd,
    Ev::KswapdWake,
    Ev::KswapdSleep,
    Ev::TryToCompact,
    Ev::CompactionBegin,
    Ev::CompactionEnd,
    Ev::CompactionDeferred,
    Ev::WakeupKcompactd,
    Ev::KcompactdWake,
    Ev::KcompactdSleep,
    Ev::ReclaimRetry,
    Ev::CompactRetry,
    Ev::MarkVictim,
    Ev::StartReaping,
    Ev::FinishReaping,
    Ev::ShrinkStart,
    Ev::ShrinkEnd,
    Ev::PageAlloc,
    Ev::SlabAlloc,
    Ev::SlabAlloc,
    Ev::SlabAlloc,
    Ev::SlabAlloc,
    Ev::WakeReaper,
];

/// Phases an episode keeps for the report (its counts go on).
pub const PHASES_KEPT: usize = 32;

/// A wait in progress or done.
#[derive(Clone, Copy, Debug)]
pub struct OpenPhase {
    pub wait: Wait,
    pub start: u64,
    /// Compaction: its last zone's event so far.
    pub last: u64,
    /// Nested in another phase: its time is the outer one's.
    pub nested: bool,
    /// Compaction: its zones by result (`mm_compaction_end`'s status).
    pub statuses: Statuses,
}

/// Zones by compaction result: the kernel's statuses are small numbers
/// (below 16 in every version); others are not counted.
pub type Statuses = [u16; 16];

/// A finished wait.
#[derive(Clone, Copy, Debug)]
pub struct DonePhase {
    pub wait: Wait,
    pub start: u64,
    pub ns: u64,
    /// Reclaim: pages; throttle: reason.
    pub detail: u64,
    pub nested: bool,
    /// Compaction: its zones by result.
    pub statuses: Statuses,
}

/// One episode, open or ended.
#[derive(Clone, Debug)]
pub struct Ep {
    pub pid: i32,
    pub cpu: u16,
    pub start: u64,
    pub last: u64,
    pub first: Wait,
    pub order: Option<u32>,
    pub gfp: Option<u64>,
    pub stack: u32,
    /// The slab call site of the allocation that ended it.
    pub slab_site: Option<u64>,
    pub phases: Vec<DonePhase>,
    /// By way of waiting ([`Wait`] as index).
    pub per_wait: [WaitTotals; 7],
    pub open: Vec<OpenPhase>,
    pub compaction_results: FastMap<i64, u64>,
    pub retries: u32,
    pub in_retry_run: bool,
    pub kswapd_wakeups: u32,
    pub victim: Option<i32>,
    pub ended_by: Option<&'static str>,
    /// Part of it was not seen (an end without its begin, a lost end):
    /// its figures may be short.
    pub cut: bool,
}

impl Ep {
    fn new(ev: &Event, start: u64, first: Wait) -> Ep {
        Ep {
            pid: ev.pid,
            cpu: ev.cpu,
            start,
            last: ev.ts,
            first,
            order: None,
            gfp: None,
            stack: NO_STACK,
            slab_site: None,
            phases: Vec::new(),
            per_wait: [WaitTotals::default(); 7],
            open: Vec::new(),
            compaction_results: FastMap::default(),
            retries: 0,
            in_retry_run: false,
            kswapd_wakeups: 0,
            victim: None,
            ended_by: None,
            cut: false,
        }
    }

    /// The episode as it stood at `end` (the capture's end), its waits
    /// still open counted to there.
    pub fn finished_at(&self, end: u64) -> Ep {
        let mut ep = self.clone();
        for p in std::mem::take(&mut ep.open) {
            ep.done(DonePhase {
                wait: p.wait,
                start: p.start,
                ns: end.max(p.last).saturating_sub(p.start),
                detail: 0,
                nested: p.nested,
                statuses: p.statuses,
            });
        }
        ep.last = ep.last.max(end);
        ep
    }

    /// Time in reclaim, compaction and throttling (outer phases).
    pub fn stall_ns(&self) -> u64 {
        self.per_wait
            .iter()
            .map(|w| w.ns)
            .fold(0, u64::saturating_add)
    }

    fn done(&mut self, p: DonePhase) {
        let w = &mut self.per_wait[p.wait as usize];
        w.phases += 1;
        if !p.nested {
            w.ns = w.ns.saturating_add(p.ns);
        }
        if p.wait.is_reclaim() {
            w.pages = w.pages.saturating_add(p.detail);
        }
        if self.phases.len() < PHASES_KEPT {
            self.phases.push(p);
        }
    }

    /// The allocation's order and flags, and its stack, from the first
    /// event that has them.
    fn note(&mut self, order: Option<u64>, gfp: Option<u64>, stack: u32) {
        if self.order.is_none() {
            self.order = order.map(|o| o as u32);
        }
        if self.gfp.is_none() {
            self.gfp = gfp;
        }
        if self.stack == NO_STACK {
            self.stack = stack;
        }
    }

    /// Ends a compaction phase in progress, the task having gone on to
    /// something else (at `now`, its next stall event, if known): it lasted
    /// to its last zone's event, or, where it compacted no zone (all
    /// skipped before one began), to `now`.
    fn close_compaction(&mut self, now: Option<u64>) {
        if let Some(i) = self.open.iter().rposition(|p| p.wait == Wait::Compaction) {
            let p = self.open.remove(i);
            let end = match now {
                Some(now) if p.last == p.start => now,
                _ => p.last,
            };
            self.done(DonePhase {
                wait: Wait::Compaction,
                start: p.start,
                ns: end.saturating_sub(p.start),
                detail: 0,
                nested: p.nested,
                statuses: p.statuses,
            });
        }
    }
}

/// Waits of one kind added up: an episode's, or a group's of episodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitTotals {
    pub phases: u64,
    /// Time in them; a wait nested in another counts in the outer one.
    pub ns: u64,
    /// Reclaim: pages the kernel says it reclaimed.
    pub pages: u64,
}

impl WaitTotals {
    /// Adds `o`'s. Times and pages are the log's words (a damaged log's
    /// may be anything): they saturate. Phases are events counted.
    pub fn add(&mut self, o: &WaitTotals) {
        self.phases += o.phases;
        self.ns = self.ns.saturating_add(o.ns);
        self.pages = self.pages.saturating_add(o.pages);
    }
}

/// The OOM reaper's work on a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reaping {
    pub victim: i32,
    pub start: u64,
    pub end: Option<u64>,
}

/// One shrinker's calls, added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkerTotals {
    pub calls: u64,
    pub scanned: u64,
    pub freed: u64,
    pub ns: u64,
}

/// A shrinker's call in progress in a task.
#[derive(Clone, Copy, Debug)]
struct ShrinkerCall {
    /// Its `scan_objects` function.
    function: u64,
    start: u64,
    to_scan: u64,
}

/// kswapd or kcompactd of one node.
#[derive(Clone, Debug, Default)]
pub struct Background {
    /// Wakes from sleep.
    pub wakes: u64,
    /// Wake events: some kernels write one per reclaim pass, asleep or
    /// not.
    pub wake_events: u64,
    pub awake_ns: u64,
    pub awake_since: Option<u64>,
    pub orders: FastMap<i32, u64>,
}

/// An OOM kill as the killer's shard saw it.
#[derive(Clone, Debug)]
pub struct Kill {
    pub ts: u64,
    pub victim: i32,
    /// Interned name (the stream's names).
    pub victim_comm: Option<u32>,
    pub rss_kb: Option<u64>,
    pub killer: i32,
    /// The killer's episode so far.
    pub episode: Option<KillerEpisode>,
}

/// What an OOM kill's row tells of the killer's episode as it stood at the
/// kill: figures, not a copy of the episode, whose phases and results a
/// task killing again and again would copy each time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillerEpisode {
    pub start: u64,
    pub stack: u32,
    pub slab_site: Option<u64>,
    pub order: Option<u32>,
    pub gfp: Option<u64>,
    pub stall_ns: u64,
    /// Phases ended before the kill.
    pub phases: u64,
}

impl KillerEpisode {
    fn of(e: &Ep) -> KillerEpisode {
        KillerEpisode {
            start: e.start,
            stack: e.stack,
            slab_site: e.slab_site,
            order: e.order,
            gfp: e.gfp,
            stall_ns: e.stall_ns(),
            phases: e
                .per_wait
                .iter()
                .map(|w| w.phases)
                .fold(0, u64::saturating_add),
        }
    }
}

/// The pass's state (one per shard; tasks are disjoint between shards).
pub struct StallsPass {
    long_size: u8,
    /// The model keeps every episode ([`crate::run::Options::episodes`]),
    /// in `ended`; else only the longest are kept whole ([`kept`]).
    pub keep_all: bool,
    longest: kept::Longest,
    /// Every ended episode, as the tables need it.
    folded: folded::Folded,
    /// kswapd and kcompactd (by name, or seen waking and sleeping): their
    /// reclaim and compaction is background work, not an allocation's
    /// wait.
    background_tasks: crate::intern::FastSet<i32>,
    pub events: u64,
    pub open: FastMap<i32, Ep>,
    /// Every ended episode, where `keep_all`.
    pub ended: Vec<Ep>,
    /// (thread is kcompactd, node) -> its state.
    pub background: FastMap<(bool, i32), Background>,
    /// (thread is kcompactd, stack, order) -> wakeups.
    pub wakers: FastMap<(bool, u32, i32), u64>,
    pub kills: Vec<Kill>,
    /// (victim pid, start, end) of the OOM reaper's work.
    pub reaping: Vec<Reaping>,
    /// Victim pid -> its latest entry in `reaping`, which a finish ends.
    latest_reaping: FastMap<i32, usize>,
    /// shrink function -> (calls, scanned, freed, ns).
    pub shrinkers: FastMap<u64, ShrinkerTotals>,
    /// Per task: a shrinker call in progress (function, start, to scan).
    shrinking: FastMap<i32, ShrinkerCall>,
    pub ends_without_begin: u64,
    pub begins_without_end: u64,
    /// Stall events of background work (kswapd, kcompactd).
    pub background_events: u64,
}

impl StallsPass {
    /// For a kernel of `long_size`-byte longs.
    pub fn new(long_size: u8) -> Self {
        StallsPass {
            long_size,
            keep_all: false,
            longest: Default::default(),
            folded: Default::default(),
            background_tasks: Default::default(),
            events: 0,
            open: FastMap::default(),
            ended: Vec::new(),
            background: FastMap::default(),
            wakers: FastMap::default(),
            kills: Vec::new(),
            reaping: Vec::new(),
            latest_reaping: FastMap::default(),
            shrinkers: FastMap::default(),
            shrinking: FastMap::default(),
            ends_without_begin: 0,
            begins_without_end: 0,
            background_events: 0,
        }
    }

    fn event(&mut self, ev: &Event, which: usize, t: &Tracepoint) {
        let kind = EVS[which];
        if !matches!(kind, Ev::PageAlloc | Ev::SlabAlloc) {
            self.events += 1;
        }
        match kind {
            Ev::PageAlloc | Ev::SlabAlloc => self.allocation(ev, kind, t),
            Ev::KswapdWake | Ev::KcompactdWake => {
                self.background(ev.pid);
                let b = self.bg(kind == Ev::KcompactdWake, t);
                b.wake_events += 1;
                if b.awake_since.is_none() {
                    b.wakes += 1;
                    b.awake_since = Some(ev.ts);
                }
                *b.orders
                    .entry(t.get_i64(1).unwrap_or(-1) as i32)
                    .or_default() += 1;
            }
            Ev::KswapdSleep | Ev::KcompactdSleep => {
                self.background(ev.pid);
                let b = self.bg(kind == Ev::KcompactdSleep, t);
                if let Some(s) = b.awake_since.take() {
                    b.awake_ns = b.awake_ns.saturating_add(ev.ts.saturating_sub(s));
                }
            }
            Ev::WakeupKcompactd => {
                let order = t.get_i64(1).unwrap_or(-1) as i32;
                *self.wakers.entry((true, NO_STACK, order)).or_default() += 1;
            }
            Ev::StartReaping => self.start_reaping(Reaping {
                victim: t.get_i64(0).unwrap_or(0) as i32,
                start: ev.ts,
                end: None,
            }),
            Ev::FinishReaping => {
                let pid = t.get_i64(0).unwrap_or(0) as i32;
                if let Some(&i) = self.latest_reaping.get(&pid) {
                    self.reaping[i].end.get_or_insert(ev.ts);
                }
            }
            Ev::ShrinkStart => {
                let f = t.get(0).unwrap_or(0);
                self.shrinking.insert(
                    ev.pid,
                    ShrinkerCall {
                        function: f,
                        start: ev.ts,
                        to_scan: t.get(1).unwrap_or(0),
                    },
                );
            }
            Ev::ShrinkEnd => self.shrink_end(ev, t),
            // The OOM reaper's wake: from a timer in softirq since 5.18, of
            // whatever task it interrupted. The kill is `mark_victim`.
            Ev::WakeReaper => {}
            // Waking kswapd is not waiting: it opens no episode. In an
            // interrupt it is the interrupt's allocation, not the task's.
            Ev::WakeupKswapd => self.wakeup_kswapd(ev, t),
            // An interrupt's allocation does not wait in reclaim; an event
            // recorded in one is not the interrupted task's.
            _ if ev.in_interrupt => {}
            _ => self.stall(ev, kind, t),
        }
    }

    /// `pid` is kswapd or kcompactd: an episode it seemed to open (its
    /// soft-limit reclaim or throttling seen before its name) was its
    /// background work.
    fn background(&mut self, pid: i32) {
        if self.background_tasks.insert(pid) {
            self.open.remove(&pid);
        }
    }

    fn bg(&mut self, kcompactd: bool, t: &Tracepoint) -> &mut Background {
        let node = t.get_i64(0).unwrap_or(-1) as i32;
        self.background.entry((kcompactd, node)).or_default()
    }

    fn shrink_end(&mut self, ev: &Event, t: &Tracepoint) {
        let Some(call) = self.shrinking.remove(&ev.pid) else {
            return;
        };
        let left = t.get_i64(2).unwrap_or(0).max(0) as u64;
        let s = self.shrinkers.entry(call.function).or_default();
        s.calls += 1;
        s.scanned = s.scanned.saturating_add(call.to_scan.saturating_sub(left));
        let freed = t.get_i64(1).unwrap_or(0).max(0) as u64;
        s.freed = s.freed.saturating_add(freed);
        s.ns = s.ns.saturating_add(ev.ts.saturating_sub(call.start));
    }

    /// The task allocated: its open episode, if no wait is in progress,
    /// ends here.
    fn allocation(&mut self, ev: &Event, kind: Ev, t: &Tracepoint) {
        let Some(ep) = self.open.get_mut(&ev.pid) else {
            return;
        };
        // A mark may come a block late (the task moved CPU): a compaction
        // of no zone ends at its own start rather than there.
        ep.close_compaction(None);
        if !ep.open.is_empty() {
            return;
        }
        let mut ep = self.open.remove(&ev.pid).expect("open");
        // A charge's allocation came before it: the next one is not its.
        let charge = ep.first.is_charge();
        if !charge {
            ep.last = ev.ts;
        }
        ep.ended_by = Some(if kind == Ev::SlabAlloc {
            ep.slab_site = t.get(0);
            "slab allocation"
        } else if t.get(2).is_some_and(|pfn| self.is_no_page(pfn)) {
            "failed page allocation"
        } else {
            "page allocation"
        });
        if kind == Ev::PageAlloc && !charge {
            ep.note(t.get(0), t.get(1), NO_STACK);
        }
        self.close(ep);
    }

    /// An episode has ended.
    fn close(&mut self, ep: Ep) {
        self.folded.add(&ep);
        if self.keep_all {
            self.ended.push(ep);
        } else {
            self.longest.ended(ep);
        }
    }

    /// `mm_page_alloc`'s pfn of no page: -1 in the kernel's `long`.
    fn is_no_page(&self, pfn: u64) -> bool {
        pfn == u64::MAX || (self.long_size == 4 && pfn == u64::from(u32::MAX))
    }

    /// A stall event of the waiting task.
    fn stall(&mut self, ev: &Event, kind: Ev, t: &Tracepoint) {
        let start = match kind {
            Ev::Throttled => ev
                .ts
                .saturating_sub((t.get_i64(0).unwrap_or(0).max(0) as u64).saturating_mul(1000)),
            _ => ev.ts,
        };
        let first = match kind {
            Ev::Begin(w) | Ev::End(w) => w,
            Ev::TryToCompact | Ev::CompactionBegin | Ev::CompactionEnd => Wait::Compaction,
            Ev::CompactionDeferred => Wait::Compaction,
            Ev::Throttled => Wait::Throttle,
            _ => Wait::Other,
        };
        // Compaction's zones outside a task's try_to_compact_pages are
        // kcompactd's or kswapd's, as is any wait of those threads.
        let zone_only = matches!(
            kind,
            Ev::CompactionBegin | Ev::CompactionEnd | Ev::CompactionDeferred
        );
        if self.background_tasks.contains(&ev.pid)
            || (zone_only && !self.open.contains_key(&ev.pid))
        {
            self.background_events += 1;
            return;
        }
        match kind {
            Ev::Begin(w) => self.wait_begins(ev.pid, w),
            Ev::TryToCompact => self.wait_begins(ev.pid, Wait::Compaction),
            _ => {}
        }
        let ep = self
            .open
            .entry(ev.pid)
            .or_insert_with(|| Ep::new(ev, start, first));
        ep.last = ev.ts;
        // Compaction throttles inside its zones (too many isolated pages):
        // that does not end it.
        if !matches!(
            kind,
            Ev::CompactionBegin | Ev::CompactionEnd | Ev::CompactionDeferred | Ev::Throttled
        ) {
            ep.close_compaction(Some(ev.ts));
        }
        if kind != Ev::ReclaimRetry {
            ep.in_retry_run = false;
        }
        let stack = t.stack;
        match kind {
            Ev::Begin(w) => {
                let order = t.get(0).filter(|_| !w.is_charge());
                ep.note(order, t.get(1), stack);
                let nested = !ep.open.is_empty();
                ep.open.push(OpenPhase {
                    wait: w,
                    start: ev.ts,
                    last: ev.ts,
                    nested,
                    statuses: [0; 16],
                });
            }
            Ev::End(w) => self.end(ev, w, t),
            Ev::Throttled => {
                ep.note(None, None, stack);
                let nested = !ep.open.is_empty();
                ep.done(DonePhase {
                    wait: Wait::Throttle,
                    start,
                    ns: ev.ts.saturating_sub(start),
                    detail: t.get(1).unwrap_or(0),
                    nested,
                    statuses: [0; 16],
                });
            }
            Ev::TryToCompact => {
                ep.note(t.get(0), t.get(1), stack);
                let nested = !ep.open.is_empty();
                ep.open.push(OpenPhase {
                    wait: Wait::Compaction,
                    start: ev.ts,
                    last: ev.ts,
                    nested,
                    statuses: [0; 16],
                });
            }
            Ev::CompactionBegin | Ev::CompactionEnd | Ev::CompactionDeferred => {
                if let Some(p) = ep.open.iter_mut().rfind(|p| p.wait == Wait::Compaction) {
                    p.last = ev.ts;
                }
                if kind == Ev::CompactionEnd {
                    let status = t.get_i64(0).unwrap_or(-1);
                    *ep.compaction_results.entry(status).or_default() += 1;
                    let slot = usize::try_from(status).ok().filter(|&s| s < 16);
                    if let (Some(s), Some(p)) = (
                        slot,
                        ep.open.iter_mut().rfind(|p| p.wait == Wait::Compaction),
                    ) {
                        p.statuses[s] += 1;
                    }
                }
            }
            Ev::ReclaimRetry if !ep.in_retry_run => {
                ep.retries += 1;
                ep.in_retry_run = true;
            }
            Ev::CompactRetry => ep.retries += 1,
            Ev::MarkVictim => self.mark_victim(ev, t),
            _ => {}
        }
    }

    /// Task `pid` begins to wait in `w`. Reclaim does not recurse (the
    /// task runs with PF_MEMALLOC) but for a memcg soft-limit reclaim inside
    /// a direct one, and compaction is never inside reclaim: where a
    /// reclaim is open, its end was lost (and maybe the allocation that
    /// ended the episode), so the episode ends there. And a charge whose
    /// waits are over is over: the next allocation's direct reclaim or
    /// compaction comes before that allocation's mark.
    fn wait_begins(&mut self, pid: i32, w: Wait) {
        let Some(ep) = self.open.get(&pid) else {
            return;
        };
        let nests = |p: &OpenPhase| w == Wait::MemcgSoftLimit && p.wait == Wait::Direct;
        let lost = ep.open.iter().any(|p| p.wait.is_reclaim() && !nests(p));
        let charge_over = ep.first.is_charge() && ep.open.is_empty() && !w.is_charge();
        if !lost && !charge_over {
            return;
        }
        let mut ep = self.open.remove(&pid).expect("open");
        let reclaims = ep.open.iter().filter(|p| p.wait.is_reclaim()).count() as u64;
        self.begins_without_end += reclaims;
        ep.open.clear();
        ep.ended_by = Some(if lost {
            "lost events"
        } else {
            "its charge's end"
        });
        ep.cut |= lost;
        self.close(ep);
    }

    fn wakeup_kswapd(&mut self, ev: &Event, t: &Tracepoint) {
        let order = t.get_i64(1).unwrap_or(-1) as i32;
        *self.wakers.entry((false, t.stack, order)).or_default() += 1;
        if ev.in_interrupt {
            return;
        }
        if let Some(ep) = self.open.get_mut(&ev.pid) {
            ep.kswapd_wakeups += 1;
            ep.last = ev.ts;
        }
    }

    /// A reclaim's end: the phase of its begin, the innermost of its kind.
    fn end(&mut self, ev: &Event, w: Wait, t: &Tracepoint) {
        let ep = self.open.get_mut(&ev.pid).expect("opened by the caller");
        let pages = t.get(0).unwrap_or(0);
        let Some(i) = ep.open.iter().rposition(|p| p.wait == w) else {
            // Its begin was before the capture, or lost: no time known.
            self.ends_without_begin += 1;
            let ep = self.open.get_mut(&ev.pid).expect("open");
            ep.cut = true;
            let p = &mut ep.per_wait[w as usize].pages;
            *p = p.saturating_add(pages);
            return;
        };
        // Phases opened after it and not ended lost their ends.
        let after: Vec<OpenPhase> = ep.open.drain(i + 1..).collect();
        let p = ep.open.pop().expect("found");
        self.begins_without_end += after.iter().filter(|p| p.wait.is_reclaim()).count() as u64;
        let ep = self.open.get_mut(&ev.pid).expect("open");
        ep.done(DonePhase {
            wait: w,
            start: p.start,
            ns: ev.ts.saturating_sub(p.start),
            detail: pages,
            nested: p.nested,
            statuses: [0; 16],
        });
    }

    fn start_reaping(&mut self, r: Reaping) {
        self.latest_reaping.insert(r.victim, self.reaping.len());
        self.reaping.push(r);
    }

    fn mark_victim(&mut self, ev: &Event, t: &Tracepoint) {
        let rss = match (t.get(2), t.get(3), t.get(4)) {
            (Some(a), Some(f), Some(s)) => Some(a.saturating_add(f).saturating_add(s)),
            _ => None,
        };
        let victim = t.get_i64(0).unwrap_or(0) as i32;
        let ep = self.open.get_mut(&ev.pid);
        let episode = ep.map(|ep| {
            ep.victim.get_or_insert(victim);
            KillerEpisode::of(ep)
        });
        self.kills.push(Kill {
            ts: ev.ts,
            victim,
            victim_comm: t.get(1).map(|c| c as u32),
            rss_kb: rss,
            killer: ev.pid,
            episode,
        });
    }
}

impl<'a> Pass<'a> for StallsPass {
    const CONSUMES: Consumes = Consumes::Tracepoints;
    const SHARD: ShardKey = ShardKey::Task;
    const TRACEPOINTS: &'static [Request] = &REQUESTS;

    fn new(setup: &PassSetup<'a>) -> Self {
        let mut p = StallsPass::new(setup.log.arch.long_size);
        p.keep_all = setup.opts.episodes;
        let pids = &setup.log.pids;
        p.background_tasks
            .extend(pids.pids().into_iter().filter(|&pid| {
                pids.comm(pid)
                    .is_some_and(|c| c.starts_with("kswapd") || c.starts_with("kcompactd"))
            }));
        p
    }

    fn tracepoint(&mut self, ev: &Event, _key: OrderKey, which: usize, t: &Tracepoint) {
        self.event(ev, which, t)
    }

    fn absorb(&mut self, o: &mut Self) {
        self.events += o.events;
        // Moved, not copied: a long capture ends with many episodes.
        self.open.extend(o.open.drain());
        if self.ended.is_empty() {
            // The first shard's: taken as it is, not copied (a copy
            // would double the peak).
            std::mem::swap(&mut self.ended, &mut o.ended);
        } else {
            self.ended.append(&mut o.ended);
        }
        self.longest.absorb(&mut o.longest);
        self.folded.absorb(&mut o.folded);
        for (&k, b) in &o.background {
            let s = self.background.entry(k).or_default();
            s.wakes += b.wakes;
            s.wake_events += b.wake_events;
            s.awake_ns = s.awake_ns.saturating_add(b.awake_ns);
            s.awake_since = s.awake_since.or(b.awake_since);
            for (&order, &n) in &b.orders {
                *s.orders.entry(order).or_default() += n;
            }
        }
        for (&k, &n) in &o.wakers {
            *self.wakers.entry(k).or_default() += n;
        }
        self.kills.extend(o.kills.iter().cloned());
        for &r in &o.reaping {
            self.start_reaping(r);
        }
        for (&k, s) in &o.shrinkers {
            let t = self.shrinkers.entry(k).or_default();
            t.calls += s.calls;
            t.scanned = t.scanned.saturating_add(s.scanned);
            t.freed = t.freed.saturating_add(s.freed);
            t.ns = t.ns.saturating_add(s.ns);
        }
        self.ends_without_begin += o.ends_without_begin;
        self.background_events += o.background_events;
        self.begins_without_end += o.begins_without_end;
    }
}

impl<'a> MakesSection<'a> for StallsPass {
    type Section = Stalls;

    fn section(&self, ctx: &SectionContext<'_>) -> Stalls {
        section::build(self, ctx)
    }
}

/// The index in `frames` (innermost first) of a stall's call site: the
/// first frame after the tracing machinery and the functions an allocation
/// waits through (reclaim, compaction, throttling, memcg charging, the OOM
/// killer, the slab and page allocators); `None` if every frame is one of
/// those. Without symbols, the first frame.
pub fn stall_site_index(
    frames: &[u64],
    syms: Option<&kmemtrace_kernel::Kallsyms>,
) -> Option<usize> {
    use crate::page_callers::{base_name, is_allocator, is_tracing};
    let Some(k) = syms else {
        return (!frames.is_empty()).then_some(0);
    };
    frames.iter().position(|&a| match k.resolve(a) {
        Some(s) => {
            let b = base_name(s.name).trim_start_matches('_');
            !(is_tracing(s.name) || is_allocator(s.name) || is_wait_machinery(b))
        }
        None => true,
    })
}

/// Prefixes of the functions an allocation waits through, after the
/// leading underscores and compiler suffixes are taken off.
const WAIT_MACHINERY: [&str; 27] = [
    "try_to_free_pages",
    "try_to_free_mem_cgroup_pages",
    "do_try_to_free_pages",
    "perform_reclaim",
    "alloc_pages_direct_reclaim",
    "alloc_pages_direct_compact",
    "alloc_pages_may_oom",
    "try_to_compact_pages",
    "compact_zone",
    "shrink_",
    "reclaim_throttle",
    "throttle_direct_reclaim",
    "node_reclaim",
    "wakeup_kswapd",
    "wake_all_kswapds",
    "try_charge",
    "charge_memcg",
    "mem_cgroup_",
    "memcg_",
    "obj_cgroup_charge",
    "out_of_memory",
    "oom_kill_process",
    "mark_oom_victim",
    "slab_alloc",
    "kmem_cache_alloc",
    "kmalloc",
    "new_slab",
];

fn is_wait_machinery(base: &str) -> bool {
    WAIT_MACHINERY.iter().any(|p| base.starts_with(p))
        || matches!(
            base,
            "allocate_slab" | "alloc_slab_page" | "slab_alloc_node"
        )
}

#[cfg(test)]
mod tests;
