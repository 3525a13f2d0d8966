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
use kmemtrace_cli::exit;
use kmemtrace_format::log::Log;
use kmemtrace_kernel::Kallsyms;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

/// Rows per table of the HTML page unless `-l` says otherwise.
const HTML_LINES: usize = 500;

/// Why the report stops: a code of the one table and one line.
type Stop = (exit::Code, String);

fn usage(msg: impl Into<String>) -> Stop {
    (exit::USAGE, msg.into())
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
    match run(&mut cli) {
        Ok(code) => code.exit_code(),
        Err((code, msg)) => {
            eprintln!("kmemtrace-report: {msg}");
            code.exit_code()
        }
    }
}

/// What the options ask for, parsed before the log is opened.
struct Asked {
    sort: Vec<model::SortKey>,
    page_cull: Vec<model::CullKey>,
    filter: filter::Filter,
    window: Option<(Option<filter::TimePoint>, Option<filter::TimePoint>)>,
    override_syms: Option<(Kallsyms, String)>,
}

fn parse_asked(cli: &Cli) -> Result<Asked, Stop> {
    let sort = model::parse_sort(&cli.sort).map_err(usage)?;
    let page_cull = model::parse_cull(&cli.cull).map_err(|e| usage(format!("--cull: {e}")))?;
    let mut filter = filter::Filter {
        callsite: cli.callsite.clone(),
        ..Default::default()
    };
    if let Some(c) = &cli.cpu {
        filter.cpus = Some(filter::parse_cpu_list(c).map_err(usage)?);
    }
    let window = cli
        .time
        .as_deref()
        .map(filter::parse_time_window)
        .transpose()
        .map_err(usage)?;
    let override_syms = match &cli.kallsyms {
        None => None,
        Some(p) => {
            let b = std::fs::read(p).map_err(|e| usage(format!("{}: {e}", p.display())))?;
            let k = Kallsyms::parse(&String::from_utf8_lossy(&b))
                .map_err(|e| usage(format!("{}: {e}", p.display())))?;
            Some((k, p.display().to_string()))
        }
    };
    Ok(Asked {
        sort,
        page_cull,
        filter,
        window,
        override_syms,
    })
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
    } = parse_asked(cli)?;
    let mut log = kmemtrace_import::open_log(&cli.file).map_err(|e| {
        let name = if cli.file.as_os_str() == "-" {
            "<stdin>".to_string()
        } else {
            cli.file.display().to_string()
        };
        (exit::INPUT, format!("{name}: {e}"))
    })?;
    // The symbol table is parsed: its text need not stay in memory.
    for m in &mut log.metas {
        use kmemtrace_format::records::MetaKind;
        if matches!(m.kind, MetaKind::Kallsyms | MetaKind::KallsymsPart) {
            m.content = Vec::new();
        }
    }
    select_tasks_and_time(cli, &log, window, &mut filter).map_err(usage)?;
    let syms = symbols(cli, &mut log, override_syms);
    let code = if cli.events {
        if !cli.all_tasks && cli.pid.is_empty() {
            filter.leave_out_recorder(&log);
        }
        list_events(cli, &log, &syms, &filter)?
    } else {
        report(cli, &log, &syms, filter, sort, page_cull)?
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

/// Which text sections the options ask for. Section flags add sections
/// to what the other options imply: `-s` names call-site sort keys, so it
/// shows the call-site table beside `--caches --matrix` (as the README's
/// example reads).
fn text_sections(cli: &Cli, page_only: bool, color: bool) -> text::Sections {
    let any_section = cli.caller
        || cli.caches
        || cli.matrix
        || cli.alloc
        || cli.leaks
        || cli.misuse
        || cli.page
        || cli.live;
    let sorted = cli.sort != cli::DEFAULT_SORT;
    text::Sections {
        callsites: !any_section || ((cli.caller || sorted) && !page_only),
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
    }
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
                    text::thousands(p.subbufs_total),
                    text::thousands(p.events),
                    p.elapsed.as_secs_f64()
                )
            })
        }
    })
}

