//! The three things kmemtraced does: record live in its own instance
//! (until a signal, a duration, or the traced command's exit), drain the
//! top-level buffer left by boot-time tracing, and remove stale instances.

use crate::cli::Cli;
use crate::events::{self, Event};
use crate::failure::{Failure, Result};
use crate::metadata;
use crate::session::{Plan, Report, Session};
use crate::status::{self, StatusLine, Summary};
use crate::sys;
use crate::tracefs::{Instance, TraceDir, Tracefs};
use nix::sys::signal::Signal;
use std::fs::{File, OpenOptions};
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How often periodic statistics and pid→comm snapshots are written.
const PERIODIC: Duration = Duration::from_secs(10);
/// Time allowed, after the events are disabled, for event writers already
/// inside a tracepoint to commit before the final drain.
const QUIESCE: Duration = Duration::from_millis(20);

fn say(quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("kmemtraced: {msg}");
    }
}

/// Opens the output: `-` is standard output (never a terminal); a file is
/// created or truncated with mode 0600 and never through a symlink.
pub fn open_output(p: &Path) -> Result<(File, String)> {
    if p.as_os_str() == "-" {
        let out = std::io::stdout();
        if out.is_terminal() {
            return Err(Failure::usage(
                "refusing to write the binary log to a terminal: redirect standard output or use -o FILE",
            ));
        }
        let fd = out
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Failure::runtime(format!("duplicating standard output: {e}")))?;
        return Ok((File::from(fd), "standard output".into()));
    }
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                Failure::usage(format!(
                    "refusing to write the log through the symlink {}",
                    p.display()
                ))
            } else {
                Failure::usage(format!("cannot create the log {}: {e}", p.display()))
            }
        })?;
    // An existing file keeps its mode on truncation: tighten it (regular
    // files only: never chmod a device such as /dev/null).
    if let Ok(m) = f.metadata() {
        if m.is_file() && m.permissions().mode() & 0o077 != 0 {
            let _ = f.set_permissions(std::fs::Permissions::from_mode(0o600));
        }
    }
    Ok((f, p.display().to_string()))
}

/// `--cleanup`.
pub fn cleanup(cli: &Cli) -> Result<()> {
    let tfs = Tracefs::find(cli.tracefs.as_deref())?;
    let mut errors = Vec::new();
    let removed = tfs.remove_stale(&mut errors);
    for r in &removed {
        say(cli.quiet, &format!("removed stale instance {r}"));
    }
    if removed.is_empty() && errors.is_empty() {
        say(cli.quiet, "no stale instances");
    }
    if let Some(e) = errors.first() {
        return Err(Failure::runtime(format!("could not remove instance {e}")));
    }
    Ok(())
}

/// Threads of a process: /proc/<pid>/task.
fn threads_of(pid: u32) -> Result<Vec<u32>> {
    let rd = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|_| Failure::usage(format!("no process with pid {pid}")))?;
    Ok(rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// A pid no task has now (counting down from `pid_max`).
fn unused_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(32768);
    (1..max)
        .rev()
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap_or(max.saturating_sub(1))
}

fn configure(inst: &TraceDir, cli: &Cli, pid_filter: bool) -> Result<()> {
    if let Some(kb) = cli.subbuf_kb {
        if !inst.exists("buffer_subbuf_size_kb") {
            return Err(Failure::usage(
                "--subbuf-kb: this kernel cannot change the sub-buffer size (no buffer_subbuf_size_kb; needs Linux 6.8)",
            ));
        }
        inst.write("buffer_subbuf_size_kb", &kb.to_string())
            .map_err(|e| Failure::usage(format!("--subbuf-kb {kb}: {}", e.msg)))?;
    }
    if let Some(kb) = cli.buffer_kb {
        inst.write("buffer_size_kb", &kb.to_string())
            .map_err(|e| Failure::runtime(format!("-b {kb}: {}", e.msg)))?;
    }
    if let Some(clock) = &cli.clock {
        let avail = inst.read_string("trace_clock").unwrap_or_default();
        let names: Vec<&str> = avail
            .split_whitespace()
            .map(|s| s.trim_matches(|c| c == '[' || c == ']'))
            .collect();
        if !names.contains(&clock.as_str()) {
            return Err(Failure::usage(format!(
                "unknown trace clock `{clock}` (this kernel has: {})",
                names.join(", ")
            )));
        }
        inst.write("trace_clock", clock)?;
    }
    inst.write("buffer_percent", &cli.buffer_percent.to_string())?;
    // pid→tgid for the log; harmless if the option is missing.
    let _ = inst.write("options/record-tgid", "1");
    if pid_filter {
        inst.write("options/event-fork", "1")?;
    }
    let mut tids = Vec::new();
    for &p in &cli.pids {
        tids.extend(threads_of(p)?);
    }
    if cli.follow_command && tids.is_empty() {
        // An empty list traces everyone: until the command adds its own pid
        // (between fork and exec), hold the filter with an unused pid.
        tids.push(unused_pid());
    }
    if !tids.is_empty() {
        let list: Vec<String> = tids.iter().map(|t| t.to_string()).collect();
        inst.write("set_event_pid", &list.join(" "))?;
    }
    Ok(())
}

