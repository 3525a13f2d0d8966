//! Allocator misuse: double frees, frees through the wrong API or cache,
//! pointers returned while still live, failed allocations, frees of objects
//! never seen allocated. Each occurrence is judged by the combiner
//! ([`crate::judge`]), in the one order of the stream, once every loss
//! window that could matter is known.

use super::objects::{Obj, Resolution, SlabSeen, NO_SITE};
use super::untraced::Group;
use crate::event::{Kind, NO_CACHE};
use crate::intern::FastMap;
use crate::stream::OrderKey;

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
    /// Where the object's traffic is counted (for the kinds that untraced
    /// traffic can explain), else [`Group::None`].
    pub group: Group,
    /// The event was recorded in interrupt context.
    pub in_interrupt: bool,
    /// A live pointer returned whose object was allocated while its
    /// pointer stood freed twice.
    pub after_double_free: bool,
}

/// All occurrences of one misuse kind.
#[derive(Clone, Debug, Default)]
pub struct FindingAgg {
    pub count: u64,
    /// Allocation / free call sites with counts.
    pub alloc_sites: FastMap<u32, u64>,
    pub free_sites: FastMap<u32, u64>,
    /// (alloc cache, free cache) pairs, for cache mismatches.
    pub cache_pairs: FastMap<(u32, u32), u64>,
}

/// An occurrence waiting for its judgement.
#[derive(Clone, Debug)]
pub struct Pending {
    pub key: OrderKey,
    pub kind: Misuse,
    /// Uncertain if events were lost between its `earlier_ts` (the object's
    /// allocation, or the earlier free) and itself; never without one.
    pub occurrence: Occurrence,
}

/// The misuse detector: one [`FindingAgg`] per [`Misuse`] kind.
pub struct MisusePass {
    pub findings: Vec<FindingAgg>,
    /// Occurrences of the current epoch, in order.
    pub pending: Vec<Pending>,
}

impl Default for MisusePass {
    fn default() -> Self {
        MisusePass {
            findings: vec![FindingAgg::default(); Misuse::ALL.len()],
            pending: Vec::new(),
        }
    }
}

/// Where an occurrence's object came from: its allocation (or earlier
/// free) site, time, CPU and cache.
struct Earlier {
    site: u32,
    at: Option<(u64, u32)>,
    cache: u32,
    group: Group,
    after_double_free: bool,
}

impl Earlier {
    fn none() -> Self {
        Earlier {
            site: NO_SITE,
            at: None,
            cache: NO_CACHE,
            group: Group::None,
            after_double_free: false,
        }
    }
    fn of(o: &Obj) -> Self {
        Earlier {
            site: o.site,
            at: Some((o.ts, u32::from(o.cpu))),
            cache: o.cache,
            group: Group::None,
            after_double_free: o.live() && o.after_double_free(),
        }
    }
    /// The object's traffic group, for the kinds untraced traffic explains.
    fn in_group(self, group: Group) -> Self {
        Earlier { group, ..self }
    }
}

impl MisusePass {
    /// Adds another shard's counts (the judgements are the combiner's).
    pub fn absorb(&mut self, o: &MisusePass) {
        for (f, g) in self.findings.iter_mut().zip(&o.findings) {
            f.count += g.count;
            for (&k, &n) in &g.alloc_sites {
                *f.alloc_sites.entry(k).or_insert(0) += n;
            }
            for (&k, &n) in &g.free_sites {
                *f.free_sites.entry(k).or_insert(0) += n;
            }
            for (&k, &n) in &g.cache_pairs {
                *f.cache_pairs.entry(k).or_insert(0) += n;
            }
        }
    }

