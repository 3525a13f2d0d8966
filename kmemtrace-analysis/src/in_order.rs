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

use kmemtrace_import::log::{BlockScratch, CpuBlockRef};
use kmemtrace_import::walk::{subbufs, with_endian, SubBufSource, WithEndian};
use kmemtrace_kernel::losses::{Loss, LossTracker, SubBufRun, RB_EVNT_MIN_SIZE};
use kmemtrace_kernel::{Endian, RbRecordKind, SubBufLayout};
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
                .chunks_by_cpu()
                .into_iter()
                .filter(|(c, _)| (self.cpus)(*c))
                .map(|(cpu, chunks)| Cursor {
                    cpu,
                    chunks: chunks.into_iter(),
                    scratch: BlockScratch::new(),
                    data: Vec::new(),
                    items: VecDeque::new(),
                    tracker: LossTracker::with_dropped(cpu, self.src.dropped_subbufs(cpu)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_format::block::{BlockHeader, BlockType};
    use kmemtrace_import::log::Problem;
    use kmemtrace_kernel::{LittleEndian, RunTimeEndian};
    use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, EndPadding, Missed, PageSpec};
    use std::collections::BTreeMap;

    /// Chunks, with their bytes (by `block_seq`), counting the passes
    /// over them.
    struct Src {
        layout: SubBufLayout,
        refs: Vec<CpuBlockRef>,
        data: Vec<&'static [u8]>,
        passes: std::sync::atomic::AtomicUsize,
    }

    impl SubBufSource for Src {
        fn endian(&self) -> RunTimeEndian {
            RunTimeEndian::Little
        }
        fn layout(&self) -> &SubBufLayout {
            &self.layout
        }
        fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
            self.passes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            kmemtrace_import::walk::group_by_cpu(&self.refs)
        }
    }

    impl kmemtrace_import::log::ChunkStore for Src {
        fn read_chunk<'s>(
            &self,
            chunk: &CpuBlockRef,
            _: &'s mut BlockScratch,
        ) -> Result<&'s [u8], Problem> {
            Ok(self.data[chunk.block_seq as usize])
        }

        fn subbuf_offset(&self, _: &CpuBlockRef, _: u64) -> Option<u64> {
            None
        }
    }

    fn page(ts: &[u64], missed: Missed, end: EndPadding) -> PageSpec {
        PageSpec {
            records: ts
                .iter()
                .map(|&ts| EncRecord::Event {
                    ts,
                    payload: vec![1; 12],
                })
                .collect(),
            missed,
            end,
            ..Default::default()
        }
    }

    /// A source of `chunks` (CPU, first sub-buffer, pages).
    fn source(chunks: &[(u32, u64, Vec<PageSpec>)]) -> Src {
        let layout = SubBufLayout {
            long_size: 8,
            data_offset: 16,
            subbuf_size: 256,
        };
        let mut src = Src {
            layout,
            refs: Vec::new(),
            data: Vec::new(),
            passes: Default::default(),
        };
        for (seq, (cpu, first, pages)) in chunks.iter().enumerate() {
            let mut bytes = Vec::new();
            for p in pages {
                bytes.extend(encode_subbuf(LittleEndian, &layout, p).unwrap().bytes);
            }
            src.data.push(Box::leak(bytes.into_boxed_slice()));
            src.refs.push(CpuBlockRef {
                offset: 0,
                header: BlockHeader::empty(BlockType::CpuData),
                cpu: *cpu,
                block_seq: seq as u64,
                first_subbuf: *first,
                count: pages.len() as u32,
            });
        }
        src
    }

    /// The records of CPU 0's `chunks` (first sub-buffer, pages), each
    /// with its marker.
    fn walk(chunks: &[(u64, Vec<PageSpec>)]) -> Vec<(u64, Option<Lost>)> {
        let chunks: Vec<_> = chunks.iter().map(|(f, p)| (0, *f, p.clone())).collect();
        let src = source(&chunks);
        let mut got = Vec::new();
        for_each_record(&src, |_| true, |r| got.push((r.ts, r.lost_before)));
        got
    }

    #[test]
    fn markers_are_the_loss_trackers_windows() {
        let chunks: Vec<(u64, Vec<PageSpec>)> = vec![
            (
                0,
                vec![
                    page(&[10, 20], Missed::None, EndPadding::None),
                    page(&[30], Missed::Count(5), EndPadding::None),
                    page(&[40], Missed::Flag, EndPadding::Filler),
                    // A null padding inside the commit hides the records
                    // committed after 50.
                    page(&[50], Missed::None, EndPadding::Null),
                ],
            ),
            (4, vec![page(&[60], Missed::None, EndPadding::None)]),
            // Sub-buffers 5 and 6 are missing.
            (7, vec![page(&[70], Missed::None, EndPadding::None)]),
            // Two flagged with counts, no event between: one window.
            (
                8,
                vec![
                    page(&[], Missed::Count(2), EndPadding::None),
                    page(&[80], Missed::Count(3), EndPadding::None),
                ],
            ),
        ];
        assert_eq!(
            walk(&chunks),
            [
                (10, None),
                (20, None),
                (30, Some(Lost::Count(5))),
                (40, Some(Lost::Unknown)),
                (50, None),
                (60, Some(Lost::Unknown)),
                (70, Some(Lost::Unknown)),
                (80, Some(Lost::Count(5))),
            ]
        );
    }

    #[test]
    fn every_cpus_chunks_come_from_one_pass() {
        // A damaged log naming a new CPU in every chunk.
        let chunks: Vec<_> = (0..300u32)
            .map(|cpu| {
                let ts = u64::from((cpu * 7919) % 300);
                (cpu, 0, vec![page(&[ts], Missed::None, EndPadding::None)])
            })
            .collect();
        let src = source(&chunks);
        let mut got = Vec::new();
        for_each_record(&src, |c| c % 2 == 0, |r| got.push((r.ts, r.cpu)));
        assert_eq!(src.passes.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(got.len(), 150);
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert!(got.iter().all(|&(_, cpu)| cpu % 2 == 0));
    }

    #[test]
    fn a_lost_first_block_is_a_loss_before_the_first_record() {
        let p = |ts| page(&[ts], Missed::None, EndPadding::None);
        assert_eq!(
            walk(&[(2, vec![p(10)]), (3, vec![p(20)])]),
            [(10, Some(Lost::Unknown)), (20, None)]
        );
        assert_eq!(walk(&[(0, vec![p(10)])]), [(10, None)]);
    }
}
