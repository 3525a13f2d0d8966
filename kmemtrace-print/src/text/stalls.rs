//! The allocation stalls section (`--stalls`; in the default report when
//! the log has stall events).

use super::{age, secs, thousands, with_comm, Sections, Table};
use kmemtrace_analysis::model::stalls::*;
use std::fmt::Write as _;

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The section.
pub fn render(out: &mut String, st: &Stalls, s: &Sections) {
    if st.is_empty() {
        return;
    }
    if st.events == 0 {
        let _ = writeln!(
            out,
            "\nALLOCATION STALLS: none (no task waited in reclaim, compaction or throttling; kswapd and kcompactd slept)"
        );
        notes(out, st);
        return;
    }
    let _ = writeln!(
        out,
        "\nALLOCATION STALLS: {} episodes, {} stalled, from {} stall events{}",
        thousands(st.episodes),
        age(st.stall_ns),
        thousands(st.events),
        if st.uncertain_episodes > 0 {
            format!(
                " ({} uncertain: they overlap lost events)",
                thousands(st.uncertain_episodes)
            )
        } else {
            String::new()
        }
    );
    kinds(out, st);
    sites(out, st, s);
    tasks(out, st, s);
    longest(out, st, s);
    background(out, st, s);
    oom_kills(out, st, s);
    shrinkers(out, st, s);
    notes(out, st);
}

fn kinds(out: &mut String, st: &Stalls) {
    if st.kinds.is_empty() {
        return;
    }
    let mut t = Table::new(&["waited in", "phases", "time", "pages reclaimed"]);
    for k in &st.kinds {
        t.row(vec![
            k.kind.clone(),
            thousands(k.phases),
            age(k.ns),
            thousands(k.pages_reclaimed),
        ]);
    }
    t.render(out);
}

fn sites(out: &mut String, st: &Stalls, s: &Sections) {
    if st.sites.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nSTALLS BY CALL SITE, ORDER, GFP AND TASK (stall time per episode; {} of {} rows)",
        st.sites.len().min(s.lines),
        st.sites.len()
    );
    let mut t = Table::new(&[
        "call site",
        "waited in",
        "order",
        "gfp",
        "comm",
        "episodes",
        "total",
        "p50",
        "p90",
        "p99",
        "max",
        "pages",
    ]);
    t.left = 5;
    for r in st.sites.iter().take(s.lines) {
        t.row(vec![
            r.callsite.clone().unwrap_or_else(|| "(no stack)".into()),
            r.kind.clone(),
            opt(r.order),
            r.gfp
                .as_ref()
                .map_or_else(|| "-".into(), |g| g.compact.clone()),
            opt(r.comm.as_deref()),
            thousands(r.episodes),
            age(r.total_ns),
            age(r.p50_ns),
            age(r.p90_ns),
            age(r.p99_ns),
            age(r.max_ns),
            thousands(r.pages_reclaimed),
        ]);
    }
    t.render(out);
}

fn tasks(out: &mut String, st: &Stalls, s: &Sections) {
    if st.tasks.len() < 2 {
        return;
    }
    let _ = writeln!(
        out,
        "\nSTALLS BY TASK ({} of {})",
        st.tasks.len().min(s.lines),
        st.tasks.len()
    );
    let mut t = Table::new(&["pid", "comm", "episodes", "stalled", "waited in"]);
    t.left = 2;
    t.left_last = true;
    for r in st.tasks.iter().take(s.lines) {
        let waits: Vec<String> = r
            .waits
            .iter()
            .map(|w| format!("{} {}x {}", w.kind, w.phases, age(w.ns)))
            .collect();
        t.row(vec![
            r.pid.to_string(),
            r.comm.clone().unwrap_or_default(),
            thousands(r.episodes),
            age(r.stall_ns),
            waits.join(", "),
        ]);
    }
    t.render(out);
}

fn longest(out: &mut String, st: &Stalls, s: &Sections) {
    let n = st.longest.len().min(s.lines).min(10);
    if n == 0 {
        return;
    }
    let _ = writeln!(out, "\nLONGEST EPISODES ({n})");
    for e in st.longest.iter().take(n) {
        let _ = writeln!(
            out,
            "  {} s CPU {} pid {}{}: {} stalled over {}, {} at {}, order {}, {}; ended by {}{}",
            secs(e.start_ns),
            e.cpu,
            e.pid,
            with_comm(e.comm.as_deref()),
            age(e.stall_ns),
            age(e.span_ns),
            e.kind,
            e.callsite.as_deref().unwrap_or("(no stack)"),
            opt(e.order),
            e.gfp.as_ref().map_or("-", |g| g.compact.as_str()),
            e.ended_by,
            if e.uncertain { " [uncertain]" } else { "" }
        );
        let waits = waits(e);
        if !waits.is_empty() {
            let _ = writeln!(out, "      {waits}");
        }
    }
}

