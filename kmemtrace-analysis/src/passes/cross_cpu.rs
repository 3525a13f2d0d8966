//! Frees by (allocating CPU, freeing CPU): the CPU x CPU matrix of objects
//! whose allocation passed the filters.

use super::objects::{Resolution, SlabSeen};
use crate::intern::FastMap;
use crate::model::CrossCpu;

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

    /// Its section of the model: the CPU x CPU matrix of frees.
    pub fn matrix(&self) -> CrossCpu {
        let mut mcpus: Vec<u32> = self.iter().flat_map(|((a, b), _)| [a, b]).collect();
        mcpus.sort_unstable();
        mcpus.dedup();
        let idx = |c: u32| mcpus.binary_search(&c).unwrap_or(0);
        let mut matrix = vec![vec![0u64; mcpus.len()]; mcpus.len()];
        let (mut same, mut cross) = (0, 0);
        for ((x, y), n) in self.iter() {
            matrix[idx(x)][idx(y)] += n;
            if x == y {
                same += n;
            } else {
                cross += n;
            }
        }
        CrossCpu {
            cpus: mcpus.clone(),
            matrix,
            same_cpu_frees: same,
            cross_cpu_frees: cross,
        }
    }
}

impl<'a> super::Pass<'a> for CrossCpuPass {
    const CONSUMES: super::Consumes = super::Consumes::Slab;
    const SHARD: crate::event::ShardKey = crate::event::ShardKey::Pointer;

    fn new(_: &super::PassSetup<'a>) -> Self {
        CrossCpuPass::default()
    }

    #[inline]
    fn slab(&mut self, s: &SlabSeen<'_>) {
        CrossCpuPass::slab(self, s)
    }

    fn absorb(&mut self, o: &mut Self) {
        CrossCpuPass::absorb(self, o)
    }
}

impl<'a> super::MakesSection<'a> for CrossCpuPass {
    type Section = CrossCpu;

    fn section(&self, _: &super::SectionContext<'_>) -> CrossCpu {
        self.matrix()
    }
}
