//! The page-allocator pass: event counts ([`PageStats`]), and page frames
//! followed from allocation to free, as `perf kmem stat --page` does and
//! further (Documentation/trace/events-kmem.rst): which
//! allocations were freed during the capture, which only allocated, which
//! frees had no allocation in it; allocations by order and migratetype;
//! the per-CPU page lists (pages refilled into a CPU's list or freed onto
//! it, then drained by another CPU); external-fragmentation fallbacks.
//!
//! Pages are keyed by the head page frame the events report. Page events
//! are routed to shards by the bucket of that frame, so a shard sees every
//! event of its frames, in order.

use super::page_misuse::{FrameEvent, FreedFrame, PageMisuse};
use super::timeline::{CpuRates, TimeBins};
use crate::event::{Event, Kind, Page, NO_PFN};
use crate::filter::Filter;
use crate::intern::FastMap;
use crate::model::PageStats;
use crate::ptr_table::FrameTable;
use crate::stream::OrderKey;
use kmemtrace_import::stacks::PageStackSample;

/// Orders of 10 and more share the last slot.
pub const ORDER_SLOTS: usize = 11;

/// More than any buddy block (256 TiB), and far enough below `i64::MAX`
/// that the byte series' sums of them stay exact for any real capture.
const MAX_BLOCK_BYTES: u64 = 1 << 48;

/// Migratetypes 0 to 7; the last slot also takes unknown ones (-1, 8+).
pub const MIGRATETYPE_SLOTS: usize = 8;

fn order_slot(order: u32) -> usize {
    (order as usize).min(ORDER_SLOTS - 1)
}

fn migratetype_slot(mt: i32) -> usize {
    usize::try_from(mt).map_or(MIGRATETYPE_SLOTS - 1, |m| m.min(MIGRATETYPE_SLOTS - 1))
}

/// Whether a `mm_page_alloc_zone_locked` moved the page into a per-CPU
/// list: its `percpu_refill` field (5.13 and later); before, the kernel
/// printed `percpu_refill` as `order == 0`, with no field behind it.
pub fn refills_a_list(pg: &Page) -> bool {
    match pg.percpu_refill {
        -1 => pg.order == 0,
        r => r == 1,
    }
}

fn frame_event(ev: &Event, pg: &Page) -> FrameEvent {
    FrameEvent {
        pfn: pg.pfn,
        order: pg.order,
        ts: ev.ts,
        pid: ev.pid,
        cpu: ev.cpu,
    }
}

/// The second of trace time of `ts` (ns).
fn second(ts: u64) -> u64 {
    ts / 1_000_000_000
}

/// Which per-CPU-list event a CPU's event is, for runs of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEvent {
    Refill,
    Drain,
}

/// Runs of consecutive refills or drains on one CPU: each run is one
/// acquisition of `zone->lock` (events-kmem.rst section 4: the kernel
/// refills and drains per-CPU lists in batches under the lock). Counted
/// by the decoder in each CPU's own order; blocks joined in stream order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListRuns {
    pub refill_runs: u64,
    pub drain_runs: u64,
    /// The run the stretch starts with (its first event is in it).
    first: Option<ListEvent>,
    /// The run in progress at the end.
    last: Option<ListEvent>,
    started: bool,
}

impl ListRuns {
    /// The next event of the CPU (`None`: any other event).
    #[inline]
    pub fn event(&mut self, e: Option<ListEvent>) {
        if e.is_some() && e != self.last {
            match e {
                Some(ListEvent::Refill) => self.refill_runs += 1,
                Some(ListEvent::Drain) => self.drain_runs += 1,
                None => {}
            }
        }
        if !self.started {
            self.started = true;
            self.first = e;
        }
        self.last = e;
    }

    /// Appends the CPU's next stretch: a run going on across the join is
    /// one run.
    pub fn absorb(&mut self, o: &ListRuns) {
        if !o.started {
            return;
        }
        self.refill_runs += o.refill_runs;
        self.drain_runs += o.drain_runs;
        if self.started && o.first.is_some() && o.first == self.last {
            match o.first {
                Some(ListEvent::Refill) => self.refill_runs -= 1,
                Some(ListEvent::Drain) => self.drain_runs -= 1,
                None => {}
            }
        }
        if !self.started {
            self.started = true;
            self.first = o.first;
        }
        self.last = o.last;
    }
}

