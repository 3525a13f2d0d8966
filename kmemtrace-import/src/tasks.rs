//! The tasks a pid-filtered recording was asked for.
//!
//! The kernel's pid filter (`set_event_pid`) is not exact: it is switched
//! per CPU by probes on `sched_switch` and `sched_wakeup`, so events of the
//! task switched out, or of a task that woke a traced one, pass until the
//! next switch. A recording made with `kmemtraced --pid` or `-F` therefore
//! holds some events of neighbouring tasks. To tell them apart, the recorder
//! stores what it asked for (META `other` named `set_event_pid`: the pids
//! it wrote there, one per line or space-separated) and records
//! `sched:sched_process_fork` beside the kmem events (filtered the same
//! way, so the traced tree's forks are there). The traced tasks are the
//! asked pids and, in time order, every child forked by a traced task.

use crate::log::Log;
use kmemtrace_format::records::MetaKind;
use kmemtrace_kernel::Endian;
use std::collections::HashSet;

/// The META `other` name under which the recorder stores its pid filter.
pub const PID_FILTER_META: &str = "set_event_pid";

/// The META `other` name under which the recorder lists its own threads
/// (tids, space-separated; a later one replaces an earlier one). The
/// kernel records their events like any task's: excluding them in the
/// kernel (`set_event_notrace_pid`) would also drop the interrupt and RCU
/// work run while one of them is current, and the frees of objects they
/// allocated, which leaves the rest of the trace with holes. Readers leave
/// their own (not interrupt-context) events out of the workload's figures.
pub const RECORDER_TIDS_META: &str = "kmemtraced/own_tids";

