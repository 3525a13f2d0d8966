//! Slab aggregates: totals as `perf kmem stat` prints them, per call site,
//! per cache, per kmalloc size class and (with `--alloc`) per pointer,
//! with live bytes.
//!
//! Everything here adds up across shards but the peaks: a shard records
//! each change of live bytes as a [`Delta`], and the combiner replays them
//! in the one order ([`crate::combine`]).

use super::objects::{unnamed_cache, Obj, Resolution, SlabSeen};
use super::timeline::{CpuRates, TimeBins, SMALL_MAX_BINS};
use crate::event::{Kind, NO_CACHE, NO_NODE};
use crate::intern::{fast_map, FastMap};
use crate::stream::OrderKey;
use kmemtrace_kernel::KmemKind;

/// Distinct GFP values listed per call site (the first ones met).
pub const MAX_GFP: usize = 8;

/// Where a [`Delta`]'s bytes count besides the total and the call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// A kmalloc size class, by `bytes_alloc`.
    Size(u64),
    /// A named cache, by interned id.
    Cache(u32),
    /// A `kmem_cache_alloc` of a cache not named yet.
    None,
}

/// A change of live bytes, at an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delta {
    pub key: OrderKey,
    pub site: u32,
    pub class: Class,
    pub bytes: i64,
}

impl Class {
    fn of(kind: Kind, cache: u32, bytes: u64) -> Self {
        match kind {
            Kind::Kmalloc => Class::Size(bytes),
            _ if cache != NO_CACHE => Class::Cache(cache),
            _ => Class::None,
        }
    }
}

/// Running totals of allocations and frees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Agg {
    /// Allocation events (failed ones included, as perf counts them).
    pub hits: u64,
    /// Allocation events that returned NULL.
    pub failed: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    /// Objects allocated here and freed in the capture.
    pub frees: u64,
    /// `bytes_alloc` of those objects.
    pub freed_bytes: u64,
    /// Of `frees`: freed on another CPU than the one that allocated.
    pub cross_cpu_frees: u64,
    pub live_objs: u64,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
}

impl Agg {
    #[inline]
    fn alloc(&mut self, req: u64, alloc: u64) {
        self.hits += 1;
        self.bytes_req = self.bytes_req.saturating_add(req);
        self.bytes_alloc = self.bytes_alloc.saturating_add(alloc);
    }
    #[inline]
    fn live_add(&mut self, bytes: u64) {
        self.live_objs += 1;
        self.live_bytes = self.live_bytes.saturating_add(bytes);
        self.peak_live_bytes = self.peak_live_bytes.max(self.live_bytes);
    }
    #[inline]
    fn live_sub(&mut self, bytes: u64) {
        self.live_objs = self.live_objs.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
    }
    #[inline]
    fn free(&mut self, bytes: u64, cross: bool) {
        self.frees += 1;
        self.freed_bytes = self.freed_bytes.saturating_add(bytes);
        self.cross_cpu_frees += u64::from(cross);
    }
    /// Adds another shard's counts. The peak of one shard alone is exact;
    /// with several, [`SlabPass::set_peaks`] puts the combiner's in.
    fn absorb(&mut self, o: &Agg) {
        self.peak_live_bytes = self.peak_live_bytes.max(o.peak_live_bytes);
        self.hits += o.hits;
        self.failed += o.failed;
        self.bytes_req = self.bytes_req.saturating_add(o.bytes_req);
        self.bytes_alloc = self.bytes_alloc.saturating_add(o.bytes_alloc);
        self.frees += o.frees;
        self.freed_bytes = self.freed_bytes.saturating_add(o.freed_bytes);
        self.cross_cpu_frees += o.cross_cpu_frees;
        self.live_objs += o.live_objs;
        self.live_bytes = self.live_bytes.saturating_add(o.live_bytes);
    }
}

