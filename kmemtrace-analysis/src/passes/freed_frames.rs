//! The freed frames one bucket of the page-misuse pass remembers: the
//! last free of each frame (the head of the block freed), in two
//! generations of `per_generation` frees each, so that memory stays
//! bounded; a frame forgotten counts as never seen.
//!
//! Why not a `BTreeMap` per generation, as before: finding the freed block
//! that holds an allocated one takes an ordered search, each search of a
//! tree of thousands of frames was a few cache misses, and on a page-heavy
//! capture the pass was a large part of the report. Here the frees are in
//! a hash table (one miss a lookup), and the ordered questions are
//! answered by bitmaps of each 2^13-frame group, one per generation: a
//! freed block is at most 2^13 frames (its order is kept at most
//! `MAX_BLOCK_ORDER`), so the free holding a frame lies in the frame's
//! group or the one before. The answers are the trees' (see the test
//! against them). A group holds its few frees as a short sorted list, and
//! its bitmap (1 KiB a generation; a group is 32 MiB of memory with 4 KiB
//! pages) only once it has more: frees scattered over a large memory, one
//! a group, cost a bucket tens of bytes each, not kilobytes.

use super::page_misuse::{FreedFrame, MAX_BLOCK_ORDER};
use crate::intern::FastMap;
use crate::ptr_table::FrameTable;

/// Frames per bitmap: a buddy block of the largest order.
const GROUP_SHIFT: u32 = MAX_BLOCK_ORDER;
const GROUP_FRAMES: u64 = 1 << GROUP_SHIFT;
const WORDS: usize = (GROUP_FRAMES / 64) as usize;

/// Frames of a group a generation holds in a list before its bitmap.
const FEW: usize = 32;

/// The frames of one group freed in one generation.
#[derive(Clone)]
enum Bits {
    /// At most [`FEW`], ascending.
    Few(Vec<u16>),
    Many(Box<Bitmap>),
}

impl Default for Bits {
    fn default() -> Self {
        Bits::Few(Vec::new())
    }
}

impl Bits {
    fn count(&self) -> usize {
        match self {
            Bits::Few(v) => v.len(),
            Bits::Many(m) => m.count as usize,
        }
    }

    fn has(&self, i: usize) -> bool {
        match self {
            Bits::Few(v) => v.binary_search(&(i as u16)).is_ok(),
            Bits::Many(m) => m.has(i),
        }
    }

    fn set(&mut self, i: usize) {
        match self {
            Bits::Few(v) => {
                if let Err(at) = v.binary_search(&(i as u16)) {
                    v.insert(at, i as u16);
                }
                if v.len() > FEW {
                    let mut m = Box::<Bitmap>::default();
                    for &j in v.iter() {
                        m.set(usize::from(j));
                    }
                    *self = Bits::Many(m);
                }
            }
            Bits::Many(m) => m.set(i),
        }
    }

    fn clear(&mut self, i: usize) {
        match self {
            Bits::Few(v) => {
                if let Ok(at) = v.binary_search(&(i as u16)) {
                    v.remove(at);
                }
            }
            Bits::Many(m) => m.clear(i),
        }
    }

    /// The highest frame set at or below `i`.
    fn last_at_or_below(&self, i: usize) -> Option<usize> {
        match self {
            Bits::Few(v) => {
                let n = v.partition_point(|&j| usize::from(j) <= i);
                n.checked_sub(1).map(|k| usize::from(v[k]))
            }
            Bits::Many(m) => m.last_at_or_below(i),
        }
    }

    /// The lowest frame set in `[from, to)`.
    fn next_in(&self, from: usize, to: usize) -> Option<usize> {
        match self {
            Bits::Few(v) => {
                let k = v.partition_point(|&j| usize::from(j) < from);
                v.get(k).map(|&j| usize::from(j)).filter(|&j| j < to)
            }
            Bits::Many(m) => m.next_in(from, to),
        }
    }
}

/// A group's frames as bits.
#[derive(Clone)]
struct Bitmap {
    words: [u64; WORDS],
    /// Bit `i`: `words[i]` is not zero.
    summary: [u64; WORDS / 64],
    count: u32,
}

impl Default for Bitmap {
    fn default() -> Self {
        Bitmap {
            words: [0; WORDS],
            summary: [0; WORDS / 64],
            count: 0,
        }
    }
}

