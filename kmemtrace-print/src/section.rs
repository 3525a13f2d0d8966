//! The one trait every printer implements: the report's sections, each
//! printed by one function per output, in the printer's own order.

use kmemtrace_analysis::model::Report;

/// A section of the report as the printers show it: one part of the
/// model (or, for [`Section::Header`], what the model says of the input).
///
/// Each printer matches on this enum without a wildcard, so that a new
/// section is a compile error in every printer until it says how (or that
/// it does not) print it; a list of sections generated from the analysis'
/// passes can map each pass onto one variant here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Section {
    /// The input, the kernel, the capture, its losses and problems, the
    /// filters (`input`, `kernel`, `capture`, `problems`, `filters`).
    Header,
    /// Slab call sites (`callsites`).
    Callsites,
    /// Caches and kmalloc size classes (`caches`, `size_classes`).
    Caches,
    /// The sections the passes make themselves (`PassSections`: frees by
    /// allocating and freeing CPU, `cross_cpu`, ...), in the list's order,
    /// each printed by its [`crate::PrintSection`].
    Passes,
    /// Per pointer (`allocs`, `--alloc` only).
    Allocs,
    /// Totals as `perf kmem stat` prints them (`summary`).
    Summary,
    /// The page allocator (`pages`, `page_allocator`).
    Pages,
    /// Allocator misuse and what the trace lacks (`misuse`,
    /// `trace_completeness`).
    Misuse,
    /// Objects live at the end (`leaks`).
    Leaks,
    /// Live slab bytes over time (`live_timeline`, per call site from
    /// `timelines`).
    LiveTimeline,
    /// Allocations and frees per CPU over time (`timelines`).
    Rates,
    /// Source lines of the call sites (`sources`, with `--vmlinux`).
    Sources,
}

impl Section {
    /// Every section, in the model's order.
    pub const ALL: [Section; 12] = [
        Section::Header,
        Section::Callsites,
        Section::Caches,
        Section::Passes,
        Section::Allocs,
        Section::Summary,
        Section::Pages,
        Section::Misuse,
        Section::Leaks,
        Section::LiveTimeline,
        Section::Rates,
        Section::Sources,
    ];
}

/// A printer: its sections in its order, each one written by
/// [`Printer::section`] into one string.
pub trait Printer {
    /// The sections this printer has, in the order it prints them.
    fn order(&self) -> &'static [Section];

    /// Whether the options ask for `section` (all of them unless the
    /// printer says otherwise).
    fn shows(&self, _section: Section) -> bool {
        true
    }

    /// What comes before the first section.
    fn begin(&self, _r: &Report, _out: &mut String) {}

    /// One section of `r`.
    fn section(&self, r: &Report, section: Section, out: &mut String);

    /// What comes after the last section.
    fn end(&self, _r: &Report, _out: &mut String) {}
}

/// `r` as `printer` prints it: its opening, the sections it shows in its
/// order, its closing.
pub fn print(printer: &impl Printer, r: &Report) -> String {
    let mut out = String::new();
    printer.begin(r, &mut out);
    for &section in printer.order() {
        if printer.shows(section) {
            printer.section(r, section, &mut out);
        }
    }
    printer.end(r, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Sections;
    use crate::{Html, Text};

    #[test]
    fn each_printer_lists_a_section_once_and_every_section_has_a_printer() {
        let text = Text(Sections::all(20));
        let html = Html { lines: 500 };
        let orders = [text.order(), html.order()];
        for order in orders {
            for (i, s) in order.iter().enumerate() {
                assert!(!order[..i].contains(s), "{s:?} twice");
            }
        }
        for s in Section::ALL {
            assert!(orders.iter().any(|o| o.contains(&s)), "{s:?} unprinted");
        }
    }
}
