//! kpack: a reversible, record-aware transform of a CPU_DATA payload, the
//! candidate first stage of a cheaper codec (issue 15). The probe puts
//! zstd behind it as the entropy stage and measures both.
//!
//! Why: a general compressor spends most of its time finding again, in
//! every record, the bytes the previous record of the same kind already
//! had (the common fields, the call site, the size, the GFP flags, the
//! pointer's upper bytes). kpack walks the ring-buffer records and replaces
//! each 8-byte word of a payload by its XOR with the same word of a
//! predicted earlier record, keeping only the bytes of the XOR up to its
//! highest non-zero one. What is left is a fifth to a third of the input,
//! and the entropy stage runs over that much less.
//!
//! The prediction for a payload of length `L` (all choices depend only on
//! bytes already known to the decoder, so both sides make the same):
//! - word 0 (`common_type`, flags, preempt count, pid): the previous
//!   payload of length `L`;
//! - word 1 (the first field: the call site of the slab events): the
//!   previous payload of the same type and length;
//! - the other words: the previous payload of the same type, length and
//!   word 1 (for a slab event, the previous event of its call site: same
//!   sizes, same flags, a nearby pointer), else as word 1.
//!
//! Anything that is not a well-formed sub-buffer (a commit beyond the
//! page, a record across the end of the data) is carried as raw bytes: the
//! transform is exact for every input, not only for valid ring buffers.
//! The block's CRC covers the stored bytes, and the reader compares the
//! unpacked length with the block header's.

use std::fmt;

/// First byte of a packed payload.
const VERSION: u8 = 1;
/// Bytes before the streams: version, flags, long size, data offset,
/// sub-buffer size, payload length, head length.
const HEADER_LEN: usize = 17;
/// Streams, in this order after the header, each as a u32 LE length and
/// its bytes.
const STREAMS: usize = 5;

/// The byte order and sub-buffer geometry the transform reads records with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub big_endian: bool,
    /// `sizeof(long)` of the recorded kernel: the size of `commit`.
    pub long_size: u8,
    /// Offset of the data area in a sub-buffer (`8 + long_size`).
    pub data_offset: u16,
    pub subbuf_size: u32,
}

impl Shape {
    fn u32_at(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    /// The numeric value of up to 8 bytes in the log's byte order.
    #[inline]
    fn word(&self, b: &[u8]) -> u64 {
        if let Ok(a) = <[u8; 8]>::try_from(b) {
            return if self.big_endian {
                u64::from_be_bytes(a)
            } else {
                u64::from_le_bytes(a)
            };
        }
        let mut a = [0u8; 8];
        if self.big_endian {
            a[8 - b.len()..].copy_from_slice(b);
            u64::from_be_bytes(a)
        } else {
            a[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(a)
        }
    }

    fn put_word(&self, v: u64, out: &mut [u8]) {
        let n = out.len();
        if self.big_endian {
            out.copy_from_slice(&v.to_be_bytes()[8 - n..]);
        } else {
            out.copy_from_slice(&v.to_le_bytes()[..n]);
        }
    }

    /// Length of the data in the sub-buffer at `page`, if it fits.
    /// `header` holds at least the sub-buffer's first `data_offset` bytes.
    fn data_len(&self, header: &[u8]) -> Option<usize> {
        let off = self.data_offset as usize;
        let ls = self.long_size as usize;
        let size = self.subbuf_size as usize;
        if !(ls == 4 || ls == 8) || off < 8 + ls || off > size || header.len() < off {
            return None;
        }
        let commit = self.word(&header[8..8 + ls]) & kmemtrace_format::subbuf::COMMIT_LEN_MASK;
        let len = usize::try_from(commit).ok()?;
        (len <= size - off).then_some(len)
    }
}

/// Why a packed payload cannot be unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnpackError {
    Version(u8),
    /// A stream ended early or a length does not fit.
    Truncated(&'static str),
}

impl fmt::Display for UnpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(v) => write!(f, "kpack version {v} is not known"),
            Self::Truncated(what) => write!(f, "kpack stream damaged ({what})"),
        }
    }
}
impl std::error::Error for UnpackError {}

/// Where earlier payloads are, for predicting the next; offsets into the
/// payload being packed (or the one being rebuilt).
struct Predictor {
    /// By payload length / 4 (lengths up to 4 KiB).
    by_len: Vec<u32>,
    /// By (type, length): hashed, the key kept to check.
    by_type: Vec<(u32, u32)>,
    /// By (type, length, word 1).
    by_site: Vec<(u64, u32, u32)>,
}

