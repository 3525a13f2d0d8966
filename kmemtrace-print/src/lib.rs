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

/// A sample's weights by order (from order 0) in words, runs of one
/// weight together: `16x at orders 0-8, 8x at order 9, ..., once from
/// order 12`.
pub(crate) fn weights_text(weights: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut from = 0;
    for (o, w) in weights.iter().enumerate() {
        if weights.get(o + 1) == Some(w) {
            continue;
        }
        parts.push(match (*w, from == o) {
            (1, _) => format!("once from order {from}"),
            (w, true) => format!("{w}x at order {o}"),
            (w, false) => format!("{w}x at orders {from}-{o}"),
        });
        from = o + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn weights_in_words() {
        assert_eq!(
            super::weights_text(&[16, 16, 16, 8, 4, 2, 1]),
            "16x at orders 0-2, 8x at order 3, 4x at order 4, 2x at order 5, once from order 6"
        );
        assert_eq!(super::weights_text(&[1]), "once from order 0");
    }
}
