//! The one walker over sub-buffers: source -> chunk -> sub-buffer ->
//! record, as libtraceevent's kbuffer is the one reader of ftrace pages.
//! The checker, the report's decoders and [`crate::log::Log::visit_cpu`]
//! all go through it.
//!
//! Byte order is a run-time fact of the recorded kernel; the hot loops are
//! monomorphised for it once, through [`with_endian`], not tested per read.

use crate::log::{BlockScratch, ChunkStore, CpuBlockRef, Problem};
use kmemtrace_kernel::{
    parse_subbuf, BigEndian, Endian, LittleEndian, RunTimeEndian, SubBufError, SubBufLayout,
    SubBuffer,
};
use std::collections::BTreeMap;

/// Where a CPU's sub-buffers come from: a [`crate::log::Log`], whether it
/// reads a kmemtrace log or another input in place (a trace-cmd trace.dat,
/// a capture-script dump). A chunk is a run of consecutive sub-buffers of
/// one CPU, read back as one piece (a CPU_DATA block in a log, a run of a
/// trace.dat's CPU data) through the [`ChunkStore`] a source also is.
pub trait SubBufSource: ChunkStore {
    /// The recorded kernel's byte order.
    fn endian(&self) -> RunTimeEndian;
    /// The recorded kernel's sub-buffer layout.
    fn layout(&self) -> &SubBufLayout;
    /// Every CPU with data, ascending, with its chunks in stream order,
    /// from one pass over the chunks: a damaged log may name a new CPU in
    /// every chunk, so a pass per CPU would cost CPUs x chunks.
    fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>>;
    /// One CPU's chunks in stream order (for one CPU; every CPU's come
    /// from [`SubBufSource::chunks_by_cpu`]).
    fn chunks_of(&self, cpu: u32) -> Vec<&CpuBlockRef> {
        self.chunks_by_cpu().remove(&cpu).unwrap_or_default()
    }
    /// A CPU's sub-buffer index ranges, `[from, to)`, that rotation
    /// removed ([`crate::capture`]): none but in a rotated capture.
    fn dropped_subbufs(&self, _cpu: u32) -> Vec<(u64, u64)> {
        Vec::new()
    }
}

/// `chunks` by CPU, ascending, each CPU's in stream order (block sequence,
/// then file offset): one pass, whatever the number of CPUs.
pub fn group_by_cpu<'a>(
    chunks: impl IntoIterator<Item = &'a CpuBlockRef>,
) -> BTreeMap<u32, Vec<&'a CpuBlockRef>> {
    let mut by_cpu: BTreeMap<u32, Vec<&CpuBlockRef>> = BTreeMap::new();
    for c in chunks {
        by_cpu.entry(c.cpu).or_default().push(c);
    }
    for chunks in by_cpu.values_mut() {
        chunks.sort_by_key(|c| (c.block_seq, c.offset));
    }
    by_cpu
}

/// One sub-buffer of a chunk.
#[derive(Debug)]
pub struct SubBufItem<'a> {
    /// Index in the CPU's stream (the chunk's first + `in_chunk`).
    pub index: u64,
    /// Position in its chunk.
    pub in_chunk: usize,
    /// The decoded header, or why it does not decode.
    pub subbuf: Result<SubBuffer<'a>, SubBufError>,
    /// The raw bytes.
    pub raw: &'a [u8],
}

/// The sub-buffers of a chunk's bytes, decoded with byte order `e`;
/// `first` is the index of the first one in its CPU's stream.
pub fn subbufs<'a, E: Endian>(
    e: E,
    layout: &'a SubBufLayout,
    first: u64,
    data: &'a [u8],
) -> impl Iterator<Item = SubBufItem<'a>> + 'a {
    data.chunks_exact(layout.subbuf_size.max(1))
        .enumerate()
        .map(move |(i, raw)| SubBufItem {
            index: first + i as u64,
            in_chunk: i,
            subbuf: parse_subbuf(e, layout, raw),
            raw,
        })
}

