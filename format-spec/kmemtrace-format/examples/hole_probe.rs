//! What mapping the ring buffer (Linux 6.10+) instead of splicing it would
//! cost, measured on a real spliced log:
//!
//!   cargo run --release -p kmemtrace-format --example hole_probe -- LOG.kmt [RING]
//!
//! Splicing gives the ring a fresh zeroed page for every full one it takes,
//! so the bytes no field covers (alignment holes, the 4-byte rounding of a
//! record, the body of end-of-page padding, the page past its commit) are
//! zeros in a spliced log. A mapped ring reuses its pages, and the kernel
//! writes events field by field: those bytes keep what the page held a lap
//! earlier. This probe fills them, in each CPU's stream, with the bytes at
//! the same place of the sub-buffer RING sub-buffers before (the buffer
//! size over the sub-buffer size; default 64, `-b 1024` with 16 KiB
//! sub-buffers), where the writer last used that page, and compares zstd 1
//! over 1 MiB blocks both ways, bytes and time on one core. It also times
//! what a mapped reader would add to zero them again: a walk of the records
//! clearing each event's holes, found from its format.

use kmemtrace_import::log::Log;
use kmemtrace_import::walk::{walk_cpu, with_endian, WithEndian};
use kmemtrace_kernel::{parse_subbuf, Endian, RbRecordKind, SubBufLayout, WrittenExtent};
use std::ops::Range;
use std::time::Instant;

/// By `common_type`: what bounds the bytes the kernel writes in an event's
/// records, and the holes of its fixed part.
type EventHoles<'a> = Vec<Option<(WrittenExtent<'a>, Vec<Range<usize>>)>>;

fn event_holes(log: &Log) -> EventHoles<'_> {
    (0..=u16::MAX)
        .map(|id| {
            let f = log.format_by_id(u32::from(id))?;
            Some((f.written_extent(), f.holes()))
        })
        .collect()
}

/// Lists in `spans` the byte ranges of `page` that nothing the kernel
/// writes covers; returns the data events.
fn hole_spans<E: Endian>(
    e: E,
    layout: &SubBufLayout,
    by_id: &EventHoles,
    page: &[u8],
    spans: &mut Vec<Range<usize>>,
) -> u64 {
    spans.clear();
    let Ok(sb) = parse_subbuf(e, layout, page) else {
        return 0;
    };
    let mut events = 0;
    for r in sb.events(e).map_while(Result::ok) {
        match r.kind {
            RbRecordKind::Data { payload } => {
                events += 1;
                let start = r.offset + r.len - payload.len();
                let id = usize::from(e.u16_from([payload[0], payload[1]]));
                let Some(Some((written, inside))) = by_id.get(id) else {
                    continue;
                };
                let within = |x: &Range<usize>| x.end <= payload.len();
                spans.extend(
                    inside
                        .iter()
                        .filter(|x| within(x))
                        .map(|x| start + x.start..start + x.end),
                );
                // After the fixed part and any dynamic data, up to the
                // record's rounding.
                if let Some(w) = written.len(e, payload).filter(|w| *w < payload.len()) {
                    spans.push(start + w..start + payload.len());
                }
            }
            // The kernel writes end-of-page padding's header and length,
            // not its body.
            RbRecordKind::Padding {
                len,
                discarded: true,
            } if len > 8 => spans.push(r.offset + 8..r.offset + len),
            _ => {}
        }
    }
    // Past the commit and the stored lost count, if any.
    let end = sb.data_offset
        + sb.commit
        + if sb.missed_stored {
            layout.long_size
        } else {
            0
        };
    if end < page.len() {
        spans.push(end..page.len());
    }
    events
}

/// Each CPU's sub-buffers as spliced, and the same with their holes stale.
struct Streams {
    spliced: Vec<Vec<u8>>,
    stale: Vec<Vec<u8>>,
    events: u64,
    hole_bytes: usize,
    nonzero_hole_bytes: usize,
}

struct Build<'a, 'f> {
    log: &'a Log,
    by_id: &'a EventHoles<'f>,
    ring: usize,
}

