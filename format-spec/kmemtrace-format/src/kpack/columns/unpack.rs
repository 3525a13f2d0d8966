//! Unpacking (FORMAT.md §8.3): a version 2 body rebuilt in two passes,
//! one over the records, one down each group's rows.

use super::{columns, is_constant, record, Groups, Kind, BAND, MAX_GROUPS, STREAM_NAMES};
use crate::kpack::unpack::{next_stream, Cursor};
use crate::kpack::{Shape, UnpackError};
use kmemtrace_kernel::{BigEndian, Endian, LittleEndian, RecordHeader, RecordShape};

/// Rebuilds version 2 bodies; keeps its vectors from block to block.
#[derive(Default)]
pub struct ColumnUnpacker {
    groups: Groups,
    /// Zero bytes that constant columns are read from (only grown).
    zeros: Vec<u8>,
}

/// The words of [`super::planes`] being read back.
struct Planes<'a> {
    planes: [&'a [u8]; 4],
    at: usize,
}

impl<'a> Planes<'a> {
    /// `b` is four planes of equal length (checked by the caller).
    fn new(b: &'a [u8]) -> Self {
        let n = b.len() / 4;
        Planes {
            planes: std::array::from_fn(|k| &b[k * n..k * n + n]),
            at: 0,
        }
    }

    #[inline(always)]
    fn word(&mut self) -> Result<[u8; 4], UnpackError> {
        let i = self.at;
        let [p0, p1, p2, p3] = self.planes;
        let (Some(&a), Some(&b), Some(&c), Some(&d)) = (p0.get(i), p1.get(i), p2.get(i), p3.get(i))
        else {
            return Err(UnpackError::Damaged("rec"));
        };
        self.at = i + 1;
        Ok([a, b, c, d])
    }

    fn done(&self) -> bool {
        self.at == self.planes[0].len()
    }
}

/// The streams of a version 2 body being read.
struct Streams<'a> {
    ctl: Cursor<'a>,
    heads: Cursor<'a>,
    rec: Planes<'a>,
    keys: Cursor<'a>,
    raw: Cursor<'a>,
    /// Bytes a key: 2 where the block has more than 256 groups, else 1.
    key_width: usize,
}

impl ColumnUnpacker {
    /// Rebuilds `out` (the whole body) from the streams after the header.
    pub fn unpack(
        &mut self,
        shape: Shape,
        lengths: &mut Cursor<'_>,
        out: &mut [u8],
    ) -> Result<(), UnpackError> {
        let [ctl, heads, rec, keys, groups, raw, cols] = STREAM_NAMES;
        let ctl = next_stream(lengths, ctl)?;
        let heads = next_stream(lengths, heads)?;
        let rec_planes = next_stream(lengths, rec)?;
        if rec_planes.b.len() % 4 != 0 {
            return Err(UnpackError::Damaged("rec"));
        }
        let rec = Planes::new(rec_planes.b);
        let keys = next_stream(lengths, keys)?;
        let mut groups = next_stream(lengths, groups)?;
        let raw = next_stream(lengths, raw)?;
        let mut cols = next_stream(lengths, cols)?;
        if !lengths.done() {
            return Err(UnpackError::Damaged("bytes after the streams"));
        }
        self.groups.clear();
        let count = usize::try_from(groups.varint()?).unwrap_or(usize::MAX);
        if count > MAX_GROUPS {
            return Err(UnpackError::Damaged("groups"));
        }
        let mut constants = Vec::with_capacity(count);
        for _ in 0..count {
            let len = u32::try_from(groups.varint()?)
                .ok()
                .filter(|&l| l <= shape.subbuf_size)
                .ok_or(UnpackError::Damaged("groups"))?;
            self.groups.add(len);
            constants.push(groups.take(columns(len as usize).div_ceil(8))?);
        }
        if !groups.done() {
            return Err(UnpackError::Damaged("groups"));
        }
        // Room for each group's rows, counted from the keys the walk reads.
        let key_width = if count > 256 { 2 } else { 1 };
        if keys.b.len() % key_width != 0
            || !self
                .groups
                .count_rows(keys.b.chunks_exact(key_width).map(key_id))
        {
            return Err(UnpackError::Damaged("keys"));
        }
        let mut s = Streams {
            ctl,
            heads,
            rec,
            keys,
            raw,
            key_width,
        };
        if shape.big_endian {
            self.walk(BigEndian, shape, &mut s, out)?;
        } else {
            self.walk(LittleEndian, shape, &mut s, out)?;
        }
        for c in [&s.ctl, &s.heads, &s.keys, &s.raw] {
            if !c.done() {
                return Err(UnpackError::Damaged(c.name));
            }
        }
        if !s.rec.done() {
            return Err(UnpackError::Damaged("rec"));
        }
        for (g, constant) in self.groups.live().iter().zip(constants) {
            let pos = self.groups.rows(g);
            // The packer makes no empty group.
            if pos.is_empty() {
                return Err(UnpackError::Damaged("groups"));
            }
            fill_columns(
                g.len as usize,
                pos,
                constant,
                &mut cols,
                &mut self.zeros,
                out,
            )?;
        }
        if !cols.done() {
            return Err(UnpackError::Damaged("cols"));
        }
        Ok(())
    }

