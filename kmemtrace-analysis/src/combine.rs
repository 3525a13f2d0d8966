//! What the shards cannot add up, replayed in the stream's one order,
//! epoch after epoch: the peaks of live bytes (total, per call site, cache
//! and size class) from the shards' [`Delta`]s, and each misuse
//! occurrence's judgement (uncertain where the log lost events that could
//! explain it), with the first occurrence and the first certain one.
//!
//! Each epoch is summarised on its own ([`summarise`], on any thread),
//! then folded in epoch order ([`Combiner::fold`]): the serial part is a few
//! operations per call site and cache touched, not per event.
//!
//! An occurrence is judged once every loss window that starts before it is
//! known (every CPU's stream assembled past its time): whatever the number
//! of shards, the same windows judge it.

use crate::intern::FastMap;
use crate::judge::Judge;
use crate::passes::misuse::Pending;
use crate::passes::slab::{Class, Delta};
use crate::passes::untraced::Spans;
use crate::passes::EpochOut;
use crate::stream::{Assembler, Windows, EPOCH_SHIFT};
use crate::tournament::Tournament;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Live bytes and their peak, per key: sites and caches by id, size
/// classes by size (in 8-byte steps up to 8 KiB, else in a map).
#[derive(Default)]
pub struct Peaks {
    pub total: u64,
    total_live: i64,
    sites: Vec<(i64, u64)>,
    caches: Vec<(i64, u64)>,
    small: Vec<(i64, u64)>,
    large: FastMap<u64, (i64, u64)>,
}

#[inline]
fn slot(v: &mut Vec<(i64, u64)>, i: usize) -> &mut (i64, u64) {
    if v.len() <= i {
        v.resize(i + 1, (0, 0));
    }
    &mut v[i]
}

impl Peaks {
    pub fn site(&self, site: u32) -> u64 {
        self.sites.get(site as usize).map_or(0, |v| v.1)
    }
    pub fn class(&self, c: Class) -> u64 {
        match c {
            Class::Cache(id) => self.caches.get(id as usize).map_or(0, |v| v.1),
            Class::Size(b) if b <= 8192 && b % 8 == 0 => {
                self.small.get((b / 8) as usize).map_or(0, |v| v.1)
            }
            Class::Size(b) => self.large.get(&b).map_or(0, |v| v.1),
            Class::None => 0,
        }
    }

    fn fold(&mut self, e: &EpochSummary) {
        let mut t = (self.total_live, self.total);
        e.total.fold(&mut t);
        (self.total_live, self.total) = t;
        for (id, step) in &e.sites {
            step.fold(slot(&mut self.sites, *id as usize));
        }
        for (id, step) in &e.caches {
            step.fold(slot(&mut self.caches, *id as usize));
        }
        for (i, step) in &e.small {
            step.fold(slot(&mut self.small, *i as usize));
        }
        for (b, step) in &e.large {
            step.fold(self.large.entry(*b).or_default());
        }
    }
}

/// One key's deltas over an epoch: their sum, and the highest running sum
/// right after an increase (relative to the epoch's start; `i64::MIN`:
/// no increase).
#[derive(Clone, Copy, Debug)]
struct Step {
    sum: i64,
    max: i64,
}

impl Default for Step {
    fn default() -> Self {
        Step {
            sum: 0,
            max: i64::MIN,
        }
    }
}

impl Step {
    #[inline]
    fn add(&mut self, bytes: i64) {
        self.sum += bytes;
        if bytes > 0 {
            self.max = self.max.max(self.sum);
        }
    }
    /// Continues `(live, peak)` through this epoch.
    #[inline]
    fn fold(&self, v: &mut (i64, u64)) {
        if self.max != i64::MIN {
            v.1 = v.1.max((v.0 + self.max).max(0) as u64);
        }
        v.0 += self.sum;
    }
}

/// Steps by dense id, remembering which were touched (by a flag of their
/// own: a step of zero-byte changes looks untouched, and was listed, so
/// folded, once per change).
#[derive(Default)]
struct Dense {
    steps: Vec<(Step, bool)>,
    touched: Vec<u32>,
}

