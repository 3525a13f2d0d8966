//! The page-allocator section of the text report, after `perf kmem stat
//! --page`'s summary, with the recorded kernel's migratetype names.

use super::Sections;
use kmemtrace_analysis::model::{OrderRow, PageFinding, PageReport, PageRequests};
use kmemtrace_kernel::human::thousands;
use std::fmt::Write;

fn line(o: &mut String, what: &str, r: &PageRequests) {
    let _ = writeln!(
        o,
        "{what:<30}: {:>15}   [ {:>15} KB ]",
        thousands(r.requests),
        thousands(r.bytes / 1024)
    );
}

fn matrix(o: &mut String, p: &PageReport, rows: &[OrderRow]) {
    let names = &p.migratetypes;
    let _ = write!(o, "{:>5}", "Order");
    for n in names {
        let _ = write!(o, "  {n:>12}");
    }
    o.push('\n');
    let _ = write!(o, "-----");
    for _ in names {
        let _ = write!(o, "  ------------");
    }
    o.push('\n');
    for r in rows {
        let _ = write!(o, "{:>5}", r.order);
        for n in &r.by_migratetype {
            let _ = write!(
                o,
                "  {:>12}",
                if *n == 0 { ".".into() } else { thousands(*n) }
            );
        }
        o.push('\n');
    }
}

/// Renders the page section.
pub fn render(o: &mut String, p: &PageReport, s: &Sections) {
    let events = p.allocations.requests + p.frees.requests + p.allocation_failures;
    if events + p.fallbacks_total == 0 && p.per_cpu_lists.is_empty() {
        // Asked for by name (--page and the like), it says why it is empty.
        if s.page_asked {
            let _ = writeln!(
                o,
                "\nNo page-allocator events (kmem:mm_page_*) in the selection: none recorded, or none pass the filters."
            );
        }
        return;
    }
    let lines = s.lines;
    if s.page_alloc {
        super::page_tables::by_pfn(o, p, lines);
    }
    if s.page_callers {
        super::page_tables::callsites(o, p, lines);
    }
    let _ = writeln!(o, "\nSUMMARY (page allocator)\n========================");
    line(o, "Total allocation requests", &p.allocations);
    line(o, "Total free requests", &p.frees);
    line(o, "Total alloc+freed requests", &p.alloc_freed);
    line(o, "Total alloc-only requests", &p.alloc_only);
    line(o, "Total free-only requests", &p.free_only);
    // As perf's, alloc+freed counts frees: with the allocations it splits
    // them only where every block was allocated and freed by the tasks
    // selected (filters, and the recorder's own events left out, move
    // blocks across the line).
    let split = p.alloc_freed.requests + p.alloc_only.requests;
    if split != p.allocations.requests {
        let _ = writeln!(
            o,
            "  (alloc+freed + alloc-only = {} of {} allocations: blocks allocated and freed on both sides of the selection, or allocated while live)",
            thousands(split),
            thousands(p.allocations.requests)
        );
    }
    let _ = writeln!(
        o,
        "{:<30}: {:>15}",
        "Total allocation failures",
        thousands(p.allocation_failures)
    );
    if let Some(f) = &p.migratetype_names_fallback {
        let _ = writeln!(o, "Migratetype names: {f}");
    }
    if !p.by_order_migratetype.is_empty() {
        o.push('\n');
        matrix(o, p, &p.by_order_migratetype);
    }
    if !p.live_by_order_migratetype.is_empty() {
        let _ = writeln!(
            o,
            "\nStill allocated at the end: {} blocks, {} KB",
            thousands(p.alloc_only.requests),
            thousands(p.alloc_only.bytes / 1024)
        );
        matrix(o, p, &p.live_by_order_migratetype);
    }
    if !p.per_cpu_lists.is_empty() {
        let _ = writeln!(
            o,
            "\nPer-CPU page lists (pages refilled into each CPU's list and drained by it; zone->lock taken for each run)"
        );
        let per = |pages: u64, runs: u64| {
            if runs == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", pages as f64 / runs as f64)
            }
        };
        for r in p.per_cpu_lists.iter().take(lines) {
            let _ = writeln!(
                o,
                "  CPU {:>3}: refilled {:>10} in {:>8} lock runs ({:>5} pages each), drained {:>10} in {:>8} ({:>5} each)",
                r.cpu,
                thousands(r.refilled),
                thousands(r.refill_lock_acquisitions),
                per(r.refilled, r.refill_lock_acquisitions),
                thousands(r.drained),
                thousands(r.drain_lock_acquisitions),
                per(r.drained, r.drain_lock_acquisitions)
            );
        }
        let other: u64 = p.drained_from_other_cpus.iter().map(|d| d.2).sum();
        if other > 0 {
            let _ = writeln!(
                o,
                "  {} pages drained by another CPU than the one whose list held them (cache lines bounce between CPUs)",
                thousands(other)
            );
        }
    }
    if p.fallbacks_total > 0 {
        let _ = writeln!(
            o,
            "\nExternal fragmentation: {} fallbacks to another migratetype, {} fragmenting (smaller than a pageblock)",
            thousands(p.fallbacks_total),
            thousands(p.fallbacks_fragmenting)
        );
        let rate: Vec<String> = p
            .fallbacks_per_second
            .iter()
            .take(30)
            .map(|(sec, n)| format!("{sec}s:{}", thousands(*n)))
            .collect();
        let _ = writeln!(
            o,
            "  per second (from the first event): {}{}",
            rate.join(" "),
            if p.fallbacks_per_second.len() > 30 {
                " ..."
            } else {
                ""
            }
        );
        for f in p.fallbacks.iter().take(lines.min(10)) {
            let _ = writeln!(
                o,
                "  order {} {} from order {} {}: {}{}",
                f.alloc_order,
                f.alloc_migratetype,
                f.fallback_order,
                f.fallback_migratetype,
                thousands(f.count),
                if f.change_ownership == 1 {
                    " (took the pageblock over)"
                } else {
                    ""
                }
            );
        }
    }
    for a in &p.advice {
        let _ = writeln!(
            o,
            "\nSuggests ({}): {}\n  {}",
            a.kind, a.observed, a.suggests
        );
    }
    misuse(o, p);
    if s.page_live {
        super::page_tables::live(o, p, lines);
    }
    if s.page_callers || s.page_alloc {
        super::page_tables::legend(o, p);
    }
}