    /// The first pass: sub-buffer headers, record headers and raw bytes
    /// back in place, and where each group's payloads go.
    fn walk<E: Endian>(
        &mut self,
        e: E,
        shape: Shape,
        s: &mut Streams<'_>,
        out: &mut [u8],
    ) -> Result<(), UnpackError> {
        let size = shape.subbuf_size as usize;
        let off = shape.data_offset as usize;
        let mut at = 0;
        while out.len() - at >= size {
            let page = &mut out[at..at + size];
            if !s.ctl.flag()? {
                page.copy_from_slice(s.raw.take(size)?);
                at += size;
                continue;
            }
            page[..off].copy_from_slice(s.heads.take(off)?);
            let len = shape
                .data_len(e, page)
                .ok_or(UnpackError::Damaged("commit"))?;
            let unwalked = usize::try_from(s.ctl.varint()?)
                .ok()
                .filter(|&u| u <= len)
                .ok_or(UnpackError::Damaged("ctl"))?;
            let walked = len - unwalked;
            self.records(e, s, &mut page[off..off + walked], (at + off) as u32)?;
            page[off + walked..off + len].copy_from_slice(s.raw.take(unwalked)?);
            let tail = &mut page[off + len..];
            if !tail.is_empty() {
                if s.ctl.flag()? {
                    tail.copy_from_slice(s.raw.take(tail.len())?);
                } else {
                    tail.fill(0);
                }
            }
            at += size;
        }
        let rest = out.len() - at;
        out[at..].copy_from_slice(s.raw.take(rest)?);
        Ok(())
    }

    /// A payload of `len` bytes at `at` in the body: where its group's
    /// next row goes.
    #[inline(always)]
    fn payload_at(&mut self, s: &mut Streams<'_>, at: u32, len: usize) -> Result<(), UnpackError> {
        // A byte key read as a byte: most blocks have them, and this is
        // the walk's innermost loop, where the general read shows.
        let id = if s.key_width == 1 {
            usize::from(s.keys.byte()?)
        } else {
            key_id(s.keys.take(s.key_width)?)
        };
        self.groups
            .live()
            .get(id)
            .filter(|g| g.len as usize == len)
            .ok_or(UnpackError::Damaged("keys"))?;
        self.groups.put(id, at);
        Ok(())
    }

    /// The records of one walked data area, `data`, which starts at `base`
    /// in the body.
    fn records<E: Endian>(
        &mut self,
        e: E,
        s: &mut Streams<'_>,
        data: &mut [u8],
        base: u32,
    ) -> Result<(), UnpackError> {
        let mut q = 0;
        let end = data.len();
        while q < end {
            // The header word, and the length word after it if it has one
            // (copies of a fixed size: no call to memcpy).
            let w = s.rec.word()?;
            // Most records: a payload of 4..112 bytes after the header word.
            let header = RecordHeader::decode(e, e.u32_from(w));
            if let RecordShape::Data { len } = header.shape() {
                let total = 4 + len;
                if end - q < total {
                    return Err(UnpackError::Damaged("record"));
                }
                data[q..q + 4].copy_from_slice(&w);
                self.payload_at(s, base + (q + 4) as u32, total - 4)?;
                q += total;
                continue;
            }
            data.get_mut(q..q + 4)
                .ok_or(UnpackError::Damaged("record"))?
                .copy_from_slice(&w);
            if header.has_len_word() {
                let n = s.rec.word()?;
                data.get_mut(q + 4..q + 8)
                    .ok_or(UnpackError::Damaged("record"))?
                    .copy_from_slice(&n);
            }
            let (head, total, kind) = record(e, &data[q..end.min(q + 8)], end - q)
                .ok_or(UnpackError::Damaged("record"))?;
            match kind {
                Kind::Payload(n) => self.payload_at(s, base + (q + head) as u32, n)?,
                Kind::Time => data[q + 4..q + 8].copy_from_slice(&s.rec.word()?),
                Kind::Padding(n) => data[q + head..q + total].copy_from_slice(s.raw.take(n)?),
            }
            q += total;
        }
        Ok(())
    }
}

/// The next 4 bytes of `c`.
#[inline(always)]
fn word4(c: &mut Cursor<'_>) -> Result<[u8; 4], UnpackError> {
    Ok(c.take(4)?.try_into().unwrap_or_default())
}

