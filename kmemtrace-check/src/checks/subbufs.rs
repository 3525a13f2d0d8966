//! Every sub-buffer of every CPU, decoded to the end of its commit: the
//! header (commit within the data area, flags), each record's length, no
//! null padding hiding committed bytes, each event's id described by a
//! format, time stamps in order ([`Ordering`]), and the missed-events flags
//! with their stored counts. The loss windows are the one
//! [`LossTracker`]'s, fed each CPU's sub-buffers in stream order (segments
//! note theirs as [`SubBufRuns`], replayed when the segments are joined).
//!
//! One pass per CPU, CPUs on several threads; the decoder is monomorphised
//! for the log's byte order (the order is matched once per CPU).

use super::container::{self, END_ONLY_LISTED};
use super::ordering::Ordering;
use super::{Options, Sink};
use crate::findings::{
    secs, thousands, Counts, Finding, Findings, Kind, Location, LossWindow, MAX_KEPT,
};
use kmemtrace_import::log::{BlockScratch, CpuBlockRef, Log};
use kmemtrace_import::walk::{subbufs, SubBufItem};
use kmemtrace_kernel::losses::{Loss, LossTracker, SubBufRun, SubBufRuns, RB_EVNT_MIN_SIZE};
use kmemtrace_kernel::{
    parse_subbuf, BigEndian, Endian, LittleEndian, RbRecordKind, RunTimeEndian, SubBufLayout,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;

/// What one CPU's pass found.
#[derive(Debug, Default)]
pub struct CpuScan {
    pub cpu: u32,
    pub counts: Counts,
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
    /// The sub-buffers, until the windows are made of them.
    pub(crate) runs: SubBufRuns,
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
    /// The segment's sub-buffers, for the loss tracker.
    runs: SubBufRuns,
    /// The first "decodes with the other byte order" finding.
    endian_hint: Option<Finding>,
    /// A sub-buffer that does not decode was tried with the other order.
    endian_checked: bool,
    unknown: BTreeMap<u16, (u64, Location)>,
    order: Ordering,
    /// The join would drop this segment's problems ([`Tally`]): they are
    /// counted, not made.
    drops: bool,
}

impl Segment {
    /// A problem, made only if it may be kept.
    #[inline]
    fn problem(&mut self, f: impl FnOnce() -> Finding) {
        if self.drops {
            self.scan.problems.total += 1;
        } else {
            self.scan.problems.push_with(f);
        }
    }

    /// After the segment's first sub-buffer that does not decode: whether
    /// it decodes with the other byte order.
    fn check_endian<E: Endian>(&mut self, log: &Log, e: E, raw: &[u8], r: &CpuBlockRef, i: usize) {
        if !std::mem::replace(&mut self.endian_checked, true) {
            self.endian_hint = check_other_endian(log, e, raw, r, i);
        }
    }
}

/// The problems the segments keep, added up in segment order as they are
/// done, so that a segment whose problems the join would drop all (those
/// before it keep [`MAX_KEPT`] already) makes none and only counts them: a
/// log of many segments each with thousands of problems (an event a
/// backward time stamp) would otherwise make and hold every segment's
/// [`MAX_KEPT`] at once. Segments end out of order; only those done from
/// the first on are added, so no segment drops a problem the report
/// would keep, and the report is the same on any number of threads.
struct Tally {
    /// Segments from this index on drop their problems.
    dropped_from: AtomicUsize,
    done: Mutex<Done>,
}

#[derive(Default)]
struct Done {
    /// Problems kept before the scan and by the segments before `next`.
    kept: u64,
    /// The first segment not done.
    next: usize,
    /// Segments done after `next`, and the problems each keeps.
    ahead: BTreeMap<usize, u64>,
}

impl Tally {
    /// A tally after `kept` problems found before the segments.
    fn new(kept: usize) -> Self {
        let t = Tally {
            dropped_from: AtomicUsize::new(usize::MAX),
            done: Mutex::new(Done {
                kept: kept as u64,
                ..Done::default()
            }),
        };
        if kept >= MAX_KEPT {
            t.dropped_from.store(0, AtomicOrdering::Relaxed);
        }
        t
    }

    /// Whether segment `i`'s problems are all dropped by the join.
    #[inline]
    fn drops(&self, i: usize) -> bool {
        i >= self.dropped_from.load(AtomicOrdering::Relaxed)
    }

    /// Segment `i` is done, keeping `kept` problems.
    fn done(&self, i: usize, kept: usize) {
        let mut d = self
            .done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.kept >= MAX_KEPT as u64 {
            return;
        }
        d.ahead.insert(i, kept as u64);
        while d.kept < MAX_KEPT as u64 {
            let next = d.next;
            let Some(k) = d.ahead.remove(&next) else {
                return;
            };
            d.kept += k;
            d.next += 1;
        }
        self.dropped_from.fetch_min(d.next, AtomicOrdering::Relaxed);
    }
}

/// What every segment's scan reads, and the tally of problems kept.
struct Pass<'a> {
    log: &'a Log,
    known: KnownIds,
    progress: &'a AtomicU64,
    /// False where the layout is unusable ([`layout_unusable`]).
    walk: bool,
    tally: Tally,
}