/// A call site's figures (allocation and/or free site).
#[derive(Clone, Debug, Default)]
pub struct SiteAgg {
    pub agg: Agg,
    /// Free events made from this site (selected ones).
    pub free_calls: u64,
    /// Allocations of this site whose free the trace did not show before
    /// the pointer came back from another allocation.
    pub missed_frees: u64,
    /// The slab kinds this site's events had, a bit each ([`kind_bit`]);
    /// read with [`SiteAgg::kind_names`].
    pub kinds: u8,
    /// Distinct GFP values: (value, allocations, the first one's key).
    /// [`SlabPass::cut_gfp`] keeps the first [`MAX_GFP`] met.
    pub gfp: Vec<(u64, u64, OrderKey)>,
    /// Where each value is in `gfp`, once it holds more than
    /// [`GFP_SCANNED`]: a site of many distinct values is not searched
    /// through them at each allocation.
    gfp_index: Option<Box<FastMap<u64, usize>>>,
    /// Allocations with GFP values beyond those listed.
    pub gfp_other: u64,
    /// A cache this site allocated from (the last one seen), and when.
    pub cache: u32,
    pub cache_key: OrderKey,
}

/// The slab kinds, in the order a site lists them, with the event name
/// each is listed by (the `_node` variants count under theirs).
const SITE_KINDS: [(Kind, KmemKind); 4] = [
    (Kind::Kmalloc, KmemKind::Kmalloc),
    (Kind::CacheAlloc, KmemKind::KmemCacheAlloc),
    (Kind::Kfree, KmemKind::Kfree),
    (Kind::CacheFree, KmemKind::KmemCacheFree),
];

/// The bit of [`SiteAgg::kinds`] that stands for `kind` (none for a page
/// event).
#[inline]
fn kind_bit(kind: Kind) -> u8 {
    match kind {
        Kind::Kmalloc => 1,
        Kind::CacheAlloc => 2,
        Kind::Kfree => 4,
        Kind::CacheFree => 8,
        _ => 0,
    }
}

/// GFP values of a site searched in turn; an index beyond.
const GFP_SCANNED: usize = 16;

impl SiteAgg {
    /// Counts `n` allocations of GFP value `v`, the first at `key`.
    #[inline]
    fn count_gfp(&mut self, v: u64, n: u64, key: OrderKey) {
        let at = match &self.gfp_index {
            Some(index) => index.get(&v).copied(),
            None => self.gfp.iter().position(|g| g.0 == v),
        };
        if let Some(i) = at {
            let g = &mut self.gfp[i];
            g.1 += n;
            g.2 = g.2.min(key);
            return;
        }
        self.gfp.push((v, n, key));
        if let Some(index) = &mut self.gfp_index {
            index.insert(v, self.gfp.len() - 1);
        } else if self.gfp.len() > GFP_SCANNED {
            let index = self.gfp.iter().enumerate().map(|(i, g)| (g.0, i));
            self.gfp_index = Some(Box::new(index.collect()));
        }
    }

    /// The event names of the slab kinds this site's events had.
    pub fn kind_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        SITE_KINDS
            .iter()
            .filter(|&&(k, _)| self.kinds & kind_bit(k) != 0)
            .map(|&(_, event)| event.name())
    }

    fn absorb(&mut self, o: &SiteAgg) {
        self.agg.absorb(&o.agg);
        self.free_calls += o.free_calls;
        self.missed_frees += o.missed_frees;
        self.kinds |= o.kinds;
        for &(v, n, k) in &o.gfp {
            self.count_gfp(v, n, k);
        }
        self.gfp_other += o.gfp_other;
        if o.cache != NO_CACHE && (self.cache == NO_CACHE || o.cache_key > self.cache_key) {
            self.cache = o.cache;
            self.cache_key = o.cache_key;
        }
    }
}

/// kmalloc size classes by `bytes_alloc`: sizes up to 8 KiB in 8-byte
/// steps directly, others in a map.
#[derive(Default)]
struct Classes {
    small: Vec<Option<Agg>>,
    large: FastMap<u64, Agg>,
}

impl Classes {
    #[inline]
    fn get(&mut self, size: u64) -> &mut Agg {
        if size <= 8192 && size.is_multiple_of(8) {
            let i = (size / 8) as usize;
            if self.small.len() <= i {
                self.small.resize(i + 1, None);
            }
            self.small[i].get_or_insert_with(Agg::default)
        } else {
            self.large.entry(size).or_default()
        }
    }

