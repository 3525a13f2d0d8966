//! Lost events, from both sources, per CPU and in total.
//!
//! - **Sub-buffers.** `RB_MISSED_EVENTS` on a sub-buffer says events were
//!   lost before it; `RB_MISSED_STORED` that their number follows the data.
//!   The kernel stores `cpu_buffer->lost_events`, which
//!   `rb_get_reader_page()` sets to the growth of the `overrun` counter since
//!   the previous reader page: overwritten events only. The count is only
//!   stored when a `long` fits after the data, so a full sub-buffer carries
//!   the flag alone and its count is unknown.
//! - **Kernel statistics** (`per_cpu/cpuN/stats`, FORMAT.md §9), end minus
//!   start: `overrun` (`ring_buffer_overrun_cpu`: events overwritten when
//!   the buffer wrapped, overwrite mode), `commit overrun`
//!   (`ring_buffer_commit_overrun_cpu`: events that could not be written
//!   because the writer wrapped into uncommitted data, e.g. an interrupt
//!   storm) and `dropped events` (`ring_buffer_dropped_events_cpu`: events
//!   refused because the buffer was full, non-overwrite mode). Only the
//!   first of these ever shows in the sub-buffers.
//!
//! The figure reported is the statistics' total where the log has both
//! snapshots (at least the stored counts), else the stored counts, a lower
//! bound when some flagged sub-buffers lack a count. Where both sources
//! exist they are compared, and disagreements are warnings.

use super::container::Container;
use super::subbufs::CpuScan;
use super::Sink;
use crate::findings::{
    thousands, CpuReport, Finding, Kind, Location, LossWindow, Lost, StatsDelta, MAX_KEPT,
};
use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::{CountersRun, Log};
use std::collections::BTreeSet;

/// The statistics delta of one CPU, if the log has an end (or, cut short,
/// a periodic) snapshot: each counter followed snapshot by snapshot
/// ([`Log::counters_by_cpu`]), so a 32-bit kernel's passes over 2^32 and a
/// reset between two snapshots count right. Without a start snapshot (a
/// dump imported from `kmemtrace-capture.sh` or another tool that saved
/// only the end) the counters count from 0: the kernel counts them since
/// the ring buffer was created or reset, which for a capture in its own
/// instance is the capture.
fn stats_delta(run: &CountersRun) -> StatsDelta {
    let c = &run.counters;
    StatsDelta {
        overrun: c.overrun.total(),
        commit_overrun: c.commit_overrun.total(),
        dropped_events: c.dropped_events.total(),
        total: c.lost(),
        start_offset: run.start.map_or(0, |s| s.offset),
        since: if run.start.is_some() {
            "start"
        } else {
            "buffer creation"
        },
        end_offset: run.end.offset,
        end_phase: if run.end.record.phase == StatsPhase::End {
            "end"
        } else {
            "periodic"
        },
    }
}

fn fraction(lost: u64, recorded: u64) -> f64 {
    let all = lost.saturating_add(recorded);
    if all == 0 {
        0.0
    } else {
        lost as f64 / all as f64
    }
}

