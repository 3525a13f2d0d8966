//! Every ended episode, folded into what the section's tables need: per
//! group (way of waiting, stack, slab call site, order, flags, task) its
//! waits added up, and per episode its span, its stall time and its
//! group. That is 32 bytes an episode where a whole one ([`Ep`]) is
//! hundreds, so a long capture under memory pressure (hundreds of
//! thousands of episodes) keeps little per episode; the percentiles stay
//! exact. Names (call sites from stacks, task names) are given to the
//! groups when the section is made, the stacks being resolved only then.

use super::{Ep, Wait, WaitTotals};
use crate::intern::FastMap;

/// What the tables group episodes by, before names are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub first: Wait,
    pub stack: u32,
    pub slab_site: Option<u64>,
    pub order: Option<u32>,
    pub gfp: Option<u64>,
    pub pid: i32,
}

impl GroupKey {
    fn of(e: &Ep) -> GroupKey {
        GroupKey {
            first: e.first,
            stack: e.stack,
            slab_site: e.slab_site,
            order: e.order,
            gfp: e.gfp,
            pid: e.pid,
        }
    }
}

/// The episodes of one key, their waits added up ([`Wait`] as index).
#[derive(Clone, Debug)]
pub struct Group {
    pub key: GroupKey,
    pub waits: [WaitTotals; 7],
}

/// One episode as the tables need it.
#[derive(Clone, Copy, Debug)]
pub struct EpTimes {
    pub start: u64,
    pub last: u64,
    pub stall_ns: u64,
    /// Its group's index.
    pub group: u32,
    /// Part of it was not seen ([`Ep::cut`]).
    pub cut: bool,
}

/// Episodes folded into groups.
#[derive(Default)]
pub struct Folded {
    index: FastMap<GroupKey, u32>,
    pub groups: Vec<Group>,
    pub episodes: Vec<EpTimes>,
}

impl Folded {
    /// `eps` folded.
    pub fn of<'e>(eps: impl IntoIterator<Item = &'e Ep>) -> Folded {
        let mut f = Folded::default();
        for e in eps {
            f.add(e);
        }
        f
    }

    /// Folds in an ended episode.
    pub fn add(&mut self, e: &Ep) {
        let group = self.group(GroupKey::of(e), &e.per_wait);
        self.episodes.push(EpTimes {
            start: e.start,
            last: e.last,
            stall_ns: e.stall_ns(),
            group,
            cut: e.cut,
        });
    }

    /// The index of `key`'s group, `waits` added to it.
    fn group(&mut self, key: GroupKey, waits: &[WaitTotals; 7]) -> u32 {
        let next = self.groups.len() as u32;
        let i = *self.index.entry(key).or_insert(next);
        if i == next {
            self.groups.push(Group {
                key,
                waits: [WaitTotals::default(); 7],
            });
        }
        for (s, w) in self.groups[i as usize].waits.iter_mut().zip(waits) {
            s.add(w);
        }
        i
    }

    /// Adds another shard's, moving its episodes.
    pub fn absorb(&mut self, o: &mut Folded) {
        if self.episodes.is_empty() && self.groups.is_empty() {
            // The first shard's, taken as it is (a copy would double the
            // peak).
            std::mem::swap(self, o);
            return;
        }
        let to: Vec<u32> = o
            .groups
            .drain(..)
            .map(|g| self.group(g.key, &g.waits))
            .collect();
        o.index.clear();
        self.episodes.reserve(o.episodes.len());
        self.episodes.extend(o.episodes.drain(..).map(|mut t| {
            t.group = to[t.group as usize];
            t
        }));
    }
}
