//! The model's binned series turned into chart vertices (seconds after
//! the capture's first event, value), thinned to what a plot can show:
//! a page stays light however many events the capture holds.

use kmemtrace_analysis::model::TimeSeries;

/// Vertices per line at most, about one per pixel column and a half.
const MAX_VERTICES: usize = 1500;
/// Bins of a rate chart at most.
const MAX_RATE_BINS: u64 = 600;

/// Where the chart's time axis starts and ends, in trace-clock ns.
#[derive(Clone, Copy)]
pub struct Span {
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    pub fn secs(&self, ts: u64) -> f64 {
        ts.saturating_sub(self.start_ns) as f64 / 1e9
    }
    pub fn len_secs(&self) -> f64 {
        self.secs(self.end_ns)
    }
}

/// A running total as a line: 0 before the first change, the value at
/// each bin's end, flat across bins without changes, and held to the end
/// of the capture. Where there are more points than a plot shows, each
/// stretch keeps its lowest, highest and last value, in time order, so
/// no peak is lost to thinning.
pub fn running(s: &TimeSeries, span: Span) -> Vec<(f64, f64)> {
    let mut v = vec![(0.0, 0.0)];
    let mut prev_end = 0u64;
    let mut prev = 0i64;
    for p in &s.points {
        let start = p.ts_ns.saturating_sub(s.bin_ns);
        if start > prev_end && start > span.start_ns {
            v.push((span.secs(start), prev as f64));
        }
        v.push((span.secs(p.ts_ns.min(span.end_ns)), p.value as f64));
        prev_end = p.ts_ns;
        prev = p.value;
    }
    v.push((span.len_secs(), prev as f64));
    thin(v, span.len_secs())
}

/// Keeps, per stretch of `len / MAX_VERTICES * 3` seconds, the first
/// lowest, first highest and last vertex, in time order.
fn thin(v: Vec<(f64, f64)>, len: f64) -> Vec<(f64, f64)> {
    if v.len() <= MAX_VERTICES {
        return v;
    }
    let width = (len / (MAX_VERTICES / 3) as f64).max(f64::MIN_POSITIVE);
    let mut out = Vec::with_capacity(MAX_VERTICES + 3);
    let mut i = 0;
    while i < v.len() {
        let stretch = (v[i].0 / width).floor();
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < v.len() && (v[j].0 / width).floor() == stretch {
            if v[j].1 < v[lo].1 {
                lo = j;
            }
            if v[j].1 > v[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = [lo, hi, j - 1];
        keep.sort_unstable();
        let mut last = usize::MAX;
        for k in keep {
            if k != last {
                out.push(v[k]);
                last = k;
            }
        }
        i = j;
    }
    out
}

/// The bin width rate charts share: the widest of the series' widths,
/// and wide enough for at most `MAX_RATE_BINS` bins over the span. All
/// widths are powers of two, so every series re-bins onto it exactly.
pub fn rate_width<'a>(series: impl Iterator<Item = &'a TimeSeries>, span: Span) -> u64 {
    let mut w = series.map(|s| s.bin_ns).max().unwrap_or(1).max(1);
    let len = span.end_ns.saturating_sub(span.start_ns);
    while len / w > MAX_RATE_BINS {
        w *= 2;
    }
    w
}

/// Counts per bin as events per second over bins of `width` ns: a
/// histogram outline across the whole span, zero where nothing happened.
pub fn rate(s: &TimeSeries, width: u64, span: Span) -> Vec<(f64, f64)> {
    total_rate(std::iter::once(s), width, span)
}

/// Sums of several count series (all CPUs), as [`rate`] draws them.
pub fn total_rate<'a>(
    series: impl Iterator<Item = &'a TimeSeries>,
    width: u64,
    span: Span,
) -> Vec<(f64, f64)> {
    let first = span.start_ns / width;
    let last = span.end_ns.saturating_sub(1) / width;
    let mut counts = vec![0i64; (last.saturating_sub(first) + 1) as usize];
    for s in series {
        for p in &s.points {
            let bin = p.ts_ns.saturating_sub(1) / width;
            if let Some(c) = bin
                .checked_sub(first)
                .and_then(|i| counts.get_mut(i as usize))
            {
                *c += p.value;
            }
        }
    }
    rate_outline(&counts, first, width, span)
}

