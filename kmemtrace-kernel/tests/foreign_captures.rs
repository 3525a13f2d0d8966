//! Decodes real ring-buffer captures from foreign kernels (armhf: 32-bit
//! little-endian; s390x: 64-bit big-endian; Linux 6.1 under qemu) kept in
//! `/work/shared/data` beside the repository, and checks them against
//!
//! - the figures in the captures' README files (per-CPU event counts per
//!   event id, TIME_STAMP / PADDING / TIME_EXTEND / type_len 0 records,
//!   missed-events flags and stored lost counts, first and last time stamps);
//! - the per-CPU `stats` files (`entries`, `overrun`);
//! - every event of the kernel's own text rendering (`trace.txt.gz`): CPU,
//!   time stamp in microseconds as printed, and event name, in order.
//!
//! Skipped, with a message, when the data directory is absent.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;

use kmemtrace_kernel::{
    parse_subbuf, BigEndian, Endian, HeaderEvent, HeaderPage, LittleEndian, RbRecordKind,
    SubBufLayout,
};

/// What the README says about one CPU of one capture.
struct CpuExpect {
    /// (event name, count); events not listed must not occur.
    events: &'static [(&'static str, u64)],
    bytes: usize,
    pages: usize,
    overrun: u64,
    missed_pages: &'static [usize],
    stored_pages: usize,
    lost: u64,
    type_len0: u64,
    time_extend: u64,
    time_stamp: u64,
    padding: u64,
    first_ts: u64,
    last_ts: u64,
}

struct Capture {
    arch: &'static str,
    /// `raw` or `raw_overflow`.
    dir: &'static str,
    /// `trace.txt.gz` or `trace_overflow.txt.gz`.
    text: &'static str,
    big_endian: bool,
    long_size: usize,
    cpus: [CpuExpect; 2],
}

const KFREE: &str = "kfree";
const KMALLOC: &str = "kmalloc";
const KCA: &str = "kmem_cache_alloc";
const KCF: &str = "kmem_cache_free";
const MPA: &str = "mm_page_alloc";
const MPAZL: &str = "mm_page_alloc_zone_locked";
const MPF: &str = "mm_page_free";
const MPFB: &str = "mm_page_free_batched";
const PCPU: &str = "mm_page_pcpu_drain";

