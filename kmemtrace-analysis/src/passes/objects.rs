//! The object tracker: every slab object followed by pointer from its
//! allocation to its free. It resolves each slab event against what the
//! pointer was before ([`Resolution`]), which the other passes read
//! instead of keeping objects of their own.
//!
//! Memory grows with the objects the kernel has (live ones, and freed
//! pointers remembered for double-free detection until they are reused or
//! forgotten), never with the length of the log.
//!
//! Pointers are kept in [`BUCKETS`] tables by the bucket of their hash,
//! each forgetting freed pointers on its own clock: a shard holds whole
//! buckets, so what is remembered does not depend on the shard count.

use crate::event::{bucket, Event, Kind, Slab, BUCKETS, NO_CACHE};
use crate::filter::Filter;
use crate::intern::SiteTable;
use crate::ptr_table::PtrTable;

/// `ZERO_SIZE_PTR`: pointers up to this are "no object" (`kfree(NULL)`,
/// `kfree(ZERO_SIZE_PTR)`).
pub const ZERO_SIZE_PTR: u64 = 16;
/// "No call site" in [`Obj`].
pub const NO_SITE: u32 = u32::MAX;

/// One tracked pointer: 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Obj {
    /// The allocation's time while live; the free's time once freed.
    pub ts: u64,
    /// Sizes, saturated to `u32::MAX` (no slab object comes near).
    pub bytes_alloc: u32,
    pub bytes_req: u32,
    /// Allocation call site ([`NO_SITE`] if the allocation was not seen).
    pub site: u32,
    pub cache: u32,
    /// The allocating CPU while live; the freeing CPU once freed.
    pub cpu: u16,
    /// The allocation's kind (for a free never seen allocated: the kind
    /// its free implies).
    pub kind: Kind,
    state: State,
    /// Freed objects: the generation of frees the free belongs to.
    gen: u32,
}

impl Obj {
    pub fn live(&self) -> bool {
        self.state.live()
    }
    /// The allocation (or, for a free of an unseen object, the free)
    /// passed the filters.
    pub fn selected(&self) -> bool {
        self.state.selected()
    }
    /// A freed pointer whose free had no traced allocation before it (a
    /// free of an unseen pointer, or a second free).
    pub fn freed_unallocated(&self) -> bool {
        self.state.unallocated()
    }
    /// A live object whose pointer, before this allocation, was freed
    /// twice: the allocator may hand it out again while it is live.
    pub fn after_double_free(&self) -> bool {
        self.state.0 & State::AFTER_DOUBLE_FREE != 0
    }
}

impl Default for Obj {
    /// An empty slot's filler in [`PtrTable`].
    fn default() -> Self {
        Obj {
            ts: 0,
            bytes_alloc: 0,
            bytes_req: 0,
            site: NO_SITE,
            cache: NO_CACHE,
            cpu: 0,
            kind: Kind::Kmalloc,
            state: State(0),
            gen: 0,
        }
    }
}

/// `state` values: live or freed, and whether the allocation passed the
/// filters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State(u8);

impl State {
    const LIVE: u8 = 1;
    const SELECTED: u8 = 2;
    /// Freed with no traced allocation before the free.
    const UNALLOCATED: u8 = 4;
    /// Freed twice (no allocation between).
    const FREED_TWICE: u8 = 8;
    /// Allocated while its pointer stood freed twice.
    const AFTER_DOUBLE_FREE: u8 = 16;
    fn new(live: bool, selected: bool) -> Self {
        State((u8::from(live) * Self::LIVE) | (u8::from(selected) * Self::SELECTED))
    }
    fn freed_unallocated(selected: bool) -> Self {
        State(Self::UNALLOCATED | (u8::from(selected) * Self::SELECTED))
    }
    fn unallocated(self) -> bool {
        self.0 & Self::UNALLOCATED != 0
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

/// What a slab event did to its pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// An allocation that returned NULL.
    FailedAlloc,
    /// An allocation of a pointer up to [`ZERO_SIZE_PTR`] (not tracked).
    ZeroAlloc,
    /// An allocation; `replaced` is the object the pointer still held (the
    /// trace never showed its free).
    Alloc { replaced: Option<Obj> },
    /// A free of a pointer up to [`ZERO_SIZE_PTR`].
    NullFree,
    /// A free of a live object: the object as it was allocated.
    Free { object: Obj },
    /// A free of a pointer already freed: the earlier free.
    FreeOfFreed { earlier: Obj },
    /// A free of a pointer never seen allocated.
    FreeOfUnseen,
}

/// A slab event as the passes see it: the event, its fields, whether it
/// passes the filters, and what it did to its pointer.
pub struct SlabSeen<'a> {
    pub ev: &'a Event,
    /// The event's place in the one ordered stream.
    pub key: crate::stream::OrderKey,
    pub slab: &'a Slab,
    /// The event passes the CPU, pid, comm and call-site filters.
    pub selected: bool,
    pub res: Resolution,
}