    fn absorb(&mut self, o: &Classes) {
        for (size, a) in o.iter() {
            self.get(size).absorb(a);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &Agg)> {
        self.small
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.as_ref().map(|a| (i as u64 * 8, a)))
            .chain(self.large.iter().map(|(&k, a)| (k, a)))
    }
}

/// Per-pointer aggregate for `--alloc` (perf's per-allocation table).
#[derive(Clone, Debug, Default)]
pub struct PtrAgg {
    pub hits: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub cross_cpu_frees: u64,
    pub site: u32,
    pub live: bool,
}

/// Whole-capture totals.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub agg: Agg,
    pub alloc_events: u64,
    pub free_events: u64,
    /// `kfree(NULL)` and the like.
    pub null_frees: u64,
    /// Frees that matched a tracked live object.
    pub matched_frees: u64,
    /// Allocations naming a node (not -1) in a format that has `node`.
    pub node_requests: u64,
    /// Of those: the node differs from the allocating CPU's node.
    pub cross_node_allocs: u64,
    /// What perf prints as "Cross CPU allocations": its counting.
    pub perf_cross_allocs: u64,
    /// Allocations whose format records a node.
    pub allocs_with_node_field: u64,
}

/// The slab aggregates.
pub struct SlabPass {
    /// CPU -> node (None: the log has no map).
    cpu_node: Option<Vec<i32>>,
    /// By site id.
    pub sites: Vec<SiteAgg>,
    /// By cache id (0: unknown cache).
    pub caches: Vec<Agg>,
    classes: Classes,
    pub totals: Totals,
    pub ptrs: Option<FastMap<u64, PtrAgg>>,
    /// Changes of live bytes in the current epoch, when recorded (with
    /// more than one shard: one shard's own peaks are exact).
    pub deltas: Vec<Delta>,
    pub record_deltas: bool,
    /// The same changes summed per time bin, always.
    pub live_series: TimeBins,
    /// With timelines asked for: the changes per call site (by site id),
    /// and the selected allocation and free events per CPU.
    pub site_live: Option<Vec<TimeBins>>,
    pub rates: Option<CpuRates>,
}

impl SlabPass {
    /// `record_deltas`: the peaks are the combiner's (more than one shard).
    /// `timelines`: keep [`SlabPass::site_live`] and [`SlabPass::rates`].
    pub fn new(
        cpu_nodes: &std::collections::BTreeMap<u32, u32>,
        per_pointer: bool,
        record_deltas: bool,
        timelines: bool,
    ) -> Self {
        let cpu_node = (!cpu_nodes.is_empty()).then(|| {
            let max = cpu_nodes.keys().max().copied().unwrap_or(0).min(1 << 16) as usize;
            let mut v = vec![-1; max + 1];
            for (&c, &n) in cpu_nodes {
                if let Some(x) = v.get_mut(c as usize) {
                    *x = n as i32;
                }
            }
            v
        });
        SlabPass {
            cpu_node,
            sites: Vec::new(),
            caches: Vec::new(),
            classes: Classes::default(),
            totals: Totals::default(),
            ptrs: per_pointer.then(fast_map),
            deltas: Vec::new(),
            record_deltas,
            live_series: Default::default(),
            site_live: timelines.then(Vec::new),
            rates: timelines.then(CpuRates::default),
        }
    }

    #[inline]
    fn delta(&mut self, d: Delta) {
        self.live_series.add(d.key.ts, d.bytes);
        if let Some(v) = &mut self.site_live {
            let i = d.site as usize;
            if v.len() <= i {
                v.resize(i + 1, TimeBins::with_max_bins(SMALL_MAX_BINS));
            }
            v[i].add(d.key.ts, d.bytes);
        }
        if self.record_deltas {
            self.deltas.push(d);
        }
    }

    /// kmalloc size classes: (`bytes_alloc`, totals).
    pub fn size_classes(&self) -> impl Iterator<Item = (u64, &Agg)> {
        self.classes.iter()
    }

