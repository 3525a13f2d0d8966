//! kpack (FORMAT.md §8.2): a reversible, record-aware transform of the
//! sub-buffers of a CPU_DATA payload, run before zstd (block flag
//! `FLAG_KPACK`, format 1.2).
//!
//! Why: zstd spends most of its time finding again, in every record, the
//! bytes the previous record of the same kind already had (the common
//! fields, the call site, the size, the GFP flags, the pointer's upper
//! bytes). kpack walks the ring-buffer records and replaces each 8-byte
//! word of an event payload by its XOR with the same word of a predicted
//! earlier payload, keeping only the XOR's bytes up to its highest
//! non-zero one. What is left is a small part of the input; zstd then runs
//! over that much less, and compresses it smaller than it does the raw
//! data (the figures are in docs/benchmarks.md).
//!
//! The prediction for a payload of length `L` (every choice depends only on
//! bytes the decoder has already rebuilt, so both sides make the same):
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
//! Unpacking checks every length and never panics on hostile input.

use kmemtrace_kernel::subbuf::{RecordHeader, RecordShape, COMMIT_LEN_MASK};
use kmemtrace_kernel::{BigEndian, Endian, LittleEndian};
use std::fmt;

/// First byte of a kpack stream (after the kept head), as written now:
/// version 2, columns (`kpack::columns`, FORMAT.md §8.3).
pub const VERSION: u8 = 2;
/// The first version (§8.2): payloads XORed with predicted earlier ones.
/// Still read; written only by [`Packer::version1`].
pub const VERSION_1: u8 = 1;
/// Bytes a CPU_DATA payload keeps as they are before its kpack stream: its
/// CPU_DATA header, which an index then reads as from any other block.
pub const HEAD_LEN: usize = crate::records::CPU_DATA_HEADER_LEN;
/// Version, flags, long size, data offset (u16), sub-buffer size (u32),
/// body length (u32), CRC-32 of the whole payload, head included (u32).
pub const HEADER_LEN: usize = 17;
/// Version 1's streams, in this order after the header, each as a u32 LE
/// length and its bytes: ctl, lens, xor, raw, times.
pub const STREAM_NAMES: [&str; 5] = ["ctl", "lens", "xor", "raw", "times"];
pub use columns::STREAM_NAMES as COLUMN_STREAM_NAMES;
/// Largest sub-buffer kpack walks (the kernel allows up to 1 MiB).
const MAX_SUBBUF: u32 = 1 << 20;

/// The byte order and sub-buffer geometry records are read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    big_endian: bool,
    long_size: u8,
    data_offset: u16,
    subbuf_size: u32,
}

impl Shape {
    /// `None` when the geometry is not one kpack walks (it then stays
    /// unused: the data is compressed as it is).
    pub fn new(
        big_endian: bool,
        long_size: u8,
        data_offset: u32,
        subbuf_size: u32,
    ) -> Option<Self> {
        let ok = matches!(long_size, 4 | 8)
            && data_offset >= 8 + u32::from(long_size)
            && data_offset <= u32::from(u16::MAX)
            && data_offset < subbuf_size
            && subbuf_size <= MAX_SUBBUF;
        ok.then_some(Shape {
            big_endian,
            long_size,
            data_offset: data_offset as u16,
            subbuf_size,
        })
    }

    /// The shape of a log's sub-buffers.
    pub fn of(arch: &crate::arch::ArchTag) -> Option<Self> {
        Shape::new(
            arch.byte_order.is_big_endian(),
            arch.long_size,
            arch.data_offset,
            arch.subbuf_size,
        )
    }

    /// Length of the data of the sub-buffer `page`, if it fits.
    #[inline]
    fn data_len<E: Endian>(&self, e: E, page: &[u8]) -> Option<usize> {
        let commit = if self.long_size == 8 {
            e.read_u64(page, 8)?
        } else {
            u64::from(e.read_u32(page, 8)?)
        };
        let len = usize::try_from(commit & COMMIT_LEN_MASK).ok()?;
        (len <= (self.subbuf_size - u32::from(self.data_offset)) as usize).then_some(len)
    }
}

