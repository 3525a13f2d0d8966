//! The longest ended episodes, kept whole when the model does not keep
//! every episode ([`crate::run::Options::episodes`] off): only the
//! report's list of the longest shows an episode whole then (its phases,
//! its compaction results), and every other ended episode is folded into
//! the tables' groups ([`super::folded`]).
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

/// The order of the list of the longest: more stall time first, then the
/// earlier start, then the lower pid.
type Rank = (u64, Reverse<u64>, Reverse<i32>);

/// Per class, its [`LONGEST`] longest ended episodes, in no order.
#[derive(Default)]
pub struct Longest {
    by_class: FastMap<Option<u32>, Vec<Ep>>,
}

fn class(e: &Ep) -> Option<u32> {
    (e.first == Wait::Memcg && e.stack != NO_STACK).then_some(e.stack)
}

fn rank(e: &Ep) -> Rank {
    (e.stall_ns(), Reverse(e.start), Reverse(e.pid))
}

/// Puts `e` among `kept` if it is longer than the least of them (or
/// there is room).
fn keep(kept: &mut Vec<Ep>, e: Ep) {
    if kept.len() < LONGEST {
        kept.push(e);
        return;
    }
    let least = kept
        .iter()
        .enumerate()
        .min_by_key(|(_, k)| rank(k))
        .map(|(i, k)| (i, rank(k)));
    if let Some((i, _)) = least.filter(|&(_, r)| rank(&e) > r) {
        kept[i] = e;
    }
}

impl Longest {
    /// `e` has ended: kept if it is among its class's longest.
    pub fn ended(&mut self, mut e: Ep) {
        e.open = Vec::new();
        keep(self.by_class.entry(class(&e)).or_default(), e);
    }

    /// Adds another shard's.
    pub fn absorb(&mut self, o: &mut Longest) {
        for (class, theirs) in o.by_class.drain() {
            let mine = self.by_class.entry(class).or_default();
            for e in theirs {
                keep(mine, e);
            }
        }
    }

    /// The episodes kept, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &Ep> {
        self.by_class.values().flatten()
    }
}