/// Calls `f` for every sub-buffer of `cpu`, in stream order, decoded with
/// byte order `e`. Chunks that cannot be read back go to `on_error`. (For
/// every CPU, [`walk_all`] takes the chunks apart once.)
pub fn walk_cpu<S: SubBufSource + ?Sized, E: Endian>(
    src: &S,
    e: E,
    cpu: u32,
    f: impl FnMut(&CpuBlockRef, SubBufItem<'_>),
    on_error: impl FnMut(Problem),
) {
    walk_chunks(src, e, &src.chunks_of(cpu), f, on_error);
}

/// Calls `f` for every sub-buffer of every CPU, CPU by CPU in ascending
/// order, each CPU's in stream order, decoded with byte order `e`. Chunks
/// that cannot be read back go to `on_error`.
pub fn walk_all<S: SubBufSource + ?Sized, E: Endian>(
    src: &S,
    e: E,
    mut f: impl FnMut(&CpuBlockRef, SubBufItem<'_>),
    mut on_error: impl FnMut(Problem),
) {
    for chunks in src.chunks_by_cpu().values() {
        walk_chunks(src, e, chunks, &mut f, &mut on_error);
    }
}

fn walk_chunks<S: SubBufSource + ?Sized, E: Endian>(
    src: &S,
    e: E,
    chunks: &[&CpuBlockRef],
    mut f: impl FnMut(&CpuBlockRef, SubBufItem<'_>),
    mut on_error: impl FnMut(Problem),
) {
    let mut scratch = BlockScratch::new();
    let layout = *src.layout();
    for &chunk in chunks {
        match src.read_chunk(chunk, &mut scratch) {
            Ok(data) => {
                for item in subbufs(e, &layout, chunk.first_subbuf, data) {
                    f(chunk, item);
                }
            }
            Err(p) => on_error(p),
        }
    }
}

/// Code to run with the byte order as a type: [`with_endian`] calls it
/// once with [`LittleEndian`] or [`BigEndian`].
pub trait WithEndian {
    type Output;
    fn run<E: Endian>(self, e: E) -> Self::Output;
}

/// Runs `w` monomorphised for the byte order `e`.
pub fn with_endian<W: WithEndian>(e: RunTimeEndian, w: W) -> W::Output {
    match e {
        RunTimeEndian::Little => w.run(LittleEndian),
        RunTimeEndian::Big => w.run(BigEndian),
    }
}

/// The time stamp of the first data event of each CPU, the earliest of
/// them: read from the CPUs' first chunks only.
pub fn first_event_ts<S: SubBufSource + ?Sized>(src: &S) -> Option<u64> {
    edge_event_ts(src, false)
}

/// The latest data event's time stamp over all CPUs (each CPU's last
/// chunk that holds one), `None` for a log without events.
pub fn last_event_ts<S: SubBufSource + ?Sized>(src: &S) -> Option<u64> {
    edge_event_ts(src, true)
}

/// The first (or, `last`, the latest) data event's time stamp over all
/// CPUs, reading from each CPU's first (or last) chunk that has events.
fn edge_event_ts<S: SubBufSource + ?Sized>(src: &S, last: bool) -> Option<u64> {
    struct Edge<'a, S: ?Sized>(&'a S, bool);
    impl<S: SubBufSource + ?Sized> WithEndian for Edge<'_, S> {
        type Output = Option<u64>;
        fn run<E: Endian>(self, e: E) -> Option<u64> {
            let (src, last) = (self.0, self.1);
            let layout = *src.layout();
            let mut scratch = BlockScratch::new();
            let mut best: Option<u64> = None;
            let pick = |b: Option<u64>, ts: u64| {
                Some(b.map_or(ts, |b| if last { b.max(ts) } else { b.min(ts) }))
            };
            for (_, mut chunks) in src.chunks_by_cpu() {
                if last {
                    chunks.reverse();
                }
                for chunk in chunks {
                    let Ok(data) = src.read_chunk(chunk, &mut scratch) else {
                        continue;
                    };
                    let mut found = None;
                    for item in subbufs(e, &layout, chunk.first_subbuf, data) {
                        let Ok(sb) = item.subbuf else { continue };
                        for (_, ts, _) in sb.data_events(e).map_while(Result::ok) {
                            found = pick(found, ts);
                            if !last {
                                break;
                            }
                        }
                        if found.is_some() && !last {
                            break;
                        }
                    }
                    if let Some(ts) = found {
                        best = pick(best, ts);
                        break;
                    }
                }
            }
            best
        }
    }
    with_endian(src.endian(), Edge(src, last))
}

/// A run of consecutive chunks of one CPU, itself a source: the unit of
/// work where a log is read on several threads. Each record of the CPU is
/// in exactly one run, and each run's records come in the CPU's order.
pub struct ChunkRun<'a, S: ?Sized> {
    pub src: &'a S,
    pub cpu: u32,
    pub chunks: Vec<&'a CpuBlockRef>,
    /// The CPU's chunk after the run, if any: records that belong with the
    /// run's last ones (a stack taken with an event) can be there.
    pub next: Option<&'a CpuBlockRef>,
}

