//! What the user asked to look at: CPUs, pids, comms, a time window, a
//! call-site pattern.
//!
//! The time window cuts the event stream itself (the capture is read as if
//! it were that window). The other filters select *allocations* by the
//! allocating event's CPU, pid, comm and call site: an object is still
//! followed through its whole life whatever CPU or task frees it, and frees
//! of objects never seen allocated are selected by the free event's own
//! CPU, pid, comm and call site.

use kmemtrace_kernel::PidMap;
use std::collections::HashSet;

/// Parsed filters.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Selected CPUs (`None`: all).
    pub cpus: Option<HashSet<u32>>,
    /// Selected pids, from `--pid` and `--comm` (`None`: all).
    pub pids: Option<HashSet<i32>>,
    /// Absolute time window, ns, inclusive (`None`: everything).
    pub time: Option<(u64, u64)>,
    /// Call-site pattern on the symbolised name (glob with `*`/`?`, else a
    /// substring).
    pub callsite: Option<String>,
    /// The pids whose task name (in the log's pid -> comm map) matches
    /// `--comm` ([`tasks_named`]).
    pub comm_pids: Option<HashSet<i32>>,
    /// The recorder's own threads (from the log): their own events are not
    /// the workload's; interrupt work recorded while one was current is.
    /// Looked up for every event: the fast hasher.
    pub recorder: crate::intern::FastSet<i32>,
}

impl Filter {
    #[inline]
    pub fn in_time(&self, ts: u64) -> bool {
        match self.time {
            None => true,
            Some((a, b)) => ts >= a && ts <= b,
        }
    }

    /// Whether an event is selected by its CPU and task.
    #[inline]
    pub fn selects(&self, ev: &crate::event::Event) -> bool {
        self.selects_task(u32::from(ev.cpu), ev.pid, ev.in_interrupt)
    }

    /// Whether an event on `cpu` by `pid` (in an interrupt or not) is
    /// selected: the workload's, on a selected CPU, of a selected task.
    #[inline]
    pub fn selects_task(&self, cpu: u32, pid: i32, in_interrupt: bool) -> bool {
        self.workload(pid, in_interrupt) && self.cpu_pid(cpu, pid)
    }

    /// Leaves out the events of the recorder's own threads that `log`
    /// lists (not the interrupt work recorded while one was current).
    pub fn leave_out_recorder(&mut self, log: &kmemtrace_import::log::Log) {
        self.recorder = kmemtrace_import::tasks::recorder_tids(log)
            .into_iter()
            .collect();
    }

    /// Whether an event by `pid` is the workload's: not a recorder
    /// thread's own (interrupt work recorded while one was current is).
    #[inline]
    pub fn workload(&self, pid: i32, in_interrupt: bool) -> bool {
        in_interrupt || !self.recorder.contains(&pid)
    }

    /// Whether `--cpu` keeps `cpu`.
    #[inline]
    pub fn on_cpu(&self, cpu: u32) -> bool {
        self.cpus.as_ref().is_none_or(|s| s.contains(&cpu))
    }

    #[inline]
    pub fn cpu_pid(&self, cpu: u32, pid: i32) -> bool {
        self.on_cpu(cpu)
            && self.pids.as_ref().is_none_or(|s| s.contains(&pid))
            && self.comm_pids.as_ref().is_none_or(|s| s.contains(&pid))
    }

    pub fn callsite_matches(&self, name: &str) -> bool {
        match &self.callsite {
            None => true,
            Some(p) if p.contains(['*', '?']) => glob(p.as_bytes(), name.as_bytes()),
            Some(p) => name.contains(p.as_str()),
        }
    }
}

/// The pids of `map` whose task name matches `pattern` (a glob with `*`
/// and `?`, else the whole name); an error that lists the names the log
/// has where none does.
pub fn tasks_named(pattern: &str, map: &PidMap) -> Result<HashSet<i32>, String> {
    let matches = |name: &str| {
        if pattern.contains(['*', '?']) {
            glob(pattern.as_bytes(), name.as_bytes())
        } else {
            name == pattern
        }
    };
    let pids: HashSet<i32> = map
        .pids()
        .into_iter()
        .filter(|&p| map.comm(p).is_some_and(matches))
        .collect();
    if !pids.is_empty() {
        return Ok(pids);
    }
    let mut names: Vec<&str> = map.pids().into_iter().filter_map(|p| map.comm(p)).collect();
    names.sort_unstable();
    names.dedup();
    let shown = names.len().min(40);
    let more = if names.len() > shown {
        format!(", and {} more", names.len() - shown)
    } else {
        String::new()
    };
    let prefix = names
        .iter()
        .any(|n| n.starts_with(pattern) && *n != pattern);
    Err(format!(
        "--comm {pattern}: no task of that name in the log{} (task names: {}{more})",
        if prefix && !pattern.contains(['*', '?']) {
            format!("; '{pattern}*' would take the names it starts")
        } else {
            String::new()
        },
        names[..shown].join(", ")
    ))
}

