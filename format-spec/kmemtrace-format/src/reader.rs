//! Reading logs block by block (FORMAT.md §5.2), from any `Read` (a file,
//! stdin, a pipe), without seeking.
//!
//! The reader yields every intact block, reports damage with its offset and
//! resynchronises at the next intact block, and reports truncation at the
//! end. Memory is bounded by the largest block (64 MiB) plus one read chunk,
//! whatever the input.

use crate::block::{
    decode_payload, parse_file_header, BlockHeader, BlockType, FileHeaderError, BLOCK_HEADER_LEN,
    FILE_HEADER_LEN, SYNC, VERSION_MAJOR,
};
use crate::crc_shift;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::fmt;
use std::io::{self, Read};

const READ_CHUNK: usize = 1 << 20;
/// The first read's size, doubling up to [`READ_CHUNK`].
const FIRST_READ: usize = 64 << 10;

/// An intact block (its CRC matched).
#[derive(Debug, Clone)]
pub struct RawBlock {
    /// File offset of the block header.
    pub offset: u64,
    pub header: BlockHeader,
    /// The payload as stored (possibly compressed).
    pub stored: Vec<u8>,
}

impl RawBlock {
    /// The payload, decompressed if needed. Errors if the flags are unknown
    /// or the payload does not decompress to `raw_len` bytes; the error
    /// names the block type, not the offset (callers place it).
    pub fn payload(&self) -> Result<Cow<'_, [u8]>, String> {
        decode_payload(&self.header, &self.stored)
            .map_err(|e| format!("{} block: {e}", self.header.block_type.name()))
    }
    /// Bytes the block occupies in the file.
    pub fn len_on_disk(&self) -> u64 {
        (BLOCK_HEADER_LEN + self.stored.len()) as u64
    }
}

/// Bytes that are not intact blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Where the damage starts (the offset a block was expected at).
    pub offset: u64,
    pub reason: String,
    /// Bytes skipped.
    pub skipped: u64,
    /// Offset of the next intact block, or `None` if damage runs to the end.
    pub resumed_at: Option<u64>,
}

impl Damage {
    /// What happened, without the offset it happened at (for messages
    /// that place it themselves).
    pub fn description(&self) -> String {
        match self.resumed_at {
            Some(r) => format!(
                "{}; skipped {} bytes, resumed at offset {r}",
                self.reason, self.skipped
            ),
            None => format!(
                "{}; no intact block in the remaining {} bytes",
                self.reason, self.skipped
            ),
        }
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.description())
    }
}

/// The input ends inside a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    /// Offset of the incomplete block.
    pub offset: u64,
    /// Bytes the block needs (header, or header and payload).
    pub needed: u64,
    /// Bytes present.
    pub available: u64,
}

impl fmt::Display for Truncation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offset {}: input ends inside a block ({} of its {} bytes present)",
            self.offset, self.available, self.needed
        )
    }
}

/// What the reader found next.
#[derive(Debug, Clone)]
pub enum Item {
    Block(RawBlock),
    Damage(Damage),
    /// Always the last item.
    Truncated(Truncation),
}

/// Why a log cannot be opened at all.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    Header(FileHeaderError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "reading the file header: {e}"),
            OpenError::Header(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for OpenError {}

/// A candidate block met while resynchronising, waiting for the running
/// CRC to reach its end (ordered by end, then offset).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    end: u64,
    at: u64,
    /// `shift(crc(header bytes 0..16) ^ P(payload start), payload length)`.
    partial: u32,
    crc: u32,
}

/// The state of one resynchronisation pass.
struct Scan {
    /// The running CRC covers the bytes from the scan's start to here.
    crc_pos: u64,
    running: u32,
    /// Where the search for the next sync word goes on.
    sync_pos: u64,
    pending: BinaryHeap<Reverse<Candidate>>,
    /// Offsets of the pending candidates (their bytes must be kept).
    starts: BTreeSet<u64>,
    /// The first intact block found so far.
    best: Option<u64>,
}

