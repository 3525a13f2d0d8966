//! A trace-cmd trace.dat or a kmemtrace-capture.sh dump opened as a log in
//! place: its metadata becomes the records an import would write (the
//! same [`Plan`]), assembled by a [`LogBuilder`]; its CPU data stays where
//! it is and is read from there when a walker asks for a chunk
//! ([`InputChunks`]), so no temporary file is written.
//!
//! The chunks are the import's: each CPU's stream cut into runs of
//! whole sub-buffers ([`cpu_data_block_bytes`]), so that the log has the blocks,
//! totals and figures the imported log has. Their offsets:
//! - a trace.dat's are its own (a chunk's first byte, or the compressed
//!   piece holding it; a statistics record's CPUSTAT option; the END at the
//!   file's end): it is one file, and a tool's offsets can be looked up in
//!   it;
//! - a dump's are those of the log its import writes (counted by a writer
//!   that writes nowhere), as they were when it was read through that log:
//!   a dump is a tree of files, with no offsets of its own to give.
//!
//! A directory's `trace_pipe_raw` files are read in place; a tar's (plain
//! or gzip'd) are read into memory once, since a gzip stream cannot be
//! read at an offset and a dump's ring buffers are of a size fixed when it
//! was captured (one code path for both kinds of tar). A trace.dat or a
//! directory is never held in memory: a chunk is read when it is asked for.

use crate::dump::{Container, Dump};
use crate::log::{
    BlockScratch, ChunkStore, CpuBlockRef, Log, LogBuilder, Origin, Problem, ProblemKind,
};
use crate::tracedat::{decompress_into, Algo, CpuData};
use crate::{CpuTally, ImportError, Plan, RecordSink, END_REASON};
use kmemtrace_format::block::{
    BlockHeader, BlockType, Compression, BLOCK_HEADER_LEN, FILE_HEADER_LEN, VERSION_MAJOR,
};
use kmemtrace_format::records::{cpu_data_block_bytes, CPU_DATA_HEADER_LEN};
use kmemtrace_format::records::{CpuTotal, EndRecord, Meta, NoteRecord, Record, StatsRecord};
use kmemtrace_format::writer::LogWriter;
use kmemtrace_kernel::subbuf::SubBufLayout;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a piece's stored bytes are.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// In [`InputChunks::files`], at an offset.
    File(usize),
    /// In [`InputChunks::memory`], at an offset.
    Memory(usize),
}

/// A run of a CPU's stream stored in one place: as is, or compressed (a
/// trace.dat v7 chunk).
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Where it starts in the CPU's stream of sub-buffer bytes.
    stream_at: u64,
    place: Place,
    /// Where its stored bytes start in their place.
    at: u64,
    /// Bytes stored.
    stored: u64,
    /// Bytes of the stream it holds.
    len: u64,
    algo: Option<Algo>,
}

impl Piece {
    fn plain(place: Place, at: u64, len: u64) -> Piece {
        Piece {
            stream_at: 0,
            place,
            at,
            stored: len,
            len,
            algo: None,
        }
    }
}

/// Where each CPU's sub-buffers are in an input: the [`ChunkStore`] of a
/// log opened in place.
pub(crate) struct InputChunks {
    files: Vec<File>,
    memory: Vec<Vec<u8>>,
    subbuf_size: u64,
    /// Each CPU's pieces, in stream order.
    cpus: BTreeMap<u32, Vec<Piece>>,
    /// Offsets are those of the log an import writes (a dump's), not of
    /// the pieces' places.
    log_offsets: bool,
    /// This store among those made ([`Inflated::key`]).
    id: u64,
}

/// Stores made so far: each one's [`InputChunks::id`].
static STORES_MADE: AtomicU64 = AtomicU64::new(0);

/// A compressed piece decompressed whole, kept in a [`BlockScratch`]: a
/// piece larger than a chunk gives several chunks, which read it from
/// here instead of decompressing (and zero-filling) it once for each.
pub(crate) struct Inflated {
    /// Which piece: the store's id, the CPU and where the piece starts in
    /// its stream.
    key: Option<(u64, u32, u64)>,
    /// Its bytes, or why it does not decompress.
    bytes: Result<Vec<u8>, String>,
}