fn captures() -> Vec<Capture> {
    vec![
        Capture {
            arch: "armhf",
            dir: "raw",
            text: "trace.txt.gz",
            big_endian: false,
            long_size: 4,
            cpus: [
                CpuExpect {
                    events: &[
                        (KFREE, 974),
                        (KMALLOC, 487),
                        (KCA, 5305),
                        (KCF, 5962),
                        (MPA, 1650),
                        (MPAZL, 346),
                        (MPF, 1698),
                        (MPFB, 1102),
                        (PCPU, 270),
                    ],
                    bytes: 589824,
                    pages: 144,
                    overrun: 0,
                    missed_pages: &[],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 3,
                    padding: 0,
                    first_ts: 4449503360,
                    last_ts: 5045739680,
                },
                CpuExpect {
                    events: &[
                        (KFREE, 960),
                        (KMALLOC, 500),
                        (KCA, 5473),
                        (KCF, 5836),
                        (MPA, 1694),
                        (MPAZL, 316),
                        (MPF, 1637),
                        (MPFB, 1057),
                        (PCPU, 60),
                    ],
                    bytes: 585728,
                    pages: 143,
                    overrun: 0,
                    missed_pages: &[],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 10,
                    padding: 2,
                    first_ts: 4453509360,
                    last_ts: 5045152000,
                },
            ],
        },
        Capture {
            arch: "armhf",
            dir: "raw_overflow",
            text: "trace_overflow.txt.gz",
            big_endian: false,
            long_size: 4,
            cpus: [
                CpuExpect {
                    events: &[
                        (KFREE, 55),
                        (KMALLOC, 3),
                        (KCA, 62),
                        (KCF, 257),
                        (MPA, 48),
                        (MPF, 115),
                        (MPFB, 56),
                        (PCPU, 30),
                    ],
                    bytes: 20480,
                    pages: 5,
                    overrun: 8577,
                    missed_pages: &[0],
                    stored_pages: 1,
                    lost: 8577,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 1,
                    padding: 0,
                    first_ts: 15347582576,
                    last_ts: 15382507712,
                },
                CpuExpect {
                    events: &[
                        (KFREE, 44),
                        (KMALLOC, 11),
                        (KCA, 167),
                        (KCF, 218),
                        (MPA, 52),
                        (MPF, 82),
                        (MPFB, 39),
                    ],
                    bytes: 20480,
                    pages: 5,
                    overrun: 8702,
                    missed_pages: &[0],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 0,
                    padding: 0,
                    first_ts: 15277592896,
                    last_ts: 15380814848,
                },
            ],
        },
        Capture {
            arch: "s390x",
            dir: "raw",
            text: "trace.txt.gz",
            big_endian: true,
            long_size: 8,
            cpus: [
                CpuExpect {
                    events: &[
                        (KFREE, 1005),
                        (KMALLOC, 421),
                        (KCA, 5164),
                        (KCF, 5744),
                        (MPA, 1748),
                        (MPAZL, 345),
                        (MPF, 1824),
                        (MPFB, 406),
                        (PCPU, 516),
                    ],
                    bytes: 819200,
                    pages: 200,
                    overrun: 0,
                    missed_pages: &[],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 0,
                    padding: 0,
                    first_ts: 4317723752,
                    last_ts: 5003935062,
                },
                CpuExpect {
                    events: &[
                        (KFREE, 1041),
                        (KMALLOC, 433),
                        (KCA, 5395),
                        (KCF, 5729),
                        (MPA, 1774),
                        (MPAZL, 315),
                        (MPF, 1740),
                        (MPFB, 406),
                    ],
                    bytes: 819200,
                    pages: 200,
                    overrun: 0,
                    missed_pages: &[],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 0,
                    padding: 0,
                    first_ts: 4320250552,
                    last_ts: 5003068509,
                },
            ],
        },
        Capture {
            arch: "s390x",
            dir: "raw_overflow",
            text: "trace_overflow.txt.gz",
            big_endian: true,
            long_size: 8,
            cpus: [
                CpuExpect {
                    events: &[
                        (KFREE, 43),
                        (KMALLOC, 3),
                        (KCA, 27),
                        (KCF, 182),
                        (MPA, 32),
                        (MPF, 116),
                        (MPFB, 8),
                    ],
                    bytes: 20480,
                    pages: 5,
                    overrun: 8481,
                    missed_pages: &[0],
                    stored_pages: 0,
                    lost: 0,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 0,
                    padding: 0,
                    first_ts: 15355453685,
                    last_ts: 15383348708,
                },
                CpuExpect {
                    events: &[
                        (KFREE, 45),
                        (KMALLOC, 6),
                        (KCA, 105),
                        (KCF, 138),
                        (MPA, 29),
                        (MPF, 52),
                    ],
                    bytes: 20480,
                    pages: 5,
                    overrun: 8532,
                    missed_pages: &[0],
                    stored_pages: 1,
                    lost: 8532,
                    type_len0: 0,
                    time_extend: 0,
                    time_stamp: 0,
                    padding: 0,
                    first_ts: 15295792776,
                    last_ts: 15387512476,
                },
            ],
        },
    ]
}

/// Everything decoded from one CPU's `trace_pipe_raw`.
#[derive(Default, Debug)]
struct CpuDecoded {
    pages: usize,
    by_id: BTreeMap<u16, u64>,
    missed_pages: Vec<usize>,
    stored_pages: usize,
    lost: u64,
    type_len0: u64,
    time_extend: u64,
    time_stamp: u64,
    padding: u64,
    /// (time stamp in ns, common_type) of every data event, in order.
    events: Vec<(u64, u16)>,
}

