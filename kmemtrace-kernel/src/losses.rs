//! Where a CPU's stream lost events: holes in its sequence of
//! sub-buffers, and the windows of time in which events went missing. One
//! place for these facts, for the checker and the analyses alike: the
//! [`LossTracker`] holds the one rule set that decides the windows, which
//! `kmemtrace-check`, `kmemtrace-report` (its analysis stream) and its
//! `--events` listing all follow.

/// A CPU's sub-buffers, block after block: every CPU's sequence starts at
/// 0, each block names its first sub-buffer, and END says how many were
/// written. Spans the log says rotation removed (the files of a rotated
/// capture that were deleted, or not given) are not missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubBufSequence {
    /// The sub-buffer the next block should start at.
    pub expected: u64,
    /// Sub-buffer index ranges removed by rotation, `[from, to)`.
    dropped: Vec<(u64, u64)>,
}

/// Of the gap `[from, to)`, the sub-buffers inside the `dropped` ranges
/// and the others.
fn split_gap(dropped: &[(u64, u64)], from: u64, to: u64) -> (u64, u64) {
    let inside: u64 = dropped
        .iter()
        .map(|&(a, b)| b.min(to).saturating_sub(a.max(from)))
        .fold(0, u64::saturating_add);
    let inside = inside.min(to.saturating_sub(from));
    (inside, to.saturating_sub(from) - inside)
}

impl SubBufSequence {
    /// A sequence in which the `dropped` ranges of indexes, `[from, to)`,
    /// were removed by rotation.
    pub fn with_dropped(dropped: Vec<(u64, u64)>) -> Self {
        SubBufSequence {
            expected: 0,
            dropped,
        }
    }

    /// The next block present: the sub-buffers missing before it. (A block
    /// that overlaps the ones before never moves the sequence back.)
    pub fn block(&mut self, first: u64, count: u32) -> u64 {
        let (_, missing) = split_gap(&self.dropped, self.expected, first);
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
    /// Why the events are not there (the first cause met).
    pub cause: Cause,
}

/// Lost-event windows, so that "does any window touch `[t0, t1]`" is a
/// binary search or a few. Windows of different CPUs arrive interleaved and
/// out of order, and queries come between additions, so the windows are
/// kept as a few sorted runs whose lengths at least double from the newest
/// to the oldest (a binary counter): an addition merges runs, O(log W)
/// amortised, where inserting into one sorted list cost O(W) each.
#[derive(Clone, Debug, Default)]
pub struct Windows {
    /// Oldest (longest) first; every window of a run was added before
    /// those of the runs after it.
    runs: Vec<Run>,
}

/// Windows sorted by [`order`], with a running maximum of the ends.
#[derive(Clone, Debug, Default)]
struct Run {
    list: Vec<Window>,
    /// `max_end[i]` = the largest `end` among `list[..=i]`.
    max_end: Vec<u64>,
}

/// Windows that start together are kept by end, then CPU, then start;
/// equal ones in the order they were added.
fn order(x: &Window) -> (u64, u64, u32, u64) {
    (x.since, x.end, x.cpu, x.start)
}

impl Run {
    fn of(list: Vec<Window>) -> Run {
        let max_end = list
            .iter()
            .scan(0, |m, x| {
                *m = x.end.max(*m);
                Some(*m)
            })
            .collect();
        Run { list, max_end }
    }

    /// `self` and the newer `later`, in one run; on equal keys `self`'s
    /// windows come first.
    fn merge(self, later: Run) -> Run {
        let mut out = Vec::with_capacity(self.list.len() + later.list.len());
        let mut a = self.list.into_iter().peekable();
        let mut b = later.list.into_iter().peekable();
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => order(x) <= order(y),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            out.extend(if take_a { a.next() } else { b.next() });
        }
        Run::of(out)
    }

    fn touches(&self, t0: u64, t1: u64) -> bool {
        let n = self.list.partition_point(|x| x.since <= t1);
        n > 0 && self.max_end[n - 1] >= t0
    }
}

