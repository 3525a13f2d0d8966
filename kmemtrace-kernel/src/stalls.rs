//! The memory subsystem's stall tracepoints: what an allocation waits in
//! when it is not cheap (direct, memcg and node reclaim, compaction,
//! throttling, the OOM killer), and the background work it wakes (kswapd,
//! kcompactd). The one list: the recorders enable these, and the stall
//! analysis asks the stream for them, by these names.
//!
//! Kernels name and shape them differently (`mm_vmscan_throttled` since
//! 5.16, `mm_compaction_try_to_compact_pages` since 4.5, `mark_victim`'s
//! `comm` since 6.3): a recorder enables the ones its kernel has, and the
//! analysis reads each from the log's own format.

/// `system:name` of a tracepoint.
pub type Tracepoint = &'static str;

pub const DIRECT_RECLAIM_BEGIN: Tracepoint = "vmscan:mm_vmscan_direct_reclaim_begin";
pub const DIRECT_RECLAIM_END: Tracepoint = "vmscan:mm_vmscan_direct_reclaim_end";
pub const MEMCG_RECLAIM_BEGIN: Tracepoint = "vmscan:mm_vmscan_memcg_reclaim_begin";
pub const MEMCG_RECLAIM_END: Tracepoint = "vmscan:mm_vmscan_memcg_reclaim_end";
pub const MEMCG_SOFTLIMIT_BEGIN: Tracepoint = "vmscan:mm_vmscan_memcg_softlimit_reclaim_begin";
pub const MEMCG_SOFTLIMIT_END: Tracepoint = "vmscan:mm_vmscan_memcg_softlimit_reclaim_end";
pub const NODE_RECLAIM_BEGIN: Tracepoint = "vmscan:mm_vmscan_node_reclaim_begin";
pub const NODE_RECLAIM_END: Tracepoint = "vmscan:mm_vmscan_node_reclaim_end";
pub const THROTTLED: Tracepoint = "vmscan:mm_vmscan_throttled";
pub const WAKEUP_KSWAPD: Tracepoint = "vmscan:mm_vmscan_wakeup_kswapd";
pub const KSWAPD_WAKE: Tracepoint = "vmscan:mm_vmscan_kswapd_wake";
pub const KSWAPD_SLEEP: Tracepoint = "vmscan:mm_vmscan_kswapd_sleep";
pub const TRY_TO_COMPACT: Tracepoint = "compaction:mm_compaction_try_to_compact_pages";
pub const COMPACTION_BEGIN: Tracepoint = "compaction:mm_compaction_begin";
pub const COMPACTION_END: Tracepoint = "compaction:mm_compaction_end";
pub const COMPACTION_DEFERRED: Tracepoint = "compaction:mm_compaction_deferred";
pub const WAKEUP_KCOMPACTD: Tracepoint = "compaction:mm_compaction_wakeup_kcompactd";
pub const KCOMPACTD_WAKE: Tracepoint = "compaction:mm_compaction_kcompactd_wake";
pub const KCOMPACTD_SLEEP: Tracepoint = "compaction:mm_compaction_kcompactd_sleep";
pub const RECLAIM_RETRY_ZONE: Tracepoint = "oom:reclaim_retry_zone";
pub const COMPACT_RETRY: Tracepoint = "oom:compact_retry";
pub const MARK_VICTIM: Tracepoint = "oom:mark_victim";
pub const WAKE_REAPER: Tracepoint = "oom:wake_reaper";
pub const START_TASK_REAPING: Tracepoint = "oom:start_task_reaping";
pub const FINISH_TASK_REAPING: Tracepoint = "oom:finish_task_reaping";
pub const SKIP_TASK_REAPING: Tracepoint = "oom:skip_task_reaping";
pub const SHRINK_SLAB_START: Tracepoint = "vmscan:mm_shrink_slab_start";
pub const SHRINK_SLAB_END: Tracepoint = "vmscan:mm_shrink_slab_end";

/// Recorded by default where the kernel has them: without memory pressure
/// none of them fires, so they cost nothing then.
pub const STALL_EVENTS: [Tracepoint; 25] = [
    DIRECT_RECLAIM_BEGIN,
    DIRECT_RECLAIM_END,
    MEMCG_RECLAIM_BEGIN,
    MEMCG_RECLAIM_END,
    MEMCG_SOFTLIMIT_BEGIN,
    MEMCG_SOFTLIMIT_END,
    NODE_RECLAIM_BEGIN,
    NODE_RECLAIM_END,
    THROTTLED,
    WAKEUP_KSWAPD,
    KSWAPD_WAKE,
    KSWAPD_SLEEP,
    TRY_TO_COMPACT,
    COMPACTION_BEGIN,
    COMPACTION_END,
    COMPACTION_DEFERRED,
    WAKEUP_KCOMPACTD,
    KCOMPACTD_WAKE,
    KCOMPACTD_SLEEP,
    RECLAIM_RETRY_ZONE,
    COMPACT_RETRY,
    MARK_VICTIM,
    WAKE_REAPER,
    START_TASK_REAPING,
    FINISH_TASK_REAPING,
];

/// The stall events the kernel takes a stack with (where the recorder can
/// set the trigger): the first step of each common way an allocation waits,
/// in the waiting task, so that its stack names the allocation's call site,
/// and the wake of kswapd, whose stack names who woke it. Rare by nature:
/// their stacks cost nothing without pressure. Each trigger costs the
/// recorder's teardown one RCU grace period (the kernel synchronizes when a
/// trigger goes), so waits that follow one of these (throttling, soft-limit
/// and node reclaim, the OOM kill) take their episode's stack instead.
pub const STACKED_STALL_EVENTS: [Tracepoint; 4] = [
    DIRECT_RECLAIM_BEGIN,
    MEMCG_RECLAIM_BEGIN,
    TRY_TO_COMPACT,
    WAKEUP_KSWAPD,
];

/// Behind a flag: they fire for every batch reclaim works through, kswapd's
/// included, so they cost in proportion to the pressure (the shrinkers'
/// start and end, LRU isolation and shrinking, compaction's scanning).
pub const BUSY_STALL_EVENTS: [Tracepoint; 7] = [
    SHRINK_SLAB_START,
    SHRINK_SLAB_END,
    "vmscan:mm_vmscan_lru_isolate",
    "vmscan:mm_vmscan_lru_shrink_inactive",
    "vmscan:mm_vmscan_lru_shrink_active",
    "compaction:mm_compaction_isolate_migratepages",
    "compaction:mm_compaction_isolate_freepages",
];

/// `system:name` split.
pub fn split(tp: Tracepoint) -> (&'static str, &'static str) {
    tp.split_once(':').unwrap_or(("", tp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_hold_distinct_names_and_stacked_ones_are_recorded() {
        let mut all: Vec<_> = STALL_EVENTS.iter().chain(&BUSY_STALL_EVENTS).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        for s in STACKED_STALL_EVENTS {
            assert!(STALL_EVENTS.contains(&s), "{s}");
        }
        assert_eq!(split(THROTTLED), ("vmscan", "mm_vmscan_throttled"));
    }
}