/// An allocated block of pages.
#[derive(Clone, Copy, Debug, Default)]
pub struct LivePage {
    pub ts: u64,
    pub gfp: u64,
    pub order: u32,
    pub migratetype: i32,
    /// The stack taken with the allocation ([`crate::intern::NO_STACK`]
    /// if none).
    pub stack: u32,
    pub pid: i32,
    pub cpu: u16,
    pub selected: bool,
}

impl LivePage {
    fn site(&self) -> SiteKey {
        SiteKey {
            stack: self.stack,
            order: self.order,
            migratetype: self.migratetype,
            gfp: self.gfp,
        }
    }
}

/// What `perf kmem stat --page --caller` groups allocations by: the stack
/// (whose first frame outside the allocator is the call site), order,
/// migratetype and GFP flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteKey {
    pub stack: u32,
    pub order: u32,
    pub migratetype: i32,
    pub gfp: u64,
}

/// `perf kmem stat --page --alloc`'s grouping: a page frame's allocations
/// with one order, migratetype, GFP flags and stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PfnKey {
    pub pfn: u64,
    pub site: SiteKey,
}

/// Requests and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub requests: u64,
    pub bytes: u64,
    /// Where each request counted stands for `weight` of them (page stacks
    /// taken for a sample of page frames): the requests actually seen.
    pub samples: u64,
}

impl Requests {
    pub(crate) fn add(&mut self, bytes: u64) {
        self.requests += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }
    /// One request seen, standing for `weight` of them.
    pub(crate) fn add_sampled(&mut self, bytes: u64, weight: u64) {
        self.requests += weight;
        self.bytes = self.bytes.saturating_add(bytes.saturating_mul(weight));
        self.samples += 1;
    }
    pub fn absorb(&mut self, o: &Requests) {
        self.requests += o.requests;
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.samples += o.samples;
    }
}

/// `mm_page_alloc_extfrag`'s fields, the key of its counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fallback {
    pub alloc_order: u32,
    pub fallback_order: i8,
    pub alloc_migratetype: i8,
    pub fallback_migratetype: i8,
    /// -1 where the kernel has no `change_ownership` (before 3.17).
    pub change_ownership: i8,
}

/// The pass.
pub struct PagesPass<'a> {
    pub filter: &'a Filter,
    page_size: u64,
    /// Allocated blocks by head page frame (this shard's buckets). A frame
    /// table rather than a hash map, as the object tracker's: its slots
    /// for the coming events are fetched ahead ([`PagesPass::warm`]).
    live: FrameTable<LivePage>,
    /// Pages on a CPU's per-CPU list: refilled into it, or freed onto it
    /// (order 0 frees go to the freeing CPU's list), until allocated.
    on_list_of: FrameTable<u16>,
    pub allocated: Requests,
    /// `mm_page_free` events that pass the filters.
    pub free_events: Requests,
    pub batched_frees: u64,
    pub zone_locked: u64,
    /// Frees (passing the filters) of blocks allocated during the capture.
    pub alloc_freed: Requests,
    /// Frees (passing the filters) of blocks not allocated during it.
    pub free_only: Requests,
    pub failed: u64,
    /// Frames freed twice, blocks allocated while live, frees with
    /// another order than the allocation's.
    pub misuse: PageMisuse,
    /// Successful allocations by \[order\]\[migratetype\].
    pub by_order_migratetype: Vec<[u64; MIGRATETYPE_SLOTS]>,
    /// Refills and drains by CPU: (refilled pages, drained pages).
    pub per_cpu: FastMap<u16, (u64, u64)>,
    /// Drained pages by (the CPU whose list they were on, the draining CPU).
    pub drained_from: FastMap<(u16, u16), u64>,
    /// Pages refilled into each CPU's list and drained from it by the CPU
    /// itself (the list overflowed; drains of another CPU's list, as
    /// `drain_all_pages` does, are forced), by second of trace time: what
    /// a bigger list would have kept is what it gave back and took again
    /// within a second, not growth early and frees at exit.
    pub list_cycles: FastMap<(u16, u64), (u64, u64)>,
    pub fallbacks: FastMap<Fallback, u64>,
    /// Fallbacks by (second of trace time, `ts / 1e9`; fallback order),
    /// so that fragmenting ones can be told per second once the
    /// pageblock order is read.
    pub fallbacks_per_second: FastMap<(u64, i8), u64>,
    /// Successful allocations by stack, order, migratetype and GFP flags.
    pub by_site: FastMap<SiteKey, Requests>,
    /// Successful allocations that came with a stack.
    pub with_stack: u64,
    /// How the kernel's stacks sampled the allocations: `by_site` (and the
    /// live blocks by site) count the sampled ones, each as the
    /// allocations it stands for.
    pub sample: PageStackSample,
    /// Successful allocations outside the sample (in no call-site row).
    pub not_sampled: u64,
    /// Sampled allocations by site and by the region the sample took
    /// whole ([`PageStackSample::region`]): the estimates' margins.
    pub sampled_regions: FastMap<(SiteKey, u64), u64>,
    /// Successful allocations by page frame (kept on request only: one
    /// entry per frame and grouping).
    pub by_pfn: Option<FastMap<PfnKey, Requests>>,
    /// Bytes allocated minus bytes freed (the `alloc_bytes` and
    /// `free_bytes` of the stats), summed per time bin.
    pub held_series: TimeBins,
    /// With timelines asked for: selected allocations and frees per CPU.
    pub rates: Option<CpuRates>,
}

