//! Unpacking (FORMAT.md §8.2): the body rebuilt from the five streams.
//!
//! Why it is laid out this way: the XOR values are taken out of `lens` and
//! `xor` ahead of the records, a chunk at a time, into fixed-width words
//! ([`Xors`]). The loop that rebuilds a payload then reads one `u64` per
//! word, with its bounds checked once per payload, instead of following
//! two stream positions with a check per word, in the unpacking's hottest
//! loop (before and after: docs/benchmarks.md, "kpack version 2").

use super::{
    extent, from_canonical, has_len_word, put_word, unzigzag, whole_word, word, Predictor, Shape,
    UnpackError, HEADER_LEN, STREAM_NAMES, VERSION, VERSION_1,
};
use kmemtrace_kernel::{BigEndian, Endian, LittleEndian};
use std::fmt;

/// A stream being read back.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
    pub(super) name: &'static str,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], UnpackError> {
        let end = self.at.checked_add(n);
        let s = end
            .and_then(|end| self.b.get(self.at..end))
            .ok_or(UnpackError::Damaged(self.name))?;
        self.at += n;
        Ok(s)
    }
    #[inline]
    pub(super) fn byte(&mut self) -> Result<u8, UnpackError> {
        let b = *self.b.get(self.at).ok_or(UnpackError::Damaged(self.name))?;
        self.at += 1;
        Ok(b)
    }
    #[inline]
    pub(super) fn varint(&mut self) -> Result<u64, UnpackError> {
        let b = self.byte()?;
        if b < 0x80 {
            return Ok(u64::from(b));
        }
        let mut v = u64::from(b & 0x7f);
        for shift in (7..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(UnpackError::Damaged(self.name))
    }
    /// A byte that is 0 or 1.
    #[inline]
    pub(super) fn flag(&mut self) -> Result<bool, UnpackError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(UnpackError::Damaged(self.name)),
        }
    }
    pub(super) fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// `MASKS[k]`: the low `k` bytes of a u64, for every length a half of a
/// `lens` byte can hold (9..15 are damage, refused before use; sixteen
/// entries let the index go unchecked).
const MASKS: [u64; 16] = {
    let mut m = [0u64; 16];
    let mut k = 1;
    while k < 16 {
        m[k] = if k < 8 {
            u64::MAX >> (64 - 8 * k)
        } else {
            u64::MAX
        };
        k += 1;
    }
    m
};

/// Words' XOR values taken out of a chunk at a time: as many as fit in a
/// quarter of L1 (a payload longer than that gets its own).
const CHUNK: usize = 2048;

/// The XOR values of the words ahead: `lens` (two lengths a byte) and
/// `xor` (that many bytes each, least significant first) read into one
/// `u64` a word.
struct Xors<'a> {
    lens: &'a [u8],
    xor: &'a [u8],
    /// `lens` bytes read so far.
    lens_read: usize,
    /// `xor` bytes the values read so far took.
    xor_read: usize,
    /// Values read; `vals[taken..]` not yet handed out.
    vals: Vec<u64>,
    taken: usize,
    /// Values handed out over the whole body: the `lens` halves used.
    words_used: usize,
    /// Why reading stopped before the end of `lens`, if it did.
    damage: Option<&'static str>,
}

impl<'a> Xors<'a> {
    fn new(lens: &'a [u8], xor: &'a [u8], vals: Vec<u64>) -> Self {
        Xors {
            lens,
            xor,
            lens_read: 0,
            xor_read: 0,
            vals,
            taken: 0,
            words_used: 0,
            damage: None,
        }
    }

    /// The values of the next `n` words.
    #[inline]
    fn take(&mut self, n: usize) -> Result<&[u64], UnpackError> {
        if self.vals.len() - self.taken < n {
            self.read_ahead(n);
            if self.vals.len() < n {
                return Err(UnpackError::Damaged(self.damage.unwrap_or("lens")));
            }
        }
        let vals = &self.vals[self.taken..self.taken + n];
        self.taken += n;
        self.words_used += n;
        Ok(vals)
    }

