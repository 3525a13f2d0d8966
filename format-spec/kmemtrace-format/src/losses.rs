//! Where a CPU's stream lost events: holes in its sequence of
//! sub-buffers, and the windows of time in which events went missing. One
//! place for these facts, for the checker and the analyses alike.

/// A CPU's sub-buffers, block after block: every CPU's sequence starts at
/// 0, each block names its first sub-buffer, and END says how many were
/// written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubBufSequence {
    /// The sub-buffer the next block should start at.
    pub expected: u64,
}

impl SubBufSequence {
    /// The next block present: the sub-buffers missing before it. (A block
    /// that overlaps the ones before never moves the sequence back.)
    pub fn block(&mut self, first: u64, count: u32) -> u64 {
        let missing = first.saturating_sub(self.expected);
        self.expected = self.expected.max(first.saturating_add(u64::from(count)));
        missing
    }

    /// Sub-buffers written (END's count) after the last block present.
    pub fn after_last(&self, written: Option<u64>) -> u64 {
        written.map_or(0, |w| w.saturating_sub(self.expected))
    }
}

/// A stretch of time on one CPU in which events were lost: after the
/// event at `start` (0: before the CPU's first event) and before the one at
/// `end` (`u64::MAX`: after its last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub cpu: u32,
    pub start: u64,
    pub end: u64,
    /// `start` on the CPU's clock made monotonic (raised to the latest time
    /// stamp before it; the same unless the clock went back): what queries
    /// compare with, so that a window found later never starts before one
    /// found earlier on the same CPU.
    pub since: u64,
}

/// Lost-event windows, sorted by `since` with a running maximum of the
/// ends, so that "does any window touch `[t0, t1]`" is a binary search.
#[derive(Clone, Debug, Default)]
pub struct Windows {
    list: Vec<Window>,
    /// `max_end[i]` = the largest `end` among `list[..=i]`.
    max_end: Vec<u64>,
}

impl Windows {
    /// Adds a window; windows that start together are kept by end, then
    /// CPU, whatever order they are found in.
    pub fn add(&mut self, w: Window) {
        let order = |x: &Window| (x.since, x.end, x.cpu, x.start);
        let i = self.list.partition_point(|x| order(x) <= order(&w));
        self.list.insert(i, w);
        self.max_end.truncate(i);
        let mut m = if i == 0 { 0 } else { self.max_end[i - 1] };
        for x in &self.list[i..] {
            m = m.max(x.end);
            self.max_end.push(m);
        }
    }

    /// True if events lost in some window may have fallen in `[t0, t1]`
    /// (`t1` on the monotonic clock of [`Window::since`]).
    #[inline]
    pub fn touches(&self, t0: u64, t1: u64) -> bool {
        let n = self.list.partition_point(|x| x.since <= t1);
        n > 0 && self.max_end[n - 1] >= t0
    }

    /// True if events were lost anywhere at or after `t`.
    pub fn after(&self, t: u64) -> bool {
        self.max_end.last().is_some_and(|&m| m >= t)
    }

    pub fn list(&self) -> &[Window] {
        &self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_in_the_sequence() {
        let mut s = SubBufSequence::default();
        assert_eq!(s.block(2, 3), 2);
        assert_eq!(s.block(5, 1), 0);
        assert_eq!(s.block(4, 1), 0, "an overlap");
        assert_eq!(s.expected, 6);
        assert_eq!(s.block(9, 1), 3);
        assert_eq!(s.after_last(Some(12)), 2);
        assert_eq!(s.after_last(Some(3)), 0);
        assert_eq!(s.after_last(None), 0);
    }

    #[test]
    fn windows_touch() {
        let mut w = Windows::default();
        assert!(!w.touches(0, 100));
        w.add(Window {
            cpu: 0,
            start: 50,
            end: 60,
            since: 50,
        });
        w.add(Window {
            cpu: 1,
            start: 10,
            end: 20,
            since: 10,
        });
        assert!(w.touches(15, 16));
        assert!(w.touches(0, 10));
        assert!(!w.touches(21, 49));
        assert!(w.touches(55, 1000));
        assert!(!w.touches(61, 1000));
        assert!(w.after(60));
        assert!(!w.after(61));
    }
}
