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

    #[inline]
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
        let (type_len, delta) = if self.endian.is_big_endian() {
            (w >> 27, w & TS_MASK as u32)
        } else {
            (w & 31, w >> 5)
        };
        let delta = u64::from(delta);
        let (len, kind) = match type_len {
            1..=RINGBUF_TYPE_DATA_TYPE_LEN_MAX => {
                let len = 4 + 4 * type_len as usize;
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
            0 => {
                // array[0] counts itself: data length + 4.
                let len = match self.array0_len(pos, type_len, 5) {
                    Ok(len) => len,
                    Err(k) => return self.fail(pos, k),
                };
                let payload = &self.data[pos + 8..pos + len];
                self.ts = self.ts.wrapping_add(delta);
                (len, RbRecordKind::Data { payload })
            }
            RINGBUF_TYPE_PADDING => {
                if delta == 0 {
                    // rb_null_event(): no length; filler to the end.
                    let len = commit - pos;
                    (
                        len,
                        RbRecordKind::Padding {
                            len,
                            discarded: false,
                        },
                    )
                } else {
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
            }
            RINGBUF_TYPE_TIME_EXTEND => {
                let Some(a0) = self.array0(pos) else {
                    return self.fail(pos, TruncatedHeader { commit });
                };
                let d = (u64::from(a0) << TS_SHIFT) | delta;
                self.ts = self.ts.wrapping_add(d);
                (8, RbRecordKind::TimeExtend { delta: d })
            }
            _ => {
                // RINGBUF_TYPE_TIME_STAMP (the only value left of 5 bits).
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

/// An encoder of sub-buffers following the kernel's writer rules, for tests
/// and test vectors (it is not used to decode).
///
/// What it reproduces, from `kernel/trace/ring_buffer.c`:
/// - event sizes (`rb_calculate_event_length()`): a zero-length payload
///   counts as 1 byte; payloads over 112 bytes (or all of them on
///   8-byte-alignment kernels) take `type_len` 0 and a length word that
///   counts itself; sizes are rounded to 4 (or 8); a 12-byte event is grown
///   to 16 so it can later hold a time extend and padding;
/// - `type_len` (`rb_update_event()`): `DIV_ROUND_UP(size - 4, 4)`;
/// - a time extend before an event whose delta does not fit 27 bits, and an
///   absolute time stamp (59 bits) before events that ask for one; the event
///   itself then has `time_delta` 0;
/// - discarded events (`rb_event_discard()`): padding with the event's delta
///   (1 if 0) and `array[0]` = size − 4;
/// - end-of-page filler (`rb_reset_tail()`): padding with `time_delta` 1 and
///   a length if 8 or more bytes remain, else a `time_delta` 0 header left
///   outside `commit`;
/// - missed-events flags and the stored count (`ring_buffer_read_page()`):
///   the count is stored only if a `long` fits after the data, and on 64-bit
///   kernels `RB_MISSED_EVENTS` sign-extends into the upper half;
/// - zeroed bytes after the data (the kernel clears them before handing the
///   page to user space).
///
/// Deltas are taken from the reader's running time, so padding (which the
/// reader does not time) does not shift later events.
#[cfg(any(test, feature = "testkit"))]
pub mod encode {
    use super::*;

    /// A record to encode.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum EncRecord {
        /// A trace event at absolute time `ts`; a time extend is inserted
        /// before it if needed.
        Event { ts: u64, payload: Vec<u8> },
        /// A trace event preceded by an absolute time stamp (the kernel's
        /// `RB_ADD_STAMP_FORCE`/`ABSOLUTE` paths).
        AbsEvent { ts: u64, payload: Vec<u8> },
        /// A discarded event of `payload_len` bytes at time `ts`.
        Discarded { ts: u64, payload_len: usize },
    }

    /// How the page ends after the records.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum EndPadding {
        /// Nothing: the commit ends after the last record.
        #[default]
        None,
        /// The kernel's filler (`rb_reset_tail()`), counted in `commit` as in
        /// pages copied out by `ring_buffer_read_page()`.
        Filler,
        /// A `time_delta` 0 padding header running to the end of the data
        /// area, inside `commit` (what `rb_null_event()` describes).
        Null,
    }

    /// Events lost before this page.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum Missed {
        #[default]
        None,
        /// `RB_MISSED_EVENTS` only.
        Flag,
        /// `RB_MISSED_EVENTS`, and the count stored after the data if a
        /// `long` fits there (else only the flag, like the kernel).
        Count(u64),
    }

    /// What to put in a page.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct PageSpec {
        /// The page time stamp; by default the first record's time (the
        /// kernel stamps a page with its first event's time).
        pub timestamp: Option<u64>,
        pub records: Vec<EncRecord>,
        pub end: EndPadding,
        pub missed: Missed,
        /// `CONFIG_HAVE_64BIT_ALIGNED_ACCESS` kernels: every data event
        /// takes `type_len` 0 and sizes round to 8.
        pub force_8byte_align: bool,
    }

    /// A record as the decoder must return it (owned).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ExpectedRecord {
        pub offset: usize,
        pub len: usize,
        pub ts: u64,
        pub kind: ExpectedKind,
    }

    /// Owned form of [`RbRecordKind`].
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum ExpectedKind {
        Data(Vec<u8>),
        Padding { len: usize, discarded: bool },
        TimeExtend { delta: u64 },
        TimeStamp { abs: u64 },
    }

    impl ExpectedRecord {
        /// The owned form of a decoded record.
        pub fn from_record(r: &RbRecord<'_>) -> Self {
            let kind = match r.kind {
                RbRecordKind::Data { payload } => ExpectedKind::Data(payload.to_vec()),
                RbRecordKind::Padding { len, discarded } => {
                    ExpectedKind::Padding { len, discarded }
                }
                RbRecordKind::TimeExtend { delta } => ExpectedKind::TimeExtend { delta },
                RbRecordKind::TimeStamp { abs } => ExpectedKind::TimeStamp { abs },
            };
            ExpectedRecord {
                offset: r.offset,
                len: r.len,
                ts: r.ts,
                kind,
            }
        }
    }

    /// An encoded page and what decoding it must give.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct EncodedPage {
        /// Exactly `subbuf_size` bytes.
        pub bytes: Vec<u8>,
        pub timestamp: u64,
        pub commit: usize,
        pub missed_events: bool,
        pub missed_stored: bool,
        pub lost_events: Option<u64>,
        pub records: Vec<ExpectedRecord>,
    }

    /// Why a page cannot be encoded.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum EncodeError {
        BadLayout(SubBufLayout),
        /// Record `index` does not fit in the data area.
        PageFull {
            index: usize,
        },
        /// Record `index` is earlier than the running time.
        TimeWentBackwards {
            index: usize,
            ts: u64,
            running: u64,
        },
        /// Record `index` is too large to describe.
        TooLarge {
            index: usize,
        },
        /// Record `index`'s time cannot be written so that a reader gets it
        /// back: a delta of 2^59 or more, or an absolute time whose top five
        /// bits `rb_fix_abs_ts()` cannot restore from the running time.
        Unrepresentable {
            index: usize,
            ts: u64,
            running: u64,
        },
    }

    impl fmt::Display for EncodeError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                EncodeError::BadLayout(l) => write!(f, "bad layout {l:?}"),
                EncodeError::PageFull { index } => write!(f, "record {index} does not fit"),
                EncodeError::TimeWentBackwards { index, ts, running } => {
                    write!(
                        f,
                        "record {index} at {ts} is before the running time {running}"
                    )
                }
                EncodeError::TooLarge { index } => write!(f, "record {index} is too large"),
                EncodeError::Unrepresentable { index, ts, running } => write!(
                    f,
                    "record {index}: time {ts} cannot be encoded after running time {running}"
                ),
            }
        }
    }

    impl std::error::Error for EncodeError {}

    /// The event header word for `type_len` and `time_delta`, as a value to
    /// store in kernel byte order.
    pub fn header_word<E: Endian>(endian: E, type_len: u32, time_delta: u32) -> u32 {
        let (tl, td) = (type_len & 31, time_delta & TS_MASK as u32);
        if endian.is_big_endian() {
            (tl << 27) | td
        } else {
            (td << 5) | tl
        }
    }

    /// `rb_calculate_event_length()`: the bytes a data event of `payload_len`
    /// bytes occupies, header included (without any time extend).
    pub fn event_size(payload_len: usize, force_8byte_align: bool) -> usize {
        let mut length = payload_len.max(1);
        if length > RB_MAX_SMALL_DATA || force_8byte_align {
            length += 4;
        }
        length += 4;
        let align = if force_8byte_align { 8 } else { 4 };
        length = length.div_ceil(align) * align;
        if length == 8 + 4 {
            length += 4;
        }
        length
    }

    struct Writer<E> {
        endian: E,
        data: Vec<u8>,
        records: Vec<ExpectedRecord>,
        base: usize,
        data_size: usize,
        ts: u64,
        force8: bool,
    }

    impl<E: Endian> Writer<E> {
        fn word(&mut self, v: u32) {
            self.endian.write_uint(&mut self.data, u64::from(v), 4);
        }
        fn room(&self, n: usize) -> bool {
            self.data.len() + n <= self.data_size
        }
        fn push(&mut self, len: usize, ts: u64, kind: ExpectedKind) {
            let offset = self.base + self.data.len() - len;
            self.records.push(ExpectedRecord {
                offset,
                len,
                ts,
                kind,
            });
        }
        /// A time extend or absolute time stamp carrying 59 bits of `v`.
        fn stamp(&mut self, type_len: u32, v: u64) {
            let hdr = header_word(self.endian, type_len, (v & TS_MASK) as u32);
            self.word(hdr);
            self.word((v >> TS_SHIFT) as u32);
        }
        /// A data event (or a discarded one) with the given delta.
        fn event(&mut self, delta: u32, payload: &[u8], discard_len: Option<usize>) {
            let plen = discard_len.unwrap_or(payload.len());
            let size = event_size(plen, self.force8);
            let start = self.data.len();
            if discard_len.is_some() {
                let td = if delta == 0 { 1 } else { delta };
                self.word(header_word(self.endian, RINGBUF_TYPE_PADDING, td));
                self.word((size - 4) as u32);
                self.data.resize(start + size, 0);
                let ts = self.ts;
                self.push(
                    size,
                    ts,
                    ExpectedKind::Padding {
                        len: size,
                        discarded: true,
                    },
                );
                return;
            }
            let body = size - 4;
            let long = body > RB_MAX_SMALL_DATA || self.force8;
            if long {
                self.word(header_word(self.endian, 0, delta));
                self.word(body as u32);
            } else {
                self.word(header_word(self.endian, (body / 4) as u32, delta));
            }
            let pstart = self.data.len();
            self.data.extend_from_slice(payload);
            self.data.resize(start + size, 0);
            self.ts = self.ts.wrapping_add(u64::from(delta));
            let decoded = self.data[pstart..].to_vec();
            let ts = self.ts;
            self.push(size, ts, ExpectedKind::Data(decoded));
        }
    }

    impl<E: Endian> Writer<E> {
        /// Record `index` of the page: a data event (after a time extend
        /// where its delta needs one) or a discarded one.
        fn record(&mut self, index: usize, rec: &EncRecord) -> Result<(), EncodeError> {
            let (ts, plen, abs) = match rec {
                EncRecord::Event { ts, payload } => (*ts, payload.len(), false),
                EncRecord::AbsEvent { ts, payload } => (*ts, payload.len(), true),
                EncRecord::Discarded { ts, payload_len } => (*ts, *payload_len, false),
            };
            if plen > self.data_size {
                return Err(EncodeError::TooLarge { index });
            }
            let size = event_size(plen, self.force8);
            if abs {
                return self.abs_event(index, rec, ts, size);
            }
            if ts < self.ts {
                return Err(EncodeError::TimeWentBackwards {
                    index,
                    ts,
                    running: self.ts,
                });
            }
            let delta = ts - self.ts;
            if delta > ABS_TS_MASK {
                return Err(EncodeError::Unrepresentable {
                    index,
                    ts,
                    running: self.ts,
                });
            }
            let extend = delta > TS_MASK;
            if !self.room(size + if extend { 8 } else { 0 }) {
                return Err(EncodeError::PageFull { index });
            }
            let td = if extend {
                self.stamp(RINGBUF_TYPE_TIME_EXTEND, delta);
                self.ts = self.ts.wrapping_add(delta);
                let t = self.ts;
                self.push(8, t, ExpectedKind::TimeExtend { delta });
                0
            } else {
                delta as u32
            };
            match rec {
                EncRecord::Event { payload, .. } => self.event(td, payload, None),
                _ => self.event(td, &[], Some(plen)),
            }
            Ok(())
        }

        /// An absolute time stamp at `ts`, then record `index`'s event
        /// (`size` bytes) with no delta.
        fn abs_event(
            &mut self,
            index: usize,
            rec: &EncRecord,
            ts: u64,
            size: usize,
        ) -> Result<(), EncodeError> {
            if !self.room(8 + size) {
                return Err(EncodeError::PageFull { index });
            }
            let stored = ts & ABS_TS_MASK;
            if rb_fix_abs_ts(stored, self.ts) != ts {
                return Err(EncodeError::Unrepresentable {
                    index,
                    ts,
                    running: self.ts,
                });
            }
            self.stamp(RINGBUF_TYPE_TIME_STAMP, stored);
            self.ts = ts;
            self.push(8, ts, ExpectedKind::TimeStamp { abs: stored });
            if let EncRecord::AbsEvent { payload, .. } = rec {
                self.event(0, payload, None);
            }
            Ok(())
        }

        /// The page's end after the records, as `end` says; returns the
        /// commit.
        fn end(&mut self, end: EndPadding) -> usize {
            let data_size = self.data_size;
            let commit = self.data.len();
            let remaining = data_size - commit;
            match end {
                EndPadding::None => commit,
                EndPadding::Filler if remaining >= 8 => {
                    self.word(header_word(self.endian, RINGBUF_TYPE_PADDING, 1));
                    self.word((remaining - 4) as u32);
                    self.data.resize(data_size, 0);
                    let ts = self.ts;
                    self.push(
                        remaining,
                        ts,
                        ExpectedKind::Padding {
                            len: remaining,
                            discarded: true,
                        },
                    );
                    data_size
                }
                EndPadding::Filler => {
                    // Under 8 bytes: the kernel writes a null padding header but
                    // leaves it outside commit, and ring_buffer_read_page()
                    // zeroes everything after commit before user space sees it.
                    commit
                }
                EndPadding::Null => {
                    if remaining >= 4 {
                        self.word(header_word(self.endian, RINGBUF_TYPE_PADDING, 0));
                        self.data.resize(data_size, 0);
                        let ts = self.ts;
                        self.push(
                            remaining,
                            ts,
                            ExpectedKind::Padding {
                                len: remaining,
                                discarded: false,
                            },
                        );
                        data_size
                    } else {
                        commit
                    }
                }
            }
        }
    }

    /// The missed-events flag, the lost-events count stored after the data
    /// (where it fits) and the raw commit word of a page whose data ends at
    /// `commit`.
    fn missed_fields(
        layout: &SubBufLayout,
        commit: usize,
        missed: Missed,
    ) -> (bool, Option<u64>, u64) {
        let ls = layout.long_size;
        let data_size = layout.data_size();
        let (missed_events, lost_events) = match missed {
            Missed::None => (false, None),
            Missed::Flag => (true, None),
            Missed::Count(n) => {
                let n = if ls == 4 { n & 0xffff_ffff } else { n };
                (true, (data_size - commit >= ls).then_some(n))
            }
        };
        let mut raw_commit = commit as u64;
        if lost_events.is_some() {
            raw_commit += RB_MISSED_STORED;
        }
        if missed_events {
            // local_add(RB_MISSED_EVENTS): an int, sign-extended to a long.
            raw_commit = if ls == 8 {
                raw_commit.wrapping_add(0xffff_ffff_8000_0000)
            } else {
                raw_commit + RB_MISSED_EVENTS
            };
        }
        (missed_events, lost_events, raw_commit)
    }

    /// Encodes one sub-buffer.
    pub fn encode_subbuf<E: Endian>(
        endian: E,
        layout: &SubBufLayout,
        spec: &PageSpec,
    ) -> Result<EncodedPage, EncodeError> {
        layout
            .validate()
            .map_err(|_| EncodeError::BadLayout(*layout))?;
        let first_ts = spec.records.first().map(|r| match r {
            EncRecord::Event { ts, .. }
            | EncRecord::AbsEvent { ts, .. }
            | EncRecord::Discarded { ts, .. } => *ts,
        });
        let timestamp = spec.timestamp.or(first_ts).unwrap_or(0);
        let data_size = layout.data_size();
        let mut w = Writer {
            endian,
            data: Vec::with_capacity(data_size),
            records: Vec::new(),
            base: layout.data_offset,
            data_size,
            ts: timestamp,
            force8: spec.force_8byte_align,
        };
        for (index, rec) in spec.records.iter().enumerate() {
            w.record(index, rec)?;
        }
        let commit = w.end(spec.end);
        let (missed_events, lost_events, raw_commit) = missed_fields(layout, commit, spec.missed);

        let ls = layout.long_size;
        let mut bytes = Vec::with_capacity(layout.subbuf_size);
        endian.write_uint(&mut bytes, timestamp, 8);
        endian.write_uint(&mut bytes, raw_commit, ls);
        bytes.extend_from_slice(&w.data[..commit]);
        if let Some(n) = lost_events {
            endian.write_uint(&mut bytes, n, ls);
        }
        bytes.resize(layout.subbuf_size, 0);

        Ok(EncodedPage {
            bytes,
            timestamp,
            commit,
            missed_events,
            missed_stored: lost_events.is_some(),
            lost_events,
            records: w.records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::encode::*;
    use super::*;
    use crate::endian::{BigEndian, LittleEndian, RunTimeEndian};

    fn layout(long_size: usize, subbuf_size: usize) -> SubBufLayout {
        SubBufLayout {
            long_size,
            data_offset: 8 + long_size,
            subbuf_size,
        }
    }

    fn decode<'a, E: Endian>(
        e: E,
        l: &SubBufLayout,
        page: &'a [u8],
    ) -> (SubBuffer<'a>, Vec<ExpectedRecord>) {
        let sb = parse_subbuf(e, l, page).unwrap();
        let recs = sb
            .events(e)
            .map(|r| ExpectedRecord::from_record(&r.unwrap()))
            .collect();
        (sb, recs)
    }

    fn check_round_trip<E: Endian>(e: E, l: &SubBufLayout, spec: &PageSpec) -> EncodedPage {
        let enc = encode_subbuf(e, l, spec).unwrap();
        assert_eq!(enc.bytes.len(), l.subbuf_size);
        let (sb, recs) = decode(e, l, &enc.bytes);
        assert_eq!(sb.timestamp, enc.timestamp);
        assert_eq!(sb.commit, enc.commit);
        assert_eq!(sb.missed_events, enc.missed_events);
        assert_eq!(sb.missed_stored, enc.missed_stored);
        assert_eq!(sb.lost_events, enc.lost_events);
        assert_eq!(recs, enc.records);
        enc
    }

    fn all_kinds(base: u64) -> PageSpec {
        PageSpec {
            timestamp: None,
            records: vec![
                EncRecord::Event {
                    ts: base,
                    payload: vec![1, 2, 3, 4, 5, 6, 7, 8],
                },
                EncRecord::Event {
                    ts: base + 100,
                    payload: vec![],
                },
                EncRecord::Event {
                    ts: base + 100 + (1 << 27),
                    payload: vec![0xaa; 12],
                }, // extend
                EncRecord::Discarded {
                    ts: base + (1 << 28),
                    payload_len: 20,
                },
                EncRecord::Event {
                    ts: base + (1 << 28) + 5,
                    payload: (0..200).collect(),
                }, // type_len 0
                EncRecord::AbsEvent {
                    ts: base + (1 << 29),
                    payload: vec![9; 16],
                },
                EncRecord::Event {
                    ts: base + (1 << 29) + 1,
                    payload: vec![7; 112],
                },
                EncRecord::Event {
                    ts: base + (1 << 29) + 2,
                    payload: vec![6; 113],
                },
                EncRecord::Event {
                    ts: base + (1 << 40),
                    payload: vec![5; 4],
                },
            ],
            end: EndPadding::Filler,
            missed: Missed::Count(12345),
            force_8byte_align: false,
        }
    }

    #[test]
    fn round_trips_all_kinds_both_orders_both_longs() {
        for ls in [4, 8] {
            for sz in [4096, 1024] {
                let l = layout(ls, sz);
                for end in [EndPadding::None, EndPadding::Filler, EndPadding::Null] {
                    for missed in [Missed::None, Missed::Flag, Missed::Count(7)] {
                        for force8 in [false, true] {
                            let mut spec = all_kinds(1_000_000_007);
                            spec.end = end;
                            spec.missed = missed;
                            spec.force_8byte_align = force8;
                            let a = check_round_trip(LittleEndian, &l, &spec);
                            let b = check_round_trip(BigEndian, &l, &spec);
                            check_round_trip(RunTimeEndian::Big, &l, &spec);
                            assert_eq!(a.records, b.records);
                            let kinds: Vec<_> = a
                                .records
                                .iter()
                                .map(|r| core::mem::discriminant(&r.kind))
                                .collect();
                            assert!(kinds.contains(&core::mem::discriminant(
                                &ExpectedKind::TimeExtend { delta: 0 }
                            )));
                            assert!(kinds.contains(&core::mem::discriminant(
                                &ExpectedKind::TimeStamp { abs: 0 }
                            )));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn kernel_sizes_and_bit_positions() {
        // rb_calculate_event_length().
        assert_eq!(event_size(0, false), 8);
        assert_eq!(event_size(4, false), 8);
        assert_eq!(event_size(5, false), 16); // 12 grown to 16
        assert_eq!(event_size(8, false), 16);
        assert_eq!(event_size(9, false), 16);
        assert_eq!(event_size(112, false), 116);
        assert_eq!(event_size(113, false), 124); // + length word, aligned
        assert_eq!(event_size(1, true), 16);
        assert_eq!(event_size(9, true), 24);
        // type_len 3, time_delta 5: LE low bits, BE high bits.
        assert_eq!(header_word(LittleEndian, 3, 5), (5 << 5) | 3);
        assert_eq!(header_word(BigEndian, 3, 5), (3 << 27) | 5);

        let l = layout(8, 4096);
        let spec = PageSpec {
            timestamp: Some(1000),
            records: vec![
                EncRecord::Event {
                    ts: 1005,
                    payload: vec![0x11, 0x22],
                },
                EncRecord::Event {
                    ts: 1010,
                    payload: vec![0x33; 200],
                },
            ],
            ..Default::default()
        };
        let le = encode_subbuf(LittleEndian, &l, &spec).unwrap();
        // First header: LE word 5<<5 | 1 = 0xa1.
        assert_eq!(&le.bytes[16..20], &[0xa1, 0, 0, 0]);
        assert_eq!(&le.bytes[20..22], &[0x11, 0x22]);
        // Second: type_len 0, delta 5, array[0] = 4 + 200.
        assert_eq!(&le.bytes[24..32], &[0xa0, 0, 0, 0, 204, 0, 0, 0]);
        let be = encode_subbuf(BigEndian, &l, &spec).unwrap();
        assert_eq!(&be.bytes[16..20], &[0x08, 0, 0, 0x05]);
        assert_eq!(&be.bytes[24..32], &[0, 0, 0, 5, 0, 0, 0, 204]);
        let (_, recs) = decode(BigEndian, &l, &be.bytes);
        assert_eq!(recs[1].kind, ExpectedKind::Data(vec![0x33; 200]));
        assert_eq!(recs[1].offset, 24);
        assert_eq!(recs[1].len, 208);
        assert_eq!(recs[1].ts, 1010);
    }

    #[test]
    fn missed_flags_and_sign_extension() {
        for ls in [4, 8] {
            let l = layout(ls, 4096);
            let spec = PageSpec {
                records: vec![EncRecord::Event {
                    ts: 1,
                    payload: vec![1; 8],
                }],
                missed: Missed::Count(0x2154),
                ..Default::default()
            };
            let p = encode_subbuf(BigEndian, &l, &spec).unwrap();
            let sb = parse_subbuf(BigEndian, &l, &p.bytes).unwrap();
            assert_eq!(
                (sb.missed_events, sb.missed_stored, sb.lost_events),
                (true, true, Some(0x2154))
            );
            if ls == 8 {
                assert_eq!(sb.raw_commit, 0xffff_ffff_c000_0010);
                // Also accepted without the sign extension.
                let mut q = p.bytes.clone();
                q[8..12].copy_from_slice(&[0; 4]);
                let sb = parse_subbuf(BigEndian, &l, &q).unwrap();
                assert_eq!((sb.commit, sb.lost_events), (16, Some(0x2154)));
            }
            // Full page: the flag only.
            let full = PageSpec {
                records: vec![EncRecord::Event {
                    ts: 1,
                    payload: vec![1; 8],
                }],
                end: EndPadding::Filler,
                missed: Missed::Count(5),
                ..Default::default()
            };
            let p = check_round_trip(LittleEndian, &l, &full);
            assert_eq!(
                (p.missed_events, p.missed_stored, p.commit),
                (true, false, l.data_size())
            );
        }
    }

    #[test]
    fn abs_time_stamp_top_bits() {
        // rb_fix_abs_ts: top five bits from the running time.
        let save = (0x18u64 << 56) | 1000;
        assert_eq!(rb_fix_abs_ts(2000, save), (0x18 << 56) | 2000);
        // The 59 stored bits wrapped: carry into the top bits.
        assert_eq!(
            rb_fix_abs_ts(5, (0x18 << 56) + (1 << 59) - 100),
            (0x20 << 56) | 5
        );
        // Without top bits in the running time there is nothing to restore.
        assert_eq!(rb_fix_abs_ts(5 | (1 << 58), 1 << 58), 5 | (1 << 58));
        assert_eq!(rb_fix_abs_ts(5, 1000), 5);
        // Through the encoder: a clock with the top bits set.
        let base = 0xf000_0000_0000_0000u64 + 77;
        let l = layout(4, 4096);
        let spec = PageSpec {
            records: vec![
                EncRecord::Event {
                    ts: base,
                    payload: vec![1; 4],
                },
                EncRecord::AbsEvent {
                    ts: base + 10,
                    payload: vec![2; 4],
                },
            ],
            ..Default::default()
        };
        let p = check_round_trip(LittleEndian, &l, &spec);
        assert_eq!(
            p.records[1].kind,
            ExpectedKind::TimeStamp {
                abs: (base + 10) & ABS_TS_MASK
            }
        );
        assert_eq!(p.records[2].ts, base + 10);
    }

    #[test]
    fn errors_name_offsets() {
        use SubBufErrorKind::*;
        let l = layout(4, 4096);
        let mk = |commit: u32, words: &[u32]| {
            let mut p = vec![0u8; 4096];
            p[8..12].copy_from_slice(&commit.to_le_bytes());
            for (i, w) in words.iter().enumerate() {
                p[12 + 4 * i..16 + 4 * i].copy_from_slice(&w.to_le_bytes());
            }
            p
        };
        let e = LittleEndian;
        let first_err = |p: &[u8]| {
            let sb = parse_subbuf(e, &l, p).unwrap();
            let v: Vec<_> = sb.events(e).collect();
            assert!(v.last().unwrap().is_err(), "{v:?}");
            // Fused after the error.
            let mut it = sb.events(e);
            while let Some(Ok(_)) = it.next() {}
            assert!(it.next().is_none());
            v.into_iter().last().unwrap().unwrap_err()
        };
        assert_eq!(
            parse_subbuf(e, &l, &mk(4085, &[])).unwrap_err().kind,
            CommitBeyondData {
                commit: 4085,
                data_size: 4084
            }
        );
        assert_eq!(
            parse_subbuf(e, &l, &mk(4, &[])[..10]).unwrap_err().kind,
            TooShort { len: 10, need: 12 }
        );
        assert_eq!(
            parse_subbuf(e, &l, &mk(100, &[])[..50]).unwrap_err().kind,
            TooShort { len: 50, need: 112 }
        );
        assert!(matches!(
            parse_subbuf(e, &l, &[0; 5000]).unwrap_err().kind,
            TooLong { .. }
        ));
        assert!(matches!(
            parse_subbuf(e, &l, &mk(1 << 30, &[])).unwrap_err().kind,
            StoredWithoutMissed { .. }
        ));
        assert!(matches!(
            parse_subbuf(e, &l, &mk(0xc000_0000 | 4084, &[]))
                .unwrap_err()
                .kind,
            NoRoomForLostCount { .. }
        ));
        let l8 = layout(8, 4096);
        let mut p = vec![0u8; 4096];
        p[8..16].copy_from_slice(&0x0000_0001_0000_0010u64.to_le_bytes());
        assert!(matches!(
            parse_subbuf(e, &l8, &p).unwrap_err().kind,
            BadCommit { .. }
        ));
        let bad = SubBufLayout {
            long_size: 6,
            data_offset: 14,
            subbuf_size: 4096,
        };
        assert!(matches!(
            parse_subbuf(e, &bad, &p).unwrap_err().kind,
            BadLayout(_)
        ));

        // Event errors: offsets are within the sub-buffer (data at 12).
        let err = first_err(&mk(8, &[2, 0])); // type_len 2 = 12 bytes > 8
        assert_eq!(
            (err.offset, err.kind),
            (
                12,
                PastCommit {
                    type_len: 2,
                    len: 12,
                    commit: 8
                }
            )
        );
        let err = first_err(&mk(12, &[1, 0, 0])); // 8-byte event, then 4 bytes of a type_len 0 header
        assert_eq!((err.offset, err.kind), (20, TruncatedHeader { commit: 12 }));
        let err = first_err(&mk(16, &[0, 4, 0, 0]));
        assert_eq!(
            (err.offset, err.kind),
            (
                12,
                ZeroLength {
                    type_len: 0,
                    array0: 4
                }
            )
        );
        let err = first_err(&mk(16, &[0, 6, 0, 0]));
        assert_eq!(
            err.kind,
            Misaligned {
                type_len: 0,
                array0: 6
            }
        );
        let err = first_err(&mk(16, &[0, 100, 0, 0]));
        assert_eq!(
            err.kind,
            PastCommit {
                type_len: 0,
                len: 104,
                commit: 16
            }
        );
        let err = first_err(&mk(16, &[29 | (1 << 5), 0, 0, 0]));
        assert_eq!(
            err.kind,
            ZeroLength {
                type_len: 29,
                array0: 0
            }
        );
        let err = first_err(&mk(16, &[29 | (1 << 5), 16, 0, 0]));
        assert_eq!(
            err.kind,
            PastCommit {
                type_len: 29,
                len: 20,
                commit: 16
            }
        );
        let err = first_err(&mk(4, &[30]));
        assert_eq!(err.kind, TruncatedHeader { commit: 4 });
        assert!(err.to_string().contains("offset 12"), "{err}");
        // A null padding runs to the end of the commit, even a 4-byte one.
        let p = mk(12, &[1, 0, 29]);
        let sb = parse_subbuf(e, &l, &p).unwrap();
        let v: Vec<_> = sb.events(e).map(Result::unwrap).collect();
        assert_eq!(
            v[1].kind,
            RbRecordKind::Padding {
                len: 4,
                discarded: false
            }
        );
        assert_eq!(sb.count_data_events(e), Ok(1));
    }

    #[test]
    fn empty_page() {
        let l = layout(8, 4096);
        let p = encode_subbuf(BigEndian, &l, &PageSpec::default()).unwrap();
        let sb = parse_subbuf(BigEndian, &l, &p.bytes).unwrap();
        assert_eq!(sb.commit, 0);
        assert_eq!(sb.events(BigEndian).count(), 0);
        // A zeroed page too.
        let sb = parse_subbuf(LittleEndian, &l, &[0; 4096]).unwrap();
        assert_eq!(sb.events(LittleEndian).count(), 0);
    }

    #[test]
    fn encoder_refuses_what_it_cannot_do() {
        let l = layout(4, 4096);
        let spec = PageSpec {
            records: vec![
                EncRecord::Event {
                    ts: 10,
                    payload: vec![],
                },
                EncRecord::Event {
                    ts: 5,
                    payload: vec![],
                },
            ],
            ..Default::default()
        };
        assert!(matches!(
            encode_subbuf(LittleEndian, &l, &spec),
            Err(EncodeError::TimeWentBackwards { index: 1, .. })
        ));
        let spec = PageSpec {
            records: (0..100)
                .map(|i| EncRecord::Event {
                    ts: i,
                    payload: vec![0; 100],
                })
                .collect(),
            ..Default::default()
        };
        assert!(matches!(
            encode_subbuf(LittleEndian, &l, &spec),
            Err(EncodeError::PageFull { index: 39 })
        ));
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Gen {
            Event(u64, usize),
            Abs(u64, usize),
            Discard(u64, usize),
        }

        fn gen_delta() -> impl Strategy<Value = u64> {
            prop_oneof![
                0u64..16,
                0u64..(1 << 27),
                (1u64 << 26)..(1 << 28),
                0u64..(1 << 45)
            ]
        }

        fn gen_rec() -> impl Strategy<Value = Gen> {
            let len = prop_oneof![0usize..16, 0usize..130, 100usize..400];
            prop_oneof![
                6 => (gen_delta(), len.clone()).prop_map(|(d, l)| Gen::Event(d, l)),
                1 => (gen_delta(), len.clone()).prop_map(|(d, l)| Gen::Abs(d, l)),
                1 => (gen_delta(), len).prop_map(|(d, l)| Gen::Discard(d, l)),
            ]
        }

        fn build(start: u64, gens: &[Gen]) -> Vec<EncRecord> {
            let mut ts = start;
            let mut out = Vec::new();
            for (i, g) in gens.iter().enumerate() {
                let pay = |l: usize| (0..l).map(|j| (i * 31 + j) as u8).collect::<Vec<u8>>();
                match *g {
                    Gen::Event(d, l) => {
                        ts = ts.saturating_add(d);
                        out.push(EncRecord::Event {
                            ts,
                            payload: pay(l),
                        });
                    }
                    Gen::Abs(d, l) => {
                        ts = ts.saturating_add(d);
                        out.push(EncRecord::AbsEvent {
                            ts,
                            payload: pay(l),
                        });
                    }
                    Gen::Discard(d, l) => {
                        ts = ts.saturating_add(d);
                        out.push(EncRecord::Discarded { ts, payload_len: l });
                    }
                }
            }
            out
        }

        fn spec_strategy() -> impl Strategy<Value = (PageSpec, bool, usize, usize)> {
            (
                prop_oneof![
                    Just(0u64),
                    any::<u64>().prop_map(|v| v >> 2),
                    Just(0xf7ff_ffff_ffff_0000)
                ],
                proptest::collection::vec(gen_rec(), 0..60),
                prop_oneof![
                    Just(EndPadding::None),
                    Just(EndPadding::Filler),
                    Just(EndPadding::Null)
                ],
                prop_oneof![
                    Just(Missed::None),
                    Just(Missed::Flag),
                    any::<u64>().prop_map(Missed::Count)
                ],
                any::<bool>(),
                any::<bool>(),
                prop_oneof![Just(4usize), Just(8usize)],
                prop_oneof![Just(4096usize), Just(512usize), Just(8192usize)],
            )
                .prop_map(|(start, gens, end, missed, force8, be, ls, sz)| {
                    let spec = PageSpec {
                        timestamp: None,
                        records: build(start, &gens),
                        end,
                        missed,
                        force_8byte_align: force8,
                    };
                    (spec, be, ls, sz)
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]

            #[test]
            fn encode_decode_round_trip((mut spec, be, ls, sz) in spec_strategy()) {
                let l = layout(ls, sz);
                // Keep what fits.
                loop {
                    let r = if be { encode_subbuf(BigEndian, &l, &spec) } else { encode_subbuf(LittleEndian, &l, &spec) };
                    match r {
                        Ok(_) => break,
                        Err(EncodeError::PageFull { index })
                        | Err(EncodeError::TooLarge { index })
                        | Err(EncodeError::Unrepresentable { index, .. }) => spec.records.truncate(index),
                        Err(e) => panic!("{e}"),
                    }
                }
                if be { check_round_trip(BigEndian, &l, &spec); } else { check_round_trip(LittleEndian, &l, &spec); }
            }

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4200), ls in prop_oneof![Just(4usize), Just(8usize)]) {
                let l = layout(ls, 4096);
                for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
                    if let Ok(sb) = parse_subbuf(e, &l, &bytes) {
                        let mut n = 0usize;
                        for r in sb.events(e) {
                            n += 1;
                            prop_assert!(n <= 4096 / 4 + 1);
                            if let Ok(r) = r { prop_assert!(r.len >= 4 && r.offset + r.len <= l.data_offset + sb.commit); }
                        }
                    }
                }
            }

            #[test]
            fn mutated_pages_never_panic((spec, be, ls, sz) in spec_strategy(), muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
                let l = layout(ls, sz);
                let enc = if be { encode_subbuf(BigEndian, &l, &spec) } else { encode_subbuf(LittleEndian, &l, &spec) };
                if let Ok(enc) = enc {
                    let mut p = enc.bytes;
                    for (i, b) in muts { let n = p.len(); p[i % n] = b; }
                    for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
                        if let Ok(sb) = parse_subbuf(e, &l, &p) {
                            let mut n = 0usize;
                            for r in sb.events(e) { n += 1; prop_assert!(n <= sz / 4 + 1); let _ = r; }
                        }
                    }
                }
            }
        }
    }
}
