//! Counters shared by the reader and writer threads, the status line shown
//! on a terminal while recording, and the summary at the end.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What one CPU's reader has done so far.
#[derive(Debug, Default)]
pub struct CpuCounters {
    /// Events read: counted by the reader, or the kernel's `read events`
    /// stored by the main thread (`Session::poll_stats`).
    pub events: AtomicU64,
    pub subbufs: AtomicU64,
    pub data_bytes: AtomicU64,
    /// Events the kernel flagged as missed in the sub-buffers read.
    pub missed: AtomicU64,
    /// Times the compressor found the writer's queue full and had to wait.
    pub backpressure: AtomicU64,
    /// Times the reader had to wait for its compressor to give a batch
    /// back (compression slower than the trace: the kernel's buffer fills
    /// meanwhile).
    pub compressor_waits: AtomicU64,
    /// Set when the reader could not put itself under SCHED_FIFO as
    /// asked (`--reader-realtime`): the OS error number, or -1.
    pub realtime_refused: std::sync::atomic::AtomicI32,
}

/// All counters.
#[derive(Debug)]
pub struct Counters {
    pub cpus: Vec<(u32, CpuCounters)>,
    /// Bytes written to the log.
    pub written: AtomicU64,
}

impl Counters {
    pub fn new(cpus: &[u32]) -> Counters {
        Counters {
            cpus: cpus.iter().map(|&c| (c, CpuCounters::default())).collect(),
            written: AtomicU64::new(0),
        }
    }
    pub fn cpu(&self, cpu: u32) -> Option<&CpuCounters> {
        self.cpus.iter().find(|(c, _)| *c == cpu).map(|(_, k)| k)
    }
    pub fn events(&self) -> u64 {
        self.sum(|k| &k.events)
    }
    pub fn backpressure(&self) -> u64 {
        self.sum(|k| &k.backpressure)
    }
    pub fn compressor_waits(&self) -> u64 {
        self.sum(|k| &k.compressor_waits)
    }
    /// The CPUs whose readers could not become real-time, and why (the
    /// first one's error).
    pub fn realtime_refused(&self) -> (usize, Option<std::io::Error>) {
        let refused: Vec<i32> = self
            .cpus
            .iter()
            .map(|(_, k)| k.realtime_refused.load(Relaxed))
            .filter(|&e| e != 0)
            .collect();
        let why = refused.first().map(|&e| match e {
            1.. => std::io::Error::from_raw_os_error(e),
            _ => std::io::Error::other("no error number"),
        });
        (refused.len(), why)
    }
    /// One counter summed over the CPUs.
    fn sum(&self, counter: impl Fn(&CpuCounters) -> &AtomicU64) -> u64 {
        self.cpus
            .iter()
            .map(|(_, k)| counter(k).load(Relaxed))
            .sum()
    }
}

pub use kmemtrace_kernel::human::thousands;

pub use kmemtrace_cli::colour::use_color;
pub use kmemtrace_kernel::human::bytes;

fn paint(color: bool, code: &str, s: &str) -> String {
    if color {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

/// `cpu0 0, cpu1 12`, highlighting non-zero losses.
fn lost_list(lost: &[(u32, u64)], color: bool) -> String {
    lost.iter()
        .map(|(c, n)| {
            let s = format!("cpu{c} {}", thousands(*n));
            if *n > 0 {
                paint(color, kmemtrace_cli::colour::RED, &s)
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The live status line (stderr on a terminal only).
pub struct StatusLine {
    color: bool,
    start: Instant,
    last: Instant,
    last_events: u64,
    last_written: u64,
    shown: bool,
}

impl StatusLine {
    pub fn new(color: bool) -> StatusLine {
        let now = Instant::now();
        StatusLine {
            color,
            start: now,
            last: now,
            last_events: 0,
            last_written: 0,
            shown: false,
        }
    }

    /// Redraws the line: rates since the last call, losses so far.
    pub fn update(&mut self, c: &Counters, lost: &[(u32, u64)]) {
        let now = Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64().max(1e-3);
        let ev = c.events();
        let wr = c.written.load(Relaxed);
        let line = format!(
            "{:>7.1}s  {} events/s  {}/s written  lost: {}",
            now.duration_since(self.start).as_secs_f64(),
            thousands(((ev - self.last_events.min(ev)) as f64 / dt) as u64),
            bytes((wr - self.last_written.min(wr)) as f64 / dt),
            lost_list(lost, self.color),
        );
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{line}");
        let _ = err.flush();
        self.shown = true;
        self.last = now;
        self.last_events = ev;
        self.last_written = wr;
    }

    /// Erases the line before other output.
    pub fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}

/// The figures of the summary printed at the end.
pub struct SummaryLine {
    pub elapsed: Duration,
    pub events: u64,
    pub cpus: usize,
    pub written: u64,
    pub lost: Vec<(u32, u64)>,
    pub backpressure: u64,
    pub compressor_waits: u64,
    pub cpu_time: Duration,
    pub peak_rss_kib: u64,
    pub reason: String,
    pub output: String,
}

impl SummaryLine {
    pub fn render(&self, color: bool) -> String {
        let secs = self.elapsed.as_secs_f64().max(1e-3);
        let per_event = if self.events > 0 {
            format!("{:.1} B/event", self.written as f64 / self.events as f64)
        } else {
            "no events".into()
        };
        let mut s = format!(
            "kmemtraced: {} events in {:.1} s on {} CPUs ({} events/s); {} written to {} ({}); lost: {}; recorder CPU {:.2} s, peak RSS {} KiB; stopped: {}",
            thousands(self.events),
            secs,
            self.cpus,
            thousands((self.events as f64 / secs) as u64),
            bytes(self.written as f64),
            self.output,
            per_event,
            lost_list(&self.lost, color),
            self.cpu_time.as_secs_f64(),
            thousands(self.peak_rss_kib),
            self.reason,
        );
        if self.compressor_waits > 0 {
            s.push_str(&format!(
                "; readers waited {} times for their compressors",
                thousands(self.compressor_waits)
            ));
        }
        if self.backpressure > 0 {
            s.push_str(&format!(
                "; compressors waited {} times for the writer",
                thousands(self.backpressure)
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(lost_list(&[(0, 0), (1, 1200)], false), "cpu0 0, cpu1 1,200");
    }
}
