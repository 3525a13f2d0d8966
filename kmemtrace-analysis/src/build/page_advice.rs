//! What the per-CPU-list and fragmentation figures suggest, as
//! Documentation/trace/events-kmem.rst reads them (sections 4 and 5),
//! with the recorded kernel's numbers. The thresholds are documented in
//! JSON.md; below [`MIN_PAGES`] nothing is said.

use super::Ctx;
use crate::model::{MinFreeKbytes, PageAdvice, PageReport};
use kmemtrace_kernel::human::thousands;
use kmemtrace_kernel::PageTypes;

/// Pages (or fallbacks) below which a figure is too small to suggest
/// anything.
const MIN_PAGES: u64 = 1000;
/// A CPU "mostly refills" when it refills this many times what it drains
/// (and the other way round).
const ONE_SIDED: u64 = 4;
/// Lists look too small when pages that a list gave back came back into
/// it by refills within the same second for this share of the order-0
/// allocations (percent).
const CYCLED_SHARE: u64 = 25;
/// Frees look remote when other CPUs drain this share of the drained
/// pages (percent).
const REMOTE_SHARE: u64 = 25;
/// Fragmentation is sustained when fragmenting fallbacks come in at least
/// this many seconds, and in at least half of the capture's seconds.
const SUSTAINED_SECONDS: u64 = 3;

pub(crate) fn advise(cx: &Ctx<'_>, p: &PageReport, types: &PageTypes) -> Vec<PageAdvice> {
    let mut out = Vec::new();
    lists_small(p, &cx.an.pages.list_cycles, &mut out);
    imbalance(p, &mut out);
    cross_cpu(p, &mut out);
    fragmentation(cx, p, types, &mut out);
    out
}

fn pct(part: u64, whole: u64) -> u64 {
    (u128::from(part) * 100 / u128::from(whole.max(1))) as u64
}

/// `cycles`: pages refilled into and drained from each CPU's list, by
/// second ([`crate::passes::pages::PagesPass::list_cycles`]).
fn lists_small(
    p: &PageReport,
    cycles: &crate::intern::FastMap<(u16, u64), (u64, u64)>,
    out: &mut Vec<PageAdvice>,
) {
    let order0: u64 = p
        .by_order_migratetype
        .iter()
        .filter(|r| r.order == "0")
        .flat_map(|r| r.by_migratetype.iter())
        .sum();
    let refilled: u64 = p.per_cpu_lists.iter().map(|r| r.refilled).sum();
    let runs: u64 = p
        .per_cpu_lists
        .iter()
        .map(|r| r.refill_lock_acquisitions)
        .sum();
    // A bigger list keeps what it gave back and took again soon after;
    // pages only refilled (a page cache or a process growing), refilled
    // early and drained at exit, or drained from one CPU's list and
    // refilled into another's (`per_cpu_imbalance`) need zone->lock
    // whatever the list's size.
    let cycled: u64 = cycles.values().map(|&(r, d)| r.min(d)).sum();
    if cycled < MIN_PAGES || order0 < MIN_PAGES || pct(cycled, order0) < CYCLED_SHARE || runs == 0 {
        return;
    }
    out.push(PageAdvice {
        kind: "per_cpu_lists_small".into(),
        observed: format!(
            "{}% of {} order-0 allocations were refilled into a per-CPU list under zone->lock, {:.1} pages per acquisition; a list gave back as many pages in the same second for {}% of the allocations (it overflowed, then ran empty)",
            pct(refilled, order0),
            thousands(order0),
            refilled as f64 / runs as f64,
            pct(cycled, order0)
        ),
        suggests: "the per-CPU lists may be too small for this load: lower vm.percpu_pagelist_high_fraction (vm.percpu_pagelist_fraction before 5.14) to make them larger".into(),
        min_free_kbytes: None,
    });
}

