//! The pairing of begin and end events into phases and of phases into
//! episodes, fed event by event as a shard would.

use super::*;
use crate::event::{Body, Kind};

/// Feeds events of one pass: `(ts, pid, tracepoint, fields, stack)`.
struct Feed {
    pass: StallsPass,
    cpu: u16,
    /// The next events are recorded in an interrupt.
    irq: bool,
}

impl Feed {
    /// Keeping every episode whole, for the tests to look at.
    fn new() -> Feed {
        let mut pass = StallsPass::new(8);
        pass.keep_all = true;
        Feed {
            pass,
            cpu: 0,
            irq: false,
        }
    }

    /// Keeping only the longest whole, as the report does.
    fn folding() -> Feed {
        let mut f = Feed::new();
        f.pass.keep_all = false;
        f
    }

    /// The next events in an interrupt (`true`) or not.
    fn interrupt(&mut self, irq: bool) -> &mut Self {
        self.irq = irq;
        self
    }

    fn ev(&mut self, ts: u64, pid: i32, tracepoint: &str, fields: &[u64]) -> &mut Self {
        self.stacked(ts, pid, tracepoint, fields, NO_STACK)
    }

    fn stacked(
        &mut self,
        ts: u64,
        pid: i32,
        tracepoint: &str,
        fields: &[u64],
        stack: u32,
    ) -> &mut Self {
        let which = REQUESTS
            .iter()
            .position(|r| r.tracepoint == tracepoint)
            .unwrap_or_else(|| panic!("{tracepoint} is not asked for"));
        let mut t = Tracepoint {
            request: which as u16,
            shard: ShardKey::Task,
            present: 0,
            stack,
            values: [0; crate::event::TP_FIELDS],
        };
        for (i, &v) in fields.iter().enumerate() {
            t.values[i] = v;
            t.present |= 1 << i;
        }
        let ev = Event {
            ts,
            pid,
            cpu: self.cpu,
            kind: Kind::Tracepoint,
            in_interrupt: self.irq,
            pos: 0,
            lag: 0,
            body: Body::Tracepoint(t),
        };
        self.pass.event(&ev, which, &t);
        self
    }

    /// Task `pid` allocates a page (a mark).
    fn page(&mut self, ts: u64, pid: i32) -> &mut Self {
        self.ev(ts, pid, "kmem:mm_page_alloc", &[0, 0xcc0, 0x1234])
    }

    /// Every episode, ended or open, by start.
    fn episodes(&self) -> Vec<&Ep> {
        let mut v: Vec<&Ep> = self
            .pass
            .ended
            .iter()
            .chain(self.pass.open.values())
            .collect();
        v.sort_by_key(|e| (e.start, e.pid));
        v
    }
}

const GFP: u64 = 0x140cca;

fn wt(phases: u64, ns: u64, pages: u64) -> WaitTotals {
    WaitTotals { phases, ns, pages }
}

#[test]
fn a_reclaim_then_the_allocation_is_one_episode() {
    let mut f = Feed::new();
    f.stacked(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[2, GFP], 5)
        .ev(4000, 7, tp::DIRECT_RECLAIM_END, &[32])
        .page(4500, 7);
    let e = f.episodes();
    assert_eq!(e.len(), 1);
    let e = e[0];
    assert_eq!((e.start, e.last, e.stall_ns()), (1000, 4500, 3000));
    assert_eq!((e.order, e.gfp, e.stack), (Some(2), Some(GFP), 5));
    assert_eq!(e.per_wait[Wait::Direct as usize], wt(1, 3000, 32));
    assert_eq!(e.ended_by, Some("page allocation"));
    assert!(f.pass.open.is_empty());
    assert_eq!(f.pass.events, 2);
}

#[test]
fn an_allocation_ends_only_the_episode_of_its_task_and_not_inside_a_wait() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(1100, 8, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        // Task 7 allocates inside its reclaim (a shrinker's buffer): the
        // wait goes on.
        .page(1500, 7)
        .page(1600, 9)
        .ev(2000, 7, tp::MEMCG_RECLAIM_END, &[10])
        // The charge loop's second round: the same episode.
        .ev(2100, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(2600, 7, tp::MEMCG_RECLAIM_END, &[6])
        .page(2700, 7)
        .ev(3000, 8, tp::MEMCG_RECLAIM_END, &[1]);
    let e = f.episodes();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].pid, 7);
    assert_eq!(e[0].per_wait[Wait::Memcg as usize], wt(2, 1000 + 500, 16));
    assert_eq!(e[0].ended_by, Some("page allocation"));
    // Task 8 never allocated again: open at the end, its wait counted.
    assert_eq!(e[1].pid, 8);
    assert_eq!(e[1].stall_ns(), 1900);
    assert_eq!(e[1].ended_by, None);
    assert_eq!(f.pass.open.len(), 1);
}