    /// Reads values until `want` (or a chunk, if more) are waiting, or the
    /// streams end or fail.
    #[cold]
    fn read_ahead(&mut self, want: usize) {
        self.vals.drain(..self.taken);
        self.taken = 0;
        let (lens, xor) = (self.lens, self.xor);
        let (mut li, mut xi) = (self.lens_read, self.xor_read);
        // Two values a `lens` byte, written in place (no `push`, no
        // check of room per value).
        let start = self.vals.len();
        let pairs = (want.max(CHUNK).saturating_sub(start).div_ceil(2)).min(lens.len() - li);
        self.vals.resize(start + 2 * pairs, 0);
        let mut written = 0;
        for (v, &b) in self.vals[start..].chunks_exact_mut(2).zip(&lens[li..]) {
            let (k0, k1) = (usize::from(b & 15), usize::from(b >> 4));
            // A length above 8: bit 3 set with any bit below it.
            if b & 0x88 != 0 && (k0 > 8 || k1 > 8) {
                self.damage = Some("xor");
                break;
            }
            // While 16 bytes of `xor` are left, each value is one 8-byte
            // load, masked; the last ones are copied.
            if let Some(x) = xor.get(xi..xi + 16) {
                let lo = u64::from_le_bytes(x[..8].try_into().unwrap_or_default());
                let hi = u64::from_le_bytes(x[k0..k0 + 8].try_into().unwrap_or_default());
                v[0] = lo & MASKS[k0];
                v[1] = hi & MASKS[k1];
            } else {
                let tail = |at: usize, k: usize| {
                    let b = xor.get(at..at + k)?;
                    let mut a = [0u8; 8];
                    a[..k].copy_from_slice(b);
                    Some(u64::from_le_bytes(a))
                };
                // The high half of the last byte may be unused (then 0,
                // checked at the end): its value is read as 0 bytes.
                let (Some(lo), Some(hi)) = (tail(xi, k0), tail(xi + k0, k1)) else {
                    self.damage = Some("xor");
                    break;
                };
                (v[0], v[1]) = (lo, hi);
            }
            xi += k0 + k1;
            li += 1;
            written += 2;
        }
        self.vals.truncate(start + written);
        (self.lens_read, self.xor_read) = (li, xi);
    }

    /// Whether the values handed out used up both streams exactly: every
    /// `lens` byte (an unused last high half 0) and every `xor` byte.
    fn done(&self) -> bool {
        let w = self.words_used;
        let lens_done = w.div_ceil(2) == self.lens.len()
            && (w.is_multiple_of(2) || self.lens.last().is_some_and(|b| b >> 4 == 0));
        // Then every `lens` byte was read, the unused half as 0 bytes.
        lens_done && self.lens_read == self.lens.len() && self.xor_read == self.xor.len()
    }
}

/// Rebuilds `cur`, bytes `from..to` of a payload being rebuilt (`from` a
/// multiple of `W`), from the words' XOR values `xs` (one for each word
/// from `from / W` on) and the predicted payload at `before[pred..]`.
/// Returns the value of the first word when it is whole (else 0), from a
/// register: the next guess is keyed by it, and reading it back from
/// `cur` would wait for the store.
#[inline(always)]
fn unxor<E: Endian, const W: usize>(
    e: E,
    before: &[u8],
    pred: Option<usize>,
    cur: &mut [u8],
    xs: &[u64],
    (from, to): (usize, usize),
) -> Result<u64, UnpackError> {
    let cur = &mut cur[from..to];
    let xs = &xs[from / W..];
    // A value too wide for its word: on whole words, any bit above `W`
    // bytes in any of them (gathered, checked once).
    let mut above = 0u64;
    let mut first = None;
    let mut chunks = cur.chunks_exact_mut(W);
    match pred {
        Some(o) => {
            // The prediction is an earlier payload as long as this one.
            let old = before
                .get(o + from..o + to)
                .ok_or(UnpackError::Damaged("prediction"))?;
            let mut olds = old.chunks_exact(W);
            for ((c, o), &x) in chunks.by_ref().zip(olds.by_ref()).zip(xs) {
                above |= x;
                let v = whole_word::<E, W>(e, o) ^ x;
                first.get_or_insert(v);
                put_word(e, v, c);
            }
            let (c, o) = (chunks.into_remainder(), olds.remainder());
            if !c.is_empty() {
                put_part(e, c, word(e, o) ^ xs[(to - from) / W])?;
            }
        }
        None => {
            for (c, &x) in chunks.by_ref().zip(xs) {
                above |= x;
                first.get_or_insert(x);
                put_word(e, x, c);
            }
            let c = chunks.into_remainder();
            if !c.is_empty() {
                put_part(e, c, xs[(to - from) / W])?;
            }
        }
    }
    if above.checked_shr(8 * W as u32).unwrap_or(0) != 0 {
        return Err(UnpackError::Damaged("xor"));
    }
    Ok(first.unwrap_or(0))
}

/// Writes the last, partial word of a payload: `v` must fit it.
#[inline]
fn put_part<E: Endian>(e: E, c: &mut [u8], v: u64) -> Result<(), UnpackError> {
    if v >> (8 * c.len()) != 0 {
        return Err(UnpackError::Damaged("xor"));
    }
    put_word(e, v, c);
    Ok(())
}

