//! Every sub-buffer of every CPU, decoded to the end of its commit: the
//! header (commit within the data area, flags), each record's length, no
//! null padding hiding committed bytes, each event's id described by a
//! format, time stamps in order ([`Ordering`]), and the missed-events flags
//! with their stored counts (the loss windows).
//!
//! One pass per CPU, CPUs on several threads; the decoder is monomorphised
//! for the log's byte order (the order is matched once per CPU).

use super::ordering::Ordering;
use super::Options;
use crate::findings::{secs, thousands, Finding, Findings, Kind, Location, LossWindow, MAX_KEPT};
use kmemtrace_format::log::{BlockScratch, CpuBlockRef, Log};
use kmemtrace_format::subbuf::{parse_subbuf, RbRecordKind, SubBufLayout};
use kmemtrace_format::walk::{subbufs, SubBufItem};
use kmemtrace_format::{BigEndian, Endian, LittleEndian, RunTimeEndian};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

/// Smallest event the kernel writes (`RB_EVNT_MIN_SIZE`): a null padding
/// this long or longer inside the commit hides bytes that were committed.
const RB_EVNT_MIN_SIZE: usize = 8;

/// What one CPU's pass found.
#[derive(Debug, Default)]
pub struct CpuScan {
    pub cpu: u32,
    pub blocks: u64,
    pub subbufs: u64,
    pub data_bytes: u64,
    pub events: u64,
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
    pub bad_subbufs: u64,
    pub bad_event_streams: u64,
    pub ordering_violations: u64,
    pub unknown_events: u64,
    /// Sum of the stored lost counts, sub-buffers flagged, flagged without
    /// a count.
    pub stored_lost: u64,
    pub flagged: u64,
    pub flag_only: u64,
    /// Loss windows (at most [`MAX_KEPT`]).
    pub windows: Vec<LossWindow>,
    pub problems: Findings,
    pub warnings: Findings,
}

/// Event ids the log's formats describe (`common_type` is 16 bits).
pub struct KnownIds([u64; 1024]);

impl KnownIds {
    pub fn new(log: &Log) -> Self {
        let mut k = KnownIds([0; 1024]);
        for f in &log.formats {
            if f.id < 65536 {
                k.0[(f.id >> 6) as usize] |= 1 << (f.id & 63);
            }
        }
        k
    }
    #[inline(always)]
    fn has(&self, id: u16) -> bool {
        self.0[usize::from(id >> 6)] >> (id & 63) & 1 != 0
    }
}

/// CPU_DATA blocks per unit of work: CPUs are cut into segments so that
/// all cores help even when one CPU holds most of the data.
const BLOCKS_PER_SEGMENT: usize = 8;

/// What one segment (consecutive blocks of one CPU) found, with what the
/// merge needs to join it to the segment before it.
#[derive(Debug, Default)]
struct Segment {
    scan: CpuScan,
    /// The first data event's time stamp and place.
    first: Option<(u64, Location)>,
    /// Loss windows (indexes into `scan.windows`) before the segment's
    /// first event: their `after_ts` is the previous segment's last.
    windows_before_first: usize,
    /// The first "decodes with the other byte order" finding.
    endian_hint: Option<Finding>,
    unknown: BTreeMap<u16, (u64, Location)>,
}