impl Windows {
    /// Adds a window.
    pub fn add(&mut self, w: Window) {
        self.runs.push(Run::of(vec![w]));
        while let [.., a, b] = self.runs.as_slice() {
            if a.list.len() > b.list.len() {
                break;
            }
            let (Some(b), Some(a)) = (self.runs.pop(), self.runs.pop()) else {
                break;
            };
            self.runs.push(a.merge(b));
        }
    }

    /// Merges the runs into one, so that later queries are one binary
    /// search each (for when every window is in).
    pub fn compact(&mut self) {
        let runs = std::mem::take(&mut self.runs);
        let merged = runs.into_iter().reduce(Run::merge);
        self.runs.extend(merged);
    }

    /// True if events lost in some window may have fallen in `[t0, t1]`
    /// (`t1` on the monotonic clock of [`Window::since`]).
    #[inline]
    pub fn touches(&self, t0: u64, t1: u64) -> bool {
        self.runs.iter().any(|r| r.touches(t0, t1))
    }

    /// True if events were lost anywhere at or after `t`.
    pub fn after(&self, t: u64) -> bool {
        self.runs
            .iter()
            .any(|r| r.max_end.last().is_some_and(|&m| m >= t))
    }

    /// How many windows there are.
    pub fn len(&self) -> usize {
        self.runs.iter().map(|r| r.list.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Every window, sorted by `since`, then end, CPU and start (equal ones
    /// in the order they were added).
    pub fn list(&self) -> Vec<Window> {
        let mut all: Vec<Window> = self
            .runs
            .iter()
            .flat_map(|r| r.list.iter().copied())
            .collect();
        // Stable: the runs are oldest first.
        all.sort_by_key(order);
        all
    }
}

/// Smallest event the kernel writes (`RB_EVNT_MIN_SIZE`): a null padding
/// this long or longer inside a sub-buffer's commit hides bytes that were
/// committed (the records after it are [`Cause::Damaged`]).
pub const RB_EVNT_MIN_SIZE: usize = 8;

/// Why a CPU's stream lacks events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// The kernel overwrote them: the next sub-buffer read carries
    /// `RB_MISSED_EVENTS` (with `RB_MISSED_STORED`, their number).
    Overwritten,
    /// Sub-buffers the log lacks: between the blocks present, in a block
    /// that cannot be read back, or written (END says) after the last one.
    Missing,
    /// A sub-buffer whose header does not decode, or whose records stop
    /// decoding (or a null padding hides committed bytes) before its
    /// commit: the records after that point.
    Damaged,
    /// Sub-buffers of a rotated capture whose files were removed (the
    /// recorder's size budget) or not given: before the first file read,
    /// or between two that do not follow each other.
    Rotated,
}

impl Cause {
    /// The name the JSON documents use.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Overwritten => "overwritten",
            Cause::Missing => "missing",
            Cause::Damaged => "damaged",
            Cause::Rotated => "rotated",
        }
    }
}

/// What the tracker needs of one sub-buffer, or of a run of consecutive
/// ones of one CPU, in stream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubBufRun {
    /// The first sub-buffer's index in the CPU's sequence.
    pub index: u64,
    /// Sub-buffers in the run.
    pub count: u64,
    /// Events lost before the run's first record: `Overwritten` with the
    /// stored count (`None`: flag alone), `Damaged` (the header does not
    /// decode) or `Missing` (a block that cannot be read back).
    pub before: Option<(Cause, Option<u64>)>,
    /// The first and last data events' time stamps, in record order, and
    /// the latest of them all (0 if none).
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
    pub max_ts: u64,
    /// Records lost after the last one read: the rest of a sub-buffer
    /// that stops decoding.
    pub tail_lost: bool,
}

impl SubBufRun {
    /// A sub-buffer whose header decoded; `missed`/`stored`: its
    /// missed-events flag and stored count.
    pub fn read(index: u64, missed: bool, stored: Option<u64>) -> Self {
        SubBufRun {
            index,
            count: 1,
            before: missed.then_some((Cause::Overwritten, stored)),
            first_ts: None,
            last_ts: None,
            max_ts: 0,
            tail_lost: false,
        }
    }