/// The recorder's own threads, as the log lists them (empty if it does
/// not).
pub fn recorder_tids(log: &Log) -> Vec<i32> {
    log.meta(MetaKind::Other, RECORDER_TIDS_META)
        .map(|m| {
            String::from_utf8_lossy(&m.content)
                .split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The filter the recorder puts on `sched:sched_switch`: only switches from
/// and to the idle task, a few per wake-up of an idle CPU, enough to see
/// which tasks ran and which of them the kernel records events of.
pub const IDLE_SWITCH_FILTER: &str = "prev_pid == 0 || next_pid == 0";

/// Reads what tells tasks the kernel records from tasks it does not:
/// every record's `common_pid`, and `sched_switch`'s `prev_pid` and
/// `next_pid`. A task switched to from the idle task (an event recorded in
/// the idle task's context) whose own events (its switch back to idle, its
/// allocations) never appear ran while the kernel recorded nothing of it:
/// a task hidden from tracing, whose allocations and frees the trace lacks.
#[derive(Clone, Debug)]
pub struct SwitchReader {
    id: u64,
    common_pid: kmemtrace_kernel::Field,
    prev_pid: kmemtrace_kernel::Field,
    next_pid: kmemtrace_kernel::Field,
}

impl SwitchReader {
    /// `None` if the log has no `sched_switch` format with those fields.
    pub fn new(log: &Log) -> Option<SwitchReader> {
        let f = log
            .formats
            .iter()
            .find(|f| f.name == "sched_switch" && f.system == "sched")?;
        Some(SwitchReader {
            id: u64::from(f.id),
            common_pid: f.field("common_pid")?.clone(),
            prev_pid: f.field("prev_pid")?.clone(),
            next_pid: f.field("next_pid")?.clone(),
        })
    }

    /// The record's `common_pid` (every event has it where this format
    /// has it: the common fields are shared).
    #[inline]
    pub fn pid<E: Endian>(&self, e: E, payload: &[u8]) -> Option<i32> {
        self.common_pid.read_i64(e, payload).map(|p| p as i32)
    }

    /// `(prev_pid, next_pid)` if the record is a `sched_switch`.
    #[inline]
    pub fn switch<E: Endian>(&self, e: E, payload: &[u8]) -> Option<(i32, i32)> {
        if e.read_uint(payload, 0, 2)? != self.id {
            return None;
        }
        let prev = self.prev_pid.read_i64(e, payload)?;
        let next = self.next_pid.read_i64(e, payload)?;
        Some((prev as i32, next as i32))
    }
}

/// What a stretch of the trace shows of tasks (see [`SwitchReader`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskSightings {
    /// Tasks switched to from the idle task, with how often.
    pub woken_from_idle: std::collections::BTreeMap<i32, u32>,
    /// Tasks with an event of their own (`common_pid`).
    pub seen: HashSet<i32>,
    /// The last pid seen (consecutive events mostly share it).
    last: Option<i32>,
}

impl TaskSightings {
    /// One record.
    #[inline]
    pub fn record<E: Endian>(&mut self, r: &SwitchReader, e: E, payload: &[u8]) {
        if let Some(pid) = r.pid(e, payload) {
            if self.last != Some(pid) {
                self.last = Some(pid);
                self.seen.insert(pid);
            }
        }
        if let Some((0, next)) = r.switch(e, payload) {
            *self.woken_from_idle.entry(next).or_insert(0) += 1;
        }
    }

    /// Adds another stretch's sightings.
    pub fn absorb(&mut self, o: &TaskSightings) {
        for (&p, &n) in &o.woken_from_idle {
            *self.woken_from_idle.entry(p).or_insert(0) += n;
        }
        self.seen.extend(&o.seen);
        self.last = None;
    }

    /// Tasks switched to from idle at least `min` times that never had an
    /// event of their own: `(pid, times)`, by pid.
    pub fn unrecorded(&self, min: u32) -> Vec<(i32, u32)> {
        self.woken_from_idle
            .iter()
            .filter(|(&p, &n)| p != 0 && n >= min && !self.seen.contains(&p))
            .map(|(&p, &n)| (p, n))
            .collect()
    }
}

/// What a pid-filtered recording traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedTasks {
    /// The pids (threads) the recorder put in `set_event_pid` at the start
    /// (with `-F`, the command's pid).
    pub asked: Vec<i32>,
    /// The asked pids and every descendant forked while recording.
    pub tree: HashSet<i32>,
    /// Forks of traced tasks seen (threads included).
    pub forks: u64,
    /// Whether the log records forks at all (`sched_process_fork`'s format
    /// is in it); without them, the tree is the asked pids alone.
    pub forks_recorded: bool,
}

/// The recording's traced tasks, or `None` if it was not pid-filtered (or
/// was recorded before the filter was stored).
pub fn traced_tasks(log: &Log) -> Option<TracedTasks> {
    let meta = log.meta(MetaKind::Other, PID_FILTER_META)?;
    let asked: Vec<i32> = String::from_utf8_lossy(&meta.content)
        .split_ascii_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let mut tree: HashSet<i32> = asked.iter().copied().collect();
    let fork = log
        .formats
        .iter()
        .find(|f| f.name == "sched_process_fork" && f.system != "kmem");
    let mut forks = fork.map_or_else(Vec::new, |f| fork_events(log, f));
    forks.sort_unstable();
    let mut n = 0;
    for &(_, parent, child) in &forks {
        if tree.contains(&parent) {
            tree.insert(child);
            n += 1;
        }
    }
    Some(TracedTasks {
        asked,
        tree,
        forks: n,
        forks_recorded: fork.is_some(),
    })
}

/// (time, parent pid, child pid) of every `sched_process_fork` record.
fn fork_events(log: &Log, f: &kmemtrace_kernel::EventFormat) -> Vec<(u64, i32, i32)> {
    let (Some(parent), Some(child)) = (f.field("parent_pid"), f.field("child_pid")) else {
        return Vec::new();
    };
    let id = u64::from(f.id);
    let mut out = Vec::new();
    log.visit_all(
        |v| {
            let Ok(sb) = v.subbuf else { return };
            for (_, ts, payload) in sb.data_events(log.endian).flatten() {
                if log.endian.read_uint(payload, 0, 2) != Some(id) {
                    continue;
                }
                if let (Some(p), Some(c)) = (
                    parent.read_i64(log.endian, payload),
                    child.read_i64(log.endian, payload),
                ) {
                    out.push((ts, p as i32, c as i32));
                }
            }
        },
        |_| {},
    );
    out
}
