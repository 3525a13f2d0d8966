//! The analyses over the merged event stream: the object tracker (every
//! object followed by pointer from allocation to free), per-callsite,
//! per-cache, per-size-class and per-pointer aggregates, the cross-CPU
//! matrix, the misuse detector and, at the end, the leak finder.
//!
//! Memory grows with the objects the kernel has (live ones, and freed
//! pointers remembered for double-free detection until they are reused),
//! with call sites and caches, never with the length of the log.

use crate::event::{fast_map, Ev, FastMap, Kind, SiteTable, NO_CACHE, NO_NODE};
use crate::filter::Filter;
use crate::merge::Windows;
use std::collections::hash_map::Entry;

/// `ZERO_SIZE_PTR`: pointers up to this are "no object" (`kfree(NULL)`,
/// `kfree(ZERO_SIZE_PTR)`).
pub const ZERO_SIZE_PTR: u64 = 16;
/// "No call site" in [`Obj`].
pub const NO_SITE: u32 = u32::MAX;
/// Distinct GFP values remembered per call site.
const MAX_GFP: usize = 8;

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
}

/// A call site (allocation and/or free).
#[derive(Clone, Debug)]
pub struct Site {
    pub addr: u64,
    /// Matches the `--callsite` pattern.
    pub selected: bool,
    pub agg: Agg,
    /// Free events made from this site (selected ones).
    pub free_calls: u64,
    /// Allocations of this site whose free the trace did not show before
    /// the pointer came back from another allocation.
    pub missed_frees: u64,
    /// Bit 0 kmalloc, 1 kmem_cache_alloc, 2 kfree, 3 kmem_cache_free.
    pub kinds: u8,
    /// Distinct GFP values with their counts (at most [`MAX_GFP`]; more
    /// are counted in `gfp_other`).
    pub gfp: Vec<(u64, u64)>,
    pub gfp_other: u64,
    /// A cache this site allocated from (the last one seen).
    pub cache: u32,
}

/// One tracked pointer: 32 bytes.
#[derive(Clone, Copy, Debug)]
struct Obj {
    /// The allocation's time while live; the free's time once freed.
    ts: u64,
    /// Sizes, saturated to `u32::MAX` (no slab object comes near).
    bytes_alloc: u32,
    bytes_req: u32,
    /// Allocation call site ([`NO_SITE`] if the allocation was not seen).
    site: u32,
    cache: u32,
    alloc_cpu: u16,
    kind: Kind,
    state: State,
    /// Freed objects: the generation of frees the free belongs to.
    gen: u32,
}

/// `state` values: live or freed, and whether the allocation passed the
/// filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State(u8);

impl State {
    const LIVE: u8 = 1;
    const SELECTED: u8 = 2;
    fn new(live: bool, selected: bool) -> Self {
        State((u8::from(live) * Self::LIVE) | (u8::from(selected) * Self::SELECTED))
    }
    fn live(self) -> bool {
        self.0 & Self::LIVE != 0
    }
    fn selected(self) -> bool {
        self.0 & Self::SELECTED != 0
    }
}

#[inline]
fn sat32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
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
        if size <= 8192 && size % 8 == 0 {
            let i = (size / 8) as usize;
            if self.small.len() <= i {
                self.small.resize(i + 1, None);
            }
            self.small[i].get_or_insert_with(Agg::default)
        } else {
            self.large.entry(size).or_default()
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

/// Frees by (allocating CPU, freeing CPU): dense for CPUs below 256.
#[derive(Default)]
struct Matrix {
    dense: Vec<u64>,
    sparse: FastMap<(u32, u32), u64>,
}

impl Matrix {
    const DENSE: u32 = 256;

    #[inline]
    fn add(&mut self, a: u32, f: u32) {
        if a < Self::DENSE && f < Self::DENSE {
            if self.dense.is_empty() {
                self.dense = vec![0; (Self::DENSE * Self::DENSE) as usize];
            }
            self.dense[(a * Self::DENSE + f) as usize] += 1;
        } else {
            *self.sparse.entry((a, f)).or_insert(0) += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = ((u32, u32), u64)> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| ((i as u32 / Self::DENSE, i as u32 % Self::DENSE), n))
            .chain(self.sparse.iter().map(|(&k, &n)| (k, n)))
    }
}

/// The misuse kinds, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Misuse {
    DoubleFree,
    KmallocFreedByCacheFree,
    CacheMismatch,
    ReqExceedsAlloc,
    LivePointerReturned,
    CacheAllocFreedByKfree,
    FailedAlloc,
    FreeOfUnseen,
}