/// Orders listed in a background row's "orders asked" at most: a kernel
/// has a dozen or so, while a damaged log can name every `int`.
const ORDERS_SHOWN: usize = 16;

/// A background row's orders asked, the first [`ORDERS_SHOWN`] each as
/// `show` writes it, then how many more.
pub(crate) fn orders_asked(b: &BackgroundRow, show: impl Fn(&OrderCount) -> String) -> Vec<String> {
    let mut orders: Vec<String> = b.orders.iter().take(ORDERS_SHOWN).map(show).collect();
    if b.orders.len() > ORDERS_SHOWN {
        orders.push(format!("(+{} more)", b.orders.len() - ORDERS_SHOWN));
    }
    orders
}

fn background(out: &mut String, st: &Stalls, s: &Sections) {
    if st.background.is_empty() && st.wakers.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nBACKGROUND RECLAIM AND COMPACTION");
    let mut t = Table::new(&[
        "thread",
        "node",
        "wakes",
        "wake events",
        "awake",
        "orders asked",
    ]);
    // Left-aligned, so a long last cell pads no other row.
    t.left_last = true;
    for b in st.background.iter().take(s.lines) {
        let orders = orders_asked(b, |o| format!("{}:{}", o.order, o.count));
        t.row(vec![
            b.thread.clone(),
            b.node.to_string(),
            thousands(b.wakes),
            thousands(b.wake_events),
            format!(
                "{}{}",
                age(b.awake_ns),
                if b.awake_at_end {
                    " (awake at end)"
                } else {
                    ""
                }
            ),
            orders.join(" "),
        ]);
    }
    t.render(out);
    more_rows(out, st.background.len(), s.lines);
    if st.wakers.is_empty() {
        return;
    }
    let mut t = Table::new(&["woken", "by call site", "order", "wakeups"]);
    t.left = 2;
    for w in st.wakers.iter().take(s.lines) {
        t.row(vec![
            w.thread.clone(),
            w.callsite.clone().unwrap_or_else(|| "(no stack)".into()),
            w.order.to_string(),
            thousands(w.wakeups),
        ]);
    }
    t.render(out);
    more_rows(out, st.wakers.len(), s.lines);
}

/// The line after a table cut to `lines` of its `rows`.
fn more_rows(out: &mut String, rows: usize, lines: usize) {
    if rows > lines {
        let _ = writeln!(out, "  ... {} more rows (see --json)", rows - lines);
    }
}

fn oom_kills(out: &mut String, st: &Stalls, s: &Sections) {
    if st.oom_kills.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nOOM KILLS ({})", st.oom_kills.len());
    for k in st.oom_kills.iter().take(s.lines) {
        let _ = writeln!(
            out,
            "  {} s: pid {}{} killed (rss {}), for pid {}{} at {}, order {}, {}: it stalled {} over {} in {} phases before{}",
            secs(k.ts_ns),
            k.victim_pid,
            with_comm(k.victim_comm.as_deref()),
            k.victim_rss_kb.map_or_else(|| "?".into(), |r| format!("{} kB", thousands(r))),
            k.killer_pid,
            with_comm(k.killer_comm.as_deref()),
            k.callsite.as_deref().unwrap_or("(no stack)"),
            opt(k.order),
            k.gfp.as_ref().map_or("-", |g| g.compact.as_str()),
            age(k.stalled_ns),
            age(k.waited_ns),
            k.phases_before,
            k.reaped_ns.map_or_else(String::new, |r| format!("; reaped in {}", age(r)))
        );
    }
    more_rows(out, st.oom_kills.len(), s.lines);
}

fn shrinkers(out: &mut String, st: &Stalls, s: &Sections) {
    if st.shrinkers.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nSHRINKERS");
    let mut t = Table::new(&["shrinker", "calls", "scanned", "freed", "time"]);
    for r in st.shrinkers.iter().take(s.lines) {
        t.row(vec![
            r.shrinker.clone(),
            thousands(r.calls),
            thousands(r.scanned),
            thousands(r.freed),
            age(r.ns),
        ]);
    }
    t.render(out);
}

