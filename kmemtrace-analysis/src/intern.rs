//! Small helpers the stream and the passes share: a fast hasher for
//! pointer and address keys, and the interners that turn cache names and
//! call-site addresses into dense ids in the decoder threads.

use crate::event::NO_CACHE;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, OnceLock};

/// Two random words drawn once per process that key every [`MixHasher`]
/// and [`crate::ptr_table::PtrTable`]. Their keys (pointers, page frames,
/// call sites, stacks) come from the log; an unkeyed mix is a fixed
/// function a log can invert, to pick keys that all land in one slot or
/// bucket, each lookup then walking past all the others.
pub(crate) fn process_seed() -> [u64; 2] {
    static SEED: OnceLock<[u64; 2]> = OnceLock::new();
    *SEED.get_or_init(|| {
        // Keyed from the operating system's randomness.
        let s = RandomState::new();
        [s.hash_one(1u64), s.hash_one(2u64) | 1]
    })
}

/// The 128-bit product of `a` and `b`, its halves folded together: one
/// multiply that moves every bit of `a` into the low and the high bits.
#[inline]
pub(crate) fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// A fast hasher for pointer and address keys, keyed by
/// [`process_seed`]: each word is folded in with one keyed multiply, and
/// the result mixed once more (a fixed bijection, so the keying holds).
/// Slab pointers are aligned and close together: one fold leaves their
/// bucket bits a near-arithmetic series, which the last mix spreads.
#[derive(Clone, Copy)]
pub struct MixHasher {
    acc: u64,
    mul: u64,
}

impl Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.acc;
        x ^= x >> 32;
        x = x.wrapping_mul(0xd6e8_feb8_6659_fd93);
        x ^ (x >> 32)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut it = bytes.chunks_exact(8);
        for c in &mut it {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.write_u64(w);
        }
        let mut last = [0u8; 8];
        let r = it.remainder();
        last[..r.len()].copy_from_slice(r);
        self.write_u64(u64::from_le_bytes(last) ^ ((r.len() as u64) << 56));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.acc = fold_mul(self.acc ^ i, self.mul);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i))
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i))
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i))
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64)
    }
}

/// Builds [`MixHasher`]s keyed by [`process_seed`].
#[derive(Clone, Copy)]
pub struct MixState {
    seed: [u64; 2],
}

impl Default for MixState {
    fn default() -> Self {
        MixState {
            seed: process_seed(),
        }
    }
}

impl BuildHasher for MixState {
    type Hasher = MixHasher;
    #[inline]
    fn build_hasher(&self) -> MixHasher {
        MixHasher {
            acc: self.seed[0],
            mul: self.seed[1],
        }
    }
}

/// A map with [`MixHasher`]. Its iteration order differs from run to
/// run: what reaches an output from one must be sorted.
pub type FastMap<K, V> = HashMap<K, V, MixState>;
/// A set with [`MixHasher`] (iterated, as [`FastMap`]).
pub type FastSet<K> = std::collections::HashSet<K, MixState>;

pub fn fast_map<K, V>() -> FastMap<K, V> {
    HashMap::with_hasher(MixState::default())
}

/// Cache names, interned to small ids shared by all decoder threads. Id 0
/// is [`NO_CACHE`].
#[derive(Default)]
pub struct Interner {
    inner: Mutex<(HashMap<String, u32>, Vec<String>)>,
}

impl Interner {
    pub fn new() -> Self {
        let i = Interner::default();
        i.inner.lock().unwrap().1.push(String::new());
        i
    }

    pub fn intern(&self, name: &str) -> u32 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = g.0.get(name) {
            return id;
        }
        let id = g.1.len() as u32;
        g.1.push(name.to_string());
        g.0.insert(name.to_string(), id);
        id
    }

    /// All names by id (index 0 is empty).
    pub fn names(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}

/// A thread's own cache in front of the shared [`Interner`], by the whole
/// name: names that share a fingerprint (`kmalloc-000001-objects`, `kmalloc-000002-objects`)
/// are told apart by their hash, not by a search among them.
pub struct LocalInterner<'a> {
    shared: &'a Interner,
    local: FastMap<Box<str>, u32>,
    /// A direct-mapped cache in front of `local`, at a cheap fingerprint
    /// of the name (its length and first and last eight bytes) and checked
    /// by comparing the bytes: (fingerprint, id, name).
    slots: Vec<(u64, u32, Box<str>)>,
}

#[inline]
fn fingerprint(name: &[u8]) -> u64 {
    let n = name.len();
    let mut head = [0u8; 8];
    let mut tail = [0u8; 8];
    let k = n.min(8);
    head[..k].copy_from_slice(&name[..k]);
    tail[..k].copy_from_slice(&name[n - k..]);
    u64::from_le_bytes(head) ^ u64::from_le_bytes(tail).rotate_left(29) ^ ((n as u64) << 56)
}

impl<'a> LocalInterner<'a> {
    pub fn new(shared: &'a Interner) -> Self {
        LocalInterner {
            shared,
            local: fast_map(),
            slots: vec![(u64::MAX, NO_CACHE, Box::from("")); 256],
        }
    }

