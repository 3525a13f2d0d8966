//! The report over a damaged log: the log opened from arbitrary bytes,
//! analysed as `kmemtrace-report LOG` does (on one thread), and printed as
//! text and JSON. No panic, no hang, bounded memory.
//!
//! The first byte chooses how the rest is used, as in the `check` target:
//! odd, a raw log file; even, a framed input, whose blocks pass their CRCs
//! and so reach the decoder, the passes and the printers.

use kmemtrace_analysis::run::{analyse, Options};
use kmemtrace_analysis::symbols::Symbols;
use kmemtrace_import::Log;
use kmemtrace_print::text::{Sections, Text};
use kmemtrace_testkit::fuzz::framed_log;

fn sections() -> Sections {
    Sections {
        callsites: true,
        caches: true,
        matrix: true,
        alloc: true,
        leaks: true,
        misuse: true,
        page: true,
        page_callers: true,
        page_alloc: true,
        page_live: true,
        page_asked: true,
        stalls: true,
        color: false,
        lines: 10,
    }
}

/// One run.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 1 == 1 {
        rest.to_vec()
    } else {
        framed_log(rest)
    };
    let Ok(mut log) = Log::from_bytes("fuzz", &bytes) else {
        return;
    };
    let syms = Symbols::of_log(&mut log);
    let mut opts = Options::default();
    opts.select_as_recorded(&log, true);
    opts.threads = Some(1);
    let outcome = analyse(&log, &syms, opts, &mut |_| {});
    let _ = kmemtrace_print::print(&Text(sections()), &outcome.report);
    let _ = kmemtrace_print::json::render(&outcome.report).expect("a report serialises");
}
