//! Loss windows: where each CPU's stream lost events, assembled once from
//! the decoded blocks in stream order (whatever order the decoders finish
//! them in), with each CPU's counts.
//!
//! The windows are [`LossTracker`]'s, the rule set `kmemtrace-check` follows
//! too: a window runs from the last data event (of any kind) before a loss
//! to the first one after it; the losses are a sub-buffer's missed-events
//! flag, a gap in the sub-buffer sequence (blocks lost between recorder and
//! file, or unreadable), a sub-buffer that does not decode to its commit,
//! sub-buffers END says were written after the last block present.

use super::decode::{BlockMeta, CpuSummary};
pub use kmemtrace_kernel::{LossTracker, SubBufSequence, Window, Windows};
use std::collections::{BTreeMap, BTreeSet};

/// One CPU's blocks, in stream order.
pub struct StreamInput {
    pub cpu: u32,
    /// (first sub-buffer index, sub-buffers) of each block, in order.
    pub blocks: Vec<(u64, u32)>,
    /// Sub-buffers the recorder wrote for this CPU, from the END block
    /// (`None` in a log cut short): those after the last block present
    /// are missing too.
    pub written: Option<u64>,
    /// Sub-buffer index ranges, `[from, to)`, that rotation removed.
    pub dropped: Vec<(u64, u64)>,
}

impl StreamInput {
    /// The inputs of `cpus`, whose blocks are `streams` (in order), with
    /// what the log's END says was written.
    pub fn of(
        log: &kmemtrace_import::log::Log,
        cpus: &[u32],
        streams: &[Vec<kmemtrace_import::log::CpuBlockRef>],
    ) -> Vec<StreamInput> {
        cpus.iter()
            .zip(streams)
            .map(|(&cpu, b)| StreamInput {
                cpu,
                blocks: b.iter().map(|r| (r.first_subbuf, r.count)).collect(),
                written: log.end_total(cpu).map(|t| t.subbufs),
                dropped: log.dropped_subbufs(cpu),
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
    /// The windows.
    tracker: LossTracker,
    sum: CpuSummary,
    done: bool,
}

/// Assembles every CPU's blocks, in order, into loss windows and counts.
pub struct Assembler {
    cpus: Vec<Cpu>,
    pub windows: Windows,
    /// (floor, index) of each CPU whose stream is not over: the least is
    /// [`Assembler::known_until`], asked once per epoch, and a damaged END
    /// may list millions of CPUs.
    open: BTreeSet<(u64, usize)>,
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
                    waiting: BTreeMap::new(),
                    next: 0,
                    seq: SubBufSequence::with_dropped(input.dropped.clone()),
                    tracker: LossTracker::with_dropped(input.cpu, input.dropped.clone()),
                    input,
                    done: false,
                })
                .collect(),
            windows: Windows::default(),
            open: BTreeSet::new(),
        };
        for i in 0..a.cpus.len() {
            a.open.insert((a.cpus[i].tracker.floor(), i));
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
        let floor = c.tracker.floor();
        while let Some(meta) = c.waiting.remove(&c.next) {
            let (first, count) = c.input.blocks[c.next];
            c.next += 1;
            let gap = c.seq.block(first, count);
            c.sum.missing_subbufs = c.sum.missing_subbufs.saturating_add(gap);
            for r in &meta.runs.0 {
                if let Some(l) = c.tracker.push(r) {
                    self.windows.add(l.window());
                }
            }
            c.sum.absorb(&meta.sum);
        }
        if c.next == c.input.blocks.len() && !c.done {
            // The stream is over; sub-buffers written after the last block
            // present are missing.
            let gap = c.seq.after_last(c.input.written);
            c.sum.missing_subbufs = c.sum.missing_subbufs.saturating_add(gap);
            c.done = true;
            let open = c.tracker.finish(c.input.written);
            c.sum.pending_loss = open.is_some();
            if let Some(l) = open {
                self.windows.add(l.window());
            }
        }
        if c.done || c.tracker.floor() != floor {
            self.open.remove(&(floor, i));
            if !c.done {
                self.open.insert((c.tracker.floor(), i));
            }
        }
    }

    /// Every window whose `since` lies before this time is known, and none
    /// found later will (`u64::MAX`: every window is known).
    pub fn known_until(&self) -> u64 {
        self.open.first().map_or(u64::MAX, |&(floor, _)| floor)
    }