    /// A sub-buffer whose header does not decode.
    pub fn undecodable(index: u64) -> Self {
        SubBufRun {
            before: Some((Cause::Damaged, None)),
            ..SubBufRun::read(index, false, None)
        }
    }

    /// A block of `count` sub-buffers from `first` that cannot be read.
    pub fn unreadable(first: u64, count: u32) -> Self {
        SubBufRun {
            count: u64::from(count),
            before: Some((Cause::Missing, None)),
            ..SubBufRun::read(first, false, None)
        }
    }

    /// A data event read, in record order.
    #[inline]
    pub fn event(&mut self, ts: u64) {
        self.first_ts.get_or_insert(ts);
        self.last_ts = Some(ts);
        self.max_ts = self.max_ts.max(ts);
    }
}

/// Sub-buffer runs kept for a tracker fed later (a block or a segment
/// decoded ahead of its turn): consecutive sub-buffers that lost nothing
/// are one run, and so are consecutive losses with no event between them,
/// so that the list grows with the windows, not the data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubBufRuns(pub Vec<SubBufRun>);

impl SubBufRuns {
    pub fn push(&mut self, r: SubBufRun) {
        if let Some(l) = self.0.last_mut() {
            let follows = !l.tail_lost && l.index.checked_add(l.count) == Some(r.index);
            if follows && r.before.is_none() {
                l.count += r.count;
                l.first_ts = l.first_ts.or(r.first_ts);
                l.last_ts = r.last_ts.or(l.last_ts);
                l.max_ts = l.max_ts.max(r.max_ts);
                l.tail_lost = r.tail_lost;
                return;
            }
            if follows && l.first_ts.is_none() && Self::join_loss(l, &r) {
                return;
            }
        }
        self.0.push(r);
    }

    /// `r`, a loss right after `l`, a run that lost events before it and
    /// holds none, joined to `l` if [`LossTracker`] would join them: `l`
    /// leaves its window open (no event closes it, its tail is whole),
    /// and `r`, with no gap before it, adds its count to that window. (An
    /// empty `r` is left apart: a torn tail is placed at a run's last
    /// sub-buffer, which it has none of.)
    fn join_loss(l: &mut SubBufRun, r: &SubBufRun) -> bool {
        let (Some((cause, a)), Some((_, b)), Some(count)) =
            (l.before, r.before, l.count.checked_add(r.count))
        else {
            return false;
        };
        if r.count == 0 {
            return false;
        }
        let lost = match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            _ => None,
        };
        *l = SubBufRun {
            index: l.index,
            count,
            before: Some((cause, lost)),
            ..*r
        };
        true
    }
}

/// Where one CPU's stream lost events: from the last data event before the
/// loss to the first after it, whatever their kind (the ring buffer's
/// records are the CPU's order; a window bounds the loss as tightly as
/// the log can).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    pub cpu: u32,
    /// The last event before (`None`: the loss came before the CPU's
    /// first event in the log).
    pub start: Option<u64>,
    /// The first event after (`None`: none followed).
    pub end: Option<u64>,
    /// The latest time stamp up to `start` (`start` unless the clock went
    /// back; 0 without one).
    pub since: u64,
    /// The first cause met (a window can join several: a gap in the
    /// sequence, then a flagged sub-buffer, before any event).
    pub cause: Cause,
    /// Events lost, where every cause joined says how many.
    pub count: Option<u64>,
    /// The sub-buffer the loss was noticed at: the flagged or damaged one,
    /// the first present after a gap (for a loss at the stream's end, the
    /// first one missing).
    pub subbuf: u64,
}

impl Loss {
    /// As a window of [`Windows`] (0 and `u64::MAX` for no bound).
    pub fn window(&self) -> Window {
        Window {
            cpu: self.cpu,
            start: self.start.unwrap_or(0),
            end: self.end.unwrap_or(u64::MAX),
            since: self.since,
            cause: self.cause,
        }
    }
}

