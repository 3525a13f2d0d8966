//! Quantities over time, kept as their changes summed per time bin: the
//! slab pass's live bytes (overall and per call site), the pages pass's
//! bytes held, events per CPU. Sums add up across shards, so a series is
//! the same whatever the shard count; for a running total the sum up to
//! each bin's end is the figure then (for live slab bytes, what
//! `summary.live_bytes` is at the end). Changes are binned by the stream's
//! order time (a time stamp raised where a CPU's clock went backwards).
//!
//! Bins start at 2^22 ns (4.2 ms, the stream's epoch) and double in width
//! whenever there would be more than the series' most bins, so memory
//! stays bounded however long the capture. Every width is a power of two
//! and every bin starts at a multiple of it, so series of different widths
//! re-bin onto the wider one exactly.

/// Most bins kept by default: a plot's worth of points.
pub const MAX_BINS: usize = 4096;
/// The first bin width, as a shift of the time stamp.
const FIRST_SHIFT: u32 = 22;

/// Changes per bin, by bin number (`ts >> shift`), ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeBins {
    shift: u32,
    max_bins: usize,
    bins: Vec<(u64, i64)>,
}

impl Default for TimeBins {
    fn default() -> Self {
        TimeBins::with_max_bins(MAX_BINS)
    }
}

/// A value at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BinPoint {
    /// The end of the bin (exclusive), in the trace clock's nanoseconds.
    pub ts_ns: u64,
    pub value: i64,
}

impl TimeBins {
    /// A series of at most `max_bins` bins (at least 1): fewer for the
    /// many small series (one per call site or CPU).
    pub fn with_max_bins(max_bins: usize) -> Self {
        TimeBins {
            shift: FIRST_SHIFT,
            max_bins: max_bins.max(1),
            bins: Vec::new(),
        }
    }

    /// A change of `bytes` at `ts`. A shard's events come in time order,
    /// so this adds to the last bin or opens the next; an earlier time
    /// (another shard's order after absorbing) is inserted in place.
    #[inline]
    pub fn add(&mut self, ts: u64, bytes: i64) {
        let bin = ts >> self.shift;
        match self.bins.last_mut() {
            Some((b, v)) if *b == bin => *v = v.saturating_add(bytes),
            Some((b, _)) if *b > bin => match self.bins.binary_search_by_key(&bin, |x| x.0) {
                Ok(i) => self.bins[i].1 = self.bins[i].1.saturating_add(bytes),
                Err(i) => {
                    self.bins.insert(i, (bin, bytes));
                    if self.bins.len() > self.max_bins {
                        self.coarsen(self.shift + 1);
                    }
                }
            },
            _ => {
                self.bins.push((bin, bytes));
                if self.bins.len() > self.max_bins {
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
                Some((x, s)) if *x == nb => *s = s.saturating_add(v),
                _ => out.push((nb, v)),
            }
        }
        self.shift = shift;
        self.bins = out;
        if self.bins.len() > self.max_bins {
            self.coarsen(self.shift + 1);
        }
    }

    /// Adds another shard's series (at the wider of the two widths).
    pub fn absorb(&mut self, o: &TimeBins) {
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
                Some((x, s)) if *x == b => *s = s.saturating_add(v),
                _ => merged.push((b, v)),
            }
        }
        self.bins = merged;
        if self.bins.len() > self.max_bins {
            self.coarsen(self.shift + 1);
        }
    }

    /// The bin width in nanoseconds.
    pub fn bin_ns(&self) -> u64 {
        1 << self.shift
    }

    /// The running total at the end of each bin that had changes.
    pub fn running(&self) -> Vec<BinPoint> {
        let mut total = 0i64;
        self.bins
            .iter()
            .map(|&(b, v)| {
                total = total.saturating_add(v);
                self.point(b, total)
            })
            .collect()
    }

    /// Each bin's own sum (bins without changes left out).
    pub fn per_bin(&self) -> Vec<BinPoint> {
        self.bins.iter().map(|&(b, v)| self.point(b, v)).collect()
    }

    fn point(&self, bin: u64, value: i64) -> BinPoint {
        BinPoint {
            ts_ns: (bin + 1).saturating_mul(self.bin_ns()),
            value,
        }
    }

    /// Bins that had changes.
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }
}

/// Most bins of a per-CPU or per-call-site series: hundreds of them may be
/// kept, and a plot re-bins them coarser anyway.
pub const SMALL_MAX_BINS: usize = 1024;

/// Allocation and free events per CPU over time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuRates {
    /// By CPU: (allocations, frees).
    by_cpu: Vec<Option<(TimeBins, TimeBins)>>,
}

impl CpuRates {
    #[inline]
    pub fn count(&mut self, cpu: u32, ts: u64, alloc: bool) {
        let i = cpu as usize;
        if self.by_cpu.len() <= i {
            self.by_cpu.resize(i + 1, None);
        }
        let (a, f) = self.by_cpu[i].get_or_insert_with(|| {
            (
                TimeBins::with_max_bins(SMALL_MAX_BINS),
                TimeBins::with_max_bins(SMALL_MAX_BINS),
            )
        });
        if alloc { a } else { f }.add(ts, 1);
    }

    pub fn absorb(&mut self, o: &CpuRates) {
        for (cpu, s) in o.by_cpu.iter().enumerate() {
            let Some((a, f)) = s else { continue };
            if self.by_cpu.len() <= cpu {
                self.by_cpu.resize(cpu + 1, None);
            }
            match &mut self.by_cpu[cpu] {
                Some((ma, mf)) => {
                    ma.absorb(a);
                    mf.absorb(f);
                }
                x => *x = Some((a.clone(), f.clone())),
            }
        }
    }

    /// (CPU, allocations, frees) for the CPUs with events.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &TimeBins, &TimeBins)> {
        self.by_cpu
            .iter()
            .enumerate()
            .filter_map(|(c, s)| s.as_ref().map(|(a, f)| (c as u32, a, f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_testkit::Rng;

    /// However the changes are split among shards, and however many bins
    /// they make, the series equals one built from all of them in order.
    #[test]
    fn shards_add_up_to_the_plain_series() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut rnd = |n: u64| rng.below(n);
        for span in [1u64 << 24, 1 << 36] {
            let mut all = TimeBins::default();
            let mut shards = vec![TimeBins::default(); 3];
            let mut ts = 0;
            let mut total = 0i64;
            for _ in 0..50_000 {
                ts += rnd(span / 50_000 * 2 + 1);
                let bytes = rnd(4096) as i64 - 2000;
                total += bytes;
                all.add(ts, bytes);
                shards[rnd(3) as usize].add(ts, bytes);
            }
            let mut folded = TimeBins::default();
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
            let sums: i64 = folded.per_bin().iter().map(|p| p.value).sum();
            assert_eq!(sums, total);
            assert_eq!(folded.running().last().map(|p| p.value), Some(total));
            let pts = folded.running();
            assert!(pts.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        }
    }
}
