//! The page tables of the text report: call sites and page frames (as
//! `perf kmem stat --page --caller/--alloc` prints them), live pages by
//! owner (as `page_owner_sort` groups them), and the GFP legend.

use kmemtrace_analysis::model::{Gfp, PageReport};
use kmemtrace_kernel::human::thousands;
use std::fmt::Write;

fn rule(o: &mut String, width: usize) {
    o.push_str(&"-".repeat(width));
    o.push('\n');
}

/// GFP flags in short form (`KERNEL|ZERO`); see the legend.
fn gfp(g: &Gfp) -> &str {
    &g.compact
}

fn no_stacks_note(o: &mut String, p: &PageReport) {
    if !p.stacks.recorded {
        let _ = writeln!(
            o,
            "(the log has no stacks: record with kmemtraced --page-stacks on for call sites)"
        );
    } else if p.stacks.matched < p.stacks.records {
        let _ = writeln!(
            o,
            "({} of {} stacks could not be matched to their allocation)",
            thousands(p.stacks.records - p.stacks.matched),
            thousands(p.stacks.records)
        );
    }
}

/// What a sample of page stacks means for the call-site table, when the
/// stacks were sampled.
fn sample_note(o: &mut String, p: &PageReport) {
    let Some(s) = &p.stacks.sample else { return };
    let _ = writeln!(
        o,
        "(stacks for 1 in {} page frames, those whose number has bits {} clear: hits and bytes \
         are estimates, each sampled allocation counted {}; ± is the 95 % margin of hits, \
         counted in the regions the sample takes or leaves whole; {} allocations outside the \
         sample)",
        s.one_in,
        s.pfn_mask,
        crate::weights_text(&s.weight_by_order),
        thousands(s.not_sampled)
    );
}

/// The 95 % margin of a row's estimated hits, as a share of them.
fn margin(hits: u64, margin: u64) -> String {
    match hits {
        0 => "-".into(),
        h => format!("±{:.0}%", 100.0 * margin as f64 / h as f64),
    }
}

/// The call-site table.
pub fn callsites(o: &mut String, p: &PageReport, lines: usize) {
    if p.callsites.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\nPage allocations by call site (first frame outside the page allocator), order, migratetype, GFP flags"
    );
    sample_note(o, p);
    let sampled = p.stacks.sample.is_some();
    let _ = writeln!(
        o,
        "{:>12} | {:>9}{} | {:>10} | {:>5} | {:>11} | {:<24} | Callsite",
        "Total KB",
        "Hits",
        if sampled { "       " } else { "" },
        "Live KB",
        "Order",
        "Migratetype",
        "GFP flags"
    );
    rule(o, if sampled { 117 } else { 110 });
    for r in p.callsites.iter().take(lines) {
        let hits = match r.margin {
            Some(m) => format!("{:>9} {:>6}", thousands(r.hits), margin(r.hits, m)),
            _ => format!("{:>9}", thousands(r.hits)),
        };
        let _ = writeln!(
            o,
            "{:>12} | {hits} | {:>10} | {:>5} | {:>11} | {:<24} | {}",
            thousands(r.bytes / 1024),
            thousands(r.live_bytes / 1024),
            r.order,
            r.migratetype,
            gfp(&r.gfp),
            r.callsite
        );
        for f in r.top_stack.iter().skip(1) {
            let _ = writeln!(o, "{:>16}=> {f}", "");
        }
    }
    if p.callsites.len() > lines {
        let _ = writeln!(o, "  ... {} more rows", p.callsites.len() - lines);
    }
    no_stacks_note(o, p);
}

/// The per-page-frame table.
pub fn by_pfn(o: &mut String, p: &PageReport, lines: usize) {
    let Some(rows) = &p.by_pfn else { return };
    let _ = writeln!(o, "\nPage allocations by page frame");
    let _ = writeln!(
        o,
        "{:>12} | {:>12} | {:>7} | {:>5} | {:>11} | {:<24} | Callsite",
        "PFN", "Total KB", "Hits", "Order", "Migratetype", "GFP flags"
    );
    rule(o, 110);
    for r in rows.iter().take(lines) {
        let _ = writeln!(
            o,
            "{:>12} | {:>12} | {:>7} | {:>5} | {:>11} | {:<24} | {}",
            r.pfn.0,
            thousands(r.bytes / 1024),
            thousands(r.hits),
            r.order,
            r.migratetype,
            gfp(&r.gfp),
            r.callsite
        );
    }
    if rows.len() > lines {
        let _ = writeln!(o, "  ... {} more rows", rows.len() - lines);
    }
}

/// Live pages by owner.
pub fn live(o: &mut String, p: &PageReport, lines: usize) {
    let _ = writeln!(
        o,
        "\nPages still allocated at the end, by {} ({} blocks, {} KB)",
        p.live_grouped_by.join(", "),
        thousands(p.alloc_only.requests),
        thousands(p.alloc_only.bytes / 1024)
    );
    for g in p.live.iter().take(lines) {
        let mut who = Vec::new();
        if !g.callsite.is_empty() {
            who.push(g.callsite.clone());
        }
        if let Some(pid) = g.pid {
            who.push(format!("pid {pid}"));
        }
        if let Some(c) = &g.comm {
            who.push(c.clone());
        }
        let _ = writeln!(
            o,
            "  {:>8} blocks {:>10} KB, oldest {:>8.3} s: {}",
            thousands(g.blocks),
            thousands(g.bytes / 1024),
            g.oldest_age_ns as f64 / 1e9,
            who.join(", ")
        );
        for f in g.stack.iter().flat_map(|s| s.iter()).skip(1) {
            let _ = writeln!(o, "{:>24}=> {f}", "");
        }
    }
    if p.live.len() > lines {
        let _ = writeln!(o, "  ... {} more groups", p.live.len() - lines);
    }
}

/// The GFP flags' short names with the recorded kernel's names.
pub fn legend(o: &mut String, p: &PageReport) {
    if p.gfp_legend.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nGFP flags (the recorded kernel's names)");
    for e in &p.gfp_legend {
        let _ = writeln!(o, "  {:<20} {} ({})", e.short, e.name, e.value);
    }
}
