//! Ring-buffer sub-buffers, as read from `per_cpu/cpuN/trace_pipe_raw`.
//!
//! Decoded with the *recorded* kernel's byte order ([`Endian`]) and `long`
//! size ([`SubBufLayout`], from [`HeaderPage`]), never the host's. The rules
//! follow `kernel/trace/ring_buffer.c` (Linux 6.x) and libtraceevent's
//! `kbuffer-parse.c`:
//!
//! **Sub-buffer header.** `u64 timestamp` at 0; `local_t commit` (a `long`)
//! at 8; data from `data_offset` (8 + `sizeof(long)`). The low 30 bits of
//! `commit` are the number of data bytes committed. Bit 31
//! (`RB_MISSED_EVENTS`) says events were lost before this sub-buffer; bit 30
//! (`RB_MISSED_STORED`) that their number is stored as a `long` right after
//! the committed data (`ring_buffer_read_page()` only stores it when there is
//! room). The kernel adds `RB_MISSED_EVENTS`, the `int` `1 << 31`, to the
//! `long`: on 64-bit kernels that sign-extends, so the upper 32 bits of
//! `commit` are then all ones (seen on real s390x data). Only the low 32 bits
//! carry information.
//!
//! **Events.** 4-byte aligned (8 on kernels with
//! `CONFIG_HAVE_64BIT_ALIGNED_ACCESS`), each starting with a 32-bit header in
//! kernel byte order holding the C bit-fields `type_len:5, time_delta:27`. C
//! allocates bit-fields from the least significant bit on little-endian ABIs
//! and from the most significant bit on big-endian ones, so `type_len` is
//! `w & 31` on little-endian kernels and `w >> 27` on big-endian ones
//! (libtraceevent's `type_len4host()`/`ts4host()`).
//!
//! | `type_len` | record | size |
//! |---|---|---|
//! | 1..=28 | data of `4 * type_len` bytes right after the header | `4 + 4 * type_len` |
//! | 0 | data; `array[0]` (u32) holds its length **plus 4** (it counts itself), data follows it | `4 + array[0]` |
//! | 29 | padding: with `time_delta != 0` a discarded event or end-of-page filler, `array[0]` = size − 4; with `time_delta == 0` (`rb_null_event()`), filler to the end of the commit | `4 + array[0]`, or the rest |
//! | 30 | time extend: adds `array[0] << 27 \| time_delta` | 8 |
//! | 31 | absolute time stamp: the clock's low 59 bits `array[0] << 27 \| time_delta` | 8 |
//!
//! **Time.** The running time starts at the sub-buffer's `timestamp`. A data
//! event adds its `time_delta`; a time extend adds its delta (the data event
//! after it has `time_delta` 0); padding does not change it
//! (`rb_update_read_stamp()`); an absolute time stamp replaces it, taking the
//! five bits above the 59 stored ones from the running time and carrying one
//! into them if the result would go backwards (`rb_fix_abs_ts(abs,
//! read_stamp)`, as `rb_update_read_stamp()` does; the running time has the
//! page time stamp's top bits unless the clock crossed a 2^59 ns boundary
//! within the page).
//!
//! Real pages also show the kernel's end-of-page filler (`rb_reset_tail()`):
//! when an event does not fit, the rest of the page becomes a padding record
//! with `time_delta` 1 and a length, so it looks like a discarded event; if
//! fewer than 8 bytes remain, a `time_delta` 0 padding header is written but
//! left outside `commit`. Whether `commit` counts a filler depends on how
//! the page left the kernel: `ring_buffer_read_page()` cuts a page it swaps
//! out whole to `real_end` (the filler's start) when that is set, while
//! pages copied out event by event keep it. Real armhf pages carry fillers
//! inside `commit`; the x86_64 6.18 pages tested showed none.
//!
//! Decoding never panics, never allocates, and every step advances by at
//! least 4 bytes; errors carry the byte offset within the sub-buffer.

use core::fmt;

use crate::endian::Endian;
use crate::header_page::HeaderPage;

/// `commit` bit: events were lost (overwritten or dropped) before this sub-buffer.
pub const RB_MISSED_EVENTS: u64 = 1 << 31;
/// `commit` bit: the number of lost events is stored after the data.
pub const RB_MISSED_STORED: u64 = 1 << 30;
/// Mask of the data length in `commit`.
pub const COMMIT_LEN_MASK: u64 = RB_MISSED_STORED - 1;

