//! The three things kmemtraced does: record live in its own instance
//! (until a signal, a duration, or the traced command's exit), drain the
//! top-level buffer left by boot-time tracing, and remove stale instances.

use crate::cli::{wake_mark, Cli, ReaderRealtime};
use crate::command::{
    describe_exit, pass_on, resolve, start_command, wait_briefly, wait_passing_signals,
};
use crate::events::{self, Event};
use crate::failure::{Failure, Result};
use crate::guard::Guardian;
use crate::metadata;
use crate::output;
use crate::session::{Finished, Plan, Session};
use crate::status::{self, StatusLine, SummaryLine};
use crate::sys;
use crate::tracefs::{Instance, TraceDir, Tracefs};
use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_kernel::{kmem, KmemKind};
use nix::sys::signal::Signal;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Child;
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

/// Threads of a process: `/proc/<pid>/task`.
fn threads_of(pid: u32) -> Result<Vec<u32>> {
    let rd = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|_| Failure::usage(format!("no process with pid {pid}")))?;
    Ok(rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect())
}

/// The parent of process `pid` (`PPid` of /proc/PID/status).
fn parent_of(pid: u32) -> Option<u32> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    st.lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The processes running now that descend from `pids` (not `pids`
/// themselves), in pid order: with `-p`, the kernel's `event-fork` option
/// follows only forks made after the filter is set, so workers a parent
/// started earlier are added here.
fn running_descendants(pids: &[u32]) -> Vec<u32> {
    let procs: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| Some((p, parent_of(p)?)))
                .collect()
        })
        .unwrap_or_default();
    let mut tree: std::collections::BTreeSet<u32> = pids.iter().copied().collect();
    // Parents come and go in any pid order: repeat until nothing is added.
    loop {
        let before = tree.len();
        for &(p, parent) in &procs {
            if tree.contains(&parent) {
                tree.insert(p);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    tree.into_iter().filter(|p| !pids.contains(p)).collect()
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

/// The sub-buffer size (KiB) asked for where the kernel can change it and
/// the per-CPU buffer holds [`MIN_SUBBUFS_PER_CPU`] of them.
pub const DEFAULT_SUBBUF_KB: u32 = 64;
/// The fewest sub-buffers per CPU the default sub-buffer size leaves.
pub const MIN_SUBBUFS_PER_CPU: u32 = 64;
/// The per-CPU buffer (KiB) asked for where `-b` is not given and memory
/// allows ([`default_buffer_kb`]).
pub const DEFAULT_BUFFER_KB: u32 = 4096;

/// The sub-buffer size (KiB) kmemtraced asks for where the kernel can
/// change it (6.8+) and `--subbuf-kb` is not given: [`DEFAULT_SUBBUF_KB`],
/// or less to keep at least [`MIN_SUBBUFS_PER_CPU`] sub-buffers per CPU;
/// `None` (the kernel's one page) below 8 KiB. Each sub-buffer is one
/// read(), its ring-buffer locking, a wake-up of the reader and one
/// header, so bigger ones cost less per event; too few of them per CPU
/// leave a burst no room while a reader takes one. docs/benchmarks.md
/// ("Why the defaults") has the rounds.
fn default_subbuf_kb(per_cpu_kb: u32) -> Option<u32> {
    let fit = (per_cpu_kb / MIN_SUBBUFS_PER_CPU).min(DEFAULT_SUBBUF_KB);
    // A power of two: the kernel rounds sizes up to one (an order of pages).
    let kb = if fit == 0 { 0 } else { 1 << fit.ilog2() };
    (kb >= 8).then_some(kb)
}

/// The per-CPU buffer (KiB) when `-b` is not given: 4 MiB, or less to keep
/// all CPUs' buffers within 1/64 of the memory available now; `None` (the
/// kernel's own, 1408 KiB on most) where that is no more than the kernel's.
/// A process exiting frees its memory a page at a time, tens of thousands
/// of page-free events within milliseconds, which a small buffer cannot
/// hold until its reader runs (docs/benchmarks.md, "Why the defaults").
fn default_buffer_kb(kernel_kb: u32, cpus: u64, available_kb: Option<u64>) -> Option<u32> {
    let share = available_kb.map_or(0, |a| a / 64 / cpus.max(1));
    let kb = u64::from(DEFAULT_BUFFER_KB).min(share);
    (kb > u64::from(kernel_kb)).then_some(kb as u32)
}

/// `MemAvailable` of /proc/meminfo, in KiB.
fn mem_available_kb() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    })
}