/// A filter that selects nothing is a usage error, as `--cpu 7` is: an
/// empty report would read as "nothing allocates".
fn selected_something(cli: &Cli, log: &Log, r: &model::Report) -> Result<(), Stop> {
    let asked: Vec<String> = [
        (!cli.pid.is_empty()).then(|| {
            let p: Vec<String> = cli.pid.iter().map(i32::to_string).collect();
            format!("--pid {}", p.join(","))
        }),
        cli.comm.as_ref().map(|c| format!("--comm {c}")),
        cli.callsite.as_ref().map(|c| format!("--callsite {c}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    // --callsite selects slab events only: the page events stay.
    let slab = r.summary.alloc_events + r.summary.free_events;
    let pages = r.pages.allocations.requests + r.pages.frees.requests;
    let events = if cli.callsite.is_some() {
        slab
    } else {
        slab + pages
    };
    if asked.is_empty() || events > 0 || r.capture.kmem_events == 0 {
        return Ok(());
    }
    // A name its workers extend (stress-ng, stress-ng-fork): say the glob.
    let glob_hint = cli
        .comm
        .as_ref()
        .filter(|c| !c.contains(['*', '?']))
        .filter(|c| {
            log.pids
                .pids()
                .into_iter()
                .filter_map(|p| log.pids.comm(p))
                .any(|n| n.len() > c.len() && n.starts_with(c.as_str()))
        })
        .map(|c| format!("; '{c}*' takes the tasks whose names start so"))
        .unwrap_or_default();
    Err(usage(format!(
        "{}: selects none of the capture's {} kmem events{glob_hint} ({}; --callsite matches slab call sites' symbols, a glob with * and ?, else a part of the name)",
        asked.join(" "),
        text::thousands(r.capture.kmem_events),
        tasks_in(log)
    )))
}

/// `tasks in the log: 1 (systemd), 2 (kthreadd), ... and 40 more`.
fn tasks_in(log: &Log) -> String {
    let mut tasks: Vec<(i32, &str)> = log
        .pids
        .pids()
        .into_iter()
        .filter_map(|p| Some((p, log.pids.comm(p)?)))
        .collect();
    tasks.sort_unstable();
    let shown: Vec<String> = tasks
        .iter()
        .take(12)
        .map(|(p, c)| format!("{p} ({c})"))
        .collect();
    let more = if tasks.len() > shown.len() {
        format!(", and {} more", tasks.len() - shown.len())
    } else {
        String::new()
    };
    format!("tasks in the log: {}{more}", shown.join(", "))
}

/// Writes `text` to standard output; a reader that went away is no error.
fn write_stdout(text: &str, what: &str) -> Result<(), Stop> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err((exit::OUTPUT, format!("writing {what}: {e}")))
        }
        _ => Ok(()),
    }
}

/// Writes the HTML page to `path` under the output policy.
fn write_html(cli: &Cli, path: &std::path::Path, page: &str) -> Result<(), Stop> {
    // The page holds kernel addresses: the policy's owner-only file.
    let mut f = kmemtrace_cli::output::create(path).map_err(|r| (r.code, r.msg))?;
    if let Err(e) = f.file.write_all(page.as_bytes()) {
        let _ = f.restore();
        return Err((exit::OUTPUT, format!("{}: {e}", path.display())));
    }
    if let (Some(note), false) = (f.kept_note(), cli.quiet) {
        eprintln!("kmemtrace-report: {note}");
    }
    Ok(())
}

/// The report: analysis, then text, JSON or HTML.
fn report(
    cli: &Cli,
    log: &Log,
    syms: &Symbols,
    filter: filter::Filter,
    sort: Vec<model::SortKey>,
    page_cull: Vec<model::CullKey>,
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
    };
    // A pid-filtered recording: its traced tree, unless asked otherwise.
    let traced_tree = cli.pid.is_empty() && cli.comm.is_none() && !cli.all_tasks;
    opts.select_as_recorded(log, traced_tree);
    let out = analyse_with_progress(cli, log, syms, opts);
    selected_something(cli, log, &out.report)?;

    let html_to_stdout = cli.html.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = cli.html.as_deref().filter(|_| !html_to_stdout) {
        write_html(
            cli,
            path,
            &html::render(&out.report, cli.lines.unwrap_or(HTML_LINES)),
        )?;
    }
    let text = if html_to_stdout {
        html::render(&out.report, cli.lines.unwrap_or(HTML_LINES))
    } else if cli.json {
        let mut s = serde_json::to_string_pretty(&out.report)
            .map_err(|e| (exit::OUTPUT, format!("JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        let color = kmemtrace_kernel::human::use_color(std::io::stdout().is_terminal());
        text::render(&out.report, &text_sections(cli, page_only, color))
    };
    write_stdout(&text, "the report")?;
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
        filter.comm_pids = Some(filter::tasks_named(c, &log.pids)?);
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
fn list_events(
    cli: &Cli,
    log: &Log,
    symbols: &Symbols,
    filter: &filter::Filter,
) -> Result<exit::Code, Stop> {
    for p in &cli.event {
        if !log
            .formats
            .iter()
            .any(|f| events::event_selected(std::slice::from_ref(p), f))
        {
            let known: Vec<&str> = log.formats.iter().map(|f| f.name.as_str()).collect();
            return Err(usage(format!(
                "--event {p}: no such event in the log (it has: {})",
                known.join(", ")
            )));
        }
    }
    let listing = events::Listing {
        log,
        symbols,
        filter,
        events: &cli.event,
    };
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let (printed, limits) = match listing
        .run(&mut stdout)
        .and_then(|r| stdout.flush().map(|_| r))
    {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
        Err(e) => return Err((exit::OUTPUT, format!("writing the events: {e}"))),
    };
    if printed == 0 && !cli.pid.is_empty() {
        return Err(usage(format!(
            "--pid: no event of the log is by these tasks ({})",
            tasks_in(log)
        )));
    }
    if !cli.quiet {
        for l in events::limits_once(&limits) {
            eprintln!("kmemtrace-report: {l}");
        }
    }
    Ok(exit::OK)
}