/// Largest `type_len` of a data event whose length is `4 * type_len`.
pub const RINGBUF_TYPE_DATA_TYPE_LEN_MAX: u32 = 28;
/// `type_len` of padding.
pub const RINGBUF_TYPE_PADDING: u32 = 29;
/// `type_len` of a time extend.
pub const RINGBUF_TYPE_TIME_EXTEND: u32 = 30;
/// `type_len` of an absolute time stamp.
pub const RINGBUF_TYPE_TIME_STAMP: u32 = 31;
/// Bits of `time_delta`.
pub const TS_SHIFT: u32 = 27;
/// Mask of `time_delta`.
pub const TS_MASK: u64 = (1 << TS_SHIFT) - 1;
/// The five clock bits an absolute time stamp does not store.
pub const TS_MSB: u64 = 0xf8 << 56;
/// The 59 clock bits an absolute time stamp stores.
pub const ABS_TS_MASK: u64 = !TS_MSB;
/// Largest payload stored with `type_len` 1..=28 (`RB_MAX_SMALL_DATA`).
pub const RB_MAX_SMALL_DATA: usize = 4 * RINGBUF_TYPE_DATA_TYPE_LEN_MAX as usize;

/// The kernel's `rb_fix_abs_ts()`: restores the five most significant bits
/// an absolute time stamp lost, from the current time `save_ts`, carrying one
/// into them if the result would be before `save_ts`.
#[inline]
pub fn rb_fix_abs_ts(abs: u64, save_ts: u64) -> u64 {
    let mut abs = abs;
    if save_ts & TS_MSB != 0 {
        abs |= save_ts & TS_MSB;
        if abs < save_ts {
            abs = abs.wrapping_add(1 << 59);
        }
    }
    abs
}

/// The shape of a sub-buffer, from the log's `header_page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubBufLayout {
    /// The recorded kernel's `sizeof(long)`, 4 or 8: the size of `commit`
    /// and of the stored lost-events count.
    pub long_size: usize,
    /// Offset of the data area: `8 + long_size`.
    pub data_offset: usize,
    /// Bytes per sub-buffer, header included.
    pub subbuf_size: usize,
}

impl SubBufLayout {
    /// The layout `header_page` describes.
    pub fn from_header_page(h: &HeaderPage) -> Self {
        SubBufLayout {
            long_size: h.long_size(),
            data_offset: h.data_offset(),
            subbuf_size: h.subbuf_size(),
        }
    }

    /// Size of the data area.
    pub fn data_size(&self) -> usize {
        self.subbuf_size.saturating_sub(self.data_offset)
    }

    /// Checks what the decoder relies on: `long_size` 4 or 8,
    /// `data_offset == 8 + long_size`, and a data area of 8 bytes to 2^30.
    pub fn validate(&self) -> Result<(), SubBufError> {
        let ok = (self.long_size == 4 || self.long_size == 8)
            && self.data_offset == 8 + self.long_size
            && self.subbuf_size >= self.data_offset + 8
            && (self.data_size() as u64) <= COMMIT_LEN_MASK;
        if ok {
            Ok(())
        } else {
            Err(SubBufError::new(0, SubBufErrorKind::BadLayout(*self)))
        }
    }

    /// Splits concatenated sub-buffers (as drained from `trace_pipe_raw`);
    /// the last piece may be short.
    pub fn split<'a>(&self, raw: &'a [u8]) -> core::slice::Chunks<'a, u8> {
        raw.chunks(self.subbuf_size.max(1))
    }
}

/// One decoded sub-buffer header, borrowing the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubBuffer<'a> {
    /// The sub-buffer's time stamp: the time the deltas start from.
    pub timestamp: u64,
    /// Data bytes committed (the low 30 bits of `commit`).
    pub commit: usize,
    /// `RB_MISSED_EVENTS`: events were lost before this sub-buffer.
    pub missed_events: bool,
    /// `RB_MISSED_STORED`: their number follows the data.
    pub missed_stored: bool,
    /// The lost-events count stored after the data, when `missed_stored`.
    pub lost_events: Option<u64>,
    /// The committed data area (`commit` bytes from `data_offset`).
    pub data: &'a [u8],
    /// Offset of `data` in the sub-buffer.
    pub data_offset: usize,
    /// The `commit` word as stored (flags and, on 64-bit kernels, the sign
    /// extension included).
    pub raw_commit: u64,
}