/// Why a kpack stream cannot be unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnpackError {
    Version(u8),
    /// The header's geometry is not one kpack writes.
    Shape,
    /// A stream ended early, a length does not fit, or bytes are left over.
    Damaged(&'static str),
    /// The rebuilt bytes do not have the CRC they were packed with.
    Crc,
}

impl fmt::Display for UnpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(v) => write!(f, "kpack version {v} is not known"),
            Self::Shape => write!(f, "kpack header has an impossible sub-buffer geometry"),
            Self::Damaged(what) => write!(f, "kpack stream damaged ({what})"),
            Self::Crc => write!(f, "kpack: the unpacked sub-buffers fail their CRC"),
        }
    }
}
impl std::error::Error for UnpackError {}

/// Where earlier payloads are, for predicting the next: offsets (plus one,
/// 0 being "none") into the body being packed or rebuilt. Arrays of their
/// fixed sizes: a slot made by a shift needs no bounds check.
struct Predictor {
    /// By payload length / 4 (lengths up to 4 KiB).
    by_len: Box<[u32; BY_LEN]>,
    /// By (type, length), hashed; the key kept to check.
    by_type: Box<[(u64, u32); 1 << BY_TYPE_BITS]>,
    /// By (type, length, first field), hashed.
    by_site: Box<[(u64, u64, u32); 1 << BY_SITE_BITS]>,
}

const BY_LEN: usize = 1025;
const BY_TYPE_BITS: u32 = 10;
const BY_SITE_BITS: u32 = 10;

/// The prediction for one payload as its words go by, and the slots it
/// was looked up in (where it is remembered once known).
struct Guess {
    pred: Option<usize>,
    /// The type key and its `by_type` slot, once looked up (payloads
    /// longer than 8 bytes).
    key: Option<(u64, usize)>,
    /// The first field and its `by_site` slot, once looked up (payloads
    /// longer than `8 + W` bytes).
    site: Option<(u64, usize)>,
}

impl Predictor {
    fn new() -> Self {
        Predictor {
            by_len: Box::new([0; BY_LEN]),
            by_type: Box::new([(0, 0); 1 << BY_TYPE_BITS]),
            by_site: Box::new([(0, 0, 0); 1 << BY_SITE_BITS]),
        }
    }

    fn reset(&mut self) {
        self.by_len.fill(0);
        self.by_type.fill((0, 0));
        self.by_site.fill((0, 0, 0));
    }

