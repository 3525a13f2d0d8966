//! The one-line progress indicator every program shows on a terminal:
//! the line rewritten in place a few times a second once the work has
//! taken a quarter second, and wiped when the work is done.

use std::io::Write;
use std::time::{Duration, Instant};

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

impl Line {
    /// A line on standard error where it is a terminal and `quiet` is not
    /// asked; `None` elsewhere (a pipe, a file, a CI log).
    pub fn on_terminal(quiet: bool) -> Option<Line> {
        use std::io::IsTerminal;
        (!quiet && std::io::stderr().is_terminal())
            .then(|| Self::to(Box::new(std::io::stderr()), Instant::now()))
    }

    fn to(out: Box<dyn Write>, start: Instant) -> Self {
        Line {
            out,
            start,
            last: None,
            width: 0,
        }
    }

    /// Shows the line `text` makes of the time elapsed, unless the line
    /// was written less than `EVERY` ago (or the work began less than
    /// `EVERY` ago): `text` is called only when the line is written.
    pub fn update(&mut self, text: impl FnOnce(Duration) -> String) {
        self.update_at(text, Instant::now());
    }

    fn update_at(&mut self, text: impl FnOnce(Duration) -> String, now: Instant) {
        let since = self.last.unwrap_or(self.start);
        if now.saturating_duration_since(since) < EVERY {
            return;
        }
        self.last = Some(now);
        let text = text(now.saturating_duration_since(self.start));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

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
        let say = |s: &'static str| move |e: Duration| format!("{s} {:.1} s", e.as_secs_f64());
        let mut l = Line::to(Box::new(screen.clone()), t0);
        l.update_at(say("early"), ms(100));
        assert_eq!(screen.take(), "");
        l.update_at(say("analysing, longer"), ms(300));
        let first = "analysing, longer 0.3 s";
        assert_eq!(screen.take(), format!("\r{first}"));
        l.update_at(say("too soon"), ms(400));
        assert_eq!(screen.take(), "");
        l.update_at(say("writing"), ms(560));
        let second = "writing 0.6 s";
        assert_eq!(
            screen.take(),
            format!("\r{second}{:w$}", "", w = first.len() - second.len())
        );
        drop(l);
        assert_eq!(screen.take(), format!("\r{:w$}\r", "", w = second.len()));
        // A line never shown is not wiped either.
        let mut quick = Line::to(Box::new(screen.clone()), t0);
        quick.update_at(say("done"), ms(10));
        quick.clear();
        drop(quick);
        assert_eq!(screen.take(), "");
    }
}
