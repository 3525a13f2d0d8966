//! The checks, run over an opened [`Log`]; each adds to the report model.
//!
//! - [`container`]: file header version, arch tag, damage and truncation
//!   the reader met, block placement, per-CPU sequence numbers, END totals;
//! - [`metadata`]: what analysis needs besides the data (kallsyms, formats);
//! - [`subbufs`]: every sub-buffer decoded to the end of its commit, event
//!   ids against the formats, with [`ordering`] (time stamps per CPU) and the
//!   missed-events flags, in one pass per CPU, CPUs in parallel;
//! - [`losses`]: the sub-buffers' loss figures against the kernel's
//!   statistics.

pub mod container;
pub mod losses;
pub mod metadata;
pub mod ordering;
pub mod subbufs;

use crate::findings::{
    percent, thousands, ArchInfo, BlockCounts, Codecs, EndInfo, Finding, Findings, Report,
    Severity, Totals, Verdict,
};
use kmemtrace_import::log::Log;
use std::sync::atomic::AtomicU64;

/// How to run the checks.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Threads for the per-CPU pass (0: one per core).
    pub threads: usize,
}

/// Problems and warnings being gathered.
#[derive(Debug, Default)]
pub struct Sink {
    pub problems: Findings,
    pub warnings: Findings,
}

impl Sink {
    pub fn push(&mut self, f: Finding) {
        match f.severity {
            Severity::Error => self.problems.push(f),
            Severity::Warning => self.warnings.push(f),
        }
    }
}

/// Runs every check on an opened log. `progress` counts the sub-buffer
/// bytes checked so far (for a progress display).
pub fn check_log(log: &Log, opts: &Options, progress: &AtomicU64) -> Report {
    let mut sink = Sink::default();
    let container = container::check(log, &mut sink);
    metadata::check(log, &mut sink);
    let scans = subbufs::scan(log, opts, progress, &mut sink);
    let (mut cpus, windows) = losses::assess(log, scans, &container, &mut sink);
    cpus.sort_by_key(|c| c.cpu);

    let mut total = Totals {
        cpus: cpus.iter().filter(|c| c.counts.blocks > 0).count() as u64,
        ..Default::default()
    };
    for c in &cpus {
        total.counts.add(&c.counts);
        total.ordering_violations += c.ordering_violations;
    }
    total.span_ns = total.counts.span_ns();
    total.lost = losses::total(&cpus);

    let arch = &log.arch;
    // By file offset; findings about the log as a whole (no place) last.
    let key = |f: &Finding| {
        let l = &f.location;
        (!l.exact && l.block.is_none(), l.offset, l.subbuf_offset)
    };
    let mut problems = sink.problems;
    problems.kept.sort_by_key(key);
    let mut warnings = sink.warnings;
    warnings.kept.sort_by_key(key);

    let verdict = if problems.total > 0 {
        Verdict::Damaged
    } else if total.lost.events > 0 || total.lost.lower_bound {
        Verdict::Lost
    } else {
        Verdict::Ok
    };
    let summary = summary(verdict, &total, &problems);
    Report {
        file: log.name.clone(),
        verdict,
        exit_code: verdict.exit_code(),
        summary,
        error: None,
        format_version: Some(format!("{}.{}", log.version.0, log.version.1)),
        origin: log.origin,
        bytes: log.len,
        arch: Some(ArchInfo {
            byte_order: arch.byte_order.name(),
            long_size: arch.long_size,
            subbuf_size: arch.subbuf_size,
            data_offset: arch.data_offset,
            page_size: arch.page_size,
            nr_cpus: arch.nr_cpus,
            machine: arch.machine.clone(),
            release: arch.release.clone(),
            hostname: arch.hostname.clone(),
            trace_clock: arch.trace_clock.clone(),
            recorder: arch.recorder.clone(),
            instance: arch.instance.clone(),
            buffer_size_kb: arch.buffer_size_kb,
        }),
        blocks: BlockCounts {
            before_end: log.blocks_before_end,
            cpu_data: log.blocks.len() as u64,
            cpu_data_codecs: log.blocks.iter().fold(Codecs::default(), |mut c, b| {
                c.count(b.header.flags);
                c
            }),
            unknown_type: log.unknown_blocks,
            damaged_regions: container.damaged.len() as u64,
            damaged_bytes: container.damaged.iter().map(|d| d.1).sum(),
        },
        end: log.end.as_ref().map(|e| EndInfo {
            offset: log.end_offset.unwrap_or(0),
            reason: e.reason.clone(),
            blocks: e.blocks,
            exit_status: e.exit_status,
        }),
        cpus,
        total,
        loss_windows: windows,
        problems_total: problems.total,
        problems: problems.kept,
        warnings_total: warnings.total,
        warnings: warnings.kept,
        rotation: log.rotation.as_ref().map(crate::findings::RotationInfo::of),
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// The verdict line's text after `FILE: `.
pub fn summary(verdict: Verdict, total: &Totals, problems: &Findings) -> String {
    let cpus = plural(total.cpus, "CPU", "CPUs");
    match verdict {
        Verdict::Ok => format!(
            "OK ({} on {cpus}, nothing lost)",
            plural(total.counts.events, "event", "events")
        ),
        Verdict::Lost => {
            let l = &total.lost;
            if l.lower_bound {
                format!(
                    "LOST at least {} events ({} of them without a stored count) besides the {} recorded on {cpus}",
                    thousands(l.events),
                    plural(l.subbuf_flag_only, "loss", "losses"),
                    thousands(total.counts.events)
                )
            } else {
                format!(
                    "LOST {} of {} events ({}) on {cpus}",
                    thousands(l.events),
                    // The loss is the statistics' word: it saturates.
                    thousands(total.counts.events.saturating_add(l.events)),
                    percent(l.fraction)
                )
            }
        }
        Verdict::Damaged => {
            let first = problems
                .kept
                .first()
                .map(|f| {
                    // An exact place reads "at offset N: ...", others
                    // "in block at ...: ..." or "in the log: ...".
                    if f.location.exact {
                        format!(" (first at {f})")
                    } else {
                        format!(" (first {f})")
                    }
                })
                .unwrap_or_default();
            format!(
                "DAMAGED: {}{first}",
                plural(problems.total, "problem", "problems")
            )
        }
        Verdict::Unusable => "UNUSABLE".into(),
    }
}