    #[inline]
    fn len_slot(len: usize) -> Option<usize> {
        (len.is_multiple_of(4) && len / 4 < BY_LEN).then_some(len / 4)
    }
    #[inline]
    fn type_slot(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BY_TYPE_BITS)) as usize
    }
    #[inline]
    fn site_slot(key: u64, site: u64) -> usize {
        let h = (site ^ key.rotate_left(32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - BY_SITE_BITS)) as usize
    }

    /// The guess before word 0 of a payload of `len` bytes.
    #[inline(always)]
    fn start(&self, len: usize) -> Guess {
        let pred = Self::len_slot(len).and_then(|s| self.by_len[s].checked_sub(1));
        Guess {
            pred: pred.map(|o| o as usize),
            key: None,
            site: None,
        }
    }

    /// The key of the payload at `buf[at..at + len]`: its type (its first
    /// two bytes, or fewer when it is shorter) and its whole length, so
    /// that a payload is only ever predicted from one as long.
    #[inline]
    fn type_key<E: Endian>(e: E, buf: &[u8], at: usize, len: usize) -> u64 {
        let ty = match len {
            0 => 0,
            1 => u16::from(buf[at]),
            _ => e.u16_from([buf[at], buf[at + 1]]),
        };
        (u64::from(ty) << 32) | len as u64
    }

    /// Updates the guess before part `i` (1: the first field, 2: the rest)
    /// of the payload at `buf[at..]`, whose earlier bytes are known; the
    /// first field (the call site of the slab events) is `W` bytes long.
    #[inline(always)]
    fn refine<E: Endian, const W: usize>(
        &self,
        e: E,
        g: &mut Guess,
        i: usize,
        buf: &[u8],
        at: usize,
        len: usize,
    ) {
        if i == 1 {
            self.by_type_of(g, Self::type_key(e, buf, at, len));
        } else {
            self.by_site_of(g, word(e, &buf[at + 8..at + 8 + W]));
        }
    }

    /// The guess for the first field, from the payload's type key.
    #[inline(always)]
    fn by_type_of(&self, g: &mut Guess, key: u64) {
        let slot = Self::type_slot(key);
        g.key = Some((key, slot));
        let (k, o) = self.by_type[slot];
        g.pred = (o != 0 && k == key).then(|| o as usize - 1);
    }

    /// The guess for the rest, from the first field's value `site`.
    #[inline(always)]
    fn by_site_of(&self, g: &mut Guess, site: u64) {
        let key = g.key.map_or(0, |(k, _)| k);
        let slot = Self::site_slot(key, site);
        g.site = Some((site, slot));
        let (s, k, o) = self.by_site[slot];
        if o != 0 && k == key && s == site {
            g.pred = Some(o as usize - 1);
        }
    }

    /// Remembers the payload at `buf[at..at + len]` once it is known.
    #[inline(always)]
    fn learn<E: Endian>(&mut self, e: E, g: &Guess, buf: &[u8], at: usize, len: usize) {
        let o = at as u32 + 1;
        if let Some(s) = Self::len_slot(len) {
            self.by_len[s] = o;
        }
        // A payload of 8 bytes or fewer was not looked up by type.
        let (key, slot) = g.key.unwrap_or_else(|| {
            let key = Self::type_key(e, buf, at, len);
            (key, Self::type_slot(key))
        });
        self.by_type[slot] = (key, o);
        if let Some((site, slot)) = g.site {
            self.by_site[slot] = (site, key, o);
        }
    }
}

/// The value of a word of `b.len()` (1..=8) bytes in byte order `e`.
#[inline]
fn word<E: Endian>(e: E, b: &[u8]) -> u64 {
    if let Ok(a) = <[u8; 8]>::try_from(b) {
        return e.u64_from(a);
    }
    let mut a = [0u8; 8];
    if e.is_big_endian() {
        a[8 - b.len()..].copy_from_slice(b);
    } else {
        a[..b.len()].copy_from_slice(b);
    }
    e.u64_from(a)
}

/// The value of a word of exactly `W` (4 or 8) bytes.
#[inline(always)]
fn whole_word<E: Endian, const W: usize>(e: E, b: &[u8]) -> u64 {
    if W == 8 {
        e.u64_from(b.try_into().unwrap_or_default())
    } else {
        u64::from(e.u32_from(b.try_into().unwrap_or_default()))
    }
}