impl<'a> PagesPass<'a> {
    /// `per_pfn`: keep the allocations by page frame ([`PagesPass::by_pfn`]);
    /// `timelines`: keep [`PagesPass::rates`].
    pub fn new(filter: &'a Filter, page_size: u64, per_pfn: bool, timelines: bool) -> Self {
        PagesPass {
            filter,
            page_size,
            live: FrameTable::default(),
            on_list_of: FrameTable::default(),
            allocated: Requests::default(),
            free_events: Requests::default(),
            batched_frees: 0,
            zone_locked: 0,
            alloc_freed: Requests::default(),
            free_only: Requests::default(),
            failed: 0,
            misuse: PageMisuse::default(),
            by_order_migratetype: vec![[0; MIGRATETYPE_SLOTS]; ORDER_SLOTS],
            per_cpu: FastMap::default(),
            drained_from: FastMap::default(),
            list_cycles: FastMap::default(),
            fallbacks: FastMap::default(),
            fallbacks_per_second: FastMap::default(),
            by_site: FastMap::default(),
            with_stack: 0,
            sample: PageStackSample::EVERY,
            not_sampled: 0,
            sampled_regions: FastMap::default(),
            by_pfn: per_pfn.then(FastMap::default),
            held_series: Default::default(),
            rates: timelines.then(CpuRates::default),
        }
    }

    /// A block's bytes, at most `MAX_BLOCK_BYTES`: a damaged log's page
    /// size and order may be anything, and the time series adds them as
    /// `i64`.
    fn bytes(&self, order: u32) -> u64 {
        self.page_size
            .saturating_mul(1 << order.min(40))
            .min(MAX_BLOCK_BYTES)
    }

    /// Counts a block allocated at `pfn` under its site in `by_site`: as
    /// the allocations it stands for where stacks were sampled, not at all
    /// if it is outside the sample (false).
    fn count_at_site(
        sample: PageStackSample,
        by_site: &mut FastMap<SiteKey, Requests>,
        pfn: u64,
        site: SiteKey,
        bytes: u64,
    ) -> bool {
        if !sample.is_sampled() {
            by_site.entry(site).or_default().add(bytes);
        } else if sample.takes(pfn) {
            let w = sample.weight(site.order);
            by_site.entry(site).or_default().add_sampled(bytes, w);
        } else {
            return false;
        }
        true
    }

