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
use std::collections::BTreeMap;

/// A stretch of time on one CPU in which events were lost: after the
/// event at `start` (0: before the CPU's first event) and before the one at
/// `end` (`u64::MAX`: after its last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub cpu: u32,
    pub start: u64,
    pub end: u64,
}

/// Lost-event windows, sorted by start with a running maximum of the ends,
/// so that "does any window touch `[t0, t1]`" is a binary search.
#[derive(Clone, Debug, Default)]
pub struct Windows {
    list: Vec<Window>,
    /// `max_end[i]` = the largest `end` among `list[..=i]`.
    max_end: Vec<u64>,
}

impl Windows {
    pub fn add(&mut self, w: Window) {
        let i = self.list.partition_point(|x| x.start <= w.start);
        self.list.insert(i, w);
        self.max_end.truncate(i);
        let mut m = if i == 0 { 0 } else { self.max_end[i - 1] };
        for x in &self.list[i..] {
            m = m.max(x.end);
            self.max_end.push(m);
        }
    }

    /// True if events lost in some window may have fallen in `[t0, t1]`.
    #[inline]
    pub fn touches(&self, t0: u64, t1: u64) -> bool {
        let n = self.list.partition_point(|x| x.start <= t1);
        n > 0 && self.max_end[n - 1] >= t0
    }

    /// True if events were lost anywhere at or after `t`.
    pub fn after(&self, t: u64) -> bool {
        self.max_end.last().is_some_and(|&m| m >= t)
    }

    pub fn list(&self) -> &[Window] {
        &self.list
    }
}

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
    /// Sub-buffer index the next block should start at (every stream starts
    /// at 0, so a lost first block is a gap too).
    expected: u64,
    /// Events were lost after the last slab event assembled.
    carry: bool,
    /// The last slab event's time (0: none yet).
    last_slab: u64,
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
                    expected: 0,
                    carry: false,
                    last_slab: 0,
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
            if first > c.expected {
                c.sum.missing_subbufs += first - c.expected;
                c.carry = true;
            }
            c.expected = first + u64::from(count);
            let loss = &meta.loss;
            let before = c.last_slab;
            if let Some(f) = loss.first_slab {
                // Events lost before the block reach its first slab event,
                // unless the decoder already marked that one.
                if std::mem::take(&mut c.carry) && loss.ends.first() != Some(&(None, f)) {
                    self.windows.add(Window {
                        cpu: c.input.cpu,
                        start: before,
                        end: f,
                    });
                }
                c.last_slab = loss.last_slab.unwrap_or(f);
            }
            for &(prev, end) in &loss.ends {
                self.windows.add(Window {
                    cpu: c.input.cpu,
                    start: prev.unwrap_or(before),
                    end,
                });
            }
            c.carry |= meta.sum.pending_loss;
            c.sum.absorb(&meta.sum);
        }
        if c.next == c.input.blocks.len() && !c.done {
            // The stream is over; sub-buffers written after the last block
            // present are missing.
            if let Some(w) = c.input.written.filter(|&w| w > c.expected) {
                c.sum.missing_subbufs += w - c.expected;
                c.carry = true;
            }
            c.done = true;
            c.sum.pending_loss = c.carry;
            if c.carry {
                self.windows.add(Window {
                    cpu: c.input.cpu,
                    start: c.last_slab,
                    end: u64::MAX,
                });
            }
        }
    }

    /// Every window that starts before this time is known (`u64::MAX`: every
    /// window).
    pub fn known_until(&self) -> u64 {
        self.cpus
            .iter()
            .map(|c| if c.done { u64::MAX } else { c.last_slab })
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
    use crate::stream::decode::BlockLoss;

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
                ends: ends.to_vec(),
            },
            max_ts: last.unwrap_or(0),
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
            },
            Window {
                cpu: 1,
                start: 4,
                end: 6,
            },
            Window {
                cpu: 1,
                start: 8,
                end: u64::MAX,
            },
            Window {
                cpu: 2,
                start: 0,
                end: u64::MAX,
            },
            Window {
                cpu: 3,
                start: 2,
                end: 7,
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

    #[test]
    fn windows_touch() {
        let mut w = Windows::default();
        assert!(!w.touches(0, 100));
        w.add(Window {
            cpu: 0,
            start: 50,
            end: 60,
        });
        w.add(Window {
            cpu: 1,
            start: 10,
            end: 20,
        });
        assert!(w.touches(15, 16));
        assert!(w.touches(0, 10));
        assert!(!w.touches(21, 49));
        assert!(w.touches(55, 1000));
        assert!(!w.touches(61, 1000));
        assert!(w.after(60));
        assert!(!w.after(61));
    }
}