/// Writes `v` as a word of `out.len()` (1..=8) bytes in byte order `e`.
#[inline]
fn put_word<E: Endian>(e: E, v: u64, out: &mut [u8]) {
    let n = out.len();
    if let Ok(a) = <&mut [u8; 8]>::try_from(&mut *out) {
        *a = if e.is_big_endian() {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
    } else if e.is_big_endian() {
        out.copy_from_slice(&v.to_be_bytes()[8 - n..]);
    } else {
        out.copy_from_slice(&v.to_le_bytes()[..n]);
    }
}

/// How a record is laid out.
struct Extent {
    /// Bytes before the body: the header word, and the length word when
    /// there is one.
    head: usize,
    total: usize,
    /// The body is an event payload (else carried raw).
    data: bool,
}

/// A record's header word `w` (read in the log's byte order) in kpack's
/// canonical form: the word a little-endian kernel writes for the same
/// fields (`type_len` in bits 0..5, `time_delta` above), whatever the
/// log's byte order.
#[inline]
fn canonical<E: Endian>(e: E, w: u32) -> u32 {
    RecordHeader::decode(e, w).encode(LittleEndian)
}

/// The header word whose canonical form is `c`.
#[inline]
fn from_canonical<E: Endian>(e: E, c: u32) -> u32 {
    header_of(c).encode(e)
}

/// The fields of canonical header word `c`.
#[inline]
fn header_of(c: u32) -> RecordHeader {
    RecordHeader::decode(LittleEndian, c)
}

/// Whether a record with (canonical) header word `w` has a length word after it: a
/// long event, or padding that is not the end of the data.
#[inline]
fn has_len_word(w: u32) -> bool {
    header_of(w).has_len_word()
}

/// A record with (canonical) header word `w` (and length word `n` when it
/// has one), as the kernel's `rb_event_length` reads it; `None` when it does
/// not fit in the `room` bytes left of the data.
#[inline]
fn extent(w: u32, n: u32, room: usize) -> Option<Extent> {
    let e = match header_of(w).shape() {
        RecordShape::Data { len } => Extent {
            head: 4,
            total: 4 + len,
            data: true,
        },
        // array[0] is the length after the header word, itself included.
        shape @ (RecordShape::LongData | RecordShape::Padding) => Extent {
            head: 8,
            total: 4usize.checked_add(n as usize).filter(|_| n >= 4)?,
            data: shape == RecordShape::LongData,
        },
        RecordShape::PaddingToEnd => Extent {
            head: 4,
            total: room,
            data: false,
        },
        // One more word: array[0].
        RecordShape::TimeExtend | RecordShape::TimeStamp => Extent {
            head: 4,
            total: 8,
            data: false,
        },
    };
    (e.total <= room).then_some(e)
}

/// The streams a kpack body is made of.
#[derive(Default)]
struct Streams {
    /// Per sub-buffer: parsed or not, tail zero or not; per record: header
    /// word + 1 (0: the rest of the data is raw), length word (varints).
    ctl: Vec<u8>,
    /// Per payload word: the number of XOR bytes kept (0..=8), a byte
    /// each while packing, then two to a byte ([`Streams::pair_lens`]);
    /// written by index (`lens_at` words are this block's), sized once.
    lens: Vec<u8>,
    lens_at: usize,
    /// The kept XOR bytes, least significant first; as `lens`.
    xor: Vec<u8>,
    xor_at: usize,
    /// Bytes carried as they are: commits, unparsed data, non-zero tails.
    raw: Vec<u8>,
    /// Sub-buffers' timestamps, as differences (zigzag varints).
    times: Vec<u8>,
}

impl Streams {
    /// Packs the `lens` bytes two to a byte, the first in the low half.
    fn pair_lens(&mut self) {
        let n = self.lens_at;
        if self.lens.len() <= n {
            self.lens.push(0);
        }
        self.lens[n] = 0;
        for i in 0..n.div_ceil(2) {
            self.lens[i] = self.lens[2 * i] | self.lens[2 * i + 1] << 4;
        }
    }

    fn all(&self) -> [&[u8]; 5] {
        [
            &self.ctl,
            &self.lens[..self.lens_at.div_ceil(2)],
            &self.xor[..self.xor_at],
            &self.raw,
            &self.times,
        ]
    }
}

/// Whether `b` is all zero bytes; 32 at a time (a byte-wise `all` does
/// not vectorise, and spliced sub-buffers end in a hole of zeros).
fn all_zero(b: &[u8]) -> bool {
    let mut chunks = b.chunks_exact(32);
    let whole = chunks
        .by_ref()
        .all(|c| c.iter().fold(0u8, |a, &x| a | x) == 0);
    whole && chunks.remainder().iter().all(|&x| x == 0)
}

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

#[inline]
fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Packs CPU_DATA payloads; keeps its tables and streams from block to
/// block (each block is packed on its own).
pub struct Packer {
    /// The version written: [`VERSION`], or [`VERSION_1`].
    version: u8,
    columns: columns::ColumnPacker,
    // Version 1's state.
    predict: Predictor,
    s: Streams,
    /// Words of 8 bytes (64-bit kernels), else 4.
    long8: bool,
}

impl Default for Packer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Packer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Packer")
    }
}

impl Packer {
    /// A packer of the current version ([`VERSION`]).
    pub fn new() -> Self {
        Packer {
            version: VERSION,
            columns: columns::ColumnPacker::default(),
            predict: Predictor::new(),
            s: Streams::default(),
            long8: true,
        }
    }

