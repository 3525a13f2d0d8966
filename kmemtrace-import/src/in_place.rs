//! A trace-cmd trace.dat opened as a log in place: its metadata becomes
//! the records an import would write (the same [`Plan`]), assembled by a
//! [`LogBuilder`] without encoding them; its CPU data stays where it is in
//! the trace.dat and is read from there when a walker asks for a chunk
//! ([`TraceDatChunks`]), so no temporary file is written and memory does
//! not grow with the file.
//!
//! The chunks are the import's: each CPU's stream cut into runs of
//! [`BLOCK_BYTES`] of whole sub-buffers, so that the log has the blocks,
//! totals and figures the imported log has; only the offsets differ, and
//! they are the trace.dat's own (a chunk's first byte, or the compressed
//! piece holding it; a statistics record's CPUSTAT option).

use crate::dump::Dump;
use crate::tracedat::{decompress_into, Algo, CpuData};
use crate::{CpuTally, ImportError, Plan, RecordSink, BLOCK_BYTES, END_REASON};
use kmemtrace_format::block::{BlockHeader, BlockType, Compression, VERSION_MAJOR};
use kmemtrace_format::log::{
    BlockScratch, ChunkStore, CpuBlockRef, Log, LogBuilder, Problem, ProblemKind,
};
use kmemtrace_format::records::CPU_DATA_HEADER_LEN;
use kmemtrace_format::records::{CpuTotal, EndRecord, Meta, NoteRecord, Record, StatsRecord};
use kmemtrace_format::subbuf::SubBufLayout;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A run of a CPU's stream stored in one place of the file: as is, or
/// compressed (a v7 chunk).
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Where it starts in the CPU's stream of sub-buffer bytes.
    stream_at: u64,
    /// Where its stored bytes are in the file.
    file_at: u64,
    /// Bytes stored.
    stored: u64,
    /// Bytes of the stream it holds.
    len: u64,
    algo: Option<Algo>,
}

/// Where each CPU's sub-buffers are in a trace.dat: the [`ChunkStore`] of
/// a log opened from one.
pub(crate) struct TraceDatChunks {
    file: File,
    subbuf_size: u64,
    /// Each CPU's pieces, in stream order.
    cpus: BTreeMap<u32, Vec<Piece>>,
}

impl TraceDatChunks {
    /// The chunks of `d`, read from `path`, and where a CPU's data runs
    /// past the end of the file (CPU, where it would end).
    fn new(path: &Path, d: &Dump, layout: &SubBufLayout) -> io::Result<(Self, Vec<(u32, u64)>)> {
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let mut cpus = BTreeMap::new();
        let mut cut_short = Vec::new();
        for (cpu, data) in d.tracedat_cpus() {
            let mut pieces = match data {
                CpuData::Plain { offset, len } => vec![Piece {
                    stream_at: 0,
                    file_at: *offset,
                    stored: *len,
                    len: *len,
                    algo: None,
                }],
                CpuData::Chunked { algo, chunks } => {
                    let mut stream_at = 0;
                    chunks
                        .iter()
                        .map(|c| {
                            let p = Piece {
                                stream_at,
                                file_at: c.offset,
                                stored: u64::from(c.csize),
                                len: u64::from(c.usize),
                                algo: Some(*algo),
                            };
                            stream_at += p.len;
                            p
                        })
                        .collect()
                }
            };
            if let Some(end) = cut_to(&mut pieces, file_len) {
                cut_short.push((cpu, end));
            }
            cpus.insert(cpu, pieces);
        }
        let chunks = TraceDatChunks {
            file,
            subbuf_size: layout.subbuf_size as u64,
            cpus,
        };
        Ok((chunks, cut_short))
    }

    /// A CPU's pieces overlapping its stream's bytes `[start, end)`.
    fn pieces(&self, cpu: u32, start: u64, end: u64) -> impl Iterator<Item = &Piece> {
        let all = self.cpus.get(&cpu).map_or(&[][..], Vec::as_slice);
        let first = all.partition_point(|p| p.stream_at + p.len <= start);
        all[first..].iter().take_while(move |p| p.stream_at < end)
    }