fn set_events(dir: &TraceDir, events: &[Event], on: bool) -> Result<()> {
    let v = if on { "1" } else { "0" };
    let mut first_err = None;
    for e in events {
        if let Err(err) = dir.write(&format!("events/{}/enable", e.path()), v) {
            first_err.get_or_insert(err);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Keeps the recorder's own threads out of the trace (their allocations
/// would be recorded otherwise).
fn exclude_own_threads(dir: &TraceDir, session: &mut Session) {
    let tids: Vec<String> = session.thread_ids().iter().map(|t| t.to_string()).collect();
    if let Err(e) = dir.write("set_event_notrace_pid", &tids.join(" ")) {
        session.note(format!(
            "the recorder's own threads are traced too: {}",
            e.msg
        ));
    }
}

fn describe_exit(st: std::process::ExitStatus) -> (String, i32) {
    match (st.code(), st.signal()) {
        (Some(c), _) => (format!("command exited {c}"), c),
        (None, Some(s)) => {
            let name = Signal::try_from(s).map_or_else(|_| s.to_string(), |x| x.to_string());
            (format!("command killed by {name}"), 128 + s)
        }
        _ => ("command exited".into(), -1),
    }
}

/// Records live: the default mode.
pub fn record(cli: &Cli, argv: Vec<String>) -> Result<()> {
    let Some(output) = cli.output.clone() else {
        return Err(Failure::usage(
            "no output: give -o FILE (or -o - for standard output)",
        ));
    };
    if cli.follow_command && cli.command.is_empty() {
        return Err(Failure::usage(
            "-F/--follow-command needs a command after `--`",
        ));
    }
    let tfs = Tracefs::find(cli.tracefs.as_deref())?;
    let mut errs = Vec::new();
    for r in tfs.remove_stale(&mut errs) {
        say(cli.quiet, &format!("removed stale instance {r}"));
    }
    let events = events::resolve(&tfs.top, &cli.events)?;
    for &p in &cli.pids {
        threads_of(p)?;
    }
    let (out, out_name) = open_output(&output)?;
    let signals = sys::block_signals()
        .map_err(|e| Failure::runtime(format!("setting up signal handling: {e}")))?;

    let mut inst = Instance::create(&tfs)?;
    let pid_filter = !cli.pids.is_empty() || cli.follow_command;
    configure(&inst.dir, cli, pid_filter)?;
    let layout = metadata::layout(&inst.dir)?;
    let plan = Plan {
        dir: inst.dir.clone(),
        top: tfs.top.clone(),
        instance: inst.name.clone(),
        events: events.clone(),
        layout,
        compression: cli.compress,
        flush_interval: cli.flush_interval,
        buffer_percent: cli.buffer_percent,
        drain_only: None,
        reader_nice: cli.reader_nice,
        command_line: metadata::shell_quote(argv),
    };
    let mut session = Session::start(plan, out)?;
    if !cli.trace_self {
        exclude_own_threads(&inst.dir, &mut session);
    }

    // Go.
    let enabled = set_events(&inst.dir, &events, true);
    let _ = inst.dir.write("tracing_on", "1");
    session.mark_started();
    let mut child: Option<Child> = None;
    let mut failure: Option<Failure> = enabled.err();
    if failure.is_none() && !cli.command.is_empty() {
        let mut cmd = Command::new(&cli.command[0]);
        cmd.args(&cli.command[1..]);
        if output.as_os_str() == "-" {
            // The log owns standard output: the command's goes to stderr.
            if let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() {
                cmd.stdout(Stdio::from(fd));
            }
        }
        let filter = if cli.follow_command {
            OpenOptions::new()
                .append(true)
                .open(inst.dir.file("set_event_pid"))
                .ok()
        } else {
            None
        };
        match sys::spawn_command(&mut cmd, filter) {
            Ok(c) => child = Some(c),
            Err(e) => {
                failure = Some(Failure::runtime(format!(
                    "cannot run `{}`: {e}",
                    cli.command[0]
                )))
            }
        }
    }

    // Wait for the end.
    let tty = std::io::stderr().is_terminal() && !cli.quiet;
    let color = status::use_color(tty);
    let mut status_line = tty.then(|| StatusLine::new(color));
    let deadline = cli.duration.map(|d| session.started + d);
    let mut next_status = Instant::now() + Duration::from_secs(1);
    let mut next_periodic = Instant::now() + PERIODIC;
    let mut exit_status = None;
    let mut reason = String::new();
    if let Some(f) = &failure {
        reason = format!("error: {}", f.msg);
    }
    while failure.is_none() {
        let now = Instant::now();
        let mut wake = next_status.min(next_periodic);
        if let Some(d) = deadline {
            wake = wake.min(d);
        }
        let _ = sys::wait_readable(
            &[signals.as_fd(), session.shared.alarm.fd()],
            wake.saturating_duration_since(now),
        );
        let mut stop_signal = None;
        for s in sys::pending_signals(&signals) {
            if s != Signal::SIGCHLD {
                stop_signal.get_or_insert(s);
            }
        }
        if let Some(c) = child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                let (r, code) = describe_exit(st);
                reason = r;
                exit_status = Some(code);
                child = None;
                break;
            }
        }
        if let Some(s) = stop_signal {
            reason = format!("signal {s}");
            if let Some(c) = &child {
                sys::kill(c.id(), s);
            }
            break;
        }
        if session.failed() {
            reason = "error".into();
            break;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            reason = "duration".into();
            break;
        }
        if now >= next_status {
            if !session.adopt_onlined_cpus().is_empty() && !cli.trace_self {
                exclude_own_threads(&inst.dir, &mut session);
            }
            if let Some(sl) = status_line.as_mut() {
                sl.update(&session.counters, &session.lost_so_far());
            }
            next_status = now + Duration::from_secs(1);
        }
        if now >= next_periodic {
            session.periodic();
            next_periodic = now + PERIODIC;
        }
    }

    // Stop: no new events, let writers in flight commit, then drain.
    let _ = set_events(&inst.dir, &events, false);
    let _ = inst.dir.write("tracing_on", "0");
    std::thread::sleep(QUIESCE);
    if let Some(c) = child.as_mut() {
        // Signalled while the command runs: give it a moment to exit so
        // that its status is in the log; it is not waited for beyond that.
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            if let Ok(Some(st)) = c.try_wait() {
                exit_status = Some(describe_exit(st).1);
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if let Some(sl) = status_line.as_mut() {
        sl.clear();
    }
    let written_before = session.counters.clone();
    let cpus = session.cpus.len();
    let res = session.finish(&reason, exit_status);
    let removed = inst.remove();
    let report = res?;
    if let Err(e) = removed {
        say(
            cli.quiet,
            &format!("could not remove instance {}: {e}", inst.name),
        );
    }
    if !cli.quiet {
        print_summary(&written_before, cpus, &report, &reason, &out_name, color);
    }
    if let Some(f) = failure {
        return Err(f);
    }
    if let Some(e) = report.errors.first() {
        return Err(Failure::runtime(e.clone()));
    }
    Ok(())
}

fn print_summary(
    c: &crate::status::Counters,
    cpus: usize,
    r: &Report,
    reason: &str,
    out: &str,
    color: bool,
) {
    let (cpu_time, rss) = sys::self_usage();
    let s = Summary {
        elapsed: r.elapsed,
        events: c.events(),
        cpus,
        written: c.written.load(std::sync::atomic::Ordering::Relaxed),
        lost: r.lost.clone(),
        backpressure: c.backpressure(),
        cpu_time,
        peak_rss_kib: rss,
        reason: reason.to_string(),
        output: out.to_string(),
    };
    eprintln!("{}", s.render(color));
}

/// `--boot`: drains the top-level buffer as boot-time tracing left it.
pub fn boot(cli: &Cli, argv: Vec<String>) -> Result<()> {
    let Some(output) = cli.output.clone() else {
        return Err(Failure::usage(
            "no output: give -o FILE (or -o - for standard output)",
        ));
    };
    let tfs = Tracefs::find(cli.tracefs.as_deref())?;
    let top = tfs.top.clone();
    let mut evs = events::enabled_in(&top);
    if let Ok(defaults) = events::resolve(&top, &[]) {
        for d in defaults {
            if !evs.contains(&d) {
                evs.push(d);
            }
        }
    }
    let layout = metadata::layout(&top)?;
    let (out, out_name) = open_output(&output)?;
    let nr_pages = top
        .read_string("buffer_size_kb")
        .ok()
        .and_then(|s| crate::session::parse_buffer_kb(&s))
        .map_or(4096, |kb| {
            u64::from(kb) * 1024 / u64::from(layout.subbuf_size.max(1))
        });
    let plan = Plan {
        dir: top.clone(),
        top,
        instance: String::new(),
        events: evs,
        layout,
        compression: cli.compress,
        flush_interval: cli.flush_interval,
        buffer_percent: cli.buffer_percent,
        // Events may still be arriving: take at most twice the buffer.
        drain_only: Some(2 * nr_pages + 16),
        reader_nice: cli.reader_nice,
        command_line: metadata::shell_quote(argv),
    };
    let mut session = Session::start(plan, out)?;
    if let Some(t) = metadata::boot_trace_clock_switch() {
        session.note(format!(
            "the kernel switched its default trace clock {t:.3} s after boot (unstable clock), which emptied the buffer: boot events before then are missing; boot with trace_clock=global (or trace_clock=local) to keep them"
        ));
    }
    let counters = session.counters.clone();
    let cpus = session.cpus.len();
    let report = session.finish("boot drain", None)?;
    if !cli.quiet {
        let color = status::use_color(std::io::stderr().is_terminal());
        print_summary(&counters, cpus, &report, "boot drain", &out_name, color);
    }
    if let Some(e) = report.errors.first() {
        return Err(Failure::runtime(e.clone()));
    }
    Ok(())
}
