//! The packer's choice of groups (the format leaves it to the writer: a
//! reader follows `keys`).
//!
//! A payload's kind is its type and length. A kind whose payloads' first
//! field (the `long_size` bytes after the common fields: a slab event's
//! call site) takes few values in the block is split by that value: the
//! payloads of one call site share their sizes and flags and have nearby
//! pointers, so most of their columns are constant or nearly, and pack to
//! runs of zeros (docs/benchmarks.md, "kpack version 2"). A kind whose
//! first field is a page frame or a pointer (thousands of values a block)
//! is not split.
//!
//! It takes two passes: the walk notes each payload's kind and first-field
//! value (`note`); then, once the block's counts are known, `assign`
//! gives each payload its group, ids in order of first use.

use super::Groups;

/// Most kinds in a block: the walk stops at a payload of a new kind past
/// these (the rest of its sub-buffer is carried raw).
const MAX_KINDS: usize = 1024;
/// Most first-field values noted over all kinds, and for one kind: past
/// either, that kind is not split. Kinds and sites together stay within
/// `MAX_GROUPS`.
const MAX_SITES: usize = 3072;
const MAX_SITES_OF_KIND: u16 = 64;
/// A kind is split only where its groups would average this many rows.
const MIN_ROWS_PER_SITE: u32 = 8;
/// No site (the payload has no first field, or its kind stopped noting).
const NO_SITE: u16 = u16::MAX;
/// Slots of the hash tables: powers of two, twice the most entries.
const KIND_SLOTS: usize = 2 * MAX_KINDS;
const SITE_SLOTS: usize = 2 * 4096;

/// A payload noted: its kind, its site (or `NO_SITE`), where it starts.
#[derive(Clone, Copy)]
struct Noted {
    kind: u16,
    site: u16,
    pos: u32,
}

#[derive(Default, Clone, Copy)]
struct KindInfo {
    len: u32,
    rows: u32,
    sites: u16,
    /// Every payload of the kind has a site noted.
    splittable: bool,
}

/// The kinds and first-field values of a block's payloads, in record order.
#[derive(Default)]
pub(super) struct Kinds {
    /// Key + 1 (0: empty) and index, open addressing; `filled` lists the
    /// slots to empty for the next block.
    kind_slots: Vec<(u64, u16)>,
    site_slots: Vec<(u64, u64, u16)>,
    filled_kinds: Vec<u32>,
    filled_sites: Vec<u32>,
    kinds: Vec<KindInfo>,
    sites: usize,
    /// The payloads noted, in record order.
    noted: Vec<Noted>,
    /// Group ids given so far, by kind and by site (`u16::MAX`: none yet).
    kind_group: Vec<u16>,
    site_group: Vec<u16>,
}

#[inline]
fn slot(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

impl Kinds {
    pub(super) fn clear(&mut self) {
        if self.kind_slots.is_empty() {
            self.kind_slots = vec![(0, 0); KIND_SLOTS];
            self.site_slots = vec![(0, 0, 0); SITE_SLOTS];
        }
        for s in self.filled_kinds.drain(..) {
            self.kind_slots[s as usize] = (0, 0);
        }
        for s in self.filled_sites.drain(..) {
            self.site_slots[s as usize] = (0, 0, 0);
        }
        self.kinds.clear();
        self.sites = 0;
        self.noted.clear();
    }

    /// Notes the payload `p`, which starts at `pos` in the body; `w` is the
    /// size of its first field. `false` where the block has no room for
    /// another kind (the payload is not noted).
    #[inline]
    pub(super) fn note(&mut self, p: &[u8], pos: u32, w: usize) -> bool {
        let Some(kind) = self.kind_of(p) else {
            return false;
        };
        let site = match p.get(8..8 + w) {
            Some(f) if self.kinds[kind as usize].splittable => self.site_of(kind, f),
            _ => NO_SITE,
        };
        let k = &mut self.kinds[kind as usize];
        k.rows += 1;
        if site == NO_SITE {
            k.splittable = false;
        }
        self.noted.push(Noted { kind, site, pos });
        true
    }

    /// The kind of `p`: its first two bytes (the event's type, in whatever
    /// byte order) and its length.
    #[inline]
    fn kind_of(&mut self, p: &[u8]) -> Option<u16> {
        let ty = match p {
            [a, b, ..] => u64::from(u16::from_le_bytes([*a, *b])),
            [a] => u64::from(*a),
            [] => 0,
        };
        let key = (ty << 32 | p.len() as u64) + 1;
        let mut s = slot(key, KIND_SLOTS.trailing_zeros());
        loop {
            let (k, id) = self.kind_slots[s];
            if k == key {
                return Some(id);
            }
            if k == 0 {
                if self.kinds.len() == MAX_KINDS {
                    return None;
                }
                let id = self.kinds.len() as u16;
                self.kinds.push(KindInfo {
                    len: p.len() as u32,
                    rows: 0,
                    sites: 0,
                    splittable: true,
                });
                self.kind_slots[s] = (key, id);
                self.filled_kinds.push(s as u32);
                return Some(id);
            }
            s = (s + 1) & (KIND_SLOTS - 1);
        }
    }

    /// The site of a payload of `kind` whose first field is `f`; `NO_SITE`
    /// once the kind or the block has too many.
    #[inline]
    fn site_of(&mut self, kind: u16, f: &[u8]) -> u16 {
        let mut v = [0u8; 8];
        v[..f.len()].copy_from_slice(f);
        let value = u64::from_le_bytes(v);
        let key = u64::from(kind) + 1;
        let mut s = slot(value ^ key.rotate_left(40), SITE_SLOTS.trailing_zeros());
        loop {
            let (k, val, id) = self.site_slots[s];
            if k == key && val == value {
                return id;
            }
            if k == 0 {
                let info = &mut self.kinds[kind as usize];
                if info.sites == MAX_SITES_OF_KIND || self.sites == MAX_SITES {
                    return NO_SITE;
                }
                info.sites += 1;
                let id = self.sites as u16;
                self.sites += 1;
                self.site_slots[s] = (key, value, id);
                self.filled_sites.push(s as u32);
                return id;
            }
            s = (s + 1) & (SITE_SLOTS - 1);
        }
    }

    /// Gives each payload noted its group in `groups` (its id in `keys`,
    /// in record order; its position in the group's rows).
    pub(super) fn assign(&mut self, groups: &mut Groups, keys: &mut Vec<u16>) {
        const NONE: u16 = u16::MAX;
        self.kind_group.clear();
        self.kind_group.resize(self.kinds.len(), NONE);
        self.site_group.clear();
        self.site_group.resize(self.sites, NONE);
        let split: Vec<bool> = self
            .kinds
            .iter()
            .map(|k| {
                k.splittable && k.sites > 1 && k.rows >= MIN_ROWS_PER_SITE * u32::from(k.sites)
            })
            .collect();
        keys.reserve(self.noted.len());
        for &Noted { kind, site, .. } in &self.noted {
            let kind = usize::from(kind);
            let slot = if split[kind] {
                &mut self.site_group[usize::from(site)]
            } else {
                &mut self.kind_group[kind]
            };
            if *slot == NONE {
                *slot = groups.add(self.kinds[kind].len) as u16;
            }
            keys.push(*slot);
        }
        // Every key is a group just given.
        let counted = groups.count_rows(keys.iter().map(|&k| usize::from(k)));
        debug_assert!(counted);
        for (&k, n) in keys.iter().zip(&self.noted) {
            groups.put(usize::from(k), n.pos);
        }
    }
}