/// `src` cut into runs of at least `min_bytes` of sub-buffers each (a CPU's
/// last run may be shorter), CPU by CPU in ascending order: cut where the
/// chunks are, so the same log always gives the same runs.
pub fn chunk_runs<S: SubBufSource + ?Sized>(src: &S, min_bytes: u64) -> Vec<ChunkRun<'_, S>> {
    let subbuf = src.layout().subbuf_size as u64;
    let mut runs = Vec::new();
    for (cpu, chunks) in src.chunks_by_cpu() {
        let mut start = 0;
        let mut bytes = 0;
        for (i, chunk) in chunks.iter().enumerate() {
            bytes += u64::from(chunk.count) * subbuf;
            if bytes >= min_bytes || i + 1 == chunks.len() {
                runs.push(ChunkRun {
                    src,
                    cpu,
                    chunks: chunks[start..=i].to_vec(),
                    next: chunks.get(i + 1).copied(),
                });
                start = i + 1;
                bytes = 0;
            }
        }
    }
    runs
}

impl<S: SubBufSource + ?Sized> SubBufSource for ChunkRun<'_, S> {
    fn endian(&self) -> RunTimeEndian {
        self.src.endian()
    }
    fn layout(&self) -> &SubBufLayout {
        self.src.layout()
    }
    fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
        BTreeMap::from([(self.cpu, self.chunks.clone())])
    }
}