impl Dense {
    #[inline]
    fn add(&mut self, id: u32, bytes: i64) {
        let i = id as usize;
        if self.steps.len() <= i {
            self.steps.resize(i + 1, (Step::default(), false));
        }
        let (s, touched) = &mut self.steps[i];
        if !*touched {
            *touched = true;
            self.touched.push(id);
        }
        s.add(bytes);
    }
    /// The steps touched since the last call, in the order first touched,
    /// their slots made untouched again: the array is kept for the next
    /// epoch, whose cost then follows the keys it touches, not the highest
    /// id seen (an epoch of one site in a log of a million sites cleared
    /// 24 MB: a log of as many epochs took hours).
    fn drain_list(&mut self) -> Vec<(u32, Step)> {
        let steps = &mut self.steps;
        self.touched
            .drain(..)
            .map(|i| (i, std::mem::take(&mut steps[i as usize]).0))
            .collect()
    }
}

thread_local! {
    /// Each thread's arrays of [`summarise`] (sites, caches, small size
    /// classes), kept from one epoch to the next for the thread's life:
    /// 24 bytes a slot, up to the highest id of the largest log it read.
    static DENSE: std::cell::RefCell<[Dense; 3]> = Default::default();
}

/// One epoch of every shard, replayed on its own (by any thread): the
/// deltas summed per key, the occurrences merged into order. Folding the
/// summaries in epoch order gives what replaying every delta would.
pub struct EpochSummary {
    epoch: u64,
    total: Step,
    sites: Vec<(u32, Step)>,
    caches: Vec<(u32, Step)>,
    small: Vec<(u32, Step)>,
    large: Vec<(u64, Step)>,
    pending: Vec<Pending>,
    spans: Spans,
}

/// Summarises one epoch's outputs from the shards that had events in it:
/// the shards' deltas visited in the one order, each added to the total
/// and to its keys.
pub fn summarise(epoch: u64, outs: Vec<EpochOut>) -> EpochSummary {
    let mut spans = Spans::default();
    for o in &outs {
        spans.absorb(&o.spans);
    }
    let (lists, pending): (Vec<_>, Vec<_>) =
        outs.into_iter().map(|o| (o.deltas, o.pending)).unzip();
    let mut total = Step::default();
    let mut large: FastMap<u64, Step> = FastMap::default();
    let mut at = vec![0usize; lists.len()];
    let mut heads = Tournament::new(lists.iter().map(|l| l.first().map(|d: &Delta| d.key)));
    let [sites, caches, small] = DENSE.with_borrow_mut(|[sites, caches, small]| {
        while let Some(i) = heads.winner() {
            let d = &lists[i][at[i]];
            at[i] += 1;
            heads.replace_winner(lists[i].get(at[i]).map(|d| d.key));
            total.add(d.bytes);
            sites.add(d.site, d.bytes);
            match d.class {
                Class::Cache(id) => caches.add(id, d.bytes),
                Class::Size(b) if b <= 8192 && b % 8 == 0 => small.add((b / 8) as u32, d.bytes),
                Class::Size(b) => large.entry(b).or_default().add(d.bytes),
                Class::None => {}
            }
        }
        [sites.drain_list(), caches.drain_list(), small.drain_list()]
    });
    EpochSummary {
        epoch,
        total,
        sites,
        caches,
        small,
        large: large.into_iter().collect(),
        pending: merge_sorted(pending, |p: &Pending| p.key),
        spans,
    }
}

/// The combiner.
#[derive(Default)]
pub struct Combiner {
    pub peaks: Peaks,
    pub judge: Judge,
    /// Occurrences waiting for their windows: (epoch end, in order).
    waiting: VecDeque<(u64, Vec<Pending>)>,
}