fn cpus(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn imbalance(p: &PageReport, out: &mut Vec<PageAdvice>) {
    let refilling: Vec<_> = p
        .per_cpu_lists
        .iter()
        .filter(|r| r.refilled >= MIN_PAGES && r.refilled >= ONE_SIDED * r.drained)
        .collect();
    let draining: Vec<_> = p
        .per_cpu_lists
        .iter()
        .filter(|r| r.drained >= MIN_PAGES && r.drained >= ONE_SIDED * r.refilled)
        .collect();
    if refilling.is_empty() || draining.is_empty() {
        return;
    }
    let ids = |v: &[&crate::model::PcpRow]| cpus(&v.iter().map(|r| r.cpu).collect::<Vec<_>>());
    out.push(PageAdvice {
        kind: "per_cpu_imbalance".into(),
        observed: format!(
            "CPU {} refilled {} pages and drained {}; CPU {} drained {} and refilled {}",
            ids(&refilling),
            thousands(refilling.iter().map(|r| r.refilled).sum()),
            thousands(refilling.iter().map(|r| r.drained).sum()),
            ids(&draining),
            thousands(draining.iter().map(|r| r.drained).sum()),
            thousands(draining.iter().map(|r| r.refilled).sum()),
        ),
        suggests: "pages are allocated on some CPUs and freed on others: work is concentrated in one place (an imbalance between CPUs); each side takes zone->lock for what the other would have reused".into(),
        min_free_kbytes: None,
    });
}

fn cross_cpu(p: &PageReport, out: &mut Vec<PageAdvice>) {
    let drained: u64 = p.per_cpu_lists.iter().map(|r| r.drained).sum();
    let remote: u64 = p.drained_from_other_cpus.iter().map(|d| d.2).sum();
    if remote < MIN_PAGES || pct(remote, drained) < REMOTE_SHARE {
        return;
    }
    out.push(PageAdvice {
        kind: "cross_cpu_frees".into(),
        observed: format!(
            "{} of {} drained pages ({}%) were on another CPU's list",
            thousands(remote),
            thousands(drained),
            pct(remote, drained)
        ),
        suggests: "pages refilled on one CPU and drained on another bounce cache lines between CPUs: see whether they can be allocated and freed on the same CPU".into(),
        min_free_kbytes: None,
    });
}

fn fragmentation(cx: &Ctx<'_>, p: &PageReport, types: &PageTypes, out: &mut Vec<PageAdvice>) {
    let (Some(pb_order), true) = (types.pageblock_order, p.fallbacks_fragmenting >= MIN_PAGES)
    else {
        return;
    };
    let seconds_with = p.fallbacks_fragmenting_per_second.len() as u64;
    let duration_s = cx
        .an
        .last_ts
        .saturating_sub(cx.first_ts)
        .div_ceil(1_000_000_000)
        .max(1);
    if seconds_with < SUSTAINED_SECONDS || seconds_with * 2 < duration_s {
        return;
    }
    let busiest = p
        .fallbacks_fragmenting_per_second
        .iter()
        .map(|s| s.1)
        .max()
        .unwrap_or(0);
    let page_kb = u64::from(cx.log.arch.page_size.unwrap_or(4096)) / 1024;
    // A damaged log's page size, block order and current value may be
    // anything: the arithmetic saturates.
    let pageblock_kb = page_kb.saturating_mul(1 << pb_order.min(40));
    let (nodes, nodes_from) = nodes(cx, types);
    let step = pageblock_kb.saturating_mul(3 * u64::from(nodes));
    let current = kmemtrace_import::pagetypes::min_free_kbytes(cx.log);
    let now = match current {
        Some(c) => format!("now {c}: set vm.min_free_kbytes={}", c.saturating_add(step)),
        None => "the log does not hold the current value".into(),
    };
    out.push(PageAdvice {
        kind: "fragmentation_sustained".into(),
        observed: format!(
            "{} fragmenting fallbacks in {} of {} seconds (at most {} in one)",
            thousands(p.fallbacks_fragmenting),
            seconds_with,
            duration_s,
            thousands(busiest)
        ),
        suggests: format!(
            "memory is fragmenting, and high-order allocations will start failing: raise vm.min_free_kbytes in steps of 3 x pageblock size x nodes = 3 x {pageblock_kb} KB x {nodes} = {step} KB ({now})"
        ),
        min_free_kbytes: Some(MinFreeKbytes {
            current,
            pageblock_kb,
            nodes,
            nodes_from: nodes_from.into(),
            step,
            suggested: current.map(|c| c.saturating_add(step)),
        }),
    });
}

/// Online nodes: those /proc/pagetypeinfo lists, else those the CPU map
/// names, else one.
fn nodes(cx: &Ctx<'_>, types: &PageTypes) -> (u32, &'static str) {
    let mut from_zones: Vec<u32> = types.zones.iter().map(|z| z.0).collect();
    from_zones.sort_unstable();
    from_zones.dedup();
    if !from_zones.is_empty() {
        return (from_zones.len() as u32, "pagetypeinfo");
    }
    let mut from_cpus: Vec<u32> = cx.log.cpu_nodes.values().copied().collect();
    from_cpus.sort_unstable();
    from_cpus.dedup();
    if !from_cpus.is_empty() {
        return (from_cpus.len() as u32, "cpu_node_map");
    }
    (1, "assumed")
}
