//! The page's allocation stalls section, only where the log has stall
//! events: the headline figures, a timeline of the tasks that stalled
//! most, the latency histograms of the call sites that stalled longest,
//! and the tables of the text report (`--stalls`).

use super::series::Span;
use super::svg::{Bars, Lane, Lanes, Layer, Stretch, PALETTE};
use super::table::Table;
use super::{cards, heading, note, Page};
use crate::text::stalls::orders_asked;
use crate::text::{age, secs};
use kmemtrace_analysis::model::stalls::*;
use kmemtrace_kernel::human::thousands;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Tasks on the timeline, the most stall time first.
const TIMELINE_TASKS: usize = 20;
/// Call-site rows whose histograms are drawn, the longest total first.
const HISTOGRAMS: usize = 6;

/// The timeline's layers, bottom to top: the episode, then the waits in it
/// (a throttle inside a reclaim shows on top of it).
const EPISODE: usize = 0;
const RECLAIM: usize = 1;
const COMPACTION: usize = 2;
const THROTTLE: usize = 3;
/// An OOM kill's mark.
const OOM_COLOUR: &str = "#d62728";

/// What the section takes of the page: its time axis, rows per table.
#[derive(Clone, Copy)]
struct View {
    span: Span,
    lines: usize,
}

/// The section, where the log has stall events.
pub fn stalls(st: &Stalls, p: &Page<'_>, o: &mut String) {
    if st.is_empty() {
        return;
    }
    let v = View {
        span: p.span,
        lines: p.lines,
    };
    render(st, v, o);
}

fn render(st: &Stalls, v: View, o: &mut String) {
    heading(o, "stalls", "Allocation stalls");
    headline(st, o);
    kinds(st, o);
    if episodes(st).is_empty() {
        // Stall events of kswapd and kcompactd alone: nothing waited.
        note(
            o,
            "No allocation stalled: the stall events are background reclaim and compaction only.",
        );
    } else {
        timeline(st, v, o);
        histograms(st, o);
    }
    sites(st, v, o);
    longest(st, v, o);
    background(st, v, o);
    oom_kills(st, v, o);
    shrinkers(st, v, o);
    notes(st, o);
}