impl Bitmap {
    fn has(&self, i: usize) -> bool {
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize) {
        let (w, b) = (i / 64, i % 64);
        self.count += u32::from(self.words[w] & (1 << b) == 0);
        self.words[w] |= 1 << b;
        self.summary[w / 64] |= 1 << (w % 64);
    }

    fn clear(&mut self, i: usize) {
        let (w, b) = (i / 64, i % 64);
        self.count -= u32::from(self.words[w] & (1 << b) != 0);
        self.words[w] &= !(1 << b);
        if self.words[w] == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
    }

    /// The highest frame set at or below `i`.
    fn last_at_or_below(&self, i: usize) -> Option<usize> {
        let (w, b) = (i / 64, i % 64);
        let here = self.words[w] & (u64::MAX >> (63 - b));
        if here != 0 {
            return Some(w * 64 + 63 - here.leading_zeros() as usize);
        }
        // The highest non-zero word below `w`.
        let mut s = w / 64;
        let mut mask = (1u64 << (w % 64)) - 1;
        loop {
            let below = self.summary[s] & mask;
            if below != 0 {
                let w = s * 64 + 63 - below.leading_zeros() as usize;
                return Some(w * 64 + 63 - self.words[w].leading_zeros() as usize);
            }
            if s == 0 {
                return None;
            }
            s -= 1;
            mask = u64::MAX;
        }
    }

    /// The lowest frame set in `[from, to)`.
    fn next_in(&self, from: usize, to: usize) -> Option<usize> {
        let mut i = from;
        while i < to {
            let (w, b) = (i / 64, i % 64);
            let word = self.words[w] >> b;
            if word != 0 {
                let at = i + word.trailing_zeros() as usize;
                return (at < to).then_some(at);
            }
            i = (w + 1) * 64;
        }
        None
    }
}

/// A group's frames, by generation (the generation number's parity).
#[derive(Clone, Default)]
struct Group {
    gens: [Bits; 2],
}

/// One bucket's freed frames.
pub struct FreedFrames {
    frees: FrameTable<FreedFrame>,
    groups: FastMap<u64, Group>,
    /// The recent generation's parity (the older one has the other).
    recent: usize,
    recent_len: usize,
    per_generation: usize,
}

fn place(pfn: u64) -> (u64, usize) {
    (pfn >> GROUP_SHIFT, (pfn & (GROUP_FRAMES - 1)) as usize)
}

impl FreedFrames {
    pub fn new(per_generation: usize) -> Self {
        FreedFrames {
            frees: FrameTable::default(),
            groups: FastMap::default(),
            recent: 0,
            recent_len: 0,
            per_generation: per_generation.max(1),
        }
    }

    /// Frames remembered, recent and older.
    pub fn len(&self) -> usize {
        self.frees.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frees.is_empty()
    }

    /// The generation holding `pfn`, if any.
    fn generation(&self, pfn: u64) -> Option<usize> {
        let (g, i) = place(pfn);
        let group = self.groups.get(&g)?;
        (0..2).find(|&gen| group.gens[gen].has(i))
    }

    /// Remembers the free of `pfn` (forgetting an earlier one), in the
    /// recent generation; when that has `per_generation` frames, the older
    /// one is forgotten and the recent one becomes the older.
    pub fn insert(&mut self, pfn: u64, f: FreedFrame) {
        if pfn == u64::MAX {
            return;
        }
        debug_assert!(u32::from(f.order) <= MAX_BLOCK_ORDER);
        let older = self.recent ^ 1;
        let (g, i) = place(pfn);
        let group = self.groups.entry(g).or_default();
        if !group.gens[self.recent].has(i) {
            group.gens[older].clear(i);
            group.gens[self.recent].set(i);
            self.recent_len += 1;
        }
        self.frees.insert(pfn, f);
        if self.recent_len >= self.per_generation {
            self.forget_older();
        }
    }

    fn forget_older(&mut self) {
        let older = self.recent ^ 1;
        for (&g, group) in &mut self.groups {
            let bits = &mut group.gens[older];
            if bits.count() == 0 {
                continue;
            }
            let mut i = 0;
            while let Some(at) = bits.next_in(i, GROUP_FRAMES as usize) {
                self.frees.remove((g << GROUP_SHIFT) | at as u64);
                i = at + 1;
            }
            *bits = Bits::default();
        }
        // Now empty; the recent generation becomes the older.
        self.groups
            .retain(|_, group| group.gens[self.recent].count() > 0);
        self.recent = older;
        self.recent_len = 0;
    }