/// `*` matches any run, `?` one byte; the whole name must match.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// `--cpu`: a CPU list in the kernel's syntax (`0-3,6`), not empty.
pub fn parse_cpu_list(s: &str) -> Result<HashSet<u32>, String> {
    let cpus = kmemtrace_kernel::human::parse_cpu_list(s)?;
    if cpus.is_empty() {
        return Err(format!("empty CPU list {s:?}"));
    }
    Ok(cpus.into_iter().collect())
}

/// One end of a `--time` window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimePoint {
    /// Seconds after the first event.
    Relative(f64),
    /// Trace-clock seconds, as the kernel's `trace` prints them (`@4.4495`).
    Absolute(f64),
}

impl TimePoint {
    /// Nanoseconds on the trace clock, given the first event's time.
    pub fn resolve(self, first_ts: u64) -> u64 {
        match self {
            TimePoint::Relative(s) => first_ts.saturating_add((s * 1e9).round() as u64),
            TimePoint::Absolute(s) => (s * 1e9).round() as u64,
        }
    }
}

/// Parses `START..END`, either side optional; `@` marks absolute times.
pub fn parse_time_window(s: &str) -> Result<(Option<TimePoint>, Option<TimePoint>), String> {
    let Some((a, b)) = s.split_once("..") else {
        return Err(format!(
            "bad time window {s:?}: expected START..END in seconds (relative to the first event, or @ABSOLUTE)"
        ));
    };
    let point = |x: &str| -> Result<Option<TimePoint>, String> {
        let x = x.trim();
        if x.is_empty() {
            return Ok(None);
        }
        let (abs, num) = match x.strip_prefix('@') {
            Some(n) => (true, n),
            None => (false, x),
        };
        let v: f64 = num
            .trim_end_matches('s')
            .parse()
            .map_err(|_| format!("bad time {x:?} in window {s:?}: expected seconds"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("bad time {x:?} in window {s:?}: must be >= 0"));
        }
        Ok(Some(if abs {
            TimePoint::Absolute(v)
        } else {
            TimePoint::Relative(v)
        }))
    };
    Ok((point(a)?, point(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"kmalloc*", b"kmalloc_trace+0x1"));
        assert!(glob(b"*alloc*", b"__d_alloc+0x2c"));
        assert!(!glob(b"*alloc", b"__d_alloc+0x2c"));
        assert!(glob(b"a?c", b"abc"));
        let f = Filter {
            callsite: Some("d_alloc".into()),
            ..Default::default()
        };
        assert!(f.callsite_matches("__d_alloc+0x2c"));
    }

    #[test]
    fn cpu_lists_and_times() {
        let s = parse_cpu_list("0-2,5").unwrap();
        assert_eq!(s.len(), 4);
        assert!(s.contains(&5));
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        let (a, b) = parse_time_window("1.5..").unwrap();
        assert_eq!(a, Some(TimePoint::Relative(1.5)));
        assert_eq!(b, None);
        let (a, _) = parse_time_window("@4.4..@5").unwrap();
        assert_eq!(a.unwrap().resolve(0), 4_400_000_000);
        assert_eq!(TimePoint::Relative(1.0).resolve(10), 1_000_000_010);
        assert!(parse_time_window("1-2").is_err());
    }
}

#[cfg(test)]
mod comm_tests {
    use super::*;

    #[test]
    fn task_names_match_whole_or_by_glob_and_a_miss_lists_them() {
        let map = PidMap::parse("10 stress-ng\n11 stress-ng-fork\n12 bash\n", None).unwrap();
        let set = |v: &[i32]| v.iter().copied().collect::<HashSet<i32>>();
        assert_eq!(tasks_named("stress-ng", &map).unwrap(), set(&[10]));
        assert_eq!(tasks_named("stress-ng*", &map).unwrap(), set(&[10, 11]));
        assert_eq!(tasks_named("b?sh", &map).unwrap(), set(&[12]));
        let e = tasks_named("nosuch", &map).unwrap_err();
        assert!(e.contains("bash, stress-ng, stress-ng-fork"), "{e}");
        let e = tasks_named("stress", &map).unwrap_err();
        assert!(e.contains("'stress*'"), "{e}");
    }
}