/// The group id of one key: a byte, or a little-endian u16 where a block
/// has more than 256 groups.
#[inline]
fn key_id(k: &[u8]) -> usize {
    match k {
        [a] => usize::from(*a),
        [a, b, ..] => usize::from(u16::from_le_bytes([*a, *b])),
        [] => 0,
    }
}

/// The second pass for one group: its payloads' words, row by row. A
/// column that does not change is read as its value XORed with zeros, so
/// that every column takes the same loop ([`rows_in_bands`]).
fn fill_columns(
    len: usize,
    pos: &[u32],
    constant: &[u8],
    cols: &mut Cursor<'_>,
    zeros: &mut Vec<u8>,
    out: &mut [u8],
) -> Result<(), UnpackError> {
    let rows = pos.len();
    if zeros.len() < 4 * rows {
        zeros.resize(4 * rows, 0);
    }
    let zeros = &zeros[..4 * rows];
    let whole = len / 4;
    // Each whole column's XORs and first value: on the stack up to
    // `UNROLLED` columns (nearly every group), else on the heap.
    let mut xors_here: [&[u8]; UNROLLED] = [&[]; UNROLLED];
    let mut first_here = [0u32; UNROLLED];
    let (mut xors_heap, mut first_heap) = (Vec::new(), Vec::new());
    let (xors, first): (&mut [&[u8]], &mut [u32]) = if whole <= UNROLLED {
        (&mut xors_here[..whole], &mut first_here[..whole])
    } else {
        xors_heap.resize(whole, &[][..]);
        first_heap.resize(whole, 0);
        (&mut xors_heap, &mut first_heap)
    };
    for j in 0..whole {
        if is_constant(constant, j) {
            first[j] = u32::from_ne_bytes(word4(cols)?);
            xors[j] = zeros;
        } else {
            xors[j] = cols.take(4 * rows)?;
        }
    }
    rows_in_bands(xors, first, pos, out);
    if !len.is_multiple_of(4) {
        short_column(
            pos,
            4 * whole,
            len % 4,
            is_constant(constant, whole),
            cols,
            out,
        )?;
    }
    Ok(())
}

/// The last, short column (`width` bytes at `from`) of payloads whose
/// length is not a multiple of 4.
fn short_column(
    pos: &[u32],
    from: usize,
    width: usize,
    constant: bool,
    cols: &mut Cursor<'_>,
    out: &mut [u8],
) -> Result<(), UnpackError> {
    let rows = pos.len();
    let xs = cols.take(if constant { width } else { width * rows })?;
    let mut acc = [0u8; 4];
    for (r, &p) in pos.iter().enumerate() {
        if !constant || r == 0 {
            for (a, x) in acc.iter_mut().zip(&xs[width * r..width * r + width]) {
                *a ^= x;
            }
        }
        let at = p as usize + from;
        out[at..at + width].copy_from_slice(&acc[..width]);
    }
    Ok(())
}

/// Column counts whose XORs and first values are kept on the stack.
const UNROLLED: usize = 48;

/// Writes each payload's whole columns (`xors.len()` of them) at `pos`,
/// a band of [`BAND`] columns at a time.
fn rows_in_bands(xors: &[&[u8]], first: &[u32], pos: &[u32], out: &mut [u8]) {
    let whole = xors.len();
    for from in (0..whole).step_by(BAND) {
        let (xors, first) = (&xors[from..], &first[from..]);
        macro_rules! band {
            ($($n:literal)*) => {
                match whole - from {
                    $($n => rows_of::<$n>(xors, first, pos, 4 * from, out),)*
                    _ => rows_of::<BAND>(xors, first, pos, 4 * from, out),
                }
            };
        }
        band!(1 2 3 4 5 6 7);
    }
}

/// Writes `N` words at byte `from` of each payload at `pos`: word `j` of
/// row `r` is `first[j]` XORed with `xors[j]`'s words up to `r`.
#[inline(never)]
fn rows_of<const N: usize>(
    xors: &[&[u8]],
    first: &[u32],
    pos: &[u32],
    from: usize,
    out: &mut [u8],
) {
    let xors: [&[u8]; N] = std::array::from_fn(|j| xors[j]);
    let mut acc: [u32; N] = std::array::from_fn(|j| first[j]);
    for (r, &p) in pos.iter().enumerate() {
        let at = p as usize + from;
        let row = &mut out[at..at + 4 * N];
        for j in 0..N {
            let x: [u8; 4] = xors[j][4 * r..4 * r + 4].try_into().unwrap_or_default();
            acc[j] ^= u32::from_ne_bytes(x);
            row[4 * j..4 * j + 4].copy_from_slice(&acc[j].to_ne_bytes());
        }
    }
}