#[test]
fn a_nested_soft_limit_reclaim_counts_its_time_once() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        .ev(1200, 7, tp::MEMCG_SOFTLIMIT_BEGIN, &[0, GFP])
        .ev(1700, 7, tp::MEMCG_SOFTLIMIT_END, &[4])
        .ev(3000, 7, tp::DIRECT_RECLAIM_END, &[20])
        .page(3100, 7);
    let e = f.episodes()[0];
    assert_eq!(e.stall_ns(), 2000);
    assert_eq!(e.per_wait[Wait::MemcgSoftLimit as usize], wt(1, 0, 4));
    assert_eq!(e.per_wait[Wait::Direct as usize], wt(1, 2000, 20));
    assert_eq!(e.first, Wait::Direct);
}

#[test]
fn an_end_without_its_begin_adds_no_time_and_is_counted() {
    let mut f = Feed::new();
    // The capture began inside this reclaim.
    f.ev(500, 7, tp::DIRECT_RECLAIM_END, &[9]).page(600, 7);
    assert_eq!(f.pass.ends_without_begin, 1);
    let e = f.episodes()[0];
    assert_eq!(e.stall_ns(), 0);
    assert_eq!(e.per_wait[Wait::Direct as usize], wt(0, 0, 9));
}

#[test]
fn a_lost_end_ends_its_episode_and_the_next_begin_starts_one() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        // Its end was lost; a new reclaim of the same kind begins.
        .ev(5000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        .ev(6000, 7, tp::DIRECT_RECLAIM_END, &[3])
        .page(6100, 7);
    assert_eq!(f.pass.begins_without_end, 1);
    let e = f.episodes();
    assert_eq!(e.len(), 2);
    assert_eq!((e[0].stall_ns(), e[0].ended_by), (0, Some("lost events")));
    assert_eq!(
        (e[1].stall_ns(), e[1].ended_by),
        (1000, Some("page allocation"))
    );
}

#[test]
fn a_charge_has_no_order_and_ends_at_its_last_wait() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(2000, 7, tp::MEMCG_RECLAIM_END, &[3])
        .ev(9000, 7, "kmem:mm_page_alloc", &[2, 0xcc0, 0x1234]);
    let e = f.episodes()[0];
    assert_eq!((e.order, e.gfp, e.last), (None, Some(GFP), 2000));
    assert_eq!(e.ended_by, Some("page allocation"));
}

#[test]
fn an_episode_first_seen_at_a_retry_is_not_called_a_reclaim() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::RECLAIM_RETRY_ZONE, &[]).page(1100, 7);
    assert_eq!(f.episodes()[0].first, Wait::Other);
}

#[test]
fn compaction_lasts_to_its_last_zone_and_keeps_the_zones_results() {
    let mut f = Feed::new();
    f.stacked(1000, 7, tp::TRY_TO_COMPACT, &[9, GFP], 3)
        .ev(1100, 7, tp::COMPACTION_BEGIN, &[])
        .ev(1900, 7, tp::COMPACTION_END, &[7])
        .ev(2000, 7, tp::COMPACTION_BEGIN, &[])
        .ev(2500, 7, tp::COMPACTION_END, &[8])
        .ev(3000, 7, tp::DIRECT_RECLAIM_BEGIN, &[9, GFP])
        .ev(4000, 7, tp::DIRECT_RECLAIM_END, &[100])
        .ev(4100, 7, tp::RECLAIM_RETRY_ZONE, &[])
        .ev(4110, 7, tp::RECLAIM_RETRY_ZONE, &[])
        .ev(4200, 7, tp::COMPACT_RETRY, &[])
        .page(5000, 7);
    let e = f.episodes()[0];
    assert_eq!(e.per_wait[Wait::Compaction as usize], wt(1, 1500, 0));
    assert_eq!(e.per_wait[Wait::Direct as usize], wt(1, 1000, 100));
    assert_eq!(e.stall_ns(), 2500);
    assert_eq!((e.order, e.stack, e.first), (Some(9), 3, Wait::Compaction));
    let mut results: Vec<_> = e.compaction_results.iter().map(|(&s, &n)| (s, n)).collect();
    results.sort();
    assert_eq!(results, [(7, 1), (8, 1)]);
    // One loop over the zones, one compaction retry.
    assert_eq!(e.retries, 2);
}