    /// A chunk's bytes of the CPU's stream.
    fn range(&self, chunk: &CpuBlockRef) -> (u64, u64) {
        let start = chunk.first_subbuf * self.subbuf_size;
        (start, start + u64::from(chunk.count) * self.subbuf_size)
    }

    /// Each CPU's chunks, cut as the import cuts its CPU_DATA blocks.
    fn chunk_refs(&self) -> Vec<CpuBlockRef> {
        let sb = self.subbuf_size.max(1);
        let block = (BLOCK_BYTES as u64 / sb).max(1) * sb;
        let mut refs = Vec::new();
        for (&cpu, pieces) in &self.cpus {
            let total: u64 = pieces.iter().map(|p| p.len).sum();
            let whole = total / sb * sb;
            let mut seq = 0;
            while seq * block < whole {
                let start = seq * block;
                let bytes = block.min(whole - start);
                let (mut stored, mut at, mut plain) = (0, None, true);
                for p in self.pieces(cpu, start, start + bytes) {
                    plain &= p.algo.is_none();
                    stored += if p.algo.is_none() { 0 } else { p.stored };
                    at.get_or_insert(match p.algo {
                        None => p.file_at + (start - p.stream_at),
                        Some(_) => p.file_at,
                    });
                }
                let raw_len = (CPU_DATA_HEADER_LEN as u64 + bytes) as u32;
                refs.push(CpuBlockRef {
                    offset: at.unwrap_or(0),
                    header: BlockHeader {
                        block_type: BlockType::CpuData,
                        flags: 0,
                        stored_len: if plain { raw_len } else { stored as u32 },
                        raw_len,
                        crc: 0,
                    },
                    cpu,
                    block_seq: seq,
                    first_subbuf: start / sb,
                    count: (bytes / sb) as u32,
                });
                seq += 1;
            }
        }
        refs
    }
}

impl ChunkStore for TraceDatChunks {
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        let (stored, out) = scratch.buffers();
        out.clear();
        let (start, end) = self.range(chunk);
        for p in self.pieces(chunk.cpu, start, end) {
            let err = |what: String| Problem {
                offset: p.file_at,
                kind: ProblemKind::BadBlock,
                what: format!("CPU {} data: {what}", chunk.cpu),
            };
            let lo = (start.max(p.stream_at) - p.stream_at) as usize;
            let hi = (end.min(p.stream_at + p.len) - p.stream_at) as usize;
            let base = out.len();
            match p.algo {
                None => {
                    out.resize(base + hi - lo, 0);
                    self.file
                        .read_exact_at(&mut out[base..], p.file_at + lo as u64)
                        .map_err(|e| err(format!("reading it: {e}")))?;
                }
                Some(algo) => {
                    stored.resize(p.stored as usize, 0);
                    self.file
                        .read_exact_at(stored, p.file_at)
                        .map_err(|e| err(format!("reading a compressed chunk: {e}")))?;
                    out.resize(base + p.len as usize, 0);
                    decompress_into(algo, stored, &mut out[base..])
                        .map_err(|e| err(format!("a {algo:?} chunk: {e}")))?;
                    out.copy_within(base + lo..base + hi, base);
                    out.truncate(base + hi - lo);
                }
            }
        }
        if out.len() as u64 != end - start {
            return Err(Problem {
                offset: chunk.offset,
                kind: ProblemKind::BadBlock,
                what: format!("CPU {} data ends before this chunk does", chunk.cpu),
            });
        }
        Ok(&out[..])
    }

    fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64> {
        let at = index * self.subbuf_size;
        let p = self.pieces(chunk.cpu, at, at + 1).next()?;
        p.algo.is_none().then(|| p.file_at + (at - p.stream_at))
    }
}

/// Keeps what of `pieces` lies within a file of `len` bytes: a plain piece
/// up to the end, a compressed one whole or not at all. Returns where the
/// pieces would have ended, if they run past it.
fn cut_to(pieces: &mut Vec<Piece>, len: u64) -> Option<u64> {
    let end = pieces.iter().map(|p| p.file_at + p.stored).max()?;
    if end <= len {
        return None;
    }
    pieces.retain_mut(|p| match p.algo {
        None if p.file_at < len => {
            p.stored = p.stored.min(len - p.file_at);
            p.len = p.stored;
            true
        }
        None => false,
        Some(_) => p.file_at + p.stored <= len,
    });
    // A compressed piece's place in the stream is its predecessors' sum:
    // none but the last ones go, so the places stand.
    Some(end)
}

