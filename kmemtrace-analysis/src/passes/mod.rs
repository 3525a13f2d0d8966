//! The analyses, each a pass over the time-ordered event stream: an event
//! in, a section of the model out (built in [`crate::build`]).
//!
//! Slab events are first resolved by the object tracker ([`objects`]):
//! what the pointer was before (live, freed, never seen). The slab passes
//! read that resolution instead of tracking objects of their own. A new
//! analysis is a new pass: a type implementing [`Pass`] and a field of
//! [`Passes`].

pub mod cross_cpu;
pub mod leaks;
pub mod misuse;
pub mod objects;
pub mod page;
pub mod slab;

use crate::event::{Body, Event, Page};
use crate::stream::Windows;
use objects::{Objects, SlabSeen};

/// One analysis over the stream. Events come in time order (ties by CPU);
/// `windows` holds every lost window that starts before the event.
pub trait Pass {
    fn slab(&mut self, _s: &SlabSeen<'_>, _windows: &Windows) {}
    fn page(&mut self, _ev: &Event, _p: &Page) {}
}

impl Pass for slab::SlabPass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>, _: &Windows) {
        slab::SlabPass::slab(self, s)
    }
}

impl Pass for misuse::MisusePass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>, windows: &Windows) {
        misuse::MisusePass::slab(self, s, windows)
    }
}

impl Pass for cross_cpu::CrossCpuPass {
    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>, _: &Windows) {
        cross_cpu::CrossCpuPass::slab(self, s)
    }
}

impl Pass for page::PagePass<'_> {
    #[inline]
    fn page(&mut self, ev: &Event, p: &Page) {
        page::PagePass::page(self, ev, p)
    }
}

/// Every pass, fed one event at a time.
pub struct Passes<'a> {
    pub objects: Objects<'a>,
    pub slab: slab::SlabPass,
    pub misuse: misuse::MisusePass,
    pub cross_cpu: cross_cpu::CrossCpuPass,
    pub page: page::PagePass<'a>,
    /// The first and last slab events' times.
    pub first_ts: Option<u64>,
    pub last_ts: u64,
}

impl Passes<'_> {
    #[inline]
    pub fn event(&mut self, ev: &Event, windows: &Windows) {
        match &ev.body {
            Body::Slab(slab) => {
                self.first_ts.get_or_insert(ev.ts);
                self.last_ts = self.last_ts.max(ev.ts);
                let seen = self.objects.resolve(ev, slab);
                Pass::slab(&mut self.slab, &seen, windows);
                Pass::slab(&mut self.misuse, &seen, windows);
                Pass::slab(&mut self.cross_cpu, &seen, windows);
            }
            Body::Page(p) => Pass::page(&mut self.page, ev, p),
        }
    }

    /// After the last event: what depends on the objects left live.
    pub fn finish(&mut self) {
        self.slab
            .finish(self.objects.live_selected().map(|(_, o)| o));
    }
}