fn notes(out: &mut String, st: &Stalls) {
    let pr = &st.proactive;
    if pr.reclaims > 0 {
        let _ = writeln!(
            out,
            "  proactive: {} memcg reclaims asked for by writes to a cgroup's files ({}, {} pages), not counted as stalls",
            pr.reclaims,
            age(pr.ns),
            thousands(pr.pages_reclaimed)
        );
    }
    let u = &st.unpaired;
    if u.ends_without_begin + u.begins_without_end + u.open_at_end > 0 {
        let _ = writeln!(
            out,
            "  unpaired: {} ends without a begin (before the capture or lost), {} begins without an end, {} episodes open at the end",
            u.ends_without_begin, u.begins_without_end, u.open_at_end
        );
    }
    if !st.not_recorded.is_empty() {
        let _ = writeln!(
            out,
            "  not in the log (the kernel lacks them, or they were not recorded): {}",
            st.not_recorded.join(" ")
        );
    }
}

/// What an episode waited in: `2 reclaims 1.2 ms (90 pages); 1 compactions
/// 0.3 ms [1 success]; 3 retries` (empty: nothing seen).
pub(crate) fn waits(e: &Episode) -> String {
    let mut parts = Vec::new();
    if e.reclaims > 0 {
        parts.push(format!(
            "{} reclaims {} ({} pages)",
            e.reclaims,
            age(e.reclaim_ns),
            thousands(e.pages_reclaimed)
        ));
    }
    if e.compactions > 0 {
        let results: Vec<String> = e
            .compaction_results
            .iter()
            .map(|c| format!("{} {}", c.count, c.name))
            .collect();
        let results = if results.is_empty() {
            String::new()
        } else {
            format!(" [{}]", results.join(", "))
        };
        parts.push(format!(
            "{} compactions {}{results}",
            e.compactions,
            age(e.compaction_ns),
        ));
    }
    if e.throttles > 0 {
        parts.push(format!("{} throttles {}", e.throttles, age(e.throttle_ns)));
    }
    if e.retries > 0 {
        parts.push(format!("{} retries", e.retries));
    }
    if let Some(v) = e.oom_victim {
        parts.push(format!("OOM kill of pid {v}"));
    }
    parts.join("; ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::MAX_CELL_CHARS;
    use super::*;

    /// A damaged log's stalls: a thousand nodes each woken for a thousand
    /// orders, a thousand wakers, one of them with a long call site, a
    /// thousand OOM kills.
    pub(crate) fn many_rows() -> Stalls {
        let orders: Vec<OrderCount> = (0..1000)
            .map(|order| OrderCount { order, count: 1 })
            .collect();
        Stalls {
            recorded: true,
            events: 1,
            episodes: 1,
            background: (0..1000)
                .map(|node| BackgroundRow {
                    thread: "kswapd".into(),
                    node,
                    wakes: 1,
                    wake_events: 1,
                    orders: orders.clone(),
                    ..Default::default()
                })
                .collect(),
            wakers: (0..1000)
                .map(|order| WakerRow {
                    thread: "kswapd".into(),
                    callsite: (order == 0).then(|| "f".repeat(100_000)),
                    order,
                    wakeups: 1,
                })
                .collect(),
            oom_kills: vec![OomKill::default(); 1000],
            ..Default::default()
        }
    }

    #[test]
    fn background_tables_keep_to_the_lines_asked_for() {
        let mut out = String::new();
        render(&mut out, &many_rows(), &Sections::all(10));
        // Ten rows of each table, the long call site cut, no row padded
        // to a row of a thousand orders.
        assert!(out.len() < 30_000, "{} bytes", out.len());
        assert_eq!(out.matches("... 990 more rows").count(), 3);
        assert_eq!(out.matches("(+984 more)").count(), 10);
        assert!(out.contains(" 15:1 (+984 more)\n"));
        assert!(out.contains(&format!(" {}… ", "f".repeat(MAX_CELL_CHARS - 1))));
        let widest = out.lines().map(|l| l.chars().count()).max();
        assert!(widest < Some(MAX_CELL_CHARS + 100), "{widest:?}");
    }
}
