//! The k-way merge of the per-CPU event streams by time stamp (ties by
//! CPU), and the lost-event windows it learns on the way.
//!
//! A window is registered as soon as the first event after a loss becomes
//! the head of its CPU's stream, before anything later is merged. So while
//! the event at time `t` is analysed, every window that starts before `t`
//! is known, on every CPU: findings can be judged uncertain on the spot.

use super::decode::{BlockOut, CpuSummary};
use crate::event::Event;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::mpsc::Receiver;
use std::sync::Mutex;

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

/// One CPU's blocks, as the merge takes them.
pub struct StreamInput {
    pub cpu: u32,
    /// (first sub-buffer index, sub-buffers) of each block, in order.
    pub blocks: Vec<(u64, u32)>,
    /// Sub-buffers the recorder wrote for this CPU, from the END block
    /// (`None` in a log cut short): those after the last block present
    /// are missing too.
    pub written: Option<u64>,
}

struct Stream {
    cpu: u32,
    /// (first sub-buffer index, sub-buffers) of each block, in order.
    blocks: Vec<(u64, u32)>,
    written: Option<u64>,
    /// Blocks handed to the decoders so far.
    submitted: usize,
    inflight: VecDeque<Receiver<BlockOut>>,
    batch: Vec<Event>,
    pos: usize,
    /// Time of the last slab event taken from this stream (0: none yet):
    /// where a loss window after it starts.
    last_ts: u64,
    /// Sub-buffer index the next block should start at (every CPU's
    /// stream starts at 0, so a lost first block is a gap too).
    expected: u64,
    /// Events were lost after the last event handed out.
    carry: bool,
    sum: CpuSummary,
    done: bool,
}

/// Hands a block (stream index, block index) to a decoder; its result
/// arrives on the receiver.
pub type Submit<'a> = Box<dyn Fn(usize, usize) -> Receiver<BlockOut> + 'a>;

/// Merges per-CPU streams of decoded blocks.
pub struct Merger<'a> {
    streams: Vec<Stream>,
    /// Heads of streams other than `cur`: (ts, stream index).
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// The stream whose head is not in the heap (the one last taken from).
    cur: Option<usize>,
    submit: Submit<'a>,
    /// Blocks decoded ahead per stream.
    ahead: usize,
    /// Blocks decoded ahead, all streams together, at most (a stream with
    /// none in flight gets one anyway, so that it can go on).
    cap: usize,
    /// Blocks in the decoders' hands now.
    inflight: usize,
    /// Where emptied event vectors go back for reuse.
    pool: Option<&'a Mutex<Vec<Vec<Event>>>>,
    pub windows: Windows,
    pub summaries: Vec<CpuSummary>,
}

impl<'a> Merger<'a> {
    /// `inputs`: one per CPU, ascending CPU. `ahead`: blocks decoded ahead
    /// per stream; `cap`: in all.
    pub fn new(
        inputs: Vec<StreamInput>,
        submit: Submit<'a>,
        (ahead, cap): (usize, usize),
        pool: Option<&'a Mutex<Vec<Vec<Event>>>>,
    ) -> Self {
        let mut m = Merger {
            streams: inputs
                .into_iter()
                .map(
                    |StreamInput {
                         cpu,
                         blocks,
                         written,
                     }| Stream {
                        cpu,
                        blocks,
                        written,
                        submitted: 0,
                        inflight: VecDeque::new(),
                        batch: Vec::new(),
                        pos: 0,
                        last_ts: 0,
                        expected: 0,
                        carry: false,
                        sum: CpuSummary {
                            cpu,
                            ..Default::default()
                        },
                        done: false,
                    },
                )
                .collect(),
            heap: BinaryHeap::new(),
            cur: None,
            submit,
            ahead: ahead.max(1),
            cap: cap.max(1),
            inflight: 0,
            pool,
            windows: Windows::default(),
            summaries: Vec::new(),
        };
        // Start every stream's decoding before waiting for any.
        for i in 0..m.streams.len() {
            m.fill(i);
        }
        for i in 0..m.streams.len() {
            if m.load(i) {
                let ts = m.streams[i].batch[m.streams[i].pos].ts;
                m.heap.push(Reverse((ts, i)));
            }
        }
        m
    }

    /// Keeps up to `ahead` blocks of stream `i` in the decoders' hands
    /// (within the overall cap), and at least one while any is left.
    fn fill(&mut self, i: usize) {
        let s = &mut self.streams[i];
        while s.submitted < s.blocks.len()
            && (s.inflight.is_empty()
                || (s.inflight.len() < self.ahead && self.inflight < self.cap))
        {
            s.inflight.push_back((self.submit)(i, s.submitted));
            s.submitted += 1;
            self.inflight += 1;
        }
    }