    /// One slab event, in order.
    #[inline]
    pub fn slab(&mut self, s: &SlabSeen<'_>) {
        let (ev, slab) = (s.ev, s.slab);
        match s.res {
            Resolution::FailedAlloc | Resolution::ZeroAlloc | Resolution::Alloc { .. } => {
                let own = || Earlier {
                    site: slab.site,
                    at: None,
                    cache: slab.cache,
                    group: Group::None,
                    after_double_free: false,
                };
                if s.selected && slab.bytes_alloc < slab.bytes_req {
                    self.find(Misuse::ReqExceedsAlloc, s, own());
                }
                if s.selected && s.res == Resolution::FailedAlloc {
                    self.find(Misuse::FailedAlloc, s, own());
                }
                if let Resolution::Alloc {
                    replaced: Some(old),
                } = s.res
                {
                    if old.selected() || s.selected {
                        let g = Group::of(&old, slab.cache);
                        self.find(
                            Misuse::LivePointerReturned,
                            s,
                            Earlier::of(&old).in_group(g),
                        );
                    }
                }
            }
            Resolution::NullFree => {}
            Resolution::FreeOfFreed { earlier } => {
                if earlier.selected() || s.selected {
                    let g = Group::of(&earlier, slab.cache);
                    self.find(Misuse::DoubleFree, s, Earlier::of(&earlier).in_group(g));
                }
            }
            Resolution::FreeOfUnseen => {
                if s.selected {
                    let g = Group::of_unseen_free(ev.kind, slab);
                    self.find(Misuse::FreeOfUnseen, s, Earlier::none().in_group(g));
                }
            }
            Resolution::Free { object: o0 } => {
                if !(o0.selected() || s.selected) {
                    return;
                }
                let m = match (o0.kind, ev.kind) {
                    (Kind::Kmalloc, Kind::CacheFree) => Misuse::KmallocFreedByCacheFree,
                    (Kind::CacheAlloc, Kind::Kfree) => Misuse::CacheAllocFreedByKfree,
                    (Kind::CacheAlloc, Kind::CacheFree)
                        if o0.cache != NO_CACHE
                            && slab.cache != NO_CACHE
                            && o0.cache != slab.cache =>
                    {
                        Misuse::CacheMismatch
                    }
                    _ => return,
                };
                // A cache mismatch is judged by the allocation's cache.
                let earlier = match m {
                    Misuse::CacheMismatch => Earlier::of(&o0).in_group(Group::of(&o0, slab.cache)),
                    _ => Earlier::of(&o0),
                };
                self.find(m, s, earlier);
            }
        }
    }

    fn find(&mut self, m: Misuse, s: &SlabSeen<'_>, earlier: Earlier) {
        let (ev, slab) = (s.ev, s.slab);
        let (alloc_site, free_site) = if ev.kind.is_alloc() {
            (earlier.site, NO_SITE)
        } else {
            (earlier.site, slab.site)
        };
        let f = &mut self.findings[m as usize];
        f.count += 1;
        if alloc_site != NO_SITE {
            *f.alloc_sites.entry(alloc_site).or_insert(0) += 1;
        }
        if free_site != NO_SITE {
            *f.free_sites.entry(free_site).or_insert(0) += 1;
        }
        if m == Misuse::CacheMismatch {
            *f.cache_pairs
                .entry((earlier.cache, slab.cache))
                .or_insert(0) += 1;
        }
        let occurrence = Occurrence {
            ts: ev.ts,
            cpu: u32::from(ev.cpu),
            pid: ev.pid,
            ptr: slab.ptr,
            alloc_site,
            free_site,
            earlier_ts: earlier.at.map(|e| e.0),
            earlier_cpu: earlier.at.map(|e| e.1),
            alloc_cache: earlier.cache,
            free_cache: if ev.kind.is_alloc() {
                NO_CACHE
            } else {
                slab.cache
            },
            bytes: ev
                .kind
                .is_alloc()
                .then_some((slab.bytes_req, slab.bytes_alloc)),
            uncertain: false,
            group: earlier.group,
            in_interrupt: ev.in_interrupt,
            after_double_free: earlier.after_double_free,
        };
        self.pending.push(Pending {
            key: s.key,
            kind: m,
            occurrence,
        });
    }
}

impl<'a> super::Pass<'a> for MisusePass {
    const CONSUMES: super::Consumes = super::Consumes::Slab;
    const SHARD: crate::event::ShardKey = crate::event::ShardKey::Pointer;

    fn new(_: &super::PassSetup<'a>) -> Self {
        MisusePass::default()
    }

    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        MisusePass::slab(self, s)
    }

    fn absorb(&mut self, o: &mut Self) {
        MisusePass::absorb(self, o)
    }
}