fn decode_cpu<E: Endian>(e: E, layout: &SubBufLayout, raw: &[u8], what: &str) -> CpuDecoded {
    assert_eq!(
        raw.len() % layout.subbuf_size,
        0,
        "{what}: not whole sub-buffers"
    );
    let mut d = CpuDecoded::default();
    for (i, page) in layout.split(raw).enumerate() {
        d.pages += 1;
        let sb =
            parse_subbuf(e, layout, page).unwrap_or_else(|err| panic!("{what} page {i}: {err}"));
        if sb.missed_events {
            d.missed_pages.push(i);
        }
        if let Some(n) = sb.lost_events {
            d.stored_pages += 1;
            d.lost += n;
        }
        for r in sb.events(e) {
            let r = r.unwrap_or_else(|err| panic!("{what} page {i}: {err}"));
            match r.kind {
                RbRecordKind::Data { payload } => {
                    if r.len - payload.len() == 8 {
                        d.type_len0 += 1;
                    }
                    let id = e.read_u16(payload, 0).expect("payload holds common_type");
                    *d.by_id.entry(id).or_default() += 1;
                    d.events.push((r.ts, id));
                }
                RbRecordKind::Padding { .. } => d.padding += 1,
                RbRecordKind::TimeExtend { .. } => d.time_extend += 1,
                RbRecordKind::TimeStamp { .. } => d.time_stamp += 1,
            }
        }
    }
    d
}

fn read_gz(path: &Path) -> String {
    let f = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    s
}

