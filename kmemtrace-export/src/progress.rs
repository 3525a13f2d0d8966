//! How far an export has got, and the one-line indicator that shows it on
//! a terminal (as `kmemtrace-report` shows its own: the line rewritten in
//! place a few times a second, and wiped when the work is done).

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

/// A progress line (on standard error): shown once the work has taken
/// `EVERY`, rewritten at most every `EVERY`, and wiped when cleared or
/// dropped.
pub struct Line {
    out: Box<dyn Write>,
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
    /// A line on standard error.
    pub fn new() -> Self {
        Self::to(Box::new(std::io::stderr()), Instant::now())
    }

    fn to(out: Box<dyn Write>, start: Instant) -> Self {
        Line {
            out,
            start,
            last: None,
            width: 0,
        }
    }

    /// Shows `p`, unless the line was written less than `EVERY` ago (or
    /// the work began less than `EVERY` ago).
    pub fn update(&mut self, p: Progress) {
        self.update_at(p, Instant::now());
    }

    fn update_at(&mut self, p: Progress, now: Instant) {
        let since = self.last.unwrap_or(self.start);
        if now.saturating_duration_since(since) < EVERY {
            return;
        }
        self.last = Some(now);
        let text = line(p, now.saturating_duration_since(self.start));
        let n = text.chars().count();
        let pad = self.width.saturating_sub(n);
        self.width = n;
        let _ = write!(self.out, "\r{text}{:pad$}", "");
        let _ = self.out.flush();
    }

    /// Wipes the line, if one was written.
    pub fn clear(&mut self) {
        if self.width > 0 {
            let _ = write!(self.out, "\r{:w$}\r", "", w = self.width);
            let _ = self.out.flush();
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
    use std::sync::{Arc, Mutex};

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

    /// What a line writes, shared with the test.
    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl Write for Screen {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Screen {
        fn take(&self) -> String {
            String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
        }
    }

    /// Nothing in the first quarter second, then at most one line a
    /// quarter second, each over the last (a shorter one padded over the
    /// longer), and the line wiped at the end.
    #[test]
    fn the_line_is_rewritten_at_most_four_times_a_second_and_wiped() {
        let screen = Screen::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let p = |done| Progress {
            step: "writing",
            done,
            total: 100,
        };
        let mut l = Line::to(Box::new(screen.clone()), t0);
        l.update_at(p(1), ms(100));
        assert_eq!(screen.take(), "");
        let analysing = Progress {
            step: "analysing",
            ..p(100)
        };
        l.update_at(analysing, ms(300));
        let first = "kmemtrace-export: analysing 100% of 100 sub-buffers, 0.3 s";
        assert_eq!(screen.take(), format!("\r{first}"));
        l.update_at(p(50), ms(400));
        assert_eq!(screen.take(), "");
        l.update_at(p(60), ms(560));
        let second = "kmemtrace-export: writing  60% of 100 sub-buffers, 0.6 s";
        assert_eq!(screen.take(), format!("\r{second}  "));
        drop(l);
        assert_eq!(screen.take(), format!("\r{:w$}\r", "", w = second.len()));
        // A line never shown is not wiped either.
        let mut quick = Line::to(Box::new(screen.clone()), t0);
        quick.update_at(p(100), ms(10));
        quick.clear();
        drop(quick);
        assert_eq!(screen.take(), "");
    }
}