/// Scans every CPU, segments in parallel, and joins each CPU's segments.
pub fn scan(log: &Log, opts: &Options, progress: &AtomicU64) -> Vec<CpuScan> {
    let known = KnownIds::new(log);
    let mut work: Vec<(u32, Vec<&CpuBlockRef>)> = Vec::new();
    for cpu in log.cpus() {
        let blocks = log.cpu_blocks(cpu);
        for seg in blocks.chunks(BLOCKS_PER_SEGMENT) {
            work.push((cpu, seg.to_vec()));
        }
    }
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(work.len())
    .max(1);
    let next = AtomicUsize::new(0);
    let run = || {
        let mut out = Vec::new();
        let mut scratch = BlockScratch::new();
        loop {
            let i = next.fetch_add(1, AtomicOrdering::Relaxed);
            let Some((cpu, blocks)) = work.get(i) else {
                break;
            };
            let seg = match log.endian {
                RunTimeEndian::Little => scan_segment(
                    log,
                    LittleEndian,
                    *cpu,
                    blocks,
                    &known,
                    progress,
                    &mut scratch,
                ),
                RunTimeEndian::Big => {
                    scan_segment(log, BigEndian, *cpu, blocks, &known, progress, &mut scratch)
                }
            };
            out.push((i, seg));
        }
        out
    };
    let mut segs: Vec<(usize, Segment)> = if threads == 1 {
        run()
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(run)).collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a checker thread panicked"))
                .collect()
        })
    };
    segs.sort_by_key(|(i, _)| *i);
    let mut cpus: Vec<CpuScan> = Vec::new();
    let mut pending: Option<(CpuScan, Joint)> = None;
    for (i, seg) in segs {
        let cpu = work[i].0;
        match &mut pending {
            Some((acc, joint)) if acc.cpu == cpu => joint.join(acc, seg),
            _ => {
                if let Some((acc, joint)) = pending.take() {
                    cpus.push(joint.finish(acc));
                }
                let mut acc = CpuScan {
                    cpu,
                    ..Default::default()
                };
                let mut joint = Joint::default();
                joint.join(&mut acc, seg);
                pending = Some((acc, joint));
            }
        }
    }
    if let Some((acc, joint)) = pending {
        cpus.push(joint.finish(acc));
    }
    cpus
}

/// State carried from one segment of a CPU to the next.
#[derive(Default)]
struct Joint {
    last_ts: Option<u64>,
    endian_hint: bool,
    unknown: BTreeMap<u16, (u64, Location)>,
}

impl Joint {
    fn join(&mut self, acc: &mut CpuScan, mut seg: Segment) {
        let s = &mut seg.scan;
        // Time across the seam.
        if let (Some(prev), Some((first, loc))) = (self.last_ts, &seg.first) {
            if *first < prev {
                acc.ordering_violations += 1;
                acc.problems
                    .push(ordering_finding(acc.cpu, loc.clone(), prev, *first));
            }
        }
        for w in s.windows.iter_mut().take(seg.windows_before_first) {
            w.after_ts = self.last_ts;
        }
        if s.last_ts.is_some() {
            self.last_ts = s.last_ts;
        }
        if let Some(h) = seg.endian_hint.take() {
            if !std::mem::replace(&mut self.endian_hint, true) {
                acc.problems.push(h);
            }
        }
        for (id, (n, loc)) in std::mem::take(&mut seg.unknown) {
            self.unknown.entry(id).or_insert((0, loc)).0 += n;
        }
        acc.blocks += s.blocks;
        acc.subbufs += s.subbufs;
        acc.data_bytes += s.data_bytes;
        acc.events += s.events;
        acc.first_ts = acc.first_ts.or(s.first_ts);
        acc.last_ts = self.last_ts;
        acc.bad_subbufs += s.bad_subbufs;
        acc.bad_event_streams += s.bad_event_streams;
        acc.ordering_violations += s.ordering_violations;
        acc.stored_lost = acc.stored_lost.saturating_add(s.stored_lost);
        acc.flagged += s.flagged;
        acc.flag_only += s.flag_only;
        for w in s.windows.drain(..) {
            if acc.windows.len() < MAX_KEPT {
                acc.windows.push(w);
            }
        }
        acc.problems.extend(std::mem::take(&mut s.problems));
        acc.warnings.extend(std::mem::take(&mut s.warnings));
    }

    fn finish(self, mut acc: CpuScan) -> CpuScan {
        let cpu = acc.cpu;
        for (id, (n, loc)) in self.unknown {
            acc.unknown_events += n;
            acc.problems.push(Finding::error(
                Kind::UnknownEvent,
                loc,
                format!(
                    "missing metadata: no format for event id {id} ({} on CPU {cpu}; first here)",
                    if n == 1 {
                        "1 event".to_string()
                    } else {
                        format!("{} events", thousands(n))
                    }
                ),
            ));
        }
        acc
    }
}

/// Where a place inside a sub-buffer is.
fn locate(log: &Log, r: &CpuBlockRef, in_block: usize, subbuf_offset: Option<usize>) -> Location {
    let index = r.first_subbuf.saturating_add(in_block as u64);
    let exact = log.subbuf_file_offset(r, index);
    Location {
        offset: exact
            .map(|o| o + subbuf_offset.unwrap_or(0) as u64)
            .unwrap_or(r.offset),
        exact: exact.is_some(),
        block: Some(r.offset),
        cpu: Some(r.cpu),
        subbuf: Some(index),
        subbuf_in_block: Some(in_block as u32),
        subbuf_offset: subbuf_offset.map(|o| o as u64),
    }
}

