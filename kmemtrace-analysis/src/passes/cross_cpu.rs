//! Frees by (allocating CPU, freeing CPU): the CPU x CPU matrix of objects
//! whose allocation passed the filters.

use super::objects::{Resolution, SlabSeen};
use crate::intern::FastMap;

/// Dense for CPUs below 256, sparse above.
#[derive(Default)]
pub struct CrossCpuPass {
    dense: Vec<u64>,
    sparse: FastMap<(u32, u32), u64>,
}

impl CrossCpuPass {
    const DENSE: u32 = 256;

    #[inline]
    pub fn slab(&mut self, s: &SlabSeen<'_>) {
        if let Resolution::Free { object } = s.res {
            if object.selected() {
                self.add(u32::from(object.cpu), s.cpu());
            }
        }
    }

    #[inline]
    fn add(&mut self, a: u32, f: u32) {
        self.add_n(a, f, 1)
    }

    #[inline]
    fn add_n(&mut self, a: u32, f: u32, n: u64) {
        if a < Self::DENSE && f < Self::DENSE {
            if self.dense.is_empty() {
                self.dense = vec![0; (Self::DENSE * Self::DENSE) as usize];
            }
            self.dense[(a * Self::DENSE + f) as usize] += n;
        } else {
            *self.sparse.entry((a, f)).or_insert(0) += n;
        }
    }

    /// Adds another shard's frees.
    pub fn absorb(&mut self, o: &CrossCpuPass) {
        for ((a, f), n) in o.iter() {
            self.add_n(a, f, n);
        }
    }

    /// ((allocating CPU, freeing CPU), frees).
    pub fn iter(&self) -> impl Iterator<Item = ((u32, u32), u64)> + '_ {
        self.dense
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| ((i as u32 / Self::DENSE, i as u32 % Self::DENSE), n))
            .chain(self.sparse.iter().map(|(&k, &n)| (k, n)))
    }
}