/// Decodes the header of one sub-buffer.
///
/// `page` is one sub-buffer, normally exactly `layout.subbuf_size` bytes; a
/// shorter slice is accepted if it holds the header, the committed data and
/// the stored lost count. Nothing is read beyond those.
pub fn parse_subbuf<'a, E: Endian>(
    endian: E,
    layout: &SubBufLayout,
    page: &'a [u8],
) -> Result<SubBuffer<'a>, SubBufError> {
    use SubBufErrorKind::*;
    layout.validate()?;
    if page.len() > layout.subbuf_size {
        return Err(SubBufError::new(
            layout.subbuf_size,
            TooLong {
                len: page.len(),
                subbuf_size: layout.subbuf_size,
            },
        ));
    }
    let short = |need: usize| {
        SubBufError::new(
            page.len(),
            TooShort {
                len: page.len(),
                need,
            },
        )
    };
    let ls = layout.long_size;
    let timestamp = endian
        .read_u64(page, 0)
        .ok_or_else(|| short(layout.data_offset))?;
    let raw_commit = endian
        .read_uint(page, 8, ls)
        .ok_or_else(|| short(layout.data_offset))?;

    let low = raw_commit & 0xffff_ffff;
    let high = raw_commit >> 32;
    let missed_events = low & RB_MISSED_EVENTS != 0;
    let missed_stored = low & RB_MISSED_STORED != 0;
    // Upper half: zero, or the sign extension of RB_MISSED_EVENTS.
    if high != 0 && !(missed_events && high == 0xffff_ffff) {
        return Err(SubBufError::new(8, BadCommit { raw: raw_commit }));
    }
    let commit = (low & COMMIT_LEN_MASK) as usize;
    let data_size = layout.data_size();
    if commit > data_size {
        return Err(SubBufError::new(8, CommitBeyondData { commit, data_size }));
    }
    if missed_stored && !missed_events {
        return Err(SubBufError::new(8, StoredWithoutMissed { raw: raw_commit }));
    }
    let data_end = layout.data_offset + commit;
    let data = page
        .get(layout.data_offset..data_end)
        .ok_or_else(|| short(data_end))?;
    let lost_events = if missed_stored {
        if data_size - commit < ls {
            return Err(SubBufError::new(
                8,
                NoRoomForLostCount { commit, data_size },
            ));
        }
        Some(
            endian
                .read_uint(page, data_end, ls)
                .ok_or_else(|| short(data_end + ls))?,
        )
    } else {
        None
    };
    Ok(SubBuffer {
        timestamp,
        commit,
        missed_events,
        missed_stored,
        lost_events,
        data,
        data_offset: layout.data_offset,
        raw_commit,
    })
}