impl Misuse {
    pub const ALL: [Misuse; 8] = [
        Misuse::DoubleFree,
        Misuse::KmallocFreedByCacheFree,
        Misuse::CacheMismatch,
        Misuse::ReqExceedsAlloc,
        Misuse::LivePointerReturned,
        Misuse::CacheAllocFreedByKfree,
        Misuse::FailedAlloc,
        Misuse::FreeOfUnseen,
    ];

    /// The stable name used in JSON and `--fail-on` messages.
    pub fn id(self) -> &'static str {
        match self {
            Misuse::DoubleFree => "double_free",
            Misuse::KmallocFreedByCacheFree => "kmalloc_freed_by_kmem_cache_free",
            Misuse::CacheMismatch => "cache_mismatch",
            Misuse::ReqExceedsAlloc => "bytes_alloc_below_bytes_req",
            Misuse::LivePointerReturned => "live_pointer_returned",
            Misuse::CacheAllocFreedByKfree => "kmem_cache_alloc_freed_by_kfree",
            Misuse::FailedAlloc => "failed_allocation",
            Misuse::FreeOfUnseen => "free_of_object_allocated_before_capture",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One occurrence of a finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub ptr: u64,
    pub alloc_site: u32,
    pub free_site: u32,
    /// Alloc time of the object (or of the earlier free, for double frees).
    pub earlier_ts: Option<u64>,
    pub earlier_cpu: Option<u32>,
    pub alloc_cache: u32,
    pub free_cache: u32,
    /// The sizes of the allocation event that revealed the finding (none
    /// when a free did).
    pub bytes: Option<(u64, u64)>,
    pub uncertain: bool,
}

/// All occurrences of one misuse kind.
#[derive(Clone, Debug, Default)]
pub struct FindingAgg {
    pub count: u64,
    /// Occurrences that fall where the log lost events.
    pub uncertain: u64,
    pub first: Option<Occurrence>,
    pub first_certain: Option<Occurrence>,
    /// Allocation / free call sites with counts.
    pub alloc_sites: FastMap<u32, u64>,
    pub free_sites: FastMap<u32, u64>,
    /// (alloc cache, free cache) pairs, for cache mismatches.
    pub cache_pairs: FastMap<(u32, u32), u64>,
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

/// The analysis state.
pub struct Analysis<'a> {
    filter: &'a Filter,
    /// CPU -> node (None: the log has no map).
    cpu_node: Option<Vec<i32>>,
    /// Names a call site for the `--callsite` filter.
    namer: Box<dyn Fn(u64) -> String + 'a>,
    /// Live objects, and recently freed pointers (for double-free
    /// detection), by pointer. Freed ones are forgotten a generation of
    /// `remember` frees after their free: at most `2 * remember` are kept.
    objs: FastMap<u64, Obj>,
    gen: u32,
    frees_in_gen: usize,
    remember: usize,
    site_table: &'a SiteTable,
    /// By site id ([`SiteTable`]).
    pub sites: Vec<Site>,
    /// By cache id (0: unknown cache).
    pub caches: Vec<Agg>,
    /// kmalloc size classes by `bytes_alloc`.
    classes: Classes,
    /// (alloc CPU, free CPU) -> frees.
    matrix: Matrix,
    pub totals: Totals,
    pub findings: Vec<FindingAgg>,
    pub ptrs: Option<FastMap<u64, PtrAgg>>,
    pub first_ts: Option<u64>,
    pub last_ts: u64,
}

/// A leak group: live objects of one call site at the end.
#[derive(Clone, Debug, Default)]
pub struct LeakGroup {
    pub site: u32,
    pub objects: u64,
    pub bytes: u64,
    pub oldest_ts: u64,
    pub newest_ts: u64,
    /// Objects whose free may have been among lost events.
    pub uncertain: u64,
    /// Up to 5 oldest objects: (ptr, alloc ts, cpu, bytes).
    pub examples: Vec<(u64, u64, u32, u64)>,
}

impl<'a> Analysis<'a> {
    pub fn new(
        filter: &'a Filter,
        cpu_nodes: &std::collections::BTreeMap<u32, u32>,
        per_pointer: bool,
        remember_frees: usize,
        site_table: &'a SiteTable,
        namer: Box<dyn Fn(u64) -> String + 'a>,
    ) -> Self {
        let cpu_node = if cpu_nodes.is_empty() {
            None
        } else {
            let max = cpu_nodes.keys().max().copied().unwrap_or(0).min(1 << 16) as usize;
            let mut v = vec![-1; max + 1];
            for (&c, &n) in cpu_nodes {
                if let Some(x) = v.get_mut(c as usize) {
                    *x = n as i32;
                }
            }
            Some(v)
        };
        Analysis {
            filter,
            cpu_node,
            namer,
            objs: fast_map(),
            gen: 0,
            frees_in_gen: 0,
            remember: remember_frees.max(1),
            site_table,
            sites: Vec::new(),
            caches: Vec::new(),
            classes: Classes::default(),
            matrix: Matrix::default(),
            totals: Totals::default(),
            findings: vec![FindingAgg::default(); Misuse::ALL.len()],
            ptrs: per_pointer.then(fast_map),
            first_ts: None,
            last_ts: 0,
        }
    }

