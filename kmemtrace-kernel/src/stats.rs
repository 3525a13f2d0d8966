//! `per_cpu/cpuN/stats`: the ring buffer's per-CPU counters.
//!
//! ```text
//! entries: 626
//! overrun: 8577
//! commit overrun: 0
//! bytes: 18664
//! oldest event ts:    15.347583
//! now ts:    15.398959
//! dropped events: 0
//! read events: 0
//! ```
//!
//! Times are `seconds.micros` for nanosecond trace clocks and a bare count
//! for counter clocks (`counter`, `x86-tsc`), as `tracing_stats_read()`
//! prints them. Unknown lines are ignored, missing ones are `None`.
//!
//! The counters are the kernel's `unsigned long`s printed with `%ld`, so a
//! 32-bit kernel prints one past 2^31 as negative (`read events:
//! -2147483000` after some 2.1 G events read). [`CpuStats::parse`] keeps a
//! negative value's bits as a 64-bit two's complement;
//! [`CpuStats::with_long_size`] takes them to the kernel's width, where
//! the 32-bit counter's value is again exact (modulo 2^32, as the kernel
//! holds it).

use core::fmt;

/// A time from the stats file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatTime {
    /// A nanosecond clock's time (printed with microsecond precision).
    Nanos(u64),
    /// A counter clock's raw value.
    Counter(u64),
}

impl StatTime {
    /// Nanoseconds, for nanosecond clocks.
    pub fn ns(self) -> Option<u64> {
        match self {
            StatTime::Nanos(n) => Some(n),
            StatTime::Counter(_) => None,
        }
    }
}

/// One CPU's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Events in the buffer.
    pub entries: Option<u64>,
    /// Events lost by overwriting (overwrite mode).
    pub overrun: Option<u64>,
    /// Events lost while the writer wrapped inside a commit.
    pub commit_overrun: Option<u64>,
    /// Bytes of events in the buffer.
    pub bytes: Option<u64>,
    pub oldest_event_ts: Option<StatTime>,
    pub now_ts: Option<StatTime>,
    /// Events dropped because the buffer was full (non-overwrite mode).
    pub dropped_events: Option<u64>,
    /// Events consumed by readers.
    pub read_events: Option<u64>,
    /// The counters' width in bits, where known ([`CpuStats::with_long_size`]):
    /// a 32-bit kernel's wrap at 2^32. `None`: 64.
    pub counter_bits: Option<u32>,
}

/// How far a counter of `bits` bits went from `from` to `to`; `None` where
/// it fell, which is a reset of the buffer, unless a counter narrower than
/// 64 bits passed its top: then it fell but moved forward by what a buffer
/// can take between two looks, a quarter of its range at most (2^30
/// events for 32 bits: over 100 s at 10 M events/s), where a reset falls
/// to near 0.
pub fn counter_step(from: u64, to: u64, bits: u32) -> Option<u64> {
    if to >= from {
        return Some(to - from);
    }
    let bits = bits.clamp(2, 64);
    let forward = to.wrapping_sub(from) & (u64::MAX >> (64 - bits));
    (bits < 64 && forward < 1 << (bits - 2)).then_some(forward)
}

/// A counter line whose value cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatsError {
    /// 1-based line.
    pub line: usize,
    pub message: String,
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "per-CPU stats line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for StatsError {}

/// `12.345678` → ns, `12345` → counter.
fn parse_time(v: &str) -> Option<StatTime> {
    match v.split_once('.') {
        None => v.parse::<u64>().ok().map(StatTime::Counter),
        Some((s, frac)) => {
            if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let secs = s.parse::<u64>().ok()?;
            let f = frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32);
            secs.checked_mul(1_000_000_000)?
                .checked_add(f)
                .map(StatTime::Nanos)
        }
    }
}