    /// A packer of version 1, which nothing writes any more: kept so that
    /// the reader of logs written before stays tested on every kind of
    /// input, and for comparisons.
    pub fn version1() -> Self {
        Packer {
            version: VERSION_1,
            ..Self::new()
        }
    }

    /// Appends to `out` the packed form of `payload`: its first `head`
    /// bytes as they are, then the kpack stream of the rest.
    pub fn pack(&mut self, shape: Shape, payload: &[u8], head: usize, out: &mut Vec<u8>) {
        let head = head.min(payload.len());
        out.extend_from_slice(&payload[..head]);
        let body = &payload[head..];
        let streams: &[&[u8]] = if self.version == VERSION_1 {
            self.pack_version1(shape, body);
            &self.s.all()
        } else {
            &self.columns.pack(shape, body)
        };
        out.push(self.version);
        out.push(u8::from(shape.big_endian));
        out.push(shape.long_size);
        out.extend_from_slice(&shape.data_offset.to_le_bytes());
        out.extend_from_slice(&shape.subbuf_size.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        let total: usize = streams.iter().map(|v| 4 + v.len()).sum();
        out.reserve(total);
        for v in streams {
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }

    fn pack_version1(&mut self, shape: Shape, body: &[u8]) {
        self.predict.reset();
        for v in [&mut self.s.ctl, &mut self.s.raw, &mut self.s.times] {
            v.clear();
        }
        (self.s.lens_at, self.s.xor_at) = (0, 0);
        if shape.big_endian {
            self.pack_body(BigEndian, shape, body);
        } else {
            self.pack_body(LittleEndian, shape, body);
        }
        self.s.pair_lens();
    }

    fn pack_body<E: Endian>(&mut self, e: E, shape: Shape, body: &[u8]) {
        let size = shape.subbuf_size as usize;
        self.long8 = shape.long_size == 8;
        // At most a length byte and 8 XOR bytes per payload word, which
        // takes at least 4 bytes of the body. Only grown: what is there
        // gets overwritten.
        let words = body.len() / 4 + 1;
        if self.s.lens.len() < words {
            self.s.lens.resize(words, 0);
        }
        if self.s.xor.len() < 8 * words {
            self.s.xor.resize(8 * words, 0);
        }
        let mut at = 0;
        let mut prev_ts = 0u64;
        while body.len() - at >= size {
            prev_ts = self.pack_subbuf(e, shape, body, at, prev_ts);
            at += size;
        }
        self.s.raw.extend_from_slice(&body[at..]);
    }

    /// The sub-buffer at `body[at..]`; returns its timestamp.
    fn pack_subbuf<E: Endian>(
        &mut self,
        e: E,
        shape: Shape,
        body: &[u8],
        at: usize,
        prev_ts: u64,
    ) -> u64 {
        let page = &body[at..at + shape.subbuf_size as usize];
        let Some(len) = shape.data_len(e, page) else {
            self.s.ctl.push(0);
            self.s.raw.extend_from_slice(page);
            return prev_ts;
        };
        self.s.ctl.push(1);
        let ts = e.u64_from(page[..8].try_into().unwrap_or_default());
        put_varint(&mut self.s.times, zigzag(ts.wrapping_sub(prev_ts) as i64));
        let off = shape.data_offset as usize;
        self.s.raw.extend_from_slice(&page[8..off]);
        self.pack_records(e, body, at + off, len);
        // The bytes after the data: a flag (if there are any) says whether
        // they are all zero (a hole) or carried raw.
        let tail = &page[off + len..];
        if !tail.is_empty() {
            let hole = all_zero(tail);
            self.s.ctl.push(u8::from(!hole));
            if !hole {
                self.s.raw.extend_from_slice(tail);
            }
        }
        ts
    }

    /// The records of one data area, `body[start..start + len]`.
    fn pack_records<E: Endian>(&mut self, e: E, body: &[u8], start: usize, len: usize) {
        let end = start + len;
        let mut q = start;
        while q < end {
            let room = end - q;
            let w = e
                .read_u32(body, q)
                .filter(|_| room >= 4)
                .map(|w| canonical(e, w));
            let record = w.and_then(|w| {
                let n = if has_len_word(w) {
                    e.read_u32(body, q + 4).filter(|_| room >= 8)?
                } else {
                    0
                };
                Some((w, n, extent(w, n, room)?))
            });
            // Not a record this walk understands: the rest as it is.
            let Some((w, n, ext)) = record else {
                put_varint(&mut self.s.ctl, 0);
                self.s.raw.extend_from_slice(&body[q..end]);
                return;
            };
            put_varint(&mut self.s.ctl, u64::from(w) + 1);
            if ext.head == 8 {
                put_varint(&mut self.s.ctl, u64::from(n));
            }
            let body_at = q + ext.head;
            let body_len = ext.total - ext.head;
            if ext.data {
                if self.long8 {
                    self.pack_payload::<E, 8>(e, body, body_at, body_len);
                } else {
                    self.pack_payload::<E, 4>(e, body, body_at, body_len);
                }
            } else {
                self.s
                    .raw
                    .extend_from_slice(&body[body_at..body_at + body_len]);
            }
            q += ext.total;
        }
    }

    /// An event payload, in words of `W` bytes (the kernel's long size):
    /// the common fields (8 bytes), the first field, the rest, each with
    /// the guess made before it.
    #[inline]
    fn pack_payload<E: Endian, const W: usize>(
        &mut self,
        e: E,
        body: &[u8],
        at: usize,
        len: usize,
    ) {
        let mut g = self.predict.start(len);
        let p = &body[at..at + len];
        let mut from = 0;
        for (i, upto) in [(0, 8), (1, 8 + W), (2, len)] {
            if i > 0 {
                if len <= from {
                    break;
                }
                self.predict.refine::<E, W>(e, &mut g, i, body, at, len);
            }
            let to = upto.min(len);
            let old = g.pred.map(|o| &body[o + from..o + to]);
            self.s.xor_words::<E, W>(e, &p[from..to], old);
            from = to;
        }
        self.predict.learn(e, &g, body, at, len);
    }
}

impl Streams {
    /// Appends the XORs of the words of `cur` with those of `old` (zero
    /// when there is no guess): for each, its length in `lens` and its
    /// significant bytes in `xor`.
    #[inline]
    fn xor_words<E: Endian, const W: usize>(&mut self, e: E, cur: &[u8], old: Option<&[u8]>) {
        // Positions in locals, not in `self`: stores through the slices
        // would otherwise make the compiler reload them every word.
        let (lens, xor) = (&mut self.lens[..], &mut self.xor[..]);
        let (mut lens_at, mut xor_at) = (self.lens_at, self.xor_at);
        let mut put = |x: u64| {
            let k = (64 - x.leading_zeros()).div_ceil(8) as usize;
            // A byte each here; paired into halves of bytes once the
            // block is done (a read-modify-write here would chain every
            // word to the one before through memory).
            lens[lens_at] = k as u8;
            lens_at += 1;
            // A fixed-size copy of which the next word overwrites the
            // unused high bytes: cheaper than a copy of variable length.
            xor[xor_at..xor_at + 8].copy_from_slice(&x.to_le_bytes());
            xor_at += k;
        };
        let words = cur.chunks_exact(W);
        let rest = words.remainder();
        match old {
            Some(old) => {
                let olds = old.chunks_exact(W);
                let old_rest = olds.remainder();
                for (c, o) in words.zip(olds) {
                    put(whole_word::<E, W>(e, c) ^ whole_word::<E, W>(e, o));
                }
                if !rest.is_empty() {
                    put(word(e, rest) ^ word(e, old_rest));
                }
            }
            None => {
                for c in words {
                    put(whole_word::<E, W>(e, c));
                }
                if !rest.is_empty() {
                    put(word(e, rest));
                }
            }
        }
        (self.lens_at, self.xor_at) = (lens_at, xor_at);
    }
}

mod columns;
mod unpack;
pub use unpack::Unpacker;
