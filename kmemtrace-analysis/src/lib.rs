//! The analyses of kmemtrace, as a library: one time-ordered stream of
//! slab and page-allocator events (and of any other tracepoint a pass asks
//! for) decoded from a log ([`stream`]), passes over it ([`passes`]), and
//! the typed report model they fill ([`model`], assembled by [`build`]).
//! Printers (text, JSON, HTML) live with the tools that print; they read
//! the model only.
//!
//! Pipeline, one way: the log -> per-CPU decoder threads -> k-way merge by
//! time stamp, learning the loss windows -> the object tracker and the
//! passes -> the model.
//!
//! # The modules
//! - [`run`]: the entry points ([`analyse`], [`analyse_as_recorded`]) and
//!   their [`Options`].
//! - [`stream`]: decoding, routing by shard key, merging into time order;
//!   [`stream::tracepoints`]: other tracepoints, by `system:name`.
//! - [`event`]: the compact event the stream carries ([`event::Body`]).
//! - [`passes`]: the analyses, one file each, listed once in
//!   [`passes`] ([`for_each_pass!`]); those that make their own
//!   section of the model are listed in [`for_each_pass_section!`].
//! - [`combine`], [`judge`]: what does not add up across shards (peaks,
//!   first occurrences, loss judgements).
//! - [`build`]: the older passes' sections of the model.
//! - [`model`]: the typed report (its JSON is `docs/JSON.md`'s).
//! - [`filter`], [`intern`], [`ptr_table`], [`in_order`], [`page_callers`],
//!   [`symbols`]: selection, interned names and sites, tables, helpers.
//! - [`tournament`]: the k-way merges' tournament tree.
//! - `hint`: the one module allowed `unsafe` (a cache prefetch hint).
//!
//! # Adding a pass (three files)
//! 1. **The pass**: `passes/NAME.rs`, a type implementing [`passes::Pass`]:
//!    what it consumes ([`passes::Consumes`]: slab, page, or tracepoints,
//!    named `system:name` with the fields it reads in
//!    [`passes::Pass::TRACEPOINTS`]), its shard key ([`event::ShardKey`]:
//!    pointer, pfn, task, none), its handler, its merge across shards
//!    ([`passes::Pass::absorb`]); and [`passes::MakesSection`]: the type of
//!    its section of the model (`Serialize`, `Deserialize`, `Default`: its
//!    JSON is the report's key `NAME`) and the code that makes it, as
//!    [`passes::cross_cpu`] does.
//! 2. **The list**, in `passes/mod.rs` ([`passes`]): `pub mod NAME;`, one
//!    line `NAME: Type,` in [`for_each_pass!`] and one
//!    line `NAME: Type => Section,` in [`for_each_pass_section!`]. The
//!    `Passes` struct, its dispatch and merge, [`model::PassSections`] (a
//!    field of the report) and its making are generated from these lines.
//! 3. **The printer**: one `impl kmemtrace_print::PrintSection for
//!    Section` in `kmemtrace-print/src/pass_sections.rs`: a text function
//!    and an HTML function. The printers' dispatch is generated from the
//!    same list, so a listed section without a printer does not compile;
//!    the JSON document is the section's serde form.
//!
//! The decoder reads a requested tracepoint through accessors resolved once
//! per event id from the log's own formats, in the log's byte order and
//! long size; a field the format lacks reads as `None`. A log only kmem
//! passes read is decoded as before: nothing else is looked at.
#![deny(unsafe_code)]

pub mod build;
pub mod combine;
pub mod debuginfo;
pub mod event;
pub mod filter;
mod hint;
pub mod in_order;
pub mod intern;
pub mod judge;
pub mod model;
pub mod page_callers;
pub mod passes;
pub mod ptr_table;
pub mod run;
pub mod stream;
pub mod symbols;
pub mod tournament;

pub use debuginfo::{DebugInfo, SourceFrame};
pub use event::{Body, Event, ShardKey, Tracepoint};
pub use passes::{Consumes, Pass, PassSetup, Passes};
pub use run::{analyse, analyse_as_recorded, Options, Outcome};
pub use stream::tracepoints::{Delivery, Request, Tracepoints};
pub use stream::Progress;
pub use symbols::Symbols;