impl WithEndian for Build<'_, '_> {
    type Output = Streams;
    fn run<E: Endian>(self, e: E) -> Streams {
        let (log, layout, by_id) = (self.log, self.log.layout, self.by_id);
        let mut out = Streams {
            spliced: vec![],
            stale: vec![],
            events: 0,
            hole_bytes: 0,
            nonzero_hole_bytes: 0,
        };
        let mut spans = Vec::new();
        for cpu in log.cpus() {
            let mut pages: Vec<Vec<u8>> = Vec::new();
            walk_cpu(log, e, cpu, |_, item| pages.push(item.raw.to_vec()), |_| {});
            let (mut spliced, mut stale) = (Vec::new(), Vec::new());
            for (i, page) in pages.iter_mut().enumerate() {
                page.resize(layout.subbuf_size, 0);
                out.events += hole_spans(e, &layout, by_id, page, &mut spans);
                spliced.extend_from_slice(page);
                let mut filled = page.clone();
                for s in &spans {
                    out.hole_bytes += s.len();
                    out.nonzero_hole_bytes += page[s.clone()].iter().filter(|b| **b != 0).count();
                }
                // What the writer left there a lap before, itself stale.
                if let Some(earlier) = i.checked_sub(self.ring) {
                    let earlier = &stale[earlier * layout.subbuf_size..][..layout.subbuf_size];
                    for s in &spans {
                        filled[s.clone()].copy_from_slice(&earlier[s.clone()]);
                    }
                }
                stale.extend_from_slice(&filled);
            }
            out.spliced.push(spliced);
            out.stale.push(stale);
        }
        out
    }
}

/// Zeroes every hole of the streams in place.
fn zero_holes(log: &Log, by_id: &EventHoles, streams: &mut [Vec<u8>]) {
    struct Zero<'a, 'f>(&'a Log, &'a EventHoles<'f>, &'a mut [Vec<u8>]);
    impl WithEndian for Zero<'_, '_> {
        type Output = ();
        fn run<E: Endian>(self, e: E) {
            let layout = self.0.layout;
            let mut spans = Vec::with_capacity(256);
            let pages = self
                .2
                .iter_mut()
                .flat_map(|s| s.chunks_mut(layout.subbuf_size));
            for page in pages {
                hole_spans(e, &layout, self.1, page, &mut spans);
                for s in spans.drain(..) {
                    page[s].fill(0);
                }
            }
        }
    }
    with_endian(log.endian, Zero(log, by_id, streams))
}

/// zstd 1 over `block`-sized pieces of the streams: bytes out, and seconds
/// on one core (best of three).
fn zstd_1(streams: &[Vec<u8>], block: usize) -> (usize, f64) {
    let mut c = zstd::bulk::Compressor::new(1).expect("a zstd context");
    let mut best = (0, f64::MAX);
    for _ in 0..3 {
        let t = Instant::now();
        let bytes = streams
            .iter()
            .flat_map(|s| s.chunks(block))
            .map(|b| c.compress(b).expect("zstd").len())
            .sum();
        best = (bytes, best.1.min(t.elapsed().as_secs_f64()));
    }
    best
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: hole_probe LOG.kmt [RING]");
    let ring = args
        .next()
        .map_or(64, |s| s.parse().expect("RING: sub-buffers per CPU"));
    let log = Log::open(std::path::Path::new(&path)).expect("a readable log");
    let by_id = event_holes(&log);
    let build = Build {
        log: &log,
        by_id: &by_id,
        ring,
    };
    let s = with_endian(log.endian, build);
    let ev = s.events as f64;
    let sb = log.layout.subbuf_size;
    let block = ((1 << 20) / sb * sb).max(sb);
    let (spliced, spliced_s) = zstd_1(&s.spliced, block);
    let (stale, stale_s) = zstd_1(&s.stale, block);
    let mut zeroed = s.stale.clone();
    let mut zeroing_s = f64::MAX;
    for _ in 0..3 {
        zeroed.clone_from(&s.stale);
        let t = Instant::now();
        zero_holes(&log, &by_id, &mut zeroed);
        zeroing_s = zeroing_s.min(t.elapsed().as_secs_f64());
    }
    let (all_zero, all_zero_s) = zstd_1(&zeroed, block);
    let per = |n: usize| n as f64 / ev;
    let ns = |secs: f64| secs * 1e9 / ev;
    println!(
        "{path}: {} events, a ring of {ring} sub-buffers per CPU",
        s.events
    );
    println!(
        "bytes nothing covers: {:.2}/event, {:.3} of them not zero as spliced",
        per(s.hole_bytes),
        per(s.nonzero_hole_bytes)
    );
    println!("zstd 1 over 1 MiB blocks, one core (best of 3):");
    println!("| sub-buffers | bytes/event | zstd ns/event |\n|---|---:|---:|");
    println!(
        "| as spliced | {:.2} | {:.1} |",
        per(spliced),
        ns(spliced_s)
    );
    println!(
        "| mapped, holes stale | {:.2} | {:.1} |",
        per(stale),
        ns(stale_s)
    );
    println!(
        "| mapped, holes zeroed again (the zeroing: {:.1} ns/event) | {:.2} | {:.1} |",
        ns(zeroing_s),
        per(all_zero),
        ns(all_zero_s)
    );
}