impl<'a> SubBuffer<'a> {
    /// Iterates over the records of the committed data, in order.
    #[inline]
    pub fn events<E: Endian>(&self, endian: E) -> EventIter<'a, E> {
        EventIter {
            data: self.data,
            pos: 0,
            base: self.data_offset,
            ts: self.timestamp,
            endian,
            done: false,
        }
    }

    /// Iterates over the data events only: `(offset, timestamp, payload)`.
    #[inline]
    pub fn data_events<E: Endian>(
        &self,
        endian: E,
    ) -> impl Iterator<Item = Result<(usize, u64, &'a [u8]), SubBufError>> {
        self.events(endian).filter_map(|r| match r {
            Ok(RbRecord {
                offset,
                ts,
                kind: RbRecordKind::Data { payload },
                ..
            }) => Some(Ok((offset, ts, payload))),
            Ok(_) => None,
            Err(e) => Some(Err(e)),
        })
    }

    /// Number of data events, validating the whole sub-buffer.
    pub fn count_data_events<E: Endian>(&self, endian: E) -> Result<usize, SubBufError> {
        let mut n = 0;
        for r in self.events(endian) {
            if let RbRecordKind::Data { .. } = r?.kind {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// One record of a sub-buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RbRecord<'a> {
    /// Offset of the record's header within the sub-buffer.
    pub offset: usize,
    /// Bytes the record occupies, header included.
    pub len: usize,
    /// Absolute time: of the event for data; the running time after a time
    /// extend or absolute time stamp; unchanged for padding.
    pub ts: u64,
    pub kind: RbRecordKind<'a>,
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RbRecordKind<'a> {
    /// A trace event. The payload starts at the event's `common_type` and
    /// includes the alignment bytes the kernel rounded it up with.
    Data { payload: &'a [u8] },
    /// Padding of `len` bytes (header included). `discarded` is the kernel's
    /// `!rb_null_event()`: `time_delta != 0`, so `array[0]` gave the length.
    /// That is both a discarded event and the kernel's end-of-page filler
    /// (`rb_reset_tail()` writes `time_delta` 1). Without it (`time_delta`
    /// 0) the padding runs to the end of the commit.
    Padding { len: usize, discarded: bool },
    /// A time extend adding `delta` (`array[0] << 27 | time_delta`).
    TimeExtend { delta: u64 },
    /// An absolute time stamp: the 59 bits stored; the record's `ts` is the
    /// full time after `rb_fix_abs_ts()`.
    TimeStamp { abs: u64 },
}

/// A record's 32-bit header word, decoded: the C bit-fields `type_len:5,
/// time_delta:27`, allocated from the least significant bit on
/// little-endian kernels and from the most significant on big-endian ones
/// (libtraceevent's `type_len4host()`/`ts4host()`). The one reading of these
/// words: [`EventIter`] walks records with it, and so does every other
/// walker of sub-buffers (kpack's packer and unpacker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// 0..=31: what the record is ([`RecordHeader::shape`]).
    pub type_len: u32,
    /// 27 bits: the time since the previous record, or part of a time.
    pub time_delta: u32,
}

/// What a record's header says about its layout, as `rb_event_length()`
/// reads it (the table in this module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordShape {
    /// Data of `len` bytes (`4 * type_len`) right after the header word.
    Data { len: usize },
    /// Data whose length plus 4 is in `array[0]` (`type_len` 0).
    LongData,
    /// Padding of `4 + array[0]` bytes: a discarded event or a filler.
    Padding,
    /// Padding without a length (`time_delta` 0, `rb_null_event()`): the
    /// rest of the commit.
    PaddingToEnd,
    /// A time extend: `array[0]` holds the delta's upper bits.
    TimeExtend,
    /// An absolute time stamp: `array[0]` holds its upper bits.
    TimeStamp,
}

impl RecordHeader {
    /// The fields of header word `w`, read in the kernel's byte order `e`.
    #[inline]
    pub fn decode<E: Endian>(e: E, w: u32) -> Self {
        if e.is_big_endian() {
            Self {
                type_len: w >> 27,
                time_delta: w & TS_MASK as u32,
            }
        } else {
            Self {
                type_len: w & 31,
                time_delta: w >> 5,
            }
        }
    }

    /// The header word a kernel of byte order `e` writes for these fields
    /// (each cut to its width).
    #[inline]
    pub fn encode<E: Endian>(self, e: E) -> u32 {
        let (type_len, time_delta) = (self.type_len & 31, self.time_delta & TS_MASK as u32);
        if e.is_big_endian() {
            type_len << 27 | time_delta
        } else {
            time_delta << 5 | type_len
        }
    }

    /// The record's layout.
    #[inline]
    pub fn shape(self) -> RecordShape {
        match self.type_len {
            0 => RecordShape::LongData,
            1..=RINGBUF_TYPE_DATA_TYPE_LEN_MAX => RecordShape::Data {
                len: 4 * self.type_len as usize,
            },
            RINGBUF_TYPE_PADDING if self.time_delta == 0 => RecordShape::PaddingToEnd,
            RINGBUF_TYPE_PADDING => RecordShape::Padding,
            RINGBUF_TYPE_TIME_EXTEND => RecordShape::TimeExtend,
            // RINGBUF_TYPE_TIME_STAMP, the only value left of 5 bits.
            _ => RecordShape::TimeStamp,
        }
    }

    /// Whether the word after the header is a length (`array[0]`, the
    /// record's size minus 4): long data, and padding that has one.
    #[inline]
    pub fn has_len_word(self) -> bool {
        matches!(self.shape(), RecordShape::LongData | RecordShape::Padding)
    }
}

/// Iterator over the records of a [`SubBuffer`]; stops after the first error.
#[derive(Clone, Debug)]
pub struct EventIter<'a, E> {
    data: &'a [u8],
    pos: usize,
    base: usize,
    ts: u64,
    endian: E,
    done: bool,
}

