//! The page's slab sections: the capture, the findings, live bytes and
//! rates over time, the cross-CPU heat map, the call-site, cache and leak
//! tables.

use super::series::{rate, rate_width, running, total_rate};
use super::svg::{HeatMap, Line, TimeChart, Unit, PALETTE};
use super::table::Table;
use super::{esc, heading, note, Page};
use crate::text::{age, secs, with_comm};
use kmemtrace_analysis::model::*;
use kmemtrace_kernel::human::{bytes, thousands};
use std::fmt::Write as _;

/// Kernel, capture and the headline figures.
pub fn header(p: &Page<'_>, o: &mut String) {
    let (r, k, c) = (p.r, &p.r.kernel, &p.r.capture);
    let _ = write!(
        o,
        r#"<p class="meta">{} {} {} · {}-endian, {}-byte long, page {} · {} CPUs · trace clock {} · host {}</p>"#,
        esc(k.sysname.as_deref().unwrap_or("Linux")),
        esc(k.release.as_deref().unwrap_or("(release unknown)")),
        esc(k.machine.as_deref().unwrap_or("")),
        k.byte_order,
        k.long_size,
        k.page_size.map_or("?".into(), |x| x.to_string()),
        k.nr_cpus.map_or(c.cpus.len() as u64, u64::from),
        esc(k.trace_clock.as_deref().unwrap_or("?")),
        esc(k.hostname.as_deref().unwrap_or("?")),
    );
    let s = &r.summary;
    let worst = r
        .misuse
        .iter()
        .filter(|f| f.certain > 0)
        .map(|f| f.severity)
        .max();
    let cards = [
        (
            "capture",
            format!("{} s", secs(c.duration_ns)),
            String::new(),
        ),
        (
            "events",
            thousands(c.events),
            format!("{} kmem", thousands(c.kmem_events)),
        ),
        (
            "slab allocations",
            thousands(s.alloc_events),
            format!("{} frees", thousands(s.free_events)),
        ),
        (
            "bytes allocated",
            bytes(s.bytes_allocated as f64),
            format!(
                "{} requested, {:.1}% wasted",
                bytes(s.bytes_requested as f64),
                s.fragmentation_pct
            ),
        ),
        (
            "live at the end",
            bytes(s.live_bytes as f64),
            format!("peak {}", bytes(s.peak_live_bytes as f64)),
        ),
        (
            "cross-CPU frees",
            thousands(s.cross_cpu_frees),
            format!("of {} matched", thousands(s.matched_frees)),
        ),
        (
            "lost-event windows",
            thousands(c.lost_windows_total as u64),
            if c.lost_windows_total > 0 {
                "findings there are uncertain".into()
            } else {
                "nothing lost".into()
            },
        ),
        (
            "findings",
            worst.map_or("none".into(), |w| w.name().to_string()),
            "the worst certain one".into(),
        ),
    ];
    super::cards(o, &cards);
    let _ = write!(
        o,
        r#"<p class="meta">{} · {} · recorded by {}</p>"#,
        esc(&r.input.name),
        esc(&crate::text::capture_end(r)),
        esc(r.input.recorder.as_deref().unwrap_or("?"))
    );
    let filters = crate::text::filter_list(r);
    if !filters.is_empty() {
        // Every figure below is of the selection; the headline's are the
        // capture's.
        let _ = write!(
            o,
            r#"<p class="meta"><b>filters:</b> {} (the figures below are of the selected events)</p>"#,
            esc(&filters.join(", "))
        );
    }
    if !r.problems.is_empty() {
        o.push_str(r#"<details class="problems"><summary>"#);
        let _ = write!(
            o,
            "{} problem{} in the log</summary><ul>",
            r.problems.len(),
            if r.problems.len() == 1 { "" } else { "s" }
        );
        for pr in r.problems.iter().take(p.lines) {
            let _ = write!(o, "<li>{}</li>", esc(&pr.to_string()));
        }
        o.push_str("</ul></details>");
    }
}

/// The misuse findings with their first occurrence, page misuse beside.
pub fn findings(p: &Page<'_>, o: &mut String) {
    heading(o, "findings", "Allocator misuse");
    let mut t = Table::new(
        "findings",
        &[
            ("Severity", false),
            ("Finding", false),
            ("Count", true),
            ("Certain", true),
            ("Uncertain", true),
            ("Judgement", false),
            ("First occurrence", false),
        ],
    );
    let mut none = Vec::new();
    for f in &p.r.misuse {
        if f.count == 0 {
            none.push(&*f.kind);
            continue;
        }
        t.row()
            .severity(f.severity.name())
            .text(&f.title)
            .count(f.count)
            .count(f.certain)
            .count(f.uncertain)
            .text(&f.judgement)
            .text(&first_occurrence(f));
    }
    for (f, title) in [
        (&p.r.pages.misuse.freed_twice, "page freed twice"),
        (
            &p.r.pages.misuse.allocated_while_live,
            "page allocated while live",
        ),
    ] {
        if f.count == 0 {
            none.push(&*f.kind);
            continue;
        }
        t.row()
            .severity(f.severity.name())
            .text(title)
            .count(f.count)
            .count(f.count.saturating_sub(f.uncertain))
            .count(f.uncertain)
            .text(&f.judgement)
            .text(&f.first.as_ref().map_or(String::new(), |x| {
                format!(
                    "{} s: pfn {} order {} on CPU {} by pid {}{}{}",
                    secs(x.ts_ns),
                    x.pfn,
                    x.order,
                    x.cpu,
                    x.pid,
                    with_comm(x.comm.as_deref()),
                    if x.uncertain { " (uncertain)" } else { "" }
                )
            }));
    }
    if t.is_empty() {
        note(o, "No misuse found.");
    } else {
        t.render(o);
    }
    if !none.is_empty() {
        note(o, &format!("None of: {}.", none.join(", ")));
    }
}

fn first_occurrence(f: &Finding) -> String {
    let Some(x) = f.first_certain.as_ref().or(f.first.as_ref()) else {
        return String::new();
    };
    let mut s = crate::text::occurrence(x);
    if x.uncertain {
        s.push_str(" (uncertain)");
    }
    s
}

/// Live slab bytes: the total and the call sites with the highest peaks.
pub fn live(p: &Page<'_>, o: &mut String) {
    heading(o, "live", "Live slab bytes over time");
    let mut lines = vec![Line {
        name: "all call sites".into(),
        color: "#222",
        points: running(&p.r.live_timeline, p.span),
    }];
    if let Some(t) = &p.r.timelines {
        for (i, s) in t.site_live.iter().enumerate() {
            lines.push(Line {
                name: format!("{} (peak {})", s.callsite, bytes(s.peak_live_bytes as f64)),
                color: PALETTE[i % PALETTE.len()],
                points: running(&s.live, p.span),
            });
        }
    }
    TimeChart {
        title: "Bytes allocated and not yet freed, since the capture's start",
        height: 320,
        x_max: p.span.len_secs(),
        y_max: None,
        unit: Unit::Bytes,
        lines,
        shaded: p.lost(None),
    }
    .render(o);
    note(
        o,
        "Objects allocated before the capture are not counted, so a free of one lowers the line below what the kernel holds; lines can dip below zero.",
    );
}

/// Allocations and frees per second: all CPUs, then each CPU.
pub fn rates(p: &Page<'_>, o: &mut String) {
    let Some(t) = &p.r.timelines else { return };
    heading(o, "rates", "Slab allocations and frees per CPU");
    rate_charts(p, o, &t.slab_rates, "slab");
}

/// The total and per-CPU rate charts of one allocator, on one shared
/// bin width and (per CPU) one shared scale.
pub fn rate_charts(p: &Page<'_>, o: &mut String, cpus: &[CpuRateSeries], what: &str) {
    if cpus.is_empty() {
        note(o, &format!("No {what} events selected."));
        return;
    }
    let all = cpus.iter().flat_map(|c| [&c.allocs, &c.frees]);
    let width = rate_width(all, p.span);
    let x_max = p.span.len_secs();
    let pair = |a: Vec<(f64, f64)>, f: Vec<(f64, f64)>| {
        vec![
            Line {
                name: "allocations".into(),
                color: PALETTE[0],
                points: a,
            },
            Line {
                name: "frees".into(),
                color: PALETTE[1],
                points: f,
            },
        ]
    };
    let title = format!(
        "All CPUs: {what} events per second (bins of {})",
        age(width)
    );
    TimeChart {
        title: &title,
        height: 220,
        x_max,
        y_max: None,
        unit: Unit::PerSecond,
        lines: pair(
            total_rate(cpus.iter().map(|c| &c.allocs), width, p.span),
            total_rate(cpus.iter().map(|c| &c.frees), width, p.span),
        ),
        shaded: p.lost(None),
    }
    .render(o);
    let drawn = busiest(cpus, MULTIPLES);
    let per_cpu: Vec<(u32, Vec<Line>)> = drawn
        .iter()
        .map(|c| {
            (
                c.cpu,
                pair(
                    rate(&c.allocs, width, p.span),
                    rate(&c.frees, width, p.span),
                ),
            )
        })
        .collect();
    let top = per_cpu
        .iter()
        .flat_map(|(_, l)| l.iter().flat_map(|l| l.points.iter().map(|x| x.1)))
        .fold(0f64, f64::max);
    o.push_str(r#"<div class="multiples">"#);
    for (cpu, lines) in per_cpu {
        let title = format!("CPU {cpu}");
        TimeChart {
            title: &title,
            height: 130,
            x_max,
            y_max: Some(top),
            unit: Unit::PerSecond,
            lines,
            shaded: p.lost(Some(cpu)),
        }
        .render(o);
    }
    o.push_str("</div>");
    if drawn.len() < cpus.len() {
        note(
            o,
            &format!(
                "The {} CPUs with the most {what} events are drawn; {} others are in the total.",
                drawn.len(),
                thousands((cpus.len() - drawn.len()) as u64)
            ),
        );
    }
}

/// The most CPUs drawn one chart each.
const MULTIPLES: usize = 256;

/// The `n` CPUs with the most events (the lower CPU first among equals),
/// in CPU order.
fn busiest(cpus: &[CpuRateSeries], n: usize) -> Vec<&CpuRateSeries> {
    let events = |c: &CpuRateSeries| -> i64 {
        c.allocs
            .points
            .iter()
            .chain(&c.frees.points)
            .map(|p| p.value)
            .fold(0, i64::saturating_add)
    };
    let mut ranked: Vec<(i64, &CpuRateSeries)> = cpus.iter().map(|c| (events(c), c)).collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cpu.cmp(&b.1.cpu)));
    ranked.truncate(n);
    let mut drawn: Vec<&CpuRateSeries> = ranked.into_iter().map(|(_, c)| c).collect();
    drawn.sort_by_key(|c| c.cpu);
    drawn
}