/// The one rule set for loss windows, fed one CPU's sub-buffers (or runs
/// of them) in stream order:
///
/// - a sub-buffer flagged `RB_MISSED_EVENTS` lost events before its first
///   record (`Overwritten`, with the stored count if any);
/// - sub-buffer indexes that skip (blocks lost, or not fed because they
///   could not be read) lost everything in between (`Missing`), as do
///   sub-buffers END says were written after the last one fed;
/// - a sub-buffer whose header does not decode lost all its records, one
///   whose records stop decoding lost the rest (`Damaged`).
///
/// Losses with no event between them are one window. A window runs from
/// the last data event before it to the first after it; one still open at
/// the stream's end has no end.
#[derive(Clone, Debug)]
pub struct LossTracker {
    cpu: u32,
    /// The index the next sub-buffer should have.
    next: u64,
    last_ts: Option<u64>,
    max_ts: u64,
    pending: Option<Loss>,
    /// Sub-buffer index ranges removed by rotation, `[from, to)`.
    dropped: Vec<(u64, u64)>,
}

impl LossTracker {
    pub fn new(cpu: u32) -> Self {
        LossTracker {
            cpu,
            next: 0,
            last_ts: None,
            max_ts: 0,
            pending: None,
            dropped: Vec::new(),
        }
    }

    /// A tracker for a CPU whose `dropped` ranges of sub-buffer indexes,
    /// `[from, to)`, were removed by rotation: a gap there is
    /// [`Cause::Rotated`], not [`Cause::Missing`].
    pub fn with_dropped(cpu: u32, dropped: Vec<(u64, u64)>) -> Self {
        LossTracker {
            dropped,
            ..LossTracker::new(cpu)
        }
    }