/// Rebuilds CPU_DATA payloads from their packed form.
pub struct Unpacker {
    columns: super::columns::ColumnUnpacker,
    predict: Predictor,
    /// The room [`Xors`] reads values into, kept from block to block.
    vals: Vec<u64>,
}

impl Default for Unpacker {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Unpacker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Unpacker")
    }
}

impl Unpacker {
    pub fn new() -> Self {
        Unpacker {
            columns: Default::default(),
            predict: Predictor::new(),
            vals: Vec::with_capacity(CHUNK),
        }
    }

    /// Rebuilds into `out` (exactly the payload's length) the payload
    /// `packed` was made from: its first `head` bytes are `packed`'s own.
    pub fn unpack(
        &mut self,
        packed: &[u8],
        head: usize,
        out: &mut [u8],
    ) -> Result<(), UnpackError> {
        if packed.len() < head || out.len() < head {
            return Err(UnpackError::Damaged("head"));
        }
        let (kept, rest) = packed.split_at(head);
        let (out_head, body) = out.split_at_mut(head);
        out_head.copy_from_slice(kept);
        let h = rest
            .get(..HEADER_LEN)
            .ok_or(UnpackError::Damaged("header"))?;
        if h[0] != VERSION && h[0] != VERSION_1 {
            return Err(UnpackError::Version(h[0]));
        }
        let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let shape = Shape::new(
            h[1] & 1 != 0,
            h[2],
            u32::from(u16::from_le_bytes([h[3], h[4]])),
            le32(5),
        )
        .filter(|_| h[1] & !1 == 0)
        .ok_or(UnpackError::Shape)?;
        if le32(9) as usize != body.len() {
            return Err(UnpackError::Damaged("body length"));
        }
        let mut lengths = Cursor {
            b: &rest[HEADER_LEN..],
            at: 0,
            name: "stream lengths",
        };
        if h[0] == VERSION {
            self.columns.unpack(shape, &mut lengths, body)?;
        } else {
            self.version1(shape, &mut lengths, body)?;
        }
        // The raw bytes come back exactly, or not at all.
        if crc32fast::hash(out) != le32(13) {
            return Err(UnpackError::Crc);
        }
        Ok(())
    }

    /// Rebuilds a version 1 body from the streams after the header.
    fn version1(
        &mut self,
        shape: Shape,
        lengths: &mut Cursor<'_>,
        body: &mut [u8],
    ) -> Result<(), UnpackError> {
        let [ctl, lens, xor, raw, times] = STREAM_NAMES;
        let ctl = next_stream(lengths, ctl)?;
        let lens = next_stream(lengths, lens)?.b;
        let xor = next_stream(lengths, xor)?.b;
        let raw = next_stream(lengths, raw)?;
        let times = next_stream(lengths, times)?;
        if !lengths.done() {
            return Err(UnpackError::Damaged("bytes after the streams"));
        }
        let mut vals = std::mem::take(&mut self.vals);
        vals.clear();
        let mut r = Rebuild {
            ctl,
            xors: Xors::new(lens, xor, vals),
            raw,
            times,
            predict: &mut self.predict,
            out: body,
            pos: 0,
            long8: shape.long_size == 8,
        };
        r.predict.reset();
        let rebuilt = if shape.big_endian {
            r.run(BigEndian, shape)
        } else {
            r.run(LittleEndian, shape)
        };
        let xors_done = r.xors.done();
        let others = [&r.ctl, &r.raw, &r.times].map(|c| (c.done(), c.name));
        self.vals = r.xors.vals;
        rebuilt?;
        if !xors_done {
            return Err(UnpackError::Damaged("lens"));
        }
        if let Some((_, name)) = others.iter().find(|(done, _)| !done) {
            return Err(UnpackError::Damaged(name));
        }
        Ok(())
    }
}

/// The next stream named in `lengths`: a u32 LE length and its bytes.
pub(super) fn next_stream<'a>(
    lengths: &mut Cursor<'a>,
    name: &'static str,
) -> Result<Cursor<'a>, UnpackError> {
    let n = u32::from_le_bytes(lengths.take(4)?.try_into().unwrap_or_default());
    Ok(Cursor {
        b: lengths.take(n as usize)?,
        at: 0,
        name,
    })
}

struct Rebuild<'a, 'o> {
    ctl: Cursor<'a>,
    xors: Xors<'a>,
    raw: Cursor<'a>,
    times: Cursor<'a>,
    predict: &'o mut Predictor,
    /// The body being rebuilt, and how much of it is.
    out: &'o mut [u8],
    pos: usize,
    /// Words of 8 bytes (64-bit kernels), else 4.
    long8: bool,
}