    /// Makes sure stream `i` has a head event; false when it has ended.
    /// Registers the window in front of a new head that follows a loss.
    fn load(&mut self, i: usize) -> bool {
        loop {
            let s = &mut self.streams[i];
            if s.pos < s.batch.len() {
                let h = &s.batch[s.pos];
                if h.lost_before {
                    let w = Window {
                        cpu: s.cpu,
                        start: s.last_ts,
                        end: h.ts,
                    };
                    self.windows.add(w);
                }
                return true;
            }
            if s.done {
                return false;
            }
            let old = std::mem::take(&mut s.batch);
            s.pos = 0;
            if old.capacity() > 0 {
                if let Some(p) = self.pool {
                    if let Ok(mut p) = p.lock() {
                        if p.len() < 64 {
                            p.push(old);
                        }
                    }
                }
            }
            let Some(rx) = s.inflight.pop_front() else {
                // The stream is over; sub-buffers written after the last
                // block present are missing.
                if let Some(w) = s.written.filter(|&w| w > s.expected) {
                    s.sum.missing_subbufs += w - s.expected;
                    s.carry = true;
                }
                s.done = true;
                s.sum.pending_loss = s.carry;
                if s.carry {
                    let w = Window {
                        cpu: s.cpu,
                        start: s.last_ts,
                        end: u64::MAX,
                    };
                    self.windows.add(w);
                }
                self.summaries.push(std::mem::take(&mut s.sum));
                return false;
            };
            let k = s.submitted - s.inflight.len() - 1;
            let out = rx.recv();
            self.inflight -= 1;
            self.fill(i);
            let s = &mut self.streams[i];
            let (first, count) = s.blocks[k];
            if first > s.expected {
                s.sum.missing_subbufs += first - s.expected;
                s.carry = true;
            }
            s.expected = first + u64::from(count);
            let Ok(mut out) = out else {
                // The decoder died: treat the block as lost.
                s.carry = true;
                continue;
            };
            if let Some(f) = out.events.first_mut() {
                f.lost_before |= std::mem::take(&mut s.carry);
            }
            s.carry |= out.sum.pending_loss;
            s.sum.absorb(&out.sum);
            s.batch = out.events;
        }
    }

    #[inline]
    fn head_ts(&self, i: usize) -> u64 {
        let s = &self.streams[i];
        s.batch[s.pos].ts
    }