/// Sets the instance up; returns the pids put in `set_event_pid` (the
/// asked processes' threads; with `-F` none until the command starts).
fn configure(inst: &TraceDir, cli: &Cli, pid_filter: bool) -> Result<Vec<u32>> {
    let can_size_subbufs = inst.exists("buffer_subbuf_size_kb");
    let kernel_kb = || crate::session::buffer_kb(inst);
    // Where the kernel refuses the default, its own size stays.
    let default_kb = cli
        .buffer_kb
        .is_none()
        .then(|| {
            let cpus = metadata::online_cpus().len() as u64;
            let kb = default_buffer_kb(kernel_kb()?, cpus, mem_available_kb())?;
            inst.write_io("buffer_size_kb", &kb.to_string()).ok()?;
            Some(kb)
        })
        .flatten();
    if let Some(kb) = cli.subbuf_kb {
        if !can_size_subbufs {
            return Err(Failure::usage(
                "--subbuf-kb: this kernel cannot change the sub-buffer size (no buffer_subbuf_size_kb; needs Linux 6.8)",
            ));
        }
        inst.write("buffer_subbuf_size_kb", &kb.to_string())
            .map_err(|e| Failure::usage(format!("--subbuf-kb {kb}: {}", e.msg)))?;
        // The kernel takes a power of two of pages, rounding up.
        let got = inst
            .read_string("buffer_subbuf_size_kb")
            .unwrap_or_default();
        if got.trim().parse::<u32>().is_ok_and(|g| g != kb) {
            let msg = format!(
                "--subbuf-kb {kb}: the kernel made the sub-buffers {} KiB (a power of two of pages)",
                got.trim()
            );
            say(cli.quiet, &msg);
        }
    } else if can_size_subbufs {
        let per_cpu_kb = cli.buffer_kb.or(default_kb).or_else(kernel_kb);
        // Only a speed-up: where the kernel refuses, its pages do.
        if let Some(kb) = per_cpu_kb.and_then(default_subbuf_kb) {
            let _ = inst.write("buffer_subbuf_size_kb", &kb.to_string());
        }
    }
    if let Some(kb) = cli.buffer_kb {
        inst.write_io("buffer_size_kb", &kb.to_string())
            .map_err(|e| buffer_refused(inst, kb, &e))?;
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
    if let Some(crate::cli::CpuList(cpus)) = &cli.cpus {
        let online = metadata::online_cpus();
        if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(Failure::usage(format!(
                "-C: CPU {c} is not online (online: {})",
                online
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )));
        }
        inst.write("tracing_cpumask", &cpumask_hex(cpus))?;
    }
    // pid→tgid for the log; harmless if the option is missing.
    let _ = inst.write("options/record-tgid", "1");
    if pid_filter {
        inst.write("options/event-fork", "1")?;
    }
    let mut tids = Vec::new();
    for &p in &cli.pids {
        tids.extend(threads_of(p)?);
    }
    let descendants = running_descendants(&cli.pids);
    for &p in &descendants {
        // One may exit meanwhile: it then has nothing left to trace.
        tids.extend(threads_of(p).unwrap_or_default());
    }
    if !cli.pids.is_empty() {
        say(
            cli.quiet,
            &traced_processes(&cli.pids, &descendants, tids.len()),
        );
    }
    if !tids.is_empty() {
        inst.write("set_event_pid", &pid_list(&tids))?;
    } else if cli.follow_command {
        // An empty list traces everyone: until the command adds its own pid
        // (between fork and exec), hold the filter with an unused pid.
        inst.write("set_event_pid", &unused_pid().to_string())?;
    }
    Ok(tids)
}

/// What `-p` traces, said at the start: `tracing pid 13586 and its 4
/// running descendants (12 threads); their forks from now on too`.
fn traced_processes(pids: &[u32], descendants: &[u32], threads: usize) -> String {
    let asked = match pids {
        [p] => format!("pid {p}"),
        _ => format!("pids {}", pid_list(pids).replace(' ', ",")),
    };
    let their = if pids.len() == 1 { "its" } else { "their" };
    let desc = match descendants.len() {
        0 => String::new(),
        1 => format!(" and {their} running descendant {}", descendants[0]),
        n => format!(" and {their} {n} running descendants"),
    };
    format!("tracing {asked}{desc} ({threads} threads); what they fork from now on too")
}