/// The records of an import, assembled into a log in place.
struct InPlace(LogBuilder);

impl RecordSink for InPlace {
    fn meta(&mut self, at: u64, m: &Meta) -> io::Result<()> {
        self.0.record(at, Record::Meta(m.clone()));
        Ok(())
    }
    fn stats(&mut self, at: u64, s: &StatsRecord) -> io::Result<()> {
        self.0.record(at, Record::Stats(s.clone()));
        Ok(())
    }
    fn note(&mut self, n: &NoteRecord) -> io::Result<()> {
        self.0.record(0, Record::Note(n.clone()));
        Ok(())
    }
}

/// Opens the trace.dat `path` as a log, read in place; `command_line` is
/// what its arch tag says opened it.
pub(crate) fn open_tracedat(path: &Path, command_line: String) -> Result<Log, ImportError> {
    let d = Dump::open(path)?;
    let mut plan = Plan::new(&d, command_line)?;
    let (store, cut_short) = TraceDatChunks::new(path, &d, &plan.layout)?;
    let len = std::fs::metadata(path)?.len();
    let mut b = InPlace(LogBuilder::new());
    for (cpu, end) in cut_short {
        b.0.problem(Problem {
            offset: len,
            kind: ProblemKind::Data,
            what: format!(
                "the trace.dat is cut short: CPU {cpu}'s data runs to offset {end}, the file ends at {len}; what is missing of it is lost"
            ),
        });
    }
    // As an imported log has them: ARCH first, its copy before the CPU
    // data, the file header's place for both.
    b.0.record(0, Record::Arch(Box::new(plan.arch.clone())));
    plan.write_head(&mut b)?;
    b.0.record(0, Record::ArchCopy(Box::new(plan.arch.clone())));
    let (tallies, totals) = index_cpu_data(&store, &mut b.0, &plan.layout, plan.bo.order);
    plan.write_tail(&mut b, &tallies)?;
    let end = EndRecord {
        wall_ns: plan.end_wall_ns,
        reason: END_REASON.into(),
        blocks: b.0.blocks(),
        cpus: totals.into_values().collect(),
        exit_status: plan.exit_status(),
    };
    // The END is where the file ends: the trace.dat has no such record.
    b.0.record(len, Record::End(end));
    let version = (VERSION_MAJOR, Compression::None.minor_version());
    b.0.finish(path.display().to_string(), version, len, Box::new(store))
        .map_err(|e| ImportError::Dump(e.to_string()))
}

