//! Trace completeness: what the capture itself shows of allocations and
//! frees the kernel did not trace. The bulk APIs (`kmem_cache_alloc_bulk`,
//! `kmem_cache_free_bulk`, `kfree_bulk` under `kfree_rcu`), slab sheaves
//! (6.18) and tasks whose events a recording left out move objects without
//! per-object tracepoints; their marks on the trace are frees of objects
//! never seen allocated, pointers freed again with no allocation between,
//! and allocations returning pointers still live. Counted per [`Group`]
//! (cache or kmalloc size) and per call site over every event of the time
//! window, whatever the other filters: they say what the trace is, not
//! what was selected. The misuse judgement
//! (`build::misuse`) reads them to tell the kernel's misuse from
//! the trace's gaps.

use super::objects::{Obj, Resolution, SlabSeen, NO_SITE};
use crate::event::{Kind, Slab, NO_CACHE};
use crate::intern::FastMap;

/// Where an object's traffic is counted: its cache, or for kmalloc its size
/// (`bytes_alloc`, its kmalloc cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// A named kmem_cache (interned name).
    Cache(u32),
    /// A kmalloc object of this `bytes_alloc`.
    Kmalloc(u32),
    /// A kfree()d object never seen allocated: its size is unknown.
    KmallocUnknownSize,
    /// A kmem_cache object on a kernel whose events name no cache.
    UnnamedCache,
    /// Not about an object's traffic (failed allocations, sizes).
    #[default]
    None,
}

impl Group {
    /// The group of a traced object (as allocated, or as a free of an
    /// unseen object left it); `cache` names the cache where the object
    /// does not (`kmem_cache_alloc` without a name before 6.2).
    pub fn of(o: &Obj, cache: u32) -> Group {
        match o.kind {
            Kind::Kmalloc if o.bytes_alloc > 0 => Group::Kmalloc(o.bytes_alloc),
            Kind::Kmalloc => Group::KmallocUnknownSize,
            _ if o.cache != NO_CACHE => Group::Cache(o.cache),
            _ if cache != NO_CACHE => Group::Cache(cache),
            _ => Group::UnnamedCache,
        }
    }

    /// The group of a free of a pointer never seen allocated.
    pub fn of_unseen_free(kind: Kind, slab: &Slab) -> Group {
        match kind {
            Kind::Kfree => Group::KmallocUnknownSize,
            _ if slab.cache != NO_CACHE => Group::Cache(slab.cache),
            _ => Group::UnnamedCache,
        }
    }

    /// Whether frees of this group name no size or cache (kfree): their
    /// evidence is counted per call site instead.
    pub fn is_kmalloc(self) -> bool {
        matches!(self, Group::Kmalloc(_) | Group::KmallocUnknownSize)
    }
}

/// Pointers seen: none, one, or more than one (enough to tell "this
/// object" from "this cache").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pointers {
    #[default]
    None,
    One(u64),
    Many,
}

impl Pointers {
    fn add(&mut self, p: u64) {
        *self = match *self {
            Pointers::None => Pointers::One(p),
            Pointers::One(q) if q == p => Pointers::One(p),
            _ => Pointers::Many,
        }
    }
    fn absorb(&mut self, o: Pointers) {
        match o {
            Pointers::None => {}
            Pointers::One(p) => self.add(p),
            Pointers::Many => *self = Pointers::Many,
        }
    }
}

/// The marks of untraced traffic in one group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Frees of pointers never seen allocated (allocated before the
    /// capture, or by an untraced path).
    pub unseen_frees: u64,
    /// Frees of pointers already freed, no traced allocation between.
    pub freed_again: u64,
    /// ... of which the earlier free had no traced allocation either: the
    /// pointer went round an untraced allocation at least twice.
    pub freed_again_twice: u64,
    pub freed_again_twice_pointers: Pointers,
    /// Allocations returning a pointer the trace still had live.
    pub live_returned: u64,
    pub live_returned_pointers: Pointers,
}

impl Traffic {
    fn absorb(&mut self, o: &Traffic) {
        self.unseen_frees += o.unseen_frees;
        self.freed_again += o.freed_again;
        self.freed_again_twice += o.freed_again_twice;
        self.freed_again_twice_pointers
            .absorb(o.freed_again_twice_pointers);
        self.live_returned += o.live_returned;
        self.live_returned_pointers.absorb(o.live_returned_pointers);
    }
    /// Untraced allocations shown: pointers going round an untraced
    /// allocation again and again, on more than one object (a triple free
    /// of one object is not evidence of a path).
    pub fn untraced_allocs(&self) -> bool {
        self.freed_again_twice_pointers == Pointers::Many
    }
    /// Untraced frees shown on more than one object.
    pub fn untraced_frees(&self) -> bool {
        self.live_returned_pointers == Pointers::Many
    }
}

/// The first and last traced event of each slab kind: outside that span an
/// event of the kind could not be traced (the recorder turns events on and
/// off one after another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spans {
    /// By [`Kind`] (the four slab kinds): (first, last).
    pub by_kind: [Option<(u64, u64)>; 4],
}