impl SlabSeen<'_> {
    #[inline]
    pub fn cpu(&self) -> u32 {
        u32::from(self.ev.cpu)
    }
}

/// One bucket's pointers: live objects, and recently freed pointers (for
/// double-free detection). Freed ones are forgotten a generation of
/// `remember` frees of the bucket after their free (a generation lasts at
/// least a quarter of the bucket's tracked pointers).
#[derive(Default)]
struct Table {
    objs: PtrTable<Obj>,
    gen: u32,
    frees_in_gen: usize,
}

/// The tracker.
pub struct Objects<'a> {
    filter: &'a Filter,
    /// Names a call site for the `--callsite` filter.
    namer: Box<dyn Fn(u64) -> String + Send + 'a>,
    site_table: &'a SiteTable,
    /// By site id ([`SiteTable`]): the `--callsite` filter selects it.
    selected_sites: Vec<bool>,
    /// By bucket (only the buckets of this tracker's shard fill).
    tables: Vec<Table>,
    /// Frees per generation and bucket.
    remember: usize,
}

impl<'a> Objects<'a> {
    /// `remember_frees`: freed pointers remembered per generation, over all
    /// buckets.
    pub fn new(
        filter: &'a Filter,
        remember_frees: usize,
        site_table: &'a SiteTable,
        namer: Box<dyn Fn(u64) -> String + Send + 'a>,
    ) -> Self {
        Objects {
            filter,
            namer,
            site_table,
            selected_sites: Vec::new(),
            tables: (0..BUCKETS).map(|_| Table::default()).collect(),
            remember: remember_frees.div_ceil(BUCKETS).max(1),
        }
    }

    /// Tracked pointers (live and remembered freed ones).
    pub fn tracked(&self) -> usize {
        self.tables.iter().map(|t| t.objs.len()).sum()
    }

    /// Live objects whose allocation passed the filters: (pointer, object).
    pub fn live_selected(&self) -> impl Iterator<Item = (u64, &Obj)> {
        self.tables
            .iter()
            .flat_map(|t| t.objs.iter())
            .filter(|(_, o)| o.live() && o.selected())
    }

    /// Whether the `--callsite` filter selects site `id`.
    #[inline]
    fn site_selected(&mut self, id: u32) -> bool {
        if id as usize >= self.selected_sites.len() {
            self.grow_sites();
        }
        self.selected_sites[id as usize]
    }

    /// Adds the sites the decoders have named since the last time.
    #[cold]
    fn grow_sites(&mut self) {
        for addr in self.site_table.addrs_from(self.selected_sites.len()) {
            let selected = self.filter.callsite.is_none() || {
                let n = (self.namer)(addr);
                self.filter.callsite_matches(&n)
            };
            self.selected_sites.push(selected);
        }
    }

    /// Touches the places of the objects of `ptrs`, the pointers of the
    /// next slab events, ahead of [`Objects::resolve`]: their cache misses
    /// overlap instead of coming one after another.
    #[inline]
    pub fn warm(&self, ptrs: impl Iterator<Item = u64>) {
        for ptr in ptrs.filter(|&p| p > ZERO_SIZE_PTR) {
            self.tables[bucket(ptr)].objs.prefetch(ptr);
        }
    }

