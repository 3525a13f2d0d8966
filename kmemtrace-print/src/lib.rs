//! The kmemtrace report's printers, over the typed model
//! ([`kmemtrace_analysis::model::Report`]): they read the model and write
//! a string; they never reach back into the analysis or the log.
//!
//! - [`Printer`] and [`Section`]: the one trait, and the sections each
//!   printer renders with one function per section, in its own order
//!   ([`print()`] runs a printer over a report).
//! - [`PrintSection`]: how each section a pass makes itself prints, one
//!   function per output, in one file (`pass_sections.rs`); the dispatch
//!   over them is generated from the analysis' list.
//! - [`text`]: the human report ([`Text`], the sections its options ask
//!   for: [`text::Sections`]), and the number formats the tools share.
//! - [`html`]: one self-contained page with inline SVG plots ([`Html`]).
//! - [`json`]: the `kmemtrace-report/1` document, which is the model's
//!   serde form (its keys are documented in kmemtrace-report's JSON.md).
#![forbid(unsafe_code)]

pub mod html;
pub mod json;
mod pass_sections;
mod section;
pub mod text;

pub use html::Html;
pub use pass_sections::PrintSection;
pub use section::{print, Printer, Section};
pub use text::Text;
