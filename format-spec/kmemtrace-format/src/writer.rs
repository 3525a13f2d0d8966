//! Writing logs (FORMAT.md §3): file header, ARCH first, END last.
//!
//! Every block is handed to the output with a single `write_all`, so an
//! unbuffered file (or a pipe) holds only whole blocks plus at most one
//! partial one if the process dies: the reader keeps every complete block.
//! CPU data can be encoded (compressed, checksummed) on other threads with a
//! [`CpuBlockEncoder`] per CPU and handed in with [`LogWriter::write_encoded`].

use crate::arch::ArchTag;
use crate::block::{
    encode_block, encode_file_header_minor, BlockCompressor, BlockType, Compression, EncodeError,
};
use crate::kpack::Shape;
use crate::records::{
    encode_cpu_data_header, CpuTotal, EndRecord, Meta, NoteRecord, SegmentRecord, StatsRecord,
    CPU_DATA_HEADER_LEN,
};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Encodes one CPU's data blocks, numbering them (FORMAT.md §8). Owned by
/// the thread that reads that CPU, so compression runs in parallel; it keeps
/// its zstd context from block to block.
#[derive(Debug)]
pub struct CpuBlockEncoder {
    cpu: u32,
    subbuf_size: u32,
    /// The sub-buffers' shape, for `Compression::Kpack`.
    shape: Option<Shape>,
    compressor: BlockCompressor,
    next_seq: u64,
    next_subbuf: u64,
    payload: Vec<u8>,
}

/// A CPU_DATA block ready to be written.
#[derive(Debug, Clone, Default)]
pub struct EncodedBlock {
    pub cpu: u32,
    /// The block's `block_seq` and `first_subbuf` (FORMAT.md §8).
    pub block_seq: u64,
    pub first_subbuf: u64,
    pub subbufs: u64,
    /// Uncompressed sub-buffer bytes.
    pub data_bytes: u64,
    /// The whole block: header and stored payload.
    pub bytes: Vec<u8>,
}

impl CpuBlockEncoder {
    pub fn new(cpu: u32, subbuf_size: u32, compression: Compression) -> Self {
        CpuBlockEncoder {
            cpu,
            subbuf_size,
            shape: None,
            compressor: BlockCompressor::new(compression),
            next_seq: 0,
            next_subbuf: 0,
            payload: Vec::new(),
        }
    }

    /// Lets `Compression::Kpack` walk sub-buffers of this shape (without
    /// one, CPU data is compressed with zstd alone).
    pub fn with_shape(mut self, shape: Option<Shape>) -> Self {
        self.shape = shape;
        self
    }

    /// Encodes whole sub-buffers (a multiple of the sub-buffer size) as the
    /// next block of this CPU. `out` is cleared and reused.
    pub fn encode_into(
        &mut self,
        subbufs: &[u8],
        out: &mut EncodedBlock,
    ) -> Result<(), EncodeError> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        payload.extend_from_slice(&[0u8; CPU_DATA_HEADER_LEN]);
        payload.extend_from_slice(subbufs);
        let r = self.encode_in_place(&mut payload, out);
        self.payload = payload;
        r
    }

    /// Like [`encode_into`](Self::encode_into), without copying the data:
    /// `buf` is the CPU_DATA payload to be, whose first
    /// [`CPU_DATA_HEADER_LEN`] bytes are room for the header (overwritten
    /// here) and the rest whole sub-buffers (a trailing partial one is left
    /// out).
    ///
    /// # Panics
    ///
    /// If `buf` is shorter than the header (a caller's mistake, not data).
    pub fn encode_in_place(
        &mut self,
        buf: &mut [u8],
        out: &mut EncodedBlock,
    ) -> Result<(), EncodeError> {
        let sb = self.subbuf_size.max(1) as usize;
        let Some(data_len) = buf.len().checked_sub(CPU_DATA_HEADER_LEN) else {
            panic!("encode_in_place: no room for the CPU_DATA header");
        };
        debug_assert_eq!(data_len % sb, 0, "whole sub-buffers only");
        let count = u32::try_from(data_len / sb).map_err(|_| EncodeError::TooLarge(buf.len()))?;
        let used = CPU_DATA_HEADER_LEN + count as usize * sb;
        buf[..CPU_DATA_HEADER_LEN].copy_from_slice(&encode_cpu_data_header(
            self.cpu,
            count,
            self.next_seq,
            self.next_subbuf,
        ));
        out.bytes.clear();
        self.compressor
            .encode_cpu_data(&buf[..used], self.shape, &mut out.bytes)?;
        out.cpu = self.cpu;
        out.block_seq = self.next_seq;
        out.first_subbuf = self.next_subbuf;
        out.subbufs = u64::from(count);
        out.data_bytes = count as u64 * sb as u64;
        self.next_seq += 1;
        self.next_subbuf += u64::from(count);
        Ok(())
    }

    pub fn encode(&mut self, subbufs: &[u8]) -> Result<EncodedBlock, EncodeError> {
        let mut b = EncodedBlock::default();
        self.encode_into(subbufs, &mut b)?;
        Ok(b)
    }

    /// Lets go of the buffers and compression context (up to a block's
    /// size each), keeping the numbering: the CPU's next block follows on.
    pub fn release_buffers(&mut self) {
        self.payload = Vec::new();
        self.compressor.release();
    }
}