impl Default for Inflated {
    fn default() -> Self {
        Inflated {
            key: None,
            bytes: Ok(Vec::new()),
        }
    }
}

impl InputChunks {
    fn empty(layout: &SubBufLayout, log_offsets: bool) -> Self {
        InputChunks {
            files: Vec::new(),
            memory: Vec::new(),
            subbuf_size: layout.subbuf_size as u64,
            cpus: BTreeMap::new(),
            log_offsets,
            id: STORES_MADE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A trace.dat's chunks, and where a CPU's data runs past the end of
    /// the file (CPU, where it would end).
    fn of_tracedat(
        path: &Path,
        d: &Dump,
        layout: &SubBufLayout,
    ) -> io::Result<(Self, Vec<(u32, u64)>)> {
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let mut chunks = Self::empty(layout, false);
        chunks.files.push(file);
        let mut cut_short = Vec::new();
        for (cpu, data) in d.tracedat_cpus() {
            let mut pieces = match data {
                CpuData::Plain { offset, len } => vec![Piece::plain(Place::File(0), *offset, *len)],
                CpuData::Chunked { algo, chunks } => {
                    let mut stream_at = 0;
                    chunks
                        .iter()
                        .map(|c| {
                            let p = Piece {
                                stream_at,
                                place: Place::File(0),
                                at: c.offset,
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
            if let Some(end) = cut_to(&mut pieces, file_len)
                .map_err(|e| io::Error::new(e.kind(), format!("CPU {cpu}: {e}")))?
            {
                cut_short.push((cpu, end));
            }
            chunks.cpus.insert(cpu, pieces);
        }
        Ok((chunks, cut_short))
    }

    /// A dump's chunks: a directory's files where they are, a tar's read
    /// into memory.
    fn of_dump(d: &Dump, layout: &SubBufLayout) -> Result<Self, ImportError> {
        let mut chunks = Self::empty(layout, true);
        if d.container == Container::Dir {
            for (cpu, path, len) in d.dir_raw_files() {
                let f = File::open(path)
                    .map_err(|e| ImportError::Dump(format!("reading {}: {e}", path.display())))?;
                chunks.files.push(f);
                let place = Place::File(chunks.files.len() - 1);
                chunks.cpus.insert(cpu, vec![Piece::plain(place, 0, len)]);
            }
            return Ok(chunks);
        }
        let mut raw: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        d.stream_raw(|cpu, bytes| {
            raw.entry(cpu).or_default().extend_from_slice(bytes);
            Ok(())
        })?;
        for (cpu, bytes) in raw {
            let len = bytes.len() as u64;
            chunks.memory.push(bytes);
            let place = Place::Memory(chunks.memory.len() - 1);
            chunks.cpus.insert(cpu, vec![Piece::plain(place, 0, len)]);
        }
        Ok(chunks)
    }

    /// Fills `buf` from `place` at `at`.
    fn read_at(&self, place: Place, at: u64, buf: &mut [u8]) -> io::Result<()> {
        match place {
            Place::File(i) => self.files[i].read_exact_at(buf, at),
            Place::Memory(i) => {
                let m = &self.memory[i];
                let from = usize::try_from(at).unwrap_or(usize::MAX);
                let bytes = from
                    .checked_add(buf.len())
                    .and_then(|end| m.get(from..end))
                    .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
                buf.copy_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Compressed piece `p` of `cpu`'s stream, decompressed (with `stored`
    /// for its bytes as stored) into `inflated`, unless it holds it already.
    fn inflate<'i>(
        &self,
        cpu: u32,
        p: &Piece,
        algo: Algo,
        stored: &mut Vec<u8>,
        inflated: &'i mut Inflated,
    ) -> &'i Result<Vec<u8>, String> {
        let key = Some((self.id, cpu, p.stream_at));
        if inflated.key != key {
            let mut bytes =
                std::mem::replace(&mut inflated.bytes, Ok(Vec::new())).unwrap_or_default();
            // Resized, not cleared: only what the last piece lacked is zeroed.
            bytes.resize(p.len as usize, 0);
            stored.resize(p.stored as usize, 0);
            inflated.bytes = self
                .read_at(p.place, p.at, stored)
                .map_err(|e| format!("reading a compressed chunk: {e}"))
                .and_then(|()| {
                    decompress_into(algo, stored, &mut bytes)
                        .map_err(|e| format!("a {algo:?} chunk: {e}"))
                })
                .map(|()| bytes);
            inflated.key = key;
        }
        &inflated.bytes
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

    /// Each CPU's chunks, cut as the import cuts its CPU_DATA blocks; their
    /// offsets are their places' (a dump's are set as they are indexed).
    fn chunk_refs(&self) -> Vec<CpuBlockRef> {
        let sb = self.subbuf_size.max(1);
        let block = cpu_data_block_bytes(sb);
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
                        None => p.at + (start - p.stream_at),
                        Some(_) => p.at,
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

impl ChunkStore for InputChunks {
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        let (stored, out, inflated) = scratch.piece_buffers();
        out.clear();
        let (start, end) = self.range(chunk);
        for p in self.pieces(chunk.cpu, start, end) {
            let err = |what: String| Problem {
                offset: if self.log_offsets { chunk.offset } else { p.at },
                kind: ProblemKind::BadBlock,
                what: format!("CPU {} data: {what}", chunk.cpu),
            };
            let lo = (start.max(p.stream_at) - p.stream_at) as usize;
            let hi = (end.min(p.stream_at + p.len) - p.stream_at) as usize;
            let base = out.len();
            match p.algo {
                None => {
                    out.resize(base + hi - lo, 0);
                    self.read_at(p.place, p.at + lo as u64, &mut out[base..])
                        .map_err(|e| err(format!("reading it: {e}")))?;
                }
                Some(algo) => {
                    let piece = self.inflate(chunk.cpu, p, algo, stored, inflated);
                    let bytes = piece.as_ref().map_err(|e| err(e.clone()))?;
                    out.extend_from_slice(&bytes[lo..hi]);
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
        if self.log_offsets {
            // Where the import's log stores it: after the block's headers.
            let head = (BLOCK_HEADER_LEN + CPU_DATA_HEADER_LEN) as u64;
            return Some(chunk.offset + head + (index - chunk.first_subbuf) * self.subbuf_size);
        }
        let at = index * self.subbuf_size;
        let p = self.pieces(chunk.cpu, at, at + 1).next()?;
        p.algo.is_none().then(|| p.at + (at - p.stream_at))
    }
}

/// Keeps what of `pieces` lies within a file of `len` bytes: a plain piece
/// up to the end, a compressed one whole or not at all. Returns where the
/// pieces would have ended, if they run past it; a piece that would end
/// past 2^64 is damage.
fn cut_to(pieces: &mut Vec<Piece>, len: u64) -> io::Result<Option<u64>> {
    let mut end = 0;
    for p in pieces.iter() {
        let p_end = p.at.checked_add(p.stored).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} bytes at offset {} end past any file", p.stored, p.at),
            )
        })?;
        end = end.max(p_end);
    }
    if end <= len {
        return Ok(None);
    }
    pieces.retain_mut(|p| match p.algo {
        None if p.at < len => {
            p.stored = p.stored.min(len - p.at);
            p.len = p.stored;
            true
        }
        None => false,
        Some(_) => p.at + p.stored <= len,
    });
    // A compressed piece's place in the stream is its predecessors' sum:
    // none but the last ones go, so the places stand.
    Ok(Some(end))
}

/// Counts what is written to it, and keeps nothing.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The records of an import, assembled into a log in place. `shadow`,
/// for a dump, writes the log the import would write to a [`Counter`]:
/// each record's offset is then where that log has it.
struct InPlace {
    log: LogBuilder,
    shadow: Option<LogWriter<Counter>>,
}

impl InPlace {
    /// A record's offset: `input_at`, or the shadow log's.
    fn at(&self, input_at: u64) -> u64 {
        self.shadow
            .as_ref()
            .map_or(input_at, LogWriter::bytes_written)
    }
}

impl RecordSink for InPlace {
    fn meta(&mut self, at: u64, m: &Meta) -> io::Result<()> {
        self.log.record(self.at(at), Record::Meta(m.clone()));
        self.shadow.as_mut().map_or(Ok(()), |w| w.write_meta(m))
    }
    fn stats(&mut self, at: u64, s: &StatsRecord) -> io::Result<()> {
        self.log.record(self.at(at), Record::Stats(s.clone()));
        self.shadow.as_mut().map_or(Ok(()), |w| w.write_stats(s))
    }
    fn note(&mut self, n: &NoteRecord) -> io::Result<()> {
        self.log.record(self.at(0), Record::Note(n.clone()));
        self.shadow.as_mut().map_or(Ok(()), |w| w.write_note(n))
    }
}

/// Opens the trace.dat or dump `path` as a log, read in place, named
/// after `path` and what it is.
pub(crate) fn open(path: &Path) -> Result<Log, ImportError> {
    let d = Dump::open(path)?;
    let tracedat = matches!(d.container, Container::TraceDat(_));
    let origin = if tracedat {
        Origin::TraceDat
    } else {
        Origin::Dump
    };
    let suffix = origin.name_suffix();
    let mut plan = Plan::new(&d, format!("opened as{suffix}"))?;
    let mut b = InPlace {
        log: LogBuilder::new(),
        shadow: None,
    };
    let store = if tracedat {
        let (store, cut_short) = InputChunks::of_tracedat(path, &d, &plan.layout)?;
        let len = std::fs::metadata(path)?.len();
        for (cpu, end) in cut_short {
            b.log.problem(Problem {
                offset: len,
                kind: ProblemKind::Data,
                what: format!(
                    "the trace.dat is cut short: CPU {cpu}'s data runs to offset {end}, the file ends at {len}; what is missing of it is lost"
                ),
            });
        }
        store
    } else {
        b.shadow = Some(LogWriter::new(Counter(0), &plan.arch, Compression::None)?);
        InputChunks::of_dump(&d, &plan.layout)?
    };
    // ARCH first, its copy before the CPU data, as the import writes them.
    let arch_at = if tracedat { 0 } else { FILE_HEADER_LEN as u64 };
    b.log
        .record(arch_at, Record::Arch(Box::new(plan.arch.clone())));
    plan.write_head(&mut b)?;
    b.log
        .record(b.at(0), Record::ArchCopy(Box::new(plan.arch.clone())));
    if let Some(w) = &mut b.shadow {
        w.write_arch_copy()?;
    }
    let (tallies, totals) = index_cpu_data(&store, &mut b, &plan.layout, plan.bo.order)?;
    plan.write_tail(&mut b, &tallies)?;
    let end = EndRecord {
        wall_ns: plan.end_wall_ns,
        reason: END_REASON.into(),
        blocks: b.log.blocks(),
        cpus: totals.into_values().collect(),
        exit_status: plan.exit_status(),
    };
    // A trace.dat has no END: it is placed where the file ends.
    let (end_at, len) = match b.shadow.take() {
        None => {
            let len = std::fs::metadata(path)?.len();
            (len, len)
        }
        Some(w) => {
            let at = w.bytes_written();
            (at, w.finish(end.wall_ns, &end.reason, end.exit_status)?.0)
        }
    };
    b.log.record(end_at, Record::End(end));
    let version = (VERSION_MAJOR, Compression::None.minor_version());
    let name = format!("{}{suffix}", path.display());
    b.log
        .finish(name, origin, version, len, Box::new(store))
        .map_err(|e| ImportError::Dump(e.to_string()))
}

/// Indexes every CPU's chunks into `b`, reading each once to count what
/// its sub-buffers hold (as the import counts what it writes); a chunk
/// that cannot be read counts as sub-buffers that do not decode, and is
/// found again, with its offset, by whatever reads the log.
fn index_cpu_data(
    store: &InputChunks,
    b: &mut InPlace,
    layout: &SubBufLayout,
    order: kmemtrace_kernel::RunTimeEndian,
) -> io::Result<(BTreeMap<u32, CpuTally>, BTreeMap<u32, CpuTotal>)> {
    let mut tallies: BTreeMap<u32, CpuTally> = BTreeMap::new();
    let mut totals: BTreeMap<u32, CpuTotal> = BTreeMap::new();
    let mut scratch = BlockScratch::new();
    for mut r in store.chunk_refs() {
        let t = tallies.entry(r.cpu).or_default();
        let bytes = u64::from(r.count) * layout.subbuf_size as u64;
        if let Some(w) = &b.shadow {
            r.offset = w.bytes_written();
        }
        match store.read_chunk(&r, &mut scratch) {
            Ok(pages) => {
                t.count(order, layout, pages);
                if let Some(w) = &mut b.shadow {
                    w.write_cpu_data(r.cpu, pages)?;
                }
            }
            Err(p) => {
                for i in 0..r.count {
                    t.subbufs += 1;
                    t.bad(format!(
                        "sub-buffer {}: {}",
                        r.first_subbuf + u64::from(i),
                        p
                    ));
                }
                if let Some(w) = &mut b.shadow {
                    w.write_cpu_data(r.cpu, &vec![0; bytes as usize])?;
                }
            }
        }
        let total = totals.entry(r.cpu).or_insert(CpuTotal {
            cpu: r.cpu,
            ..Default::default()
        });
        total.blocks += 1;
        total.subbufs += u64::from(r.count);
        total.bytes += bytes;
        b.log.chunk(r);
    }
    Ok((tallies, totals))
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
    fn reads_back(store: &InputChunks, cpu: u32, data: &[u8]) -> Vec<CpuBlockRef> {
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
                place: Place::File(0),
                at,
                stored: c.len() as u64,
                len: part.len() as u64,
                algo: Some(Algo::Zstd),
            });
            at += c.len() as u64;
        }
        file.write_all(&plain_data).unwrap();
        let plain = Piece::plain(Place::File(0), at, plain_data.len() as u64);
        let store = InputChunks {
            files: vec![File::open(file.path()).unwrap()],
            memory: Vec::new(),
            subbuf_size: 4096,
            cpus: BTreeMap::from([(0, pieces), (1, vec![plain])]),
            log_offsets: false,
            id: 0,
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

    /// A piece larger than a chunk is decompressed once for the chunks
    /// cut from it, not once for each (a piece claiming 64 MiB gives 64):
    /// with its stored bytes overwritten after the first chunk is read,
    /// the others still read back.
    #[test]
    fn a_compressed_piece_is_decompressed_once_for_its_chunks() {
        let data = stream(600);
        let z = zstd::bulk::compress(&data, 1).unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(&z).unwrap();
        let piece = Piece {
            stream_at: 0,
            place: Place::File(0),
            at: 0,
            stored: z.len() as u64,
            len: data.len() as u64,
            algo: Some(Algo::Zstd),
        };
        let layout = SubBufLayout {
            long_size: 8,
            data_offset: 16,
            subbuf_size: 4096,
        };
        let mut store = InputChunks::empty(&layout, false);
        store.files.push(File::open(file.path()).unwrap());
        store.cpus.insert(0, vec![piece]);
        let refs = store.chunk_refs();
        assert_eq!(refs.len(), 3);
        let mut scratch = BlockScratch::new();
        store.read_chunk(&refs[0], &mut scratch).unwrap();
        std::fs::write(file.path(), vec![0u8; z.len()]).unwrap();
        for r in &refs[1..] {
            let (start, end) = store.range(r);
            let got = store.read_chunk(r, &mut scratch).unwrap();
            assert!(got == &data[start as usize..end as usize], "{r:?}");
        }
        // Another scratch reads the bytes as they now are.
        assert!(store
            .read_chunk(&refs[1], &mut BlockScratch::new())
            .is_err());
    }

    #[test]
    fn a_piece_ending_past_2_64_is_refused() {
        let mut pieces = vec![Piece::plain(Place::File(0), u64::MAX - 10, 100)];
        let e = cut_to(&mut pieces, 1000).unwrap_err();
        assert!(e.to_string().contains("end past any file"), "{e}");
    }

    #[test]
    fn pieces_past_the_end_of_the_file_are_cut_there() {
        let piece = |at: u64, stored: u64, algo: Option<Algo>| Piece {
            stream_at: 0,
            place: Place::File(0),
            at,
            stored,
            len: stored * 3,
            algo,
        };
        let mut plain = vec![piece(100, 50, None)];
        assert_eq!(cut_to(&mut plain, 150).unwrap(), None);
        assert_eq!(cut_to(&mut plain, 120).unwrap(), Some(150));
        assert_eq!((plain[0].stored, plain[0].len), (20, 20));
        let z = Some(Algo::Zstd);
        let mut chunked = vec![piece(0, 10, z), piece(10, 10, z), piece(20, 10, z)];
        assert_eq!(cut_to(&mut chunked, 25).unwrap(), Some(30));
        assert_eq!(chunked.len(), 2);
    }
}
