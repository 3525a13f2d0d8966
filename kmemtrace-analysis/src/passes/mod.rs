//! The analyses, each a pass over the ordered event stream: an event in, a
//! section of the model out.
//!
//! Slab events are first resolved by the object tracker ([`objects`]):
//! what the pointer was before (live, freed, never seen). The slab passes
//! read that resolution instead of tracking objects of their own.
//!
//! A pass is one file: its state, its handler of the events it consumes
//! ([`Pass::CONSUMES`], placed in shards by [`Pass::SHARD`]), its merge
//! across shards ([`Pass::absorb`]) and, for a new pass, the code that makes
//! its section of the model ([`MakesSection`], as [`cross_cpu`] does). The
//! passes are listed once, in this module ([`crate::for_each_pass`]): the
//! [`Passes`] struct and its dispatch are generated from that list.
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
pub mod stalls;
pub mod timeline;
pub mod untraced;

// The list: every pass once (its module above, its line below). Everything
// that names every pass is generated from these lines: the [`Passes`]
// struct, its dispatch of each event, the adding up of shards, the
// tracepoints asked for, the model's [`crate::model::PassSections`] and
// the printers' dispatch over them. A pass's place in the list is the order
// it sees each event in.

/// Invokes `$m! { 'a; field: Type, ... }` with every pass: `field` is its
/// name in [`Passes`], `Type` implements [`Pass`]; `'a` is
/// the lifetime of what the passes borrow ([`PassSetup`]). Other
/// crates may generate their own per-pass code from it.
#[macro_export]
macro_rules! for_each_pass {
    ($m:ident) => {
        $m! {
            'a;
            slab: $crate::passes::slab::SlabPass,
            misuse: $crate::passes::misuse::MisusePass,
            cross_cpu: $crate::passes::cross_cpu::CrossCpuPass,
            untraced: $crate::passes::untraced::UntracedPass,
            pages: $crate::passes::pages::PagesPass<'a>,
            stalls: $crate::passes::stalls::StallsPass,
        }
    };
}

/// Invokes `$m! { field: Pass => Section, ... }` with every pass that
/// makes its own section of the model ([`MakesSection`]), in list
/// order: `field` is its name in [`Passes`] and in
/// [`crate::model::PassSections`] (the report's JSON key), `Section` the
/// type it makes. The model's [`crate::model::PassSections`], the building
/// of it, and the printers' dispatch over it are generated from this list.
#[macro_export]
macro_rules! for_each_pass_section {
    ($m:ident) => {
        $m! {
            cross_cpu: $crate::passes::cross_cpu::CrossCpuPass => $crate::model::CrossCpu,
            stalls: $crate::passes::stalls::StallsPass => $crate::model::Stalls,
        }
    };
}

use crate::event::{Body, Event, Page, ShardKey, Tracepoint};
use crate::run::Options;
use crate::stream::tracepoints::Request;
use crate::stream::{OrderKey, Shard};
use kmemtrace_import::log::Log;
use objects::{Objects, SlabSeen};

/// Which events a pass consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumes {
    /// Slab events, resolved by the object tracker ([`Pass::slab`]); their
    /// shard key is the pointer.
    Slab,
    /// Page-allocator events ([`Pass::page`]); their shard key is the page
    /// frame (its group).
    Page,
    /// The tracepoints of [`Pass::TRACEPOINTS`] ([`Pass::tracepoint`]),
    /// each request placed by the pass's [`Pass::SHARD`].
    Tracepoints,
}

/// What a pass is made from.
pub struct PassSetup<'a> {
    pub log: &'a Log,
    pub opts: &'a Options,
    /// The recorded kernel's page size.
    pub page_size: u64,
    /// More than one shard: what is not additive goes to the combiner.
    pub sharded: bool,
}