impl CpuStats {
    /// Parses a `stats` file's text.
    pub fn parse(text: &str) -> Result<Self, StatsError> {
        let mut s = CpuStats::default();
        for (i, line) in text.lines().enumerate() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            let err = |what: &str| StatsError {
                line: i + 1,
                message: format!(
                    "{what} {v:?} is not {}",
                    if what.ends_with(" ts") {
                        "a time"
                    } else {
                        "a number"
                    }
                ),
            };
            let key = k.trim();
            let num = |slot: &mut Option<u64>| -> Result<(), StatsError> {
                let n = match v.strip_prefix('-') {
                    // `%ld` of an unsigned long: keep its bits.
                    Some(_) => v.parse::<i64>().map(|n| n as u64),
                    None => v.parse::<u64>(),
                };
                *slot = Some(n.map_err(|_| err(key))?);
                Ok(())
            };
            match key {
                "entries" => num(&mut s.entries)?,
                "overrun" => num(&mut s.overrun)?,
                "commit overrun" => num(&mut s.commit_overrun)?,
                "bytes" => num(&mut s.bytes)?,
                "dropped events" => num(&mut s.dropped_events)?,
                "read events" => num(&mut s.read_events)?,
                "oldest event ts" => {
                    s.oldest_event_ts = Some(parse_time(v).ok_or_else(|| err(key))?)
                }
                "now ts" => s.now_ts = Some(parse_time(v).ok_or_else(|| err(key))?),
                _ => {}
            }
        }
        Ok(s)
    }

    /// A `stats` file's bytes as a kernel whose long is `long_size` bytes
    /// wrote them ([`CpuStats::parse`], then [`CpuStats::with_long_size`]);
    /// `None` where a value is not a number.
    pub fn from_kernel(text: &[u8], long_size: usize) -> Option<Self> {
        CpuStats::parse(&String::from_utf8_lossy(text))
            .ok()
            .map(|s| s.with_long_size(long_size))
    }

    /// The counters in the width of the kernel's `unsigned long`
    /// (`long_size` bytes): what a 32-bit kernel printed as negative becomes
    /// its value again. 8 (or more) leaves them as they are.
    pub fn with_long_size(self, long_size: usize) -> Self {
        let bits = match long_size {
            1..=7 => 8 * long_size as u32,
            _ => 64,
        };
        let fit = |v: Option<u64>| v.map(|v| v & (u64::MAX >> (64 - bits)));
        CpuStats {
            counter_bits: Some(bits),
            entries: fit(self.entries),
            overrun: fit(self.overrun),
            commit_overrun: fit(self.commit_overrun),
            bytes: fit(self.bytes),
            dropped_events: fit(self.dropped_events),
            read_events: fit(self.read_events),
            ..self
        }
    }

    /// Events the kernel lost so far: `overrun + commit overrun + dropped
    /// events` (missing counters count as 0).
    pub fn lost_events(&self) -> u64 {
        [self.overrun, self.commit_overrun, self.dropped_events]
            .iter()
            .map(|v| v.unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    }

    /// How far one `counter` went from `start` to `self` ([`counter_step`]
    /// in `self`'s width; a missing value counts as 0), 0 if it was reset.
    pub fn since(&self, start: &CpuStats, counter: impl Fn(&CpuStats) -> Option<u64>) -> u64 {
        let (from, to) = (counter(start).unwrap_or(0), counter(self).unwrap_or(0));
        counter_step(from, to, self.counter_bits.unwrap_or(64)).unwrap_or(0)
    }

    /// Events lost between `start` and `self` (format-spec/FORMAT.md §9),
    /// 0 for a counter that went backwards (buffer reset).
    pub fn lost_since(&self, start: &CpuStats) -> u64 {
        self.since(start, |s| s.overrun)
            .saturating_add(self.since(start, |s| s.commit_overrun))
            .saturating_add(self.since(start, |s| s.dropped_events))
    }
}

/// A counter followed look by look: its steps ([`counter_step`]) added
/// up, a reset (a fall that is no pass over the top) counting the value
/// after it whole, as the kernel counts again from 0.
///
/// Why look by look: a 32-bit kernel's counters pass 2^32, and the
/// difference of two values far apart cannot tell a pass from a reset
/// once the counter moved more than a quarter of its range; between looks
/// seconds apart it cannot move that far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSum {
    /// Counted since the first look, as of the last.
    total: u64,
    last: u64,
    /// The counter's width in bits ([`CpuStats::counter_bits`]).
    bits: u32,
}

impl CounterSum {
    /// Starts from the value `start` of a counter `bits` wide.
    pub fn from(start: u64, bits: u32) -> Self {
        CounterSum {
            total: 0,
            last: start,
            bits,
        }
    }

    /// Takes the value `now`; returns the count since the start.
    pub fn update(&mut self, now: u64) -> u64 {
        let step = counter_step(self.last, now, self.bits).unwrap_or(now);
        self.total = self.total.saturating_add(step);
        self.last = now;
        self.total
    }

    pub fn total(&self) -> u64 {
        self.total
    }
}