/// Every episode; a document read back holds the longest only.
fn episodes(st: &Stalls) -> &[Episode] {
    if st.all.is_empty() {
        &st.longest
    } else {
        &st.all
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn site(s: Option<&str>) -> &str {
    s.unwrap_or("(no stack)")
}

fn gfp(g: Option<&kmemtrace_analysis::model::Gfp>) -> &str {
    g.map_or("-", |g| g.compact.as_str())
}

/// `comm (pid)`, or `pid N` without a name.
fn task(pid: i32, comm: Option<&str>) -> String {
    match comm {
        Some(c) => format!("{c} ({pid})"),
        None => format!("pid {pid}"),
    }
}

fn headline(st: &Stalls, o: &mut String) {
    let eps = episodes(st);
    let tasks: std::collections::BTreeSet<i32> = eps.iter().map(|e| e.pid).collect();
    let longest = st.longest.first();
    let pages = st.kinds.iter().map(|k| k.pages_reclaimed);
    let pages = pages.fold(0, u64::saturating_add);
    let open = st.unpaired.open_at_end;
    let c = [
        (
            "stall episodes",
            thousands(st.episodes),
            if st.uncertain_episodes > 0 {
                format!(
                    "{} uncertain: they overlap lost events",
                    thousands(st.uncertain_episodes)
                )
            } else {
                format!("from {} stall events", thousands(st.events))
            },
        ),
        (
            "time stalled",
            age(st.stall_ns),
            "in reclaim, compaction and throttling".into(),
        ),
        (
            "longest episode",
            longest.map_or("-".into(), |e| age(e.stall_ns)),
            longest.map_or(String::new(), |e| task(e.pid, e.comm.as_deref())),
        ),
        (
            "tasks stalled",
            thousands(tasks.len() as u64),
            if open > 0 {
                format!("{} still waiting at the end", thousands(open))
            } else {
                "none waiting at the end".into()
            },
        ),
        (
            "pages reclaimed",
            thousands(pages),
            "by the waiting tasks".into(),
        ),
        (
            "OOM kills",
            thousands(st.oom_kills.len() as u64),
            "invoked by waiting tasks".into(),
        ),
    ];
    cards(o, &c);
}

fn kinds(st: &Stalls, o: &mut String) {
    if st.kinds.is_empty() {
        return;
    }
    let mut t = Table::new(
        "stall-kinds",
        &[
            ("Waited in", false),
            ("Phases", true),
            ("Time", true),
            ("Pages reclaimed", true),
        ],
    );
    for k in &st.kinds {
        t.row()
            .text(&k.kind)
            .count(k.phases)
            .value(k.ns as f64, &age(k.ns))
            .count(k.pages_reclaimed);
    }
    t.render(o);
}

/// Which layer a phase of `kind` is drawn in.
fn layer_of(kind: &str) -> usize {
    match kind {
        "compaction" => COMPACTION,
        "throttle" => THROTTLE,
        _ => RECLAIM,
    }
}

fn episode_title(span: Span, e: &Episode) -> String {
    format!(
        "{} at {:.6} s: {} at {}, order {}, {}; {} stalled over {}; ended by {}{}",
        task(e.pid, e.comm.as_deref()),
        span.secs(e.start_ns),
        e.kind,
        site(e.callsite.as_deref()),
        opt(e.order),
        gfp(e.gfp.as_ref()),
        age(e.stall_ns),
        age(e.span_ns),
        e.ended_by,
        if e.uncertain {
            " (uncertain: events lost)"
        } else {
            ""
        }
    )
}

/// The tasks with the most stall time, a lane each: their episodes, the
/// waits in them, and the OOM kills they invoked.
fn timeline(st: &Stalls, v: View, o: &mut String) {
    let eps = episodes(st);
    let mut per_task: BTreeMap<i32, (u64, Option<&str>)> = BTreeMap::new();
    for e in eps {
        let t = per_task.entry(e.pid).or_insert((0, e.comm.as_deref()));
        t.0 = t.0.saturating_add(e.stall_ns);
    }
    let mut order: Vec<(i32, u64, Option<&str>)> = per_task
        .iter()
        .map(|(&pid, &(ns, c))| (pid, ns, c))
        .collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown = order.len().min(TIMELINE_TASKS);
    let lane_of: BTreeMap<i32, usize> = order[..shown]
        .iter()
        .enumerate()
        .map(|(i, t)| (t.0, i))
        .collect();
    let layer = |one, many, ns_is, color, height| Layer {
        one,
        many,
        ns_is,
        color,
        height,
    };
    // In the order of EPISODE, RECLAIM, COMPACTION and THROTTLE.
    let layers = vec![
        layer("episode", "episodes", "stalled", "#c8c8c8", 1.0),
        layer("reclaim", "reclaims", "in reclaim", PALETTE[0], 0.6),
        layer("compaction", "compactions", "compacting", PALETTE[1], 0.6),
        layer("throttle", "throttles", "throttled", PALETTE[6], 0.4),
    ];
    let mut lanes: Vec<Lane> = order[..shown]
        .iter()
        .map(|&(pid, ns, comm)| Lane {
            label: format!("{}: {}", task(pid, comm), age(ns)),
            stretches: layers.iter().map(|_| Vec::new()).collect(),
            marks: Vec::new(),
        })
        .collect();
    for e in eps {
        let Some(&i) = lane_of.get(&e.pid) else {
            continue;
        };
        let lane = &mut lanes[i];
        lane.stretches[EPISODE].push(Stretch {
            a: v.span.secs(e.start_ns),
            b: v.span.secs(e.start_ns.saturating_add(e.span_ns)),
            ns: e.stall_ns,
            title: episode_title(v.span, e),
        });
        for ph in &e.phases {
            let detail = if ph.detail.is_empty() {
                String::new()
            } else {
                format!(", {}", ph.detail)
            };
            lane.stretches[layer_of(&ph.kind)].push(Stretch {
                a: v.span.secs(ph.start_ns),
                b: v.span.secs(ph.start_ns.saturating_add(ph.ns)),
                ns: ph.ns,
                title: format!(
                    "{} at {:.6} s: {}{detail}",
                    ph.kind,
                    v.span.secs(ph.start_ns),
                    age(ph.ns)
                ),
            });
        }
    }
    for k in &st.oom_kills {
        if let Some(&i) = lane_of.get(&k.killer_pid) {
            lanes[i].marks.push((
                v.span.secs(k.ts_ns),
                format!(
                    "OOM kill at {:.6} s: {} killed for {}",
                    v.span.secs(k.ts_ns),
                    task(k.victim_pid, k.victim_comm.as_deref()),
                    task(k.killer_pid, k.killer_comm.as_deref())
                ),
            ));
        }
    }
    Lanes {
        title: "Stall episodes of the tasks that stalled longest, since the capture's start",
        x_max: v.span.len_secs(),
        layers,
        lanes,
        mark: (OOM_COLOUR, "OOM kill invoked"),
    }
    .render(o);
    let mut what = format!(
        "An episode (grey) runs from a task's first stall event to the allocation that ended it; the waits in it are coloured (an episode's first {} at most). {} of {} tasks that stalled.",
        kmemtrace_analysis::passes::stalls::PHASES_KEPT,
        shown,
        order.len()
    );
    if st.all.is_empty() {
        what.push_str(" Only the longest episodes: the report read back holds no others.");
    }
    note(o, &what);
}

/// `4us`: a bucket's bound, short enough for a label under a bar.
fn short_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns >= 1_000_000_000 {
        format!("{:.0}s", f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.0}ms", f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.0}us", f / 1e3)
    } else {
        format!("{ns}ns")
    }
}

