//! A 32-bit kernel prints its per-CPU counters past 2^31 as negative
//! numbers (`%ld` of an unsigned long, FORMAT.md §9): the log reads them in
//! the arch tag's long width, and losses come out as the kernel counted.

use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::Log;
use kmemtrace_kernel::{CpuStats, RunTimeEndian};
use kmemtrace_testkit::synth::LogBuilder;

fn stats(long_size: u8, start: &str, end: &str) -> (Log, CpuStats, CpuStats) {
    let mut b = LogBuilder::new(RunTimeEndian::Big, long_size, 4096);
    let text =
        |counters: &str| format!("entries: 3\n{counters}commit overrun: 0\ndropped events: 0\n");
    b.stats(0, StatsPhase::Start, &text(start));
    b.stats(0, StatsPhase::End, &text(end));
    let log = Log::from_bytes("stats-width", &b.build().unwrap()).unwrap();
    let parsed = |phase| log.cpu_stats(0, phase).next().unwrap().parsed.unwrap();
    let (s, e) = (parsed(StatsPhase::Start), parsed(StatsPhase::End));
    (log, s, e)
}

#[test]
fn a_32_bit_kernels_negative_counters_are_its_high_values() {
    let (log, start, end) = stats(
        4,
        "overrun: 2147483000\nread events: -5\n",
        "overrun: -2147483000\nread events: 20\n",
    );
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    assert_eq!(start.read_events, Some((1 << 32) - 5));
    assert_eq!(end.overrun, Some((1 << 32) - 2_147_483_000));
    assert_eq!(end.lost_since(&start), 1296);
}

#[test]
fn a_64_bit_kernels_counters_are_read_as_printed() {
    let (log, start, end) = stats(8, "overrun: 2147483000\n", "overrun: 4294967296000\n");
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    assert_eq!(end.lost_since(&start), 4_294_967_296_000 - 2_147_483_000);
    // What no 64-bit kernel can reach is still kept, bit for bit.
    let (log, _, end) = stats(8, "overrun: 0\n", "overrun: -1\n");
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    assert_eq!(end.overrun, Some(u64::MAX));
}

#[test]
fn a_counter_that_is_no_number_is_still_a_problem() {
    let mut b = LogBuilder::new(RunTimeEndian::Little, 4, 4096);
    b.stats(0, StatsPhase::Start, "overrun: -x\n");
    let log = Log::from_bytes("bad", &b.build().unwrap()).unwrap();
    assert_eq!(log.problems.len(), 1, "{:?}", log.problems);
    assert!(
        log.problems[0].what.contains("overrun"),
        "{:?}",
        log.problems
    );
}

/// A 32-bit kernel's overrun that went 3.2 G on, written every 0.9 G by
/// the periodic snapshots: the log's counters follow it snapshot by
/// snapshot, where start and end alone read as a reset (a fall of more
/// than 2^30).
#[test]
fn periodic_snapshots_follow_a_32_bit_counter_past_2_to_the_32() {
    let g = 1_000_000_000u64;
    let at = |n: u64| {
        let v = ((3u64 << 30) + n * g / 10) % (1 << 32);
        // As a 32-bit kernel prints it: `%ld`, negative past 2^31.
        format!("overrun: {}\nread events: {n}\n", v as u32 as i32)
    };
    let mut b = LogBuilder::new(RunTimeEndian::Little, 4, 4096);
    b.stats(0, StatsPhase::Start, &at(0));
    for n in [9, 18, 27] {
        b.stats(0, StatsPhase::Periodic, &at(n));
    }
    b.stats(0, StatsPhase::End, &at(32));
    // CPU 1: no start (a dump that saved only the end), one reset seen.
    b.stats(1, StatsPhase::Periodic, "overrun: 500\n");
    b.stats(1, StatsPhase::End, "overrun: 40\n");
    let log = Log::from_bytes("followed", &b.build().unwrap()).unwrap();
    assert!(log.problems.is_empty(), "{:?}", log.problems);
    let run = log.cpu_counters(0).unwrap();
    assert_eq!(run.counters.lost(), 32 * g / 10);
    assert_eq!(run.counters.read_events.total(), 32);
    assert_eq!(run.end.record.phase, StatsPhase::End);
    let ends = |p| log.cpu_stats(0, p).next().unwrap().parsed.unwrap();
    assert_eq!(
        ends(StatsPhase::End).lost_since(&ends(StatsPhase::Start)),
        0
    );
    let run = log.cpu_counters(1).unwrap();
    assert!(run.start.is_none());
    assert_eq!(run.counters.lost(), 540);
    assert!(log.cpu_counters(2).is_none());
    // The same, every CPU in one pass.
    let all = log.counters_by_cpu();
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), [0, 1]);
    for (cpu, r) in &all {
        let one = log.cpu_counters(*cpu).unwrap();
        assert_eq!(
            (r.counters.lost(), r.end.offset),
            (one.counters.lost(), one.end.offset)
        );
        assert_eq!(r.start.map(|s| s.offset), one.start.map(|s| s.offset));
    }
}
