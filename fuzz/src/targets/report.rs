//! The report over a damaged log: the log opened from arbitrary bytes,
//! analysed as `kmemtrace-report LOG` does (on one thread), and printed as
//! text, HTML and JSON. No panic, no hang, bounded memory.
//!
//! The first byte chooses how the rest is used, as in the `check` target:
//! odd, a raw log file; even, a framed input, whose blocks pass their CRCs
//! and so reach the decoder, the passes and the printers.

use kmemtrace_analysis::run::{analyse, Options};
use kmemtrace_analysis::symbols::Symbols;
use kmemtrace_import::Log;
use kmemtrace_print::text::{Sections, Text};
use kmemtrace_print::Html;

/// One run.
pub fn run(data: &[u8]) {
    let Some(bytes) = kmemtrace_testkit::fuzz::log_of_input(data) else {
        return;
    };
    let Ok(mut log) = Log::from_bytes("fuzz", &bytes) else {
        return;
    };
    let syms = Symbols::of_log(&mut log);
    let opts = Options {
        threads: Some(1),
        episodes: true,
        timelines: true,
        ..Options::as_recorded(&log)
    };
    let outcome = analyse(&log, &syms, opts, &mut |_| {});
    let _ = kmemtrace_print::print(&Text(Sections::all(10)), &outcome.report);
    let _ = kmemtrace_print::print(&Html { lines: 10 }, &outcome.report);
    let _ = kmemtrace_print::json::render(&outcome.report).expect("a report serialises");
}
