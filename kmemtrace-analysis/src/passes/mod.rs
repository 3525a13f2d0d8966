//! The analyses, each a pass over the ordered event stream: an event in, a
//! section of the model out (built in [`crate::build`]).
//!
//! Slab events are first resolved by the object tracker ([`objects`]):
//! what the pointer was before (live, freed, never seen). The slab passes
//! read that resolution instead of tracking objects of their own. A new
//! analysis is a new pass: a type implementing [`Pass`] and a field of
//! [`Passes`].
//!
//! Each shard runs its own [`Passes`] over the events of its buckets; the
//! shards' passes are then added up ([`Passes::absorb`]), and what is not
//! additive (peaks, judgements, first occurrences) comes from the combiner.

pub mod cross_cpu;
pub mod freed_frames;
pub mod leaks;
pub mod misuse;
pub mod objects;
pub mod page_misuse;
pub mod pages;
pub mod slab;
pub mod timeline;
pub mod untraced;

use crate::event::{Body, Event, Page};
use crate::stream::{OrderKey, Shard};
use objects::{Objects, SlabSeen};

/// One analysis over the stream. A shard's events come in the stream's
/// order.
pub trait Pass {
    fn slab(&mut self, _s: &SlabSeen<'_>) {}
    /// `key`: the event's place in the ordered stream (its time raised
    /// where the CPU's clock went backwards), as [`SlabSeen::key`].
    fn page(&mut self, _ev: &Event, _key: OrderKey, _p: &Page) {}
}

impl Pass for slab::SlabPass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        slab::SlabPass::slab(self, s)
    }
}

impl Pass for misuse::MisusePass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        misuse::MisusePass::slab(self, s)
    }
}

impl Pass for untraced::UntracedPass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        untraced::UntracedPass::slab(self, s)
    }
}

impl Pass for cross_cpu::CrossCpuPass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        cross_cpu::CrossCpuPass::slab(self, s)
    }
}

impl Pass for pages::PagesPass<'_> {
    #[inline]
    fn page(&mut self, ev: &Event, key: OrderKey, p: &Page) {
        pages::PagesPass::page(self, ev, key, p)
    }
}

/// Every pass, fed one event at a time.
pub struct Passes<'a> {
    pub objects: Objects<'a>,
    pub slab: slab::SlabPass,
    pub misuse: misuse::MisusePass,
    pub cross_cpu: cross_cpu::CrossCpuPass,
    pub untraced: untraced::UntracedPass,
    pub pages: pages::PagesPass<'a>,
    /// The first and last slab events' times.
    pub first_ts: Option<u64>,
    pub last_ts: u64,
}

/// What a shard hands the combiner at the end of an epoch.
pub struct EpochOut {
    pub deltas: Vec<slab::Delta>,
    pub pending: Vec<misuse::Pending>,
    /// The span of each slab event kind in the epoch.
    pub spans: untraced::Spans,
}

impl Passes<'_> {
    #[inline]
    pub fn event(&mut self, ev: &Event, key: OrderKey) {
        match &ev.body {
            Body::Slab(slab) => {
                self.first_ts = Some(self.first_ts.map_or(ev.ts, |t| t.min(ev.ts)));
                self.last_ts = self.last_ts.max(ev.ts);
                let seen = self.objects.resolve(ev, key, slab);
                Pass::slab(&mut self.slab, &seen);
                Pass::slab(&mut self.misuse, &seen);
                Pass::slab(&mut self.cross_cpu, &seen);
                Pass::slab(&mut self.untraced, &seen);
            }
            Body::Page(p) => Pass::page(&mut self.pages, ev, key, p),
        }
    }

    /// Adds another shard's passes (its objects stay with it).
    pub fn absorb(&mut self, o: &Passes<'_>) {
        self.slab.absorb(&o.slab);
        self.misuse.absorb(&o.misuse);
        self.cross_cpu.absorb(&o.cross_cpu);
        self.untraced.absorb(&o.untraced);
        self.pages.absorb(&o.pages);
        self.first_ts = match (self.first_ts, o.first_ts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ts = self.last_ts.max(o.last_ts);
    }
}

impl Shard for Passes<'_> {
    type Epoch = EpochOut;

    /// Warms the object tracker's slots of the coming slab events: the
    /// tracker's lookups are most of a shard's time, nearly all of it
    /// cache misses with many live objects.
    fn look_ahead(&mut self, next: &[(Event, OrderKey)]) {
        self.objects
            .warm(next.iter().filter_map(|(ev, _)| match &ev.body {
                Body::Slab(s) => Some(s.ptr),
                Body::Page(_) => None,
            }));
    }

    #[inline]
    fn event(&mut self, ev: &Event, key: OrderKey) {
        Passes::event(self, ev, key)
    }

    fn end_epoch(&mut self) -> EpochOut {
        EpochOut {
            deltas: std::mem::take(&mut self.slab.deltas),
            pending: std::mem::take(&mut self.misuse.pending),
            spans: self.untraced.end_epoch(),
        }
    }
}
