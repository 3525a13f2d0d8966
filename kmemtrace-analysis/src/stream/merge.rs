//! One shard's k-way merge of its per-CPU sub-streams into time order.
//!
//! Every event is placed by its [`OrderKey`]: its time stamp, raised to the
//! latest one before it on its CPU where time went backwards (so each
//! sub-stream is sorted, and any subset of a CPU's events merges in the
//! same relative order), then the CPU, then its place in the CPU's stream.
//! The order of two events is the same in every shard count.
//!
//! The heads are kept in a [`Tournament`] (with many CPUs, whose events
//! interleave finely, the merge was the shard's largest cost) by time
//! stamp; the tournament breaks ties by stream. Two heads never come from
//! the same stream, so block and place need not be compared.

use super::blocks::Blocks;
use super::decode::Local;
use crate::event::Event;
use crate::tournament::Tournament;

/// Where an event stands in the one ordered stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderKey {
    /// The time stamp, never below an earlier one of the same CPU.
    pub ts: u64,
    /// The stream (CPUs in ascending order).
    pub stream: u32,
    pub block: u32,
    pub pos: u32,
}

/// One CPU's sub-stream in a shard.
struct Sub {
    /// The next block to take.
    next_block: usize,
    /// The block `part` came from.
    block: u32,
    part: Vec<Event>,
    pos: usize,
    /// The latest time stamp of the CPU's blocks before `block`.
    floor: u64,
    /// The same, including `block`.
    floor_next: u64,
}

/// How far ahead in a sub-stream the merge asks for events to be fetched
/// into the cache (see [`crate::hint`]).
const PREFETCH_AHEAD: usize = 8;

/// Merges a shard's sub-streams.
pub struct Merger<'b, 'a> {
    blocks: &'b Blocks<'a>,
    shard: usize,
    subs: Vec<Sub>,
    /// The heads' time stamps, by stream.
    heads: Tournament<u64>,
    /// Blocks asked for ahead of the one taken, per stream.
    ahead: usize,
    /// The shard's decoder caches, for blocks it decodes while it waits.
    helper: Option<Local<'a>>,
}

impl<'b, 'a> Merger<'b, 'a> {
    pub fn new(blocks: &'b Blocks<'a>, shard: usize, ahead: usize) -> Self {
        let n = blocks.streams();
        let mut m = Merger {
            blocks,
            shard,
            subs: (0..n)
                .map(|_| Sub {
                    next_block: 0,
                    block: 0,
                    part: Vec::new(),
                    pos: 0,
                    floor: 0,
                    floor_next: 0,
                })
                .collect(),
            heads: Tournament::new([]),
            ahead: ahead.max(1),
            helper: None,
        };
        // Ask for every stream's first blocks before waiting for any.
        for i in 0..n {
            for k in 0..m.ahead.min(blocks.len(i)) {
                blocks.request_ahead(i, k);
            }
        }
        let heads: Vec<_> = (0..n)
            .map(|i| m.load(i).then(|| m.head_key(i).ts))
            .collect();
        m.heads = Tournament::new(heads);
        m
    }

    /// Makes sure sub-stream `i` has a head event; false when it has ended.
    fn load(&mut self, i: usize) -> bool {
        loop {
            let s = &mut self.subs[i];
            if s.pos < s.part.len() {
                return true;
            }
            if s.next_block == self.blocks.len(i) {
                return false;
            }
            let k = s.next_block;
            // The stream's next block always: with many streams and a
            // few decoders, a cap shared by every stream would leave the
            // next block of most to be asked for when it is needed, and
            // the shard would wait for each (decoding and merging taking
            // turns instead of overlapping). Further ahead, within the cap.
            self.blocks.request(i, k + 1);
            let ahead = k + self.ahead;
            for a in k + 2..=ahead.min(self.blocks.len(i).saturating_sub(1)) {
                self.blocks.request_ahead(i, a);
            }
            let (part, max_ts) = self.blocks.take(i, k, self.shard, &mut self.helper);
            let s = &mut self.subs[i];
            s.next_block += 1;
            s.block = k as u32;
            self.blocks.recycle(std::mem::replace(&mut s.part, part));
            s.pos = 0;
            s.floor = s.floor_next;
            s.floor_next = s.floor_next.max(max_ts);
        }
    }

    #[inline]
    fn head_key(&self, i: usize) -> OrderKey {
        let s = &self.subs[i];
        let ev = &s.part[s.pos];
        OrderKey {
            ts: (ev.ts + u64::from(ev.lag)).max(s.floor),
            stream: i as u32,
            block: s.block,
            pos: ev.pos,
        }
    }

    /// The next event in order, with its key.
    #[inline]
    pub fn next_event(&mut self) -> Option<(Event, OrderKey)> {
        let pick = self.heads.winner()?;
        let key = self.head_key(pick);
        let s = &mut self.subs[pick];
        let ev = s.part[s.pos];
        s.pos += 1;
        let next = self.load(pick).then(|| {
            let s = &self.subs[pick];
            crate::hint::prefetch(&s.part, s.pos + PREFETCH_AHEAD);
            self.head_key(pick).ts
        });
        self.heads.replace_winner(next);
        Some((ev, key))
    }
}