    #[inline]
    fn site(&mut self, id: u32) -> &mut SiteAgg {
        let i = id as usize;
        if self.sites.len() <= i {
            self.sites.resize(i + 1, SiteAgg::default());
        }
        &mut self.sites[i]
    }

    #[inline]
    fn cache(&mut self, id: u32) -> &mut Agg {
        let i = id as usize;
        if self.caches.len() <= i {
            self.caches.resize(i + 1, Agg::default());
        }
        &mut self.caches[i]
    }

    /// One slab event, in time order.
    #[inline]
    pub fn slab(&mut self, s: &SlabSeen<'_>) {
        if s.ev.kind.is_alloc() {
            self.alloc(s)
        } else {
            self.free(s)
        }
    }

    fn alloc(&mut self, s: &SlabSeen<'_>) {
        let (ev, slab) = (s.ev, s.slab);
        let failed = s.res == Resolution::FailedAlloc;
        if s.selected {
            self.count_alloc(s, failed);
        }
        let Resolution::Alloc { replaced } = s.res else {
            return;
        };
        if let Some(old) = replaced.filter(Obj::selected) {
            // The trace never showed this object's free.
            self.drop_live(&old);
            self.site(old.site).missed_frees += 1;
            let b = u64::from(old.bytes_alloc);
            self.delta(Delta {
                key: s.key,
                site: old.site,
                class: Class::of(old.kind, old.cache, b),
                bytes: -(b as i64),
            });
        }
        if s.selected {
            let b = slab.bytes_alloc.min(u64::from(u32::MAX));
            self.delta(Delta {
                key: s.key,
                site: slab.site,
                class: Class::of(ev.kind, slab.cache, b),
                bytes: b as i64,
            });
            self.totals.agg.live_add(b);
            self.site(slab.site).agg.live_add(b);
            match ev.kind {
                Kind::Kmalloc => {
                    let c = self.classes.get(b);
                    c.alloc(slab.bytes_req, slab.bytes_alloc);
                    c.live_add(b);
                }
                _ if slab.cache != NO_CACHE => {
                    let c = self.cache(slab.cache);
                    c.alloc(slab.bytes_req, slab.bytes_alloc);
                    c.live_add(b);
                }
                // A kmem_cache_alloc without a name (kernels before 6.2):
                // the cache is learned from its kmem_cache_free.
                _ => {}
            }
        }
    }

    /// The counts of a selected allocation, failed or not.
    fn count_alloc(&mut self, s: &SlabSeen<'_>, failed: bool) {
        let (ev, slab) = (s.ev, s.slab);
        let cpu_node = self
            .cpu_node
            .as_ref()
            .map(|v| v.get(s.cpu() as usize).copied().unwrap_or(-1));
        if let Some(r) = &mut self.rates {
            r.count(s.cpu(), s.key.ts, true);
        }
        let t = &mut self.totals;
        t.alloc_events += 1;
        t.agg.alloc(slab.bytes_req, slab.bytes_alloc);
        if slab.node != NO_NODE {
            t.allocs_with_node_field += 1;
            if slab.node != -1 {
                t.node_requests += 1;
                if let Some(n) = cpu_node {
                    if n >= 0 && n != slab.node {
                        t.cross_node_allocs += 1;
                    }
                }
                // perf: node != NUMA_NO_NODE && node != cpu__get_node(cpu),
                // where an unknown CPU node is -1.
                if cpu_node.unwrap_or(-1) != slab.node {
                    t.perf_cross_allocs += 1;
                }
            }
        }
        if failed {
            self.totals.agg.failed += 1;
        }
        let site = self.site(slab.site);
        site.agg.alloc(slab.bytes_req, slab.bytes_alloc);
        site.kinds |= kind_bit(ev.kind);
        site.count_gfp(slab.gfp, 1, s.key);
        if slab.cache != NO_CACHE {
            site.cache = slab.cache;
            site.cache_key = s.key;
        }
        if failed {
            site.agg.failed += 1;
        }
        if let Some(p) = &mut self.ptrs {
            if !failed {
                let a = p.entry(slab.ptr).or_default();
                a.hits += 1;
                a.bytes_req = a.bytes_req.saturating_add(slab.bytes_req);
                a.bytes_alloc = a.bytes_alloc.saturating_add(slab.bytes_alloc);
                a.site = slab.site;
                a.live = true;
            }
        }
    }

