//! The page-allocator section: the page tracker's counts, named with the
//! recorded kernel's migratetypes.

use super::page_sites::{self, StackSites};
use super::Ctx;
use crate::model::{FallbackRow, OrderRow, PageReport, PageRequests, PageStacks, PcpRow};
use crate::passes::pages::{Fallback, LivePages, PagesPass, Requests, MIGRATETYPE_SLOTS};
use kmemtrace_kernel::PageTypes;

fn requests(r: &Requests) -> PageRequests {
    PageRequests {
        requests: r.requests,
        bytes: r.bytes,
    }
}

/// An order slot's name: the last slot (`last`) collects the larger
/// orders (`"10+"`).
pub(crate) fn order_name(o: usize, last: usize) -> String {
    if o == last {
        format!("{o}+")
    } else {
        o.to_string()
    }
}

/// Whether a fallback from a block of `fallback_order` splits a pageblock
/// between migratetypes (`None` without the pageblock order).
fn fragmenting(types: &PageTypes, fallback_order: i8) -> Option<bool> {
    types
        .pageblock_order
        .map(|pb| i64::from(fallback_order) < i64::from(pb))
}

/// Rows of a matrix by order, without the empty ones.
fn order_rows(m: &[[u64; MIGRATETYPE_SLOTS]], columns: usize) -> Vec<OrderRow> {
    let last = m.len().saturating_sub(1);
    m.iter()
        .enumerate()
        .filter(|(_, r)| r.iter().any(|&n| n > 0))
        .map(|(o, r)| OrderRow {
            order: order_name(o, last),
            by_migratetype: r[..columns].to_vec(),
        })
        .collect()
}

/// What the page allocations' stacks came to: recorded, paired, cut.
fn page_stacks(
    cx: &Ctx<'_>,
    p: &PagesPass<'_>,
    summaries: &[crate::stream::CpuSummary],
    stacks: &[Box<[u64]>],
) -> PageStacks {
    PageStacks {
        recorded: kmemtrace_import::stacks::page_stacks_recorded(cx.log)
            && kmemtrace_import::stacks::StackReader::new(cx.log).is_some(),
        records: summaries.iter().map(|c| c.stacks).sum(),
        matched: summaries.iter().map(|c| c.stacks_paired).sum(),
        allocations_with_stack: p.with_stack,
        cut_at_end: summaries.iter().map(|c| c.stacks_cut_at_end).sum(),
        cut_at_start: summaries.iter().map(|c| c.stacks_cut_at_start).sum(),
        distinct: stacks.len().saturating_sub(1) as u64,
        sample: p
            .sample
            .is_sampled()
            .then(|| crate::model::PageStackSampling {
                one_in: p.sample.one_in(),
                pfn_mask: crate::model::Addr(p.sample.mask),
                weight_by_order: p.sample.weights(),
                not_sampled: p.not_sampled,
            }),
    }
}

/// The fallbacks by kind, most frequent first.
fn fallback_rows(p: &PagesPass<'_>, types: &PageTypes) -> Vec<FallbackRow> {
    let name = |mt: i8| types.name(i32::from(mt));
    // In key order before the rows' own, whose ties (two migratetypes of
    // one name) would otherwise fall in the map's order.
    let mut kinds: Vec<(&Fallback, &u64)> = p.fallbacks.iter().collect();
    kinds.sort_unstable_by_key(|(k, _)| **k);
    let mut fallbacks: Vec<FallbackRow> = kinds
        .into_iter()
        .map(|(k, &count)| FallbackRow {
            alloc_order: k.alloc_order,
            fallback_order: i32::from(k.fallback_order),
            alloc_migratetype: name(k.alloc_migratetype),
            fallback_migratetype: name(k.fallback_migratetype),
            change_ownership: i32::from(k.change_ownership),
            fragmenting: fragmenting(types, k.fallback_order),
            count,
        })
        .collect();
    fallbacks.sort_by(|a, b| {
        b.count.cmp(&a.count).then_with(|| {
            (
                a.alloc_order,
                a.fallback_order,
                &a.alloc_migratetype,
                &a.fallback_migratetype,
                a.change_ownership,
            )
                .cmp(&(
                    b.alloc_order,
                    b.fallback_order,
                    &b.alloc_migratetype,
                    &b.fallback_migratetype,
                    b.change_ownership,
                ))
        })
    });
    fallbacks
}

/// Per CPU (those --cpu keeps), pages refilled to and drained from its
/// per-CPU lists and the zone lock acquisitions for them.
fn per_cpu_list_rows(p: &PagesPass<'_>, summaries: &[crate::stream::CpuSummary]) -> Vec<PcpRow> {
    let mut per_cpu: Vec<PcpRow> = Vec::new();
    // The CPUs --cpu keeps (the lock runs are counted per CPU).
    for c in summaries.iter().filter(|c| p.filter.on_cpu(c.cpu)) {
        let (refilled, drained) = u16::try_from(c.cpu)
            .ok()
            .and_then(|k| p.per_cpu.get(&k))
            .copied()
            .unwrap_or_default();
        let r = &c.list_runs;
        if refilled + drained + r.refill_runs + r.drain_runs > 0 {
            per_cpu.push(PcpRow {
                cpu: c.cpu,
                refilled,
                drained,
                refill_lock_acquisitions: r.refill_runs,
                drain_lock_acquisitions: r.drain_runs,
            });
        }
    }
    per_cpu.sort_by_key(|r| r.cpu);
    per_cpu
}

