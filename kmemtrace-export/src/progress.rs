//! How far an export has got, and the one-line indicator that shows it on
//! a terminal (as `kmemtrace-report` shows its own: the line rewritten in
//! place a few times a second, and cleared when the work is done).

use std::io::Write;
use std::time::{Duration, Instant};

/// Sub-buffers of the log read, of all it holds, by the step named
/// (`writing`; for Perfetto, `analysing` first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub step: &'static str,
    pub done: u64,
    pub total: u64,
}

/// A progress line on standard error: shown once the work has taken
/// `EVERY`, rewritten at most every `EVERY`, and wiped when dropped.
pub struct Line {
    start: Instant,
    last: Option<Instant>,
    /// Characters of the line last written (to wipe it).
    width: usize,
}

/// The indicator's refresh period.
const EVERY: Duration = Duration::from_millis(250);

impl Default for Line {
    fn default() -> Self {
        Self::new()
    }
}

impl Line {
    pub fn new() -> Self {
        Line {
            start: Instant::now(),
            last: None,
            width: 0,
        }
    }

    /// Shows `p`, unless the line was written less than `EVERY` ago (or
    /// the work began less than `EVERY` ago).
    pub fn update(&mut self, p: Progress) {
        let now = Instant::now();
        let since = self.last.unwrap_or(self.start);
        if now.duration_since(since) < EVERY {
            return;
        }
        self.last = Some(now);
        let text = line(p, now.duration_since(self.start));
        let pad = self.width.saturating_sub(text.chars().count());
        self.width = text.chars().count();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{text}{:pad$}", "");
        let _ = err.flush();
    }

    /// Wipes the line, if one was written.
    pub fn clear(&mut self) {
        if self.width > 0 {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r{:w$}\r", "", w = self.width);
            let _ = err.flush();
            self.width = 0;
        }
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `kmemtrace-export: writing  42% of 12,345 sub-buffers, 3.1 s`.
fn line(p: Progress, elapsed: Duration) -> String {
    format!(
        "kmemtrace-export: {} {:>3}% of {} sub-buffers, {:.1} s",
        p.step,
        (p.done.min(p.total) * 100)
            .checked_div(p.total)
            .unwrap_or(100),
        kmemtrace_format::human::thousands(p.total),
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_the_share_done() {
        let l = line(
            Progress {
                step: "writing",
                done: 617,
                total: 1234,
            },
            Duration::from_millis(3150),
        );
        assert_eq!(
            l,
            "kmemtrace-export: writing  50% of 1,234 sub-buffers, 3.1 s"
        );
        // Nothing to do is all done; more than all is all.
        assert!(line(Progress::default(), Duration::ZERO).contains("100% of 0"));
        let over = Progress {
            done: 5,
            total: 4,
            ..Progress::default()
        };
        assert!(line(over, Duration::ZERO).contains("100% of 4"));
    }
}