/// One CPU's loss counters and read count followed snapshot by snapshot
/// ([`CounterSum`]): the figures of a capture from its start, periodic
/// and end statistics (format-spec/FORMAT.md §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuCounters {
    pub overrun: CounterSum,
    pub commit_overrun: CounterSum,
    pub dropped_events: CounterSum,
    pub read_events: CounterSum,
}

impl CpuCounters {
    /// From the statistics at the start (a missing counter counts as 0).
    pub fn from(start: &CpuStats) -> Self {
        let bits = start.counter_bits.unwrap_or(64);
        let at = |v: Option<u64>| CounterSum::from(v.unwrap_or(0), bits);
        CpuCounters {
            overrun: at(start.overrun),
            commit_overrun: at(start.commit_overrun),
            dropped_events: at(start.dropped_events),
            read_events: at(start.read_events),
        }
    }

    /// From `start`, over the later statistics `looks` in the order taken.
    pub fn over<'a>(start: &CpuStats, looks: impl IntoIterator<Item = &'a CpuStats>) -> Self {
        let mut c = Self::from(start);
        for now in looks {
            c.update(now);
        }
        c
    }

    /// Takes the statistics `now` (a counter missing there is skipped:
    /// no value, not 0).
    pub fn update(&mut self, now: &CpuStats) {
        let take = |sum: &mut CounterSum, v: Option<u64>| {
            if let Some(v) = v {
                sum.bits = now.counter_bits.unwrap_or(64);
                sum.update(v);
            }
        };
        take(&mut self.overrun, now.overrun);
        take(&mut self.commit_overrun, now.commit_overrun);
        take(&mut self.dropped_events, now.dropped_events);
        take(&mut self.read_events, now.read_events);
    }

    /// Events lost since the start: the three loss counters added up.
    pub fn lost(&self) -> u64 {
        [self.overrun, self.commit_overrun, self.dropped_events]
            .iter()
            .map(CounterSum::total)
            .fold(0u64, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERFLOW: &str = "entries: 626\noverrun: 8577\ncommit overrun: 0\nbytes: 18664\n\
        oldest event ts:    15.347583\nnow ts:    15.398959\ndropped events: 0\nread events: 0\n";

    #[test]
    fn parses_a_real_file() {
        let s = CpuStats::parse(OVERFLOW).unwrap();
        assert_eq!(s.entries, Some(626));
        assert_eq!(s.overrun, Some(8577));
        assert_eq!(s.commit_overrun, Some(0));
        assert_eq!(s.bytes, Some(18664));
        assert_eq!(s.oldest_event_ts, Some(StatTime::Nanos(15_347_583_000)));
        assert_eq!(s.now_ts.and_then(StatTime::ns), Some(15_398_959_000));
        assert_eq!(s.dropped_events, Some(0));
        assert_eq!(s.read_events, Some(0));
        assert_eq!(s.lost_events(), 8577);
        let start = CpuStats {
            overrun: Some(77),
            dropped_events: Some(5),
            ..CpuStats::default()
        };
        assert_eq!(s.lost_since(&start), 8500);
        assert_eq!(start.lost_since(&s), 5);
    }

    /// A 32-bit kernel's counters past 2^31, as `%ld` prints them.
    #[test]
    fn negative_counters_are_a_32_bit_kernels_high_values() {
        let text = "entries: 12\noverrun: -2147483000\ncommit overrun: 0\n\
            dropped events: 0\nread events: -1\n";
        let s = CpuStats::parse(text).unwrap().with_long_size(4);
        assert_eq!(s.overrun, Some((1 << 31) + 648));
        assert_eq!(s.read_events, Some(u64::from(u32::MAX)));
        assert_eq!(s.entries, Some(12));
        let start = CpuStats {
            overrun: Some((1 << 31) - 352),
            ..CpuStats::default()
        };
        assert_eq!(s.lost_since(&start), 1000);
        // Past 2^32 the count goes on from 0.
        let near_top = CpuStats {
            overrun: Some(u64::from(u32::MAX) - 99),
            ..CpuStats::default()
        };
        let past_top = CpuStats {
            overrun: Some(500),
            ..s
        };
        assert_eq!(past_top.lost_since(&near_top), 600);
        // Half the range back is no step but a reset.
        assert_eq!(past_top.lost_since(&start), 0);
        // A 64-bit kernel's are their own value (never reached in practice).
        let s = CpuStats::parse(text).unwrap().with_long_size(8);
        assert_eq!(s.read_events, Some(u64::MAX));
        assert_eq!(
            CpuStats {
                counter_bits: Some(64),
                ..CpuStats::parse(text).unwrap()
            },
            s
        );
    }

    #[test]
    fn counters_step_forward_across_their_top_and_fall_at_a_reset() {
        let top32 = u64::from(u32::MAX);
        assert_eq!(counter_step(5, 9, 32), Some(4));
        assert_eq!(counter_step(top32 - 99, 400, 32), Some(500));
        // A fall from high up to near 0 that is no short step: a reset.
        assert_eq!(counter_step(3_000_000_000, 10, 32), None);
        assert_eq!(counter_step(10, 3, 32), None);
        // 64-bit counters never pass their top.
        assert_eq!(counter_step(u64::MAX - 5, 3, 64), None);
        assert_eq!(counter_step(7, 7, 0), Some(0));
    }

    #[test]
    fn a_counter_is_followed_across_resets() {
        let mut c = CounterSum::from(100, 64);
        assert_eq!(c.update(100), 0);
        assert_eq!(c.update(250), 150);
        // Reset, then 30 more.
        assert_eq!(c.update(30), 180);
        assert_eq!(c.update(30), 180);
        assert_eq!(c.update(70), 220);
        // Another reset, seen at 0.
        assert_eq!(c.update(0), 220);
        assert_eq!(c.update(5), 225);
        assert_eq!(c.total(), 225);
    }

    /// A 32-bit kernel's count goes on from 0 after 2^32 - 1.
    #[test]
    fn a_32_bit_counter_is_followed_across_2_to_the_32() {
        let top = u64::from(u32::MAX);
        let mut c = CounterSum::from(top - 99, 32);
        assert_eq!(c.update(top), 99);
        assert_eq!(c.update(400), 500);
        assert_eq!(c.update(3_000_000_000), 3_000_000_100);
        // A reset from high up is still a reset.
        assert_eq!(c.update(10), 3_000_000_110);
        // A 64-bit count never wraps: a fall is a reset.
        let mut c = CounterSum::from(u64::MAX - 5, 64);
        assert_eq!(c.update(3), 3);
    }

    #[test]
    fn looks_seconds_apart_tell_passes_over_the_top_from_resets() {
        // A 32-bit overrun that went 3.2 G on from 3.2 G, in looks 0.9 G
        // apart: from start to end alone that is a fall of over 1.07 G
        // (2^30), a reset.
        let look = |overrun: u64, read: u64| CpuStats {
            overrun: Some(overrun % (1 << 32)),
            read_events: Some(read),
            counter_bits: Some(32),
            ..CpuStats::default()
        };
        let g = 1_000_000_000u64;
        let start = look(3 << 30, 0);
        let end = look((3 << 30) + 32 * g / 10, 20);
        assert_eq!(end.lost_since(&start), 0, "one step: taken for a reset");
        let at = |n: u64| look((3 << 30) + n * 9 * g / 10, n);
        let looks = [at(1), at(2), at(3), end];
        let c = CpuCounters::over(&start, &looks);
        assert_eq!(c.lost(), 32 * g / 10);
        assert_eq!(c.read_events.total(), 20);
    }

    #[test]
    fn counter_clocks_missing_and_unknown_lines() {
        let s = CpuStats::parse(
            "entries: 3\noldest event ts: 123456789\nsomething new: x\nnow ts: 0.5\n",
        )
        .unwrap();
        assert_eq!(s.entries, Some(3));
        assert_eq!(s.oldest_event_ts, Some(StatTime::Counter(123_456_789)));
        assert_eq!(s.oldest_event_ts.unwrap().ns(), None);
        assert_eq!(s.now_ts, Some(StatTime::Nanos(500_000_000)));
        assert_eq!(s.overrun, None);
        assert_eq!(s.lost_events(), 0);
        assert_eq!(CpuStats::parse("").unwrap(), CpuStats::default());
    }

    #[test]
    fn errors_name_the_line() {
        let e = CpuStats::parse("entries: 1\noverrun: 3x\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.to_string().contains("overrun \"3x\" is not a number"),
            "{e}"
        );
        for bad in ["-", "--3", "-99999999999999999999", "+-3"] {
            assert!(
                CpuStats::parse(&format!("read events: {bad}")).is_err(),
                "{bad}"
            );
        }
        for bad in [
            "now ts: 1.",
            "now ts: .5",
            "now ts: 1.1234567890",
            "now ts: 99999999999999999999.1",
            "now ts: 1.x",
        ] {
            let e = CpuStats::parse(bad).unwrap_err();
            assert!(e.message.contains("is not a time"), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in "\\PC*") {
            let _ = CpuStats::parse(&s);
        }
    }
}
