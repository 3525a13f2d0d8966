//! Which ended episodes keep their phases when the model does not keep
//! every episode ([`crate::run::Options::episodes`] off): only the report's
//! list of the longest shows phases then, and an episode's phases (up to
//! [`super::PHASES_KEPT`] of them) are most of its memory: kept for every
//! episode, a long capture under memory pressure costs gigabytes.
//!
//! The list of the longest leaves proactive reclaim out (a write to a
//! cgroup's `memory.reclaim` and the like), and whether a memcg wait was
//! proactive is a property of its stack, known only once the stacks are
//! resolved, when the section is made. So the longest are kept per class:
//! per stack for memcg waits with one, and one class for the rest. The
//! longest episodes that are not proactive are then among those kept,
//! whatever the stacks turn out to be, and what is kept is bounded by the
//! count of stacks, not by the capture's length.

use super::section::LONGEST;
use super::{Ep, Wait};
use crate::intern::{FastMap, NO_STACK};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The order of the list of the longest: more stall time first, then the
/// earlier start, then the lower pid.
type Rank = (u64, Reverse<u64>, Reverse<i32>);

/// Per class, the [`LONGEST`] longest ended episodes (least first), by
/// index in the pass's `ended`.
#[derive(Default)]
pub struct PhasesKept {
    by_class: FastMap<Option<u32>, BinaryHeap<Reverse<(Rank, usize)>>>,
}

fn class(e: &Ep) -> Option<u32> {
    (e.first == Wait::Memcg && e.stack != NO_STACK).then_some(e.stack)
}

fn rank(e: &Ep) -> Rank {
    (e.stall_ns(), Reverse(e.start), Reverse(e.pid))
}

/// What only the model's episode uses: given up by an episode that will
/// not be one.
fn forget_detail(e: &mut Ep) {
    e.phases = Vec::new();
    e.compaction_results = FastMap::default();
}

/// Puts `ended[i]` of rank `r` among its class's longest (`heap`); the one
/// that then falls out gives its detail up.
fn keep(heap: &mut BinaryHeap<Reverse<(Rank, usize)>>, r: Rank, i: usize, ended: &mut [Ep]) {
    heap.push(Reverse((r, i)));
    if heap.len() > LONGEST {
        let Reverse((_, out)) = heap.pop().expect("not empty");
        forget_detail(&mut ended[out]);
    }
}

impl PhasesKept {
    /// `ended[i]` has just ended: it keeps its detail if it is among its
    /// class's longest, and the one it displaces gives its detail up.
    pub fn ended(&mut self, ended: &mut [Ep], i: usize) {
        ended[i].open = Vec::new();
        let heap = self.by_class.entry(class(&ended[i])).or_default();
        keep(heap, rank(&ended[i]), i, ended);
    }

    /// Adds another shard's, whose episodes were appended to `ended` from
    /// `offset` on.
    pub fn absorb(&mut self, o: &mut PhasesKept, ended: &mut [Ep], offset: usize) {
        for (class, theirs) in o.by_class.drain() {
            let heap = self.by_class.entry(class).or_default();
            for Reverse((r, i)) in theirs {
                keep(heap, r, i + offset, ended);
            }
        }
    }
}
