//! Every record of a log, of every event, in the order the kernel's `trace`
//! file lists them: by time stamp across CPUs, the lower CPU first on a tie
//! (`__find_next_entry()` keeps the first CPU it finds at the lowest time),
//! each CPU's own records in their order. Where a CPU lost records before
//! one, it comes with the loss, as `trace_pipe` marks it: the losses are
//! [`LossTracker`]'s windows, the ones `kmemtrace-check` and the analysis
//! stream name, each carried by the first record after it on its CPU (a
//! window still open at the CPU's end has none).
//!
//! Unlike the analysis stream ([`crate::stream`]), which decodes kmem events
//! into typed events in parallel shards, this walks raw records on one
//! thread holding one chunk per CPU: it is for listing events, where the
//! printing costs more than the reading.

use kmemtrace_format::endian::Endian;
use kmemtrace_format::log::{BlockScratch, CpuBlockRef};
use kmemtrace_format::losses::{Loss, LossTracker, SubBufRun, RB_EVNT_MIN_SIZE};
use kmemtrace_format::subbuf::{RbRecordKind, SubBufLayout};
use kmemtrace_format::walk::{subbufs, with_endian, SubBufSource, WithEndian};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Records lost on a CPU just before the next one listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The kernel stored how many (`RB_MISSED_STORED`).
    Count(u64),
    /// Some, number unknown: the kernel flagged the sub-buffer without a
    /// count, or sub-buffers were lost or damaged on the way to the log.
    Unknown,
}

impl Lost {
    /// The marker for a loss window closed by a record: its count where
    /// every loss joined in it says how many.
    fn of(l: &Loss) -> Lost {
        l.count.map_or(Lost::Unknown, Lost::Count)
    }
}

/// One record handed out in order.
#[derive(Debug)]
pub struct Record<'a> {
    pub cpu: u32,
    pub ts: u64,
    /// From `common_type` on.
    pub payload: &'a [u8],
    /// Records this CPU lost just before this one: the [`LossTracker`]
    /// window this record closes (the CPU's first record after it).
    pub lost_before: Option<Lost>,
}

struct Item {
    ts: u64,
    start: usize,
    end: usize,
    lost_before: Option<Lost>,
}

/// One CPU's position: the chunk being read, its records not yet handed out.
struct Cursor<'s> {
    cpu: u32,
    chunks: std::vec::IntoIter<&'s CpuBlockRef>,
    scratch: BlockScratch,
    data: Vec<u8>,
    items: VecDeque<Item>,
    /// The CPU's loss windows, fed its sub-buffers as they are read: the
    /// rules `kmemtrace-check` and the analysis stream follow.
    tracker: LossTracker,
}

impl<'s> Cursor<'s> {
    /// Reads chunks until one holds a record; false at the CPU's end.
    fn refill<S: SubBufSource + ?Sized, E: Endian>(
        &mut self,
        src: &'s S,
        e: E,
        layout: &SubBufLayout,
    ) -> bool {
        while self.items.is_empty() {
            let Some(chunk) = self.chunks.next() else {
                return false;
            };
            match src.read_chunk(chunk, &mut self.scratch) {
                Ok(bytes) => {
                    self.data.clear();
                    self.data.extend_from_slice(bytes);
                }
                Err(_) => {
                    // No events in it: no window closes here.
                    let _ = self
                        .tracker
                        .push(&SubBufRun::unreadable(chunk.first_subbuf, chunk.count));
                    continue;
                }
            }
            self.queue_chunk(e, layout, chunk.first_subbuf);
        }
        true
    }

    /// Queues a chunk's data records, sub-buffer by sub-buffer, each fed to
    /// the tracker as the analysis stream feeds it (a null padding inside
    /// the commit, or records that stop decoding, lose the rest).
    fn queue_chunk<E: Endian>(&mut self, e: E, layout: &SubBufLayout, first: u64) {
        let base = self.data.as_ptr() as usize;
        for item in subbufs(e, layout, first, &self.data) {
            let sb = match item.subbuf {
                Ok(sb) => sb,
                Err(_) => {
                    // A sub-buffer with no events closes no window.
                    let _ = self.tracker.push(&SubBufRun::undecodable(item.index));
                    continue;
                }
            };
            let mut run = SubBufRun::read(item.index, sb.missed_events, sb.lost_events);
            let first_item = self.items.len();
            for r in sb.events(e) {
                let Ok(r) = r else {
                    run.tail_lost = true;
                    break;
                };
                match r.kind {
                    RbRecordKind::Data { payload } => {
                        let start = payload.as_ptr() as usize - base;
                        run.event(r.ts);
                        self.items.push_back(Item {
                            ts: r.ts,
                            start,
                            end: start + payload.len(),
                            lost_before: None,
                        });
                    }
                    RbRecordKind::Padding {
                        len,
                        discarded: false,
                    } if len >= RB_EVNT_MIN_SIZE => run.tail_lost = true,
                    _ => {}
                }
            }
            if let Some(l) = self.tracker.push(&run) {
                // The window ends at this sub-buffer's first record.
                if let Some(it) = self.items.get_mut(first_item) {
                    it.lost_before = Some(Lost::of(&l));
                }
            }
        }
    }
}

/// Calls `f` with every record of `src` in the `trace` file's order, for
/// the CPUs `cpus` selects.
pub fn for_each_record<S: SubBufSource + ?Sized>(
    src: &S,
    cpus: impl Fn(u32) -> bool,
    f: impl FnMut(Record<'_>),
) {
    struct Run<'a, S: ?Sized, C, F> {
        src: &'a S,
        cpus: C,
        f: F,
    }
    impl<S: SubBufSource + ?Sized, C: Fn(u32) -> bool, F: FnMut(Record<'_>)> WithEndian
        for Run<'_, S, C, F>
    {
        type Output = ();
        fn run<E: Endian>(mut self, e: E) {
            let layout = *self.src.layout();
            let mut cursors: Vec<Cursor<'_>> = self
                .src
                .cpus()
                .into_iter()
                .filter(|c| (self.cpus)(*c))
                .map(|cpu| Cursor {
                    cpu,
                    chunks: self.src.chunks(cpu).into_iter(),
                    scratch: BlockScratch::new(),
                    data: Vec::new(),
                    items: VecDeque::new(),
                    tracker: LossTracker::new(cpu),
                })
                .collect();
            let mut heads = BinaryHeap::new();
            for (i, c) in cursors.iter_mut().enumerate() {
                if c.refill(self.src, e, &layout) {
                    heads.push(Reverse((c.items[0].ts, c.cpu, i)));
                }
            }
            while let Some(Reverse((_, _, i))) = heads.pop() {
                let c = &mut cursors[i];
                let Some(it) = c.items.pop_front() else {
                    continue;
                };
                (self.f)(Record {
                    cpu: c.cpu,
                    ts: it.ts,
                    payload: &c.data[it.start..it.end],
                    lost_before: it.lost_before,
                });
                if c.refill(self.src, e, &layout) {
                    heads.push(Reverse((c.items[0].ts, c.cpu, i)));
                }
            }
        }
    }
    with_endian(src.endian(), Run { src, cpus, f });
}
