//! Every record of a log, of every event, in the order the kernel's `trace`
//! file lists them: by time stamp across CPUs, the lower CPU first on a tie
//! (`__find_next_entry()` keeps the first CPU it finds at the lowest time),
//! each CPU's own records in their order. Where a CPU lost records before
//! one, it comes with the loss, as `trace_pipe` marks it.
//!
//! Unlike the analysis stream ([`crate::stream`]), which decodes kmem events
//! into typed events in parallel shards, this walks raw records on one
//! thread holding one chunk per CPU: it is for listing events, where the
//! printing costs more than the reading.

use kmemtrace_format::endian::Endian;
use kmemtrace_format::log::{BlockScratch, CpuBlockRef};
use kmemtrace_format::subbuf::{parse_subbuf, RbRecordKind, SubBufLayout};
use kmemtrace_format::walk::{with_endian, SubBufSource, WithEndian};
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
    fn add(a: Option<Lost>, b: Lost) -> Lost {
        match (a, b) {
            (None, b) => b,
            (Some(Lost::Count(x)), Lost::Count(y)) => Lost::Count(x.saturating_add(y)),
            _ => Lost::Unknown,
        }
    }
}

/// One record handed out in order.
#[derive(Debug)]
pub struct Record<'a> {
    pub cpu: u32,
    pub ts: u64,
    /// From `common_type` on.
    pub payload: &'a [u8],
    /// Records this CPU lost just before this one.
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
    /// A loss seen after the last record queued, for the next one.
    pending: Option<Lost>,
    /// The index the next sub-buffer should have (`None` before the first).
    next_subbuf: Option<u64>,
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
                    self.pending = Some(Lost::add(self.pending, Lost::Unknown));
                    self.next_subbuf = Some(chunk.first_subbuf + u64::from(chunk.count));
                    continue;
                }
            }
            if self.next_subbuf.is_some_and(|n| chunk.first_subbuf > n) {
                self.pending = Some(Lost::add(self.pending, Lost::Unknown));
            }
            self.next_subbuf = Some(chunk.first_subbuf + u64::from(chunk.count));
            self.queue_chunk(e, layout);
        }
        true
    }

    fn queue_chunk<E: Endian>(&mut self, e: E, layout: &SubBufLayout) {
        let size = layout.subbuf_size.max(1);
        for (n, raw) in self.data.chunks_exact(size).enumerate() {
            let base = n * size;
            let sb = match parse_subbuf(e, layout, raw) {
                Ok(sb) => sb,
                Err(_) => {
                    self.pending = Some(Lost::add(self.pending, Lost::Unknown));
                    continue;
                }
            };
            if sb.missed_events {
                let l = sb.lost_events.map_or(Lost::Unknown, Lost::Count);
                self.pending = Some(Lost::add(self.pending, l));
            }
            for r in sb.events(e) {
                let Ok(r) = r else {
                    // The rest of a damaged sub-buffer is lost.
                    self.pending = Some(Lost::add(self.pending, Lost::Unknown));
                    break;
                };
                if let RbRecordKind::Data { payload } = r.kind {
                    let start = base + (payload.as_ptr() as usize - raw.as_ptr() as usize);
                    self.items.push_back(Item {
                        ts: r.ts,
                        start,
                        end: start + payload.len(),
                        lost_before: self.pending.take(),
                    });
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
                    pending: None,
                    next_subbuf: None,
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