fn stat(stats: &str, key: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{key}` in stats"))
}

#[test]
fn foreign_captures_match_readme_and_kernel_text() {
    let Some(root) = common::data_dir("foreign_captures") else {
        return;
    };
    for cap in captures() {
        let name = format!("{}/{}", cap.arch, cap.dir);
        let base = root.join(cap.arch).join(cap.dir);

        let hp = HeaderPage::parse(&fs::read_to_string(base.join("events/header_page")).unwrap())
            .unwrap_or_else(|e| panic!("{name} header_page: {e}"));
        let he = HeaderEvent::parse(&fs::read_to_string(base.join("events/header_event")).unwrap())
            .unwrap_or_else(|e| panic!("{name} header_event: {e}"));
        assert_eq!(he, HeaderEvent::KERNEL);
        let layout = SubBufLayout::from_header_page(&hp);
        assert_eq!(
            layout,
            SubBufLayout {
                long_size: cap.long_size,
                data_offset: 8 + cap.long_size,
                subbuf_size: 4096
            },
            "{name}"
        );
        let endianness = fs::read_to_string(base.join("endianness.txt")).unwrap();
        assert_eq!(
            endianness.trim(),
            if cap.big_endian { "big" } else { "little" }
        );

        // Event ids of this kernel.
        let mut names: BTreeMap<u16, String> = BTreeMap::new();
        for ent in fs::read_dir(base.join("events/kmem")).unwrap() {
            let ent = ent.unwrap();
            if let Ok(id) = fs::read_to_string(ent.path().join("id")) {
                names.insert(
                    id.trim().parse().unwrap(),
                    ent.file_name().to_string_lossy().into_owned(),
                );
            }
        }
        let (text, lost_lines) =
            common::parse_trace_text(&read_gz(&root.join(cap.arch).join(cap.text)));
        assert_eq!(lost_lines, 0, "{}: LOST lines in the text", cap.text);

        let mut total = 0usize;
        for (cpu, want) in cap.cpus.iter().enumerate() {
            let what = format!("{name} cpu{cpu}");
            let raw = fs::read(base.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))).unwrap();
            assert_eq!(raw.len(), want.bytes, "{what} bytes");
            let d = if cap.big_endian {
                decode_cpu(BigEndian, &layout, &raw, &what)
            } else {
                decode_cpu(LittleEndian, &layout, &raw, &what)
            };

            assert_eq!(d.pages, want.pages, "{what} pages");
            let by_name: BTreeMap<&str, u64> = d
                .by_id
                .iter()
                .map(|(id, n)| {
                    let nm = names
                        .get(id)
                        .unwrap_or_else(|| panic!("{what}: unknown event id {id}"));
                    (nm.as_str(), *n)
                })
                .collect();
            let want_by_name: BTreeMap<&str, u64> = want.events.iter().copied().collect();
            assert_eq!(by_name, want_by_name, "{what} counts per event");
            assert_eq!(
                d.missed_pages, want.missed_pages,
                "{what} pages with RB_MISSED_EVENTS"
            );
            assert_eq!(
                d.stored_pages, want.stored_pages,
                "{what} pages with RB_MISSED_STORED"
            );
            assert_eq!(d.lost, want.lost, "{what} stored lost count");
            assert_eq!(d.type_len0, want.type_len0, "{what} type_len 0 events");
            assert_eq!(d.time_extend, want.time_extend, "{what} TIME_EXTEND");
            assert_eq!(d.time_stamp, want.time_stamp, "{what} TIME_STAMP");
            assert_eq!(d.padding, want.padding, "{what} PADDING");
            assert_eq!(
                d.events.first().map(|e| e.0),
                Some(want.first_ts),
                "{what} first ts"
            );
            assert_eq!(
                d.events.last().map(|e| e.0),
                Some(want.last_ts),
                "{what} last ts"
            );
            assert!(
                d.events.windows(2).all(|w| w[0].0 <= w[1].0),
                "{what}: time goes backwards"
            );

            // The kernel's statistics agree.
            let stats = fs::read_to_string(base.join(format!("per_cpu/cpu{cpu}/stats"))).unwrap();
            assert_eq!(
                stat(&stats, "entries"),
                d.events.len() as u64,
                "{what} stats entries"
            );
            assert_eq!(
                stat(&stats, "overrun"),
                want.overrun,
                "{what} stats overrun"
            );
            if want.stored_pages > 0 {
                // The stored count is the overrun at the time of the read.
                assert_eq!(want.lost, want.overrun, "{what}");
            }

            // Every event against the kernel's own text, in order.
            let text_cpu: Vec<(u64, &str)> = text
                .iter()
                .filter(|t| t.0 == cpu)
                .map(|t| (t.1, t.2.as_str()))
                .collect();
            assert_eq!(
                text_cpu.len(),
                d.events.len(),
                "{what}: events in text vs binary"
            );
            for (i, ((ns, id), (us, nm))) in d.events.iter().zip(&text_cpu).enumerate() {
                assert_eq!(
                    (common::ns_to_printed_usecs(*ns), names[id].as_str()),
                    (*us, *nm),
                    "{what}: event {i} (ts {ns} ns) differs from the kernel's text"
                );
            }
            total += d.events.len();
        }
        assert_eq!(total, text.len(), "{name}: text has events of other CPUs");
        eprintln!("{name}: {total} events match the README, stats and the kernel's text");
    }
}

/// The README's "events with type_len 0: 0" hides the rule; make sure the
/// captures' data events are all short form and that the end-of-page filler
/// seen on armhf is the kernel's `rb_reset_tail()` kind (time_delta 1, length
/// up to the end of the data area).
#[test]
fn armhf_padding_is_end_of_page_filler() {
    let Some(root) = common::data_dir("foreign_captures") else {
        return;
    };
    let base = root.join("armhf/raw");
    let hp =
        HeaderPage::parse(&fs::read_to_string(base.join("events/header_page")).unwrap()).unwrap();
    let layout = SubBufLayout::from_header_page(&hp);
    let raw = fs::read(base.join("per_cpu/cpu1/trace_pipe_raw")).unwrap();
    let mut seen = Vec::new();
    for (i, page) in layout.split(&raw).enumerate() {
        let sb = parse_subbuf(LittleEndian, &layout, page).unwrap();
        for r in sb.events(LittleEndian) {
            let r = r.unwrap();
            if let RbRecordKind::Padding { len, discarded } = r.kind {
                assert!(discarded, "rb_reset_tail() writes time_delta 1");
                assert_eq!(
                    r.offset + len,
                    layout.subbuf_size,
                    "page {i}: filler runs to the end of the page"
                );
                assert_eq!(
                    sb.commit,
                    layout.data_size(),
                    "page {i}: copied pages count the filler in commit"
                );
                seen.push((i, r.offset - layout.data_offset, len));
            }
        }
    }
    assert_eq!(seen, vec![(54, 4056, 28), (123, 4072, 12)]);
}