#[test]
fn a_throttle_is_the_sleep_before_its_event() {
    let mut f = Feed::new();
    f.ev(100_000, 7, tp::THROTTLED, &[60, 1]).page(100_500, 7);
    let e = f.episodes()[0];
    assert_eq!((e.start, e.stall_ns()), (40_000, 60_000));
    // Inside a reclaim, its time is the reclaim's.
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        .ev(50_000, 7, tp::THROTTLED, &[40, 1])
        .ev(60_000, 7, tp::DIRECT_RECLAIM_END, &[1])
        .page(60_100, 7);
    let e = f.episodes()[0];
    assert_eq!(e.stall_ns(), 59_000);
    assert_eq!(e.per_wait[Wait::Throttle as usize].phases, 1);
}

#[test]
fn waking_kswapd_opens_no_episode_but_names_its_waker() {
    let mut f = Feed::new();
    f.stacked(1000, 7, tp::WAKEUP_KSWAPD, &[0, 3, GFP], 4)
        .page(1100, 7)
        .ev(1200, 55, tp::KSWAPD_WAKE, &[0, 3])
        .ev(9200, 55, tp::KSWAPD_SLEEP, &[0]);
    assert!(f.episodes().is_empty());
    assert_eq!(f.pass.wakers.get(&(false, 4, 3)), Some(&1));
    let b = &f.pass.background[&(false, 0)];
    assert_eq!((b.wakes, b.awake_ns, b.awake_since), (1, 8000, None));
}

#[test]
fn an_oom_kill_is_tied_to_the_episode_that_led_to_it() {
    let mut f = Feed::new();
    f.stacked(1000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP], 2)
        .ev(2000, 7, tp::MEMCG_RECLAIM_END, &[0])
        .ev(2100, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(3000, 7, tp::MEMCG_RECLAIM_END, &[0])
        .ev(3500, 7, tp::MARK_VICTIM, &[42, 0, 100, 20, 4])
        .ev(3600, 12, tp::START_TASK_REAPING, &[42])
        .ev(9600, 12, tp::FINISH_TASK_REAPING, &[42])
        .page(4000, 7);
    assert_eq!(f.pass.kills.len(), 1);
    let k = &f.pass.kills[0];
    assert_eq!((k.victim, k.killer, k.rss_kb), (42, 7, Some(124)));
    let ep = k.episode.as_ref().unwrap();
    assert_eq!(
        (ep.stall_ns, ep.start, ep.stack, ep.phases),
        (1900, 1000, 2, 2)
    );
    assert_eq!(f.episodes()[0].victim, Some(42));
    assert_eq!(
        f.pass.reaping,
        [Reaping {
            victim: 42,
            start: 3600,
            end: Some(9600)
        }]
    );
}

#[test]
fn a_failed_allocation_ends_the_episode_as_failed() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[4, GFP])
        .ev(2000, 7, tp::DIRECT_RECLAIM_END, &[0])
        .ev(2100, 7, "kmem:mm_page_alloc", &[4, GFP, u64::MAX]);
    assert_eq!(f.episodes()[0].ended_by, Some("failed page allocation"));
    // A 32-bit kernel's -1.
    let mut f = Feed::new();
    f.pass = StallsPass::new(4);
    f.pass.keep_all = true;
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[4, GFP])
        .ev(2000, 7, tp::DIRECT_RECLAIM_END, &[0])
        .ev(2100, 7, "kmem:mm_page_alloc", &[4, GFP, 0xffff_ffff]);
    assert_eq!(f.episodes()[0].ended_by, Some("failed page allocation"));
}

#[test]
fn a_slab_allocation_names_the_call_site_it_served() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(2000, 7, tp::MEMCG_RECLAIM_END, &[5])
        .ev(
            2100,
            7,
            "kmem:kmem_cache_alloc",
            &[0xffff_ffff_8100_1234, GFP],
        );
    let e = f.episodes()[0];
    assert_eq!(e.ended_by, Some("slab allocation"));
    assert_eq!(e.slab_site, Some(0xffff_ffff_8100_1234));
}

