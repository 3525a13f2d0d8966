//! kmemtrace-report: per-callsite slab fragmentation, cross-CPU frees,
//! leaks and allocator misuse from a kmemtrace log, on any machine.
//!
//! The analyses are the `kmemtrace-analysis` library (the ordered event
//! stream, the passes, the typed model), the printers `kmemtrace-print`
//! (text, JSON, HTML over the model); this binary is the command line, the
//! wiring between them and the exit code.
#![forbid(unsafe_code)]

mod cli;
mod events;
mod input;
mod output;
mod timings;

use clap::Parser;
use cli::Cli;
use input::Asked;
use kmemtrace_analysis::{filter, model, DebugInfo, Symbols};
use kmemtrace_cli::exit;
use kmemtrace_import::log::Log;
use kmemtrace_kernel::human::thousands;
use std::process::ExitCode;

/// Why the report stops: a code of the one table and one line.
type Stop = (exit::Code, String);

fn usage(msg: impl Into<String>) -> Stop {
    (exit::USAGE, msg.into())
}

fn main() -> ExitCode {
    if let Some(code) = kmemtrace_cli::generate::from_args(<Cli as clap::CommandFactory>::command) {
        return code;
    }
    let mut cli = Cli::parse();
    match run(&mut cli) {
        Ok(code) => code.exit_code(),
        Err((code, msg)) => {
            eprintln!("kmemtrace-report: {msg}");
            code.exit_code()
        }
    }
}

/// The report, or the listing: its exit code, worsened to "damaged" where
/// the log is cut short or damaged (said on stderr after the output).
fn run(cli: &mut Cli) -> Result<exit::Code, Stop> {
    // -l 0: every row (as kmemtrace-check's --max-problems 0).
    cli.lines = cli.lines.map(|n| if n == 0 { usize::MAX } else { n });
    let Asked {
        sort,
        page_cull,
        mut filter,
        window,
        override_syms,
    } = input::parse_asked(cli)?;
    let started = std::time::Instant::now();
    let mut log = input::open(cli)?;
    input::select_tasks_and_time(cli, &log, window, &mut filter).map_err(usage)?;
    let opened = [("open log", started.elapsed())];
    let syms = input::symbols(cli, &mut log, override_syms);
    let opened = [opened[0], ("symbols", started.elapsed() - opened[0].1)];
    let code = if cli.events {
        if !cli.all_tasks && cli.pid.is_empty() {
            filter.leave_out_recorder(&log);
        }
        events::list_events(cli, &log, &syms, &filter)?
    } else {
        report(cli, &log, &syms, filter, sort, page_cull, opened)?
    };
    Ok(match log.incomplete() {
        Some(inc) => {
            if !cli.quiet {
                for l in inc.lines(&log.name) {
                    eprintln!("kmemtrace-report: {l}");
                }
            }
            exit::worst(code, exit::DAMAGED)
        }
        None => code,
    })
}

/// Runs the analysis, with a progress line on a terminal.
fn analyse_with_progress(
    cli: &Cli,
    log: &Log,
    syms: &Symbols,
    opts: kmemtrace_analysis::Options,
) -> kmemtrace_analysis::Outcome {
    let mut line = kmemtrace_cli::progress::Line::on_terminal(cli.quiet);
    kmemtrace_analysis::analyse(log, syms, opts, &mut |p| {
        if let Some(l) = line.as_mut() {
            l.update(|_| {
                format!(
                    "kmemtrace-report: {:>3}% of {} sub-buffers, {} events, {:.1} s",
                    (p.subbufs_done * 100)
                        .checked_div(p.subbufs_total)
                        .unwrap_or(100),
                    thousands(p.subbufs_total),
                    thousands(p.events),
                    p.elapsed.as_secs_f64()
                )
            })
        }
    })
}

/// The report: the analysis, its model handed to the printer the options
/// ask for, and `--fail-on` judged on its findings.
fn report(
    cli: &Cli,
    log: &Log,
    syms: &Symbols,
    filter: filter::Filter,
    sort: Vec<model::SortKey>,
    page_cull: Vec<model::CullKey>,
    opened: [(&'static str, std::time::Duration); 2],
) -> Result<exit::Code, Stop> {
    if log.kmem_decoder().ids().next().is_none() {
        return Err((
            exit::INPUT,
            format!(
                "{}: the log has no readable kmem event formats: nothing to analyse",
                log.name
            ),
        ));
    }
    // With --page alone, --caller and --alloc name the page tables (as in
    // perf kmem --page); with --slab sections beside, both.
    let page_only =
        (cli.page || cli.live) && !(cli.caches || cli.matrix || cli.leaks || cli.misuse);
    let mut opts = kmemtrace_analysis::Options {
        filter,
        comm: cli.comm.clone(),
        traced: None,
        per_pointer: cli.alloc && !page_only,
        remember_frees: cli.remember_frees,
        min_age: cli.min_age,
        sort,
        lines: if cli.json { cli.lines } else { None },
        threads: cli.threads.map(usize::from),
        pages_by_pfn: cli.alloc && (cli.page || cli.json),
        page_sort: model::parse_page_sort(&cli.sort),
        page_cull,
        page_stacks: cli.stacks,
        timelines: cli.html.is_some(),
        episodes: cli.html.is_some(),
    };
    // A pid-filtered recording: its traced tree, unless asked otherwise.
    let traced_tree = cli.pid.is_empty() && cli.comm.is_none() && !cli.all_tasks;
    opts.select_as_recorded(log, traced_tree);
    // A debug-info file that cannot be used stops the run before the
    // analysis, not after.
    let debug = (cli.vmlinux.is_some() || cli.modules.is_some())
        .then(|| {
            DebugInfo::open(
                cli.vmlinux.as_deref(),
                cli.modules.as_deref(),
                syms.table.as_ref(),
            )
        })
        .transpose()
        .map_err(|e| (exit::INPUT, e))?;
    let mut out = analyse_with_progress(cli, log, syms, opts);
    input::selected_something(cli, log, &out.report)?;
    if let Some(d) = &debug {
        out.report.sources = Some(kmemtrace_analysis::debuginfo::sources(&out.report, d));
    }
    let printing = std::time::Instant::now();
    output::print(cli, &out.report, page_only)?;
    if let Some(cores) = cli.timings {
        let mut t = out.timings.clone();
        t.phases.splice(0..0, opened);
        t.phases.push(("print", printing.elapsed()));
        eprint!("{}", timings::table(&t, usize::from(cores)));
    }
    match (cli.fail_on, out.worst) {
        (Some(level), Some(worst)) if worst >= level => {
            if !cli.quiet {
                eprintln!(
                    "kmemtrace-report: certain findings of severity {} or worse (--fail-on {})",
                    worst.name(),
                    level.name()
                );
            }
            Ok(exit::NO)
        }
        _ => Ok(exit::OK),
    }
}
