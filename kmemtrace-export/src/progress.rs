//! How far an export has got, and the text of its progress line (shown on
//! a terminal by `kmemtrace_cli::progress::Line`, as the report's).

use std::time::Duration;

/// Sub-buffers of the log read, of all it holds, by the step named
/// (`writing`; for Perfetto, `analysing` first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub step: &'static str,
    pub done: u64,
    pub total: u64,
}

/// `kmemtrace-export: writing  42% of 12,345 sub-buffers, 3.1 s`.
pub fn line(p: Progress, elapsed: Duration) -> String {
    format!(
        "kmemtrace-export: {} {:>3}% of {} sub-buffers, {:.1} s",
        p.step,
        (p.done.min(p.total) * 100)
            .checked_div(p.total)
            .unwrap_or(100),
        kmemtrace_kernel::human::thousands(p.total),
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
