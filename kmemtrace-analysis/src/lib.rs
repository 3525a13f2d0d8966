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
//!   [`passes::list`] ([`for_each_pass!`]); [`for_each_section!`] lists
//!   the model's sections for printers.
//! - [`combine`], [`judge`]: what does not add up across shards (peaks,
//!   first occurrences, loss judgements).
//! - [`build`]: the older passes' sections of the model.
//! - [`model`]: the typed report (its JSON is `docs/JSON.md`'s).
//! - [`filter`], [`intern`], [`ptr_table`], [`in_order`], [`page_callers`],
//!   [`symbols`]: selection, interned names and sites, tables, helpers.
//!
//! # Adding a pass (three files)
//! 1. **The pass**: `passes/NAME.rs`, a type implementing [`passes::Pass`]:
//!    what it consumes ([`passes::Consumes`]: slab, page, or tracepoints,
//!    named `system:name` with the fields it reads in
//!    [`passes::Pass::TRACEPOINTS`]), its shard key ([`event::ShardKey`]:
//!    pointer, pfn, task, none), its handler, its merge across shards
//!    ([`passes::Pass::absorb`]) and a `section()` making its part of the
//!    model (as [`passes::cross_cpu::CrossCpuPass::section`]), declared
//!    `pub mod NAME;` beside the others.
//! 2. **The list**: one line in [`passes::list`]'s [`for_each_pass!`] (and,
//!    for a new section, a field of [`model::Report`] filled from
//!    `section()` in [`run`], and one line in [`for_each_section!`]).
//! 3. **The printer**: one function per output for the section, dispatched
//!    from [`for_each_section!`].
//!
//! The decoder reads a requested tracepoint through accessors resolved once
//! per event id from the log's own formats, in the log's byte order and
//! long size; a field the format lacks reads as `None`. A log only kmem
//! passes read is decoded as before: nothing else is looked at.
#![forbid(unsafe_code)]

pub mod build;
pub mod combine;
pub mod event;
pub mod filter;
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

pub use event::{Body, Event, ShardKey, Tracepoint};
pub use passes::{Consumes, Pass, PassSetup, Passes};
pub use run::{analyse, analyse_as_recorded, Options, Outcome};
pub use stream::tracepoints::{Request, Tracepoints};
pub use stream::Progress;
pub use symbols::Symbols;