fn rate_outline(counts: &[i64], first: u64, width: u64, span: Span) -> Vec<(f64, f64)> {
    let per_sec = 1e9 / width as f64;
    let mut v = Vec::with_capacity(counts.len() * 2);
    for (i, &c) in counts.iter().enumerate() {
        let start = (first + i as u64) * width;
        let r = c as f64 * per_sec;
        v.push((span.secs(start.max(span.start_ns)), r));
        // The last bin can end past u64::MAX ns (a damaged time stamp).
        v.push((span.secs(start.saturating_add(width).min(span.end_ns)), r));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_analysis::passes::timeline::BinPoint;

    fn series(bin_ns: u64, pts: &[(u64, i64)]) -> TimeSeries {
        TimeSeries {
            bin_ns,
            points: pts
                .iter()
                .map(|&(ts_ns, value)| BinPoint { ts_ns, value })
                .collect(),
        }
    }

    #[test]
    fn a_running_total_is_flat_across_quiet_bins_and_held_to_the_end() {
        let span = Span {
            start_ns: 0,
            end_ns: 10_000,
        };
        let v = running(&series(1000, &[(1000, 5), (5000, 7)]), span);
        assert_eq!(
            v,
            vec![
                (0.0, 0.0),
                (1e-6, 5.0),
                (4e-6, 5.0),
                (5e-6, 7.0),
                (1e-5, 7.0)
            ]
        );
    }

    #[test]
    fn a_rate_bin_ending_past_the_clock_is_cut_at_the_span() {
        // A damaged time stamp can put the span's end near u64::MAX.
        let span = Span {
            start_ns: u64::MAX - 1500,
            end_ns: u64::MAX,
        };
        let v = rate(&series(1024, &[(u64::MAX - 10, 3)]), 1024, span);
        let last = v.last().expect("points");
        assert_eq!(last.0, span.secs(u64::MAX));
        assert!(v.iter().any(|&(_, r)| r > 0.0));
    }

    #[test]
    fn thinning_keeps_the_peak() {
        let pts: Vec<(u64, i64)> = (1..=100_000u64)
            .map(|i| (i * 1000, if i == 77_777 { 1 << 40 } else { i as i64 }))
            .collect();
        let span = Span {
            start_ns: 0,
            end_ns: 100_000_000,
        };
        let v = running(&series(1000, &pts), span);
        assert!(v.len() <= MAX_VERTICES + 3, "{}", v.len());
        assert!(v.iter().any(|p| p.1 == (1u64 << 40) as f64));
        assert_eq!(v.last().unwrap().1, 100_000.0);
        assert!(v.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn rates_rebin_onto_the_shared_width_and_keep_every_event() {
        let span = Span {
            start_ns: 1 << 22,
            end_ns: 1 << 32,
        };
        let a = series(1 << 22, &[(2 << 22, 3), (3 << 22, 4), (900 << 22, 1)]);
        let w = rate_width([&a].into_iter(), span);
        assert!(w.is_power_of_two() && (span.end_ns - span.start_ns) / w <= MAX_RATE_BINS);
        let v = rate(&a, w, span);
        let events: f64 = v.chunks(2).map(|c| c[0].1 * w as f64 / 1e9).sum();
        assert!((events - 8.0).abs() < 1e-9, "{events}");
        let t = total_rate([&a, &a].into_iter(), w, span);
        let both: f64 = t.chunks(2).map(|c| c[0].1 * w as f64 / 1e9).sum();
        assert!((both - 16.0).abs() < 1e-9);
    }
}
