//! Allocation stall episodes (the report's `stalls`) as slices on the
//! waiting task's thread track: a `TrackDescriptor` with a
//! `ThreadDescriptor` per task that stalled, then per episode a
//! `TrackEvent` `TYPE_SLICE_BEGIN` named after its first wait and its call
//! site, with its figures as debug annotations, its waits (reclaim,
//! compaction, throttle) as slices nested in it, and a `TYPE_SLICE_END`.
//!
//! A track's slices must nest: a wait is drawn inside its episode and
//! inside the wait it began in, cut where it would stick out (the kernel's
//! times are microseconds for a throttle; the model's own figures stay in
//! the arguments), and an episode starts no earlier than the task's one
//! before it ended.

use super::{packet, Packets, TRACE_PACKET};
use crate::proto::Msg;
use kmemtrace_analysis::model::stalls::{Episode, Phase};
use kmemtrace_import::log::Log;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Thread tracks' uuids: this plus the task's pid, clear of the counter
/// tracks' (1 and 2).
const TRACK_BASE: u64 = 1 << 32;

/// `TrackEvent` fields.
mod te {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const TRACK_UUID: u32 = 11;
    pub const CATEGORIES: u32 = 22;
    pub const NAME: u32 = 23;
    pub const TYPE_SLICE_BEGIN: u64 = 1;
    pub const TYPE_SLICE_END: u64 = 2;
}

/// The slices' category.
const CATEGORY: &str = "kmemtrace.stall";

/// Slices written: episodes, and the waits in them.
#[derive(Debug, Default)]
pub struct Slices {
    pub episodes: u64,
    pub phases: u64,
}

/// One edge of a slice on a track, in time order.
#[derive(Debug)]
enum Edge<'e> {
    Episode(u64, &'e Episode),
    Phase(u64, &'e Phase),
    End(u64),
}

/// A task's episodes (by start) as begins and ends that nest, in time
/// order: each episode from its start to its start + span, its phases
/// inside it by start (the longer first where two start together).
fn edges<'e>(eps: &[&'e Episode]) -> Vec<Edge<'e>> {
    let mut out = Vec::new();
    let mut free_from = 0u64;
    for e in eps {
        let start = e.start_ns.max(free_from);
        let end = e.start_ns.saturating_add(e.span_ns).max(start);
        free_from = end;
        out.push(Edge::Episode(start, e));
        let mut phases: Vec<&Phase> = e.phases.iter().collect();
        phases.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(b.ns.cmp(&a.ns)));
        // The ends of the phases open, innermost last.
        let mut open: Vec<u64> = Vec::new();
        for ph in phases {
            let a = ph.start_ns.clamp(start, end);
            while open.last().is_some_and(|&t| t <= a) {
                out.push(Edge::End(open.pop().expect("open")));
            }
            let within = open.last().copied().unwrap_or(end);
            let b = ph.start_ns.saturating_add(ph.ns).clamp(a, within);
            out.push(Edge::Phase(a, ph));
            open.push(b);
        }
        while let Some(t) = open.pop() {
            out.push(Edge::End(t));
        }
        out.push(Edge::End(end));
    }
    out
}

/// `DebugAnnotation { name = 10; bool_value = 2; uint_value = 3;
/// int_value = 4; string_value = 6 }`.
enum Arg<'a> {
    U(u64),
    I(i64),
    B(bool),
    S(&'a str),
}

fn annotate(ev: &mut Msg, name: &str, v: Arg<'_>) {
    let mut a = Msg::new();
    a.string(10, name);
    match v {
        Arg::U(v) => a.uint(3, v),
        Arg::I(v) => a.int(4, v),
        Arg::B(v) => a.uint(2, u64::from(v)),
        Arg::S(v) => a.string(6, v),
    };
    ev.msg(te::DEBUG_ANNOTATIONS, &a);
}

/// An episode's begin: its name (`memcg reclaim: filemap_add_folio+0x7a`)
/// and its figures.
fn episode_begin(ev: &mut Msg, e: &Episode) {
    let site = e.callsite.as_deref().unwrap_or("(no stack)");
    ev.string(te::NAME, &format!("{}: {site}", e.kind));
    annotate(ev, "callsite", Arg::S(site));
    annotate(ev, "cpu", Arg::U(u64::from(e.cpu)));
    if let Some(o) = e.order {
        annotate(ev, "order", Arg::U(u64::from(o)));
    }
    if let Some(g) = &e.gfp {
        annotate(ev, "gfp", Arg::S(&g.compact));
        annotate(ev, "gfp_flags", Arg::S(&g.value));
    }
    for (name, v) in [
        ("stall_ns", e.stall_ns),
        ("reclaims", e.reclaims),
        ("reclaim_ns", e.reclaim_ns),
        ("pages_reclaimed", e.pages_reclaimed),
        ("compactions", e.compactions),
        ("compaction_ns", e.compaction_ns),
        ("throttles", e.throttles),
        ("throttle_ns", e.throttle_ns),
        ("retries", u64::from(e.retries)),
        ("kswapd_wakeups", u64::from(e.kswapd_wakeups)),
    ] {
        annotate(ev, name, Arg::U(v));
    }
    if !e.compaction_results.is_empty() {
        let r: Vec<String> = e
            .compaction_results
            .iter()
            .map(|c| format!("{} {}", c.count, c.name))
            .collect();
        annotate(ev, "compaction_results", Arg::S(&r.join(", ")));
    }
    if let Some(v) = e.oom_victim {
        annotate(ev, "oom_victim", Arg::I(i64::from(v)));
    }
    annotate(ev, "ended_by", Arg::S(&e.ended_by));
    annotate(ev, "uncertain", Arg::B(e.uncertain));
}

