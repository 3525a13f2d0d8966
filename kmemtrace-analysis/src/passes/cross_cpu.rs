//! Frees by (allocating CPU, freeing CPU): the CPU x CPU matrix of objects
//! whose allocation passed the filters.

use super::objects::{Resolution, SlabSeen};
use crate::intern::FastMap;
use crate::model::CrossCpu;

/// Dense for CPUs below 256, sparse above.
#[derive(Default)]
pub struct CrossCpuPass {
    /// `DENSE` x `DENSE` counts, row `a` the frees of objects CPU `a`
    /// allocated; allocated at the first free.
    dense: Vec<u64>,
    /// One more than the highest CPU in `dense`: `iter` (adding shards up,
    /// making the matrix) visits this many squared cells, not 65,536.
    dense_cpus: u32,
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
            self.dense_cpus = self.dense_cpus.max(a.max(f) + 1);
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
        let span = self.dense_cpus;
        (0..span)
            .flat_map(move |a| (0..span).map(move |f| (a, f)))
            .filter_map(|(a, f)| {
                let n = self.dense[(a * Self::DENSE + f) as usize];
                (n > 0).then_some(((a, f), n))
            })
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

#[cfg(test)]
mod tests {
    use super::CrossCpuPass;
    use std::collections::BTreeMap;

    #[test]
    fn shards_add_up_to_the_frees_of_every_pair_in_order() {
        let pairs = [(3, 0), (0, 3), (3, 0), (7, 7), (255, 1), (256, 2), (1, 300)];
        let (mut one, mut two) = (CrossCpuPass::default(), CrossCpuPass::default());
        let mut want = BTreeMap::new();
        for (i, &(a, f)) in pairs.iter().enumerate() {
            if i % 2 == 0 { &mut one } else { &mut two }.add(a, f);
            *want.entry((a, f)).or_insert(0u64) += 1;
        }
        let mut all = CrossCpuPass::default();
        all.absorb(&one);
        all.absorb(&two);
        // The dense cells row by row, then the sparse ones.
        let dense: Vec<_> = all
            .iter()
            .take_while(|((a, f), _)| *a < 256 && *f < 256)
            .collect();
        let mut sorted = dense.clone();
        sorted.sort();
        assert_eq!(dense, sorted);
        let got: BTreeMap<_, _> = all.iter().collect();
        assert_eq!(got, want);
        let m = all.matrix();
        assert_eq!(m.cpus, [0, 1, 2, 3, 7, 255, 256, 300]);
        assert_eq!((m.same_cpu_frees, m.cross_cpu_frees), (1, 6));
        assert_eq!(m.matrix[3][0], 2);
        assert_eq!(m.matrix[5][1], 1);
    }
}