const BY_TYPE: usize = 1 << 10;
const BY_SITE: usize = 1 << 12;

impl Predictor {
    fn new() -> Self {
        Predictor {
            by_len: vec![0; 1025],
            by_type: vec![(0, 0); BY_TYPE],
            by_site: vec![(0, 0, 0); BY_SITE],
        }
    }
    fn reset(&mut self) {
        self.by_len.fill(0);
        self.by_type.fill((0, 0));
        self.by_site.fill((0, 0, 0));
    }
    /// Offsets are stored plus one: 0 is "none".
    fn len_slot(len: usize) -> Option<usize> {
        (len % 4 == 0 && len / 4 < 1025).then_some(len / 4)
    }
    fn type_key(ty: u16, len: usize) -> u32 {
        (u32::from(ty) << 16) | (len as u32 & 0xffff)
    }
    fn type_slot(key: u32) -> usize {
        (key.wrapping_mul(0x9e37_79b1) >> 22) as usize
    }
    fn site_slot(key: u32, w1: u64) -> usize {
        let h = (w1 ^ u64::from(key).rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 52) as usize
    }
    fn by_len(&self, len: usize) -> Option<usize> {
        let s = Self::len_slot(len)?;
        self.by_len[s].checked_sub(1).map(|o| o as usize)
    }
    fn by_type(&self, key: u32) -> Option<usize> {
        let (k, o) = self.by_type[Self::type_slot(key)];
        (o != 0 && k == key).then(|| o as usize - 1)
    }
    fn by_site(&self, key: u32, w1: u64) -> Option<usize> {
        let (w, k, o) = self.by_site[Self::site_slot(key, w1)];
        (o != 0 && k == key && w == w1).then(|| o as usize - 1)
    }
    fn learn(&mut self, len: usize, key: u32, w1: Option<u64>, at: usize) {
        let o = at as u32 + 1;
        if let Some(s) = Self::len_slot(len) {
            self.by_len[s] = o;
        }
        self.by_type[Self::type_slot(key)] = (key, o);
        if let Some(w1) = w1 {
            self.by_site[Self::site_slot(key, w1)] = (w1, key, o);
        }
    }
}

/// The streams a packed payload is made of.
#[derive(Default)]
struct Streams {
    /// Per sub-buffer and per record: kinds, header words, lengths (varints).
    ctl: Vec<u8>,
    /// Per payload word: 0 when it equals its prediction, else the number
    /// of XOR bytes kept (1..=8).
    lens: Vec<u8>,
    /// The kept XOR bytes, least significant first.
    xor: Vec<u8>,
    /// Bytes carried as they are: sub-buffer headers, unparsed data, tails.
    raw: Vec<u8>,
    /// Sub-buffers' timestamps, as differences (zigzag varints).
    times: Vec<u8>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Packs a CPU_DATA payload (a `head` of `head` bytes, then sub-buffers).
pub struct Packer {
    shape: Shape,
    predict: Predictor,
    s: Streams,
}

impl Packer {
    pub fn new(shape: Shape) -> Self {
        Packer {
            shape,
            predict: Predictor::new(),
            s: Streams::default(),
        }
    }