/// The pass's `drained_from` counts between two different CPUs, as
/// (CPU, CPU, pages), sorted.
fn drained_from_other_cpus(p: &PagesPass<'_>) -> Vec<(u32, u32, u64)> {
    let mut drained: Vec<(u32, u32, u64)> = p
        .drained_from
        .iter()
        .filter(|((a, b), _)| a != b)
        .map(|(&(a, b), &n)| (u32::from(a), u32::from(b), n))
        .collect();
    drained.sort_unstable();
    drained
}

/// Fallbacks (all, fragmenting) by second from the first event.
fn fallbacks_per_second(
    cx: &Ctx<'_>,
    p: &PagesPass<'_>,
    types: &PageTypes,
) -> std::collections::BTreeMap<u64, (u64, u64)> {
    let first_s = cx.first_ts / 1_000_000_000;
    // (all, fragmenting) by second from the first event.
    let mut per_second: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (&(s, fallback_order), &n) in &p.fallbacks_per_second {
        let e = per_second.entry(s.saturating_sub(first_s)).or_default();
        e.0 += n;
        if fragmenting(types, fallback_order) == Some(true) {
            e.1 += n;
        }
    }
    per_second
}

pub(crate) fn section(
    cx: &Ctx<'_>,
    p: &PagesPass<'_>,
    live: &LivePages,
    summaries: &[crate::stream::CpuSummary],
    stacks: &[Box<[u64]>],
    windows: &crate::stream::Windows,
) -> PageReport {
    let types = kmemtrace_import::pagetypes::of_log(cx.log);
    let columns = types.names.len().clamp(1, MIGRATETYPE_SLOTS);
    let mt_name = |mt: i32| types.name(mt);
    let ss = StackSites::new(cx, stacks);
    let callsites = page_sites::callsites(&ss, p, live, &mt_name);
    let gfp_legend = page_sites::gfp_legend(cx, p.by_site.keys().map(|k| k.gfp));
    let lines = cx.opts.lines.unwrap_or(usize::MAX);
    let mut by_pfn = page_sites::by_pfn(&ss, p, &mt_name);
    if let Some(v) = by_pfn.as_mut() {
        v.truncate(lines);
    }
    let mut live_rows = page_sites::live_groups(&ss, live);
    live_rows.truncate(lines);
    let stack_info = page_stacks(cx, p, summaries, stacks);
    let fallbacks = fallback_rows(p, &types);
    let per_cpu = per_cpu_list_rows(p, summaries);
    let drained = drained_from_other_cpus(p);
    let per_second = fallbacks_per_second(cx, p, &types);
    let end = cx.an.last_ts;
    let mut report = PageReport {
        migratetypes: types.names.clone(),
        migratetype_names_fallback: types.fallback.clone(),
        pageblock_order: types.pageblock_order,
        allocations: requests(&p.allocated),
        frees: requests(&p.free_events),
        alloc_freed: requests(&p.alloc_freed),
        alloc_only: PageRequests {
            requests: live.blocks,
            bytes: live.bytes,
        },
        free_only: requests(&p.free_only),
        allocation_failures: p.failed,
        order_mismatch_frees: p.misuse.freed_larger + p.misuse.freed_smaller,
        allocated_while_live: p.misuse.allocated_while_live.occurrences.requests,
        misuse: super::page_misuse::section(cx, &p.misuse, &p.free_only, windows),
        by_order_migratetype: order_rows(&p.by_order_migratetype, columns),
        live_by_order_migratetype: order_rows(&live.by_order_migratetype, columns),
        live_oldest_age_ns: live.oldest_ts.map(|t| end.saturating_sub(t)),
        per_cpu_lists: per_cpu,
        drained_from_other_cpus: drained,
        fallbacks_total: p.fallbacks.values().sum(),
        fallbacks_fragmenting: fallbacks
            .iter()
            .filter(|f| f.fragmenting == Some(true))
            .map(|f| f.count)
            .sum(),
        fallbacks,
        fallbacks_per_second: per_second.iter().map(|(&s, &(n, _))| (s, n)).collect(),
        fallbacks_fragmenting_per_second: per_second
            .iter()
            .filter(|(_, &(_, f))| f > 0)
            .map(|(&s, &(_, f))| (s, f))
            .collect(),
        allocator_functions: if stack_info.recorded {
            cx.allocator_functions.clone()
        } else {
            Vec::new()
        },
        callsites: {
            let mut c = callsites;
            c.truncate(lines);
            c
        },
        gfp_legend,
        by_pfn,
        live: live_rows,
        stacks: stack_info,
        live_grouped_by: cx
            .opts
            .page_cull
            .iter()
            .map(|k| k.name().to_string())
            .collect(),
        advice: Vec::new(),
    };
    report.advice = super::page_advice::advise(cx, &report, &types);
    report
}