/// Whether a sub-buffer decodes fully with byte order `e`.
fn decodes_with<E: Endian>(e: E, layout: &SubBufLayout, raw: &[u8]) -> bool {
    parse_subbuf(e, layout, raw)
        .map(|sb| sb.events(e).all(|r| r.is_ok()))
        .unwrap_or(false)
}

fn scan_segment<E: Endian>(
    log: &Log,
    e: E,
    cpu: u32,
    blocks: &[&CpuBlockRef],
    known: &KnownIds,
    progress: &AtomicU64,
    scratch: &mut BlockScratch,
) -> Segment {
    let mut scan = SegmentScan {
        log,
        e,
        known,
        seg: Segment::default(),
        s: CpuScan {
            cpu,
            ..Default::default()
        },
        order: Ordering::default(),
        endian_checked: false,
    };
    let layout = log.layout;

    for &r in blocks {
        let data = match log.read_cpu_block_into(r, scratch) {
            Ok(d) => d,
            Err(p) => {
                scan.s.problems.push(Finding::error(
                    Kind::Damage,
                    Location {
                        cpu: Some(cpu),
                        ..Location::block(p.offset)
                    },
                    p.what,
                ));
                continue;
            }
        };
        scan.s.blocks += 1;
        progress.fetch_add(data.len() as u64, AtomicOrdering::Relaxed);
        for item in subbufs(e, &layout, r.first_subbuf, data) {
            scan.subbuf(r, item);
        }
    }
    let SegmentScan {
        mut seg,
        mut s,
        order,
        ..
    } = scan;
    s.last_ts = order.last();
    s.ordering_violations = order.violations;
    if seg.first.is_none() {
        seg.windows_before_first = s.windows.len();
    }
    seg.scan = s;
    seg
}

/// One segment's scan in progress: what it found so far.
struct SegmentScan<'a, E: Endian> {
    log: &'a Log,
    e: E,
    known: &'a KnownIds,
    seg: Segment,
    s: CpuScan,
    order: Ordering,
    /// The other byte order has been tried (on the segment's first
    /// sub-buffer that does not decode).
    endian_checked: bool,
}