impl Spans {
    #[inline]
    pub fn add(&mut self, kind: Kind, ts: u64) {
        if let Some(s) = self.by_kind.get_mut(kind as usize) {
            *s = Some(s.map_or((ts, ts), |(a, b)| (a.min(ts), b.max(ts))));
        }
    }
    pub fn absorb(&mut self, o: &Spans) {
        for (k, s) in o.by_kind.iter().enumerate() {
            if let Some((a, b)) = *s {
                let m = &mut self.by_kind[k];
                *m = Some(m.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
            }
        }
    }
    pub fn of(&self, kind: Kind) -> Option<(u64, u64)> {
        self.by_kind.get(kind as usize).copied().flatten()
    }
}

/// What a call site shows (by site id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteTraffic {
    /// Frees here of objects whose allocation the trace showed.
    pub matched_frees_here: u64,
    /// Frees here with no traced allocation of the object before them
    /// (frees of unseen objects, double frees).
    pub unallocated_frees_here: u64,
    /// Frees anywhere of objects allocated here.
    pub matched_frees_of_its_objects: u64,
    /// Frees here of pointers never seen allocated.
    pub unseen_frees_here: u64,
}

impl SiteTraffic {
    fn absorb(&mut self, o: &SiteTraffic) {
        self.matched_frees_here += o.matched_frees_here;
        self.unallocated_frees_here += o.unallocated_frees_here;
        self.matched_frees_of_its_objects += o.matched_frees_of_its_objects;
        self.unseen_frees_here += o.unseen_frees_here;
    }
}

/// The pass.
#[derive(Default)]
pub struct UntracedPass {
    pub groups: FastMap<Group, Traffic>,
    /// By call-site id.
    pub sites: Vec<SiteTraffic>,
    /// The spans of the current epoch (the combiner's judge folds them).
    pub epoch_spans: Spans,
}

impl UntracedPass {
    pub fn absorb(&mut self, o: &UntracedPass) {
        for (g, t) in &o.groups {
            self.groups.entry(*g).or_default().absorb(t);
        }
        if self.sites.len() < o.sites.len() {
            self.sites.resize(o.sites.len(), SiteTraffic::default());
        }
        for (a, b) in self.sites.iter_mut().zip(&o.sites) {
            a.absorb(b);
        }
    }

    /// A call site's traffic.
    pub fn site(&self, id: u32) -> SiteTraffic {
        self.sites.get(id as usize).copied().unwrap_or_default()
    }

    #[inline]
    fn site_mut(&mut self, id: u32) -> Option<&mut SiteTraffic> {
        if id == NO_SITE {
            return None;
        }
        let i = id as usize;
        if self.sites.len() <= i {
            self.sites.resize(i + 1, SiteTraffic::default());
        }
        Some(&mut self.sites[i])
    }

    #[inline]
    pub fn slab(&mut self, s: &SlabSeen<'_>) {
        let (ev, slab) = (s.ev, s.slab);
        self.epoch_spans.add(ev.kind, ev.ts);
        match s.res {
            Resolution::FreeOfUnseen => {
                let g = Group::of_unseen_free(ev.kind, slab);
                self.groups.entry(g).or_default().unseen_frees += 1;
                if let Some(t) = self.site_mut(slab.site) {
                    t.unseen_frees_here += 1;
                    t.unallocated_frees_here += 1;
                }
            }
            Resolution::Free { object } => {
                if let Some(t) = self.site_mut(slab.site) {
                    t.matched_frees_here += 1;
                }
                if let Some(t) = self.site_mut(object.site) {
                    t.matched_frees_of_its_objects += 1;
                }
            }
            Resolution::FreeOfFreed { earlier } => {
                let t = self
                    .groups
                    .entry(Group::of(&earlier, slab.cache))
                    .or_default();
                t.freed_again += 1;
                if earlier.freed_unallocated() {
                    t.freed_again_twice += 1;
                    t.freed_again_twice_pointers.add(slab.ptr);
                }
                if let Some(s) = self.site_mut(slab.site) {
                    s.unallocated_frees_here += 1;
                }
            }
            Resolution::Alloc {
                replaced: Some(old),
            } => {
                let t = self.groups.entry(Group::of(&old, slab.cache)).or_default();
                t.live_returned += 1;
                t.live_returned_pointers.add(slab.ptr);
            }
            _ => {}
        }
    }

    /// Ends an epoch: its spans.
    pub fn end_epoch(&mut self) -> Spans {
        std::mem::take(&mut self.epoch_spans)
    }
}

impl<'a> super::Pass<'a> for UntracedPass {
    const CONSUMES: super::Consumes = super::Consumes::Slab;
    const SHARD: crate::event::ShardKey = crate::event::ShardKey::Pointer;

    fn new(_: &super::PassSetup<'a>) -> Self {
        UntracedPass::default()
    }

    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        UntracedPass::slab(self, s)
    }

    fn absorb(&mut self, o: &mut Self) {
        UntracedPass::absorb(self, o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_tell_one_from_many() {
        let mut p = Pointers::default();
        p.add(1);
        p.add(1);
        assert_eq!(p, Pointers::One(1));
        let mut q = Pointers::One(2);
        q.absorb(p);
        assert_eq!(q, Pointers::Many);
        let mut r = Pointers::None;
        r.absorb(Pointers::One(1));
        r.absorb(Pointers::One(1));
        assert_eq!(r, Pointers::One(1));
    }

    #[test]
    fn spans_cover_first_to_last() {
        let mut s = Spans::default();
        s.add(Kind::Kfree, 5);
        s.add(Kind::Kfree, 2);
        s.add(Kind::PageAlloc, 1);
        let mut t = Spans::default();
        t.add(Kind::Kfree, 9);
        t.absorb(&s);
        assert_eq!(t.of(Kind::Kfree), Some((2, 9)));
        assert_eq!(t.of(Kind::Kmalloc), None);
    }
}