/// Writes a log to any `Write`.
pub struct LogWriter<W: Write> {
    out: W,
    arch: ArchTag,
    compression: Compression,
    blocks: u64,
    bytes: u64,
    cpus: BTreeMap<u32, CpuTotal>,
    encoders: BTreeMap<u32, CpuBlockEncoder>,
    scratch: Vec<u8>,
    /// The ARCH_COPY block is written.
    arch_copied: bool,
}

fn enc_err(e: EncodeError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

impl<W: Write> LogWriter<W> {
    /// Writes the file header and the ARCH block. `compression` applies to
    /// the blocks this writer encodes itself (META, CPU data via
    /// [`write_cpu_data`](Self::write_cpu_data)).
    pub fn new(out: W, arch: &ArchTag, compression: Compression) -> io::Result<Self> {
        Self::with_cpu_compression(out, arch, compression, compression)
    }

    /// Like [`new`](Self::new), for a writer whose CPU data is encoded
    /// elsewhere ([`CpuBlockEncoder`]) with `cpu_data`: the file header
    /// names the version that needs.
    pub fn with_cpu_compression(
        out: W,
        arch: &ArchTag,
        compression: Compression,
        cpu_data: Compression,
    ) -> io::Result<Self> {
        Self::start(out, arch, compression, cpu_data, None)
    }

    /// Like [`with_cpu_compression`](Self::with_cpu_compression), for one
    /// file of a rotated capture: the SEGMENT block follows the ARCH block
    /// (format 1.4, FORMAT.md §13).
    pub fn with_segment(
        out: W,
        arch: &ArchTag,
        compression: Compression,
        cpu_data: Compression,
        segment: &SegmentRecord,
    ) -> io::Result<Self> {
        Self::start(out, arch, compression, cpu_data, Some(segment))
    }

    fn start(
        mut out: W,
        arch: &ArchTag,
        compression: Compression,
        cpu_data: Compression,
        segment: Option<&SegmentRecord>,
    ) -> io::Result<Self> {
        arch.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("arch tag: {e}")))?;
        let mut minor = compression.minor_version().max(cpu_data.minor_version());
        if segment.is_some() {
            minor = minor.max(crate::block::VERSION_MINOR_SEGMENT);
        }
        let header = encode_file_header_minor(minor);
        out.write_all(&header)?;
        let mut w = LogWriter {
            out,
            arch: arch.clone(),
            compression,
            blocks: 0,
            bytes: header.len() as u64,
            cpus: BTreeMap::new(),
            encoders: BTreeMap::new(),
            scratch: Vec::new(),
            arch_copied: false,
        };
        w.write_block(BlockType::Arch, &arch.encode(), Compression::None)?;
        if let Some(seg) = segment {
            w.write_block(BlockType::Segment, &seg.encode(), Compression::None)?;
        }
        Ok(w)
    }

    /// The last block written by this writer's own encoding (not
    /// [`write_encoded`](Self::write_encoded)), header and payload: a
    /// rotating writer keeps its start metadata so, to write it again at
    /// the start of the next file with [`write_block_bytes`](Self::write_block_bytes).
    pub fn last_block(&self) -> &[u8] {
        &self.scratch
    }

    /// Writes a whole block as encoded before (by [`last_block`](Self::last_block)
    /// of this or another writer of the same arch). Not a CPU_DATA block:
    /// those go through [`write_encoded`](Self::write_encoded), which
    /// counts them for END.
    pub fn write_block_bytes(&mut self, block: &[u8]) -> io::Result<()> {
        self.out.write_all(block)?;
        self.blocks += 1;
        self.bytes += block.len() as u64;
        Ok(())
    }

    pub fn arch(&self) -> &ArchTag {
        &self.arch
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Blocks written so far (ARCH included).
    pub fn blocks_written(&self) -> u64 {
        self.blocks
    }

    fn write_block(&mut self, t: BlockType, payload: &[u8], c: Compression) -> io::Result<()> {
        self.scratch.clear();
        encode_block(t, payload, c, &mut self.scratch).map_err(enc_err)?;
        self.out.write_all(&self.scratch)?;
        self.blocks += 1;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }

    pub fn write_meta(&mut self, m: &Meta) -> io::Result<()> {
        let c = self.compression;
        self.write_block(BlockType::Meta, &m.encode(), c)
    }

    pub fn write_stats(&mut self, s: &StatsRecord) -> io::Result<()> {
        self.write_block(BlockType::Stats, &s.encode(), Compression::None)
    }

    pub fn write_note(&mut self, n: &NoteRecord) -> io::Result<()> {
        self.write_block(BlockType::Note, &n.encode(), Compression::None)
    }

    /// Encodes and writes sub-buffers of `cpu` (a multiple of the
    /// sub-buffer size; at most 64 MiB).
    pub fn write_cpu_data(&mut self, cpu: u32, subbufs: &[u8]) -> io::Result<()> {
        let (sb, c) = (self.arch.subbuf_size, self.compression);
        let shape = Shape::of(&self.arch);
        let enc = self
            .encoders
            .entry(cpu)
            .or_insert_with(|| CpuBlockEncoder::new(cpu, sb, c).with_shape(shape));
        let b = enc.encode(subbufs).map_err(enc_err)?;
        self.write_encoded(&b)
    }

    /// `cpu`'s data written so far is all there is for now: its encoder
    /// lets go of its buffers (its numbering kept), so that a writer of
    /// many CPUs in turn, as an import is, holds one CPU's buffers rather
    /// than a block's size for every CPU until the end.
    pub fn end_cpu(&mut self, cpu: u32) {
        if let Some(enc) = self.encoders.get_mut(&cpu) {
            enc.release_buffers();
        }
    }

    /// Writes the ARCH_COPY block (FORMAT.md §6.2), once: a writer calls
    /// it after its start metadata; otherwise it comes before the first
    /// CPU data block (or END), so that a damaged ARCH block costs nothing.
    pub fn write_arch_copy(&mut self) -> io::Result<()> {
        if !self.arch_copied {
            let a = self.arch.encode();
            self.write_block(BlockType::ArchCopy, &a, Compression::None)?;
            self.arch_copied = true;
        }
        Ok(())
    }

    /// Writes a block encoded by a [`CpuBlockEncoder`].
    pub fn write_encoded(&mut self, b: &EncodedBlock) -> io::Result<()> {
        self.write_arch_copy()?;
        self.out.write_all(&b.bytes)?;
        self.blocks += 1;
        self.bytes += b.bytes.len() as u64;
        let t = self.cpus.entry(b.cpu).or_insert(CpuTotal {
            cpu: b.cpu,
            ..Default::default()
        });
        t.blocks += 1;
        t.subbufs += b.subbufs;
        t.bytes += b.data_bytes;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Per-CPU totals so far.
    pub fn cpu_totals(&self) -> impl Iterator<Item = &CpuTotal> {
        self.cpus.values()
    }

    /// Writes the END block (filling in block counts and per-CPU totals),
    /// flushes, and returns the output.
    pub fn finish(
        mut self,
        wall_ns: Option<u64>,
        reason: &str,
        exit_status: Option<i32>,
    ) -> io::Result<W> {
        self.write_end(wall_ns, reason, exit_status)?;
        Ok(self.out)
    }

    /// Writes the END block and flushes, keeping the writer: for a writer
    /// that goes on to another output (a rotated capture's next file) or
    /// whose output is to be cut back. Nothing may be written after it.
    pub fn write_end(
        &mut self,
        wall_ns: Option<u64>,
        reason: &str,
        exit_status: Option<i32>,
    ) -> io::Result<()> {
        self.write_arch_copy()?;
        let end = EndRecord {
            wall_ns,
            reason: reason.to_string(),
            blocks: self.blocks,
            cpus: self.cpus.values().copied().collect(),
            exit_status,
        };
        self.write_block(BlockType::End, &end.encode(), Compression::None)?;
        self.out.flush()
    }

    /// The output, to cut it back to [`bytes_written`](Self::bytes_written)
    /// after a failed write: a write that fails counts nothing, so that
    /// is where the last whole block ends.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Gives the output back without an END block (a truncated log, for
    /// tests).
    pub fn into_inner_unfinished(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_kernel::RunTimeEndian;

    #[test]
    fn a_cpu_ended_holds_no_buffers_and_numbers_on() {
        let arch = ArchTag::new(RunTimeEndian::Little, 8, 4096, 16);
        let mut w = LogWriter::new(Vec::new(), &arch, Compression::Zstd(3)).unwrap();
        let page: Vec<u8> = (0..4096u32).map(|x| (x * 7) as u8).collect();
        for cpu in 0..3 {
            w.write_cpu_data(cpu, &page).unwrap();
            w.write_cpu_data(cpu, &page).unwrap();
            w.end_cpu(cpu);
        }
        for enc in w.encoders.values() {
            assert_eq!(enc.payload.capacity(), 0, "CPU {}", enc.cpu);
        }
        // CPU 0 again: its next block follows on.
        w.write_cpu_data(0, &page).unwrap();
        assert_eq!(
            (w.encoders[&0].next_seq, w.encoders[&0].next_subbuf),
            (3, 3)
        );
    }
}
