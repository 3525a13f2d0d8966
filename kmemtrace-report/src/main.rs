//! kmemtrace-report: per-callsite slab fragmentation, cross-CPU frees,
//! leaks and allocator misuse from a kmemtrace log, on any machine.
//!
//! The analyses are the `kmemtrace-analysis` library (the ordered event
//! stream, the passes, the typed model); this binary is the command line
//! and the printers ([`text`], [`html`], JSON via serde).
#![forbid(unsafe_code)]

mod cli;
mod events;
mod html;
mod page_tables;
mod pages;
mod text;

use clap::Parser;
use cli::Cli;
use kmemtrace_analysis::{filter, model, Symbols};
use kmemtrace_format::kallsyms::Kallsyms;
use kmemtrace_format::log::Log;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

const EXIT_FINDINGS: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_INPUT: u8 = 3;
const EXIT_OUTPUT: u8 = 4;
/// Rows per table of the HTML page unless `-l` says otherwise.
const HTML_LINES: usize = 500;

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("kmemtrace-report: {msg}");
    ExitCode::from(code)
}

/// `--cpu`: every CPU asked for must be one the recorded machine had; one
/// it had that holds no data is said once (an idle CPU is no error).
fn cpus_in_log(log: &Log, asked: &std::collections::HashSet<u32>) -> Result<(), String> {
    let with_data = log.cpus();
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut asked: Vec<u32> = asked.iter().copied().collect();
    asked.sort_unstable();
    let unknown: Vec<u32> = asked
        .iter()
        .copied()
        .filter(|c| match log.arch.nr_cpus {
            Some(n) => *c >= n,
            None => !with_data.contains(c),
        })
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "--cpu {}: the log has no such CPU (CPUs with data: {})",
            list(&unknown),
            list(&with_data)
        ));
    }
    let idle: Vec<u32> = asked
        .iter()
        .copied()
        .filter(|c| !with_data.contains(c))
        .collect();
    if !idle.is_empty() {
        eprintln!(
            "kmemtrace-report: --cpu {}: no data recorded on {} (CPUs with data: {})",
            list(&idle),
            if idle.len() == 1 {
                "that CPU"
            } else {
                "those CPUs"
            },
            list(&with_data)
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    // -l 0: every row (as kmemtrace-check's --max-problems 0).
    cli.lines = cli.lines.map(|n| if n == 0 { usize::MAX } else { n });
    let sort = match model::parse_sort(&cli.sort) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_USAGE, e),
    };
    let page_cull = match model::parse_cull(&cli.cull) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_USAGE, format!("--cull: {e}")),
    };
    let mut filter = filter::Filter {
        callsite: cli.callsite.clone(),
        ..Default::default()
    };
    if let Some(c) = &cli.cpu {
        match filter::parse_cpu_list(c) {
            Ok(s) => filter.cpus = Some(s),
            Err(e) => return fail(EXIT_USAGE, e),
        }
    }
    let window = match cli.time.as_deref().map(filter::parse_time_window) {
        None => None,
        Some(Ok(w)) => Some(w),
        Some(Err(e)) => return fail(EXIT_USAGE, e),
    };
    let override_syms = match &cli.kallsyms {
        None => None,
        Some(p) => match std::fs::read(p) {
            Ok(b) => match Kallsyms::parse(&String::from_utf8_lossy(&b)) {
                Ok(k) => Some((k, p.display().to_string())),
                Err(e) => return fail(EXIT_USAGE, format!("{}: {e}", p.display())),
            },
            Err(e) => return fail(EXIT_USAGE, format!("{}: {e}", p.display())),
        },
    };

    let mut log = match kmemtrace_import::open_log(&cli.file) {
        Ok(l) => l,
        Err(e) => {
            let name = if cli.file.as_os_str() == "-" {
                "<stdin>".to_string()
            } else {
                cli.file.display().to_string()
            };
            return fail(EXIT_INPUT, format!("{name}: {e}"));
        }
    };
    // The symbol table is parsed: its text need not stay in memory.
    for m in &mut log.metas {
        use kmemtrace_format::records::MetaKind;
        if matches!(m.kind, MetaKind::Kallsyms | MetaKind::KallsymsPart) {
            m.content = Vec::new();
        }
    }
    if let Err(e) = select_tasks_and_time(&cli, &log, window, &mut filter) {
        return fail(EXIT_USAGE, e);
    }
    let syms = symbols(&cli, &mut log, override_syms);
    if cli.events {
        return list_events(&cli, &log, &syms, &filter);
    }
    let kmem = log.kmem_decoder();
    if kmem.ids().next().is_none() {
        return fail(
            EXIT_INPUT,
            format!(
                "{}: the log has no readable kmem event formats: nothing to analyse",
                log.name
            ),
        );
    }
    drop(kmem);

    let any_section = cli.caller
        || cli.caches
        || cli.matrix
        || cli.alloc
        || cli.leaks
        || cli.misuse
        || cli.page
        || cli.live;
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
    };
    // A pid-filtered recording: its traced tree, unless asked otherwise.
    let traced_tree = cli.pid.is_empty() && cli.comm.is_none() && !cli.all_tasks;
    opts.select_as_recorded(&log, traced_tree);
    let out = if !cli.quiet && std::io::stderr().is_terminal() {
        let mut printed = false;
        let out = kmemtrace_analysis::analyse(&log, &syms, opts, &mut |p| {
            eprint!(
                "\rkmemtrace-report: {:>3}% of {} sub-buffers, {} events, {:.1} s ",
                (p.subbufs_done * 100)
                    .checked_div(p.subbufs_total)
                    .unwrap_or(100),
                text::thousands(p.subbufs_total),
                text::thousands(p.events),
                p.elapsed.as_secs_f64()
            );
            printed = true;
        });
        if printed {
            eprint!("\r{:70}\r", "");
        }
        out
    } else {
        kmemtrace_analysis::analyse(&log, &syms, opts, &mut |_| {})
    };

    let html_to_stdout = cli.html.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = cli.html.as_deref().filter(|_| !html_to_stdout) {
        let page = html::render(&out.report, cli.lines.unwrap_or(HTML_LINES));
        // The page holds kernel addresses: owner-only, as the log.
        let written = kmemtrace_format::private_file::create(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, page.as_bytes()));
        if let Err(e) = written {
            return fail(EXIT_OUTPUT, format!("{}: {e}", path.display()));
        }
    }
    let text = if html_to_stdout {
        html::render(&out.report, cli.lines.unwrap_or(HTML_LINES))
    } else if cli.json {
        match serde_json::to_string_pretty(&out.report) {
            Ok(mut s) => {
                s.push('\n');
                s
            }
            Err(e) => return fail(EXIT_OUTPUT, format!("JSON: {e}")),
        }
    } else {
        let color = kmemtrace_format::human::use_color(std::io::stdout().is_terminal());
        let sections = text::Sections {
            callsites: !any_section || (cli.caller && !page_only),
            caches: cli.caches,
            matrix: cli.matrix,
            alloc: cli.alloc && !page_only,
            leaks: !any_section || cli.leaks,
            misuse: !any_section || cli.misuse,
            page: !any_section || cli.page || cli.live,
            page_callers: !any_section || cli.caller || (cli.page && !cli.alloc && !cli.live),
            page_alloc: cli.alloc && (cli.page || cli.live),
            page_live: cli.live,
            page_asked: cli.page || cli.live,
            color,
            lines: cli.lines.unwrap_or(20),
        };
        text::render(&out.report, &sections)
    };
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return fail(EXIT_OUTPUT, format!("writing the report: {e}"));
        }
    }
    if let (Some(level), Some(worst)) = (cli.fail_on, out.worst) {
        if worst >= level {
            if !cli.quiet {
                eprintln!(
                    "kmemtrace-report: certain findings of severity {} or worse (--fail-on {})",
                    worst.name(),
                    level.name()
                );
            }
            return ExitCode::from(EXIT_FINDINGS);
        }
    }
    ExitCode::SUCCESS
}