/// Bytes a reader may run through the CRC in checks that fail and in
/// resynchronising before it leaves the rest of the input unread: this
/// much, and [`WASTE_PER_BYTE`] for each byte of input read past. A header
/// carries no CRC of its own, so each damaged block costs its claimed
/// length (up to 64 MiB) to check: a file of headers claiming to run to
/// its end, each followed by an intact empty block, would cost the square
/// of its size (an hour for 128 MiB). Real damage (bit flips, zeroed or
/// cut stretches) costs about the damaged blocks' size, far within this.
const WASTE_ALLOWANCE: u64 = 256 << 20;
/// See [`WASTE_ALLOWANCE`].
const WASTE_PER_BYTE: u64 = 4;

/// Reads a log from the start.
pub struct LogReader<R: Read> {
    src: R,
    /// Bytes read, `buf[..filled]`; the rest is room kept for the next
    /// reads (so that it is not zeroed again for each one).
    buf: Vec<u8>,
    filled: usize,
    /// Index in `buf` of the next unread byte.
    pos: usize,
    /// File offset of `buf[0]`.
    base: u64,
    eof: bool,
    finished: bool,
    version: (u16, u16),
    header_damage: Option<FileHeaderError>,
    /// Bytes run through the CRC while resynchronising (see `crc_to`).
    resync_crc_bytes: u64,
    /// Bytes run through the CRC in block checks that failed.
    failed_crc_bytes: u64,
}

impl<R: Read> LogReader<R> {
    /// Reads and checks the file header.
    pub fn new(src: R) -> Result<Self, OpenError> {
        let mut r = LogReader {
            src,
            buf: Vec::new(),
            filled: 0,
            pos: 0,
            base: 0,
            eof: false,
            finished: false,
            version: (0, 0),
            header_damage: None,
            resync_crc_bytes: 0,
            failed_crc_bytes: 0,
        };
        r.ensure_abs(FILE_HEADER_LEN as u64)
            .map_err(OpenError::Io)?;
        let have = r.filled.min(FILE_HEADER_LEN);
        match parse_file_header(&r.buf[..have]) {
            Ok(v) => r.version = v,
            // A log whose first bytes were damaged still has its intact
            // ARCH block right after the header: read on, as format 1.0,
            // and say so. Anything else without a valid header is not a log.
            Err(e @ (FileHeaderError::BadMagic { .. } | FileHeaderError::BadCrc { .. })) => match r
                .intact_block_at(FILE_HEADER_LEN as u64)
                .map_err(OpenError::Io)?
            {
                Some(h) if h.block_type == BlockType::Arch => {
                    r.version = (VERSION_MAJOR, 0);
                    r.header_damage = Some(e);
                }
                _ => return Err(OpenError::Header(e)),
            },
            Err(e) => return Err(OpenError::Header(e)),
        }
        r.pos = r.idx(FILE_HEADER_LEN as u64);
        Ok(r)
    }

    /// What was wrong with the file header when the reader read on all the
    /// same, because an intact ARCH block follows it.
    pub fn header_damage(&self) -> Option<&FileHeaderError> {
        self.header_damage.as_ref()
    }

    /// Bytes checksummed while resynchronising after damage, so far: each
    /// damaged stretch is checksummed once, however many candidate blocks
    /// it holds.
    pub fn resync_crc_bytes(&self) -> u64 {
        self.resync_crc_bytes
    }

    /// Bytes checksummed because of damage so far: block checks that
    /// failed, and resynchronising ([`resync_crc_bytes`](Self::resync_crc_bytes)).
    pub fn damage_crc_bytes(&self) -> u64 {
        self.failed_crc_bytes.saturating_add(self.resync_crc_bytes)
    }