    pub fn get(&self, pfn: u64) -> Option<&FreedFrame> {
        self.frees.get(pfn)
    }

    pub fn remove(&mut self, pfn: u64) -> Option<FreedFrame> {
        if pfn == u64::MAX {
            return None;
        }
        let gen = self.generation(pfn)?;
        let (g, i) = place(pfn);
        if let Some(group) = self.groups.get_mut(&g) {
            group.gens[gen].clear(i);
            if group.gens[0].count() + group.gens[1].count() == 0 {
                self.groups.remove(&g);
            }
        }
        self.recent_len -= usize::from(gen == self.recent);
        self.frees.remove(pfn)
    }

    /// The buddy block `[pfn, pfn + 2^order)` was allocated: frees of
    /// blocks inside it are forgotten, and a freed block holding it is
    /// split as the buddy allocator splits it, its other halves still free.
    pub fn allocated(&mut self, pfn: u64, order: u32) {
        let end = pfn.saturating_add(1u64 << order);
        let mut holder = None;
        for gen in [self.recent, self.recent ^ 1] {
            self.forget_inside(gen, pfn, end, order);
            // The generation's last freed head at or below the block: if
            // it does not hold the block, no earlier one of the generation
            // counts (freed blocks do not overlap unless a frame was freed
            // twice).
            let holds = |h: u64| {
                self.get(h).is_some_and(|f| {
                    u32::from(f.order) > order && h.saturating_add(1u64 << f.order) > pfn
                })
            };
            if let Some(h) = self.last_at_or_below(gen, pfn).filter(|&h| holds(h)) {
                holder = holder.or(Some(h));
            }
        }
        let Some(mut head) = holder else { return };
        let Some(f) = self.remove(head) else { return };
        let mut o = u32::from(f.order);
        while o > order {
            o -= 1;
            let mid = head.saturating_add(1u64 << o);
            let (kept, next) = if pfn >= mid { (head, mid) } else { (mid, head) };
            self.insert(
                kept,
                FreedFrame {
                    order: o as u8,
                    ..f
                },
            );
            head = next;
        }
    }

    /// Forgets generation `gen`'s frees of blocks in `[pfn, end)` whose
    /// order is at most `order`.
    fn forget_inside(&mut self, gen: usize, pfn: u64, end: u64, order: u32) {
        let mut at = pfn;
        while at < end {
            let (g, mut from) = place(at);
            let base = g << GROUP_SHIFT;
            // The last group ends at u64::MAX, a frame never remembered.
            let group_end = base.saturating_add(GROUP_FRAMES);
            let to = (end.min(group_end) - base) as usize;
            while let Some(i) = self
                .groups
                .get(&g)
                .and_then(|group| group.gens[gen].next_in(from, to))
            {
                let frame = base | i as u64;
                if self.get(frame).is_some_and(|f| u32::from(f.order) <= order) {
                    self.remove(frame);
                }
                from = i + 1;
            }
            at = group_end;
        }
    }

    /// Generation `gen`'s highest freed head at or below `pfn` among those
    /// that could hold it (at most a group below).
    fn last_at_or_below(&self, gen: usize, pfn: u64) -> Option<u64> {
        let (g, i) = place(pfn);
        let in_group = |g: u64, i: usize| {
            self.groups
                .get(&g)
                .and_then(|group| group.gens[gen].last_at_or_below(i))
                .map(|j| (g << GROUP_SHIFT) | j as u64)
        };
        in_group(g, i)
            .or_else(|| {
                g.checked_sub(1)
                    .and_then(|p| in_group(p, GROUP_FRAMES as usize - 1))
            })
            .filter(|&h| pfn - h < GROUP_FRAMES)
    }

    /// The free that covers `pfn`: its own, or that of the buddy block
    /// holding it (buddy blocks are aligned to their size).
    pub fn covering(&self, pfn: u64) -> Option<FreedFrame> {
        if let Some(f) = self.get(pfn) {
            return Some(*f);
        }
        (1..=MAX_BLOCK_ORDER).find_map(|k| {
            let head = pfn & !((1u64 << k) - 1);
            self.get(head)
                .filter(|f| head != pfn && u32::from(f.order) >= k)
                .copied()
        })
    }

    /// Every remembered free, by frame (for tests).
    #[cfg(test)]
    fn all(&self) -> Vec<(u64, FreedFrame)> {
        let mut v: Vec<_> = self.frees.iter().map(|(k, f)| (k, *f)).collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }
}

#[cfg(test)]
mod tests;
