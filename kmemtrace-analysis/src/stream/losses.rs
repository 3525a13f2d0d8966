//! Loss windows: where each CPU's stream lost events, assembled once from
//! the decoded blocks in stream order (whatever order the decoders finish
//! them in), with each CPU's counts.
//!
//! A window runs from the last slab event before a loss to the first one
//! after it: a sub-buffer's missed-events flag, a gap in the sub-buffer
//! sequence (blocks lost between recorder and file, or unreadable), a
//! sub-buffer that stops decoding midway, sub-buffers END says were written
//! after the last block present.

use super::decode::{BlockMeta, CpuSummary};
pub use kmemtrace_format::losses::{SubBufSequence, Window, Windows};
use std::collections::BTreeMap;

/// One CPU's blocks, in stream order.
pub struct StreamInput {
    pub cpu: u32,
    /// (first sub-buffer index, sub-buffers) of each block, in order.
    pub blocks: Vec<(u64, u32)>,
    /// Sub-buffers the recorder wrote for this CPU, from the END block
    /// (`None` in a log cut short): those after the last block present
    /// are missing too.
    pub written: Option<u64>,
}

impl StreamInput {
    /// The inputs of `cpus`, whose blocks are `streams` (in order), with
    /// what the log's END says was written.
    pub fn of(
        log: &kmemtrace_format::log::Log,
        cpus: &[u32],
        streams: &[Vec<kmemtrace_format::log::CpuBlockRef>],
    ) -> Vec<StreamInput> {
        cpus.iter()
            .zip(streams)
            .map(|(&cpu, b)| StreamInput {
                cpu,
                blocks: b.iter().map(|r| (r.first_subbuf, r.count)).collect(),
                written: log.end_total(cpu).map(|t| t.subbufs),
            })
            .collect()
    }
}

/// One CPU's assembly state.
struct Cpu {
    input: StreamInput,
    /// Blocks decoded ahead of the next one in order.
    waiting: BTreeMap<usize, BlockMeta>,
    /// The next block to assemble.
    next: usize,
    /// Holes in the sub-buffer sequence (a lost first block is one too).
    seq: SubBufSequence,
    /// Events were lost after the last slab event assembled.
    carry: bool,
    /// The last slab event's time (0: none yet).
    last_slab: u64,
    /// The latest slab time stamp assembled: every window not yet known
    /// will have `since` at least this.
    slab_floor: u64,
    sum: CpuSummary,
    done: bool,
}

/// Assembles every CPU's blocks, in order, into loss windows and counts.
pub struct Assembler {
    cpus: Vec<Cpu>,
    pub windows: Windows,
}

impl Assembler {
    /// `inputs`: one per CPU, ascending CPU.
    pub fn new(inputs: Vec<StreamInput>) -> Self {
        let mut a = Assembler {
            cpus: inputs
                .into_iter()
                .map(|input| Cpu {
                    sum: CpuSummary {
                        cpu: input.cpu,
                        ..Default::default()
                    },
                    input,
                    waiting: BTreeMap::new(),
                    next: 0,
                    seq: SubBufSequence::default(),
                    carry: false,
                    last_slab: 0,
                    slab_floor: 0,
                    done: false,
                })
                .collect(),
            windows: Windows::default(),
        };
        for i in 0..a.cpus.len() {
            a.advance(i);
        }
        a
    }

    /// Block `k` of stream `i` is decoded.
    pub fn add(&mut self, i: usize, k: usize, meta: BlockMeta) {
        self.cpus[i].waiting.insert(k, meta);
        self.advance(i);
    }

    fn advance(&mut self, i: usize) {
        let c = &mut self.cpus[i];
        while let Some(meta) = c.waiting.remove(&c.next) {
            let (first, count) = c.input.blocks[c.next];
            c.next += 1;
            let missing = c.seq.block(first, count);
            if missing > 0 {
                c.sum.missing_subbufs += missing;
                c.carry = true;
            }
            let loss = &meta.loss;
            let (before, floor) = (c.last_slab, c.slab_floor);
            let cpu = c.input.cpu;
            if let Some(f) = loss.first_slab {
                // Events lost before the block reach its first slab event,
                // unless the decoder already marked that one.
                let marked = loss.ends.first().is_some_and(|e| e.prev.is_none());
                if std::mem::take(&mut c.carry) && !marked {
                    self.windows.add(Window {
                        cpu,
                        start: before,
                        end: f,
                        since: floor,
                    });
                }
                c.last_slab = loss.last_slab.unwrap_or(f);
            }
            for e in &loss.ends {
                self.windows.add(Window {
                    cpu,
                    start: e.prev.unwrap_or(before),
                    end: e.end,
                    since: if e.prev.is_some() {
                        e.prev_max.max(floor)
                    } else {
                        floor
                    },
                });
            }
            c.slab_floor = c.slab_floor.max(loss.max_slab);
            c.carry |= meta.sum.pending_loss;
            c.sum.absorb(&meta.sum);
        }
        if c.next == c.input.blocks.len() && !c.done {
            // The stream is over; sub-buffers written after the last block
            // present are missing.
            let missing = c.seq.after_last(c.input.written);
            if missing > 0 {
                c.sum.missing_subbufs += missing;
                c.carry = true;
            }
            c.done = true;
            c.sum.pending_loss = c.carry;
            if c.carry {
                self.windows.add(Window {
                    cpu: c.input.cpu,
                    start: c.last_slab,
                    end: u64::MAX,
                    since: c.slab_floor,
                });
            }
        }
    }

