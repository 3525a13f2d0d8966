//! Where a run's time goes: each stream thread's CPU time and the time it
//! waited on another stage, the serial phases before and after the stream,
//! and from these the run's wall time on any number of cores (the critical
//! path: the serial phases, plus the larger of the stream's total CPU over
//! the cores and its busiest thread, each thread being serial).
//!
//! The prediction needs no machine with that many cores: run with the
//! threads that machine would use (`-j CORES`), here; the CPU each thread
//! spends is about the same wherever it runs. What it cannot see is what
//! cores cost each other (cache lines moving between them, wakeups across
//! them), so a measurement on the machine itself comes first where there
//! is one (`kmemtrace-report/bench/many_cores.sh`).

use std::cell::Cell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a stream thread does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Decompresses and decodes blocks, routes their events by shard.
    Decode,
    /// Merges its shard's events into time order and runs the passes.
    Shard,
    /// Summarises the epochs every shard is past.
    Combine,
    /// The calling thread: folds the summaries in epoch order.
    Fold,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Decode => "decode",
            Role::Shard => "shard",
            Role::Combine => "combine",
            Role::Fold => "fold",
        }
    }

    /// What the role waits for when it waits on its input (see
    /// [`ThreadTime::waited_input`]).
    pub fn input(self) -> &'static str {
        match self {
            Role::Decode => "a block asked for",
            Role::Shard => "decoded blocks",
            Role::Combine | Role::Fold => "epochs every shard is past",
        }
    }
}

/// One stream thread's time.
#[derive(Clone, Debug)]
pub struct ThreadTime {
    pub role: Role,
    /// Its number among the threads of its role.
    pub index: usize,
    /// CPU time (the kernel's, `/proc/thread-self/schedstat`).
    pub cpu: Duration,
    pub wall: Duration,
    /// Blocked until the stage before had something for it.
    pub waited_input: Duration,
    /// Blocked until the stage after caught up (a shard too far ahead of
    /// the slowest).
    pub waited_next: Duration,
    /// CPU time spent decoding blocks while waiting for them (a shard
    /// whose decoders were all busy): the decode stage's work, not in
    /// `cpu`, and no part of this thread's serial work.
    pub helped: Duration,
}