/// Merges lists sorted by `key` into one, stable across lists in the order
/// given.
fn merge_sorted<T, K: Ord + Copy>(lists: Vec<Vec<T>>, key: impl Fn(&T) -> K) -> Vec<T> {
    if lists.len() == 1 {
        return lists.into_iter().next().unwrap_or_default();
    }
    let total = lists.iter().map(Vec::len).sum();
    let mut iters: Vec<std::vec::IntoIter<T>> = lists.into_iter().map(Vec::into_iter).collect();
    let mut heads: Vec<Option<T>> = iters.iter_mut().map(Iterator::next).collect();
    let mut order = Tournament::new(heads.iter().map(|h| h.as_ref().map(&key)));
    let mut out = Vec::with_capacity(total);
    while let Some(i) = order.winner() {
        out.extend(heads[i].take());
        heads[i] = iters[i].next();
        order.replace_winner(heads[i].as_ref().map(&key));
    }
    out
}

impl Combiner {
    /// Folds an epoch's summary in, epochs in order; judges the
    /// occurrences whose windows are all known.
    pub fn fold(&mut self, e: EpochSummary, assembler: &Mutex<Assembler>) {
        self.peaks.fold(&e);
        self.judge.spans(&e.spans);
        if !e.pending.is_empty() {
            let end = (e.epoch + 1).saturating_mul(1 << EPOCH_SHIFT);
            self.waiting.push_back((end, e.pending));
        }
        let a = assembler.lock().unwrap_or_else(|e| e.into_inner());
        let known = a.known_until();
        while self.waiting.front().is_some_and(|(end, _)| *end <= known) {
            if let Some((_, p)) = self.waiting.pop_front() {
                p.into_iter().for_each(|p| self.judge.judge(p, &a.windows));
            }
        }
        // What is judged from now on: what waits, and later epochs.
        let next_epoch = (e.epoch + 1).saturating_mul(1 << EPOCH_SHIFT);
        let low = self
            .waiting
            .iter()
            .filter_map(|(_, p)| p.first().map(|p| p.key.ts))
            .fold(next_epoch, u64::min);
        self.judge.forget_before(low);
    }