    /// Resolves one slab event (in time order) and updates the pointer.
    #[inline]
    pub fn resolve<'e>(
        &mut self,
        ev: &'e Event,
        key: crate::stream::OrderKey,
        slab: &'e Slab,
    ) -> SlabSeen<'e> {
        let selected = self.filter.selects(ev) && self.site_selected(slab.site);
        let res = if ev.kind.is_alloc() {
            self.alloc(ev, slab, selected)
        } else {
            self.free(ev, slab, selected)
        };
        SlabSeen {
            ev,
            key,
            slab,
            selected,
            res,
        }
    }

    fn alloc(&mut self, ev: &Event, s: &Slab, sel: bool) -> Resolution {
        if s.ptr == 0 {
            return Resolution::FailedAlloc;
        }
        if s.ptr <= ZERO_SIZE_PTR {
            return Resolution::ZeroAlloc;
        }
        let new = Obj {
            ts: ev.ts,
            bytes_alloc: sat32(s.bytes_alloc),
            bytes_req: sat32(s.bytes_req),
            site: s.site,
            cache: s.cache,
            cpu: ev.cpu,
            kind: ev.kind,
            state: State::new(true, sel),
            gen: 0,
        };
        let objs = &mut self.tables[bucket(s.ptr)].objs;
        let replaced = match objs.get_mut(s.ptr) {
            Some(o) => {
                let mut new = new;
                if !o.live() && o.state.0 & State::FREED_TWICE != 0 {
                    new.state.0 |= State::AFTER_DOUBLE_FREE;
                }
                Some(std::mem::replace(o, new))
            }
            None => {
                objs.insert_absent(s.ptr, new);
                None
            }
        };
        Resolution::Alloc {
            replaced: replaced.filter(Obj::live),
        }
    }

    fn free(&mut self, ev: &Event, s: &Slab, fsel: bool) -> Resolution {
        if s.ptr <= ZERO_SIZE_PTR {
            return Resolution::NullFree;
        }
        let remember = self.remember;
        let table = &mut self.tables[bucket(s.ptr)];
        let gen = table.gen;
        let prior = match table.objs.get_mut(s.ptr) {
            Some(o) => {
                let p = *o;
                o.ts = ev.ts;
                o.gen = gen;
                if p.live() {
                    // Remembered as freed, by the freeing CPU.
                    o.cpu = ev.cpu;
                    o.state = State::new(false, p.selected());
                } else {
                    o.state = State::freed_unallocated(p.selected());
                    o.state.0 |= State::FREED_TWICE;
                }
                Some(p)
            }
            None => None,
        };
        table.note_free(remember);
        match prior {
            Some(o) if o.live() => Resolution::Free { object: o },
            Some(earlier) => Resolution::FreeOfFreed { earlier },
            None => {
                table.objs.insert_absent(
                    s.ptr,
                    Obj {
                        ts: ev.ts,
                        bytes_alloc: 0,
                        bytes_req: 0,
                        site: NO_SITE,
                        cache: s.cache,
                        cpu: ev.cpu,
                        kind: if ev.kind == Kind::Kfree {
                            Kind::Kmalloc
                        } else {
                            Kind::CacheAlloc
                        },
                        state: State::freed_unallocated(fsel),
                        gen,
                    },
                );
                Resolution::FreeOfUnseen
            }
        }
    }
}

impl Table {
    /// Counts a free; at the end of a generation (`remember` frees, or a
    /// quarter of the tracked pointers if more), forgets the pointers freed
    /// in the generation before it.
    #[inline]
    fn note_free(&mut self, remember: usize) {
        self.frees_in_gen += 1;
        // A generation lasts at least a quarter of the tracked pointers, so
        // sweeping stays a few entries per free with millions live.
        if self.frees_in_gen >= remember.max(self.objs.len() / 4) {
            let keep = self.gen;
            self.objs.retain(|_, o| o.live() || o.gen == keep);
            self.gen = self.gen.wrapping_add(1);
            self.frees_in_gen = 0;
        }
    }
}

/// An unnamed cache: `kmem_cache_alloc` without a `name` field (kernels
/// before 6.2) until its free names it.
pub fn unnamed_cache(o: &Obj) -> bool {
    o.kind == Kind::CacheAlloc && o.cache == NO_CACHE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bits() {
        let s = State::new(true, false);
        assert!(s.live() && !s.selected());
        let s = State::new(false, true);
        assert!(!s.live() && s.selected() && !s.unallocated());
        let s = State::freed_unallocated(false);
        assert!(!s.live() && !s.selected() && s.unallocated());
    }
}