impl<'a, E: Endian> EventIter<'a, E> {
    /// The running time: the time of the last record returned.
    pub fn current_ts(&self) -> u64 {
        self.ts
    }

    #[cold]
    fn fail(
        &mut self,
        at: usize,
        kind: SubBufErrorKind,
    ) -> Option<Result<RbRecord<'a>, SubBufError>> {
        self.done = true;
        Some(Err(SubBufError::new(self.base + at, kind)))
    }

    #[inline]
    fn array0(&self, pos: usize) -> Option<u32> {
        self.endian.read_u32(self.data, pos + 4)
    }

    /// The length, `4 + array[0]`, of a record that keeps it in `array[0]`
    /// (`type_len` 0 data, padding with a length), checked: present, at
    /// least `min_a0`, a multiple of 4, within the commit.
    #[inline]
    fn array0_len(&self, pos: usize, type_len: u32, min_a0: u32) -> Result<usize, SubBufErrorKind> {
        use SubBufErrorKind::*;
        let commit = self.data.len();
        let a0 = self.array0(pos).ok_or(TruncatedHeader { commit })?;
        if a0 < min_a0 {
            return Err(ZeroLength {
                type_len,
                array0: a0,
            });
        }
        if a0 % 4 != 0 {
            return Err(Misaligned {
                type_len,
                array0: a0,
            });
        }
        let len = 4 + a0 as usize;
        if len > commit - pos {
            return Err(PastCommit {
                type_len,
                len,
                commit,
            });
        }
        Ok(len)
    }
}

impl<'a, E: Endian> Iterator for EventIter<'a, E> {
    type Item = Result<RbRecord<'a>, SubBufError>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        use SubBufErrorKind::*;
        if self.done {
            return None;
        }
        let pos = self.pos;
        let commit = self.data.len();
        if pos >= commit {
            self.done = true;
            return None;
        }
        let Some(w) = self.endian.read_u32(self.data, pos) else {
            return self.fail(pos, TruncatedHeader { commit });
        };
        let header = RecordHeader::decode(self.endian, w);
        let (type_len, delta) = (header.type_len, u64::from(header.time_delta));
        let (len, kind) = match header.shape() {
            RecordShape::Data { len: payload_len } => {
                let len = 4 + payload_len;
                let Some(payload) = self.data.get(pos + 4..pos + len) else {
                    return self.fail(
                        pos,
                        PastCommit {
                            type_len,
                            len,
                            commit,
                        },
                    );
                };
                self.ts = self.ts.wrapping_add(delta);
                (len, RbRecordKind::Data { payload })
            }
            RecordShape::LongData => {
                // array[0] counts itself: data length + 4.
                let len = match self.array0_len(pos, type_len, 5) {
                    Ok(len) => len,
                    Err(k) => return self.fail(pos, k),
                };
                let payload = &self.data[pos + 8..pos + len];
                self.ts = self.ts.wrapping_add(delta);
                (len, RbRecordKind::Data { payload })
            }
            RecordShape::PaddingToEnd => {
                // rb_null_event(): no length; filler to the end.
                let len = commit - pos;
                (
                    len,
                    RbRecordKind::Padding {
                        len,
                        discarded: false,
                    },
                )
            }
            RecordShape::Padding => {
                let len = match self.array0_len(pos, type_len, 4) {
                    Ok(len) => len,
                    Err(k) => return self.fail(pos, k),
                };
                (
                    len,
                    RbRecordKind::Padding {
                        len,
                        discarded: true,
                    },
                )
            }
            RecordShape::TimeExtend => {
                let Some(a0) = self.array0(pos) else {
                    return self.fail(pos, TruncatedHeader { commit });
                };
                let d = (u64::from(a0) << TS_SHIFT) | delta;
                self.ts = self.ts.wrapping_add(d);
                (8, RbRecordKind::TimeExtend { delta: d })
            }
            RecordShape::TimeStamp => {
                let Some(a0) = self.array0(pos) else {
                    return self.fail(pos, TruncatedHeader { commit });
                };
                let abs = (u64::from(a0) << TS_SHIFT) | delta;
                self.ts = rb_fix_abs_ts(abs, self.ts);
                (8, RbRecordKind::TimeStamp { abs })
            }
        };
        self.pos = pos + len;
        Some(Ok(RbRecord {
            offset: self.base + pos,
            len,
            ts: self.ts,
            kind,
        }))
    }
}