    fn lose(&mut self, cause: Cause, count: Option<u64>, subbuf: u64) {
        match &mut self.pending {
            Some(p) => {
                p.count = match (p.count, count) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    _ => None,
                };
            }
            None => {
                self.pending = Some(Loss {
                    cpu: self.cpu,
                    start: self.last_ts,
                    end: None,
                    since: self.max_ts,
                    cause,
                    count,
                    subbuf,
                })
            }
        }
    }

    /// The next run in stream order: the window its first event closes.
    pub fn push(&mut self, r: &SubBufRun) -> Option<Loss> {
        if r.index > self.next {
            let (rotated, missing) = split_gap(&self.dropped, self.next, r.index);
            if rotated > 0 {
                self.lose(Cause::Rotated, None, r.index);
            }
            if missing > 0 {
                self.lose(Cause::Missing, None, r.index);
            }
        }
        self.next = self.next.max(r.index.saturating_add(r.count));
        if let Some((cause, count)) = r.before {
            self.lose(cause, count, r.index);
        }
        let mut closed = None;
        if let Some(f) = r.first_ts {
            closed = self.pending.take().map(|p| Loss { end: Some(f), ..p });
            self.last_ts = r.last_ts;
            self.max_ts = self.max_ts.max(r.max_ts);
        }
        if r.tail_lost {
            let at = r.index.saturating_add(r.count.saturating_sub(1));
            self.lose(Cause::Damaged, None, at);
        }
        closed
    }

    /// The stream is over; `written`: the sub-buffers END says the CPU
    /// wrote (`None` in a log cut short). The window left open, if any.
    pub fn finish(&mut self, written: Option<u64>) -> Option<Loss> {
        if let Some(w) = written.filter(|&w| w > self.next) {
            let at = self.next;
            self.lose(Cause::Missing, None, at);
            self.next = w;
        }
        self.pending.take()
    }

    /// Events were lost after the last event fed.
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The latest time stamp fed: a window still open has `since` equal to
    /// it (no event came after its start), and one that starts later has
    /// `since` at least this.
    pub fn floor(&self) -> u64 {
        self.max_ts
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
    fn gaps_removed_by_rotation_are_not_missing() {
        // Files removed before the first read (0..4) and between two (10..12).
        let dropped = vec![(0, 4), (10, 12)];
        let mut s = SubBufSequence::with_dropped(dropped.clone());
        assert_eq!(s.block(4, 6), 0);
        assert_eq!(
            s.block(13, 1),
            1,
            "12 is missing, 10 and 11 were rotated away"
        );
        let mut t = LossTracker::with_dropped(0, dropped);
        let mut run = SubBufRun::read(4, false, None);
        run.event(100);
        let first = t.push(&run).expect("the window before the first event");
        assert_eq!(
            (first.cause, first.start, first.end),
            (Cause::Rotated, None, Some(100))
        );
        let mut run = SubBufRun::read(12, false, None);
        run.event(200);
        assert_eq!(t.push(&run).unwrap().cause, Cause::Rotated);
        let mut run = SubBufRun::read(14, false, None);
        run.event(300);
        let w = t.push(&run).unwrap();
        assert_eq!(
            (w.cause, w.start, w.end),
            (Cause::Missing, Some(200), Some(300))
        );
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
            cause: Cause::Overwritten,
        });
        w.add(Window {
            cpu: 1,
            start: 10,
            end: 20,
            since: 10,
            cause: Cause::Overwritten,
        });
        assert!(w.touches(15, 16));
        assert!(w.touches(0, 10));
        assert!(!w.touches(21, 49));
        assert!(w.touches(55, 1000));
        assert!(!w.touches(61, 1000));
        assert!(w.after(60));
        assert!(!w.after(61));
    }

    /// The windows as one list kept sorted by inserting each (the
    /// quadratic way they once were kept): what [`Windows`] must answer.
    #[derive(Default)]
    struct OneList(Vec<Window>);

    impl OneList {
        fn add(&mut self, w: Window) {
            let i = self.0.partition_point(|x| order(x) <= order(&w));
            self.0.insert(i, w);
        }
        fn touches(&self, t0: u64, t1: u64) -> bool {
            self.0.iter().any(|x| x.since <= t1 && x.end >= t0)
        }
        fn after(&self, t: u64) -> bool {
            self.0.iter().any(|x| x.end >= t)
        }
    }

    #[test]
    fn windows_answer_like_one_sorted_list_between_any_additions() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let causes = [Cause::Overwritten, Cause::Missing, Cause::Damaged];
        for round in 0..40 {
            let (mut w, mut model) = (Windows::default(), OneList::default());
            // Each CPU's windows come in its own order; the CPUs' interleave.
            let mut clock = [0u64; 4];
            let n = 1 + rnd(300);
            for i in 0..n {
                let cpu = rnd(4) as u32;
                let c = &mut clock[cpu as usize];
                *c += rnd(20);
                let since = *c;
                let end = if rnd(10) == 0 {
                    u64::MAX
                } else {
                    since + rnd(40)
                };
                let win = Window {
                    cpu,
                    start: since - rnd(2).min(since),
                    end,
                    since,
                    cause: causes[rnd(3) as usize],
                };
                w.add(win);
                model.add(win);
                if round % 4 == 0 && i == n / 2 {
                    w.compact();
                }
                for _ in 0..3 {
                    let t0 = rnd(2000);
                    let t1 = t0 + rnd(50);
                    assert_eq!(w.touches(t0, t1), model.touches(t0, t1), "{t0} {t1}");
                    assert_eq!(w.after(t0), model.after(t0), "{t0}");
                }
                if rnd(20) == 0 {
                    assert_eq!(w.list(), model.0);
                }
                // Each merge at least doubles the run a window is in, and
                // the runs (one of any length, left by `compact`, then
                // shrinking powers of two) are few.
                let lens: Vec<usize> = w.runs.iter().map(|r| r.list.len()).collect();
                assert!(lens.windows(2).all(|p| p[0] > p[1]), "{lens:?}");
                assert!(lens.len() <= 2 + w.len().ilog2() as usize, "{lens:?}");
            }
            assert_eq!(w.len(), model.0.len());
            assert_eq!(w.list(), model.0);
            w.compact();
            assert_eq!(w.runs.len(), 1);
            assert_eq!(w.list(), model.0);
        }
    }
}

#[cfg(test)]
mod tracker_tests {
    use super::*;

    fn sb(index: u64, missed: bool, stored: Option<u64>, ts: &[u64]) -> SubBufRun {
        let mut r = SubBufRun::read(index, missed, stored);
        for &t in ts {
            r.event(t);
        }
        r
    }