    /// kmalloc size classes: (`bytes_alloc`, totals).
    pub fn size_classes(&self) -> impl Iterator<Item = (u64, &Agg)> {
        self.classes.iter()
    }

    /// (allocating CPU, freeing CPU) -> frees.
    pub fn cpu_matrix(&self) -> impl Iterator<Item = ((u32, u32), u64)> + '_ {
        self.matrix.iter()
    }

    /// Tracked pointers (live and remembered freed ones).
    pub fn tracked(&self) -> usize {
        self.objs.len()
    }

    #[inline]
    fn site(&mut self, id: u32) -> u32 {
        if id as usize >= self.sites.len() {
            self.grow_sites();
        }
        id
    }

    /// Adds the sites the decoders have named since the last time.
    #[cold]
    fn grow_sites(&mut self) {
        for addr in self.site_table.addrs_from(self.sites.len()) {
            let selected = self.filter.callsite.is_none() || {
                let n = (self.namer)(addr);
                self.filter.callsite_matches(&n)
            };
            self.sites.push(Site {
                addr,
                selected,
                agg: Agg::default(),
                free_calls: 0,
                missed_frees: 0,
                kinds: 0,
                gfp: Vec::new(),
                gfp_other: 0,
                cache: NO_CACHE,
            });
        }
    }

    #[inline]
    fn cache(&mut self, id: u32) -> &mut Agg {
        let i = id as usize;
        if self.caches.len() <= i {
            self.caches.resize(i + 1, Agg::default());
        }
        &mut self.caches[i]
    }

    #[allow(clippy::too_many_arguments)]
    fn find(
        &mut self,
        m: Misuse,
        ev: &Ev,
        alloc_site: u32,
        free_site: u32,
        earlier: Option<(u64, u32)>,
        alloc_cache: u32,
        uncertain: bool,
    ) {
        let f = &mut self.findings[m.index()];
        f.count += 1;
        f.uncertain += u64::from(uncertain);
        if alloc_site != NO_SITE {
            *f.alloc_sites.entry(alloc_site).or_insert(0) += 1;
        }
        if free_site != NO_SITE {
            *f.free_sites.entry(free_site).or_insert(0) += 1;
        }
        if m == Misuse::CacheMismatch {
            *f.cache_pairs.entry((alloc_cache, ev.cache)).or_insert(0) += 1;
        }
        if f.first.is_none() || (!uncertain && f.first_certain.is_none()) {
            let o = Occurrence {
                ts: ev.ts,
                cpu: u32::from(ev.cpu),
                pid: ev.pid,
                ptr: ev.ptr,
                alloc_site,
                free_site,
                earlier_ts: earlier.map(|e| e.0),
                earlier_cpu: earlier.map(|e| e.1),
                alloc_cache,
                free_cache: if ev.kind.is_alloc() {
                    NO_CACHE
                } else {
                    ev.cache
                },
                bytes: ev.kind.is_alloc().then_some((ev.bytes_req, ev.bytes_alloc)),
                uncertain,
            };
            if f.first.is_none() {
                f.first = Some(o.clone());
            }
            if !uncertain && f.first_certain.is_none() {
                f.first_certain = Some(o);
            }
        }
    }