impl<E: Endian> core::iter::FusedIterator for EventIter<'_, E> {}

/// A sub-buffer that cannot be decoded: where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubBufError {
    /// Byte offset within the sub-buffer (of the event header for event
    /// errors, of `commit` for header errors).
    pub offset: usize,
    pub kind: SubBufErrorKind,
}

impl SubBufError {
    fn new(offset: usize, kind: SubBufErrorKind) -> Self {
        SubBufError { offset, kind }
    }
}

/// Why a sub-buffer cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubBufErrorKind {
    /// The layout is not one the kernel produces.
    BadLayout(SubBufLayout),
    /// The slice is shorter than the header, the committed data or the
    /// stored lost count require.
    TooShort { len: usize, need: usize },
    /// The slice is longer than one sub-buffer.
    TooLong { len: usize, subbuf_size: usize },
    /// `commit`'s upper 32 bits are neither zero nor the sign extension of
    /// `RB_MISSED_EVENTS`.
    BadCommit { raw: u64 },
    /// More data committed than the data area holds.
    CommitBeyondData { commit: usize, data_size: usize },
    /// `RB_MISSED_STORED` without `RB_MISSED_EVENTS`.
    StoredWithoutMissed { raw: u64 },
    /// `RB_MISSED_STORED`, but no room for the count after the data.
    NoRoomForLostCount { commit: usize, data_size: usize },
    /// An event header (or its `array[0]`) cut by the end of the commit.
    TruncatedHeader { commit: usize },
    /// An event that ends past the end of the commit.
    PastCommit {
        type_len: u32,
        len: usize,
        commit: usize,
    },
    /// A length too small to hold any data.
    ZeroLength { type_len: u32, array0: u32 },
    /// A length that is not a multiple of 4.
    Misaligned { type_len: u32, array0: u32 },
}

impl fmt::Display for SubBufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SubBufErrorKind::*;
        write!(f, "sub-buffer offset {}: ", self.offset)?;
        match &self.kind {
            BadLayout(l) => write!(
                f,
                "unsupported layout (long size {}, data offset {}, sub-buffer size {})",
                l.long_size, l.data_offset, l.subbuf_size
            ),
            TooShort { len, need } => write!(f, "truncated: {len} bytes, {need} needed"),
            TooLong { len, subbuf_size } => {
                write!(f, "{len} bytes is more than one sub-buffer ({subbuf_size})")
            }
            BadCommit { raw } => write!(f, "commit {raw:#x} has stray upper bits"),
            CommitBeyondData { commit, data_size } => {
                write!(f, "commit {commit} is beyond the data area ({data_size} bytes)")
            }
            StoredWithoutMissed { raw } => {
                write!(f, "commit {raw:#x}: missed count stored but no missed-events flag")
            }
            NoRoomForLostCount { commit, data_size } => write!(
                f,
                "missed count stored after commit {commit}, but the data area has {data_size} bytes"
            ),
            TruncatedHeader { commit } => {
                write!(f, "event header cut by the end of the commit ({commit} data bytes)")
            }
            PastCommit { type_len, len, commit } => write!(
                f,
                "event (type_len {type_len}) of {len} bytes runs past the end of the commit ({commit} data bytes)"
            ),
            ZeroLength { type_len, array0 } => {
                write!(f, "zero-length event (type_len {type_len}, length word {array0})")
            }
            Misaligned { type_len, array0 } => write!(
                f,
                "event length word {array0} (type_len {type_len}) is not a multiple of 4"
            ),
        }
    }
}

impl std::error::Error for SubBufError {}
