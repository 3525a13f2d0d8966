//! Packing (FORMAT.md §8.3): the streams of a version 2 body.

use super::kinds::Kinds;
use super::{columns, planes, record, Groups, Kind, BAND};
use crate::kpack::{all_zero, put_varint, Shape};
use kmemtrace_kernel::{BigEndian, Endian, LittleEndian};

/// Packs a body (the sub-buffers after the kept head) into the streams of
/// version 2; keeps its vectors from block to block.
#[derive(Default)]
pub struct ColumnPacker {
    ctl: Vec<u8>,
    heads: Vec<u8>,
    /// Record headers' words, then as four planes ([`planes`]).
    rec: Vec<u8>,
    rec_planes: Vec<u8>,
    keys: Vec<u16>,
    keys_out: Vec<u8>,
    groups_out: Vec<u8>,
    raw: Vec<u8>,
    cols: Vec<u8>,
    kinds: Kinds,
    groups: Groups,
}

impl ColumnPacker {
    /// The streams of `body`, in `STREAM_NAMES` order.
    pub fn pack(&mut self, shape: Shape, body: &[u8]) -> [&[u8]; 7] {
        for v in [
            &mut self.ctl,
            &mut self.heads,
            &mut self.rec,
            &mut self.raw,
            &mut self.cols,
            &mut self.groups_out,
            &mut self.keys_out,
        ] {
            v.clear();
        }
        self.keys.clear();
        self.kinds.clear();
        self.groups.clear();
        if shape.big_endian {
            self.walk(BigEndian, shape, body);
        } else {
            self.walk(LittleEndian, shape, body);
        }
        self.kinds.assign(&mut self.groups, &mut self.keys);
        self.write_columns(body);
        planes(&self.rec, &mut self.rec_planes);
        if self.groups.live().len() > 256 {
            self.keys_out
                .extend(self.keys.iter().flat_map(|k| k.to_le_bytes()));
        } else {
            self.keys_out.extend(self.keys.iter().map(|&k| k as u8));
        }
        [
            &self.ctl,
            &self.heads,
            &self.rec_planes,
            &self.keys_out,
            &self.groups_out,
            &self.raw,
            &self.cols,
        ]
    }

    /// The sub-buffers: everything but the payloads into the streams, the
    /// payloads noted in `kinds`.
    fn walk<E: Endian>(&mut self, e: E, shape: Shape, body: &[u8]) {
        let size = shape.subbuf_size as usize;
        let off = shape.data_offset as usize;
        let long = usize::from(shape.long_size);
        let mut at = 0;
        while body.len() - at >= size {
            let page = &body[at..at + size];
            let start = at + off;
            at += size;
            let Some(len) = shape.data_len(e, page) else {
                self.ctl.push(0);
                self.raw.extend_from_slice(page);
                continue;
            };
            self.ctl.push(1);
            self.heads.extend_from_slice(&page[..off]);
            let walked = self.records(e, body, start, len, long);
            put_varint(&mut self.ctl, (len - walked) as u64);
            self.raw
                .extend_from_slice(&body[start + walked..start + len]);
            let tail = &page[off + len..];
            if !tail.is_empty() {
                let hole = all_zero(tail);
                self.ctl.push(u8::from(!hole));
                if !hole {
                    self.raw.extend_from_slice(tail);
                }
            }
        }
        self.raw.extend_from_slice(&body[at..]);
    }

    /// Walks the records of `body[start..start + len]` while they parse
    /// (and their kinds fit the block); returns how many bytes that was.
    fn records<E: Endian>(
        &mut self,
        e: E,
        body: &[u8],
        start: usize,
        len: usize,
        long: usize,
    ) -> usize {
        let end = start + len;
        let mut q = start;
        while q < end {
            let Some((head, total, kind)) = record(e, &body[q..end.min(q + 8)], end - q) else {
                break;
            };
            match kind {
                Kind::Payload(_) => {
                    let p = &body[q + head..q + total];
                    if !self.kinds.note(p, (q + head) as u32, long) {
                        break;
                    }
                    push_words(&mut self.rec, &body[q..q + head]);
                }
                Kind::Time => push_words(&mut self.rec, &body[q..q + total]),
                Kind::Padding(_) => {
                    push_words(&mut self.rec, &body[q..q + head]);
                    self.raw.extend_from_slice(&body[q + head..q + total]);
                }
            }
            q += total;
        }
        q - start
    }