#[test]
fn shards_add_up_to_one() {
    let feed = |f: &mut Feed, pids: &[i32]| {
        for (i, &pid) in pids.iter().enumerate() {
            let t = 1000 * i as u64;
            f.ev(t, pid, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
                .ev(t + 300, pid, tp::DIRECT_RECLAIM_END, &[2])
                .page(t + 400, pid)
                .ev(t + 500, 50 + pid, tp::KSWAPD_WAKE, &[0, 1])
                .ev(t + 900, 50 + pid, tp::KSWAPD_SLEEP, &[0]);
        }
    };
    let mut one = Feed::new();
    feed(&mut one, &[1, 2, 3, 4]);
    let (mut a, mut b) = (Feed::new(), Feed::new());
    feed(&mut a, &[1, 3]);
    feed(&mut b, &[2, 4]);
    a.pass.absorb(&mut b.pass);
    assert_eq!(a.pass.events, one.pass.events);
    assert_eq!(a.pass.ended.len(), 4);
    let b0 = &a.pass.background[&(false, 0)];
    let o0 = &one.pass.background[&(false, 0)];
    assert_eq!((b0.wakes, b0.awake_ns), (o0.wakes, o0.awake_ns));
    let total = |p: &StallsPass| p.ended.iter().map(Ep::stall_ns).sum::<u64>();
    assert_eq!(total(&a.pass), total(&one.pass));
}

#[test]
fn percentiles_and_histogram() {
    use section::{histogram, percentile};
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&v, 0.5), 50);
    assert_eq!(percentile(&v, 0.9), 90);
    assert_eq!(percentile(&v, 0.99), 99);
    assert_eq!(percentile(&[7], 0.99), 7);
    assert_eq!(percentile(&[], 0.5), 0);
    let h = histogram(&[0, 1, 2, 3, 4, 1000]);
    let got: Vec<(u64, u64)> = h.iter().map(|b| (b.below_ns, b.count)).collect();
    assert_eq!(got, [(1, 1), (2, 1), (4, 2), (8, 1), (1024, 1)]);
    // A saturated stall sum falls in the last bucket, not an overflow.
    let h = histogram(&[u64::MAX, 1 << 63, (1 << 63) + 1]);
    let got: Vec<(u64, u64)> = h.iter().map(|b| (b.below_ns, b.count)).collect();
    assert_eq!(got, [(u64::MAX, 3)]);
}

#[test]
fn a_finish_of_reaping_ends_its_victims_latest_start_and_a_kill_takes_the_next() {
    let mut f = Feed::new();
    f.ev(100, 12, tp::START_TASK_REAPING, &[42])
        .ev(200, 12, tp::FINISH_TASK_REAPING, &[42])
        .ev(300, 12, tp::START_TASK_REAPING, &[42])
        .ev(310, 12, tp::START_TASK_REAPING, &[43])
        .ev(400, 12, tp::FINISH_TASK_REAPING, &[42])
        .ev(450, 12, tp::FINISH_TASK_REAPING, &[42])
        .ev(500, 12, tp::FINISH_TASK_REAPING, &[44]);
    let ends: Vec<_> = f.pass.reaping.iter().map(|r| (r.victim, r.end)).collect();
    assert_eq!(ends, [(42, Some(200)), (42, Some(400)), (43, None)]);
    let by_victim = section::reaping_by_victim(&f.pass);
    assert_eq!(section::reaped_ns(&by_victim, 42, 50), Some(100));
    assert_eq!(section::reaped_ns(&by_victim, 42, 101), Some(100));
    assert_eq!(section::reaped_ns(&by_victim, 42, 301), None);
    assert_eq!(section::reaped_ns(&by_victim, 43, 0), None);
    assert_eq!(section::reaped_ns(&by_victim, 44, 0), None);
}

#[test]
fn background_threads_work_is_not_an_allocation_stall() {
    let mut f = Feed::new();
    f.ev(1000, 55, tp::KSWAPD_WAKE, &[0, 0])
        // kswapd's soft limit reclaim (balance_pgdat).
        .ev(1100, 55, tp::MEMCG_SOFTLIMIT_BEGIN, &[0, GFP])
        .ev(1200, 55, tp::MEMCG_SOFTLIMIT_END, &[3])
        .ev(1300, 55, tp::KSWAPD_SLEEP, &[0])
        // kcompactd's zones: no try_to_compact_pages before them.
        .ev(2000, 56, tp::COMPACTION_BEGIN, &[])
        .ev(2500, 56, tp::COMPACTION_END, &[5]);
    assert!(f.episodes().is_empty());
    assert_eq!(f.pass.background_events, 4);
    assert_eq!(f.pass.events, 6);
}

