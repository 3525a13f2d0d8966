//! The page-misuse findings: the pass's counts, judged against the loss
//! windows and named.

use super::Ctx;
use crate::model::{PageFinding, PageMisuseReport, PageOccurrenceRow, PageRequests, Severity};
use crate::passes::page_misuse::{PageFindingCounts, PageMisuse, PageOccurrence};
use crate::passes::pages::Requests;
use crate::stream::Windows;
use std::collections::BTreeMap;

/// Tasks listed per finding.
const TASKS_SHOWN: usize = 10;

const FREED_TWICE: &str = "no traced allocation between the two frees: the bulk allocator (alloc_pages_bulk: order 0 from the per-CPU lists, untraced since 5.13; vmalloc, kernel stacks, sunrpc, page_pool), compaction's isolation of free pages and alloc_contig_range() hand out pages without mm_page_alloc; a stale reference dropped on a freed page (get_page/put_page) looks the same: confirm with page_owner or the page_ref events";

const ALLOCATED_WHILE_LIVE: &str = "the trace had the block live: its free was lost or not traced (a page handed back without mm_page_free: memory hot-remove, balloon drivers); the allocator does not hand out an allocated page";

pub(crate) fn section(
    cx: &Ctx<'_>,
    m: &PageMisuse,
    free_only: &Requests,
    windows: &Windows,
) -> PageMisuseReport {
    let twice = &m.freed_twice.occurrences;
    PageMisuseReport {
        freed_twice: finding(cx, "page_freed_twice", &m.freed_twice, windows, FREED_TWICE),
        freed_unseen: PageRequests {
            requests: free_only.requests.saturating_sub(twice.requests),
            bytes: free_only.bytes.saturating_sub(twice.bytes),
        },
        freed_with_larger_order: m.freed_larger,
        freed_with_smaller_order: m.freed_smaller,
        allocated_while_live: finding(
            cx,
            "page_allocated_while_live",
            &m.allocated_while_live,
            windows,
            ALLOCATED_WHILE_LIVE,
        ),
    }
}

fn finding(
    cx: &Ctx<'_>,
    kind: &'static str,
    c: &PageFindingCounts,
    windows: &Windows,
    judgement: &str,
) -> PageFinding {
    let last = c.by_order.len() - 1;
    let by_order = c
        .by_order
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(o, &n)| (super::pages::order_name(o, last), n))
        .collect();
    let mut by_comm: BTreeMap<String, u64> = BTreeMap::new();
    for (&pid, &n) in &c.by_pid {
        let comm = cx.comm(pid).unwrap_or_else(|| format!("pid {pid}"));
        *by_comm.entry(comm).or_insert(0) += n;
    }
    let mut tasks: Vec<(String, u64)> = by_comm.into_iter().collect();
    tasks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    tasks.truncate(TASKS_SHOWN);
    PageFinding {
        kind: kind.into(),
        severity: Severity::Info,
        count: c.occurrences.requests,
        bytes: c.occurrences.bytes,
        uncertain: c.spans.touching(|t0, t1| windows.touches(t0, t1)),
        by_order,
        tasks,
        first: c.first.map(|o| occurrence_row(cx, &o, windows)),
        judgement: judgement.to_string(),
    }
}

fn occurrence_row(cx: &Ctx<'_>, o: &PageOccurrence, windows: &Windows) -> PageOccurrenceRow {
    let e = &o.earlier;
    PageOccurrenceRow {
        ts_ns: o.ts,
        rel_s: o.ts.saturating_sub(cx.first_ts) as f64 / 1e9,
        pfn: crate::model::Addr(o.pfn),
        order: o.order,
        cpu: u32::from(o.cpu),
        pid: o.pid,
        comm: cx.comm(o.pid),
        earlier_ts_ns: e.ts,
        earlier_order: u32::from(e.order),
        earlier_cpu: u32::from(e.cpu),
        earlier_pid: e.pid,
        earlier_comm: cx.comm(e.pid),
        uncertain: windows.touches(e.ts, o.ts),
    }
}