    /// Appends the packed form of `payload` to `out`.
    pub fn pack(&mut self, payload: &[u8], head: usize, out: &mut Vec<u8>) {
        self.predict.reset();
        let s = &mut self.s;
        for v in [
            &mut s.ctl,
            &mut s.lens,
            &mut s.xor,
            &mut s.raw,
            &mut s.times,
        ] {
            v.clear();
        }
        let head = head.min(payload.len());
        self.s.raw.extend_from_slice(&payload[..head]);
        let size = self.shape.subbuf_size as usize;
        let mut at = head;
        let mut prev_ts = 0u64;
        if size > 0 {
            while payload.len() - at >= size {
                prev_ts = self.pack_subbuf(payload, at, prev_ts);
                at += size;
            }
        }
        self.s.raw.extend_from_slice(&payload[at..]);
        let sh = self.shape;
        out.push(VERSION);
        out.push(u8::from(sh.big_endian));
        out.push(sh.long_size);
        out.extend_from_slice(&sh.data_offset.to_le_bytes());
        out.extend_from_slice(&sh.subbuf_size.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&(head as u32).to_le_bytes());
        let s = &self.s;
        for v in [&s.ctl, &s.lens, &s.xor, &s.raw, &s.times] {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }

    /// One sub-buffer at `payload[at..]`; returns its timestamp.
    fn pack_subbuf(&mut self, payload: &[u8], at: usize, prev_ts: u64) -> u64 {
        let size = self.shape.subbuf_size as usize;
        let page = &payload[at..at + size];
        let Some(len) = self.shape.data_len(page) else {
            self.s.ctl.push(0);
            self.s.raw.extend_from_slice(page);
            return prev_ts;
        };
        self.s.ctl.push(1);
        let ts = self.shape.word(&page[..8]);
        let d = ts.wrapping_sub(prev_ts) as i64;
        put_varint(&mut self.s.times, ((d << 1) ^ (d >> 63)) as u64);
        let off = self.shape.data_offset as usize;
        self.s.raw.extend_from_slice(&page[8..off]);
        self.pack_records(payload, at + off, len);
        let tail = &page[off + len..];
        if tail.iter().all(|&b| b == 0) {
            self.s.ctl.push(0);
        } else {
            self.s.ctl.push(1);
            self.s.raw.extend_from_slice(tail);
        }
        ts
    }

    /// The records of one data area, `payload[start..start + len]`.
    fn pack_records(&mut self, payload: &[u8], start: usize, len: usize) {
        let end = start + len;
        let mut q = start;
        while q < end {
            let Some(ext) = extent_at(&self.shape, &payload[q..end]) else {
                // Not a record this walk understands: the rest as it is.
                put_varint(&mut self.s.ctl, 0);
                self.s.raw.extend_from_slice(&payload[q..end]);
                return;
            };
            let w = self.shape.u32_at(&payload[q..]);
            put_varint(&mut self.s.ctl, u64::from(w) + 1);
            if ext.word2 {
                put_varint(
                    &mut self.s.ctl,
                    u64::from(self.shape.u32_at(&payload[q + 4..])),
                );
            }
            let body = q + ext.head..q + ext.total;
            if ext.data {
                self.pack_payload(payload, body.start, body.len());
            } else {
                self.s.raw.extend_from_slice(&payload[body]);
            }
            q += ext.total;
        }
    }

    fn pack_payload(&mut self, payload: &[u8], at: usize, len: usize) {
        let sh = self.shape;
        let p = &payload[at..at + len];
        let mut pred = self.predict.by_len(len);
        let mut key = 0;
        let mut w1 = None;
        for (i, chunk) in p.chunks(8).enumerate() {
            if i == 1 {
                key = Predictor::type_key(sh.word(&p[..2.min(len)]) as u16, len);
                pred = self.predict.by_type(key);
            } else if i == 2 {
                let w = sh.word(&p[8..16]);
                w1 = Some(w);
                pred = self.predict.by_site(key, w).or(pred);
            }
            let cur = sh.word(chunk);
            let old = pred.map_or(0, |o| sh.word(&payload[o + 8 * i..o + 8 * i + chunk.len()]));
            put_xor(&mut self.s, cur ^ old);
        }
        if len <= 8 {
            key = Predictor::type_key(sh.word(&p[..2.min(len)]) as u16, len);
        }
        self.predict.learn(len, key, w1, at);
    }
}

#[inline]
fn put_xor(s: &mut Streams, x: u64) {
    let n = (64 - x.leading_zeros()).div_ceil(8) as usize;
    s.lens.push(n as u8);
    // A fixed-size copy, then the unused high bytes dropped: cheaper
    // than a copy of variable length.
    let at = s.xor.len();
    s.xor.extend_from_slice(&x.to_le_bytes());
    s.xor.truncate(at + n);
}

/// How a record at the start of `data` is laid out.
struct Extent {
    /// Bytes before the body: the header word, and the length word when
    /// there is one.
    head: usize,
    total: usize,
    /// A length word follows the header word (carried in `ctl`).
    word2: bool,
    /// The body is an event payload (else carried raw).
    data: bool,
}

/// Whether a record with header word `w` has a length word after it: a
/// long event, or padding that is not the end of the data.
fn has_len_word(w: u32) -> bool {
    let type_len = w & 31;
    type_len == 0 || (type_len == 29 && w >> 5 != 0)
}

/// A record with header word `w` (and length word `n`, when it has one), as
/// the kernel's `rb_event_length` reads it; `None` when it does not fit in
/// the `room` bytes left of the data.
fn extent(w: u32, n: u32, room: usize) -> Option<Extent> {
    let type_len = w & 31;
    let e = if has_len_word(w) {
        // array[0] is the length after the header word, itself included.
        let n = n as usize;
        if n < 4 {
            return None;
        }
        Extent {
            head: 8,
            total: 4usize.checked_add(n)?,
            word2: true,
            data: type_len == 0,
        }
    } else {
        let total = match type_len {
            1..=28 => 4 + 4 * type_len as usize,
            // Padding to the end of the data.
            29 => room,
            // Time extend and absolute time stamp: one more word.
            _ => 8,
        };
        Extent {
            head: 4,
            total,
            word2: false,
            data: (1..=28).contains(&type_len),
        }
    };
    (e.total <= room && e.head <= e.total).then_some(e)
}

/// The record at the start of `data`, if it is whole.
fn extent_at(sh: &Shape, data: &[u8]) -> Option<Extent> {
    if data.len() < 4 {
        return None;
    }
    let w = sh.u32_at(data);
    let n = if has_len_word(w) {
        sh.u32_at(data.get(4..8)?)
    } else {
        0
    };
    extent(w, n, data.len())
}

/// A stream being read back.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    name: &'static str,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], UnpackError> {
        let s = self
            .b
            .get(
                self.at
                    ..self
                        .at
                        .checked_add(n)
                        .ok_or(UnpackError::Truncated(self.name))?,
            )
            .ok_or(UnpackError::Truncated(self.name))?;
        self.at += n;
        Ok(s)
    }
    fn byte(&mut self) -> Result<u8, UnpackError> {
        Ok(self.take(1)?[0])
    }
    fn varint(&mut self) -> Result<u64, UnpackError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(UnpackError::Truncated(self.name))
    }
}