    fn run(cpu: u32, runs: &[SubBufRun], written: Option<u64>) -> Vec<Loss> {
        let mut t = LossTracker::new(cpu);
        let mut out: Vec<Loss> = runs.iter().filter_map(|r| t.push(r)).collect();
        out.extend(t.finish(written));
        out
    }

    type Bounds = (Option<u64>, Option<u64>, Cause, Option<u64>, u64);

    fn bounds(l: &[Loss]) -> Vec<Bounds> {
        l.iter()
            .map(|l| (l.start, l.end, l.cause, l.count, l.subbuf))
            .collect()
    }

    #[test]
    fn a_flagged_subbuffer_bounds_its_loss_by_the_events_around_it() {
        let l = run(
            3,
            &[
                sb(0, false, None, &[10, 20]),
                sb(1, true, Some(7), &[30, 40]),
                sb(2, true, None, &[]),
                sb(3, false, None, &[50]),
            ],
            Some(4),
        );
        assert_eq!(
            bounds(&l),
            [
                (Some(20), Some(30), Cause::Overwritten, Some(7), 1),
                (Some(40), Some(50), Cause::Overwritten, None, 2),
            ]
        );
        assert!(l.iter().all(|l| l.cpu == 3));
        assert_eq!(l[0].window().since, 20);
    }

    #[test]
    fn a_loss_before_the_first_event_has_no_start() {
        let l = run(0, &[sb(0, true, Some(5), &[100])], None);
        assert_eq!(
            bounds(&l),
            [(None, Some(100), Cause::Overwritten, Some(5), 0)]
        );
        assert_eq!(l[0].window().start, 0);
    }

    #[test]
    fn gaps_unreadable_blocks_and_the_end_are_missing_subbuffers() {
        // A lost first block, a gap, an unreadable block, and END saying
        // two more were written.
        let l = run(
            1,
            &[
                sb(2, false, None, &[5]),
                sb(6, true, Some(3), &[9]),
                SubBufRun::unreadable(7, 2),
                sb(9, false, None, &[12]),
            ],
            Some(12),
        );
        assert_eq!(
            bounds(&l),
            [
                (None, Some(5), Cause::Missing, None, 2),
                (Some(5), Some(9), Cause::Missing, None, 6),
                (Some(9), Some(12), Cause::Missing, None, 7),
                (Some(12), None, Cause::Missing, None, 10),
            ]
        );
        // A cut log (no END) says nothing of what came after.
        assert!(run(1, &[sb(0, false, None, &[5])], None).is_empty());
        // Nothing present at all, but END says some were written.
        assert_eq!(
            bounds(&run(2, &[], Some(2))),
            [(None, None, Cause::Missing, None, 0)]
        );
    }

    #[test]
    fn damage_loses_the_rest_of_a_subbuffer() {
        let mut torn = sb(1, false, None, &[20, 25]);
        torn.tail_lost = true;
        let l = run(
            0,
            &[
                sb(0, false, None, &[10]),
                torn,
                SubBufRun::undecodable(2),
                sb(3, true, Some(4), &[40]),
            ],
            Some(4),
        );
        assert_eq!(bounds(&l), [(Some(25), Some(40), Cause::Damaged, None, 1)]);
    }

    /// Consecutive losses with no event between them are one run: a CPU
    /// of many undecodable or flagged empty sub-buffers keeps one.
    #[test]
    fn consecutive_losses_without_events_are_one_run() {
        let mut runs = SubBufRuns::default();
        for i in 0..1000 {
            runs.push(if i % 2 == 0 {
                SubBufRun::undecodable(i)
            } else {
                sb(i, true, Some(2), &[])
            });
        }
        runs.push(SubBufRun::unreadable(1000, 3));
        runs.push(sb(1003, true, Some(1), &[50]));
        assert_eq!(runs.0.len(), 1);
        let r = runs.0[0];
        assert_eq!((r.index, r.count), (0, 1004));
        assert_eq!(r.before, Some((Cause::Damaged, None)));
        assert_eq!((r.first_ts, r.last_ts, r.max_ts), (Some(50), Some(50), 50));
        // Counts add up where all are known.
        let mut flagged = SubBufRuns::default();
        for i in 0..3 {
            flagged.push(sb(i, true, Some(u64::MAX - 1), &[]));
        }
        assert_eq!(flagged.0.len(), 1);
        assert_eq!(
            flagged.0[0].before,
            Some((Cause::Overwritten, Some(u64::MAX)))
        );
        // An event, a torn tail or a gap between two losses keeps them apart.
        let mut apart = SubBufRuns::default();
        apart.push(sb(0, true, Some(1), &[5]));
        apart.push(sb(1, true, Some(1), &[]));
        let mut torn = sb(2, true, Some(1), &[]);
        torn.tail_lost = true;
        apart.push(torn);
        apart.push(sb(3, true, Some(1), &[]));
        apart.push(sb(5, true, Some(1), &[]));
        assert_eq!(apart.0.len(), 4);
    }