    /// Processes one event (in time order). `windows` holds every lost
    /// window that starts before `ev.ts`.
    #[inline]
    pub fn event(&mut self, ev: &Ev, windows: &Windows) {
        if self.first_ts.is_none() {
            self.first_ts = Some(ev.ts);
        }
        self.last_ts = self.last_ts.max(ev.ts);
        if ev.kind.is_alloc() {
            self.alloc(ev, windows)
        } else {
            self.free(ev, windows)
        }
    }

    fn alloc(&mut self, ev: &Ev, windows: &Windows) {
        let cpu = u32::from(ev.cpu);
        let site = self.site(ev.site);
        let sel = self.filter.cpu_pid(cpu, ev.pid) && self.sites[site as usize].selected;
        let failed = ev.ptr == 0;
        if sel {
            let t = &mut self.totals;
            t.alloc_events += 1;
            t.agg.alloc(ev.bytes_req, ev.bytes_alloc);
            if ev.node != NO_NODE {
                t.allocs_with_node_field += 1;
                let cpu_node = self
                    .cpu_node
                    .as_ref()
                    .map(|v| v.get(cpu as usize).copied().unwrap_or(-1));
                if ev.node != -1 {
                    t.node_requests += 1;
                    if let Some(n) = cpu_node {
                        if n >= 0 && n != ev.node {
                            t.cross_node_allocs += 1;
                        }
                    }
                    // perf: node != NUMA_NO_NODE && node != cpu__get_node(cpu),
                    // where an unknown CPU node is -1.
                    if cpu_node.unwrap_or(-1) != ev.node {
                        t.perf_cross_allocs += 1;
                    }
                }
            }
            let s = &mut self.sites[site as usize];
            s.agg.alloc(ev.bytes_req, ev.bytes_alloc);
            s.kinds |= if ev.kind == Kind::Kmalloc { 1 } else { 2 };
            if let Some(g) = s.gfp.iter_mut().find(|g| g.0 == ev.gfp) {
                g.1 += 1;
            } else if s.gfp.len() < MAX_GFP {
                s.gfp.push((ev.gfp, 1));
            } else {
                s.gfp_other += 1;
            }
            if ev.cache != NO_CACHE {
                s.cache = ev.cache;
            }
            if failed {
                s.agg.failed += 1;
                self.totals.agg.failed += 1;
            }
            if ev.bytes_alloc < ev.bytes_req {
                self.find(
                    Misuse::ReqExceedsAlloc,
                    ev,
                    site,
                    NO_SITE,
                    None,
                    ev.cache,
                    false,
                );
            }
            if let Some(p) = &mut self.ptrs {
                if !failed {
                    let a = p.entry(ev.ptr).or_default();
                    a.hits += 1;
                    a.bytes_req = a.bytes_req.saturating_add(ev.bytes_req);
                    a.bytes_alloc = a.bytes_alloc.saturating_add(ev.bytes_alloc);
                    a.site = site;
                    a.live = true;
                }
            }
        }
        if failed {
            if sel {
                self.find(
                    Misuse::FailedAlloc,
                    ev,
                    site,
                    NO_SITE,
                    None,
                    ev.cache,
                    false,
                );
            }
            return;
        }
        if ev.ptr <= ZERO_SIZE_PTR {
            return;
        }
        let b = sat32(ev.bytes_alloc);
        let new = Obj {
            ts: ev.ts,
            bytes_alloc: b,
            bytes_req: sat32(ev.bytes_req),
            site,
            cache: ev.cache,
            alloc_cpu: ev.cpu,
            kind: ev.kind,
            state: State::new(true, sel),
            gen: 0,
        };
        let b = u64::from(b);
        let old = match self.objs.entry(ev.ptr) {
            Entry::Occupied(mut o) => Some(std::mem::replace(o.get_mut(), new)),
            Entry::Vacant(v) => {
                v.insert(new);
                None
            }
        };
        if let Some(old) = old {
            if old.state.live() {
                // The trace never showed this object's free.
                if old.state.selected() || sel {
                    let unc = windows.touches(old.ts, ev.ts);
                    self.find(
                        Misuse::LivePointerReturned,
                        ev,
                        old.site,
                        NO_SITE,
                        Some((old.ts, u32::from(old.alloc_cpu))),
                        old.cache,
                        unc,
                    );
                }
                if old.state.selected() {
                    self.drop_live(&old);
                    self.sites[old.site as usize].missed_frees += 1;
                }
            }
        }
        if sel {
            self.totals.agg.live_add(b);
            self.sites[site as usize].agg.live_add(b);
            match ev.kind {
                Kind::Kmalloc => {
                    let c = self.classes.get(b);
                    c.alloc(ev.bytes_req, ev.bytes_alloc);
                    c.live_add(b);
                }
                _ if ev.cache != NO_CACHE => {
                    let c = self.cache(ev.cache);
                    c.alloc(ev.bytes_req, ev.bytes_alloc);
                    c.live_add(b);
                }
                // A kmem_cache_alloc without a name (kernels before 6.2):
                // the cache is learned from its kmem_cache_free.
                _ => {}
            }
        }
    }