    /// Takes a selected live object out of the live counts (without
    /// counting a free).
    fn drop_live(&mut self, o: &Obj) {
        let b = u64::from(o.bytes_alloc);
        self.totals.agg.live_sub(b);
        self.site(o.site).agg.live_sub(b);
        match o.kind {
            Kind::Kmalloc => self.classes.get(b).live_sub(b),
            _ if o.cache != NO_CACHE => self.cache(o.cache).live_sub(b),
            _ => {}
        }
    }

    fn free(&mut self, s: &SlabSeen<'_>) {
        let (ev, slab) = (s.ev, s.slab);
        if s.selected {
            if let Some(r) = &mut self.rates {
                r.count(s.cpu(), s.key.ts, false);
            }
            self.totals.free_events += 1;
            let site = self.site(slab.site);
            site.free_calls += 1;
            site.kinds |= kind_bit(ev.kind);
            if s.res == Resolution::NullFree {
                self.totals.null_frees += 1;
            }
        }
        let Resolution::Free { object: o0 } = s.res else {
            return;
        };
        if !o0.selected() {
            return;
        }
        let cross = ev.cpu != o0.cpu;
        let b = u64::from(o0.bytes_alloc);
        self.delta(Delta {
            key: s.key,
            site: o0.site,
            class: Class::of(o0.kind, o0.cache, b),
            bytes: -(b as i64),
        });
        let t = &mut self.totals;
        t.matched_frees += 1;
        t.agg.free(b, cross);
        t.agg.live_sub(b);
        let site = &mut self.site(o0.site).agg;
        site.free(b, cross);
        site.live_sub(b);
        if let Some(p) = &mut self.ptrs {
            if let Some(a) = p.get_mut(&slab.ptr) {
                a.cross_cpu_frees += u64::from(cross);
                a.live = false;
            }
        }
        match o0.kind {
            Kind::Kmalloc => {
                let c = self.classes.get(b);
                c.free(b, cross);
                c.live_sub(b);
            }
            _ if o0.cache != NO_CACHE => {
                let c = self.cache(o0.cache);
                c.free(b, cross);
                c.live_sub(b);
            }
            _ => {
                // Learned now: the cache named by the free (or unknown).
                let id = if ev.kind == Kind::CacheFree {
                    slab.cache
                } else {
                    NO_CACHE
                };
                let c = self.cache(id);
                c.alloc(u64::from(o0.bytes_req), b);
                c.free(b, cross);
            }
        }
    }

