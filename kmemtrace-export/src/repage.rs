//! Sub-buffers bigger than the machine's page (`kmemtraced --subbuf-kb`,
//! Linux 6.8+) cut into page-sized ones, for a trace.dat version 6: its
//! header has one page size, by which trace-cmd splits the CPU data and
//! which readers (our importer among them) take for the machine's page,
//! the unit of the page allocator's byte counts.
//!
//! Each page takes whole records in order. Its time stamp is the running
//! time before its first record, so every record's delta, relative to the
//! record before it, still adds up to the same time; a lost-events mark
//! and count go to the first page cut from the sub-buffer. Padding that
//! does not fit where a page ends is left out: it holds no event and no
//! time.

use kmemtrace_format::log::Log;
use kmemtrace_format::subbuf::{
    parse_subbuf, RbRecordKind, SubBufLayout, RB_MISSED_EVENTS, RB_MISSED_STORED,
};
use kmemtrace_format::{Endian, RunTimeEndian};

/// Cuts a log's sub-buffers into its machine's pages.
pub(crate) struct Cutter {
    /// The machine's page size: the size of the pages written.
    pub page: usize,
    layout: SubBufLayout,
    endian: RunTimeEndian,
}

impl Cutter {
    /// `None` where the sub-buffers are one page already, or the page size
    /// is unknown or does not divide them.
    pub fn new(log: &Log) -> Option<Cutter> {
        let page = log.arch.page_size? as usize;
        let l = log.layout;
        (page < l.subbuf_size && l.subbuf_size % page == 0 && page >= 4 * l.data_offset).then_some(
            Cutter {
                page,
                layout: l,
                endian: log.endian,
            },
        )
    }

    /// The kernel's `header_page` text with the data field's size made a
    /// page's.
    pub fn header_page(&self, text: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(text);
        let data_size = self.page - self.layout.data_offset;
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            match (line.contains("char data;"), line.find("size:")) {
                (true, Some(i)) => {
                    let rest = &line[i + 5..];
                    let digits =
                        rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    out.push_str(&line[..i + 5]);
                    out.push_str(&data_size.to_string());
                    out.push_str(&rest[digits..]);
                }
                _ => out.push_str(line),
            }
        }
        out.into_bytes()
    }

    /// Appends the pages cut from `data`, whole sub-buffers; returns how
    /// many. A sub-buffer that does not parse, or holds a record longer
    /// than a page, becomes one empty page marked as having lost events.
    pub fn pages(&self, data: &[u8], out: &mut Vec<u8>) -> u64 {
        data.chunks_exact(self.layout.subbuf_size)
            .map(|sb| {
                self.cut(sb, out).unwrap_or_else(|| {
                    self.put(out, 0, &[], RB_MISSED_EVENTS, None);
                    1
                })
            })
            .sum()
    }

    fn cut(&self, bytes: &[u8], out: &mut Vec<u8>) -> Option<u64> {
        let sb = parse_subbuf(self.endian, &self.layout, bytes).ok()?;
        let room = self.page - self.layout.data_offset;
        // (time stamp, first byte, end) of each page, in the sub-buffer.
        let mut cuts: Vec<(u64, usize, usize)> = Vec::new();
        let (mut ts, mut start) = (sb.timestamp, sb.data_offset);
        let (mut end, mut running) = (start, sb.timestamp);
        for r in sb.events(self.endian) {
            let r = r.ok()?;
            if r.offset + r.len - start > room {
                if matches!(r.kind, RbRecordKind::Padding { .. }) {
                    continue;
                }
                if r.len > room {
                    return None;
                }
                cuts.push((ts, start, end));
                (ts, start) = (running, r.offset);
            }
            end = r.offset + r.len;
            running = r.ts;
        }
        cuts.push((ts, start, end));
        let before = out.len();
        for (i, &(ts, a, b)) in cuts.iter().enumerate() {
            let first = i == 0 && sb.missed_events;
            let flags = if first { RB_MISSED_EVENTS } else { 0 };
            self.put(
                out,
                ts,
                &bytes[a..b],
                flags,
                sb.lost_events.filter(|_| first),
            );
        }
        debug_assert_eq!(out.len() - before, cuts.len() * self.page);
        Some(cuts.len() as u64)
    }

    /// Appends one page: header, records, and the lost count after them
    /// where it fits.
    fn put(&self, out: &mut Vec<u8>, ts: u64, records: &[u8], flags: u64, lost: Option<u64>) {
        let ls = self.layout.long_size;
        let room = self.page - self.layout.data_offset;
        let lost = lost.filter(|_| room - records.len() >= ls);
        let stored = if lost.is_some() { RB_MISSED_STORED } else { 0 };
        let at = out.len();
        self.endian.write_uint(out, ts, 8);
        self.endian
            .write_uint(out, records.len() as u64 | flags | stored, ls);
        out.resize(at + self.layout.data_offset, 0);
        out.extend_from_slice(records);
        if let Some(n) = lost {
            self.endian.write_uint(out, n, ls);
        }
        out.resize(at + self.page, 0);
    }
}