    /// Judges what still waits, with every window and epoch known.
    pub fn finish(&mut self, windows: &Windows) {
        while let Some((_, p)) = self.waiting.pop_front() {
            p.into_iter().for_each(|p| self.judge.judge(p, windows));
        }
        self.judge.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{OrderKey, StreamInput};
    use kmemtrace_testkit::Rng;

    /// An epoch's summary lists the keys it touched, the thread's array
    /// kept from an epoch that touched a high id, with none of that
    /// epoch's steps left in it.
    #[test]
    fn each_epoch_lists_its_own_keys_in_the_kept_array() {
        let epoch = |site: u32, bytes: &[i64]| {
            let deltas = bytes
                .iter()
                .enumerate()
                .map(|(pos, &bytes)| Delta {
                    key: OrderKey {
                        ts: 1,
                        stream: 0,
                        block: 0,
                        pos: pos as u32,
                    },
                    site,
                    class: Class::Cache(site),
                    bytes,
                })
                .collect();
            let out = EpochOut {
                deltas,
                pending: Vec::new(),
                spans: Spans::default(),
            };
            summarise(0, vec![out])
        };
        let steps = |l: &[(u32, Step)]| -> Vec<(u32, i64, i64)> {
            l.iter().map(|(id, s)| (*id, s.sum, s.max)).collect()
        };
        let high = epoch(1_000_000, &[100, -40]);
        assert_eq!(steps(&high.sites), [(1_000_000, 60, 100)]);
        assert_eq!(steps(&high.caches), [(1_000_000, 60, 100)]);
        let kept = DENSE.with_borrow(|d| d[0].steps.len());
        assert_eq!(kept, 1_000_001);
        let low = epoch(3, &[-5]);
        assert_eq!(steps(&low.sites), [(3, -5, i64::MIN)]);
        assert_eq!(steps(&low.caches), [(3, -5, i64::MIN)]);
        // The high id again: a step of its own, not the last epoch's.
        assert_eq!(steps(&epoch(1_000_000, &[7]).sites), [(1_000_000, 7, 7)]);
        DENSE.with_borrow(|d| {
            assert_eq!(d[0].steps.len(), kept);
            assert!(d.iter().all(|d| d.touched.is_empty()));
            assert!(d[0]
                .steps
                .iter()
                .all(|(s, t)| !t && s.sum == 0 && s.max == i64::MIN));
        });
    }

    /// Peaks folded from shards' epoch summaries equal a plain replay of
    /// every delta in order, however the deltas are split among shards
    /// and epochs.
    #[test]
    fn folded_peaks_equal_a_plain_replay() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut rnd = |n: u64| rng.below(n);
        // Live objects per (site, class), so that frees never go below 0.
        let mut live: Vec<(u32, Class, i64)> = Vec::new();
        let mut deltas = Vec::new();
        for i in 0..20_000u64 {
            let key = OrderKey {
                ts: i * 1000 + rnd(3),
                stream: rnd(4) as u32,
                block: 0,
                pos: i as u32,
            };
            if live.is_empty() || rnd(3) != 0 {
                let site = rnd(20) as u32;
                let class = match rnd(4) {
                    0 => Class::Cache(rnd(5) as u32),
                    1 => Class::Size(8 * (1 + rnd(64))),
                    2 => Class::Size(10_000 + rnd(3)),
                    _ => Class::None,
                };
                // Some of zero bytes (a hostile log's): a step of only
                // those is still one step.
                let b = match rnd(8) {
                    0 => 0,
                    _ => 1 + rnd(4096) as i64,
                };
                live.push((site, class, b));
                deltas.push(Delta {
                    key,
                    site,
                    class,
                    bytes: b,
                });
            } else {
                let (site, class, b) = live.swap_remove(rnd(live.len() as u64) as usize);
                deltas.push(Delta {
                    key,
                    site,
                    class,
                    bytes: -b,
                });
            }
        }
        deltas.sort_by_key(|d| d.key);
        // The plain replay.
        let mut want: FastMap<(u8, u64), (i64, u64)> = FastMap::default();
        let mut bump = |k: (u8, u64), b: i64| {
            let v = want.entry(k).or_default();
            v.0 += b;
            if b > 0 {
                v.1 = v.1.max(v.0 as u64);
            }
        };
        for d in &deltas {
            bump((0, 0), d.bytes);
            bump((1, u64::from(d.site)), d.bytes);
            match d.class {
                Class::Cache(id) => bump((2, u64::from(id)), d.bytes),
                Class::Size(b) => bump((3, b), d.bytes),
                Class::None => {}
            }
        }
        for shards in [1usize, 2, 3, 7] {
            for shift in [10u32, 14, 30] {
                let mut by_epoch: std::collections::BTreeMap<u64, Vec<Vec<Delta>>> =
                    Default::default();
                for d in &deltas {
                    let e = d.key.ts >> shift;
                    let lists = by_epoch
                        .entry(e)
                        .or_insert_with(|| vec![Vec::new(); shards]);
                    lists[(d.key.pos as usize * 31 + d.site as usize) % shards].push(*d);
                }
                let mut c = Combiner::default();
                let a = Mutex::new(Assembler::new(Vec::<StreamInput>::new()));
                for (e, lists) in by_epoch {
                    let outs = lists
                        .into_iter()
                        .map(|deltas| EpochOut {
                            deltas,
                            pending: Vec::new(),
                            spans: Spans::default(),
                        })
                        .collect();
                    c.fold(summarise(e, outs), &a);
                }
                let p = &c.peaks;
                assert_eq!(p.total, want[&(0, 0)].1, "{shards} shards, shift {shift}");
                for (&(kind, id), &(_, peak)) in &want {
                    let got = match kind {
                        0 => p.total,
                        1 => p.site(id as u32),
                        2 => p.class(Class::Cache(id as u32)),
                        _ => p.class(Class::Size(id)),
                    };
                    assert_eq!(got, peak, "key {kind}/{id}, {shards} shards, shift {shift}");
                }
            }
        }
    }
}