    /// The windows and each CPU's counts (by ascending CPU), once every
    /// block is in.
    pub fn finish(mut self) -> (Windows, Vec<CpuSummary>) {
        let sums = self.cpus.into_iter().map(|c| c.sum).collect();
        self.windows.compact();
        (self.windows, sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_kernel::{SubBufRun, SubBufRuns};
    use kmemtrace_testkit::Rng;

    /// A block's meta: each sub-buffer (index, missed flag, events' times,
    /// tail lost).
    fn meta(subbufs: &[(u64, bool, &[u64], bool)]) -> BlockMeta {
        let mut runs = SubBufRuns::default();
        for &(index, missed, ts, tail) in subbufs {
            let mut r = SubBufRun::read(index, missed, None);
            ts.iter().for_each(|&t| r.event(t));
            r.tail_lost = tail;
            runs.push(r);
        }
        BlockMeta {
            runs,
            ..Default::default()
        }
    }

    /// What `known_until` was, a scan of every CPU.
    fn known_by_scan(a: &Assembler) -> u64 {
        a.cpus
            .iter()
            .map(|c| if c.done { u64::MAX } else { c.tracker.floor() })
            .min()
            .unwrap_or(u64::MAX)
    }

    #[test]
    fn known_until_follows_the_open_cpus_without_scanning_them() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut rnd = move |n: u64| rng.below(n);
        let cpus = 50;
        let blocks_of = |cpu: u32| 1 + (cpu as usize * 7) % 5;
        let inputs = (0..cpus)
            .map(|cpu| StreamInput {
                cpu,
                blocks: (0..blocks_of(cpu) as u64).map(|k| (k, 1)).collect(),
                written: None,
                dropped: Vec::new(),
            })
            .collect();
        let mut a = Assembler::new(inputs);
        let mut todo: Vec<(usize, usize)> = (0..cpus as usize)
            .flat_map(|i| (0..blocks_of(i as u32)).map(move |k| (i, k)))
            .collect();
        while !todo.is_empty() {
            let (i, k) = todo.swap_remove(rnd(todo.len() as u64) as usize);
            let t = 1 + rnd(10_000);
            a.add(
                i,
                k,
                meta(&[(k as u64, rnd(3) == 0, &[t, t + rnd(50)], false)]),
            );
            assert_eq!(a.known_until(), known_by_scan(&a));
            // The ordered set holds one entry per CPU whose stream is open.
            let open = a.cpus.iter().filter(|c| !c.done).count();
            assert_eq!(a.open.len(), open);
        }
        assert_eq!(a.known_until(), u64::MAX);
    }

    #[test]
    fn windows_from_blocks_in_any_order() {
        // CPU 0: block 0 (1..5) ends with a damaged tail; block 1 (9)
        // follows. CPU 1: a flagged sub-buffer inside its block, and a loss
        // after it (END says more was written). CPU 2: nothing present, END
        // says 2 written. CPU 3: a gap in the sequence before its second
        // block.
        let inputs = || {
            vec![
                StreamInput {
                    cpu: 0,
                    blocks: vec![(0, 1), (1, 1)],
                    written: None,
                    dropped: Vec::new(),
                },
                StreamInput {
                    cpu: 1,
                    blocks: vec![(0, 2)],
                    written: Some(4),
                    dropped: Vec::new(),
                },
                StreamInput {
                    cpu: 2,
                    blocks: vec![],
                    written: Some(2),
                    dropped: Vec::new(),
                },
                StreamInput {
                    cpu: 3,
                    blocks: vec![(0, 1), (5, 1)],
                    written: None,
                    dropped: Vec::new(),
                },
            ]
        };
        let blocks = [
            (0, 0, meta(&[(0, false, &[1, 5], true)])),
            (0, 1, meta(&[(1, false, &[9], false)])),
            (
                1,
                0,
                meta(&[(0, false, &[4], false), (1, true, &[6, 8], false)]),
            ),
            (3, 0, meta(&[(0, false, &[2], false)])),
            (3, 1, meta(&[(5, false, &[7], false)])),
        ];
        // (cpu, start, end, since): the causes are the loss tracker's tests'.
        let w = |cpu, start, end| (cpu, start, end, start);
        let want = [
            w(0, 5, 9),
            w(1, 4, 6),
            w(1, 8, u64::MAX),
            w(2, 0, u64::MAX),
            w(3, 2, 7),
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
            let mut got: Vec<_> = w
                .list()
                .iter()
                .map(|w| (w.cpu, w.start, w.end, w.since))
                .collect();
            got.sort_unstable();
            assert_eq!(got, want, "order {order:?}");
            let missing: Vec<u64> = sums.iter().map(|s| s.missing_subbufs).collect();
            assert_eq!(missing, [0, 2, 2, 4]);
        }
    }
}
