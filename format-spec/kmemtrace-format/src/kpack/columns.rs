//! kpack version 2 (FORMAT.md §8.3): a block's event payloads in groups,
//! each stored column by column.
//!
//! Why: version 1 predicts each payload from an earlier one chosen by its
//! contents (its type, then its call site), so unpacking is a chain of
//! loads, each waiting for the word before: it decoded slower than zstd
//! alone decodes the raw sub-buffers. Here the payloads of a group
//! (one type and length, and for most slab events one call site: the
//! packer chooses, `kinds.rs`) are the rows of a table whose columns are
//! 4-byte words, each stored as its XOR with the word above it; a column
//! that never changes is stored once. A field that repeats becomes a run
//! of zero bytes, which zstd stores and decodes as one long match; and
//! unpacking is two passes with no chain between payloads: one over the
//! records (headers back in place, and where each payload goes), one down
//! each group's rows. XOR works on the bytes as they are, so nothing here
//! depends on byte order but the records' headers and the commit.

use super::{canonical, extent, has_len_word, header_of};
use kmemtrace_kernel::{Endian, RecordShape};

mod kinds;
mod pack;
mod unpack;

pub use pack::ColumnPacker;
pub use unpack::ColumnUnpacker;

/// The streams after the header, in order.
pub const STREAM_NAMES: [&str; 7] = ["ctl", "heads", "rec", "keys", "groups", "raw", "cols"];
/// Most groups one block may have (their ids are u16 in `keys`).
pub const MAX_GROUPS: usize = 4096;

/// One group of payloads in the block being packed or rebuilt: their
/// length, and where their rows lie in [`Groups::pos`].
#[derive(Default, Clone, Copy)]
struct Group {
    len: u32,
    start: u32,
    end: u32,
}

/// The groups of a block. Their rows share one vector, kept from block to
/// block: a vector per group, kept, had grown each group id to the most
/// rows any group of that id ever had, so memory grew with the run.
#[derive(Default)]
struct Groups {
    list: Vec<Group>,
    /// Where each payload starts in the body: the rows of group 0, then of
    /// group 1, and so on, each group's in record order.
    pos: Vec<u32>,
}

impl Groups {
    fn clear(&mut self) {
        self.list.clear();
        self.pos.clear();
    }

    /// A new group of payloads of `len` bytes; its id.
    fn add(&mut self, len: u32) -> usize {
        self.list.push(Group {
            len,
            start: 0,
            end: 0,
        });
        self.list.len() - 1
    }

    fn live(&self) -> &[Group] {
        &self.list
    }

    /// The payloads of `g`, where each starts in the body.
    fn rows(&self, g: &Group) -> &[u32] {
        &self.pos[g.start as usize..g.end as usize]
    }

    /// Makes room for the rows of payloads whose groups are `ids`, in
    /// record order; [`put`](Self::put) then places them: a counting sort.
    /// `false` where an id is no group's (damaged keys).
    #[must_use]
    fn count_rows(&mut self, ids: impl Iterator<Item = usize>) -> bool {
        for g in &mut self.list {
            g.end = 0;
        }
        for id in ids {
            let Some(g) = self.list.get_mut(id) else {
                return false;
            };
            g.end += 1;
        }
        let mut next = 0;
        for g in &mut self.list {
            (g.start, next) = (next, next + g.end);
            g.end = g.start;
        }
        self.pos.clear();
        self.pos.resize(next as usize, 0);
        true
    }

    /// The next row of group `id` starts at `at`; `ids` given to
    /// [`count_rows`](Self::count_rows) in the same order.
    #[inline]
    fn put(&mut self, id: usize, at: u32) {
        let g = &mut self.list[id];
        self.pos[g.end as usize] = at;
        g.end += 1;
    }
}

/// Columns handled together, packing ([`pack`]'s `xor_rows`) and
/// unpacking ([`unpack`]'s `rows_of`): their running words stay in
/// registers, and a payload is read or written in pieces of this many
/// words, by one loop for each count of columns up to it.
const BAND: usize = 8;

/// How many column words (4 bytes, the last shorter) a payload of `len` has.
#[inline]
fn columns(len: usize) -> usize {
    len.div_ceil(4)
}

/// Whether column `j` is marked constant in a group's bitmap.
#[inline]
fn is_constant(bitmap: &[u8], j: usize) -> bool {
    bitmap[j / 8] & (1 << (j % 8)) != 0
}

/// What a record is, for both walks.
enum Kind {
    /// An event payload of this many bytes after the header words.
    Payload(usize),
    /// A time extend or absolute time stamp: its second word goes with
    /// the headers.
    Time,
    /// Padding of this many bytes after the header words, carried raw.
    Padding(usize),
}

/// The record whose header words start `head` (up to 8 bytes, as stored),
/// with `room` bytes left of the data: its header length, total length
/// and kind; `None` where it is not one (FORMAT.md §8.1).
#[inline]
fn record<E: Endian>(e: E, head: &[u8], room: usize) -> Option<(usize, usize, Kind)> {
    let w = canonical(e, e.read_u32(head, 0)?);
    let n = if has_len_word(w) {
        e.read_u32(head, 4)?
    } else {
        0
    };
    let ext = extent(w, n, room)?;
    let body = ext.total.checked_sub(ext.head)?;
    let kind = if ext.data {
        Kind::Payload(body)
    } else if matches!(
        header_of(w).shape(),
        RecordShape::TimeExtend | RecordShape::TimeStamp
    ) {
        Kind::Time
    } else {
        Kind::Padding(body)
    };
    Some((ext.head, ext.total, kind))
}

/// `words` (4-byte words) as four planes: every word's byte 0, then every
/// byte 1, and so on. The header words' time deltas are mostly below 2^14
/// ns, so their high bytes make planes of zeros, which zstd stores and
/// decodes in a fraction of the time it takes over the words.
fn planes(words: &[u8], out: &mut Vec<u8>) {
    let n = words.len() / 4;
    out.resize(4 * n, 0);
    let (p0, rest) = out.split_at_mut(n);
    let (p1, rest) = rest.split_at_mut(n);
    let (p2, p3) = rest.split_at_mut(n);
    for (i, w) in words.chunks_exact(4).enumerate() {
        (p0[i], p1[i], p2[i], p3[i]) = (w[0], w[1], w[2], w[3]);
    }
}