/// The bins of a power-of-two histogram, the empty ones between included:
/// (label, count, title).
fn bins(h: &[HistBucket]) -> Vec<(String, u64, String)> {
    let exp = |b: &HistBucket| 63 - b.below_ns.max(1).leading_zeros();
    let (Some(lo), Some(hi)) = (h.iter().map(exp).min(), h.iter().map(exp).max()) else {
        return Vec::new();
    };
    (lo..=hi)
        .map(|k| {
            let below = 1u64 << k;
            let n: u64 = h.iter().filter(|b| exp(b) == k).map(|b| b.count).sum();
            let range = if below > 1 {
                format!("{} to {}", age(below / 2), age(below))
            } else {
                format!("under {}", age(below))
            };
            let title = format!("{} episodes stalled {range}", thousands(n));
            (format!("<{}", short_ns(below)), n, title)
        })
        .collect()
}

fn histograms(st: &Stalls, o: &mut String) {
    let rows: Vec<&StallSiteRow> = st
        .sites
        .iter()
        .filter(|r| !r.histogram.is_empty())
        .take(HISTOGRAMS)
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>Stall time per episode, by call site</h3>");
    o.push_str(r#"<div class="side">"#);
    for r in &rows {
        let title = format!(
            "{}, {}, {}: {} episodes, p50 {}, max {}",
            site(r.callsite.as_deref()),
            r.kind,
            r.comm.as_deref().unwrap_or("-"),
            thousands(r.episodes),
            age(r.p50_ns),
            age(r.max_ns)
        );
        Bars {
            title: &title,
            color: PALETTE[0],
            bins: bins(&r.histogram),
        }
        .render(o);
    }
    o.push_str("</div>");
    note(
        o,
        &format!(
            "Episodes by their stall time, in power-of-two bins; the {} call-site rows with the most stall time, of {}.",
            rows.len(),
            st.sites.len()
        ),
    );
}

/// A duration cell, sorted by its nanoseconds.
fn ns_cell(t: &mut Table, ns: u64) -> &mut Table {
    t.value(ns as f64, &age(ns))
}

fn sites(st: &Stalls, v: View, o: &mut String) {
    if st.sites.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>Stalls by call site, order, GFP flags and task</h3>");
    let mut t = Table::new(
        "stall-sites",
        &[
            ("Call site", false),
            ("Waited in", false),
            ("Order", true),
            ("GFP", false),
            ("Task", false),
            ("Episodes", true),
            ("Total", true),
            ("p50", true),
            ("p90", true),
            ("p99", true),
            ("Max", true),
            ("Pages reclaimed", true),
        ],
    );
    for r in st.sites.iter().take(v.lines) {
        t.row()
            .code(site(r.callsite.as_deref()))
            .text(&r.kind)
            .maybe_count(r.order.map(u64::from))
            .code(gfp(r.gfp.as_ref()))
            .text(r.comm.as_deref().unwrap_or("-"))
            .count(r.episodes);
        for ns in [r.total_ns, r.p50_ns, r.p90_ns, r.p99_ns, r.max_ns] {
            ns_cell(&mut t, ns);
        }
        t.count(r.pages_reclaimed);
    }
    t.more(
        st.sites.len().saturating_sub(v.lines),
        "kmemtrace-report --stalls -l 0, or --json",
    );
    t.render(o);
}

fn longest(st: &Stalls, v: View, o: &mut String) {
    if st.longest.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>The longest episodes</h3>");
    let mut t = Table::new(
        "stall-longest",
        &[
            ("Start (s)", true),
            ("Task", false),
            ("CPU", true),
            ("Stalled", true),
            ("Over", true),
            ("Waited in", false),
            ("Call site", false),
            ("Order", true),
            ("GFP", false),
            ("Waits", false),
            ("Ended by", false),
        ],
    );
    for e in st.longest.iter().take(v.lines) {
        t.row()
            .value(e.start_ns as f64, &secs(e.start_ns))
            .text(&task(e.pid, e.comm.as_deref()))
            .count(u64::from(e.cpu));
        ns_cell(&mut t, e.stall_ns);
        ns_cell(&mut t, e.span_ns);
        t.text(&e.kind)
            .code(site(e.callsite.as_deref()))
            .maybe_count(e.order.map(u64::from))
            .code(gfp(e.gfp.as_ref()))
            .text(&crate::text::stalls::waits(e))
            .text(&format!(
                "{}{}",
                e.ended_by,
                if e.uncertain { " (uncertain)" } else { "" }
            ));
    }
    t.render(o);
}

fn background(st: &Stalls, v: View, o: &mut String) {
    if st.background.is_empty() && st.wakers.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>Background reclaim and compaction</h3>");
    if !st.background.is_empty() {
        let mut t = Table::new(
            "stall-background",
            &[
                ("Thread", false),
                ("Node", true),
                ("Wakes", true),
                ("Awake", true),
                ("Orders asked (order: wakes)", false),
            ],
        );
        for b in st.background.iter().take(v.lines) {
            let orders = orders_asked(b, |o| format!("{}: {}", o.order, o.count));
            let awake = format!(
                "{}{}",
                age(b.awake_ns),
                if b.awake_at_end {
                    " (awake at the end)"
                } else {
                    ""
                }
            );
            t.row()
                .text(&b.thread)
                .value(f64::from(b.node), &b.node.to_string())
                .count(b.wakes)
                .value(b.awake_ns as f64, &awake)
                .text(&orders.join(", "));
        }
        t.more(
            st.background.len().saturating_sub(v.lines),
            "kmemtrace-report --json",
        );
        t.render(o);
    }
    if st.wakers.is_empty() {
        return;
    }
    let mut t = Table::new(
        "stall-wakers",
        &[
            ("Woken", false),
            ("By call site", false),
            ("Order", true),
            ("Wakeups", true),
        ],
    );
    for w in st.wakers.iter().take(v.lines) {
        t.row()
            .text(&w.thread)
            .code(site(w.callsite.as_deref()))
            .value(f64::from(w.order), &w.order.to_string())
            .count(w.wakeups);
    }
    t.more(
        st.wakers.len().saturating_sub(v.lines),
        "kmemtrace-report --json",
    );
    t.render(o);
}

fn oom_kills(st: &Stalls, v: View, o: &mut String) {
    if st.oom_kills.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>OOM kills</h3>");
    let mut t = Table::new(
        "stall-oom-kills",
        &[
            ("Time (s)", true),
            ("Victim", false),
            ("Victim RSS (kB)", true),
            ("For", false),
            ("Call site", false),
            ("Order", true),
            ("GFP", false),
            ("Stalled before", true),
            ("Over", true),
            ("Phases before", true),
            ("Reaped in", true),
        ],
    );
    for k in st.oom_kills.iter().take(v.lines) {
        t.row()
            .value(k.ts_ns as f64, &secs(k.ts_ns))
            .text(&task(k.victim_pid, k.victim_comm.as_deref()))
            .maybe_count(k.victim_rss_kb)
            .text(&task(k.killer_pid, k.killer_comm.as_deref()))
            .code(site(k.callsite.as_deref()))
            .maybe_count(k.order.map(u64::from))
            .code(gfp(k.gfp.as_ref()));
        ns_cell(&mut t, k.stalled_ns);
        ns_cell(&mut t, k.waited_ns);
        t.count(k.phases_before);
        match k.reaped_ns {
            Some(ns) => ns_cell(&mut t, ns),
            None => t.value(-1.0, "-"),
        };
    }
    t.more(
        st.oom_kills.len().saturating_sub(v.lines),
        "kmemtrace-report --json",
    );
    t.render(o);
}

fn shrinkers(st: &Stalls, v: View, o: &mut String) {
    if st.shrinkers.is_empty() {
        return;
    }
    let _ = write!(o, "<h3>Shrinkers</h3>");
    let mut t = Table::new(
        "stall-shrinkers",
        &[
            ("Shrinker", false),
            ("Calls", true),
            ("Scanned", true),
            ("Freed", true),
            ("Time", true),
        ],
    );
    for r in st.shrinkers.iter().take(v.lines) {
        t.row()
            .code(&r.shrinker)
            .count(r.calls)
            .count(r.scanned)
            .count(r.freed);
        ns_cell(&mut t, r.ns);
    }
    t.more(
        st.shrinkers.len().saturating_sub(v.lines),
        "kmemtrace-report --json",
    );
    t.render(o);
}

fn notes(st: &Stalls, o: &mut String) {
    let u = &st.unpaired;
    if u.ends_without_begin + u.begins_without_end + u.open_at_end > 0 {
        note(
            o,
            &format!(
                "Unpaired: {} ends without a begin (before the capture or lost), {} begins without an end, {} episodes open at the end.",
                thousands(u.ends_without_begin),
                thousands(u.begins_without_end),
                thousands(u.open_at_end)
            ),
        );
    }
    if !st.not_recorded.is_empty() {
        note(
            o,
            &format!(
                "Not in the log (the kernel lacks them, or they were not recorded): {}.",
                st.not_recorded.join(" ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bins run from the lowest bucket to the highest, the empty
    /// ones between drawn as such, each counting its bucket.
    #[test]
    fn histogram_bins_are_contiguous_powers_of_two() {
        let h = [
            HistBucket {
                below_ns: 1 << 12,
                count: 3,
            },
            HistBucket {
                below_ns: 1 << 15,
                count: 1,
            },
        ];
        let b = bins(&h);
        let labels: Vec<&str> = b.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(labels, ["<4us", "<8us", "<16us", "<33us"]);
        let counts: Vec<u64> = b.iter().map(|x| x.1).collect();
        assert_eq!(counts, [3, 0, 0, 1]);
        assert_eq!(b[0].2, "3 episodes stalled 2.048 us to 4.096 us");
        assert_eq!(bins(&[]), Vec::new());
    }

    /// A millisecond's view, `lines` rows a table.
    fn view(lines: usize) -> View {
        View {
            span: Span {
                start_ns: 0,
                end_ns: 1_000_000,
            },
            lines,
        }
    }

    /// A damaged log's thousand nodes, each woken for a thousand orders:
    /// the rows asked for, each with its first orders.
    #[test]
    fn background_rows_keep_to_the_lines_asked_for() {
        let st = crate::text::stalls::tests::many_rows();
        let mut o = String::new();
        let v = view(10);
        background(&st, v, &mut o);
        assert!(o.len() < 150_000, "{} bytes", o.len());
        assert_eq!(o.matches("+984 more").count(), 10);
        assert_eq!(o.matches("990 more rows").count(), 2, "{o}");
    }

    /// Stall events with no episode (a kcompactd's sleep): the section
    /// says nothing stalled, and draws no empty figure.
    #[test]
    fn no_episode_no_figure() {
        let st = Stalls {
            events: 1,
            ..Default::default()
        };
        let mut o = String::new();
        let v = view(20);
        render(&st, v, &mut o);
        assert!(o.contains("Allocation stalls"));
        assert!(o.contains("No allocation stalled"));
        assert!(!o.contains("<figure"), "{o}");
    }
}
