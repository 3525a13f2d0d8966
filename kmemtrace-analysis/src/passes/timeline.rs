//! A running total over time, kept as its changes summed per time bin:
//! the slab pass's live bytes, the pages pass's bytes held. Sums add up
//! across shards, so the series is the same whatever the shard count; the
//! running total at each bin's end is the figure then (for live slab
//! bytes, what `summary.live_bytes` is at the end). Changes are binned by
//! the stream's order time (a time stamp raised where a CPU's clock went
//! backwards).
//!
//! Bins start at 2^22 ns (4.2 ms, the stream's epoch) and double in width
//! whenever there would be more than [`MAX_BINS`], so memory stays bounded
//! however long the capture.

/// Most bins kept: a plot's worth of points.
pub const MAX_BINS: usize = 4096;
/// The first bin width, as a shift of the time stamp.
const FIRST_SHIFT: u32 = 22;

/// Changes of live bytes per bin, by bin number (`ts >> shift`), ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSeries {
    shift: u32,
    bins: Vec<(u64, i64)>,
}

impl Default for LiveSeries {
    fn default() -> Self {
        LiveSeries {
            shift: FIRST_SHIFT,
            bins: Vec::new(),
        }
    }
}

/// The live bytes at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LivePoint {
    /// The end of the bin (exclusive), in the trace clock's nanoseconds.
    pub ts_ns: u64,
    pub live_bytes: i64,
}

impl LiveSeries {
    /// A change of `bytes` at `ts`. A shard's events come in time order,
    /// so this adds to the last bin or opens the next; an earlier time
    /// (another shard's order after absorbing) is inserted in place.
    #[inline]
    pub fn add(&mut self, ts: u64, bytes: i64) {
        let bin = ts >> self.shift;
        match self.bins.last_mut() {
            Some((b, v)) if *b == bin => *v += bytes,
            Some((b, _)) if *b > bin => match self.bins.binary_search_by_key(&bin, |x| x.0) {
                Ok(i) => self.bins[i].1 += bytes,
                Err(i) => {
                    self.bins.insert(i, (bin, bytes));
                    if self.bins.len() > MAX_BINS {
                        self.coarsen(self.shift + 1);
                    }
                }
            },
            _ => {
                self.bins.push((bin, bytes));
                if self.bins.len() > MAX_BINS {
                    self.coarsen(self.shift + 1);
                }
            }
        }
    }

    /// Re-bins to width `2^shift` (not narrower than now).
    fn coarsen(&mut self, shift: u32) {
        if shift <= self.shift {
            return;
        }
        let by = shift - self.shift;
        let mut out: Vec<(u64, i64)> = Vec::with_capacity(self.bins.len());
        for &(b, v) in &self.bins {
            let nb = b >> by;
            match out.last_mut() {
                Some((x, s)) if *x == nb => *s += v,
                _ => out.push((nb, v)),
            }
        }
        self.shift = shift;
        self.bins = out;
        if self.bins.len() > MAX_BINS {
            self.coarsen(self.shift + 1);
        }
    }

    /// Adds another shard's series (at the wider of the two widths).
    pub fn absorb(&mut self, o: &LiveSeries) {
        let mut o = o.clone();
        let shift = self.shift.max(o.shift);
        self.coarsen(shift);
        o.coarsen(shift);
        // A few thousand bins each: sorting them together is cheap.
        let mut all: Vec<(u64, i64)> = self.bins.iter().chain(&o.bins).copied().collect();
        all.sort_by_key(|x| x.0);
        let mut merged: Vec<(u64, i64)> = Vec::with_capacity(all.len());
        for (b, v) in all {
            match merged.last_mut() {
                Some((x, s)) if *x == b => *s += v,
                _ => merged.push((b, v)),
            }
        }
        self.bins = merged;
        if self.bins.len() > MAX_BINS {
            self.coarsen(self.shift + 1);
        }
    }

    /// The bin width in nanoseconds.
    pub fn bin_ns(&self) -> u64 {
        1 << self.shift
    }

    /// The live bytes at the end of each bin that had changes.
    pub fn points(&self) -> Vec<LivePoint> {
        let mut live = 0i64;
        self.bins
            .iter()
            .map(|&(b, v)| {
                live += v;
                LivePoint {
                    ts_ns: (b + 1).saturating_mul(self.bin_ns()),
                    live_bytes: live,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However the changes are split among shards, and however many bins
    /// they make, the series equals one built from all of them in order.
    #[test]
    fn shards_add_up_to_the_plain_series() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for span in [1u64 << 24, 1 << 36] {
            let mut all = LiveSeries::default();
            let mut shards = vec![LiveSeries::default(); 3];
            let mut ts = 0;
            let mut total = 0i64;
            for _ in 0..50_000 {
                ts += rnd(span / 50_000 * 2 + 1);
                let bytes = rnd(4096) as i64 - 2000;
                total += bytes;
                all.add(ts, bytes);
                shards[rnd(3) as usize].add(ts, bytes);
            }
            let mut folded = LiveSeries::default();
            for s in &shards {
                folded.absorb(s);
            }
            // Shards never coarsen past the width the whole series needs.
            assert_eq!(folded.shift, all.shift);
            let mut plain = all.clone();
            plain.coarsen(folded.shift);
            folded.coarsen(plain.shift);
            assert_eq!(folded, plain);
            assert!(folded.bins.len() <= MAX_BINS);
            assert_eq!(folded.points().last().map(|p| p.live_bytes), Some(total));
            let pts = folded.points();
            assert!(pts.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        }
    }
}