thread_local! {
    /// This thread's waits so far: on its input, on the next stage.
    static WAITS: Cell<(Duration, Duration)> = const { Cell::new((Duration::ZERO, Duration::ZERO)) };
    /// This thread's CPU time so far on the decode stage's work
    /// ([`helping`]).
    static HELPED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Runs `f`, the decode stage's work done by a thread of another stage
/// while it waits, counting its CPU time apart from the thread's own.
pub(crate) fn helping<T>(f: impl FnOnce() -> T) -> T {
    let t = thread_cpu();
    let r = f();
    let spent = thread_cpu().saturating_sub(t);
    HELPED.with(|h| h.set(h.get() + spent));
    r
}

/// Runs `f`, a call that blocks until the stage before has something,
/// counting its time as this thread's wait on its input.
pub(crate) fn waiting_on_input<T>(f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    WAITS.with(|w| {
        let (i, n) = w.get();
        w.set((i + t.elapsed(), n));
    });
    r
}

/// Runs `f`, a call that blocks until the stage after catches up.
pub(crate) fn waiting_on_next<T>(f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    WAITS.with(|w| {
        let (i, n) = w.get();
        w.set((i, n + t.elapsed()));
    });
    r
}

/// This thread's CPU time so far. The scheduler's count, in nanoseconds
/// (`/proc/thread-self/schedstat`), else user and system time in ticks
/// (`stat`, assumed at 100 a second); zero where neither can be read.
pub fn thread_cpu() -> Duration {
    if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Duration::from_nanos(ns);
    }
    let ticks = std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            // The fields after the command name, which may hold spaces.
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// A thread's clock, started as it starts.
pub(crate) struct ThreadClock {
    role: Role,
    index: usize,
    cpu: Duration,
    wall: Instant,
    waits: (Duration, Duration),
    helped: Duration,
}

impl ThreadClock {
    pub fn start(role: Role, index: usize) -> Self {
        ThreadClock {
            role,
            index,
            cpu: thread_cpu(),
            wall: Instant::now(),
            waits: WAITS.with(Cell::get),
            helped: HELPED.with(Cell::get),
        }
    }

    /// The thread's time since [`ThreadClock::start`], added to `all`.
    pub fn stop(self, all: &Mutex<Vec<ThreadTime>>) {
        let (i, n) = WAITS.with(Cell::get);
        let helped = HELPED.with(Cell::get).saturating_sub(self.helped);
        let t = ThreadTime {
            role: self.role,
            index: self.index,
            cpu: thread_cpu().saturating_sub(self.cpu).saturating_sub(helped),
            wall: self.wall.elapsed(),
            waited_input: i.saturating_sub(self.waits.0),
            waited_next: n.saturating_sub(self.waits.1),
            helped,
        };
        all.lock().unwrap_or_else(|e| e.into_inner()).push(t);
    }
}

/// A run's time: its phases (wall time, one thread each) and the stream's
/// threads.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Serial phases in order: name and wall time. The stream is one of
    /// them (named [`STREAM`]); the others run on one thread alone.
    pub phases: Vec<(&'static str, Duration)>,
    /// The stream's threads, by role and index.
    pub threads: Vec<ThreadTime>,
    /// Events the stream handed to the passes.
    pub events: u64,
}

/// The stream's phase name in [`Timings::phases`].
pub const STREAM: &str = "stream";

/// A run's predicted wall time on some number of cores.
#[derive(Clone, Debug)]
pub struct Prediction {
    pub cores: usize,
    /// The phases other than the stream.
    pub serial: Duration,
    /// The stream's threads' CPU time over the cores.
    pub spread: Duration,
    /// The busiest stream thread (its CPU time), if any.
    pub busiest: Option<ThreadTime>,
    /// `serial` plus the larger of `spread` and the busiest thread's CPU.
    pub wall: Duration,
}

impl Timings {
    /// The stream's threads' CPU time, all together.
    pub fn stream_cpu(&self) -> Duration {
        self.threads.iter().map(|t| t.cpu + t.helped).sum()
    }

    /// The decode stage's work done by threads of other stages while they
    /// waited ([`ThreadTime::helped`]).
    pub fn helped(&self) -> Duration {
        self.threads.iter().map(|t| t.helped).sum()
    }

    /// The phases' wall time, the stream's included.
    pub fn wall(&self) -> Duration {
        self.phases.iter().map(|p| p.1).sum()
    }

    /// The run's wall time on `cores` cores, by the critical path.
    pub fn predict(&self, cores: usize) -> Prediction {
        let serial = self
            .phases
            .iter()
            .filter(|p| p.0 != STREAM)
            .map(|p| p.1)
            .sum();
        let spread = self.stream_cpu() / cores.max(1) as u32;
        let busiest = self.threads.iter().max_by_key(|t| t.cpu).cloned();
        let longest = busiest.as_ref().map_or(Duration::ZERO, |t| t.cpu);
        Prediction {
            cores,
            serial,
            spread,
            wall: serial + spread.max(longest),
            busiest,
        }
    }

    /// The threads of one role: how many, their CPU time in all (the
    /// decode stage's with what other threads did of it) and the
    /// busiest's, their waits in all.
    pub fn by_role(&self, role: Role) -> Option<RoleTime> {
        let of: Vec<&ThreadTime> = self.threads.iter().filter(|t| t.role == role).collect();
        let helped = if role == Role::Decode {
            self.helped()
        } else {
            Duration::ZERO
        };
        // The decode stage is there in every run, if only as the shards'
        // own work (no decoder thread).
        let there = !of.is_empty() || (role == Role::Decode && !self.threads.is_empty());
        there.then(|| RoleTime {
            role,
            threads: of.len(),
            cpu: of.iter().map(|t| t.cpu).sum::<Duration>() + helped,
            busiest: of.iter().map(|t| t.cpu).max().unwrap_or_default(),
            waited_input: of.iter().map(|t| t.waited_input).sum(),
            waited_next: of.iter().map(|t| t.waited_next).sum(),
        })
    }
}

/// The threads of one role, added up.
#[derive(Clone, Debug)]
pub struct RoleTime {
    pub role: Role,
    pub threads: usize,
    pub cpu: Duration,
    pub busiest: Duration,
    pub waited_input: Duration,
    pub waited_next: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(role: Role, index: usize, cpu_ms: u64) -> ThreadTime {
        ThreadTime {
            role,
            index,
            cpu: Duration::from_millis(cpu_ms),
            wall: Duration::from_millis(cpu_ms),
            waited_input: Duration::ZERO,
            waited_next: Duration::ZERO,
            helped: Duration::ZERO,
        }
    }

    fn timings(threads: Vec<ThreadTime>) -> Timings {
        Timings {
            phases: vec![
                ("open", Duration::from_millis(30)),
                (STREAM, Duration::from_millis(900)),
                ("print", Duration::from_millis(20)),
            ],
            threads,
            events: 1,
        }
    }

    #[test]
    fn the_total_over_the_cores_when_the_work_spreads() {
        let t = timings((0..16).map(|i| thread(Role::Decode, i, 100)).collect());
        let p = t.predict(16);
        assert_eq!(p.serial, Duration::from_millis(50));
        assert_eq!(p.spread, Duration::from_millis(100));
        assert_eq!(p.wall, Duration::from_millis(150));
        // On 4 cores the same work takes four times as long.
        assert_eq!(t.predict(4).wall, Duration::from_millis(450));
    }

    #[test]
    fn the_busiest_thread_when_it_is_longer_than_the_spread() {
        let mut threads: Vec<_> = (0..15).map(|i| thread(Role::Decode, i, 10)).collect();
        threads.push(thread(Role::Shard, 0, 400));
        let p = timings(threads).predict(16);
        assert_eq!(p.busiest.as_ref().map(|b| b.role), Some(Role::Shard));
        assert_eq!(p.wall, Duration::from_millis(450));
    }

    #[test]
    fn roles_add_up_their_threads() {
        let mut threads: Vec<_> = (0..3)
            .map(|i| thread(Role::Decode, i, 10 * i as u64))
            .collect();
        threads[1].waited_input = Duration::from_millis(5);
        threads.push(thread(Role::Fold, 0, 1));
        let t = timings(threads);
        let d = t.by_role(Role::Decode).unwrap();
        assert_eq!(
            (d.threads, d.cpu, d.busiest),
            (3, Duration::from_millis(30), Duration::from_millis(20))
        );
        assert_eq!(d.waited_input, Duration::from_millis(5));
        assert!(t.by_role(Role::Combine).is_none());
    }

    #[test]
    fn decoding_done_by_a_shard_is_the_decode_stage_s_not_its_serial_work() {
        let mut shard = thread(Role::Shard, 0, 300);
        shard.helped = Duration::from_millis(500);
        let t = timings(vec![thread(Role::Decode, 0, 200), shard]);
        assert_eq!(t.stream_cpu(), Duration::from_millis(1000));
        let d = t.by_role(Role::Decode).unwrap();
        assert_eq!((d.threads, d.cpu), (1, Duration::from_millis(700)));
        assert_eq!(
            t.by_role(Role::Shard).unwrap().cpu,
            Duration::from_millis(300)
        );
        // On 16 cores the help goes to decoders: the shard's own 300 ms
        // bound the stream, not the 800 ms its thread spent.
        let p = t.predict(16);
        assert_eq!(p.wall, Duration::from_millis(350));
        // No decoder thread: the stage is still there, all of it help.
        let mut alone = thread(Role::Shard, 0, 300);
        alone.helped = Duration::from_millis(500);
        let d = timings(vec![alone]).by_role(Role::Decode).unwrap();
        assert_eq!((d.threads, d.cpu), (0, Duration::from_millis(500)));
    }

    #[test]
    fn a_thread_s_clock_counts_its_cpu_and_its_waits() {
        let all = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            s.spawn(|| {
                let c = ThreadClock::start(Role::Shard, 2);
                let t = Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_millis(40) {
                    x = x.wrapping_mul(31).wrapping_add(7);
                }
                std::hint::black_box(x);
                waiting_on_input(|| std::thread::sleep(Duration::from_millis(30)));
                waiting_on_next(|| std::thread::sleep(Duration::from_millis(20)));
                c.stop(&all);
            });
        });
        let all = all.into_inner().unwrap();
        let t = &all[0];
        assert_eq!((t.role, t.index), (Role::Shard, 2));
        assert!(t.waited_input >= Duration::from_millis(30), "{t:?}");
        assert!(t.waited_next >= Duration::from_millis(20), "{t:?}");
        assert!(t.wall >= Duration::from_millis(90), "{t:?}");
        // Sleeping costs no CPU; spinning does (some, on a loaded machine).
        assert!(t.cpu > Duration::ZERO && t.cpu < t.wall, "{t:?}");
    }
}