    /// The next event in time order.
    #[inline]
    pub fn next_event(&mut self) -> Option<Event> {
        let pick = match self.cur {
            Some(c) => match self.heap.peek() {
                Some(&Reverse((t, j))) if (t, j) < (self.head_ts(c), c) => {
                    let ts = self.head_ts(c);
                    self.heap.pop();
                    self.heap.push(Reverse((ts, c)));
                    j
                }
                _ => c,
            },
            None => {
                let Reverse((_, j)) = self.heap.pop()?;
                j
            }
        };
        let s = &mut self.streams[pick];
        let ev = s.batch[s.pos];
        s.pos += 1;
        if ev.kind.is_slab() {
            s.last_ts = ev.ts;
        }
        self.cur = if self.load(pick) { Some(pick) } else { None };
        Some(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Body, Kind, Slab, NO_CACHE, NO_NODE};
    use std::sync::mpsc::sync_channel;

    fn ev(cpu: u16, ts: u64, lost: bool) -> Event {
        Event {
            ts,
            pid: 0,
            cpu,
            kind: Kind::Kfree,
            lost_before: lost,
            body: Body::Slab(Slab {
                ptr: 0,
                site: 0,
                bytes_req: 0,
                bytes_alloc: 0,
                gfp: 0,
                cache: NO_CACHE,
                node: NO_NODE,
            }),
        }
    }

    #[test]
    fn merges_by_time_then_cpu_and_learns_windows() {
        // Per CPU: blocks of (events, pending loss at the end), and the
        // blocks' (first sub-buffer, count).
        let data: Vec<Vec<(Vec<Event>, bool)>> = vec![
            vec![
                (vec![ev(0, 1, false), ev(0, 5, false)], false),
                (vec![ev(0, 9, true)], false),
            ],
            vec![(vec![ev(1, 5, false), ev(1, 6, false)], true)],
            vec![],
            // A gap in the sub-buffer sequence before the second block.
            vec![
                (vec![ev(3, 2, false)], false),
                (vec![ev(3, 7, false)], false),
            ],
        ];
        let positions: Vec<Vec<(u64, u32)>> = vec![
            vec![(0, 1), (1, 1)],
            vec![(0, 1)],
            vec![],
            vec![(0, 1), (5, 1)],
        ];
        // Whatever the look-ahead, the same order and windows.
        for (ahead, cap) in [(1, 1), (3, 2), (8, 8)] {
            merge_case(&data, &positions, ahead, cap);
        }
    }

    fn merge_case(
        data: &[Vec<(Vec<Event>, bool)>],
        positions: &[Vec<(u64, u32)>],
        ahead: usize,
        cap: usize,
    ) {
        let inputs = positions
            .iter()
            .enumerate()
            .map(|(c, p)| StreamInput {
                cpu: c as u32,
                blocks: p.clone(),
                written: None,
            })
            .collect();
        let data2 = data.to_vec();
        let submit: Submit<'_> = Box::new(move |i, k| {
            let (tx, rx) = sync_channel(1);
            let (events, pending_loss) = data2[i][k].clone();
            let sum = CpuSummary {
                cpu: i as u32,
                pending_loss,
                ..Default::default()
            };
            tx.send(BlockOut { events, sum }).unwrap();
            rx
        });
        let mut m = Merger::new(inputs, submit, (ahead, cap), None);
        // At most the cap, or one per stream that has blocks.
        let streams = positions.iter().filter(|p| !p.is_empty()).count();
        assert!(m.inflight <= cap.max(streams), "{} in flight", m.inflight);
        let mut got = Vec::new();
        while let Some(e) = m.next_event() {
            got.push((e.ts, e.cpu));
        }
        assert_eq!(
            got,
            [(1, 0), (2, 3), (5, 0), (5, 1), (6, 1), (7, 3), (9, 0)]
        );
        assert_eq!(m.summaries.len(), 4);
        let w = m.windows.list();
        assert_eq!(w.len(), 3, "{w:?}");
        for want in [
            Window {
                cpu: 0,
                start: 5,
                end: 9,
            },
            Window {
                cpu: 1,
                start: 6,
                end: u64::MAX,
            },
            Window {
                cpu: 3,
                start: 2,
                end: 7,
            },
        ] {
            assert!(w.contains(&want), "{want:?} in {w:?}");
        }
        let s3 = m.summaries.iter().find(|s| s.cpu == 3).unwrap();
        assert_eq!(s3.missing_subbufs, 4);
    }

    #[test]
    fn sub_buffers_lost_first_or_last_are_windows_too() {
        // CPU 0 lost its first block (sub-buffers 0-1), CPU 1 its last
        // (END says 5 written, 3 present), CPU 2 everything (END says 2).
        let inputs = vec![
            StreamInput {
                cpu: 0,
                blocks: vec![(2, 1)],
                written: Some(3),
            },
            StreamInput {
                cpu: 1,
                blocks: vec![(0, 3)],
                written: Some(5),
            },
            StreamInput {
                cpu: 2,
                blocks: vec![],
                written: Some(2),
            },
        ];
        let data = [vec![ev(0, 10, false)], vec![ev(1, 20, false)]];
        let submit: Submit<'_> = Box::new(move |i, _| {
            let (tx, rx) = sync_channel(1);
            let sum = CpuSummary {
                cpu: i as u32,
                ..Default::default()
            };
            let events = data[i].clone();
            tx.send(BlockOut { events, sum }).unwrap();
            rx
        });
        let mut m = Merger::new(inputs, submit, (2, 2), None);
        let first = m.next_event().unwrap();
        assert!(first.lost_before, "the first event follows a loss");
        while m.next_event().is_some() {}
        let missing: Vec<u64> = m.summaries.iter().map(|s| s.missing_subbufs).collect();
        let mut by_cpu: Vec<(u32, u64)> = m.summaries.iter().map(|s| s.cpu).zip(missing).collect();
        by_cpu.sort_unstable();
        assert_eq!(by_cpu, [(0, 2), (1, 2), (2, 2)]);
        let w = m.windows.list();
        for want in [
            Window {
                cpu: 0,
                start: 0,
                end: 10,
            },
            Window {
                cpu: 1,
                start: 20,
                end: u64::MAX,
            },
            Window {
                cpu: 2,
                start: 0,
                end: u64::MAX,
            },
        ] {
            assert!(w.contains(&want), "{want:?} in {w:?}");
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