#[test]
fn a_compaction_of_no_zone_lasts_until_the_task_goes_on() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::TRY_TO_COMPACT, &[9, GFP])
        .ev(1010, 7, tp::COMPACTION_DEFERRED, &[])
        .ev(1067, 7, tp::DIRECT_RECLAIM_BEGIN, &[9, GFP])
        .ev(2067, 7, tp::DIRECT_RECLAIM_END, &[5])
        .ev(3000, 7, tp::TRY_TO_COMPACT, &[9, GFP])
        .ev(3100, 7, tp::COMPACTION_BEGIN, &[])
        .ev(3500, 7, tp::COMPACTION_END, &[6])
        .page(3600, 7);
    let e = f.episodes()[0];
    // A deferral is its zone's event: the phase lasts to it.
    assert_eq!(e.phases[0].ns, 10);
    assert_eq!(e.phases[2].ns, 500);
    assert_eq!(e.phases[2].statuses[6], 1);
    let mut f = Feed::new();
    f.ev(1000, 7, tp::TRY_TO_COMPACT, &[9, GFP])
        .ev(1067, 7, tp::DIRECT_RECLAIM_BEGIN, &[9, GFP])
        .ev(2067, 7, tp::DIRECT_RECLAIM_END, &[5])
        .page(3600, 7);
    assert_eq!(f.episodes()[0].phases[0].ns, 67);
}

#[test]
fn kswapd_wakes_from_sleep_are_told_from_its_per_pass_wake_events() {
    let mut f = Feed::new();
    f.ev(1000, 55, tp::KSWAPD_WAKE, &[0, 0])
        .ev(2000, 55, tp::KSWAPD_WAKE, &[0, 3])
        .ev(3000, 55, tp::KSWAPD_WAKE, &[0, 3])
        .ev(4000, 55, tp::KSWAPD_SLEEP, &[0])
        .ev(9000, 55, tp::KSWAPD_WAKE, &[0, 0]);
    let b = &f.pass.background[&(false, 0)];
    assert_eq!((b.wakes, b.wake_events, b.awake_ns), (2, 4, 3000));
    assert_eq!(b.awake_since, Some(9000));
    assert_eq!(b.orders.get(&3), Some(&2));
}

#[test]
fn interrupts_are_not_the_tasks_waits() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        // A softirq's atomic allocation wakes kswapd; the OOM reaper's
        // timer fires: neither is task 7's.
        .interrupt(true)
        .stacked(1500, 7, tp::WAKEUP_KSWAPD, &[0, 0, 0xa20], 9)
        .ev(1600, 0, tp::WAKE_REAPER, &[42])
        .ev(1700, 0, tp::COMPACT_RETRY, &[])
        .interrupt(false)
        .ev(2000, 7, tp::DIRECT_RECLAIM_END, &[1])
        .page(2100, 7);
    let e = f.episodes();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].pid, e[0].kswapd_wakeups, e[0].retries), (7, 0, 0));
    // The wake still names its waker.
    assert_eq!(f.pass.wakers.get(&(false, 9, 0)), Some(&1));
}

#[test]
fn a_charge_over_does_not_take_the_next_allocations_direct_reclaim() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(2000, 7, tp::MEMCG_RECLAIM_END, &[3])
        // The next fault's allocation reclaims before its mark.
        .ev(3000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        .ev(5000, 7, tp::DIRECT_RECLAIM_END, &[8])
        .page(5100, 7);
    let e = f.episodes();
    assert_eq!(e.len(), 2);
    assert_eq!((e[0].first, e[0].stall_ns()), (Wait::Memcg, 1000));
    assert_eq!((e[1].first, e[1].stall_ns()), (Wait::Direct, 2000));
    assert!(!e[0].cut);
}

