//! The page's page-allocator sections: bytes held and rates over time,
//! order x migratetype heat maps, per-CPU lists, fallbacks, call sites.

use super::sections::rate_charts;
use super::series::running;
use super::svg::{HeatMap, Line, TimeChart, Unit};
use super::table::Table;
use super::{esc, heading, note, Page};
use kmemtrace_analysis::model::{OrderRow, PageReport};
use kmemtrace_kernel::human::{bytes, thousands};
use std::fmt::Write as _;

/// Everything about the page allocator, when the capture has its events.
pub fn pages(p: &Page<'_>, o: &mut String) {
    let (st, pr) = (&p.r.page_allocator, &p.r.pages);
    if st.allocs + st.frees + st.failed + pr.fallbacks_total == 0 && pr.per_cpu_lists.is_empty() {
        return;
    }
    heading(o, "pages", "Page allocator");
    note(
        o,
        &format!(
            "{} allocations ({}), {} frees ({}), {} failed; {} blocks ({}) still allocated at the end.",
            thousands(st.allocs),
            bytes(st.alloc_bytes as f64),
            thousands(st.frees),
            bytes(st.free_bytes as f64),
            thousands(st.failed),
            thousands(pr.alloc_only.requests),
            bytes(pr.alloc_only.bytes as f64)
        ),
    );
    TimeChart {
        title: "Page-allocator bytes allocated minus freed, since the capture's start",
        height: 260,
        x_max: p.span.len_secs(),
        y_max: None,
        unit: Unit::Bytes,
        lines: vec![Line {
            name: "allocated - freed".into(),
            color: "#222",
            points: running(&p.r.page_timeline, p.span),
        }],
        shaded: p.lost(None),
    }
    .render(o);
    if let Some(t) = &p.r.timelines {
        let _ = write!(o, "<h3>Page allocations and frees per CPU</h3>");
        rate_charts(p, o, &t.page_rates, "page");
    }
    let _ = write!(o, r#"<div class="side">"#);
    order_heat_map(
        o,
        pr,
        &pr.by_order_migratetype,
        "Allocations by order and migratetype",
    );
    order_heat_map(
        o,
        pr,
        &pr.live_by_order_migratetype,
        "Still allocated at the end, by order and migratetype",
    );
    o.push_str("</div>");
    if let Some(f) = &pr.migratetype_names_fallback {
        note(o, &format!("Migratetype names: {f}"));
    }
    per_cpu_lists(p, o);
    fallbacks(p, o);
    callsites(p, o);
}

fn order_heat_map(o: &mut String, pr: &PageReport, rows: &[OrderRow], title: &str) {
    if rows.is_empty() {
        return;
    }
    HeatMap {
        title,
        row_axis: "order",
        col_axis: "migratetype",
        rows: rows.iter().map(|r| r.order.clone()).collect(),
        cols: pr.migratetypes.clone(),
        values: rows.iter().map(|r| r.by_migratetype.clone()).collect(),
    }
    .render(o);
}

fn per_cpu_lists(p: &Page<'_>, o: &mut String) {
    let pr = &p.r.pages;
    if pr.per_cpu_lists.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>Per-CPU page lists</h3>");
    let mut t = Table::new(
        "per-cpu-lists",
        &[
            ("CPU", true),
            ("Pages refilled", true),
            ("Refill lock runs", true),
            ("Pages per refill", true),
            ("Pages drained", true),
            ("Drain lock runs", true),
            ("Pages per drain", true),
        ],
    );
    // No lock run: `-`, as the text report (sorted below every ratio).
    let per = |pages: u64, runs: u64| {
        if runs == 0 {
            return (-1.0, "-".to_string());
        }
        let v = pages as f64 / runs as f64;
        (v, format!("{v:.1}"))
    };
    for r in pr.per_cpu_lists.iter().take(p.lines) {
        let (rv, rs) = per(r.refilled, r.refill_lock_acquisitions);
        let (dv, ds) = per(r.drained, r.drain_lock_acquisitions);
        t.row()
            .count(u64::from(r.cpu))
            .count(r.refilled)
            .count(r.refill_lock_acquisitions)
            .value(rv, &rs)
            .count(r.drained)
            .count(r.drain_lock_acquisitions)
            .value(dv, &ds);
    }
    t.render(o);
    let other: u64 = pr.drained_from_other_cpus.iter().map(|d| d.2).sum();
    if other > 0 {
        note(
            o,
            &format!(
                "{} pages drained by another CPU than the one whose list held them.",
                thousands(other)
            ),
        );
    }
}

fn fallbacks(p: &Page<'_>, o: &mut String) {
    let pr = &p.r.pages;
    if pr.fallbacks_total == 0 {
        return;
    }
    let _ = write!(o, "<h3>External fragmentation</h3>");
    note(
        o,
        &format!(
            "{} fallbacks to another migratetype, {} fragmenting (smaller than a pageblock).",
            thousands(pr.fallbacks_total),
            thousands(pr.fallbacks_fragmenting)
        ),
    );
    let mut t = Table::new(
        "fallbacks",
        &[
            ("Order", true),
            ("Migratetype", false),
            ("Fell back to order", true),
            ("Of migratetype", false),
            ("Took the pageblock", false),
            ("Fragmenting", false),
            ("Count", true),
        ],
    );
    for f in pr.fallbacks.iter().take(p.lines) {
        t.row()
            .count(u64::from(f.alloc_order))
            .text(&f.alloc_migratetype)
            .value(f64::from(f.fallback_order), &f.fallback_order.to_string())
            .text(&f.fallback_migratetype)
            .text(if f.change_ownership == 1 { "yes" } else { "no" })
            .text(match f.fragmenting {
                Some(true) => "yes",
                Some(false) => "no",
                None => "?",
            })
            .count(f.count);
    }
    t.render(o);
    for a in &pr.advice {
        let _ = write!(
            o,
            r#"<p class="advice"><b>Suggests ({})</b>: {} {}</p>"#,
            esc(&a.kind),
            esc(&a.observed),
            esc(&a.suggests)
        );
    }
}

fn callsites(p: &Page<'_>, o: &mut String) {
    let pr = &p.r.pages;
    let _ = write!(o, "<h3>Page call sites</h3>");
    if !pr.stacks.recorded {
        note(
            o,
            "The log has no stacks: record with kmemtraced --page-stacks on for page call sites.",
        );
        return;
    }
    if let Some(s) = &pr.stacks.sample {
        note(
            o,
            &format!(
                "Stacks for 1 in {} page frames (bits {} of the frame number clear): hits and \
                 bytes are estimates, each sampled allocation counted {}; {} allocations were \
                 outside the sample.",
                s.one_in,
                s.pfn_mask,
                crate::weights_text(&s.weight_by_order),
                kmemtrace_kernel::human::thousands(s.not_sampled)
            ),
        );
    }
    let mut t = Table::new(
        "page-callsites",
        &[
            ("Call site", false),
            ("Hits", true),
            ("Bytes", true),
            ("Live bytes", true),
            ("Order", true),
            ("Migratetype", false),
            ("GFP", false),
            ("Commonest stack", false),
        ],
    );
    for r in pr.callsites.iter().take(p.lines) {
        t.row()
            .code(&r.callsite)
            .count(r.hits)
            .count(r.bytes)
            .count(r.live_bytes)
            .count(u64::from(r.order))
            .text(&r.migratetype)
            .code(&r.gfp.compact)
            // Folded but with --stacks, as the text report shows stacks.
            .stack(&r.commonest_stack, !r.top_stack.is_empty());
    }
    t.more(
        pr.callsites.len().saturating_sub(p.lines),
        "kmemtrace-report --page --caller, or --json",
    );
    t.render(o);
}