/// One analysis over the stream. A shard's events come in the stream's
/// order; a pass is handed only the kind it [consumes](Pass::CONSUMES).
pub trait Pass<'a>: Sized {
    /// The events it consumes.
    const CONSUMES: Consumes;
    /// What places its events in shards: it sees all the events of one
    /// key in one shard. Slab passes say [`ShardKey::Pointer`], page
    /// passes [`ShardKey::Pfn`] (checked when the list is compiled).
    const SHARD: ShardKey;
    /// The other tracepoints it reads, with [`Consumes::Tracepoints`];
    /// each request's shard key is [`Pass::SHARD`].
    const TRACEPOINTS: &'static [Request] = &[];

    fn new(setup: &PassSetup<'a>) -> Self;
    fn slab(&mut self, _s: &SlabSeen<'_>) {}
    /// `key`: the event's place in the ordered stream (its time raised
    /// where the CPU's clock went backwards), as [`SlabSeen::key`].
    fn page(&mut self, _ev: &Event, _key: OrderKey, _p: &Page) {}
    /// An event of `Self::TRACEPOINTS[which]`.
    fn tracepoint(&mut self, _ev: &Event, _key: OrderKey, _which: usize, _tp: &Tracepoint) {}
    /// Adds another shard's pass, which is dropped after: what it holds
    /// may be moved out rather than copied.
    fn absorb(&mut self, other: &mut Self);
}

/// A pass that makes its own section of the model: a field of
/// [`crate::model::PassSections`] named as the pass is in the list
/// ([`crate::for_each_pass_section`]), built once the shards are added up.
pub trait MakesSection<'a>: Pass<'a> {
    /// The section: its JSON is the report's key of the pass's name.
    type Section;
    fn section(&self, ctx: &SectionContext<'_>) -> Self::Section;
}

/// What a pass may read besides its own state when it makes its section.
pub struct SectionContext<'x> {
    pub log: &'x Log,
    pub syms: &'x crate::Symbols,
    /// Where events were lost: findings inside are uncertain.
    pub windows: &'x crate::stream::losses::Windows,
    /// The stream's interned names (cache names, tracepoints' strings).
    pub names: &'x [String],
    /// The stream's interned kernel stacks.
    pub stacks: &'x [Box<[u64]>],
    /// The recorded kernel's GFP flag names, if the log has them.
    pub gfp: Option<&'x kmemtrace_kernel::FlagTable>,
    /// The capture's first and last event times.
    pub span: (u64, u64),
}

/// Generates the making of [`crate::model::PassSections`] from the list.
macro_rules! pass_sections_of {
    ($($field:ident: $pass:ty => $section:ty,)*) => {
        impl crate::model::PassSections {
            /// Each listed pass's section, from the passes added up.
            pub fn of(passes: &Passes<'_>, ctx: &SectionContext<'_>) -> Self {
                crate::model::PassSections {
                    $($field: MakesSection::section(&passes.$field, ctx),)*
                }
            }
        }
    };
}

crate::for_each_pass_section!(pass_sections_of);

/// The consumed kind and shard key agree: slab events are placed by their
/// pointer, page events by their frame, a pass's tracepoints by its key.
pub const fn shard_fits(consumes: Consumes, shard: ShardKey, requests: &[Request]) -> bool {
    let mut i = 0;
    while i < requests.len() {
        if requests[i].shard as u8 != shard as u8 {
            return false;
        }
        i += 1;
    }
    match consumes {
        Consumes::Slab => matches!(shard, ShardKey::Pointer) && requests.is_empty(),
        Consumes::Page => matches!(shard, ShardKey::Pfn) && requests.is_empty(),
        Consumes::Tracepoints => true,
    }
}

/// Generates [`Passes`] from the list ([`crate::for_each_pass`]).
macro_rules! passes_struct {
    ($lt:lifetime; $($field:ident: $ty:ty,)*) => {
        /// Every pass, fed one event at a time.
        pub struct Passes<$lt> {
            pub objects: Objects<$lt>,
            $(pub $field: $ty,)*
            /// The first and last slab events' times.
            pub first_ts: Option<u64>,
            pub last_ts: u64,
        }

        impl<$lt> Passes<$lt> {
            /// Each pass's shard key fits the events it consumes (an error
            /// when [`Passes::new`] is compiled).
            const SHARDS_FIT: () = {
                $(assert!(
                    shard_fits(
                        <$ty as Pass>::CONSUMES,
                        <$ty as Pass>::SHARD,
                        <$ty as Pass>::TRACEPOINTS,
                    ),
                    concat!(stringify!($field), ": shard key does not fit the events consumed")
                );)*
            };

            /// Every pass, new, after the object tracker `objects`.
            pub fn new(setup: &PassSetup<$lt>, objects: Objects<$lt>) -> Self {
                #[allow(clippy::let_unit_value)]
                let () = Self::SHARDS_FIT;
                Passes {
                    objects,
                    $($field: <$ty as Pass>::new(setup),)*
                    first_ts: None,
                    last_ts: 0,
                }
            }

            /// The tracepoints the passes ask for, in list order (what a
            /// [`Tracepoint::request`] indexes).
            pub fn requests() -> Vec<Request> {
                let mut r = Vec::new();
                $(r.extend_from_slice(<$ty as Pass>::TRACEPOINTS);)*
                r
            }

            #[inline]
            pub fn event(&mut self, ev: &Event, key: OrderKey) {
                match &ev.body {
                    Body::Slab(slab) => {
                        self.first_ts = Some(self.first_ts.map_or(ev.ts, |t| t.min(ev.ts)));
                        self.last_ts = self.last_ts.max(ev.ts);
                        let seen = self.objects.resolve(ev, key, slab);
                        $(if matches!(<$ty as Pass>::CONSUMES, Consumes::Slab) {
                            Pass::slab(&mut self.$field, &seen);
                        })*
                    }
                    Body::Page(p) => {
                        $(if matches!(<$ty as Pass>::CONSUMES, Consumes::Page) {
                            Pass::page(&mut self.$field, ev, key, p);
                        })*
                    }
                    Body::Tracepoint(tp) => {
                        // Each pass's requests follow the previous ones'.
                        let mut first = 0;
                        $(
                            let n = <$ty as Pass>::TRACEPOINTS.len();
                            let which = usize::from(tp.request).wrapping_sub(first);
                            if which < n {
                                Pass::tracepoint(&mut self.$field, ev, key, which, tp);
                            }
                            first += n;
                        )*
                        let _ = first;
                    }
                }
            }

            /// Adds another shard's passes (its objects stay with it).
            pub fn absorb(&mut self, o: &mut Passes<$lt>) {
                $(Pass::absorb(&mut self.$field, &mut o.$field);)*
                self.first_ts = match (self.first_ts, o.first_ts) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                self.last_ts = self.last_ts.max(o.last_ts);
            }
        }
    };
}

crate::for_each_pass!(passes_struct);

/// What a shard hands the combiner at the end of an epoch.
pub struct EpochOut {
    pub deltas: Vec<slab::Delta>,
    pub pending: Vec<misuse::Pending>,
    /// The span of each slab event kind in the epoch.
    pub spans: untraced::Spans,
}

impl Shard for Passes<'_> {
    type Epoch = EpochOut;

    /// Warms the object tracker's slots of the coming slab events, and
    /// the page pass's of the coming page events: their lookups are most
    /// of a shard's time, nearly all of it cache misses with many live
    /// objects or pages.
    fn look_ahead(&mut self, next: &[(Event, OrderKey)]) {
        self.objects
            .warm(next.iter().filter_map(|(ev, _)| match &ev.body {
                Body::Slab(s) => Some(s.ptr),
                _ => None,
            }));
        self.pages
            .warm(next.iter().filter_map(|(ev, _)| match &ev.body {
                Body::Page(p) => Some(p.pfn),
                _ => None,
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

#[cfg(test)]
mod tracepoint_tests;