    /// Each group's length and constant columns in `groups`, its columns'
    /// words in `cols`.
    fn write_columns(&mut self, body: &[u8]) {
        put_varint(&mut self.groups_out, self.groups.live().len() as u64);
        for g in self.groups.live() {
            let len = g.len as usize;
            let pos = self.groups.rows(g);
            let rows = pos.len();
            put_varint(&mut self.groups_out, g.len.into());
            let bitmap_at = self.groups_out.len();
            self.groups_out
                .resize(bitmap_at + columns(len).div_ceil(8), 0);
            let bitmap = &mut self.groups_out[bitmap_at..];
            // The whole columns, all rows of each, then each constant one
            // cut to its first word.
            let whole = len / 4;
            let start = self.cols.len();
            self.cols.resize(start + 4 * whole * rows, 0);
            let changed = column_xors(body, pos, whole, &mut self.cols[start..]);
            let mut kept = start;
            for (j, &changed) in changed.iter().enumerate() {
                let from = start + 4 * rows * j;
                let n = if changed { 4 * rows } else { 4 };
                self.cols.copy_within(from..from + n, kept);
                kept += n;
                if !changed {
                    bitmap[j / 8] |= 1 << (j % 8);
                }
            }
            self.cols.truncate(kept);
            if !len.is_multiple_of(4) {
                let at = self.cols.len();
                let width = len % 4;
                if !short_column_xors(body, pos, 4 * whole, len, &mut self.cols) {
                    self.cols.truncate(at + width);
                    bitmap[whole / 8] |= 1 << (whole % 8);
                }
            }
        }
    }
}

/// The 4-byte words of a record's header (and `array[0]`, or a time
/// extend's second word), appended a word at a time: copies of a fixed
/// size, not a call to memcpy.
#[inline]
fn push_words(rec: &mut Vec<u8>, words: &[u8]) {
    for w in words.chunks_exact(4) {
        let w: [u8; 4] = w.try_into().unwrap_or_default();
        rec.extend_from_slice(&w);
    }
}

/// Writes into `out` (`whole` columns of `4 * pos.len()` bytes each) the
/// XORs of each payload's first `whole` 4-byte words with the payload's
/// above (the first with 0); for each column, whether any XOR after the
/// first is not 0. A band of columns at a time, row by row, so that each
/// payload is read in a few pieces rather than once per column.
fn column_xors(body: &[u8], pos: &[u32], whole: usize, out: &mut [u8]) -> Vec<bool> {
    let col_bytes = 4 * pos.len();
    let mut changed = Vec::with_capacity(whole);
    for from in (0..whole).step_by(BAND) {
        let out = &mut out[from * col_bytes..];
        macro_rules! band {
            ($($n:literal)*) => {
                match whole - from {
                    $($n => changed.extend(xor_rows::<$n>(body, pos, 4 * from, out)),)*
                    _ => changed.extend(xor_rows::<BAND>(body, pos, 4 * from, out)),
                }
            };
        }
        band!(1 2 3 4 5 6 7);
    }
    changed
}

/// [`column_xors`] for the `N` columns from byte `from` of each payload,
/// the running words in registers.
#[inline(never)]
fn xor_rows<const N: usize>(body: &[u8], pos: &[u32], from: usize, out: &mut [u8]) -> [bool; N] {
    let rows = pos.len();
    let mut columns = out.chunks_exact_mut(4 * rows.max(1));
    let cols: [&mut [u8]; N] = std::array::from_fn(|_| columns.next().unwrap_or_default());
    let mut prev = [0u32; N];
    let mut changed = [0u32; N];
    for (r, &p) in pos.iter().enumerate() {
        let at = p as usize + from;
        let row = &body[at..at + 4 * N];
        for j in 0..N {
            let v = u32::from_ne_bytes(row[4 * j..4 * j + 4].try_into().unwrap_or_default());
            let x = v ^ prev[j];
            prev[j] = v;
            if r > 0 {
                changed[j] |= x;
            }
            cols[j][4 * r..4 * r + 4].copy_from_slice(&x.to_ne_bytes());
        }
    }
    changed.map(|c| c != 0)
}

/// As [`column_xors`], for the last word of a payload whose length is not
/// a multiple of 4 (`to - from` bytes).
fn short_column_xors(body: &[u8], pos: &[u32], from: usize, to: usize, cols: &mut Vec<u8>) -> bool {
    let mut prev = [0u8; 4];
    let mut changed = false;
    for (i, &p) in pos.iter().enumerate() {
        let v = &body[p as usize + from..p as usize + to];
        for (k, &b) in v.iter().enumerate() {
            let x = b ^ prev[k];
            changed |= i > 0 && x != 0;
            cols.push(x);
            prev[k] = b;
        }
    }
    changed
}