/// `tracing_cpumask`'s text for `cpus`: hex, in comma-separated groups of
/// 32 CPUs, the highest first (`3` for 0-1, `1,00000000` for 32).
fn cpumask_hex(cpus: &[u32]) -> String {
    let top = cpus.iter().copied().max().unwrap_or(0) / 32;
    (0..=top)
        .rev()
        .map(|group| {
            let word = cpus
                .iter()
                .filter(|&&c| c / 32 == group)
                .fold(0u32, |w, &c| w | 1 << (c % 32));
            if group == top {
                format!("{word:x}")
            } else {
                format!("{word:08x}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Sets each `-f` on its events (those of the `-e` before it, or all
/// recorded): a filter the kernel refuses is a usage error with the
/// kernel's reason (which it leaves in the filter file).
fn apply_filters(dir: &TraceDir, top: &TraceDir, cli: &Cli, recorded: &[Event]) -> Result<()> {
    for (filter, asked) in cli.filters.iter().zip(&cli.filter_events) {
        let targets = match asked {
            Some(specs) => events::resolve(top, specs)?,
            None => recorded.to_vec(),
        };
        for e in &targets {
            let file = format!("events/{}/filter", e.path());
            if let Err(err) = dir.write_io(&file, filter) {
                let why = dir
                    .read_string(&file)
                    .ok()
                    .and_then(|t| {
                        t.lines()
                            .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| err.to_string());
                return Err(Failure::usage(format!(
                    "-f '{filter}': the kernel refused it on {}: {why}",
                    e.colon()
                )));
            }
        }
    }
    Ok(())
}

fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a pid-filtered recording asked for, for the log (see
/// kmemtrace_import::tasks): the analysis keeps these tasks and their
/// descendants, and leaves out the neighbours the kernel's filter lets
/// through around context switches and wake-ups.
fn pid_filter_meta(pids: &[u32]) -> Meta {
    let mut m = Meta::new(MetaKind::Other, pid_list(pids));
    m.name = kmemtrace_import::tasks::PID_FILTER_META.into();
    m
}

/// Why `-b KB` was refused, with what the kernel kept and what it could
/// likely give: the buffer is allocated for every CPU, from memory that is
/// available now.
fn buffer_refused(inst: &TraceDir, kb: u32, e: &std::io::Error) -> Failure {
    use kmemtrace_kernel::human::{bytes, thousands};
    let cpus = metadata::online_cpus().len().max(1) as u64;
    let kept = crate::session::buffer_kb(inst);
    let available_kb = mem_available_kb();
    let mut msg = format!(
        "-b {}: the kernel refused {} KiB per CPU ({} for {cpus} CPUs)",
        thousands(u64::from(kb)),
        thousands(u64::from(kb)),
        bytes((u64::from(kb) * 1024 * cpus) as f64)
    );
    let failure = inst.write_failure("buffer_size_kb", &kb.to_string(), e);
    if e.raw_os_error() == Some(nix::libc::ENOMEM) {
        msg += ": not enough memory";
        if let Some(avail) = available_kb {
            // Leave half of what is available to the system.
            msg += &format!(
                " ({} available; at most about -b {} leaves half of it)",
                bytes((avail * 1024) as f64),
                thousands(avail / 2 / cpus)
            );
        }
    } else {
        msg += &format!(" ({})", failure.msg);
    }
    if let Some(k) = kept {
        msg += &format!("; the buffer stays at {} KiB", thousands(u64::from(k)));
    }
    Failure {
        code: if failure.code == kmemtrace_cli::exit::INPUT.code {
            failure.code
        } else {
            kmemtrace_cli::exit::USAGE.code
        },
        msg,
    }
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

/// Lists the recorder's own threads in the log (META
/// `kmemtraced/own_tids`), for the report to leave their own events out of
/// the workload's figures. The kernel still records them: excluding them
/// there (`set_event_notrace_pid`) also drops the interrupt and RCU work
/// run while one of them is current, and the frees of what they allocate,
/// which other tasks' objects then show as double frees and missed frees.
fn declare_own_threads(session: &mut Session) -> Vec<i32> {
    let tids = with_main_thread(session.thread_ids());
    write_own_threads(session, &tids);
    tids
}

/// `tids` and this (the main) thread, sorted.
fn with_main_thread(mut tids: Vec<i32>) -> Vec<i32> {
    tids.push(sys::gettid());
    tids.sort_unstable();
    tids
}

/// Writes the META of [`declare_own_threads`].
fn write_own_threads(session: &mut Session, tids: &[i32]) {
    let list: Vec<String> = tids.iter().map(|t| t.to_string()).collect();
    let mut m = Meta::new(MetaKind::Other, list.join(" ").into_bytes());
    m.name = kmemtrace_import::tasks::RECORDER_TIDS_META.into();
    session.write_meta(m);
}

/// Adds `sched:sched_switch` filtered to switches from and to the idle
/// task (a few events per wake-up of an idle CPU): the report learns from
/// them which tasks ran with no event of their own, whose allocations and
/// frees the trace then lacks (kernels can hide tasks from tracing).
/// Nothing is added where the kernel refuses the filter, or where the user
/// asked for the event (then unfiltered).
fn add_idle_switches(dir: &TraceDir, events: &mut Vec<Event>) {
    let before = events.len();
    if events
        .iter()
        .any(|e| e.system == "sched" && e.name == "sched_switch")
    {
        return;
    }
    events::add_if_present(dir, events, "sched", "sched_switch");
    if events.len() > before
        && dir
            .write(
                "events/sched/sched_switch/filter",
                kmemtrace_import::tasks::IDLE_SWITCH_FILTER,
            )
            .is_err()
    {
        events.truncate(before);
    }
}

/// The trigger that has the kernel take a stack with each page allocation.
const PAGE_STACK_TRIGGER: &str = "stacktrace";

/// The filter that leaves out the recorder's own threads (`tids`) outside
/// interrupts (`common_flags` hard IRQ, soft IRQ or NMI: the importer's
/// [`kmemtrace_import::stacks::CONTEXT_FLAGS`], which it reads back):
/// splicing has the kernel allocate a page per sub-buffer in the reader,
/// and the writer's page cache allocates too, and each stack costs the
/// recorder CPU for allocations the report leaves out anyway. By task id,
/// not by thread name: another recorder's threads are any other task to
/// this one. Runs of consecutive ids (the threads start one after another)
/// are one range each: the kernel refuses a trigger of a page or more,
/// which a test per thread (two per CPU) reached at about 80 CPUs. `tids`
/// sorted.
fn page_stack_filter_not_ours(tids: &[i32]) -> String {
    let ours: Vec<String> = tids
        .chunk_by(|a, b| b.checked_sub(*a) == Some(1))
        .map(|run| match run {
            [first, .., last] if run.len() > 1 => {
                format!("(common_pid < {first} || common_pid > {last})")
            }
            _ => format!("common_pid != {}", run[0]),
        })
        .collect();
    format!(
        "({}) || common_flags & {:#x}",
        ours.join(" && "),
        kmemtrace_import::stacks::CONTEXT_FLAGS
    )
}

/// The recorded stall events the kernel takes a stack with
/// ([`kmemtrace_kernel::stalls::STACKED_STALL_EVENTS`]).
fn stacked_stall_events(events: &[Event]) -> impl Iterator<Item = &Event> {
    events.iter().filter(|e| {
        kmemtrace_kernel::stalls::STACKED_STALL_EVENTS
            .iter()
            .any(|t| kmemtrace_kernel::stalls::split(t) == (e.system.as_str(), e.name.as_str()))
    })
}

/// Sets the plain `stacktrace` trigger on each recorded stall event that
/// takes one: rare events, in the waiting task, whose stacks name the
/// allocation that waited. The lines of the log's stacks META for those
/// the kernel took; a note for each it refused.
fn start_stall_stacks(dir: &TraceDir, events: &[Event], notes: &mut Vec<String>) -> String {
    use kmemtrace_import::stacks::stacked_event_line;
    let mut lines = String::new();
    for e in stacked_stall_events(events) {
        match dir.write(&format!("events/{}/trigger", e.path()), PAGE_STACK_TRIGGER) {
            Ok(()) => lines.push_str(&stacked_event_line(&e.colon(), PAGE_STACK_TRIGGER)),
            Err(err) => notes.push(format!("no stacks with {}: {err}", e.colon())),
        }
    }
    lines
}

/// The stack record's event, whose format the log carries when the
/// kernel is to take a stack with every `mm_page_alloc` (or stall event)
/// recorded here
/// ([`start_page_stacks`]). `None` where `mm_page_alloc` is not recorded or
/// the kernel has no `kernel_stack` format (said in a note).
fn page_stack_event(dir: &TraceDir, events: &[Event], notes: &mut Vec<String>) -> Option<Event> {
    use kmemtrace_import::stacks::{STACK_EVENT, STACK_SYSTEM};
    if !events.iter().any(|e| e.is_kmem(KmemKind::MmPageAlloc))
        && stacked_stall_events(events).next().is_none()
    {
        return None;
    }
    let stack = Event {
        system: STACK_SYSTEM.into(),
        name: STACK_EVENT.into(),
    };
    if dir
        .file(&format!("events/{}/format", stack.path()))
        .is_file()
    {
        Some(stack)
    } else {
        notes.push("no page stacks: this kernel has no ftrace/kernel_stack event".into());
        None
    }
}

/// Sets the `stacktrace` trigger on `mm_page_alloc`, in this instance only
/// (kernels since 5.x write the stack to the instance's own buffer, right
/// after the event). Call with tracing off and the event enabled: a
/// trigger on a disabled event soft-disables it, and the kernel then takes
/// stacks of allocations it does not record.
/// Returns the trigger set, the first of these the kernel takes: without
/// the threads `own_tids` (none with `--trace-self`) and for 1 in `one_in`
/// page frames; without the sample (a kernel whose event has no `pfn`);
/// plain. The log keeps it, and the report reads the sample from it.
fn start_page_stacks(
    dir: &TraceDir,
    own_tids: &[i32],
    one_in: u32,
) -> std::result::Result<String, String> {
    const FILE: &str = "events/kmem/mm_page_alloc/trigger";
    let not_ours = (!own_tids.is_empty()).then(|| page_stack_filter_not_ours(own_tids));
    let sample = (one_in > 1).then(|| kmemtrace_import::stacks::pfn_sample_filter(one_in));
    let mut tries = Vec::new();
    if let (Some(o), Some(s)) = (&not_ours, &sample) {
        tries.push(format!("{PAGE_STACK_TRIGGER} if ({o}) && {s}"));
    }
    tries.extend(
        sample
            .iter()
            .map(|s| format!("{PAGE_STACK_TRIGGER} if {s}")),
    );
    tries.extend(
        not_ours
            .iter()
            .map(|o| format!("{PAGE_STACK_TRIGGER} if {o}")),
    );
    tries.push(PAGE_STACK_TRIGGER.to_string());
    let mut last = None;
    for t in tries {
        match dir.write(FILE, &t) {
            Ok(()) => return Ok(t),
            Err(e) => last = Some(e),
        }
    }
    Err(format!(
        "no page stacks: the kernel refused the stacktrace trigger on mm_page_alloc ({})",
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Whether the recording traces chosen processes (`-p`, `-F`) only.
fn pid_filtered(cli: &Cli) -> bool {
    !cli.pids.is_empty() || cli.follow_command
}

/// How long the traced command may take to exit after a stop signal was
/// passed on to it, while the recording goes on.
pub const COMMAND_GRACE: Duration = Duration::from_secs(10);

/// What the command line asks for that can be checked without tracefs:
/// the output's name and COMMAND, found as the shell finds it. A mistyped
/// command fails here, before tracefs or the output is touched.
fn checked_request(cli: &Cli) -> Result<(std::path::PathBuf, Option<std::path::PathBuf>)> {
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
    let program = match cli.command.first() {
        Some(c) => Some(resolve(c)?),
        None => None,
    };
    for &p in &cli.pids {
        threads_of(p)?;
    }
    if let Some(r) = cli.rotation(&output) {
        rotation_possible(&r)?;
    }
    Ok((output, program))
}

/// Opens the log, or a rotated capture's first file; with how to name
/// what was written to the user.
fn open_output(plan: &Plan, output: &std::path::Path) -> Result<(output::Destination, String)> {
    let Some(r) = &plan.rotation else {
        let out = output::open(output)?;
        let name = out.name.clone();
        return Ok((out, name));
    };
    let out = output::open(&kmemtrace_format::rotation::file_path(&r.output, 0))?;
    let name = format!(
        "{} and the files after it (one capture: kmemtrace-report {})",
        out.name,
        r.output.display()
    );
    Ok((out, name))
}

/// A rotated capture needs a file name, a budget larger than its files,
/// and no files of an earlier capture under its name (they would be
/// taken for this one's, or removed as its oldest).
fn rotation_possible(r: &crate::rotate::RotationPlan) -> Result<()> {
    if r.output.as_os_str() == "-" {
        return Err(Failure::usage(
            "--max-size, --rotate-size and --rotate-time write files: give -o FILE",
        ));
    }
    if let (Some(max), Some(file)) = (r.max_size, r.file_size) {
        if file > max / 2 {
            return Err(Failure::usage(format!(
                "--rotate-size {file} is more than half of --max-size {max}: the budget would hold at most one whole file"
            )));
        }
    }
    let earlier = kmemtrace_format::rotation::files_of(&r.output);
    if let Some((_, p)) = earlier.first() {
        return Err(Failure::usage(format!(
            "{} and {} more: files of an earlier capture named {}; move them or choose another name",
            p.display(),
            earlier.len() - 1,
            r.output.display()
        )));
    }
    Ok(())
}

/// The events `cli` asks for on this kernel, with the forks of the traced
/// tree where pids are filtered (to tell its tasks from their neighbours).
fn events_asked(cli: &Cli, top: &TraceDir) -> Result<Vec<Event>> {
    let mut events = events::resolve(top, &cli.events)?;
    events::add_stall_events(
        top,
        &mut events,
        cli.events.is_empty() && cli.stalls,
        cli.stall_detail,
    );
    if !events.iter().any(|e| e.system == kmem::SYSTEM) {
        // The log is valid, but the report and diff analyse kmem events.
        say(
            cli.quiet,
            "no kmem event selected: the log will hold only the others (kmemtrace-report and -diff analyse kmem events; --events lists any)",
        );
    }
    if pid_filtered(cli) {
        events::add_if_present(top, &mut events, "sched", "sched_process_fork");
    }
    Ok(events)
}

/// Turns every event on at once, with the page stacks' trigger, and
/// starts tracing: turned on one after another while tracing, the
/// allocations of the first would be traced and the frees of the last
/// not yet (objects that look leaked, then returned while live). The
/// error of an event the kernel would not enable.
fn start_tracing(
    cli: &Cli,
    dir: &TraceDir,
    session: &mut Session,
    events: &[Event],
    stacks: bool,
    own_tids: &[i32],
) -> Result<()> {
    let _ = dir.write("tracing_on", "0");
    let enabled = set_events(dir, events, true);
    if stacks {
        use kmemtrace_import::stacks::{page_stacks_text, PAGE_STACKS_META};
        let mut text = String::new();
        let mut notes = Vec::new();
        let page_allocs = events.iter().any(|e| e.is_kmem(KmemKind::MmPageAlloc));
        if page_allocs {
            match start_page_stacks(dir, own_tids, cli.page_stacks) {
                Ok(trigger) => text.push_str(&page_stacks_text(&trigger)),
                Err(n) => notes.push(n),
            }
        }
        text.push_str(&start_stall_stacks(dir, events, &mut notes));
        if !text.is_empty() {
            let mut m = Meta::new(MetaKind::Other, text);
            m.name = PAGE_STACKS_META.into();
            session.write_meta(m);
        }
        for n in notes {
            say(cli.quiet, &n);
            session.note(n);
        }
    }
    let _ = dir.write("tracing_on", "1");
    session.mark_started();
    enabled
}

/// The session's plan for a live recording in `inst`: its layout, the
/// readers' wake mark and priority (written to the instance), and the
/// formats the log carries: the events', the stack record's beside them
/// and the marker entries' (the kernel writes those records; there is
/// nothing to enable).
fn live_plan(
    cli: &Cli,
    tfs: &Tracefs,
    inst: &Instance,
    events: &[Event],
    stacks: Option<Event>,
    argv: Vec<String>,
) -> Result<Plan> {
    let layout = metadata::layout(&inst.dir)?;
    let buffer_kb = crate::session::buffer_kb(&inst.dir);
    let realtime = cli.reader_realtime.priority(buffer_kb);
    // Where SCHED_FIFO is refused, the readers run at their nice value
    // (and the log says so): wake them as such.
    let buffer_percent = wake_mark(
        cli.buffer_percent,
        realtime.is_some_and(sys::fifo_allowed),
        buffer_kb,
    );
    inst.dir
        .write("buffer_percent", &buffer_percent.to_string())?;
    let recorded: Vec<Event> = events.iter().cloned().chain(stacks).collect();
    Ok(Plan {
        dir: inst.dir.clone(),
        top: tfs.top.clone(),
        instance: inst.name.clone(),
        events: recorded,
        more_formats: events::marker_formats(&inst.dir),
        layout,
        compression: cli.compress,
        flush_interval: cli.flush_interval,
        buffer_percent,
        drain_only: None,
        reader_nice: cli.reader_nice,
        reader_cpus: cli.reader_cpus,
        reader_realtime: realtime,
        splice: !cli.no_splice,
        command_line: metadata::shell_quote(argv),
        rotation: cli.output.as_deref().and_then(|o| cli.rotation(o)),
    })
}

/// Records live: the default mode.
pub fn record(cli: &Cli, argv: Vec<String>) -> Result<()> {
    let (output, program) = checked_request(cli)?;
    let tfs = Tracefs::find(cli.tracefs.as_deref())?;
    let mut errs = Vec::new();
    for r in tfs.remove_stale(&mut errs) {
        say(cli.quiet, &format!("removed stale instance {r}"));
    }
    let mut events = events_asked(cli, &tfs.top)?;
    let pid_filter = pid_filtered(cli);
    let signals = sys::block_signals()
        .map_err(|e| Failure::runtime(format!("setting up signal handling: {e}")))?;

    // Everything the kernel may refuse comes before the output is touched.
    let mut inst = Instance::create(&tfs)?;
    let guardian = Guardian::start(&inst);
    let asked_pids = configure(&inst.dir, cli, pid_filter)?;
    apply_filters(&inst.dir, &tfs.top, cli, &events)?;
    if !pid_filter {
        add_idle_switches(&inst.dir, &mut events);
    }
    let mut stack_notes = Vec::new();
    let stacks = if cli.page_stacks > 0 {
        page_stack_event(&inst.dir, &events, &mut stack_notes)
    } else {
        None
    };
    let plan = live_plan(cli, &tfs, &inst, &events, stacks.clone(), argv)?;
    let (out, out_name) = open_output(&plan, &output)?;
    let (out_file, written) = out.split();
    let mut session = match Session::start(plan, out_file) {
        Ok(s) => s,
        Err(f) => return Err(with_restore(f, written, cli.quiet)),
    };
    for n in stack_notes {
        say(cli.quiet, &n);
        session.note(n);
    }
    if let Err(e) = &guardian {
        session.note(format!(
            "no guardian process ({e}): if the recorder is killed, `kmemtraced --cleanup` removes its instance"
        ));
    }
    let mut declared = if cli.trace_self {
        Vec::new()
    } else {
        declare_own_threads(&mut session)
    };
    if !asked_pids.is_empty() {
        session.write_meta(pid_filter_meta(&asked_pids));
    }

    let enabled = start_tracing(
        cli,
        &inst.dir,
        &mut session,
        &events,
        stacks.is_some(),
        &declared,
    );
    let mut failure: Option<Failure> = enabled.err();
    let mut child = None;
    if let Some(program) = program.as_deref().filter(|_| failure.is_none()) {
        match start_command(cli, program, &output, &inst) {
            Ok(c) => {
                if cli.follow_command {
                    session.write_meta(pid_filter_meta(&[c.id()]));
                }
                child = Some(c)
            }
            Err(f) => failure = Some(f),
        }
    }

    // Nothing of what was asked gets recorded: the previous log stays.
    let failed_at_start = failure.is_some();
    let tty = std::io::stderr().is_terminal() && !cli.quiet;
    let color = status::use_color(tty);
    let mut end = match &failure {
        Some(f) => End {
            reason: format!("error: {}", f.msg),
            exit_status: None,
        },
        None => wait_for_end(
            cli,
            &mut session,
            &mut declared,
            &signals,
            child.as_mut(),
            tty,
            color,
        ),
    };

    // Stop: no new events (all at once: `tracing_on` first, else frees
    // are traced after allocations are not, and look like double frees),
    // let writers in flight commit, then drain.
    let _ = inst.dir.write("tracing_on", "0");
    let _ = set_events(&inst.dir, &events, false);
    std::thread::sleep(QUIESCE);
    if let Some(c) = child.as_mut() {
        if end.exit_status.is_none() {
            // Stopped while the command runs: a moment for it to exit, so
            // that its status is in the log.
            end.exit_status = wait_briefly(c, Duration::from_secs(1));
        }
    }
    let written_before = session.counters.clone();
    let cpus = session.cpus.len();
    let res = session.finish(&end.reason, end.exit_status);
    let removed = inst.remove();
    if let Err(e) = removed {
        say(
            cli.quiet,
            &format!("could not remove instance {}: {e}", inst.name),
        );
    }
    if failed_at_start {
        let f = failure.expect("failed at start");
        return Err(with_restore(f, written, cli.quiet));
    }
    let failed = match res {
        Ok(report) => {
            if !cli.quiet {
                print_summary(
                    &written_before,
                    cpus,
                    &report,
                    &end.reason,
                    &out_name,
                    color,
                );
                if let Some(note) = written.kept_note() {
                    say(false, &note);
                }
                for n in &report.rotation_notes {
                    say(false, n);
                }
            }
            failure.or_else(|| report.errors.first().map(|e| Failure::runtime(e.clone())))
        }
        Err(f) => Some(failure.unwrap_or(f)),
    };
    leave_command(cli, child.as_mut(), &end, failed.as_ref(), &signals);
    failed.map_or(Ok(()), Err)
}

/// After the recording: a command still running is waited for where the
/// recording failed (never orphaned by our failure: it runs on untraced,
/// and we exit when it does), else left running and said so.
fn leave_command(
    cli: &Cli,
    child: Option<&mut Child>,
    end: &End,
    failed: Option<&Failure>,
    signals: &nix::sys::signalfd::SignalFd,
) {
    if let Some(c) = child.filter(|_| end.exit_status.is_none()) {
        if let Some(f) = failed {
            say(
                cli.quiet,
                &format!(
                    "recording failed ({}); waiting for the command (pid {}) to exit, passing signals on",
                    f.msg,
                    c.id()
                ),
            );
            wait_passing_signals(c, signals);
        } else if end.reason != "duration" {
            say(
                cli.quiet,
                &format!(
                    "the command (pid {}) is still running; it is left running",
                    c.id()
                ),
            );
        }
    }
}

/// `f`, after putting the previous log back in place of this run's (which
/// recorded nothing of what was asked).
fn with_restore(f: Failure, written: output::Written, quiet: bool) -> Failure {
    if let Some(note) = written.restore() {
        say(quiet, &note);
    }
    f
}

/// Whether process `pid` runs: it exists and is not a zombie (whose
/// `/proc` entry stays until its parent reaps it).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        // The state follows the command name's closing parenthesis.
        st.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'))
    })
}

/// Why a recording stopped: the END block's reason, and the command's
/// exit status if it exited.
struct End {
    reason: String,
    exit_status: Option<i32>,
}

/// Waits for the end of the recording: the command's exit, a duration, a
/// stop signal, or a failure; keeps the status line and the periodic
/// snapshots going meanwhile. A stop signal while the command runs is
/// passed on to it and the recording goes on until it exits, for at most
/// [`COMMAND_GRACE`]; a second signal stops at once.
fn wait_for_end(
    cli: &Cli,
    session: &mut Session,
    declared: &mut Vec<i32>,
    signals: &nix::sys::signalfd::SignalFd,
    mut child: Option<&mut Child>,
    tty: bool,
    color: bool,
) -> End {
    let mut status_line = tty.then(|| StatusLine::new(color));
    let deadline = cli.duration.map(|d| session.started + d);
    let mut next_status = Instant::now() + Duration::from_secs(1);
    let mut next_periodic = Instant::now() + PERIODIC;
    let mut grace_until: Option<Instant> = None;
    let mut signalled: Option<String> = None;
    let end = loop {
        let now = Instant::now();
        let wake = [
            Some(next_status),
            Some(next_periodic),
            deadline,
            grace_until,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now);
        let _ = sys::wait_readable(
            &[signals.as_fd(), session.shared.alarm.fd()],
            wake.saturating_duration_since(now),
        );
        let mut stop_now = false;
        for r in sys::pending_signals(signals) {
            if r.signal == Signal::SIGCHLD {
                continue;
            }
            // The first signal is why the command was asked to exit; a
            // second one, which stops at once, is why the recording did.
            let name = format!("signal {}", r.signal);
            if grace_until.is_some() {
                signalled = Some(name);
            } else {
                signalled.get_or_insert(name);
            }
            match child.as_deref() {
                Some(c) => {
                    pass_on(c, r);
                    if grace_until.is_some() {
                        stop_now = true;
                    } else {
                        grace_until = Some(Instant::now() + COMMAND_GRACE);
                        say(
                            cli.quiet,
                            &format!(
                                "{} passed on to the command (pid {}): recording until it exits, at most {} s (signal again to stop now)",
                                r.signal,
                                c.id(),
                                COMMAND_GRACE.as_secs()
                            ),
                        );
                    }
                }
                None => stop_now = true,
            }
        }
        if let Some(st) = child
            .as_deref_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            let (r, code) = describe_exit(st);
            break End {
                reason: signalled.unwrap_or(r),
                exit_status: Some(code),
            };
        }
        if stop_now {
            break End {
                reason: signalled.unwrap_or_default(),
                exit_status: None,
            };
        }
        if session.failed() {
            break End {
                reason: "error".into(),
                exit_status: None,
            };
        }
        let now = Instant::now();
        if grace_until.is_some_and(|g| now >= g) {
            say(
                cli.quiet,
                &format!(
                    "the command did not exit within {} s of the signal: recording stops",
                    COMMAND_GRACE.as_secs()
                ),
            );
            break End {
                reason: signalled.unwrap_or_default(),
                exit_status: None,
            };
        }
        if deadline.is_some_and(|d| now >= d) {
            break End {
                reason: "duration".into(),
                exit_status: None,
            };
        }
        // -p without a command: done when every process asked for is.
        if child.is_none()
            && !cli.pids.is_empty()
            && now >= next_status
            && !cli.pids.iter().any(|&p| process_alive(p))
        {
            break End {
                reason: "traced processes exited".into(),
                exit_status: None,
            };
        }
        if now >= next_status {
            session.adopt_onlined_cpus();
            if !cli.trace_self {
                // Threads started late (or for CPUs come online): listed
                // again, whole (a later META replaces the earlier).
                let now_tids = with_main_thread(session.thread_ids_now());
                if now_tids != *declared {
                    write_own_threads(session, &now_tids);
                    *declared = now_tids;
                }
            }
            if let Some(sl) = status_line.as_mut() {
                let lost = session.poll_stats();
                sl.update(&session.counters, &lost);
            }
            next_status = now + Duration::from_secs(1);
        }
        if now >= next_periodic {
            session.periodic();
            next_periodic = now + PERIODIC;
        }
    };
    if let Some(sl) = status_line.as_mut() {
        sl.clear();
    }
    end
}

fn print_summary(
    c: &crate::status::Counters,
    cpus: usize,
    r: &Finished,
    reason: &str,
    out: &str,
    color: bool,
) {
    let (cpu_time, rss) = sys::self_usage();
    let s = SummaryLine {
        elapsed: r.elapsed,
        events: c.events(),
        cpus,
        written: c.written.load(std::sync::atomic::Ordering::Relaxed),
        lost: r.lost.clone(),
        backpressure: c.backpressure(),
        compressor_waits: c.compressor_waits(),
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
    if evs.is_empty() {
        // Not an error (a board may boot without it now and then), but
        // what is drained is then only what others left in the buffer.
        say(
            cli.quiet,
            "no event is enabled in the top-level buffer: boot-time tracing was not set up (trace_event=kmem:kmalloc,kmem:kfree,... on the kernel command line); draining what the buffer holds",
        );
    }
    if let Ok(defaults) = events::resolve(&top, &[]) {
        for d in defaults {
            if !evs.contains(&d) {
                evs.push(d);
            }
        }
    }
    let layout = metadata::layout(&top)?;
    let out = output::open(&output)?;
    let out_name = out.name.clone();
    let (out_file, written) = out.split();
    let nr_pages = crate::session::buffer_kb(&top).map_or(4096, |kb| {
        u64::from(kb) * 1024 / u64::from(layout.subbuf_size.max(1))
    });
    let plan = Plan {
        dir: top.clone(),
        top,
        instance: String::new(),
        events: evs,
        more_formats: events::marker_formats(&tfs.top),
        layout,
        compression: cli.compress,
        flush_interval: cli.flush_interval,
        // Only drains: no reader waits on the mark, which is not written.
        buffer_percent: wake_mark(cli.buffer_percent, false, None),
        // Events may still be arriving: take at most twice the buffer.
        drain_only: Some(2 * nr_pages + 16),
        reader_nice: cli.reader_nice,
        reader_cpus: cli.reader_cpus,
        // Boot mode only drains what is there: a real-time reader buys
        // nothing, unless asked for by priority.
        reader_realtime: match cli.reader_realtime {
            ReaderRealtime::Fifo(priority) => Some(priority),
            ReaderRealtime::Auto | ReaderRealtime::Off => None,
        },
        splice: !cli.no_splice,
        command_line: metadata::shell_quote(argv),
        rotation: None,
    };
    let mut session = match Session::start(plan, out_file) {
        Ok(s) => s,
        Err(f) => return Err(with_restore(f, written, cli.quiet)),
    };
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
        if let Some(note) = written.kept_note() {
            say(false, &note);
        }
    }
    if let Some(e) = report.errors.first() {
        return Err(Failure::runtime(e.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{cpumask_hex, default_buffer_kb, default_subbuf_kb, page_stack_filter_not_ours};

    #[test]
    fn cpu_masks_are_written_as_the_kernel_reads_them() {
        assert_eq!(cpumask_hex(&[0, 1]), "3");
        assert_eq!(cpumask_hex(&[3]), "8");
        assert_eq!(cpumask_hex(&[0, 31]), "80000001");
        assert_eq!(cpumask_hex(&[32]), "1,00000000");
        assert_eq!(cpumask_hex(&[1, 40, 64]), "1,00000100,00000002");
    }

    #[test]
    fn page_stack_trigger_leaves_out_runs_of_own_threads() {
        assert_eq!(
            page_stack_filter_not_ours(&[7, 100, 101, 102, 104]),
            "(common_pid != 7 && (common_pid < 100 || common_pid > 102) \
             && common_pid != 104) || common_flags & 0x58"
        );
        // 256 CPUs' readers and compressors, started one after another: far
        // under the kernel's page.
        let tids: Vec<i32> = (1000..1000 + 2 * 256 + 3).collect();
        assert!(page_stack_filter_not_ours(&tids).len() < 100);
    }

    #[test]
    fn default_buffer_is_4_mib_within_a_64th_of_available_memory() {
        // (kernel's KiB, CPUs, MemAvailable KiB) -> KiB written
        for (kernel_kb, cpus, avail, want) in [
            (1408, 2, Some(8 << 20), Some(4096)),
            // 256 MiB available on 4 CPUs: 1 MiB each would be a 64th.
            (1408, 4, Some(256 << 10), None),
            (512, 4, Some(256 << 10), Some(1024)),
            // 64 CPUs, 16 GiB: 4 MiB each is exactly a 64th.
            (1408, 64, Some(16 << 20), Some(4096)),
            (1408, 64, Some(8 << 20), Some(2048)),
            // Never below, nor equal to, what the kernel has.
            (4096, 2, Some(8 << 20), None),
            (8192, 2, Some(8 << 20), None),
            (1408, 2, None, None),
            (1408, 0, Some(8 << 20), Some(4096)),
        ] {
            assert_eq!(
                default_buffer_kb(kernel_kb, cpus, avail),
                want,
                "{kernel_kb} KiB, {cpus} CPUs, {avail:?} KiB available"
            );
        }
    }

    #[test]
    fn default_subbuf_keeps_64_per_cpu_at_most_64_kib() {
        for (per_cpu_kb, want) in [
            (65536, Some(64)),
            (4096, Some(64)),
            (4000, Some(32)),
            (2048, Some(32)),
            (1408, Some(16)),
            (1024, Some(16)),
            (512, Some(8)),
            (511, None),
            (256, None),
            (0, None),
        ] {
            assert_eq!(
                default_subbuf_kb(per_cpu_kb),
                want,
                "{per_cpu_kb} KiB per CPU"
            );
        }
    }
}
