//! The analyses of kmemtrace, as a library: one time-ordered stream of
//! slab and page-allocator events decoded from a log ([`stream`]), passes
//! over it ([`passes`]), and the typed report model they fill ([`model`],
//! assembled by [`build`]). Printers (text, JSON, later HTML) live with the
//! tools that print; they read the model only.
//!
//! Pipeline, one way: the log -> per-CPU decoder threads -> k-way merge by
//! time stamp, learning the loss windows -> the object tracker and the
//! passes -> the model.
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

pub use run::{analyse, analyse_as_recorded, Options, Outcome};
pub use stream::Progress;
pub use symbols::Symbols;
