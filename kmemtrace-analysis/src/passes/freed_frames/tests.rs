use super::*;
use kmemtrace_testkit::Rng;
use std::collections::BTreeMap;

/// The frame store as it was: a tree per generation, whose ordered
/// searches define the answers.
#[derive(Default)]
struct Trees {
    recent: BTreeMap<u64, FreedFrame>,
    older: BTreeMap<u64, FreedFrame>,
    per_generation: usize,
}

impl Trees {
    fn insert(&mut self, pfn: u64, f: FreedFrame) {
        self.older.remove(&pfn);
        self.recent.insert(pfn, f);
        if self.recent.len() >= self.per_generation {
            self.older = std::mem::take(&mut self.recent);
        }
    }

    fn get(&self, pfn: u64) -> Option<&FreedFrame> {
        self.recent.get(&pfn).or_else(|| self.older.get(&pfn))
    }

    fn remove(&mut self, pfn: u64) -> Option<FreedFrame> {
        self.recent.remove(&pfn).or_else(|| self.older.remove(&pfn))
    }

    fn allocated(&mut self, pfn: u64, order: u32) {
        let end = pfn.saturating_add(1u64 << order);
        let mut holder = None;
        for map in [&mut self.recent, &mut self.older] {
            let Some((&last, &f)) = map.range(..end).next_back() else {
                continue;
            };
            let below = if last < pfn {
                Some((last, f))
            } else {
                let inside: Vec<u64> = map
                    .range(pfn..end)
                    .filter(|(_, f)| u32::from(f.order) <= order)
                    .map(|(&k, _)| k)
                    .collect();
                for k in inside {
                    map.remove(&k);
                }
                map.range(..=pfn).next_back().map(|(&h, &f)| (h, f))
            };
            if let Some((h, f)) = below {
                if u32::from(f.order) > order && h.saturating_add(1u64 << f.order) > pfn {
                    holder = holder.or(Some(h));
                }
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

    fn covering(&self, pfn: u64) -> Option<FreedFrame> {
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

    fn all(&self) -> Vec<(u64, FreedFrame)> {
        let mut v: Vec<_> = self
            .recent
            .iter()
            .chain(&self.older)
            .map(|(&k, &f)| (k, f))
            .collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }
}

fn frame(ts: u64, order: u32) -> FreedFrame {
    FreedFrame::new(ts, (ts % 7) as i32, (ts % 3) as u16, order)
}

/// Random frees, allocations (aligned buddy blocks, and unaligned ones of
/// any order), lookups and removals over a few neighbouring groups (at
/// frame 0, and where 64-bit physical addresses end), small generations:
/// the same answers and the same frames remembered as the trees.
#[test]
fn the_same_answers_as_the_trees() {
    for (seed, per_generation) in [(1u64, 64), (2, 7), (3, 1000), (4, 3)] {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut next = || rng.next();
        let mut new = FreedFrames::new(per_generation);
        let mut old = Trees {
            per_generation,
            ..Default::default()
        };
        for step in 0..40_000u64 {
            let r = next();
            let base = match r % 8 {
                0 => (1 << 52) - 3 * GROUP_FRAMES,
                1 => 0,
                _ => 5 * GROUP_FRAMES,
            };
            let order = ((r >> 8) % (u64::from(MAX_BLOCK_ORDER) + 1)) as u32;
            let order = if r >> 62 == 0 { order } else { order.min(3) };
            let span = 3 * GROUP_FRAMES;
            let mut pfn = base.saturating_add((r >> 16) % span);
            if (r >> 40) % 4 != 0 {
                pfn &= !((1u64 << order) - 1);
            }
            match (r >> 48) % 10 {
                0..=3 => {
                    new.insert(pfn, frame(step, order));
                    old.insert(pfn, frame(step, order));
                }
                4..=6 => {
                    new.allocated(pfn, order);
                    old.allocated(pfn, order);
                }
                7 => assert_eq!(new.covering(pfn), old.covering(pfn), "step {step}"),
                8 => assert_eq!(new.get(pfn), old.get(pfn), "step {step}"),
                _ => assert_eq!(new.remove(pfn), old.remove(pfn), "step {step}"),
            }
            if step % 997 == 0 {
                assert_eq!(new.all(), old.all(), "seed {seed} step {step}");
            }
        }
        assert_eq!(new.all(), old.all(), "seed {seed}");
        assert!(!new.is_empty());
    }
}

/// Frame numbers no page has (up to `u64::MAX`, which cannot be
/// remembered) are taken without a panic.
#[test]
fn the_last_frames_are_safe() {
    let mut g = FreedFrames::new(4);
    for k in 0..40u64 {
        let pfn = u64::MAX - k * 997;
        g.insert(pfn, frame(k, (k % 14) as u32));
        g.allocated(pfn - 5, (k % 14) as u32);
        let _ = g.covering(pfn);
        let _ = g.remove(pfn.wrapping_sub(3));
    }
    assert!(g.get(u64::MAX).is_none());
}

#[test]
fn memory_is_bounded_by_generations() {
    let mut g = FreedFrames::new(FRAMES_PER_GEN);
    for pfn in 0..(3 * FRAMES_PER_GEN as u64) {
        g.insert(pfn, frame(0, 0));
    }
    assert!(g.len() <= 2 * FRAMES_PER_GEN);
    assert!(g.get(3 * FRAMES_PER_GEN as u64 - 1).is_some());
    assert!(g.get(0).is_none());
    // Groups emptied by forgetting are dropped.
    assert!(g.groups.len() <= 2 * FRAMES_PER_GEN / GROUP_FRAMES as usize + 1);
}

const FRAMES_PER_GEN: usize = super::super::page_misuse::FRAMES_PER_GENERATION;

#[test]
fn the_highest_bit_below_is_found_across_words_in_lists_and_bitmaps() {
    for mut b in [Bits::default(), Bits::Many(Box::default())] {
        assert_eq!(b.last_at_or_below(8191), None);
        b.set(3);
        b.set(700);
        b.set(8191);
        b.set(700);
        assert_eq!(b.last_at_or_below(8190), Some(700));
        assert_eq!(b.last_at_or_below(700), Some(700));
        assert_eq!(b.last_at_or_below(699), Some(3));
        assert_eq!(b.last_at_or_below(2), None);
        assert_eq!(b.next_in(4, 8192), Some(700));
        assert_eq!(b.next_in(701, 8191), None);
        b.clear(700);
        b.clear(701);
        assert_eq!((b.count(), b.last_at_or_below(8190)), (2, Some(3)));
    }
}

#[test]
fn a_group_s_list_becomes_a_bitmap_past_a_few_frames_with_the_same_answers() {
    let mut b = Bits::default();
    for i in 0..=FEW {
        assert!(matches!(b, Bits::Few(_)));
        b.set(8191 - 97 * i);
    }
    assert!(matches!(b, Bits::Many(_)));
    assert_eq!(b.count(), FEW + 1);
    assert_eq!(b.last_at_or_below(8190), Some(8191 - 97));
    assert_eq!(b.next_in(0, 8192), Some(8191 - 97 * FEW));
    assert!(b.has(8191) && !b.has(8190));
}

/// A block freed unaligned across a group's end, split by an allocation
/// in the next group: its holder is found in the group below.
#[test]
fn a_holder_in_the_group_below_is_split() {
    let mut new = FreedFrames::new(64);
    let mut old = Trees {
        per_generation: 64,
        ..Default::default()
    };
    for (pfn, order) in [(8190, 3), (8200, 0)] {
        new.insert(pfn, frame(pfn, order));
        old.insert(pfn, frame(pfn, order));
    }
    new.allocated(8193, 0);
    old.allocated(8193, 0);
    let orders: Vec<(u64, u8)> = new.all().iter().map(|(p, f)| (*p, f.order)).collect();
    assert_eq!(orders, [(8190, 1), (8192, 0), (8194, 2), (8200, 0)]);
    assert_eq!(new.all(), old.all());
}