/// Per-CPU reports (with their losses) and the loss windows of all CPUs.
pub fn assess(
    log: &Log,
    scans: Vec<CpuScan>,
    container: &Container,
    sink: &mut Sink,
) -> (Vec<CpuReport>, Vec<LossWindow>) {
    let mut cpus = Vec::new();
    let mut windows = Vec::new();
    let scanned: BTreeSet<u32> = scans.iter().map(|s| s.cpu).collect();
    // CPUs without data whose statistics show losses get a row too.
    let mut scans = scans;
    let counters = log.counters_by_cpu();
    let stat_cpus: BTreeSet<u32> = log.stats.iter().map(|s| s.record.cpu).collect();
    for cpu in stat_cpus.difference(&scanned) {
        if counters.get(cpu).is_some_and(|r| stats_delta(r).total > 0) {
            scans.push(CpuScan {
                cpu: *cpu,
                ..Default::default()
            });
        }
    }
    for s in scans {
        let cpu = s.cpu;
        let stats = counters.get(&cpu).map(stats_delta);
        let at = |off: u64| Location {
            cpu: Some(cpu),
            ..Location::block(off)
        };
        // A boot drain reads the top-level buffer, filling since boot: its
        // counters from zero are exactly the capture's, nothing to warn of.
        let boot_drain = log.end.as_ref().is_some_and(|e| e.reason == "boot drain");
        // A rotated file's statistics at a boundary between files are read
        // as the writer rotates, after the readers took the blocks still
        // queued for it: losses the kernel counted before the boundary can
        // be flagged in sub-buffers after it (and the other way). Its
        // counters and flags are compared only between the recording's
        // own start and end.
        let rotation_bound = log.segment().is_some_and(|s| s.index > 0)
            || log
                .end
                .as_ref()
                .is_some_and(|e| e.reason == kmemtrace_format::records::END_ROTATED);
        if let Some(d) = stats.as_ref().filter(|d| d.since != "start" && !boot_drain) {
            sink.push(Finding::warning(
                Kind::Losses,
                at(d.end_offset),
                format!(
                    "no start statistics for CPU {cpu}: its losses are the end counters whole, counted since the ring buffer was created (exact for a capture in its own instance)"
                ),
            ));
        }
        match &stats {
            None if s.counts.blocks > 0 => sink.push(Finding::warning(
                Kind::Losses,
                Location {
                    exact: false,
                    cpu: Some(cpu),
                    ..Location::at(0)
                },
                format!(
                    "no statistics for CPU {cpu}: its losses come from the sub-buffers alone{}",
                    if s.flag_only > 0 {
                        ", and some have no count"
                    } else {
                        ""
                    }
                ),
            )),
            None => {}
            Some(_) if rotation_bound => {}
            Some(d) => {
                if s.stored_lost > d.overrun {
                    sink.push(Finding::warning(
                        Kind::Losses,
                        at(d.end_offset),
                        format!(
                            "CPU {cpu}: sub-buffers count {} lost events, more than the kernel's overrun counter grew ({})",
                            thousands(s.stored_lost),
                            thousands(d.overrun)
                        ),
                    ));
                }
                if s.flagged > 0 && d.overrun == 0 {
                    sink.push(Finding::warning(
                        Kind::Losses,
                        at(d.end_offset),
                        format!(
                            "CPU {cpu}: {} sub-buffers carry the missed-events flag, but the kernel's overrun counter did not grow",
                            thousands(s.flagged)
                        ),
                    ));
                }
                if s.flagged == 0 && d.overrun > 0 && s.counts.blocks > 0 {
                    sink.push(Finding::warning(
                        Kind::Losses,
                        at(d.end_offset),
                        format!(
                            "CPU {cpu}: the kernel overwrote {} events, but no sub-buffer carries the missed-events flag",
                            thousands(d.overrun)
                        ),
                    ));
                }
            }
        }
        let events = match &stats {
            Some(d) => d.total.max(s.stored_lost),
            None => s.stored_lost,
        };
        let lost = Lost {
            events,
            // Flags without a count, and no statistics that count them.
            lower_bound: s.flag_only > 0 && stats.as_ref().is_none_or(|d| d.overrun == 0),
            fraction: fraction(events, s.counts.events),
            source: if stats.is_some() {
                "stats"
            } else if s.flagged > 0 {
                "subbufs"
            } else {
                "none"
            },
            subbuf_stored: s.stored_lost,
            subbuf_flagged: s.flagged,
            subbuf_flag_only: s.flag_only,
            stats,
        };
        let (missing_blocks, missing_subbufs) =
            container.missing.get(&cpu).copied().unwrap_or_default();
        sink.problems.extend(s.problems);
        sink.warnings.extend(s.warnings);
        for w in s.windows {
            if windows.len() < MAX_KEPT {
                windows.push(w);
            }
        }
        cpus.push(CpuReport {
            cpu,
            counts: s.counts,
            span_ns: s.counts.span_ns(),
            lost,
            missing_blocks,
            missing_subbufs,
            bad_subbufs: s.bad_subbufs,
            bad_event_streams: s.bad_event_streams,
            ordering_violations: s.ordering_violations,
            unknown_events: s.unknown_events,
        });
    }
    (cpus, windows)
}

/// All CPUs together.
pub fn total(cpus: &[CpuReport]) -> Lost {
    let mut t = Lost {
        source: "none",
        ..Default::default()
    };
    let mut recorded = 0u64;
    let mut sources = BTreeSet::new();
    for c in cpus {
        recorded = recorded.saturating_add(c.counts.events);
        t.events = t.events.saturating_add(c.lost.events);
        t.lower_bound |= c.lost.lower_bound;
        t.subbuf_stored = t.subbuf_stored.saturating_add(c.lost.subbuf_stored);
        t.subbuf_flagged = t.subbuf_flagged.saturating_add(c.lost.subbuf_flagged);
        t.subbuf_flag_only = t.subbuf_flag_only.saturating_add(c.lost.subbuf_flag_only);
        if let Some(d) = &c.lost.stats {
            let s = t.stats.get_or_insert_with(|| StatsDelta {
                end_phase: "end",
                since: "start",
                ..Default::default()
            });
            // The statistics' words, as the log says them: they saturate.
            s.overrun = s.overrun.saturating_add(d.overrun);
            s.commit_overrun = s.commit_overrun.saturating_add(d.commit_overrun);
            s.dropped_events = s.dropped_events.saturating_add(d.dropped_events);
            s.total = s.total.saturating_add(d.total);
            if d.end_phase != "end" {
                s.end_phase = d.end_phase;
            }
            if d.since != "start" {
                s.since = d.since;
            }
        }
        if c.lost.source != "none" {
            sources.insert(c.lost.source);
        }
    }
    // Offsets make no sense for a sum.
    if let Some(s) = &mut t.stats {
        s.start_offset = 0;
        s.end_offset = 0;
    }
    t.source = match sources.len() {
        0 => "none",
        1 => sources.into_iter().next().unwrap_or("none"),
        _ => "mixed",
    };
    t.fraction = fraction(t.events, recorded);
    t
}
