//! `--html FILE`: the report as one self-contained page, from the same
//! model as the text and JSON printers. Plots are inline SVG written here
//! ([`svg`]), from the model's binned series ([`series`]), so the page
//! needs no network and no library at view time; a few lines of script
//! sort the tables. The page stays light at any capture size: every
//! series is binned, every table bounded.

mod page_sections;
pub(crate) mod sections;
pub mod series;
pub(crate) mod stalls;
pub mod svg;
mod table;

use crate::{Printer, Section};
use kmemtrace_analysis::model::Report;
use kmemtrace_cli::markup::{self, Markup};
use series::Span;
use std::fmt::Write as _;

const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// Text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    markup::escape(s, Markup::Html)
}

/// What the sections share: the report, the time axis, rows per table.
pub struct Page<'a> {
    pub r: &'a Report,
    pub span: Span,
    pub lines: usize,
}

impl<'a> Page<'a> {
    /// The page's view of `r`: its time axis from the first to the last
    /// event, tables cut at `lines` rows.
    pub fn new(r: &'a Report, lines: usize) -> Self {
        let start_ns = r.capture.first_ts_ns.unwrap_or(0);
        let span = Span {
            start_ns,
            end_ns: r
                .capture
                .last_ts_ns
                .unwrap_or(start_ns)
                .max(start_ns.saturating_add(1)),
        };
        Page { r, span, lines }
    }

    /// The lost-event windows of `cpu` (all CPUs: `None`) as shaded
    /// stretches of the time axis, each saying what it is.
    pub fn lost(&self, cpu: Option<u32>) -> Vec<(f64, f64, String)> {
        let c = &self.r.capture;
        c.lost_windows
            .iter()
            .filter(|w| cpu.is_none() || cpu == Some(w.cpu))
            .map(|w| {
                let a = w.start_ns.max(self.span.start_ns);
                let b = w.end_ns.unwrap_or(self.span.end_ns).min(self.span.end_ns);
                let what = format!(
                    "CPU {} lost events between {:.6} s and {:.6} s",
                    w.cpu,
                    self.span.secs(a),
                    self.span.secs(b.max(a))
                );
                (self.span.secs(a), self.span.secs(b.max(a)), what)
            })
            .collect()
    }
}

/// The HTML printer: one page, tables cut at `lines` rows.
pub struct Html {
    pub lines: usize,
}

impl Printer for Html {
    fn order(&self) -> &'static [Section] {
        &[
            Section::Header,
            Section::Misuse,
            Section::LiveTimeline,
            Section::Rates,
            Section::Passes,
            Section::Callsites,
            Section::Caches,
            Section::Leaks,
            Section::Pages,
            Section::Sources,
        ]
    }

    fn begin(&self, r: &Report, o: &mut String) {
        o.reserve(1 << 20);
        let title = format!("kmemtrace report: {}", r.input.name);
        let _ = write!(
            o,
            r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta name="generator" content="{}"><title>{}</title><style>{STYLE}</style></head><body><div id="errors" hidden></div><main>"#,
            esc(&r.generator),
            esc(&title)
        );
        let _ = write!(o, "<h1>{}</h1>", esc(&title));
    }

    fn section(&self, r: &Report, section: Section, o: &mut String) {
        let p = Page::new(r, self.lines);
        match section {
            Section::Header => sections::header(&p, o),
            Section::Misuse => sections::findings(&p, o),
            Section::LiveTimeline => sections::live(&p, o),
            Section::Rates => sections::rates(&p, o),
            Section::Passes => crate::pass_sections::html(&p, o),
            Section::Callsites => sections::callsites(&p, o),
            Section::Caches => sections::caches(&p, o),
            Section::Leaks => sections::leaks(&p, o),
            Section::Pages => page_sections::pages(&p, o),
            Section::Sources => sections::sources(&p, o),
            // The header's figures stand for the summary; per-pointer rows
            // stay with the text and JSON outputs.
            Section::Summary | Section::Allocs => {}
        }
    }

    fn end(&self, r: &Report, o: &mut String) {
        let _ = write!(
            o,
            r#"<footer>{} · schema {} · symbols: {}</footer></main><script>{SCRIPT}</script></body></html>"#,
            esc(&r.generator),
            esc(&r.schema),
            esc(&r.input.kallsyms)
        );
        o.push('\n');
    }
}

/// The page for `r`, tables cut at `lines` rows.
pub fn render(r: &Report, lines: usize) -> String {
    crate::print(&Html { lines }, r)
}

/// A section heading with its anchor.
pub fn heading(o: &mut String, id: &str, text: &str) {
    let _ = write!(
        o,
        r##"<h2 id="{id}"><a href="#{id}">{}</a></h2>"##,
        esc(text)
    );
}

/// Headline figures, each a label, its value and a line under it.
pub fn cards(o: &mut String, cards: &[(&str, String, String)]) {
    o.push_str(r#"<div class="cards">"#);
    for (label, value, sub) in cards {
        let _ = write!(
            o,
            r#"<div class="card"><div class="label">{}</div><div class="value">{}</div><div class="sub">{}</div></div>"#,
            esc(label),
            esc(value),
            esc(sub)
        );
    }
    o.push_str("</div>");
}

/// A short paragraph of explanation.
pub fn note(o: &mut String, text: &str) {
    let _ = write!(o, r#"<p class="note">{}</p>"#, esc(text));
}
