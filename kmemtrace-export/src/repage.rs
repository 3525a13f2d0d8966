//! Sub-buffers bigger than the machine's page (`kmemtraced --subbuf-kb`,
//! Linux 6.8+) cut into page-sized ones, for a trace.dat (either version):
//! a version 6 header has one page size, by which trace-cmd splits the CPU
//! data and which readers (our importer among them) take for the machine's
//! page, the unit of the page allocator's byte counts; and trace-cmd (3.1
//! to 3.4) reads version 7's top buffer by that page size too, not by the
//! buffer's own.
//!
//! Each page takes whole records in order. Its time stamp is the running
//! time before its first record, so every record's delta, relative to the
//! record before it, still adds up to the same time; a lost-events mark
//! and count go to the first page cut from the sub-buffer (which keeps
//! room for the count). Padding that does not fit where a page ends is
//! left out: it holds no event and no time.

use kmemtrace_import::log::Log;
use kmemtrace_kernel::subbuf::{
    parse_subbuf, RbRecordKind, SubBufLayout, RB_MISSED_EVENTS, RB_MISSED_STORED,
};
use kmemtrace_kernel::{Endian, RunTimeEndian};

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
        Cutter::with(log.arch.page_size? as usize, log.layout, log.endian)
    }

    fn with(page: usize, layout: SubBufLayout, endian: RunTimeEndian) -> Option<Cutter> {
        let l = layout;
        (page < l.subbuf_size && l.subbuf_size.is_multiple_of(page) && page >= 4 * l.data_offset)
            .then_some(Cutter {
                page,
                layout,
                endian,
            })
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
        // The first page keeps room for the lost count.
        let mut fits = room - sb.lost_events.map_or(0, |_| self.layout.long_size);
        for r in sb.events(self.endian) {
            let r = r.ok()?;
            if r.offset + r.len - start > fits {
                if matches!(r.kind, RbRecordKind::Padding { .. }) {
                    continue;
                }
                if r.len > room {
                    return None;
                }
                cuts.push((ts, start, end));
                (ts, start, fits) = (running, r.offset, room);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_kernel::SubBuffer;
    use kmemtrace_testkit::subbuf::{encode_subbuf, EncRecord, EndPadding, Missed, PageSpec};

    /// `(ts, payload)` of every data record.
    fn events(e: RunTimeEndian, sb: &SubBuffer<'_>) -> Vec<(u64, Vec<u8>)> {
        sb.data_events(e)
            .map(|r| r.map(|(_, ts, p)| (ts, p.to_vec())).unwrap())
            .collect()
    }

    /// A 16 KiB sub-buffer of events of many sizes, with time extends,
    /// absolute time stamps and discarded events, ending with the kernel's
    /// filler and a loss mark or with a lost count, cut into 4 KiB pages
    /// for each byte order and long size: the same events at the same
    /// times, in order, and the loss mark and count on the first page only.
    #[test]
    fn cut_pages_hold_the_same_events_at_the_same_times() {
        let ends = [
            (EndPadding::Filler, Missed::Flag, None),
            (EndPadding::None, Missed::Count(77), Some(77)),
        ];
        for e in [RunTimeEndian::Little, RunTimeEndian::Big] {
            for (ls, (end, missed, lost)) in [4, 8].into_iter().flat_map(|l| ends.map(|x| (l, x))) {
                let big = SubBufLayout {
                    long_size: ls,
                    data_offset: 8 + ls,
                    subbuf_size: 16384,
                };
                let mut records = Vec::new();
                let mut ts = 1_000_000_000u64;
                for i in 0..400u64 {
                    // Gaps from 3 ns to past 2^27 ns (a time extend).
                    ts += [3, 900, 70_000, 200_000_000][(i % 4) as usize];
                    let payload: Vec<u8> =
                        (0..(8 + (i * 37) % 120)).map(|b| (b ^ i) as u8).collect();
                    records.push(match i % 29 {
                        7 => EncRecord::AbsEvent { ts, payload },
                        13 => EncRecord::Discarded {
                            ts,
                            payload_len: 24,
                        },
                        _ => EncRecord::Event { ts, payload },
                    });
                    let spec = PageSpec {
                        records: records.clone(),
                        end: EndPadding::Filler,
                        missed: Missed::Count(77),
                        ..Default::default()
                    };
                    if encode_subbuf(e, &big, &spec).is_err() {
                        records.pop();
                        break;
                    }
                }
                // Room for the lost count after the data.
                records.truncate(records.len() - 3);
                let spec = PageSpec {
                    records,
                    end,
                    missed,
                    ..Default::default()
                };
                let page = encode_subbuf(e, &big, &spec).unwrap().bytes;
                let sb = parse_subbuf(e, &big, &page).unwrap();
                assert_eq!(sb.lost_events, lost);
                let want = events(e, &sb);
                assert!(want.len() > 100, "{} events", want.len());

                let cut = Cutter::with(4096, big, e).unwrap();
                let mut out = Vec::new();
                let n = cut.pages(&page, &mut out);
                assert!(n >= 4, "{n} pages");
                assert_eq!(out.len(), n as usize * 4096);
                let small = SubBufLayout {
                    subbuf_size: 4096,
                    ..big
                };
                let mut got = Vec::new();
                for (i, p) in out.chunks(4096).enumerate() {
                    let sb = parse_subbuf(e, &small, p).unwrap();
                    assert_eq!(sb.missed_events, i == 0, "page {i}");
                    assert_eq!(sb.lost_events, lost.filter(|_| i == 0), "page {i}");
                    got.extend(events(e, &sb));
                }
                assert_eq!(got, want, "{e:?} long {ls} {end:?}");
            }
        }
    }

    #[test]
    fn header_page_says_a_page_of_data() {
        let cut = Cutter::with(
            4096,
            SubBufLayout {
                long_size: 8,
                data_offset: 16,
                subbuf_size: 65536,
            },
            RunTimeEndian::Little,
        )
        .unwrap();
        let text = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
                    \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
                    \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
                    \tfield: char data;\toffset:16;\tsize:65520;\tsigned:1;\n";
        let want = text.replace("size:65520;", "size:4080;");
        assert_eq!(
            String::from_utf8(cut.header_page(text.as_bytes())).unwrap(),
            want
        );
    }

    #[test]
    fn only_bigger_sub_buffers_that_pages_divide_are_cut() {
        let l = |subbuf_size| SubBufLayout {
            long_size: 8,
            data_offset: 16,
            subbuf_size,
        };
        let e = RunTimeEndian::Little;
        assert!(Cutter::with(4096, l(4096), e).is_none());
        assert!(Cutter::with(65536, l(16384), e).is_none());
        assert!(Cutter::with(4096, l(12288 + 4096), e).is_some());
        assert!(Cutter::with(4096, l(6144), e).is_none());
    }
}