/// Why the log's sub-buffers cannot be walked: its arch tag's layout is
/// not one a kernel writes. A tiny claimed sub-buffer size would make a
/// block of 64 MiB tens of millions of sub-buffers, each with its finding
/// and loss run, where a kernel's are 4 KiB at least.
fn layout_unusable(log: &Log) -> Option<String> {
    let arch = log.arch.validate().err();
    arch.or_else(|| log.layout.validate().err().map(|e| e.to_string()))
}

/// Scans every CPU, segments in parallel, and joins each CPU's segments.
pub fn scan(log: &Log, opts: &Options, progress: &AtomicU64, sink: &mut Sink) -> Vec<CpuScan> {
    let by_cpu = log.blocks_by_cpu();
    let unusable = layout_unusable(log);
    if let Some(why) = unusable.as_ref().filter(|_| !log.blocks.is_empty()) {
        let subbufs = log
            .blocks
            .iter()
            .fold(0u64, |n, b| n.saturating_add(u64::from(b.count)));
        sink.push(Finding::error(
            Kind::SubBuffer,
            Location {
                exact: false,
                ..Location::at(0)
            },
            format!(
                "sub-buffers not decoded: the arch tag's sub-buffer layout is implausible ({why}); the {} sub-buffers of {} CPU_DATA blocks are taken as damaged",
                thousands(subbufs),
                thousands(log.blocks.len() as u64)
            ),
        ));
    }
    let mut work: Vec<(u32, &[&CpuBlockRef])> = Vec::new();
    for (&cpu, blocks) in &by_cpu {
        for seg in blocks.chunks(BLOCKS_PER_SEGMENT) {
            work.push((cpu, seg));
        }
    }
    let pass = Pass {
        log,
        known: KnownIds::new(log),
        progress,
        walk: unusable.is_none(),
        tally: Tally::new(sink.problems.kept.len()),
    };
    let segs = scan_segments(&pass, &work, opts.threads);
    let mut cpus = join_segments(&work, segs);
    end_only_cpus(log, &mut cpus);
    // The loss windows, each CPU's sub-buffers in stream order.
    for c in &mut cpus {
        let blocks = by_cpu.get(&c.cpu).map_or(&[][..], Vec::as_slice);
        c.windows = loss_windows(log, blocks, c);
    }
    cpus
}

/// The CPUs END says wrote sub-buffers the log lacks entirely, each a scan
/// of its own (one loss window), by CPU among `cpus`: the first
/// [`END_ONLY_LISTED`] of them ([`container::check`] counts the rest).
fn end_only_cpus(log: &Log, cpus: &mut Vec<CpuScan>) {
    let with_data = log.cpus();
    for t in container::end_only(log, &with_data).take(END_ONLY_LISTED) {
        cpus.push(CpuScan {
            cpu: t.cpu,
            ..Default::default()
        });
    }
    cpus.sort_by_key(|c| c.cpu);
}