/// The task, CPU and time filters, checked against the log.
fn select_tasks_and_time(
    cli: &Cli,
    log: &Log,
    window: Option<(Option<filter::TimePoint>, Option<filter::TimePoint>)>,
    filter: &mut filter::Filter,
) -> Result<(), String> {
    if let Some(asked) = &filter.cpus {
        cpus_in_log(log, asked)?;
    }
    if !cli.pid.is_empty() {
        filter.pids = Some(cli.pid.iter().copied().collect());
    }
    if let Some(c) = &cli.comm {
        filter.comm = Some((c.clone(), log.pids.clone()));
    }
    if let Some((a, b)) = window {
        let first = kmemtrace_format::walk::first_event_ts(log).unwrap_or(0);
        let start = a.map_or(0, |t| t.resolve(first));
        let end = b.map_or(u64::MAX, |t| t.resolve(first));
        if end < start {
            return Err("the time window ends before it starts".into());
        }
        // A window beside the capture selects nothing: say so, as --cpu
        // does for a CPU the log does not have.
        let last = kmemtrace_format::walk::last_event_ts(log).unwrap_or(first);
        if start > last || end < first {
            let rel = |t: u64| t.saturating_sub(first) as f64 / 1e9;
            return Err(format!(
                "the time window ({:.6}..{:.6} s after the first event) holds none of the capture's events (0..{:.6} s)",
                rel(start),
                if end == u64::MAX { f64::INFINITY } else { rel(end) },
                rel(last)
            ));
        }
        filter.time = Some((start, end));
    }
    Ok(())
}

/// Symbols from --kallsyms, else the log's; none with --raw-ip.
fn symbols(cli: &Cli, log: &mut Log, override_syms: Option<(Kallsyms, String)>) -> Symbols {
    let syms = match override_syms {
        Some((k, name)) => Symbols {
            table: Some(k),
            raw: cli.raw_ip,
            source: name,
        },
        None => Symbols {
            raw: cli.raw_ip,
            ..Symbols::of_log(log)
        },
    };
    if cli.raw_ip {
        Symbols {
            source: "raw addresses (--raw-ip)".into(),
            ..syms
        }
    } else {
        syms
    }
}

/// `--events`: the listing instead of a report.
fn list_events(cli: &Cli, log: &Log, symbols: &Symbols, filter: &filter::Filter) -> ExitCode {
    for p in &cli.event {
        if !log
            .formats
            .iter()
            .any(|f| events::event_selected(std::slice::from_ref(p), f))
        {
            let known: Vec<&str> = log.formats.iter().map(|f| f.name.as_str()).collect();
            return fail(
                EXIT_USAGE,
                format!(
                    "--event {p}: no such event in the log (it has: {})",
                    known.join(", ")
                ),
            );
        }
    }
    let listing = events::Listing {
        log,
        symbols,
        filter,
        events: &cli.event,
    };
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    match listing
        .run(&mut stdout)
        .and_then(|r| stdout.flush().map(|_| r))
    {
        Ok((_, limits)) => {
            if !cli.quiet {
                for l in limits {
                    eprintln!("kmemtrace-report: {l}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(EXIT_OUTPUT, format!("writing the events: {e}")),
    }
}