    /// The log's format version (major, minor).
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// File offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn end_abs(&self) -> u64 {
        self.base + self.filled as u64
    }

    /// Makes `buf` reach file offset `end` (exclusive) if the input has it.
    /// May drop bytes before `pos`. Returns false at end of input.
    fn ensure_abs(&mut self, end: u64) -> io::Result<bool> {
        while self.end_abs() < end {
            if self.eof {
                return Ok(false);
            }
            if self.pos > 0 && self.pos >= self.filled / 2 {
                self.buf.copy_within(self.pos..self.filled, 0);
                self.filled -= self.pos;
                self.base += self.pos as u64;
                self.pos = 0;
            }
            // Room grows with what arrives (doubling), not with what a
            // header claims: a block claiming 64 MiB of which 1 KB is
            // present costs a chunk, not 64 MiB. The first reads are
            // small, so a small log costs no megabyte of zeroed buffer.
            let chunk = self.filled.clamp(FIRST_READ, READ_CHUNK);
            let want = ((end - self.end_abs()) as usize)
                .min(self.filled.max(chunk))
                .max(chunk);
            let old = self.filled;
            if self.buf.len() < old + want {
                self.buf.resize(old + want, 0);
            }
            let n = loop {
                match self.src.read(&mut self.buf[old..old + want]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            self.filled = old + n;
            if n == 0 {
                self.eof = true;
            }
        }
        Ok(true)
    }

    fn idx(&self, off: u64) -> usize {
        (off - self.base) as usize
    }

    fn header_at(&self, off: u64) -> [u8; BLOCK_HEADER_LEN] {
        let i = self.idx(off);
        self.buf[i..i + BLOCK_HEADER_LEN].try_into().unwrap()
    }

    /// Checks whether an intact block starts at `off`; on success returns
    /// its header. Needs `ensure_abs` to succeed for the whole block.
    fn intact_block_at(&mut self, off: u64) -> io::Result<Option<BlockHeader>> {
        if !self.ensure_abs(off + BLOCK_HEADER_LEN as u64)? {
            return Ok(None);
        }
        let h = self.header_at(off);
        let Ok(hdr) = BlockHeader::parse(&h) else {
            return Ok(None);
        };
        let end = off + (BLOCK_HEADER_LEN as u64) + u64::from(hdr.stored_len);
        if !self.ensure_abs(end)? {
            return Ok(None);
        }
        let i = self.idx(off) + BLOCK_HEADER_LEN;
        let stored = &self.buf[i..i + hdr.stored_len as usize];
        Ok((BlockHeader::compute_crc(&h, stored) == hdr.crc).then_some(hdr))
    }

    /// Scans from `from` for the next intact block. Leaves `pos` at it (or
    /// at the end of input) and returns its offset.
    ///
    /// One pass, so that each byte is read a bounded number of times
    /// whatever the input (a file of sync words with plausible lengths and
    /// bad CRCs made the old scan, which checked each candidate over its
    /// whole claimed length, quadratic). A running CRC `P(x)` of the bytes
    /// from `from` to `x` moves forward once; a candidate block at `c`
    /// (a sync word whose header parses) with payload `[a, e)` is intact
    /// when `shift(crc(header) ^ P(a), e - a) ^ P(e)` equals its CRC
    /// ([`crc_shift`]). Candidates wait in a queue ordered by their end;
    /// the first intact one in file order wins.
    fn resync(&mut self, from: u64) -> io::Result<Option<u64>> {
        let mut s = Scan {
            crc_pos: from,
            running: 0,
            sync_pos: from,
            pending: BinaryHeap::new(),
            starts: BTreeSet::new(),
            best: None,
        };
        loop {
            let next_end = s.pending.peek().map(|Reverse(c)| c.end);
            // Candidates are taken in file order, each before any pending
            // end past its payload's start, and none after an intact one.
            let limit = match (next_end, s.best) {
                (Some(e), Some(b)) => Some((e - BLOCK_HEADER_LEN as u64 + 1).min(b)),
                (Some(e), None) => Some(e - BLOCK_HEADER_LEN as u64 + 1),
                (None, b) => b,
            };
            if let Some(c) = self.next_sync(&s, limit)? {
                s.sync_pos = c + 1;
                let h = self.header_at(c);
                if let Ok(hdr) = BlockHeader::parse(&h) {
                    let start = c + BLOCK_HEADER_LEN as u64;
                    self.crc_to(&mut s, start)?;
                    let len = u64::from(hdr.stored_len);
                    let partial = crc_shift::shift(crc32fast::hash(&h[..16]) ^ s.running, len);
                    s.starts.insert(c);
                    s.pending.push(Reverse(Candidate {
                        end: start + len,
                        at: c,
                        partial,
                        crc: hdr.crc,
                    }));
                }
                continue;
            }
            let Some(Reverse(cand)) = s.pending.pop() else {
                break;
            };
            if s.best.is_some_and(|b| cand.at > b) {
                s.starts.remove(&cand.at);
                continue;
            }
            // Its start stays kept (`starts`) while the CRC reads on to
            // its end: it may become the best.
            let complete = self.crc_to(&mut s, cand.end)?;
            s.starts.remove(&cand.at);
            if !complete {
                // The input ends first: no pending candidate is complete.
                s.pending.clear();
                s.starts.clear();
                continue;
            }
            // Candidates past an intact one were skipped above, so this
            // one comes first in the file.
            if cand.partial ^ s.running == cand.crc {
                s.best = Some(cand.at);
            }
        }
        match s.best {
            Some(b) => {
                self.pos = self.idx(b);
                Ok(Some(b))
            }
            None => {
                self.pos = self.filled;
                Ok(None)
            }
        }
    }

    /// Lets bytes before what the scan still needs be dropped.
    fn keep_from(&mut self, s: &Scan, also: u64) {
        let mut keep = s.sync_pos.min(s.crc_pos).min(also);
        if let Some(&c) = s.starts.first() {
            keep = keep.min(c);
        }
        if let Some(b) = s.best {
            keep = keep.min(b);
        }
        self.pos = self.idx(keep.max(self.base));
    }

    /// The next sync word at or after `s.sync_pos` (and before `limit`)
    /// with a whole header after it, reading on as needed.
    fn next_sync(&mut self, s: &Scan, limit: Option<u64>) -> io::Result<Option<u64>> {
        let mut scan = s.sync_pos;
        loop {
            if limit.is_some_and(|l| scan >= l) {
                return Ok(None);
            }
            self.keep_from(s, scan);
            let end = match limit {
                Some(l) => self.end_abs().min(l + SYNC.len() as u64 - 1),
                None => self.end_abs(),
            };
            let i = self.idx(scan);
            let j = self.idx(end.max(scan));
            let found = self.buf[i..j]
                .windows(SYNC.len())
                .position(|w| w == SYNC)
                .map(|k| scan + k as u64);
            if let Some(c) = found {
                if !self.ensure_abs(c + BLOCK_HEADER_LEN as u64)? {
                    return Ok(None);
                }
                return Ok(Some(c));
            }
            // Keep the last 3 bytes: a sync word may straddle reads.
            scan = end.saturating_sub(SYNC.len() as u64 - 1).max(scan);
            if limit.is_some_and(|l| scan >= l) {
                return Ok(None);
            }
            self.keep_from(s, scan);
            let have = self.end_abs();
            if !self.ensure_abs(have + 1)? {
                return Ok(None);
            }
        }
    }

    /// Moves the running CRC to `target`; false if the input ends first.
    fn crc_to(&mut self, s: &mut Scan, target: u64) -> io::Result<bool> {
        while s.crc_pos < target {
            self.keep_from(s, s.crc_pos);
            let reached = self.ensure_abs(target)?;
            let upto = target.min(self.end_abs());
            let (i, j) = (self.idx(s.crc_pos), self.idx(upto));
            let mut h = crc32fast::Hasher::new_with_initial(s.running);
            h.update(&self.buf[i..j]);
            s.running = h.finalize();
            self.resync_crc_bytes += (j - i) as u64;
            s.crc_pos = upto;
            if !reached {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether the damage met before `at` has cost more CRC work than
    /// [`WASTE_ALLOWANCE`] allows.
    fn damage_too_costly(&self, at: u64) -> bool {
        self.damage_crc_bytes() > WASTE_ALLOWANCE.saturating_add(WASTE_PER_BYTE.saturating_mul(at))
    }

    /// Damage at `offset` after which the rest of the input is read to its
    /// end (to say how much) but not looked at.
    fn give_up(&mut self, offset: u64, reason: String) -> io::Result<Item> {
        loop {
            self.pos = self.filled;
            if !self.ensure_abs(self.end_abs() + 1)? {
                break;
            }
        }
        self.pos = self.filled;
        self.finished = true;
        Ok(Item::Damage(Damage {
            offset,
            reason: format!(
                "{reason}; the damage so far took {} bytes of checksums to read past, more than {WASTE_ALLOWANCE} and {WASTE_PER_BYTE} a byte of the file allow: the rest is left unread",
                self.damage_crc_bytes()
            ),
            skipped: self.end_abs() - offset,
            resumed_at: None,
        }))
    }

    fn damage(&mut self, offset: u64, reason: String) -> io::Result<Item> {
        if self.damage_too_costly(offset) {
            return self.give_up(offset, reason);
        }
        let resumed_at = self.resync(offset + 1)?;
        let stop = resumed_at.unwrap_or_else(|| self.end_abs());
        if resumed_at.is_none() {
            self.finished = true;
        }
        Ok(Item::Damage(Damage {
            offset,
            reason,
            skipped: stop - offset,
            resumed_at,
        }))
    }

    /// The next item, or `None` at a clean end of input.
    pub fn next_item(&mut self) -> io::Result<Option<Item>> {
        if self.finished {
            return Ok(None);
        }
        let off = self.offset();
        if !self.ensure_abs(off + 1)? {
            self.finished = true;
            return Ok(None);
        }
        if !self.ensure_abs(off + BLOCK_HEADER_LEN as u64)? {
            let available = self.end_abs() - off;
            // Bytes that cannot start a block are damage, not a cut block.
            let n = available as usize;
            let i = self.idx(off);
            if self.buf[i..i + n.min(4)] != SYNC[..n.min(4)] {
                self.finished = true;
                self.pos = self.filled;
                return Ok(Some(Item::Damage(Damage {
                    offset: off,
                    reason: format!("{available} trailing bytes that are not a block"),
                    skipped: available,
                    resumed_at: None,
                })));
            }
            self.finished = true;
            self.pos = self.filled;
            return Ok(Some(Item::Truncated(Truncation {
                offset: off,
                needed: BLOCK_HEADER_LEN as u64,
                available,
            })));
        }
        let h = self.header_at(off);
        let hdr = match BlockHeader::parse(&h) {
            Ok(hdr) => hdr,
            Err(p) => return self.damage(off, p.to_string()).map(Some),
        };
        let total = BLOCK_HEADER_LEN as u64 + u64::from(hdr.stored_len);
        if !self.ensure_abs(off + total)? {
            // Either the file was cut inside this block, or its length field
            // is damaged. An intact block further on tells them apart.
            let available = self.end_abs() - off;
            if self.damage_too_costly(off) {
                let why = format!(
                    "{} block claims {} payload bytes",
                    hdr.block_type.name(),
                    hdr.stored_len
                );
                return self.give_up(off, why).map(Some);
            }
            if let Some(at) = self.resync(off + 1)? {
                return Ok(Some(Item::Damage(Damage {
                    offset: off,
                    reason: format!(
                        "{} block claims {} payload bytes, past the next intact block",
                        hdr.block_type.name(),
                        hdr.stored_len
                    ),
                    skipped: at - off,
                    resumed_at: Some(at),
                })));
            }
            self.finished = true;
            self.pos = self.filled;
            return Ok(Some(Item::Truncated(Truncation {
                offset: off,
                needed: total,
                available,
            })));
        }
        let i = self.idx(off) + BLOCK_HEADER_LEN;
        let stored = &self.buf[i..i + hdr.stored_len as usize];
        let crc = BlockHeader::compute_crc(&h, stored);
        if crc != hdr.crc {
            self.failed_crc_bytes += u64::from(hdr.stored_len);
            return self
                .damage(
                    off,
                    format!(
                        "{} block CRC mismatch (stored {:08x}, computed {crc:08x})",
                        hdr.block_type.name(),
                        hdr.crc
                    ),
                )
                .map(Some);
        }
        let block = RawBlock {
            offset: off,
            header: hdr,
            stored: stored.to_vec(),
        };
        self.pos += total as usize;
        Ok(Some(Item::Block(block)))
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = io::Result<Item>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_item() {
            Ok(Some(i)) => Some(Ok(i)),
            Ok(None) => None,
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}