/// Every segment of `work` scanned, on `threads` threads (0: one per
/// core), in work order.
fn scan_segments(pass: &Pass, work: &[(u32, &[&CpuBlockRef])], threads: usize) -> Vec<Segment> {
    let threads = match threads {
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
            let Some(&(cpu, blocks)) = work.get(i) else {
                break;
            };
            let seg = match pass.log.endian {
                _ if !pass.walk => unwalked_segment(pass.log, cpu, blocks),
                RunTimeEndian::Little => {
                    scan_segment(pass, LittleEndian, i, cpu, blocks, &mut scratch)
                }
                RunTimeEndian::Big => scan_segment(pass, BigEndian, i, cpu, blocks, &mut scratch),
            };
            pass.tally.done(i, seg.scan.problems.kept.len());
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
    segs.into_iter().map(|(_, seg)| seg).collect()
}

/// Each CPU's segments (`segs`, in `work` order) joined into its scan.
fn join_segments(work: &[(u32, &[&CpuBlockRef])], segs: Vec<Segment>) -> Vec<CpuScan> {
    let mut cpus: Vec<CpuScan> = Vec::new();
    let mut pending: Option<(CpuScan, Joint)> = None;
    for (&(cpu, _), seg) in work.iter().zip(segs) {
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

/// A CPU's loss windows, from its sub-buffers (`c.runs`, taken) in stream
/// order; `blocks`: its blocks.
fn loss_windows(log: &Log, blocks: &[&CpuBlockRef], c: &mut CpuScan) -> Vec<LossWindow> {
    let mut t = LossTracker::with_dropped(c.cpu, log.dropped_subbufs(c.cpu));
    let runs = std::mem::take(&mut c.runs);
    let mut losses = Vec::new();
    let mut keep = |l: Loss| {
        if losses.len() < MAX_KEPT {
            losses.push(l);
        }
    };
    for r in &runs.0 {
        if let Some(l) = t.push(r) {
            keep(l);
        }
    }
    if let Some(l) = t.finish(log.end_total(c.cpu).map(|t| t.subbufs)) {
        keep(l);
    }
    let held_in = blocks_holding(blocks, &losses);
    losses
        .iter()
        .zip(held_in)
        .map(|(l, at)| loss_window(log, blocks, l, at.map(|i| blocks[i])))
        .collect()
}

/// For each loss, the index of the first block in stream order whose
/// sub-buffers hold the one it was noticed at. A damaged log's blocks can
/// overlap and come in any order, so this is one sweep over both sorted by
/// sub-buffer, not a search of every block per loss (a log of a million
/// tiny blocks with ten thousand windows would cost 10^10 steps).
fn blocks_holding(blocks: &[&CpuBlockRef], losses: &[Loss]) -> Vec<Option<usize>> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut starts: Vec<usize> = (0..blocks.len()).collect();
    starts.sort_by_key(|&i| blocks[i].first_subbuf);
    let mut asked: Vec<usize> = (0..losses.len()).collect();
    asked.sort_by_key(|&q| losses[q].subbuf);
    let mut out = vec![None; losses.len()];
    // Blocks begun at or before the sub-buffer asked, earliest in stream
    // order on top; one that ends before it is dropped when it comes to
    // the top, as later questions ask about later sub-buffers.
    let mut open = BinaryHeap::new();
    let mut next = starts.iter().peekable();
    for q in asked {
        let x = losses[q].subbuf;
        while let Some(&i) = next.next_if(|&&i| blocks[i].first_subbuf <= x) {
            open.push(Reverse(i));
        }
        while let Some(&Reverse(i)) = open.peek() {
            if x - blocks[i].first_subbuf < u64::from(blocks[i].count) {
                out[q] = Some(i);
                break;
            }
            open.pop();
        }
    }
    out
}

/// A window as the checker lists it: where its loss was noticed (`at`, the
/// block that holds that sub-buffer, if one does).
fn loss_window(
    log: &Log,
    blocks: &[&CpuBlockRef],
    l: &Loss,
    at: Option<&CpuBlockRef>,
) -> LossWindow {
    let location = match at {
        Some(r) => locate(log, r, (l.subbuf - r.first_subbuf) as usize, None),
        // Sub-buffers missing at the stream's end: after its last block.
        None => Location {
            exact: false,
            cpu: Some(l.cpu),
            subbuf: Some(l.subbuf),
            ..Location::at(blocks.last().map_or(0, |r| r.offset))
        },
    };
    LossWindow {
        location,
        cause: l.cause.name(),
        count: l.count,
        after_ts: l.start,
        before_ts: l.end,
    }
}

/// State carried from one segment of a CPU to the next; the time stamp
/// before the seam is the joined counts' last.
#[derive(Default)]
struct Joint {
    endian_hint: bool,
    unknown: BTreeMap<u16, (u64, Location)>,
}

impl Joint {
    fn join(&mut self, acc: &mut CpuScan, mut seg: Segment) {
        let s = &mut seg.scan;
        // Time across the seam.
        if let (Some(prev), Some((first, loc))) = (acc.counts.last_ts, &seg.first) {
            if *first < prev {
                acc.ordering_violations += 1;
                acc.problems
                    .push(ordering_finding(acc.cpu, loc.clone(), prev, *first));
            }
        }
        if let Some(h) = seg.endian_hint.take() {
            if !std::mem::replace(&mut self.endian_hint, true) {
                acc.problems.push(h);
            }
        }
        for (id, (n, loc)) in std::mem::take(&mut seg.unknown) {
            self.unknown.entry(id).or_insert((0, loc)).0 += n;
        }
        acc.counts.then(&s.counts);
        acc.bad_subbufs = acc.bad_subbufs.saturating_add(s.bad_subbufs);
        acc.bad_event_streams += s.bad_event_streams;
        acc.ordering_violations += s.ordering_violations;
        acc.stored_lost = acc.stored_lost.saturating_add(s.stored_lost);
        acc.flagged += s.flagged;
        acc.flag_only += s.flag_only;
        for r in std::mem::take(&mut seg.runs).0 {
            acc.runs.push(r);
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

/// A sub-buffer whose committed bytes do not decode to the end: its tail
/// is lost, and the stream counted and reported as bad (`at`, `why`).
#[cold]
fn undecoded_tail(
    run: &mut SubBufRun,
    seg: &mut Segment,
    at: impl FnOnce() -> Location,
    why: impl FnOnce() -> String,
) {
    run.tail_lost = true;
    seg.scan.bad_event_streams += 1;
    seg.problem(|| Finding::error(Kind::SubBuffer, at(), why()));
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

/// A segment of a log whose sub-buffers are not walked
/// ([`layout_unusable`]): each block one run of damaged sub-buffers, not
/// read.
fn unwalked_segment(log: &Log, cpu: u32, blocks: &[&CpuBlockRef]) -> Segment {
    let mut seg = Segment::default();
    let s = &mut seg.scan;
    s.cpu = cpu;
    for r in blocks.iter().filter(|r| r.count > 0) {
        let n = u64::from(r.count);
        s.counts.blocks += 1;
        s.counts.subbufs = s.counts.subbufs.saturating_add(n);
        s.counts.data_bytes = s
            .counts
            .data_bytes
            .saturating_add(n * u64::from(log.arch.subbuf_size));
        s.bad_subbufs = s.bad_subbufs.saturating_add(n);
        seg.runs.push(SubBufRun {
            count: n,
            ..SubBufRun::undecodable(r.first_subbuf)
        });
    }
    seg
}

fn scan_segment<E: Endian>(
    pass: &Pass,
    e: E,
    index: usize,
    cpu: u32,
    blocks: &[&CpuBlockRef],
    scratch: &mut BlockScratch,
) -> Segment {
    let log = pass.log;
    let mut seg = Segment::default();
    seg.scan.cpu = cpu;
    for &r in blocks {
        seg.drops = pass.tally.drops(index);
        let data = match log.read_cpu_block_into(r, scratch) {
            Ok(d) => d,
            Err(p) => {
                seg.runs
                    .push(SubBufRun::unreadable(r.first_subbuf, r.count));
                let at = Location {
                    cpu: Some(cpu),
                    ..Location::block(p.offset)
                };
                seg.problem(|| Finding::error(Kind::Damage, at, p.what));
                continue;
            }
        };
        seg.scan.counts.blocks += 1;
        pass.progress
            .fetch_add(data.len() as u64, AtomicOrdering::Relaxed);
        for item in subbufs(e, &log.layout, r.first_subbuf, data) {
            scan_subbuf(pass, e, r, item, &mut seg);
        }
    }
    seg.scan.counts.last_ts = seg.order.last();
    seg.scan.ordering_violations = seg.order.violations;
    seg
}

/// One sub-buffer of block `r`, decoded to the end of its commit.
#[inline(always)]
fn scan_subbuf<E: Endian>(
    pass: &Pass,
    e: E,
    r: &CpuBlockRef,
    item: SubBufItem<'_>,
    seg: &mut Segment,
) {
    let log = pass.log;
    let (i, raw) = (item.in_chunk, item.raw);
    seg.scan.counts.subbufs += 1;
    seg.scan.counts.data_bytes += raw.len() as u64;
    let sb = match item.subbuf {
        Ok(sb) => sb,
        Err(err) => {
            seg.scan.bad_subbufs += 1;
            seg.runs.push(SubBufRun::undecodable(item.index));
            seg.problem(|| {
                Finding::error(
                    Kind::SubBuffer,
                    locate(log, r, i, Some(err.offset)),
                    format!("sub-buffer header does not decode: {err}"),
                )
            });
            seg.check_endian(log, e, raw, r, i);
            return;
        }
    };
    let s = &mut seg.scan;
    if sb.missed_events {
        s.flagged += 1;
        match sb.lost_events {
            Some(n) => s.stored_lost = s.stored_lost.saturating_add(n),
            None => s.flag_only += 1,
        }
    }
    let mut run = SubBufRun::read(item.index, sb.missed_events, sb.lost_events);
    let mut first_in_subbuf: Option<u64> = None;
    let mut n_events = 0u64;
    // The clock's state in a local for the loop over every event (kept in
    // a register, not stored to the segment at each event), put back
    // after it.
    let mut order = seg.order;
    for rec in sb.events(e) {
        match rec {
            Ok(rec) => match rec.kind {
                RbRecordKind::Data { payload } => {
                    n_events += 1;
                    if first_in_subbuf.is_none() {
                        first_in_subbuf = Some(rec.ts);
                        if seg.first.is_none() {
                            seg.first = Some((rec.ts, locate(log, r, i, Some(rec.offset))));
                        }
                    }
                    run.event(rec.ts);
                    if let Some(prev) = order.next(rec.ts) {
                        ordering_violation(log, r, i, rec.offset, prev, rec.ts, seg);
                    }
                    match e.read_u16(payload, 0) {
                        Some(id) if pass.known.has(id) => {}
                        id => {
                            let id = id.unwrap_or(0);
                            let u = seg
                                .unknown
                                .entry(id)
                                .or_insert_with(|| (0, locate(log, r, i, Some(rec.offset))));
                            u.0 += 1;
                        }
                    }
                }
                RbRecordKind::Padding {
                    len,
                    discarded: false,
                } if len >= RB_EVNT_MIN_SIZE => {
                    let why = || {
                        format!(
                            "null padding (type_len 29, time_delta 0) inside the committed area: the {} committed bytes after it are not decoded",
                            thousands(len as u64 - 4)
                        )
                    };
                    let at = || locate(log, r, i, Some(rec.offset));
                    undecoded_tail(&mut run, seg, at, why);
                }
                _ => {}
            },
            Err(err) => {
                let why = || {
                    format!(
                        "events do not decode to the end of the commit ({} bytes): {err}; {} events before it",
                        sb.commit,
                        thousands(n_events)
                    )
                };
                let at = || locate(log, r, i, Some(err.offset));
                undecoded_tail(&mut run, seg, at, why);
                seg.check_endian(log, e, raw, r, i);
            }
        }
    }
    seg.order = order;
    let s = &mut seg.scan;
    s.counts.events += n_events;
    if s.counts.first_ts.is_none() {
        s.counts.first_ts = first_in_subbuf;
    }
    seg.runs.push(run);
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
    seg: &mut Segment,
) {
    seg.problem(|| ordering_finding(r.cpu, locate(log, r, i, Some(offset)), prev, ts));
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

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_format::block::{BlockHeader, BlockType};
    use kmemtrace_kernel::losses::Cause;
    use proptest::prelude::*;

    fn block(first_subbuf: u64, count: u32) -> CpuBlockRef {
        CpuBlockRef {
            offset: first_subbuf.wrapping_mul(100),
            header: BlockHeader::empty(BlockType::CpuData),
            cpu: 0,
            block_seq: 0,
            first_subbuf,
            count,
        }
    }

    fn loss(subbuf: u64) -> Loss {
        Loss {
            cpu: 0,
            start: None,
            end: None,
            since: 0,
            cause: Cause::Missing,
            count: None,
            subbuf,
        }
    }

    proptest! {
        /// The sweep answers what searching every block in stream order
        /// would, for overlapping, unordered and empty blocks alike.
        #[test]
        fn blocks_holding_is_the_first_block_in_stream_order(
            ranges in prop::collection::vec((0u64..40, 0u32..6), 0..24),
            asked in prop::collection::vec(0u64..50, 0..24),
        ) {
            let owned: Vec<CpuBlockRef> = ranges.iter().map(|&(f, n)| block(f, n)).collect();
            let blocks: Vec<&CpuBlockRef> = owned.iter().collect();
            let losses: Vec<Loss> = asked.iter().map(|&s| loss(s)).collect();
            let searched: Vec<Option<usize>> = losses
                .iter()
                .map(|l| {
                    blocks.iter().position(|r| {
                        l.subbuf >= r.first_subbuf && l.subbuf - r.first_subbuf < u64::from(r.count)
                    })
                })
                .collect();
            prop_assert_eq!(blocks_holding(&blocks, &losses), searched);
        }
    }

    /// A log whose arch tag claims sub-buffers of `subbuf_size` bytes,
    /// with CPU_DATA blocks of `(cpu, sub-buffers)` whose bytes are all
    /// `fill`; END lists what it wrote.
    pub(crate) fn log_of_blocks(subbuf_size: u32, fill: u8, blocks: &[(u32, u32)]) -> Vec<u8> {
        log_of(subbuf_size, fill, blocks, &[])
    }

    /// [`log_of_blocks`], END listing `more` CPUs besides.
    pub(crate) fn log_of(
        subbuf_size: u32,
        fill: u8,
        blocks: &[(u32, u32)],
        more: &[kmemtrace_format::records::CpuTotal],
    ) -> Vec<u8> {
        use kmemtrace_format::arch::ArchTag;
        use kmemtrace_format::block::{encode_block, encode_file_header, Compression};
        use kmemtrace_format::records::{encode_cpu_data_header, CpuTotal, EndRecord};
        let mut out = encode_file_header().to_vec();
        let arch = ArchTag::new(kmemtrace_kernel::RunTimeEndian::Little, 8, subbuf_size, 16);
        encode_block(BlockType::Arch, &arch.encode(), Compression::None, &mut out).unwrap();
        let mut totals: BTreeMap<u32, CpuTotal> = BTreeMap::new();
        for &(cpu, n) in blocks {
            let t = totals.entry(cpu).or_insert(CpuTotal {
                cpu,
                blocks: 0,
                subbufs: 0,
                bytes: 0,
            });
            let mut p = encode_cpu_data_header(cpu, n, t.blocks, t.subbufs).to_vec();
            p.resize(p.len() + (n * subbuf_size) as usize, fill);
            encode_block(BlockType::CpuData, &p, Compression::Zstd(1), &mut out).unwrap();
            t.blocks += 1;
            t.subbufs += u64::from(n);
            t.bytes += u64::from(n * subbuf_size);
        }
        let end = EndRecord {
            wall_ns: None,
            reason: "test".into(),
            blocks: 1 + blocks.len() as u64,
            cpus: totals.into_values().chain(more.iter().copied()).collect(),
            exit_status: None,
        };
        encode_block(BlockType::End, &end.encode(), Compression::None, &mut out).unwrap();
        out
    }

    /// An arch tag claiming 1-byte sub-buffers: the blocks are not walked
    /// sub-buffer by sub-buffer (a finding and a run each), their
    /// sub-buffers are counted damaged, with one finding for the log.
    #[test]
    fn an_implausible_layout_is_not_walked() {
        let r = crate::check_bytes("tiny", &log_of_blocks(1, 0, &[(0, 60_000), (0, 40_000)]));
        assert_eq!(r.verdict, crate::Verdict::Damaged);
        let sub: Vec<_> = r
            .problems
            .iter()
            .filter(|f| f.kind == crate::findings::Kind::SubBuffer)
            .collect();
        assert_eq!(sub.len(), 1, "{sub:#?}");
        assert!(
            sub[0]
                .message
                .contains("the 100,000 sub-buffers of 2 CPU_DATA blocks"),
            "{}",
            sub[0].message
        );
        assert!(r.problems_total < 10, "{:#?}", r.problems);
        let c = &r.cpus[0];
        assert_eq!((c.counts.blocks, c.counts.subbufs), (2, 100_000));
        assert_eq!((c.bad_subbufs, c.counts.events), (100_000, 0));
        assert_eq!(r.loss_windows.len(), 1);
        assert_eq!(r.loss_windows[0].cause, "damaged");
    }

    /// Segments whose problems the join would drop make none, and the
    /// problems kept are the same on one thread or several.
    #[test]
    fn problems_past_the_cap_are_counted_not_made() {
        // Three CPUs of 20 blocks (three segments each) of one sub-buffer
        // whose header does not decode; the checks before found all but 5
        // of the problems kept.
        let blocks: Vec<(u32, u32)> = (0..60).map(|i| (i % 3, 1)).collect();
        let log = Log::from_bytes("cap", &log_of_blocks(4096, 0xff, &blocks)).unwrap();
        let before = || {
            let mut sink = Sink::default();
            for i in 0..MAX_KEPT - 5 {
                sink.push(Finding::error(Kind::Damage, Location::at(i as u64), "x"));
            }
            sink
        };
        let mut reports = Vec::new();
        for threads in [1, 4] {
            let mut sink = before();
            let cpus = scan(&log, &Options { threads }, &AtomicU64::new(0), &mut sink);
            if threads == 1 {
                // The first segment fills the list: nothing after it is made.
                let kept: Vec<(usize, u64)> = cpus
                    .iter()
                    .map(|c| (c.problems.kept.len(), c.problems.total))
                    .collect();
                assert_eq!(kept, [(8, 20), (0, 20), (0, 20)]);
            }
            for c in cpus {
                sink.problems.extend(c.problems);
            }
            assert_eq!(sink.problems.total, MAX_KEPT as u64 - 5 + 60);
            assert_eq!(sink.problems.kept.len(), MAX_KEPT);
            reports.push(sink.problems.kept);
        }
        assert_eq!(reports[0], reports[1]);
    }

    /// An END listing ten thousand CPUs without data: the first 8,192 are
    /// rows, the rest one finding; the log stays damaged.
    #[test]
    fn cpus_only_end_lists_are_rows_up_to_the_linux_maximum() {
        use kmemtrace_format::records::CpuTotal;
        let more: Vec<CpuTotal> = (1..=10_000)
            .map(|cpu| CpuTotal {
                cpu,
                blocks: 1,
                subbufs: 2,
                bytes: 8192,
            })
            .collect();
        let r = crate::check_bytes("end", &log_of(4096, 0, &[(0, 1)], &more));
        assert_eq!(r.verdict, crate::Verdict::Damaged);
        assert_eq!(r.cpus.len(), 1 + END_ONLY_LISTED);
        assert_eq!(r.cpus.last().map(|c| c.cpu), Some(END_ONLY_LISTED as u32));
        // Each CPU listed is a problem of its own, those past it one.
        let end: Vec<_> = r
            .problems
            .iter()
            .filter(|f| f.kind == crate::findings::Kind::EndTotals)
            .collect();
        assert_eq!(end.len(), END_ONLY_LISTED + 1);
        assert_eq!(r.problems_total, r.problems.len() as u64);
        assert!(
            end.iter().any(|f| f.message.starts_with(
                "END says 1,808 more CPUs than the 8,192 listed wrote sub-buffers (3,616 in all)"
            )),
            "{:#?}",
            &end[..3]
        );
    }

    #[test]
    fn the_tally_counts_segments_done_from_the_first() {
        let t = Tally::new(MAX_KEPT - 10);
        // Done out of order: 2 alone says nothing of 1.
        t.done(2, 10);
        assert!(!t.drops(3));
        t.done(0, 4);
        assert!(!t.drops(2));
        t.done(1, 6);
        assert!(!t.drops(1) && t.drops(2) && t.drops(3));
        assert!(Tally::new(MAX_KEPT).drops(0));
    }

    #[test]
    fn blocks_holding_reaches_the_top_of_the_sub_buffer_numbers() {
        let owned = [block(u64::MAX - 2, 2), block(u64::MAX - 1, 1)];
        let blocks: Vec<&CpuBlockRef> = owned.iter().collect();
        let losses = [loss(u64::MAX - 1), loss(u64::MAX), loss(0)];
        assert_eq!(blocks_holding(&blocks, &losses), [Some(0), None, None]);
    }
}