    #[inline]
    pub fn get(&mut self, name: &str) -> u32 {
        let fp = fingerprint(name.as_bytes());
        let i = (fp.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
        let s = &self.slots[i];
        if s.0 == fp && &*s.2 == name {
            return s.1;
        }
        let id = self.get_slow(name);
        self.slots[i] = (fp, id, name.into());
        id
    }

    /// The id of a name met recently, recognised by its bytes (so they
    /// need no UTF-8 check), without interning anything.
    #[inline]
    pub fn peek(&self, name: &[u8]) -> Option<u32> {
        let fp = fingerprint(name);
        let i = (fp.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
        let s = &self.slots[i];
        (s.0 == fp && s.2.as_bytes() == name).then_some(s.1)
    }

    #[cold]
    fn get_slow(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.local.get(name) {
            return id;
        }
        let id = self.shared.intern(name);
        self.local.insert(name.into(), id);
        id
    }
}

/// Call-site addresses, interned to dense ids by the decoder workers.
#[derive(Default)]
pub struct SiteTable {
    inner: Mutex<(FastMap<u64, u32>, Vec<u64>)>,
}

impl SiteTable {
    pub fn intern(&self, addr: u64) -> u32 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = g.0.get(&addr) {
            return id;
        }
        let id = g.1.len() as u32;
        g.1.push(addr);
        g.0.insert(addr, id);
        id
    }

    /// Addresses of ids `from..`.
    pub fn addrs_from(&self, from: usize) -> Vec<u64> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.1.get(from..).map(<[u64]>::to_vec).unwrap_or_default()
    }
}

/// A worker's own cache in front of the shared [`SiteTable`].
pub struct LocalSites<'a> {
    shared: &'a SiteTable,
    local: FastMap<u64, u32>,
}

impl<'a> LocalSites<'a> {
    pub fn new(shared: &'a SiteTable) -> Self {
        LocalSites {
            shared,
            local: fast_map(),
        }
    }

    #[inline]
    pub fn get(&mut self, addr: u64) -> u32 {
        if let Some(&id) = self.local.get(&addr) {
            return id;
        }
        let id = self.shared.intern(addr);
        self.local.insert(addr, id);
        id
    }
}

/// No stack (the event has none, or the log holds no stacks).
pub const NO_STACK: u32 = 0;

/// A stack's return addresses, innermost first.
pub type Frames = Box<[u64]>;

/// Kernel stacks, interned to dense ids by the decoder workers; id 0 is
/// [`NO_STACK`].
pub struct StackTable {
    inner: Mutex<(FastMap<Frames, u32>, Vec<Frames>)>,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            inner: Mutex::new((fast_map(), vec![Box::from([])])),
        }
    }
}

impl StackTable {
    pub fn intern(&self, frames: &[u64]) -> u32 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = g.0.get(frames) {
            return id;
        }
        let id = g.1.len() as u32;
        g.1.push(frames.into());
        g.0.insert(frames.into(), id);
        id
    }

    /// Every stack by id (index 0 is empty).
    pub fn stacks(&self) -> Vec<Box<[u64]>> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}

/// A worker's own cache in front of the shared [`StackTable`].
pub struct LocalStacks<'a> {
    shared: &'a StackTable,
    local: FastMap<Box<[u64]>, u32>,
}

impl<'a> LocalStacks<'a> {
    pub fn new(shared: &'a StackTable) -> Self {
        LocalStacks {
            shared,
            local: fast_map(),
        }
    }

