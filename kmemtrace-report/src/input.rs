//! The log as the options select it: the options parsed before it is
//! opened, then checked against it (CPUs, tasks, time window), its
//! symbols, and whether the selection kept any event.

use crate::cli::Cli;
use crate::{usage, Stop};
use kmemtrace_analysis::{filter, model, Symbols};
use kmemtrace_cli::exit;
use kmemtrace_import::log::Log;
use kmemtrace_kernel::human::thousands;
use kmemtrace_kernel::kallsyms::Kallsyms;

/// What the options ask for, parsed before the log is opened.
pub struct Asked {
    pub sort: Vec<model::SortKey>,
    pub page_cull: Vec<model::CullKey>,
    pub filter: filter::Filter,
    pub window: Option<(Option<filter::TimePoint>, Option<filter::TimePoint>)>,
    pub override_syms: Option<(Kallsyms, String)>,
}

pub fn parse_asked(cli: &Cli) -> Result<Asked, Stop> {
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

/// Opens the input (`-` is standard input) with its symbol table parsed.
pub fn open(cli: &Cli) -> Result<Log, Stop> {
    let mut log = kmemtrace_import::open_capture(&cli.file).map_err(|e| {
        let name = match &cli.file[..] {
            [one] if one.as_os_str() == "-" => "<stdin>".to_string(),
            [one] => one.display().to_string(),
            _ => "the capture".to_string(),
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
    Ok(log)
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

/// The task, CPU and time filters, checked against the log.
pub fn select_tasks_and_time(
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
        let first = kmemtrace_import::walk::first_event_ts(log).unwrap_or(0);
        let start = a.map_or(0, |t| t.resolve(first));
        let end = b.map_or(u64::MAX, |t| t.resolve(first));
        if end < start {
            return Err("the time window ends before it starts".into());
        }
        // A window beside the capture selects nothing: say so, as --cpu
        // does for a CPU the log does not have.
        let last = kmemtrace_import::walk::last_event_ts(log).unwrap_or(first);
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
pub fn symbols(cli: &Cli, log: &mut Log, override_syms: Option<(Kallsyms, String)>) -> Symbols {
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

/// A filter that selects nothing is a usage error, as `--cpu 7` is: an
/// empty report would read as "nothing allocates".
pub fn selected_something(cli: &Cli, log: &Log, r: &model::Report) -> Result<(), Stop> {
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
        thousands(r.capture.kmem_events),
        tasks_in(log)
    )))
}

/// `tasks in the log: 1 (systemd), 2 (kthreadd), ... and 40 more`.
pub fn tasks_in(log: &Log) -> String {
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