    /// Adds another shard's aggregates (see `Agg::absorb` for the peaks).
    pub fn absorb(&mut self, o: &SlabPass) {
        self.live_series.absorb(&o.live_series);
        if let (Some(mine), Some(theirs)) = (&mut self.site_live, &o.site_live) {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), TimeBins::with_max_bins(SMALL_MAX_BINS));
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                m.absorb(t);
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut self.rates, &o.rates) {
            mine.absorb(theirs);
        }
        for (i, site) in o.sites.iter().enumerate() {
            self.site(i as u32).absorb(site);
        }
        for (i, c) in o.caches.iter().enumerate() {
            self.cache(i as u32).absorb(c);
        }
        self.classes.absorb(&o.classes);
        let t = &mut self.totals;
        let u = &o.totals;
        t.agg.absorb(&u.agg);
        t.alloc_events += u.alloc_events;
        t.free_events += u.free_events;
        t.null_frees += u.null_frees;
        t.matched_frees += u.matched_frees;
        t.node_requests += u.node_requests;
        t.cross_node_allocs += u.cross_node_allocs;
        t.perf_cross_allocs += u.perf_cross_allocs;
        t.allocs_with_node_field += u.allocs_with_node_field;
        if let (Some(p), Some(q)) = (&mut self.ptrs, &o.ptrs) {
            // Pointers are in one shard each.
            p.extend(q.iter().map(|(&k, v)| (k, v.clone())));
        }
    }

    /// Sets the peaks the combiner found: the total's, and per call site,
    /// cache and size class.
    pub fn set_peaks(&mut self, peaks: &crate::combine::Peaks) {
        self.totals.agg.peak_live_bytes = peaks.total;
        for (i, s) in self.sites.iter_mut().enumerate() {
            s.agg.peak_live_bytes = peaks.site(i as u32);
        }
        for (i, c) in self.caches.iter_mut().enumerate() {
            c.peak_live_bytes = peaks.class(Class::Cache(i as u32));
        }
        for a in self.classes.small.iter_mut().enumerate() {
            if let (i, Some(a)) = a {
                a.peak_live_bytes = peaks.class(Class::Size(i as u64 * 8));
            }
        }
        for (&size, a) in self.classes.large.iter_mut() {
            a.peak_live_bytes = peaks.class(Class::Size(size));
        }
    }

    /// Lists each site's first [`MAX_GFP`] GFP values met, in that order,
    /// and counts the others' allocations in `gfp_other`.
    pub fn cut_gfp(&mut self) {
        for s in &mut self.sites {
            s.gfp.sort_by_key(|g| g.2);
            for g in s.gfp.drain(MAX_GFP.min(s.gfp.len())..) {
                s.gfp_other += g.1;
            }
            s.gfp_index = None;
        }
    }

    /// Objects of unnamed caches still live at the end go to the unknown
    /// cache (id 0).
    pub fn finish<'o>(&mut self, live: impl Iterator<Item = &'o Obj>) {
        let mut unknown = Agg::default();
        for o in live.filter(|o| unnamed_cache(o)) {
            let (b, req) = (u64::from(o.bytes_alloc), u64::from(o.bytes_req));
            unknown.alloc(req, b);
            unknown.live_add(b);
        }
        if unknown.hits > 0 {
            let c = self.cache(NO_CACHE);
            // Saturating, as the stream's sums are: a damaged log's sizes
            // may have brought the unknown cache near the end of u64.
            c.hits += unknown.hits;
            c.bytes_req = c.bytes_req.saturating_add(unknown.bytes_req);
            c.bytes_alloc = c.bytes_alloc.saturating_add(unknown.bytes_alloc);
            c.live_objs += unknown.live_objs;
            c.live_bytes = c.live_bytes.saturating_add(unknown.live_bytes);
            c.peak_live_bytes = c.peak_live_bytes.max(c.live_bytes);
        }
    }
}

impl<'a> super::Pass<'a> for SlabPass {
    const CONSUMES: super::Consumes = super::Consumes::Slab;
    const SHARD: crate::event::ShardKey = crate::event::ShardKey::Pointer;

    fn new(setup: &super::PassSetup<'a>) -> Self {
        SlabPass::new(
            &setup.log.cpu_nodes,
            setup.opts.per_pointer,
            setup.sharded,
            setup.opts.timelines,
        )
    }

    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        SlabPass::slab(self, s)
    }

    fn absorb(&mut self, o: &mut Self) {
        SlabPass::absorb(self, o)
    }
}

#[cfg(test)]
mod tests {
    use super::{SiteAgg, GFP_SCANNED};
    use crate::stream::OrderKey;

    fn key(ts: u64) -> OrderKey {
        OrderKey {
            ts,
            stream: 0,
            block: 0,
            pos: 0,
        }
    }

    #[test]
    fn a_sites_gfp_values_add_up_past_the_index_and_across_shards() {
        let (mut a, mut b) = (SiteAgg::default(), SiteAgg::default());
        let values = 4 * GFP_SCANNED as u64;
        for round in 0..3 {
            for v in 0..values {
                a.count_gfp(v, 1, key(round * values + v));
            }
        }
        for v in (0..values).rev() {
            b.count_gfp(v, 2, key(v / 2));
        }
        assert!(a.gfp_index.is_some());
        a.absorb(&b);
        assert_eq!(a.gfp.len(), values as usize);
        for (i, g) in a.gfp.iter().enumerate() {
            assert_eq!((g.0, g.1, g.2), (i as u64, 5, key(i as u64 / 2)));
        }
    }
}
