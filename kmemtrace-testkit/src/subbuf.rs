//! An encoder of sub-buffers following the kernel's writer rules, for tests
//! and test vectors (it is not used to decode).
//!
//! What it reproduces, from `kernel/trace/ring_buffer.c`:
//! - event sizes (`rb_calculate_event_length()`): a zero-length payload
//!   counts as 1 byte; payloads over 112 bytes (or all of them on
//!   8-byte-alignment kernels) take `type_len` 0 and a length word that
//!   counts itself; sizes are rounded to 4 (or 8); a 12-byte event is grown
//!   to 16 so it can later hold a time extend and padding;
//! - `type_len` (`rb_update_event()`): `DIV_ROUND_UP(size - 4, 4)`;
//! - a time extend before an event whose delta does not fit 27 bits, and an
//!   absolute time stamp (59 bits) before events that ask for one; the event
//!   itself then has `time_delta` 0;
//! - discarded events (`rb_event_discard()`): padding with the event's delta
//!   (1 if 0) and `array[0]` = size − 4;
//! - end-of-page filler (`rb_reset_tail()`): padding with `time_delta` 1 and
//!   a length if 8 or more bytes remain, else a `time_delta` 0 header left
//!   outside `commit`;
//! - missed-events flags and the stored count (`ring_buffer_read_page()`):
//!   the count is stored only if a `long` fits after the data, and on 64-bit
//!   kernels `RB_MISSED_EVENTS` sign-extends into the upper half;
//! - zeroed bytes after the data (the kernel clears them before handing the
//!   page to user space).
//!
//! Deltas are taken from the reader's running time, so padding (which the
//! reader does not time) does not shift later events.

use core::fmt;

use kmemtrace_kernel::endian::Endian;
use kmemtrace_kernel::subbuf::*;

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
            RbRecordKind::Padding { len, discarded } => ExpectedKind::Padding { len, discarded },
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
    RecordHeader {
        type_len,
        time_delta,
    }
    .encode(endian)
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
fn missed_fields(layout: &SubBufLayout, commit: usize, missed: Missed) -> (bool, Option<u64>, u64) {
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