/// `TracePacket { timestamp; track_event; trusted_packet_sequence_id = 1 }`.
fn put_event<W: Write>(out: &mut Packets<W>, ts: u64, ev: &Msg) -> io::Result<()> {
    let mut pkt = Msg::new();
    pkt.uint(packet::TIMESTAMP, ts)
        .msg(packet::TRACK_EVENT, ev)
        .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, 1);
    out.put(Msg::new().msg(TRACE_PACKET, &pkt).as_bytes())
}

/// `TrackDescriptor { uuid = 1; thread = 4 }`, `ThreadDescriptor { pid = 1;
/// tid = 2; thread_name = 5 }`: the task's thread track, in its thread
/// group where the log knows it.
fn thread_track<W: Write>(out: &mut Packets<W>, log: &Log, pid: i32, uuid: u64) -> io::Result<()> {
    let mut thread = Msg::new();
    thread
        .int(1, i64::from(log.pids.tgid(pid).unwrap_or(pid)))
        .int(2, i64::from(pid));
    if let Some(c) = log.pids.comm(pid) {
        thread.string(5, c);
    }
    let mut track = Msg::new();
    track.uint(1, uuid).msg(4, &thread);
    super::put_packet(out, packet::TRACK_DESCRIPTOR, &track)
}

/// Writes `episodes` (by start) as slices, a thread track per task.
pub(super) fn write<W: Write>(
    out: &mut Packets<W>,
    log: &Log,
    episodes: &[Episode],
    sources: &std::collections::HashMap<u64, String>,
) -> io::Result<Slices> {
    let mut by_task: BTreeMap<i32, Vec<&Episode>> = BTreeMap::new();
    for e in episodes {
        by_task.entry(e.pid).or_default().push(e);
    }
    let mut n = Slices::default();
    let mut ev = Msg::new();
    for (pid, eps) in by_task {
        let uuid = TRACK_BASE + u64::from(pid as u32);
        thread_track(out, log, pid, uuid)?;
        for edge in edges(&eps) {
            ev.clear();
            let ts = match edge {
                Edge::Episode(ts, e) => {
                    ev.uint(te::TYPE, te::TYPE_SLICE_BEGIN);
                    ev.string(te::CATEGORIES, CATEGORY);
                    episode_begin(&mut ev, e);
                    if let Some(src) = e.callsite_addr.and_then(|a| sources.get(&a)) {
                        annotate(&mut ev, "source", Arg::S(src));
                    }
                    n.episodes += 1;
                    ts
                }
                Edge::Phase(ts, ph) => {
                    ev.uint(te::TYPE, te::TYPE_SLICE_BEGIN);
                    ev.string(te::CATEGORIES, CATEGORY);
                    ev.string(te::NAME, &ph.kind);
                    if !ph.detail.is_empty() {
                        annotate(&mut ev, "detail", Arg::S(&ph.detail));
                    }
                    n.phases += 1;
                    ts
                }
                Edge::End(ts) => {
                    ev.uint(te::TYPE, te::TYPE_SLICE_END);
                    ts
                }
            };
            ev.uint(te::TRACK_UUID, uuid);
            put_event(out, ts, &ev)?;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(start_ns: u64, ns: u64) -> Phase {
        Phase {
            kind: "direct reclaim".into(),
            start_ns,
            ns,
            detail: String::new(),
        }
    }

    fn at(e: &Edge<'_>) -> (char, u64) {
        match e {
            Edge::Episode(t, _) => ('E', *t),
            Edge::Phase(t, _) => ('P', *t),
            Edge::End(t) => ('/', *t),
        }
    }

    /// Phases nest in their episode and in each other whatever the
    /// model's times say: one sticking out of its episode or of the phase
    /// it began in is cut there, and an episode overlapping the one before
    /// starts at its end; back-to-back slices end before the next begins.
    #[test]
    fn slices_nest_and_come_in_time_order() {
        let one = Episode {
            start_ns: 100,
            span_ns: 100,
            // A throttle inside a reclaim, past its end; a second reclaim
            // right after the first; one past the episode's end.
            phases: vec![
                phase(110, 40),
                phase(120, 40),
                phase(150, 10),
                phase(190, 50),
            ],
            ..Default::default()
        };
        let two = Episode {
            start_ns: 180,
            span_ns: 30,
            phases: vec![phase(180, 5)],
            ..Default::default()
        };
        let e = edges(&[&one, &two]);
        let got: Vec<(char, u64)> = e.iter().map(at).collect();
        assert_eq!(
            got,
            [
                ('E', 100),
                ('P', 110),
                ('P', 120),
                ('/', 150),
                ('/', 150),
                ('P', 150),
                ('/', 160),
                ('P', 190),
                ('/', 200),
                ('/', 200),
                ('E', 200),
                ('P', 200),
                ('/', 200),
                ('/', 210),
            ]
        );
        // Begins and ends pair up, and time never goes back.
        let mut depth = 0i32;
        for w in got.windows(2) {
            assert!(w[0].1 <= w[1].1, "{w:?}");
        }
        for (k, _) in &got {
            depth += if *k == '/' { -1 } else { 1 };
            assert!(depth >= 0);
        }
        assert_eq!(depth, 0);
    }
}
