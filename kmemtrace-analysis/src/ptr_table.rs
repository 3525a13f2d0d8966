//! A hash table from kernel pointers to small fixed-size values, for the
//! object tracker.
//!
//! Why not `HashMap`: with hundreds of thousands of live objects the table
//! is far bigger than the caches, and each lookup is one or two cache
//! misses that the tracker otherwise waits for one after the other (most of
//! its time). Here a key's place is one computable slot of one array
//! (open addressing, linear probing, key and value side by side), so the
//! tracker can fetch the slots of the next events before it handles them
//! (`Objects::warm`): their misses then overlap. Deletion shifts the
//! rest of a probe run back, so there are no tombstones and a lookup of an
//! absent key stops at the first empty slot.

/// `key`'s first slot in a table of `2^(64 - shift)` slots: the key folded
/// with a multiply keyed by `seed`, then mixed by a fixed bijection (one
/// fold alone leaves the top bits of close keys a near-arithmetic series,
/// which for some seeds crowds them into a few slots).
#[inline]
fn home(seed: [u64; 2], key: u64, shift: u32) -> usize {
    let x = crate::intern::fold_mul(key ^ seed[0], seed[1]);
    let x = (x ^ (x >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    (x >> shift) as usize
}

/// An empty slot's key; keys must be non-zero.
const EMPTY: u64 = 0;

/// A map from non-zero `u64` keys to `V`.
pub struct PtrTable<V> {
    /// `(key, value)`; the length is a power of two, at most 3/4 full, so
    /// every probe run ends at an empty slot.
    slots: Vec<(u64, V)>,
    /// `64 - log2(slots.len())`: a key's home is its hash's top bits.
    shift: u32,
    len: usize,
    /// The hash's key ([`crate::intern::process_seed`]).
    seed: [u64; 2],
}

const MIN_SLOTS: usize = 16;

impl<V: Copy + Default> Default for PtrTable<V> {
    fn default() -> Self {
        Self::with_slots(MIN_SLOTS)
    }
}

impl<V: Copy + Default> PtrTable<V> {
    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        PtrTable {
            slots: vec![(EMPTY, V::default()); n],
            shift: 64 - n.trailing_zeros(),
            len: 0,
            seed: crate::intern::process_seed(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// A key's first slot. The mixer differs from [`crate::event::bucket`]'s,
    /// whose top bits are the same for every key of one bucket's table, and
    /// is keyed: a fixed one a log could invert, to pick pointers that
    /// share one home (each insertion then probing past all the others).
    #[inline]
    fn home(&self, key: u64) -> usize {
        home(self.seed, key, self.shift)
    }

    /// Asks for the lines of `key`'s first slot (its key, and the next
    /// slot's key, which starts where the slot's value ends) to be fetched,
    /// so that a lookup of `key` soon after finds them in the cache. Called
    /// for a batch of keys in a row, the misses overlap.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        let h = self.home(key);
        crate::hint::prefetch(&self.slots, h);
        crate::hint::prefetch(&self.slots, (h + 1) & self.mask());
    }

    /// The slot holding `key`.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            match self.slots[i].0 {
                k if k == key => return Some(i),
                EMPTY => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        self.find(key).map(|i| &self.slots[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.find(key).map(|i| &mut self.slots[i].1)
    }

    /// Removes `key`; returns its value. The table does not shrink (see
    /// [`PtrTable::retain`]).
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let i = self.find(key)?;
        let v = self.slots[i].1;
        self.remove_at(i);
        Some(v)
    }

    /// Sets `key` to `value`; returns the value it had.
    #[inline]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if let Some(i) = self.find(key) {
            return Some(std::mem::replace(&mut self.slots[i].1, value));
        }
        self.insert_absent(key, value);
        None
    }

    /// Inserts a key known to be absent.
    #[inline]
    pub fn insert_absent(&mut self, key: u64, value: V) {
        assert_ne!(key, EMPTY, "PtrTable keys are non-zero");
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.resize(self.slots.len() * 2);
        }
        let mask = self.mask();
        let mut i = self.home(key);
        while self.slots[i].0 != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = (key, value);
        self.len += 1;
    }

    #[cold]
    fn resize(&mut self, n: usize) {
        let old = std::mem::replace(self, Self::with_slots(n.max(MIN_SLOTS)));
        for (k, v) in old.slots {
            if k != EMPTY {
                self.insert_absent(k, v);
            }
        }
    }

    /// Keeps the entries for which `keep` is true. Each removal shifts the
    /// rest of its probe run back (an entry moved into the slot just
    /// emptied is looked at next, so none is skipped; one moved across the
    /// table's end may be looked at twice, and kept twice).
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &V) -> bool) {
        let mut i = 0;
        while i < self.slots.len() {
            let (k, v) = self.slots[i];
            if k != EMPTY && !keep(k, &v) {
                self.remove_at(i);
            } else {
                i += 1;
            }
        }
        if self.slots.len() > MIN_SLOTS && self.len * 8 < self.slots.len() {
            self.resize((self.len * 2).next_power_of_two());
        }
    }

    /// Empties slot `hole` and moves back the entries after it whose probe
    /// run passes it.
    fn remove_at(&mut self, mut hole: usize) {
        let mask = self.mask();
        self.len -= 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].0;
            if k == EMPTY {
                break;
            }
            // The entry may move to `hole` unless its home lies cyclically
            // in (hole, j]: it would then sit before its home.
            let home = self.home(k);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = (EMPTY, V::default());
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.slots
            .iter()
            .filter(|(k, _)| *k != EMPTY)
            .map(|(k, v)| (*k, v))
    }
}

/// A [`PtrTable`] keyed by page frame numbers (frame `f` is key `f + 1`,
/// keys being non-zero): `u64::MAX`, which no page has, is never held.
pub struct FrameTable<V>(PtrTable<V>);