/// Rebuilds payloads from their packed form.
pub struct Unpacker {
    predict: Predictor,
}

impl Unpacker {
    pub fn new() -> Self {
        Unpacker {
            predict: Predictor::new(),
        }
    }

    /// Appends the payload `packed` was made from to `out` (cleared first).
    pub fn unpack(&mut self, packed: &[u8], out: &mut Vec<u8>) -> Result<(), UnpackError> {
        out.clear();
        self.predict.reset();
        let h = packed
            .get(..HEADER_LEN)
            .ok_or(UnpackError::Truncated("header"))?;
        if h[0] != VERSION {
            return Err(UnpackError::Version(h[0]));
        }
        let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as usize;
        let sh = Shape {
            big_endian: h[1] & 1 != 0,
            long_size: h[2],
            data_offset: u16::from_le_bytes([h[3], h[4]]),
            subbuf_size: le32(5) as u32,
        };
        let (total, head) = (le32(9), le32(13));
        if total > kmemtrace_format::block::MAX_BLOCK_LEN as usize || head > total {
            return Err(UnpackError::Truncated("lengths"));
        }
        let mut rest = Cursor {
            b: &packed[HEADER_LEN..],
            at: 0,
            name: "stream lengths",
        };
        let names = ["ctl", "lens", "xor", "raw", "times"];
        let mut streams = Vec::with_capacity(STREAMS);
        for name in names {
            let n = u32::from_le_bytes(rest.take(4)?.try_into().unwrap_or_default()) as usize;
            streams.push(Cursor {
                b: rest.take(n)?,
                at: 0,
                name,
            });
        }
        let mut it = streams.into_iter();
        let mut r = Rebuild {
            sh,
            predict: &mut self.predict,
            ctl: it.next().ok_or(UnpackError::Truncated("ctl"))?,
            lens: it.next().ok_or(UnpackError::Truncated("lens"))?,
            xor: it.next().ok_or(UnpackError::Truncated("xor"))?,
            raw: it.next().ok_or(UnpackError::Truncated("raw"))?,
            times: it.next().ok_or(UnpackError::Truncated("times"))?,
            out,
        };
        r.out.reserve(total);
        r.run(total, head)
    }
}

struct Rebuild<'a, 'o> {
    sh: Shape,
    predict: &'o mut Predictor,
    ctl: Cursor<'a>,
    lens: Cursor<'a>,
    xor: Cursor<'a>,
    raw: Cursor<'a>,
    times: Cursor<'a>,
    out: &'o mut Vec<u8>,
}