impl Rebuild<'_, '_> {
    /// Room for `n` more bytes of output.
    #[inline]
    fn room(&self, n: usize, what: &'static str) -> Result<(), UnpackError> {
        if self.out.len() - self.pos < n {
            return Err(UnpackError::Damaged(what));
        }
        Ok(())
    }

    fn raw(&mut self, n: usize) -> Result<(), UnpackError> {
        self.room(n, "raw")?;
        let b = self.raw.take(n)?;
        self.out[self.pos..self.pos + n].copy_from_slice(b);
        self.pos += n;
        Ok(())
    }

    fn run<E: Endian>(&mut self, e: E, shape: Shape) -> Result<(), UnpackError> {
        let size = shape.subbuf_size as usize;
        let mut prev_ts = 0u64;
        while self.out.len() - self.pos >= size {
            prev_ts = self.subbuf(e, shape, prev_ts)?;
        }
        self.raw(self.out.len() - self.pos)
    }

    fn subbuf<E: Endian>(&mut self, e: E, shape: Shape, prev_ts: u64) -> Result<u64, UnpackError> {
        let size = shape.subbuf_size as usize;
        let at = self.pos;
        if !self.ctl.flag()? {
            self.raw(size)?;
            return Ok(prev_ts);
        }
        let ts = prev_ts.wrapping_add(unzigzag(self.times.varint()?) as u64);
        put_word(e, ts, &mut self.out[at..at + 8]);
        self.pos += 8;
        let off = shape.data_offset as usize;
        self.raw(off - 8)?;
        // The commit is back: the data length comes from it as it did
        // when packing.
        let len = shape
            .data_len(e, &self.out[at..at + off])
            .ok_or(UnpackError::Damaged("commit"))?;
        self.records(e, len)?;
        let tail = size - off - len;
        if tail > 0 {
            if self.ctl.flag()? {
                self.raw(tail)?;
            } else {
                self.out[self.pos..self.pos + tail].fill(0);
                self.pos += tail;
            }
        }
        Ok(ts)
    }

    fn records<E: Endian>(&mut self, e: E, len: usize) -> Result<(), UnpackError> {
        let end = self.pos + len;
        while self.pos < end {
            let v = self.ctl.varint()?;
            if v == 0 {
                return self.raw(end - self.pos);
            }
            let w = u32::try_from(v - 1).map_err(|_| UnpackError::Damaged("ctl"))?;
            let n = if has_len_word(w) {
                u32::try_from(self.ctl.varint()?).map_err(|_| UnpackError::Damaged("ctl"))?
            } else {
                0
            };
            let ext = extent(w, n, end - self.pos).ok_or(UnpackError::Damaged("record"))?;
            if ext.head > ext.total {
                return Err(UnpackError::Damaged("record"));
            }
            let p = self.pos;
            put_word(e, u64::from(from_canonical(e, w)), &mut self.out[p..p + 4]);
            if ext.head == 8 {
                put_word(e, u64::from(n), &mut self.out[p + 4..p + 8]);
            }
            self.pos += ext.head;
            let body = ext.total - ext.head;
            if ext.data {
                if self.long8 {
                    self.payload::<E, 8>(e, body)?;
                } else {
                    self.payload::<E, 4>(e, body)?;
                }
            } else {
                self.raw(body)?;
            }
        }
        Ok(())
    }

    /// An event payload, as `Packer::pack_payload` made it: the common
    /// fields (8 bytes), the first field (`W`), the rest, each with the
    /// guess made before it.
    #[inline]
    fn payload<E: Endian, const W: usize>(&mut self, e: E, len: usize) -> Result<(), UnpackError> {
        self.room(len, "payload")?;
        let at = self.pos;
        let xs = self.xors.take(len.div_ceil(W))?;
        let (before, rest) = self.out.split_at_mut(at);
        let cur = &mut rest[..len];
        let p = &mut *self.predict;
        let mut g = p.start(len);
        let word0 = unxor::<E, W>(e, before, g.pred, cur, xs, (0, len.min(8)))?;
        if len > 8 {
            // The type: the first two bytes, the top of word 0 on
            // big-endian kernels.
            let ty = if e.is_big_endian() {
                word0 >> (8 * W - 16)
            } else {
                word0 & 0xffff
            };
            p.by_type_of(&mut g, ty << 32 | len as u64);
            let site = unxor::<E, W>(e, before, g.pred, cur, xs, (8, len.min(8 + W)))?;
            // The rest, if any (none: no guess by call site, as when
            // packing).
            if len > 8 + W {
                p.by_site_of(&mut g, site);
                unxor::<E, W>(e, before, g.pred, cur, xs, (8 + W, len))?;
            }
        }
        self.pos += len;
        self.predict.learn(e, &g, self.out, at, len);
        Ok(())
    }
}