    /// Every window whose `since` lies before this time is known, and none
    /// found later will (`u64::MAX`: every window is known).
    pub fn known_until(&self) -> u64 {
        self.cpus
            .iter()
            .map(|c| if c.done { u64::MAX } else { c.slab_floor })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The windows and each CPU's counts (by ascending CPU), once every
    /// block is in.
    pub fn finish(self) -> (Windows, Vec<CpuSummary>) {
        let sums = self.cpus.into_iter().map(|c| c.sum).collect();
        (self.windows, sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::decode::{BlockLoss, LossEnd};

    fn meta(
        first: Option<u64>,
        last: Option<u64>,
        ends: &[(Option<u64>, u64)],
        pending: bool,
    ) -> BlockMeta {
        BlockMeta {
            sum: CpuSummary {
                pending_loss: pending,
                ..Default::default()
            },
            loss: BlockLoss {
                first_slab: first,
                last_slab: last,
                max_slab: last.unwrap_or(0),
                ends: ends
                    .iter()
                    .map(|&(prev, end)| LossEnd {
                        prev,
                        prev_max: prev.unwrap_or(0),
                        end,
                    })
                    .collect(),
            },
            max_ts: last.unwrap_or(0),
            ..Default::default()
        }
    }

    #[test]
    fn windows_from_blocks_in_any_order() {
        // CPU 0: block 0 (1..5) ends with a loss; block 1 (9) follows.
        // CPU 1: a loss inside its block, and one after it (END says more
        // was written). CPU 2: nothing present, END says 2 written. CPU 3:
        // a gap in the sequence before its second block.
        let inputs = || {
            vec![
                StreamInput {
                    cpu: 0,
                    blocks: vec![(0, 1), (1, 1)],
                    written: None,
                },
                StreamInput {
                    cpu: 1,
                    blocks: vec![(0, 1)],
                    written: Some(3),
                },
                StreamInput {
                    cpu: 2,
                    blocks: vec![],
                    written: Some(2),
                },
                StreamInput {
                    cpu: 3,
                    blocks: vec![(0, 1), (5, 1)],
                    written: None,
                },
            ]
        };
        let blocks = [
            (0, 0, meta(Some(1), Some(5), &[], true)),
            (0, 1, meta(Some(9), Some(9), &[], false)),
            (1, 0, meta(Some(4), Some(8), &[(Some(4), 6)], false)),
            (3, 0, meta(Some(2), Some(2), &[], false)),
            (3, 1, meta(Some(7), Some(7), &[], false)),
        ];
        let want = [
            Window {
                cpu: 0,
                start: 5,
                end: 9,
                since: 5,
            },
            Window {
                cpu: 1,
                start: 4,
                end: 6,
                since: 4,
            },
            Window {
                cpu: 1,
                start: 8,
                end: u64::MAX,
                since: 8,
            },
            Window {
                cpu: 2,
                start: 0,
                end: u64::MAX,
                since: 0,
            },
            Window {
                cpu: 3,
                start: 2,
                end: 7,
                since: 2,
            },
        ];
        for order in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [1, 3, 0, 4, 2]] {
            let mut a = Assembler::new(inputs());
            assert_eq!(a.known_until(), 0);
            for j in order {
                let (i, k, m) = &blocks[j];
                a.add(*i, *k, m.clone());
            }
            assert_eq!(a.known_until(), u64::MAX);
            let (w, sums) = a.finish();
            let mut got = w.list().to_vec();
            got.sort_by_key(|w| (w.cpu, w.start));
            assert_eq!(got, want, "order {order:?}");
            let missing: Vec<u64> = sums.iter().map(|s| s.missing_subbufs).collect();
            assert_eq!(missing, [0, 2, 2, 4]);
        }
    }
}
