//! What the shards cannot add up, replayed in the stream's one order,
//! epoch after epoch: the peaks of live bytes (total, per call site, cache
//! and size class) from the shards' [`Delta`]s, and each misuse
//! occurrence's judgement (uncertain where the log lost events that could
//! explain it), with the first occurrence and the first certain one.
//!
//! An occurrence is judged once every loss window that starts before it is
//! known (every CPU's stream assembled past its time): whatever the number
//! of shards, the same windows judge it.

use crate::intern::FastMap;
use crate::passes::misuse::{FindingAgg, Misuse, Pending};
use crate::passes::slab::{Class, Delta};
use crate::passes::EpochOut;
use crate::stream::{Assembler, Windows, EPOCH_SHIFT};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
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

#[inline]
fn step(v: &mut (i64, u64), bytes: i64) {
    v.0 += bytes;
    if bytes > 0 {
        v.1 = v.1.max(v.0.max(0) as u64);
    }
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

    #[inline]
    fn apply(&mut self, d: &Delta) {
        let mut t = (self.total_live, self.total);
        step(&mut t, d.bytes);
        (self.total_live, self.total) = t;
        step(slot(&mut self.sites, d.site as usize), d.bytes);
        match d.class {
            Class::Cache(id) => step(slot(&mut self.caches, id as usize), d.bytes),
            Class::Size(b) if b <= 8192 && b % 8 == 0 => {
                step(slot(&mut self.small, (b / 8) as usize), d.bytes)
            }
            Class::Size(b) => step(self.large.entry(b).or_default(), d.bytes),
            Class::None => {}
        }
    }
}

/// Judgements per misuse kind.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    pub uncertain: u64,
    pub first: Option<crate::passes::misuse::Occurrence>,
    pub first_certain: Option<crate::passes::misuse::Occurrence>,
}

/// The combiner.
pub struct Combiner {
    pub peaks: Peaks,
    pub judged: Vec<Judged>,
    /// Occurrences waiting for their windows: (epoch end, in order).
    waiting: VecDeque<(u64, Vec<Pending>)>,
}

impl Default for Combiner {
    fn default() -> Self {
        Combiner {
            peaks: Peaks::default(),
            judged: vec![Judged::default(); Misuse::ALL.len()],
            waiting: VecDeque::new(),
        }
    }
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
    let mut heap = BinaryHeap::new();
    for (i, h) in heads.iter().enumerate() {
        if let Some(h) = h {
            heap.push(Reverse((key(h), i)));
        }
    }
    let mut out = Vec::with_capacity(total);
    while let Some(Reverse((_, i))) = heap.pop() {
        if let Some(h) = heads[i].take() {
            out.push(h);
        }
        heads[i] = iters[i].next();
        if let Some(h) = &heads[i] {
            heap.push(Reverse((key(h), i)));
        }
    }
    out
}

impl Combiner {
    /// One epoch's outputs from the shards that had events in it.
    pub fn epoch(&mut self, epoch: u64, outs: Vec<EpochOut>, assembler: &Mutex<Assembler>) {
        let (deltas, pending): (Vec<_>, Vec<_>) =
            outs.into_iter().map(|o| (o.deltas, o.pending)).unzip();
        for d in merge_sorted(deltas, |d: &Delta| d.key) {
            self.peaks.apply(&d);
        }
        let pending = merge_sorted(pending, |p: &Pending| p.key);
        if !pending.is_empty() {
            let end = (epoch + 1).saturating_mul(1 << EPOCH_SHIFT);
            self.waiting.push_back((end, pending));
        }
        let a = assembler.lock().unwrap_or_else(|e| e.into_inner());
        let known = a.known_until();
        while self.waiting.front().is_some_and(|(end, _)| *end <= known) {
            if let Some((_, p)) = self.waiting.pop_front() {
                self.judge(p, &a.windows);
            }
        }
    }

    /// Judges what still waits, with every window known.
    pub fn finish(&mut self, windows: &Windows) {
        while let Some((_, p)) = self.waiting.pop_front() {
            self.judge(p, windows);
        }
    }

    fn judge(&mut self, pending: Vec<Pending>, windows: &Windows) {
        for p in pending {
            let mut o = p.occurrence;
            o.uncertain = p.since.is_some_and(|t0| windows.touches(t0, o.ts));
            let j = &mut self.judged[p.kind as usize];
            j.uncertain += u64::from(o.uncertain);
            if j.first.is_none() {
                j.first = Some(o.clone());
            }
            if !o.uncertain && j.first_certain.is_none() {
                j.first_certain = Some(o);
            }
        }
    }

    /// Puts the judgements into the findings.
    pub fn judge_findings(&self, findings: &mut [FindingAgg]) {
        for (f, j) in findings.iter_mut().zip(&self.judged) {
            f.uncertain = j.uncertain;
            f.first = j.first.clone();
            f.first_certain = j.first_certain.clone();
        }
    }
}