#[test]
fn a_begin_of_another_kind_inside_a_reclaim_means_its_end_was_lost() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP])
        .ev(5000, 7, tp::MEMCG_RECLAIM_BEGIN, &[0, GFP])
        .ev(6000, 7, tp::MEMCG_RECLAIM_END, &[3])
        .page(6100, 7);
    let e = f.episodes();
    assert_eq!(e.len(), 2);
    assert!(e[0].cut);
    assert_eq!(e[1].stall_ns(), 1000);
    assert_eq!(f.pass.begins_without_end, 1);
}

#[test]
fn compaction_throttled_inside_its_zones_goes_on() {
    let mut f = Feed::new();
    f.ev(0, 7, tp::TRY_TO_COMPACT, &[9, GFP])
        .ev(10_000, 7, tp::COMPACTION_BEGIN, &[])
        .ev(110_000_000, 7, tp::THROTTLED, &[100_000, 4])
        .ev(300_000_000, 7, tp::COMPACTION_END, &[8])
        .page(300_100_000, 7);
    let e = f.episodes()[0];
    assert_eq!(e.stall_ns(), 300_000_000);
    assert_eq!(e.per_wait[Wait::Throttle as usize].phases, 1);
}

#[test]
fn a_wait_the_capture_cut_counts_to_its_end() {
    let mut f = Feed::new();
    f.ev(1000, 7, tp::DIRECT_RECLAIM_BEGIN, &[0, GFP]);
    let open = &f.pass.open[&7];
    assert_eq!(open.stall_ns(), 0);
    let done = open.finished_at(6000);
    assert_eq!(
        (done.stall_ns(), done.last, done.ended_by),
        (5000, 6000, None)
    );
}

#[test]
fn kswapd_recognised_late_loses_the_episode_it_seemed_to_open() {
    let mut f = Feed::new();
    f.ev(1000, 55, tp::MEMCG_SOFTLIMIT_BEGIN, &[0, GFP])
        .ev(1100, 55, tp::MEMCG_SOFTLIMIT_END, &[2])
        .ev(1200, 55, tp::KSWAPD_SLEEP, &[0]);
    assert!(f.episodes().is_empty());
}

#[test]
fn shrinkers_scan_and_free_per_function() {
    let mut f = Feed::new();
    let (a, b) = (0xffff_ffff_8120_0000u64, 0xffff_ffff_8130_0000u64);
    // Start: function, objects to scan; end: function, freed, left to scan.
    f.ev(1000, 7, tp::SHRINK_SLAB_START, &[a, 128])
        .ev(1500, 7, tp::SHRINK_SLAB_END, &[a, 100, 28])
        .ev(2000, 8, tp::SHRINK_SLAB_START, &[b, 64])
        .ev(2100, 7, tp::SHRINK_SLAB_START, &[a, 10])
        .ev(2300, 7, tp::SHRINK_SLAB_END, &[a, 3, 0])
        .ev(2900, 8, tp::SHRINK_SLAB_END, &[b, 0, 64]);
    let totals = |calls, scanned, freed, ns| ShrinkerTotals {
        calls,
        scanned,
        freed,
        ns,
    };
    assert_eq!(f.pass.shrinkers[&a], totals(2, 100 + 10, 103, 700));
    assert_eq!(f.pass.shrinkers[&b], totals(1, 0, 0, 900));
    assert!(f.episodes().is_empty());
}