impl<V: Copy + Default> Default for FrameTable<V> {
    fn default() -> Self {
        FrameTable(PtrTable::default())
    }
}

impl<V: Copy + Default> FrameTable<V> {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    #[inline]
    pub fn get(&self, pfn: u64) -> Option<&V> {
        self.0.get(pfn.checked_add(1)?)
    }

    /// As [`PtrTable::prefetch`].
    #[inline]
    pub fn prefetch(&self, pfn: u64) {
        if let Some(key) = pfn.checked_add(1) {
            self.0.prefetch(key)
        }
    }

    /// Sets frame `pfn` to `value` (not `u64::MAX`: nothing); returns the
    /// value it had.
    #[inline]
    pub fn insert(&mut self, pfn: u64, value: V) -> Option<V> {
        self.0.insert(pfn.checked_add(1)?, value)
    }

    #[inline]
    pub fn remove(&mut self, pfn: u64) -> Option<V> {
        self.0.remove(pfn.checked_add(1)?)
    }

    /// The entries, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.0.iter().map(|(k, v)| (k - 1, v))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kmemtrace_testkit::Rng;
    use std::collections::{HashMap, HashSet};

    /// Random inserts, updates, lookups and retains against `HashMap`,
    /// with keys clustered as slab pointers are.
    #[test]
    fn same_as_a_hash_map() {
        let mut t: PtrTable<u32> = PtrTable::default();
        let mut m: HashMap<u64, u32> = HashMap::new();
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut next = || rng.next();
        for round in 0..200_000u32 {
            let r = next();
            let key = 0xffff_8880_0000_0000 + (r % 5000) * 64;
            match r >> 60 {
                0..=7 => assert_eq!(t.insert(key, round), m.insert(key, round)),
                8..=12 => assert_eq!(t.get(key).copied(), m.get(&key).copied()),
                13 => assert_eq!(t.remove(key), m.remove(&key)),
                14 => {
                    if let Some(v) = t.get_mut(key) {
                        *v += 1;
                    }
                    if let Some(v) = m.get_mut(&key) {
                        *v += 1;
                    }
                }
                _ => {
                    let cut = (r as u32) % 4;
                    t.retain(|k, v| (k / 64 + u64::from(*v)) % 4 != u64::from(cut));
                    m.retain(|k, v| (k / 64 + u64::from(*v)) % 4 != u64::from(cut));
                }
            }
            assert_eq!(t.len(), m.len());
        }
        let mut all: Vec<_> = t.iter().map(|(k, v)| (k, *v)).collect();
        all.sort_unstable();
        let mut want: Vec<_> = m.into_iter().collect();
        want.sort_unstable();
        assert_eq!(all, want);
    }

    /// The multiplicative inverse of odd `c` modulo 2^64.
    pub(crate) fn inverse(c: u64) -> u64 {
        let mut inv = c;
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(inv)));
        }
        assert_eq!(c.wrapping_mul(inv), 1);
        inv
    }

    #[test]
    fn keys_that_share_a_home_under_an_unkeyed_mix_do_not_here() {
        // The table's former mix, fixed and invertible.
        const C: u64 = 0xbf58_476d_1ce4_e5b9;
        let fixed = |key: u64| (key ^ (key >> 29)).wrapping_mul(C);
        // Keys whose fixed mix is 1, 2, 3...: top bits all 0, one home in
        // a table of any size.
        let n = 4096u64;
        let keys: Vec<u64> = (1..=n)
            .map(|x| {
                let y = x.wrapping_mul(inverse(C));
                y ^ (y >> 29) ^ (y >> 58)
            })
            .collect();
        assert!(keys
            .iter()
            .enumerate()
            .all(|(i, &k)| fixed(k) == i as u64 + 1));
        let mut t: PtrTable<u32> = PtrTable::default();
        for &k in &keys {
            t.insert_absent(k, 1);
        }
        // Slots walked past from each key's home to where it lies: about
        // one per key, where one shared home made it n * n / 2.
        let mask = t.mask();
        let probes: usize = (0..t.slots.len())
            .filter(|&i| t.slots[i].0 != EMPTY)
            .map(|i| i.wrapping_sub(t.home(t.slots[i].0)) & mask)
            .sum();
        assert!(probes < 8 * n as usize, "{probes} probes for {n} keys");
        assert!(keys.iter().all(|&k| t.get(k) == Some(&1)));
    }

    #[test]
    fn close_keys_spread_over_the_slots_for_every_seed() {
        // 1,024 keys into 1,024 slots fill about 647 where homes are random.
        for (base, step) in [
            (0xffff_8880_0000_0000u64, 64),
            (0xffff_8880_0000_0000, 4096),
            (0x10_0001, 1),
        ] {
            for seed in crate::intern::tests::seeds(300) {
                let homes: HashSet<usize> = (0..1024u64)
                    .map(|i| home(seed, base + i * step, 54))
                    .collect();
                assert!(homes.len() > 590, "{base:#x}+{step}: {}", homes.len());
            }
        }
    }

    #[test]
    fn shrinks_after_mass_removal_and_still_finds() {
        let mut t: PtrTable<u64> = PtrTable::default();
        for k in 1..=100_000u64 {
            t.insert_absent(k * 4096, k);
        }
        let big = t.slots.len();
        t.retain(|k, _| k % (4096 * 100) == 0);
        assert_eq!(t.len(), 1000);
        assert!(t.slots.len() < big / 8, "{} of {big}", t.slots.len());
        for k in 1..=100_000u64 {
            let want = (k % 100 == 0).then_some(k);
            assert_eq!(t.get_mut(k * 4096).copied(), want, "{k}");
        }
    }
}