    /// Adds another shard's counts (its live blocks stay with it).
    pub fn absorb(&mut self, o: &PagesPass<'_>) {
        self.held_series.absorb(&o.held_series);
        if let (Some(mine), Some(theirs)) = (&mut self.rates, &o.rates) {
            mine.absorb(theirs);
        }
        self.allocated.absorb(&o.allocated);
        self.free_events.absorb(&o.free_events);
        self.batched_frees += o.batched_frees;
        self.zone_locked += o.zone_locked;
        self.alloc_freed.absorb(&o.alloc_freed);
        self.free_only.absorb(&o.free_only);
        self.failed += o.failed;
        self.misuse.absorb(&o.misuse);
        for (a, b) in self
            .by_order_migratetype
            .iter_mut()
            .zip(&o.by_order_migratetype)
        {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        for (&c, &(r, d)) in &o.per_cpu {
            let e = self.per_cpu.entry(c).or_default();
            e.0 += r;
            e.1 += d;
        }
        for (&k, &n) in &o.drained_from {
            *self.drained_from.entry(k).or_insert(0) += n;
        }
        for (&k, &(r, d)) in &o.list_cycles {
            let e = self.list_cycles.entry(k).or_default();
            e.0 += r;
            e.1 += d;
        }
        for (&k, &n) in &o.fallbacks {
            *self.fallbacks.entry(k).or_insert(0) += n;
        }
        for (&k, &n) in &o.fallbacks_per_second {
            *self.fallbacks_per_second.entry(k).or_insert(0) += n;
        }
        for (&k, r) in &o.by_site {
            self.by_site.entry(k).or_default().absorb(r);
        }
        self.with_stack += o.with_stack;
        self.not_sampled += o.not_sampled;
        for (&k, &n) in &o.sampled_regions {
            *self.sampled_regions.entry(k).or_insert(0) += n;
        }
        if let (Some(mine), Some(theirs)) = (self.by_pfn.as_mut(), o.by_pfn.as_ref()) {
            for (&k, r) in theirs {
                mine.entry(k).or_default().absorb(r);
            }
        }
    }

    /// One page-allocator event, in time order.
    #[inline]
    pub fn page(&mut self, ev: &Event, key: OrderKey, pg: &Page) {
        let mut selected = self.filter.selects(ev);
        if matches!(ev.kind, Kind::PageAllocZoneLocked | Kind::PagePcpuDrain) {
            // A CPU's list serves every task: its refills and drains are
            // selected by CPU (and time) only, as its lock runs are
            // counted, whichever task happened to be current.
            selected = self.filter.on_cpu(u32::from(ev.cpu));
        }
        match ev.kind {
            Kind::PageAlloc if pg.pfn == NO_PFN => self.failed += u64::from(selected),
            Kind::PageAlloc => {
                if selected {
                    self.held_series.add(key.ts, self.bytes(pg.order) as i64);
                    if let Some(r) = &mut self.rates {
                        r.count(u32::from(ev.cpu), key.ts, true);
                    }
                }
                self.alloc(ev, pg, selected)
            }
            Kind::PageFree => {
                if selected {
                    self.free_events.add(self.bytes(pg.order));
                    self.held_series.add(key.ts, -(self.bytes(pg.order) as i64));
                    if let Some(r) = &mut self.rates {
                        r.count(u32::from(ev.cpu), key.ts, false);
                    }
                }
                self.free(ev, pg, selected)
            }
            // A marker, not another free: every page freed in a batch
            // passed free_pages_prepare() first, which emitted its
            // mm_page_free (so on every kernel since 2.6.34).
            Kind::PageFreeBatched => self.batched_frees += u64::from(selected),
            Kind::PageAllocZoneLocked => {
                self.zone_locked += u64::from(selected);
                if refills_a_list(pg) {
                    self.on_list_of.insert(pg.pfn, ev.cpu);
                    if selected {
                        self.per_cpu.entry(ev.cpu).or_default().0 += 1;
                        self.list_cycles
                            .entry((ev.cpu, second(ev.ts)))
                            .or_default()
                            .0 += 1;
                    }
                }
            }
            Kind::PagePcpuDrain => {
                // A drain without a frame (a format with no `pfn` field)
                // has no known owner.
                let owner = self.on_list_of.remove(pg.pfn);
                if selected {
                    self.per_cpu.entry(ev.cpu).or_default().1 += 1;
                    if let Some(owner) = owner {
                        *self.drained_from.entry((owner, ev.cpu)).or_insert(0) += 1;
                    }
                    if owner.is_none_or(|o| o == ev.cpu) {
                        self.list_cycles
                            .entry((ev.cpu, second(ev.ts)))
                            .or_default()
                            .1 += 1;
                    }
                }
            }
            Kind::PageAllocExtfrag if selected => {
                let x = pg.extfrag;
                let key = Fallback {
                    alloc_order: pg.order,
                    fallback_order: x.fallback_order,
                    alloc_migratetype: x.alloc_migratetype,
                    fallback_migratetype: x.fallback_migratetype,
                    change_ownership: x.change_ownership,
                };
                *self.fallbacks.entry(key).or_insert(0) += 1;
                *self
                    .fallbacks_per_second
                    .entry((second(ev.ts), x.fallback_order))
                    .or_insert(0) += 1;
            }
            _ => {}
        }
    }

    fn alloc(&mut self, ev: &Event, pg: &Page, selected: bool) {
        self.on_list_of.remove(pg.pfn);
        let new = LivePage {
            ts: ev.ts,
            gfp: pg.gfp,
            order: pg.order,
            migratetype: pg.migratetype,
            stack: pg.stack,
            pid: ev.pid,
            cpu: ev.cpu,
            selected,
        };
        let old = self.live.insert(pg.pfn, new);
        let bytes = self.bytes(pg.order);
        let earlier = old.map(|o| FreedFrame::new(o.ts, o.pid, o.cpu, o.order));
        self.misuse
            .alloc(frame_event(ev, pg), earlier, bytes, selected);
        if !selected {
            return;
        }
        self.allocated.add(bytes);
        if !Self::count_at_site(self.sample, &mut self.by_site, pg.pfn, new.site(), bytes) {
            self.not_sampled += 1;
        } else if self.sample.is_sampled() {
            let region = self.sample.region(pg.pfn);
            *self
                .sampled_regions
                .entry((new.site(), region))
                .or_insert(0) += 1;
        }
        self.with_stack += u64::from(pg.stack != crate::intern::NO_STACK);
        if let Some(m) = self.by_pfn.as_mut() {
            let key = PfnKey {
                pfn: pg.pfn,
                site: new.site(),
            };
            m.entry(key).or_default().add(bytes);
        }
        self.by_order_migratetype[order_slot(pg.order)][migratetype_slot(pg.migratetype)] += 1;
    }

    fn free(&mut self, ev: &Event, pg: &Page, selected: bool) {
        if pg.order == 0 {
            self.on_list_of.insert(pg.pfn, ev.cpu);
        }
        let bytes = self.bytes(pg.order);
        let live = self.live.remove(pg.pfn);
        self.misuse.free(
            frame_event(ev, pg),
            live.map(|p| (p.order, p.selected)),
            bytes,
            selected,
        );
        // As perf's summary: a free that passes the filters is of a block
        // allocated in the capture or not (whoever allocated it), so
        // that the two add up to the frees.
        if selected {
            if live.is_some() {
                self.alloc_freed.add(bytes);
            } else {
                self.free_only.add(bytes);
            }
        }
    }

    /// The event counts: successful allocations by order are the rows of
    /// `by_order_migratetype`; drains and fallbacks are those counted per
    /// CPU and per fallback.
    pub fn stats(&self) -> PageStats {
        PageStats {
            allocs: self.allocated.requests + self.failed,
            alloc_bytes: self.allocated.bytes,
            failed: self.failed,
            frees: self.free_events.requests,
            free_bytes: self.free_events.bytes,
            batched_frees: self.batched_frees,
            zone_locked: self.zone_locked,
            pcpu_drains: self.per_cpu.values().map(|c| c.1).sum(),
            extfrag: self.fallbacks.values().sum(),
            allocs_by_order: self
                .by_order_migratetype
                .iter()
                .map(|r| r.iter().sum())
                .collect(),
        }
    }

    /// Live blocks whose allocation passed the filters.
    pub fn live_selected(&self) -> impl Iterator<Item = (u64, &LivePage)> {
        self.live.iter().filter(|(_, p)| p.selected)
    }

    /// Touches the slots of the frames of the coming page events, ahead of
    /// their lookups, as [`super::objects::Objects::warm`] does.
    #[inline]
    pub fn warm(&self, pfns: impl Iterator<Item = u64>) {
        for pfn in pfns {
            self.live.prefetch(pfn);
            self.on_list_of.prefetch(pfn);
        }
    }

    /// Bytes of `order`.
    pub fn order_bytes(&self, order: u32) -> u64 {
        self.bytes(order)
    }
}

/// Blocks still allocated at the end, over every shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LivePages {
    pub blocks: u64,
    pub bytes: u64,
    pub oldest_ts: Option<u64>,
    /// Blocks by \[order\]\[migratetype\].
    pub by_order_migratetype: Vec<[u64; MIGRATETYPE_SLOTS]>,
    /// Blocks by what their allocation is counted under.
    pub by_site: FastMap<SiteKey, Requests>,
    /// Blocks by (stack, pid) of their allocation: the finest grouping
    /// page_owner_sort's `--cull` offers, which coarser ones add up.
    pub by_owner: FastMap<(u32, i32), LiveGroup>,
}