/// Without every episode kept, the longest of each class (per stack for
/// memcg waits, one class for the rest) are kept whole, in one shard or
/// in several; every episode is folded into its group.
#[test]
fn only_the_longest_of_each_class_keep_their_phases() {
    // Episodes of varied length: a memcg reclaim under one of two stacks,
    // or a direct reclaim without one, each of two phases.
    let feed = |f: &mut Feed, pids: std::ops::Range<i32>| {
        for pid in pids {
            let t = 100_000 * pid as u64;
            let len = 1 + (pid as u64 * 7919) % 500;
            let (begin, end, stack) = match pid % 3 {
                0 => (tp::DIRECT_RECLAIM_BEGIN, tp::DIRECT_RECLAIM_END, NO_STACK),
                k => (tp::MEMCG_RECLAIM_BEGIN, tp::MEMCG_RECLAIM_END, k as u32),
            };
            f.stacked(t, pid, begin, &[0, GFP], stack)
                .ev(t + len, pid, end, &[1])
                .ev(t + 2 * len, pid, begin, &[0, GFP])
                .ev(t + 3 * len, pid, end, &[1])
                .page(t + 4 * len, pid);
        }
    };
    let mut all = Feed::new();
    all.pass.keep_all = true;
    feed(&mut all, 1..301);
    let mut one = Feed::folding();
    feed(&mut one, 1..301);
    let (mut a, mut b) = (Feed::folding(), Feed::folding());
    feed(&mut a, 1..150);
    feed(&mut b, 150..301);
    a.pass.absorb(&mut b.pass);
    let rank = |e: &&Ep| (std::cmp::Reverse(e.stall_ns()), e.start, e.pid);
    let class = |e: &Ep| (e.first, e.stack);
    let classes = [(Wait::Direct, NO_STACK), (Wait::Memcg, 1), (Wait::Memcg, 2)];
    for f in [&one, &a] {
        assert!(f.pass.ended.is_empty());
        let kept: Vec<&Ep> = f.pass.longest.iter().collect();
        assert_eq!(kept.len(), 3 * super::section::LONGEST);
        for c in classes {
            let mut want: Vec<&Ep> = all.pass.ended.iter().filter(|e| class(e) == c).collect();
            want.sort_by_key(rank);
            want.truncate(super::section::LONGEST);
            let mut got: Vec<&Ep> = kept.iter().copied().filter(|e| class(e) == c).collect();
            got.sort_by_key(rank);
            let key = |e: &&Ep| (e.pid, e.start, e.phases.len());
            assert_eq!(
                got.iter().map(key).collect::<Vec<_>>(),
                want.iter().map(key).collect::<Vec<_>>()
            );
        }
    }
    assert!(all.pass.ended.iter().all(|e| e.phases.len() == 2));
    // Folded: each episode once, its waits added up in its group.
    let want = folded::Folded::of(&all.pass.ended);
    for f in [&one, &a] {
        let got = &f.pass.folded;
        assert_eq!(got.episodes.len(), 300);
        let of = |x: &folded::Folded| {
            let mut v: Vec<_> = x
                .episodes
                .iter()
                .map(|t| {
                    let g = &x.groups[t.group as usize];
                    (t.start, t.last, t.stall_ns, t.cut, g.key.pid, g.key.stack)
                })
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(of(got), of(&want));
        let sums = |x: &folded::Folded| {
            let mut v: Vec<_> = x
                .groups
                .iter()
                .map(|g| (g.key.pid, g.key.first, g.waits))
                .collect();
            v.sort_by_key(|k| (k.0, k.1));
            v
        };
        assert_eq!(sums(got), sums(&want));
    }
}

/// A damaged log's fields may be anything: the sums of times, pages and
/// sizes saturate instead of overflowing (found in review of a fuzzing
/// finding of the same kind).
#[test]
fn a_damaged_logs_values_saturate() {
    let mut f = Feed::new();
    let (a, big) = (0xffff_ffff_8120_0000u64, 1u64 << 63);
    // Reclaim ends without begins: their pages still count.
    f.ev(1000, 7, tp::DIRECT_RECLAIM_END, &[big])
        .ev(2000, 7, tp::DIRECT_RECLAIM_END, &[big])
        // A throttle of i64::MAX microseconds.
        .ev(3000, 7, tp::THROTTLED, &[i64::MAX as u64, 1])
        .ev(3500, 7, tp::MARK_VICTIM, &[42, 0, u64::MAX, 1, 0])
        // Shrinker calls asked to scan -1 objects.
        .ev(4000, 8, tp::SHRINK_SLAB_START, &[a, u64::MAX])
        .ev(4100, 8, tp::SHRINK_SLAB_END, &[a, i64::MAX as u64, 0])
        .ev(4200, 8, tp::SHRINK_SLAB_START, &[a, u64::MAX])
        .ev(4300, 8, tp::SHRINK_SLAB_END, &[a, i64::MAX as u64, 0])
        .ev(4400, 8, tp::SHRINK_SLAB_START, &[a, 1])
        .ev(4500, 8, tp::SHRINK_SLAB_END, &[a, i64::MAX as u64, 0]);
    let e = f.episodes();
    assert_eq!(e[0].per_wait[Wait::Direct as usize].pages, u64::MAX);
    // The throttle began at the clock's start.
    assert_eq!(e[0].per_wait[Wait::Throttle as usize].ns, 3000);
    assert_eq!(f.pass.kills[0].rss_kb, Some(u64::MAX));
    let s = &f.pass.shrinkers[&a];
    assert_eq!((s.scanned, s.freed), (u64::MAX, u64::MAX));
}