    /// A run of one CPU's sub-buffers, from random draws: indexes that
    /// follow, skip or go back; any loss before; events or none; a torn
    /// tail.
    fn random_runs(draws: &[(u8, u8, u8, u8)]) -> Vec<SubBufRun> {
        let mut next = 0u64;
        let mut ts = 100u64;
        draws
            .iter()
            .map(|&(step, before, events, tail)| {
                let index = match step % 8 {
                    0 => next.saturating_sub(1),
                    1 => next + 2,
                    _ => next,
                };
                let mut r = match before % 6 {
                    0 => SubBufRun::undecodable(index),
                    1 => SubBufRun::unreadable(index, u32::from(step / 8 % 3)),
                    2 => sb(index, true, None, &[]),
                    // Small counts, and now and then one near the top.
                    3 => sb(index, true, Some(u64::from(tail) << (tail % 2 * 56)), &[]),
                    _ => sb(index, false, None, &[]),
                };
                for k in 0..events % 3 {
                    // Mostly forward; now and then back.
                    ts = if (events ^ k) % 5 == 0 {
                        ts - 7
                    } else {
                        ts + 10
                    };
                    r.event(ts);
                }
                r.tail_lost = tail % 5 == 0;
                next = next.max(index + r.count);
                r
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The tracker finds the same windows in runs pushed into
        /// [`SubBufRuns`] as in the sub-buffers one by one, rotation
        /// gaps and END's count included.
        #[test]
        fn merged_runs_give_the_windows_of_the_sub_buffers(
            draws in proptest::collection::vec(proptest::prelude::any::<(u8, u8, u8, u8)>(), 0..60),
            dropped in proptest::collection::vec((0u64..40, 0u64..4), 0..3),
            written in proptest::option::of(0u64..80),
        ) {
            let all = random_runs(&draws);
            let mut runs = SubBufRuns::default();
            for &r in &all {
                runs.push(r);
            }
            let dropped: Vec<(u64, u64)> = dropped.iter().map(|&(a, n)| (a, a + n)).collect();
            let windows = |rs: &[SubBufRun]| {
                let mut t = LossTracker::with_dropped(7, dropped.clone());
                let mut out: Vec<Loss> = rs.iter().filter_map(|r| t.push(r)).collect();
                out.extend(t.finish(written));
                out
            };
            proptest::prop_assert_eq!(windows(&runs.0), windows(&all));
        }
    }

    #[test]
    fn runs_keep_what_the_windows_need() {
        let all = [
            sb(0, false, None, &[1, 2]),
            sb(1, false, None, &[3]),
            sb(2, true, Some(2), &[]),
            sb(3, false, None, &[7, 5]),
            sb(4, false, None, &[8]),
            sb(9, false, None, &[10]),
        ];
        let mut runs = SubBufRuns::default();
        for r in all {
            runs.push(r);
        }
        assert_eq!(runs.0.len(), 3);
        assert_eq!((runs.0[1].index, runs.0[1].count), (2, 3));
        assert_eq!(runs.0[1].max_ts, 8);
        assert_eq!(run(0, &runs.0, Some(10)), run(0, &all, Some(10)));
        assert_eq!(run(0, &all, Some(10)).len(), 2);
    }
}
