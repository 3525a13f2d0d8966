//! The k-way merge of the per-CPU event streams by time stamp (ties by
//! CPU), and the lost-event windows it learns on the way.
//!
//! A window is registered as soon as the first event after a loss becomes
//! the head of its CPU's stream, before anything later is merged. So while
//! the event at time `t` is analysed, every window that starts before `t`
//! is known, on every CPU: findings can be judged uncertain on the spot.

use crate::decode::{CpuSummary, Msg};
use crate::event::Ev;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{Receiver, Sender};

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

struct Stream {
    cpu: u32,
    rx: Receiver<Msg>,
    recycle: Sender<Vec<Ev>>,
    batch: Vec<Ev>,
    pos: usize,
    /// Time of the last event taken from this stream (0: none yet).
    last_ts: u64,
    done: bool,
}

/// Merges per-CPU streams.
pub struct Merger {
    streams: Vec<Stream>,
    /// Heads of streams other than `cur`: (ts, stream index).
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// The stream whose head is not in the heap (the one last taken from).
    cur: Option<usize>,
    pub windows: Windows,
    pub summaries: Vec<CpuSummary>,
}

impl Merger {
    /// `inputs`: (cpu, events, where to send drained batches), ascending CPU.
    pub fn new(inputs: Vec<(u32, Receiver<Msg>, Sender<Vec<Ev>>)>) -> Self {
        let mut m = Merger {
            streams: inputs
                .into_iter()
                .map(|(cpu, rx, recycle)| Stream {
                    cpu,
                    rx,
                    recycle,
                    batch: Vec::new(),
                    pos: 0,
                    last_ts: 0,
                    done: false,
                })
                .collect(),
            heap: BinaryHeap::new(),
            cur: None,
            windows: Windows::default(),
            summaries: Vec::new(),
        };
        for i in 0..m.streams.len() {
            if m.load(i) {
                let ts = m.streams[i].batch[m.streams[i].pos].ts;
                m.heap.push(Reverse((ts, i)));
            }
        }
        m
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
                let mut old = old;
                old.clear();
                let _ = s.recycle.send(old);
            }
            match s.rx.recv() {
                Ok(Msg::Batch(b)) => s.batch = b,
                Ok(Msg::End(sum)) => {
                    s.done = true;
                    if sum.pending_loss {
                        let w = Window {
                            cpu: s.cpu,
                            start: s.last_ts,
                            end: u64::MAX,
                        };
                        self.windows.add(w);
                    }
                    self.summaries.push(*sum);
                }
                Err(_) => s.done = true,
            }
        }
    }

    #[inline]
    fn head_ts(&self, i: usize) -> u64 {
        let s = &self.streams[i];
        s.batch[s.pos].ts
    }

    /// The next event in time order.
    #[inline]
    pub fn next(&mut self) -> Option<Ev> {
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
        s.last_ts = ev.ts;
        self.cur = if self.load(pick) { Some(pick) } else { None };
        Some(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Msg;
    use crate::event::{Kind, NO_CACHE, NO_NODE};
    use std::sync::mpsc::{channel, sync_channel};

    fn ev(cpu: u16, ts: u64, lost: bool) -> Ev {
        Ev {
            ts,
            ptr: 0,
            call_site: 0,
            bytes_req: 0,
            bytes_alloc: 0,
            gfp: 0,
            pid: 0,
            cache: NO_CACHE,
            node: NO_NODE,
            cpu,
            kind: Kind::Kfree,
            lost_before: lost,
        }
    }

    #[test]
    fn merges_by_time_then_cpu_and_learns_windows() {
        let mut inputs = Vec::new();
        let data: [Vec<Vec<Ev>>; 3] = [
            vec![vec![ev(0, 1, false), ev(0, 5, false)], vec![ev(0, 9, true)]],
            vec![vec![ev(1, 5, false), ev(1, 6, false)]],
            vec![],
        ];
        for (cpu, batches) in data.into_iter().enumerate() {
            let (tx, rx) = sync_channel(8);
            let (rtx, _rrx) = channel();
            for b in batches {
                tx.send(Msg::Batch(b)).unwrap();
            }
            let sum = CpuSummary {
                cpu: cpu as u32,
                pending_loss: cpu == 1,
                ..Default::default()
            };
            tx.send(Msg::End(Box::new(sum))).unwrap();
            inputs.push((cpu as u32, rx, rtx));
        }
        let mut m = Merger::new(inputs);
        let mut got = Vec::new();
        while let Some(e) = m.next() {
            got.push((e.ts, e.cpu));
        }
        assert_eq!(got, [(1, 0), (5, 0), (5, 1), (6, 1), (9, 0)]);
        assert_eq!(m.summaries.len(), 3);
        let w = m.windows.list();
        assert_eq!(w.len(), 2);
        assert!(w.contains(&Window {
            cpu: 0,
            start: 5,
            end: 9
        }));
        assert!(w.contains(&Window {
            cpu: 1,
            start: 6,
            end: u64::MAX
        }));
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