    /// Takes a selected live object out of the live counts (without
    /// counting a free).
    fn drop_live(&mut self, o: &Obj) {
        let b = u64::from(o.bytes_alloc);
        self.totals.agg.live_sub(b);
        self.sites[o.site as usize].agg.live_sub(b);
        match o.kind {
            Kind::Kmalloc => {
                self.classes.get(b).live_sub(b);
            }
            _ if o.cache != NO_CACHE => self.cache(o.cache).live_sub(b),
            _ => {}
        }
    }

    fn free(&mut self, ev: &Ev, windows: &Windows) {
        let cpu = u32::from(ev.cpu);
        let fsite = self.site(ev.site);
        let fsel = self.filter.cpu_pid(cpu, ev.pid) && self.sites[fsite as usize].selected;
        if fsel {
            self.totals.free_events += 1;
            let s = &mut self.sites[fsite as usize];
            s.free_calls += 1;
            s.kinds |= if ev.kind == Kind::Kfree { 4 } else { 8 };
        }
        if ev.ptr <= ZERO_SIZE_PTR {
            if fsel {
                self.totals.null_frees += 1;
            }
            return;
        }
        let gen = self.gen;
        let prior = match self.objs.get_mut(&ev.ptr) {
            Some(o) => {
                let p = *o;
                o.ts = ev.ts;
                o.gen = gen;
                if p.state.live() {
                    // Remembered as freed, by the freeing CPU.
                    o.alloc_cpu = ev.cpu;
                    o.state = State::new(false, p.state.selected());
                }
                Some(p)
            }
            None => None,
        };
        self.note_free();
        let o0 = match prior {
            Some(o) if o.state.live() => o,
            Some(f0) => {
                if f0.state.selected() || fsel {
                    let unc = windows.touches(f0.ts, ev.ts);
                    self.find(
                        Misuse::DoubleFree,
                        ev,
                        f0.site,
                        fsite,
                        Some((f0.ts, u32::from(f0.alloc_cpu))),
                        f0.cache,
                        unc,
                    );
                }
                return;
            }
            None => {
                if fsel {
                    self.find(
                        Misuse::FreeOfUnseen,
                        ev,
                        NO_SITE,
                        fsite,
                        None,
                        NO_CACHE,
                        false,
                    );
                }
                self.objs.insert(
                    ev.ptr,
                    Obj {
                        ts: ev.ts,
                        bytes_alloc: 0,
                        bytes_req: 0,
                        site: NO_SITE,
                        cache: ev.cache,
                        alloc_cpu: ev.cpu,
                        kind: if ev.kind == Kind::Kfree {
                            Kind::Kmalloc
                        } else {
                            Kind::CacheAlloc
                        },
                        state: State::new(false, fsel),
                        gen,
                    },
                );
                return;
            }
        };
        let report = o0.state.selected() || fsel;
        let earlier = Some((o0.ts, u32::from(o0.alloc_cpu)));
        match (o0.kind, ev.kind) {
            (Kind::Kmalloc, Kind::CacheFree) if report => {
                let unc = windows.touches(o0.ts, ev.ts);
                self.find(
                    Misuse::KmallocFreedByCacheFree,
                    ev,
                    o0.site,
                    fsite,
                    earlier,
                    o0.cache,
                    unc,
                );
            }
            (Kind::CacheAlloc, Kind::Kfree) if report => {
                let unc = windows.touches(o0.ts, ev.ts);
                self.find(
                    Misuse::CacheAllocFreedByKfree,
                    ev,
                    o0.site,
                    fsite,
                    earlier,
                    o0.cache,
                    unc,
                );
            }
            (Kind::CacheAlloc, Kind::CacheFree)
                if report
                    && o0.cache != NO_CACHE
                    && ev.cache != NO_CACHE
                    && o0.cache != ev.cache =>
            {
                let unc = windows.touches(o0.ts, ev.ts);
                self.find(
                    Misuse::CacheMismatch,
                    ev,
                    o0.site,
                    fsite,
                    earlier,
                    o0.cache,
                    unc,
                );
            }
            _ => {}
        }
        if !o0.state.selected() {
            return;
        }
        let cross = ev.cpu != o0.alloc_cpu;
        let b = u64::from(o0.bytes_alloc);
        let t = &mut self.totals;
        t.matched_frees += 1;
        t.agg.free(b, cross);
        t.agg.live_sub(b);
        let s = &mut self.sites[o0.site as usize].agg;
        s.free(b, cross);
        s.live_sub(b);
        self.matrix.add(u32::from(o0.alloc_cpu), cpu);
        if let Some(p) = &mut self.ptrs {
            if let Some(a) = p.get_mut(&ev.ptr) {
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
                    ev.cache
                } else {
                    NO_CACHE
                };
                let c = self.cache(id);
                c.alloc(u64::from(o0.bytes_req), b);
                c.free(b, cross);
            }
        }
    }

    /// Counts a free; at the end of a generation (`remember` frees, or a
    /// quarter of the tracked pointers if more), forgets the pointers freed
    /// in the generation before it.
    #[inline]
    fn note_free(&mut self) {
        self.frees_in_gen += 1;
        // A generation lasts at least a quarter of the tracked pointers, so
        // sweeping stays a few entries per free with millions live.
        if self.frees_in_gen >= self.remember.max(self.objs.len() / 4) {
            let keep = self.gen;
            self.objs.retain(|_, o| o.state.live() || o.gen == keep);
            self.gen = self.gen.wrapping_add(1);
            self.frees_in_gen = 0;
        }
    }

    /// Finishes: objects of unnamed caches still live go to the unknown
    /// cache; returns the leak groups (live objects by call site, at least
    /// `min_age` ns old at the end of the capture).
    pub fn finish(&mut self, windows: &Windows, min_age: u64) -> Vec<LeakGroup> {
        let end = self.last_ts;
        let mut groups: FastMap<u32, LeakGroup> = fast_map();
        let mut unknown = Agg::default();
        for (&ptr, o) in &self.objs {
            if !o.state.live() {
                continue;
            }
            if !o.state.selected() {
                continue;
            }
            let (b, req) = (u64::from(o.bytes_alloc), u64::from(o.bytes_req));
            if o.kind == Kind::CacheAlloc && o.cache == NO_CACHE {
                unknown.alloc(req, b);
                unknown.live_add(b);
            }
            let age = end.saturating_sub(o.ts);
            if age < min_age {
                continue;
            }
            let g = groups.entry(o.site).or_insert_with(|| LeakGroup {
                site: o.site,
                oldest_ts: u64::MAX,
                ..Default::default()
            });
            g.objects += 1;
            g.bytes = g.bytes.saturating_add(b);
            g.oldest_ts = g.oldest_ts.min(o.ts);
            g.newest_ts = g.newest_ts.max(o.ts);
            g.uncertain += u64::from(windows.after(o.ts));
            let ex = (ptr, o.ts, u32::from(o.alloc_cpu), b);
            if g.examples.len() < 5 {
                g.examples.push(ex);
                g.examples.sort_by_key(|e| (e.1, e.0));
            } else if (ex.1, ex.0) < (g.examples[4].1, g.examples[4].0) {
                g.examples[4] = ex;
                g.examples.sort_by_key(|e| (e.1, e.0));
            }
        }
        if unknown.hits > 0 {
            let c = self.cache(NO_CACHE);
            c.hits += unknown.hits;
            c.bytes_req += unknown.bytes_req;
            c.bytes_alloc += unknown.bytes_alloc;
            c.live_objs += unknown.live_objs;
            c.live_bytes += unknown.live_bytes;
            c.peak_live_bytes = c.peak_live_bytes.max(c.live_bytes);
        }
        let mut v: Vec<LeakGroup> = groups.into_values().collect();
        let sites = &self.sites;
        v.sort_by(|a, b| {
            b.bytes.cmp(&a.bytes).then(
                sites[a.site as usize]
                    .addr
                    .cmp(&sites[b.site as usize].addr),
            )
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bits() {
        let s = State::new(true, false);
        assert!(s.live() && !s.selected());
        let s = State::new(false, true);
        assert!(!s.live() && s.selected());
    }
}