    #[inline]
    pub fn get(&mut self, frames: &[u64]) -> u32 {
        if let Some(&id) = self.local.get(frames) {
            return id;
        }
        let id = self.shared.intern(frames);
        self.local.insert(frames.into(), id);
        id
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kmemtrace_testkit::Rng;

    #[test]
    fn interner_shares_ids() {
        let i = Interner::new();
        let mut a = LocalInterner::new(&i);
        let mut b = LocalInterner::new(&i);
        let x = a.get("dentry");
        assert_eq!(b.get("dentry"), x);
        assert_ne!(a.get("filp"), x);
        assert_ne!(x, NO_CACHE);
        // Same fingerprint (length, first and last 8 bytes), other names.
        let y = a.get("kmalloc-x-96");
        let z = a.get("kmalloc-y-96");
        assert_ne!(y, z);
        assert_eq!(a.get("kmalloc-x-96"), y);
        assert_eq!(i.names()[x as usize], "dentry");
        assert_eq!(a.peek(b"dentry"), Some(x));
        assert_eq!(b.peek(b"kmalloc-x-96"), None);
        assert_eq!(a.peek(b"dentrx"), None);
    }

    #[test]
    fn names_that_share_a_fingerprint_are_found_by_hash_not_by_search() {
        let i = Interner::new();
        let mut a = LocalInterner::new(&i);
        // One length, first and last eight bytes: one fingerprint.
        let names: Vec<String> = (0..2000)
            .map(|n| format!("kmalloc-{n:06}-objects"))
            .collect();
        let fp = fingerprint(names[0].as_bytes());
        assert!(names.iter().all(|n| fingerprint(n.as_bytes()) == fp));
        let ids: Vec<u32> = names.iter().map(|n| a.get(n)).collect();
        // One entry per name, each found by its hash: a list per
        // fingerprint, searched, made n names cost n * n / 2 compares.
        assert_eq!(a.local.len(), names.len());
        let distinct: FastSet<u32> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), names.len());
        for (n, &id) in names.iter().zip(&ids).rev() {
            assert_eq!(a.get(n), id);
        }
        assert_eq!(i.names()[ids[7] as usize], names[7]);
    }

    #[test]
    fn sites_are_dense_and_shared() {
        let t = SiteTable::default();
        let mut a = LocalSites::new(&t);
        let mut b = LocalSites::new(&t);
        assert_eq!(a.get(0xffff_ffff_8100_0010), 0);
        assert_eq!(b.get(0xffff_ffff_8100_0020), 1);
        assert_eq!(b.get(0xffff_ffff_8100_0010), 0);
        assert_eq!(t.addrs_from(1), [0xffff_ffff_8100_0020]);
    }

    #[test]
    fn stacks_are_dense_and_shared() {
        let t = StackTable::default();
        let mut a = LocalStacks::new(&t);
        let mut b = LocalStacks::new(&t);
        let x = a.get(&[1, 2, 3]);
        assert_ne!(x, NO_STACK);
        assert_eq!(b.get(&[1, 2, 3]), x);
        assert_ne!(b.get(&[1, 2]), x);
        assert_eq!(&*t.stacks()[x as usize], &[1, 2, 3]);
    }

    #[test]
    fn keys_that_collide_under_an_unkeyed_mix_spread_here() {
        use crate::ptr_table::tests::inverse;
        // The former unkeyed hasher of a u64 key, fixed and invertible.
        const G: u64 = 0x9e37_79b9_7f4a_7c15;
        const D: u64 = 0xd6e8_feb8_6659_fd93;
        let fixed = |key: u64| {
            let mut x = key.wrapping_mul(G);
            x ^= x >> 32;
            x = x.wrapping_mul(D);
            x ^ (x >> 32)
        };
        // Keys whose fixed hashes share the low 32 bits (the bucket) and
        // the top 7 (hashbrown's tag): every lookup compares every key.
        let n = 4096u64;
        let keys: Vec<u64> = (1..=n)
            .map(|k| {
                let h = (k << 32) | 0x1234;
                let mut x = h ^ (h >> 32);
                x = x.wrapping_mul(inverse(D));
                x ^= x >> 32;
                x.wrapping_mul(inverse(G))
            })
            .collect();
        assert!(keys
            .iter()
            .all(|&k| fixed(k) & 0xfe00_0000_ffff_ffff == 0x1234));
        // Over fixed seeds, so that a failure can be run again.
        for seed in seeds(20) {
            let b = MixState { seed };
            let buckets: FastSet<u64> = keys.iter().map(|&k| b.hash_one(k) & 0xfff).collect();
            let tags: FastSet<u64> = keys.iter().map(|&k| b.hash_one(k) >> 57).collect();
            assert!(
                buckets.len() > 2000,
                "{seed:x?}: {} buckets of 4096",
                buckets.len()
            );
            assert_eq!(tags.len(), 128, "{seed:x?}");
        }
        let b = MixState::default();
        // Keyed: another key, other hashes.
        let other = MixState { seed: [3, 5] };
        assert_ne!(b.hash_one(keys[0]), other.hash_one(keys[0]));
    }

    /// Seeds as [`process_seed`] draws them, from a fixed series: the
    /// spread must hold for every seed, not only for this run's.
    pub(crate) fn seeds(n: usize) -> impl Iterator<Item = [u64; 2]> {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut next = move || rng.next();
        (0..n).map(move |_| [next(), next() | 1])
    }

    #[test]
    fn aligned_pointers_spread() {
        // Aligned slab pointers, page frames, call sites, pids: 1,024 keys
        // into 1,024 buckets fill about 647 where the hash is random.
        for (base, step) in [
            (0xffff_8880_0000_0000u64, 64),
            (0xffff_8880_0000_0000, 4096),
            (0x10_0000, 1),
            (0xffff_ffff_8100_0000, 16),
        ] {
            for seed in seeds(300) {
                let b = MixState { seed };
                let keys = (0..1024u64).map(|i| base + i * step);
                let low: FastSet<u64> = keys.clone().map(|k| b.hash_one(k) & 1023).collect();
                let tags: FastSet<u64> = keys.map(|k| b.hash_one(k) >> 57).collect();
                assert!(low.len() > 590, "{base:#x}+{step} {seed:x?}: {}", low.len());
                assert!(
                    tags.len() > 120,
                    "{base:#x}+{step} {seed:x?}: {} tags",
                    tags.len()
                );
            }
        }
    }
}
