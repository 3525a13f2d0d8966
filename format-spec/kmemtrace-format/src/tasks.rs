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

use crate::endian::Endian;
use crate::log::Log;
use crate::records::MetaKind;
use std::collections::HashSet;

/// The META `other` name under which the recorder stores its pid filter.
pub const PID_FILTER_META: &str = "set_event_pid";

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
fn fork_events(log: &Log, f: &crate::event_format::EventFormat) -> Vec<(u64, i32, i32)> {
    let (Some(parent), Some(child)) = (f.field("parent_pid"), f.field("child_pid")) else {
        return Vec::new();
    };
    let id = u64::from(f.id);
    let mut out = Vec::new();
    for cpu in log.cpus() {
        log.visit_cpu(
            cpu,
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
    }
    out
}