impl Rebuild<'_, '_> {
    fn raw(&mut self, n: usize) -> Result<(), UnpackError> {
        let b = self.raw.take(n)?;
        self.out.extend_from_slice(b);
        Ok(())
    }

    fn run(&mut self, total: usize, head: usize) -> Result<(), UnpackError> {
        self.raw(head)?;
        let size = self.sh.subbuf_size as usize;
        let mut prev_ts = 0u64;
        if size > 0 {
            while total - self.out.len() >= size {
                prev_ts = self.subbuf(prev_ts)?;
            }
        }
        self.raw(total - self.out.len())?;
        if self.out.len() != total {
            return Err(UnpackError::Truncated("length"));
        }
        Ok(())
    }

    fn subbuf(&mut self, prev_ts: u64) -> Result<u64, UnpackError> {
        let size = self.sh.subbuf_size as usize;
        let at = self.out.len();
        if self.ctl.byte()? == 0 {
            self.raw(size)?;
            return Ok(prev_ts);
        }
        let z = self.times.varint()?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        let ts = prev_ts.wrapping_add(d as u64);
        let mut b = [0u8; 8];
        self.sh.put_word(ts, &mut b);
        self.out.extend_from_slice(&b);
        let off = self.sh.data_offset as usize;
        if off < 8 || off > size {
            return Err(UnpackError::Truncated("data offset"));
        }
        self.raw(off - 8)?;
        // The commit is back: the data length comes from it as when packing.
        let len = self
            .sh
            .data_len(&self.out[at..])
            .ok_or(UnpackError::Truncated("commit"))?;
        self.records(len)?;
        let tail = size - off - len;
        if self.ctl.byte()? == 0 {
            self.out.resize(self.out.len() + tail, 0);
        } else {
            self.raw(tail)?;
        }
        Ok(ts)
    }

    fn records(&mut self, len: usize) -> Result<(), UnpackError> {
        let end = self.out.len() + len;
        while self.out.len() < end {
            let v = self.ctl.varint()?;
            if v == 0 {
                return self.raw(end - self.out.len());
            }
            let w = u32::try_from(v - 1).map_err(|_| UnpackError::Truncated("ctl"))?;
            let mut hdr = [0u8; 8];
            self.sh.put_word(u64::from(w), &mut hdr[..4]);
            let mut n = 0;
            if has_len_word(w) {
                n = u32::try_from(self.ctl.varint()?).map_err(|_| UnpackError::Truncated("ctl"))?;
                self.sh.put_word(u64::from(n), &mut hdr[4..]);
            }
            let ext = extent(w, n, end - self.out.len()).ok_or(UnpackError::Truncated("record"))?;
            self.out.extend_from_slice(&hdr[..ext.head]);
            let body = ext.total - ext.head;
            if ext.data {
                self.payload(body)?;
            } else {
                self.raw(body)?;
            }
        }
        Ok(())
    }

    fn payload(&mut self, len: usize) -> Result<(), UnpackError> {
        let sh = self.sh;
        let at = self.out.len();
        let mut pred = self.predict.by_len(len);
        let mut key = 0;
        let mut w1 = None;
        let mut i = 0;
        while 8 * i < len {
            let n = (len - 8 * i).min(8);
            if i == 1 {
                key = Predictor::type_key(sh.word(&self.out[at..at + 2.min(len)]) as u16, len);
                pred = self.predict.by_type(key);
            } else if i == 2 {
                let w = sh.word(&self.out[at + 8..at + 16]);
                w1 = Some(w);
                pred = self.predict.by_site(key, w).or(pred);
            }
            let k = self.lens.byte()? as usize;
            if k > 8 {
                return Err(UnpackError::Truncated("lens"));
            }
            let mut x = [0u8; 8];
            x[..k].copy_from_slice(self.xor.take(k)?);
            let x = u64::from_le_bytes(x);
            let old = pred.map_or(0, |o| sh.word(&self.out[o + 8 * i..o + 8 * i + n]));
            let mut b = [0u8; 8];
            sh.put_word(old ^ x, &mut b[..n]);
            self.out.extend_from_slice(&b[..n]);
            i += 1;
        }
        if len <= 8 {
            key = Predictor::type_key(sh.word(&self.out[at..at + 2.min(len)]) as u16, len);
        }
        self.predict.learn(len, key, w1, at);
        Ok(())
    }
}