/// Page misuse: every finding is informational (the kernel hands out
/// pages without tracing them), so each comes with what explains it.
fn misuse(o: &mut String, p: &PageReport) {
    let m = &p.misuse;
    let any = m.freed_twice.count
        + m.allocated_while_live.count
        + m.freed_with_larger_order
        + m.freed_with_smaller_order
        + m.freed_unseen.requests;
    if any == 0 {
        return;
    }
    let _ = writeln!(o, "\nPage misuse (informational)");
    finding(o, "Frames freed twice", &m.freed_twice);
    finding(o, "Blocks allocated while live", &m.allocated_while_live);
    if m.freed_with_larger_order + m.freed_with_smaller_order > 0 {
        let _ = writeln!(
            o,
            "  Freed with another order than allocated: {} larger, {} smaller (split_page(), alloc_pages_exact())",
            thousands(m.freed_with_larger_order),
            thousands(m.freed_with_smaller_order)
        );
    }
    if m.freed_unseen.requests > 0 {
        let _ = writeln!(
            o,
            "  Frees of pages allocated before the capture: {} ({} KB)",
            thousands(m.freed_unseen.requests),
            thousands(m.freed_unseen.bytes / 1024)
        );
    }
}

fn finding(o: &mut String, what: &str, f: &PageFinding) {
    if f.count == 0 {
        return;
    }
    let tasks: Vec<String> = f
        .tasks
        .iter()
        .map(|(comm, n)| format!("{comm} {}", thousands(*n)))
        .collect();
    let orders: Vec<String> = f
        .by_order
        .iter()
        .map(|(order, n)| format!("order {order}: {}", thousands(*n)))
        .collect();
    let _ = writeln!(
        o,
        "  {what}: {} ({} KB), {} where events were lost; {}\n    by {}\n    {}",
        thousands(f.count),
        thousands(f.bytes / 1024),
        thousands(f.uncertain),
        orders.join(", "),
        tasks.join(", "),
        f.judgement
    );
    if let Some(x) = &f.first {
        let _ = writeln!(
            o,
            "    first: pfn {} order {} at {:.6}s on CPU {} by {} ({}), after order {} on CPU {} by {} ({}) {:.6}s before",
            x.pfn,
            x.order,
            x.rel_s,
            x.cpu,
            x.comm.as_deref().unwrap_or("?"),
            x.pid,
            x.earlier_order,
            x.earlier_cpu,
            x.earlier_comm.as_deref().unwrap_or("?"),
            x.earlier_pid,
            x.ts_ns.saturating_sub(x.earlier_ts_ns) as f64 / 1e9
        );
    }
}