/// Indexes every CPU's chunks into `b`, reading each once to count what
/// its sub-buffers hold (as the import counts what it writes); a chunk
/// that cannot be read counts as sub-buffers that do not decode, and is
/// found again, with its offset, by whatever reads the log.
fn index_cpu_data(
    store: &TraceDatChunks,
    b: &mut LogBuilder,
    layout: &SubBufLayout,
    order: kmemtrace_format::RunTimeEndian,
) -> (BTreeMap<u32, CpuTally>, BTreeMap<u32, CpuTotal>) {
    let mut tallies: BTreeMap<u32, CpuTally> = BTreeMap::new();
    let mut totals: BTreeMap<u32, CpuTotal> = BTreeMap::new();
    let mut scratch = BlockScratch::new();
    for r in store.chunk_refs() {
        let t = tallies.entry(r.cpu).or_default();
        match store.read_chunk(&r, &mut scratch) {
            Ok(pages) => t.count(order, layout, pages),
            Err(p) => {
                for i in 0..r.count {
                    t.subbufs += 1;
                    t.bad(format!(
                        "sub-buffer {}: {}",
                        r.first_subbuf + u64::from(i),
                        p
                    ));
                }
            }
        }
        let total = totals.entry(r.cpu).or_insert(CpuTotal {
            cpu: r.cpu,
            ..Default::default()
        });
        total.blocks += 1;
        total.subbufs += u64::from(r.count);
        total.bytes += u64::from(r.count) * layout.subbuf_size as u64;
        b.chunk(r);
    }
    (tallies, totals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `pages` pages of 4096 bytes, each page's bytes telling it apart.
    fn stream(pages: usize) -> Vec<u8> {
        (0..pages * 4096)
            .map(|i| ((i / 4096) as u8) ^ (i as u8).wrapping_mul(31))
            .collect()
    }

    /// Every chunk read back is its bytes of the stream.
    fn reads_back(store: &TraceDatChunks, cpu: u32, data: &[u8]) -> Vec<CpuBlockRef> {
        let refs: Vec<CpuBlockRef> = store
            .chunk_refs()
            .into_iter()
            .filter(|r| r.cpu == cpu)
            .collect();
        let mut scratch = BlockScratch::new();
        let mut all = Vec::new();
        for r in &refs {
            let (start, end) = store.range(r);
            let got = store.read_chunk(r, &mut scratch).unwrap();
            assert!(got == &data[start as usize..end as usize], "{r:?}");
            all.extend_from_slice(got);
        }
        assert!(all == data[..data.len() / 4096 * 4096]);
        refs
    }

    #[test]
    fn chunks_cut_across_compressed_and_plain_pieces_read_back_the_stream() {
        // CPU 0: 600 pages in zstd chunks of 10 pages (1 MiB chunks end
        // inside them); CPU 1: 300 pages and a partial one, as they are.
        let (zstd_data, plain_data) = (stream(600), stream(301)[..300 * 4096 + 100].to_vec());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let mut pieces = Vec::new();
        let mut at = 0u64;
        for (i, part) in zstd_data.chunks(10 * 4096).enumerate() {
            let c = zstd::bulk::compress(part, 1).unwrap();
            file.write_all(&c).unwrap();
            pieces.push(Piece {
                stream_at: (i * 10 * 4096) as u64,
                file_at: at,
                stored: c.len() as u64,
                len: part.len() as u64,
                algo: Some(Algo::Zstd),
            });
            at += c.len() as u64;
        }
        file.write_all(&plain_data).unwrap();
        let plain = Piece {
            stream_at: 0,
            file_at: at,
            stored: plain_data.len() as u64,
            len: plain_data.len() as u64,
            algo: None,
        };
        let store = TraceDatChunks {
            file: File::open(file.path()).unwrap(),
            subbuf_size: 4096,
            cpus: BTreeMap::from([(0, pieces), (1, vec![plain])]),
        };
        let refs = reads_back(&store, 0, &zstd_data);
        let shape: Vec<(u64, u64, u32)> = refs
            .iter()
            .map(|r| (r.block_seq, r.first_subbuf, r.count))
            .collect();
        assert_eq!(shape, [(0, 0, 256), (1, 256, 256), (2, 512, 88)]);
        assert_eq!(store.subbuf_offset(&refs[1], 300), None, "compressed");
        let refs = reads_back(&store, 1, &plain_data);
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[1].offset, at + 256 * 4096);
        assert_eq!(store.subbuf_offset(&refs[1], 257), Some(at + 257 * 4096));
        assert_eq!(refs[1].header.stored_len, refs[1].header.raw_len);
    }

    #[test]
    fn pieces_past_the_end_of_the_file_are_cut_there() {
        let piece = |file_at: u64, stored: u64, algo: Option<Algo>| Piece {
            stream_at: 0,
            file_at,
            stored,
            len: stored * 3,
            algo,
        };
        let mut plain = vec![piece(100, 50, None)];
        assert_eq!(cut_to(&mut plain, 150), None);
        assert_eq!(cut_to(&mut plain, 120), Some(150));
        assert_eq!((plain[0].stored, plain[0].len), (20, 20));
        let z = Some(Algo::Zstd);
        let mut chunked = vec![piece(0, 10, z), piece(10, 10, z), piece(20, 10, z)];
        assert_eq!(cut_to(&mut chunked, 25), Some(30));
        assert_eq!(chunked.len(), 2);
    }
}