/// Live blocks of one group, and when the oldest was allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveGroup {
    pub pages: Requests,
    pub oldest_ts: Option<u64>,
}

impl LiveGroup {
    pub fn absorb(&mut self, o: &LiveGroup) {
        self.pages.absorb(&o.pages);
        self.oldest_ts = match (self.oldest_ts, o.oldest_ts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

impl LivePages {
    /// Adds a shard's live blocks (whose allocation passed the filters).
    pub fn add(&mut self, p: &PagesPass<'_>) {
        if self.by_order_migratetype.is_empty() {
            self.by_order_migratetype = vec![[0; MIGRATETYPE_SLOTS]; ORDER_SLOTS];
        }
        for (pfn, l) in p.live_selected() {
            let bytes = p.order_bytes(l.order);
            self.blocks += 1;
            self.bytes = self.bytes.saturating_add(bytes);
            PagesPass::count_at_site(p.sample, &mut self.by_site, pfn, l.site(), bytes);
            let g = self.by_owner.entry((l.stack, l.pid)).or_default();
            g.pages.add(bytes);
            g.oldest_ts = Some(g.oldest_ts.map_or(l.ts, |t| t.min(l.ts)));
            self.oldest_ts = Some(self.oldest_ts.map_or(l.ts, |t| t.min(l.ts)));
            self.by_order_migratetype[order_slot(l.order)][migratetype_slot(l.migratetype)] += 1;
        }
    }
}

impl<'a> super::Pass<'a> for PagesPass<'a> {
    const CONSUMES: super::Consumes = super::Consumes::Page;
    const SHARD: crate::event::ShardKey = crate::event::ShardKey::Pfn;

    fn new(setup: &super::PassSetup<'a>) -> Self {
        let mut p = PagesPass::new(
            &setup.opts.filter,
            setup.page_size,
            setup.opts.pages_by_pfn,
            setup.opts.timelines,
        );
        p.sample = PageStackSample::of_log(setup.log);
        p
    }

    #[inline]
    fn page(&mut self, ev: &Event, key: OrderKey, p: &Page) {
        PagesPass::page(self, ev, key, p)
    }

    fn absorb(&mut self, o: &mut Self) {
        PagesPass::absorb(self, o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A damaged log's page size and order give at most `MAX_BLOCK_BYTES`
    /// a block, which the byte series' `i64` takes, negated too.
    #[test]
    fn a_blocks_bytes_are_bounded() {
        let filter = Filter::default();
        let p = PagesPass::new(&filter, 4096, false, false);
        assert_eq!(p.order_bytes(3), 32768);
        let p = PagesPass::new(&filter, 0x8000_0000, false, false);
        assert_eq!(p.order_bytes(40), MAX_BLOCK_BYTES);
        assert_eq!(p.order_bytes(u32::MAX), MAX_BLOCK_BYTES);
        let mut series = TimeBins::default();
        for _ in 0..1 << 16 {
            series.add(5, p.order_bytes(40) as i64);
        }
        // The sum saturated, then one block was freed.
        series.add(6, -(p.order_bytes(40) as i64));
        let max = MAX_BLOCK_BYTES as i64;
        assert_eq!(series.per_bin()[0].value, i64::MAX - max);
    }

    #[test]
    fn runs_join_across_stretches() {
        use ListEvent::*;
        let seq = [
            Some(Refill),
            Some(Refill),
            None,
            Some(Drain),
            Some(Drain),
            Some(Refill),
            Some(Refill),
            Some(Refill),
        ];
        let mut whole = ListRuns::default();
        seq.iter().for_each(|&e| whole.event(e));
        assert_eq!((whole.refill_runs, whole.drain_runs), (2, 1));
        for cut in 0..=seq.len() {
            let (mut a, mut b) = (ListRuns::default(), ListRuns::default());
            seq[..cut].iter().for_each(|&e| a.event(e));
            seq[cut..].iter().for_each(|&e| b.event(e));
            a.absorb(&b);
            assert_eq!(
                (a.refill_runs, a.drain_runs),
                (whole.refill_runs, whole.drain_runs),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn slots_clamp() {
        assert_eq!(order_slot(3), 3);
        assert_eq!(order_slot(12), ORDER_SLOTS - 1);
        assert_eq!(migratetype_slot(2), 2);
        assert_eq!(migratetype_slot(-1), MIGRATETYPE_SLOTS - 1);
        assert_eq!(migratetype_slot(40), MIGRATETYPE_SLOTS - 1);
    }
}