impl<S: SubBufSource + ?Sized> ChunkStore for ChunkRun<'_, S> {
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        self.src.read_chunk(chunk, scratch)
    }

    fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64> {
        self.src.subbuf_offset(chunk, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_buffers_are_numbered_from_the_chunks_first() {
        let layout = SubBufLayout {
            long_size: 8,
            data_offset: 16,
            subbuf_size: 64,
        };
        // Three empty sub-buffers and a partial one (not a sub-buffer).
        let mut data = vec![0u8; 3 * 64 + 10];
        // The second one claims more data than it has room for.
        data[64 + 8] = 0xff;
        let items: Vec<_> = subbufs(LittleEndian, &layout, 7, &data).collect();
        assert_eq!(items.len(), 3);
        let idx: Vec<(u64, usize)> = items.iter().map(|i| (i.index, i.in_chunk)).collect();
        assert_eq!(idx, [(7, 0), (8, 1), (9, 2)]);
        assert!(items[0].subbuf.is_ok() && items[2].subbuf.is_ok());
        assert!(items[1].subbuf.is_err());
        assert_eq!(items[1].raw.as_ptr(), data[64..].as_ptr());
    }

    /// Chunks of the given sub-buffer counts, counting the passes over
    /// them.
    struct Chunks {
        layout: SubBufLayout,
        refs: Vec<CpuBlockRef>,
        passes: std::sync::atomic::AtomicUsize,
    }

    impl SubBufSource for Chunks {
        fn endian(&self) -> RunTimeEndian {
            RunTimeEndian::Little
        }
        fn layout(&self) -> &SubBufLayout {
            &self.layout
        }
        fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
            self.passes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            group_by_cpu(&self.refs)
        }
    }

    impl ChunkStore for Chunks {
        fn read_chunk<'s>(
            &self,
            _: &CpuBlockRef,
            _: &'s mut BlockScratch,
        ) -> Result<&'s [u8], Problem> {
            // One empty sub-buffer.
            Ok(&[0; 100])
        }

        fn subbuf_offset(&self, _: &CpuBlockRef, _: u64) -> Option<u64> {
            None
        }
    }

    fn chunk(cpu: u32, block_seq: u64, count: u32) -> CpuBlockRef {
        use kmemtrace_format::block::{BlockHeader, BlockType};
        CpuBlockRef {
            offset: block_seq * 100,
            header: BlockHeader::empty(BlockType::CpuData),
            cpu,
            block_seq,
            first_subbuf: block_seq * 10,
            count,
        }
    }

    fn layout() -> SubBufLayout {
        SubBufLayout {
            long_size: 8,
            data_offset: 16,
            subbuf_size: 100,
        }
    }

    #[test]
    fn chunk_runs_cover_each_cpus_chunks_once_in_order() {
        let src = Chunks {
            layout: layout(),
            passes: Default::default(),
            refs: vec![
                chunk(0, 0, 3),
                chunk(3, 1, 1),
                chunk(0, 2, 2),
                chunk(0, 3, 4),
                chunk(3, 4, 9),
                chunk(0, 5, 1),
            ],
        };
        // At least 500 bytes (5 sub-buffers) a run.
        let runs = chunk_runs(&src, 500);
        let got: Vec<(u32, Vec<u64>)> = runs
            .iter()
            .map(|r| (r.cpu, r.chunks.iter().map(|c| c.block_seq).collect()))
            .collect();
        assert_eq!(
            got,
            [(0, vec![0, 2]), (0, vec![3, 5]), (3, vec![1, 4])],
            "3+2, then 4+1, then CPU 3's 1+9"
        );
        let next: Vec<Option<u64>> = runs.iter().map(|r| r.next.map(|c| c.block_seq)).collect();
        assert_eq!(next, [Some(3), None, None]);
        // A run is a source of its own CPU's chunks only.
        let of_run = runs[1].chunks_by_cpu();
        assert_eq!(of_run.keys().copied().collect::<Vec<_>>(), [0]);
        assert_eq!(of_run[&0].len(), 2);
    }

    #[test]
    fn walks_over_every_cpu_take_the_chunks_apart_once() {
        // A damaged log naming a new CPU in every chunk.
        let src = Chunks {
            layout: layout(),
            passes: Default::default(),
            refs: (0..500).map(|i| chunk(999 - i, u64::from(i), 1)).collect(),
        };
        assert_eq!(chunk_runs(&src, 1).len(), 500);
        assert_eq!(src.passes.swap(0, std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(first_event_ts(&src), None);
        assert_eq!(src.passes.swap(0, std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(last_event_ts(&src), None);
        assert_eq!(src.passes.swap(0, std::sync::atomic::Ordering::Relaxed), 1);
        let mut cpus = Vec::new();
        walk_all(&src, LittleEndian, |c, _| cpus.push(c.cpu), |_| {});
        assert_eq!(src.passes.swap(0, std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(cpus, (500..1000).collect::<Vec<u32>>());
        walk_cpu(&src, LittleEndian, 600, |_, _| {}, |_| {});
        assert_eq!(src.passes.swap(0, std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn with_endian_runs_the_byte_order_asked_for() {
        struct Read(&'static [u8]);
        impl WithEndian for Read {
            type Output = Option<u32>;
            fn run<E: Endian>(self, e: E) -> Option<u32> {
                e.read_u32(self.0, 0)
            }
        }
        let b: &'static [u8] = &[1, 0, 0, 0];
        assert_eq!(with_endian(RunTimeEndian::Little, Read(b)), Some(1));
        assert_eq!(with_endian(RunTimeEndian::Big, Read(b)), Some(1 << 24));
    }
}