impl<E: Endian> SegmentScan<'_, E> {
    /// On the first sub-buffer that does not decode: whether the other
    /// byte order would decode it.
    fn try_other_endian(&mut self, raw: &[u8], r: &CpuBlockRef, i: usize) {
        if !self.endian_checked {
            self.endian_checked = true;
            self.seg.endian_hint = check_other_endian(self.log, self.e, raw, r, i);
        }
    }

    /// One sub-buffer (the `i`th of block `r`): its header, every record to
    /// the end of its commit, and the loss window its missed-events flag
    /// opens.
    fn subbuf(&mut self, r: &CpuBlockRef, item: SubBufItem<'_>) {
        let log = self.log;
        let (i, raw) = (item.in_chunk, item.raw);
        self.s.subbufs += 1;
        self.s.data_bytes += raw.len() as u64;
        let sb = match item.subbuf {
            Ok(sb) => sb,
            Err(err) => {
                self.s.bad_subbufs += 1;
                self.s.problems.push(Finding::error(
                    Kind::SubBuffer,
                    locate(log, r, i, Some(err.offset)),
                    format!("sub-buffer header does not decode: {err}"),
                ));
                self.try_other_endian(raw, r, i);
                return;
            }
        };
        let window_at = if sb.missed_events {
            self.s.flagged += 1;
            match sb.lost_events {
                Some(n) => self.s.stored_lost = self.s.stored_lost.saturating_add(n),
                None => self.s.flag_only += 1,
            }
            Some(self.order.last())
        } else {
            None
        };
        let mut first_in_subbuf: Option<u64> = None;
        let mut n_events = 0u64;
        for rec in sb.events(self.e) {
            match rec {
                Ok(rec) => match rec.kind {
                    RbRecordKind::Data { payload } => {
                        n_events += 1;
                        if first_in_subbuf.is_none() {
                            first_in_subbuf = Some(rec.ts);
                            if self.seg.first.is_none() {
                                self.seg.first =
                                    Some((rec.ts, locate(log, r, i, Some(rec.offset))));
                                self.seg.windows_before_first =
                                    self.s.windows.len() + usize::from(window_at.is_some());
                            }
                        }
                        self.data_event(r, i, rec.ts, rec.offset, payload);
                    }
                    RbRecordKind::Padding {
                        len,
                        discarded: false,
                    } if len >= RB_EVNT_MIN_SIZE => {
                        self.s.bad_event_streams += 1;
                        self.s.problems.push(Finding::error(
                            Kind::SubBuffer,
                            locate(log, r, i, Some(rec.offset)),
                            format!(
                                "null padding (type_len 29, time_delta 0) inside the committed area: the {} committed bytes after it are not decoded",
                                thousands(len as u64 - 4)
                            ),
                        ));
                    }
                    _ => {}
                },
                Err(err) => {
                    self.s.bad_event_streams += 1;
                    self.s.problems.push(Finding::error(
                        Kind::SubBuffer,
                        locate(log, r, i, Some(err.offset)),
                        format!(
                            "events do not decode to the end of the commit ({} bytes): {err}; {} events before it",
                            sb.commit,
                            thousands(n_events)
                        ),
                    ));
                    self.try_other_endian(raw, r, i);
                }
            }
        }
        self.s.events += n_events;
        if self.s.first_ts.is_none() {
            self.s.first_ts = first_in_subbuf;
        }
        if let Some(after_ts) = window_at {
            if self.s.windows.len() < MAX_KEPT {
                self.s.windows.push(LossWindow {
                    location: locate(log, r, i, None),
                    count: sb.lost_events,
                    after_ts,
                    before_ts: first_in_subbuf.unwrap_or(sb.timestamp),
                });
            }
        }
    }

    /// A data record at `offset` of sub-buffer `i`: its time must not go
    /// backwards on the CPU, its event id must be one the log describes.
    fn data_event(&mut self, r: &CpuBlockRef, i: usize, ts: u64, offset: usize, payload: &[u8]) {
        if let Some(prev) = self.order.next(ts) {
            ordering_violation(self.log, r, i, offset, prev, ts, &mut self.s);
        }
        match self.e.read_u16(payload, 0) {
            Some(id) if self.known.has(id) => {}
            id => {
                let id = id.unwrap_or(0);
                let log = self.log;
                let u = self
                    .seg
                    .unknown
                    .entry(id)
                    .or_insert_with(|| (0, locate(log, r, i, Some(offset))));
                u.0 += 1;
            }
        }
    }
}

fn ordering_finding(cpu: u32, loc: Location, prev: u64, ts: u64) -> Finding {
    let mut f = Finding::error(
        Kind::Ordering,
        loc,
        format!(
            "time goes backwards on CPU {cpu}: {} after {} ({} ns earlier)",
            secs(ts),
            secs(prev),
            thousands(prev - ts)
        ),
    );
    f.previous_ts = Some(prev);
    f.ts = Some(ts);
    f
}

#[cold]
#[inline(never)]
fn ordering_violation(
    log: &Log,
    r: &CpuBlockRef,
    i: usize,
    offset: usize,
    prev: u64,
    ts: u64,
    s: &mut CpuScan,
) {
    s.problems.push(ordering_finding(
        r.cpu,
        locate(log, r, i, Some(offset)),
        prev,
        ts,
    ));
}

/// After the first sub-buffer of a CPU that does not decode: if it decodes
/// with the other byte order, the arch tag's byte order is likely wrong.
#[cold]
fn check_other_endian<E: Endian>(
    log: &Log,
    e: E,
    raw: &[u8],
    r: &CpuBlockRef,
    i: usize,
) -> Option<Finding> {
    let layout = log.layout;
    let other_ok = if e.is_big_endian() {
        decodes_with(LittleEndian, &layout, raw)
    } else {
        decodes_with(BigEndian, &layout, raw)
    };
    if other_ok {
        let (said, other) = if e.is_big_endian() {
            ("big", "little")
        } else {
            ("little", "big")
        };
        return Some(Finding::error(
            Kind::Arch,
            locate(log, r, i, None),
            format!(
                "this sub-buffer does not decode as {said}-endian, as the arch tag says, but does as {other}-endian: the byte order is probably wrong"
            ),
        ));
    }
    None
}
