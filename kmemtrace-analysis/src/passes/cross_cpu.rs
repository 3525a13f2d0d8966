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

    /// Its section of the model: the CPU x CPU matrix of frees, over the
    /// [`CrossCpu::MAX_CPUS`] CPUs with the most frees (as allocator or
    /// freer), so that a machine of thousands of CPUs, or a log naming
    /// them, does not make a matrix of millions of cells.
    pub fn matrix(&self) -> CrossCpu {
        let mut per_cpu: FastMap<u32, u64> = FastMap::default();
        let (mut same, mut cross) = (0u64, 0u64);
        for ((x, y), n) in self.iter() {
            *per_cpu.entry(x).or_default() += n;
            if x == y {
                same += n;
            } else {
                *per_cpu.entry(y).or_default() += n;
                cross += n;
            }
        }
        let mut busiest: Vec<(u64, u32)> = per_cpu.into_iter().map(|(c, n)| (n, c)).collect();
        busiest.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let cpus_left_out = busiest.len().saturating_sub(CrossCpu::MAX_CPUS) as u64;
        let mut mcpus: Vec<u32> = busiest
            .into_iter()
            .take(CrossCpu::MAX_CPUS)
            .map(|(_, c)| c)
            .collect();
        mcpus.sort_unstable();
        let idx = |c: u32| mcpus.binary_search(&c).ok();
        let mut matrix = vec![vec![0u64; mcpus.len()]; mcpus.len()];
        let mut frees_left_out = 0u64;
        for ((x, y), n) in self.iter() {
            match (idx(x), idx(y)) {
                (Some(i), Some(j)) => matrix[i][j] += n,
                _ => frees_left_out += n,
            }
        }
        CrossCpu {
            cpus: mcpus,
            matrix,
            same_cpu_frees: same,
            cross_cpu_frees: cross,
            cpus_left_out,
            frees_left_out,
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
        assert_eq!((m.cpus_left_out, m.frees_left_out), (0, 0));
    }

    #[test]
    fn the_matrix_labels_the_busiest_cpus_and_counts_the_rest() {
        let mut p = CrossCpuPass::default();
        // CPU 5 frees what 300 others allocated, each once; CPUs 1000 and
        // up also free twice on themselves: they and CPU 5 are the busiest.
        for a in 1000..1300u32 {
            p.add(a, 5);
        }
        for a in 1000..1255u32 {
            p.add(a, a);
            p.add(a, a);
        }
        let m = p.matrix();
        assert_eq!(m.cpus.len(), super::CrossCpu::MAX_CPUS);
        assert_eq!(m.cpus[0], 5);
        assert_eq!(m.cpus[1..], (1000..1255).collect::<Vec<_>>()[..]);
        assert_eq!(m.cpus_left_out, 45);
        assert_eq!(m.frees_left_out, 45);
        assert_eq!((m.same_cpu_frees, m.cross_cpu_frees), (510, 300));
        let shown: u64 = m.matrix.iter().flatten().sum();
        assert_eq!(shown + m.frees_left_out, 810);
        assert_eq!(m.matrix[1][0], 1);
        assert_eq!(m.matrix[1][1], 2);
    }
}