/// Which CPU allocated what which CPU freed.
pub fn cross_cpu(x: &CrossCpu, o: &mut String) {
    heading(o, "cross-cpu", "Frees by allocating and freeing CPU");
    if x.cpus.is_empty() {
        note(o, "No frees matched to their allocation.");
        return;
    }
    let labels: Vec<String> = x.cpus.iter().map(u32::to_string).collect();
    HeatMap {
        title: "Objects freed, by the CPU that allocated them (rows) and the CPU that freed them (columns)",
        row_axis: "allocating CPU",
        col_axis: "freeing CPU",
        rows: labels.clone(),
        cols: labels,
        values: x.matrix.clone(),
    }
    .render(o);
    note(
        o,
        &format!(
            "{} frees on the allocating CPU, {} on another (off the diagonal).",
            thousands(x.same_cpu_frees),
            thousands(x.cross_cpu_frees)
        ),
    );
    if x.cpus_left_out > 0 {
        note(
            o,
            &format!(
                "The {} busiest CPUs are drawn; {} frees involve {} others, left out.",
                x.cpus.len(),
                thousands(x.frees_left_out),
                thousands(x.cpus_left_out)
            ),
        );
    }
}

/// The call-site table, every column sortable.
pub fn callsites(p: &Page<'_>, o: &mut String) {
    heading(o, "callsites", "Slab call sites");
    let rows: Vec<&CallsiteRow> = p.r.callsites.iter().filter(|c| c.hits > 0).collect();
    let mut t = Table::new(
        "slab-callsites",
        &[
            ("Call site", false),
            ("Hits", true),
            ("Bytes allocated", true),
            ("Bytes requested", true),
            ("Wasted", true),
            ("Frag %", true),
            ("Frees", true),
            ("Cross-CPU frees", true),
            ("Live objects", true),
            ("Live bytes", true),
            ("Peak live bytes", true),
            ("Cache", false),
            ("GFP", false),
        ],
    );
    for c in rows.iter().take(p.lines) {
        t.row()
            .code(&c.callsite)
            .count(c.hits)
            .count(c.bytes_alloc)
            .count(c.bytes_req)
            .count(c.bytes_wasted)
            .value(c.fragmentation_pct, &format!("{:.3}", c.fragmentation_pct))
            .count(c.frees)
            .count(c.cross_cpu_frees)
            .count(c.live_objects)
            .count(c.live_bytes)
            .count(c.peak_live_bytes)
            .text(c.cache.as_deref().unwrap_or(""))
            .code(
                &c.gfp
                    .iter()
                    .map(|g| g.compact.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
            );
    }
    t.more(
        rows.len().saturating_sub(p.lines),
        "kmemtrace-report --json, or -l",
    );
    t.render(o);
}

/// Named caches and kmalloc size classes.
pub fn caches(p: &Page<'_>, o: &mut String) {
    heading(o, "caches", "Caches and kmalloc size classes");
    for (id, title, rows) in [
        ("caches", "kmem_cache_alloc, by cache", &p.r.caches),
        ("size-classes", "kmalloc, by size class", &p.r.size_classes),
    ] {
        let _ = write!(o, "<h3>{}</h3>", esc(title));
        let mut t = Table::new(
            id,
            &[
                ("Cache", false),
                ("Object size", true),
                ("Hits", true),
                ("Bytes allocated", true),
                ("Wasted", true),
                ("Frag %", true),
                ("Frees", true),
                ("Cross-CPU frees", true),
                ("Live bytes", true),
                ("Peak live bytes", true),
            ],
        );
        for c in rows.iter().take(p.lines) {
            t.row()
                .code(&c.name)
                .maybe_count(c.object_size)
                .count(c.hits)
                .count(c.bytes_alloc)
                .count(c.bytes_wasted)
                .value(c.fragmentation_pct, &format!("{:.3}", c.fragmentation_pct))
                .count(c.frees)
                .count(c.cross_cpu_frees)
                .count(c.live_bytes)
                .count(c.peak_live_bytes);
        }
        t.more(
            rows.len().saturating_sub(p.lines),
            "kmemtrace-report --json",
        );
        t.render(o);
    }
}

/// Objects still live at the end, by call site, oldest first seen.
pub fn leaks(p: &Page<'_>, o: &mut String) {
    let l = &p.r.leaks;
    heading(o, "leaks", "Objects live at the end");
    note(
        o,
        &format!(
            "{} objects, {} bytes in {} call sites{}; {} uncertain (events lost after their allocation). First seen: when the oldest object was allocated.",
            thousands(l.objects),
            thousands(l.bytes),
            thousands(l.groups_total as u64),
            if l.min_age_ns > 0 {
                format!(", {} old or more", age(l.min_age_ns))
            } else {
                String::new()
            },
            thousands(l.uncertain)
        ),
    );
    let mut t = Table::new(
        "leaks",
        &[
            ("Call site", false),
            ("Objects", true),
            ("Bytes", true),
            ("First seen (s)", true),
            ("Oldest age", true),
            ("Newest age", true),
            ("Uncertain", true),
            ("Missed frees", true),
            ("Oldest object", false),
        ],
    );
    for g in l.groups.iter().take(p.lines) {
        // A row of objects counted apart only has no ages: sorted first.
        let first = g.oldest_age_ns.map(|a| l.end_ts_ns.saturating_sub(a));
        let ns = |v: Option<u64>, shown: fn(u64) -> String| {
            v.map_or((-1.0, "-".to_string()), |v| (v as f64, shown(v)))
        };
        let (first, oldest, newest) = (
            ns(first, secs),
            ns(g.oldest_age_ns, age),
            ns(g.newest_age_ns, age),
        );
        t.row()
            .code(&g.callsite)
            .count(g.objects)
            .count(g.bytes)
            .value(first.0, &first.1)
            .value(oldest.0, &oldest.1)
            .value(newest.0, &newest.1)
            .count(g.uncertain)
            .count(g.site_missed_frees)
            .code(
                &g.examples
                    .first()
                    .map(|e| format!("{} (CPU {}, {} bytes)", e.ptr, e.cpu, e.bytes))
                    .unwrap_or_default(),
            );
    }
    t.more(
        l.groups.len().saturating_sub(p.lines),
        "kmemtrace-report --json",
    );
    t.render(o);
}

/// The call sites' source lines (`--vmlinux`): each chain innermost first,
/// as `scripts/faddr2line` prints it.
pub fn sources(p: &Page<'_>, o: &mut String) {
    let Some(src) = &p.r.sources else { return };
    heading(o, "sources", "Source lines of the call sites");
    note(o, &format!("From {}.", src.debug_info));
    let mut t = Table::new("sources", &[("Call site", false), ("Source", false)]);
    for s in src.callsites.iter().take(p.lines) {
        t.row()
            .code(&s.callsite)
            .code(&kmemtrace_analysis::debuginfo::chain_lines(&s.frames).join("; "));
    }
    t.more(
        src.callsites.len().saturating_sub(p.lines),
        "kmemtrace-report --json",
    );
    t.render(o);
}

#[cfg(test)]
mod tests {
    use super::busiest;
    use kmemtrace_analysis::model::{CpuRateSeries, TimeSeries};
    use kmemtrace_analysis::passes::timeline::BinPoint;

    fn series(events: i64) -> TimeSeries {
        TimeSeries {
            bin_ns: 1024,
            points: vec![BinPoint {
                ts_ns: 1024,
                value: events,
            }],
        }
    }

    #[test]
    fn the_busiest_cpus_are_drawn_in_cpu_order() {
        let cpus: Vec<CpuRateSeries> = [(9, 5, 0), (2, 1, 1), (4, 0, 7), (1, 2, 0), (7, 1, 1)]
            .iter()
            .map(|&(cpu, a, f)| CpuRateSeries {
                cpu,
                allocs: series(a),
                frees: series(f),
            })
            .collect();
        let drawn: Vec<u32> = busiest(&cpus, 3).iter().map(|c| c.cpu).collect();
        assert_eq!(drawn, [1, 4, 9]);
        assert_eq!(busiest(&cpus, 10).len(), 5);
    }
}
