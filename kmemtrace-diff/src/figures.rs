//! The figures a comparison looks at, read from the typed report model
//! (what a `kmemtrace-report --json` document deserializes into, its keys
//! documented in `JSON.md`), so a stored baseline and a log analysed here
//! give the same figures. Each has a scope (totals, a slab
//! call site, a cache, a page call site, a page order), a row name and a
//! metric; the metrics are one table, shared by the comparison, the gates'
//! validation and `--help`.

use kmemtrace_analysis::model::{CacheRow, CallsiteRow, PageMisuseReport, PageReport, Report};
use kmemtrace_analysis::page_callers::base_name;
use kmemtrace_analysis::passes::misuse::Misuse;
use serde::Serialize;
use std::collections::BTreeMap;

/// Where a figure belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Total,
    Callsite,
    Cache,
    PageCallsite,
    Order,
    /// An allocation stall's call site and order (`function order N`).
    StallSite,
}

impl Scope {
    pub fn id(self) -> &'static str {
        match self {
            Scope::Total => "total",
            Scope::Callsite => "callsite",
            Scope::Cache => "cache",
            Scope::PageCallsite => "page_callsite",
            Scope::Order => "order",
            Scope::StallSite => "stall_site",
        }
    }
}

/// How a metric behaves over time, which says what comparing it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Events or bytes over the capture: it grows with the capture's
    /// length, so it has a rate per second.
    Count,
    /// A state at the end (live objects, leaks) or a peak: no rate.
    Level,
    /// A percentage of two counts (`frag_pct`): no rate; recomputed from
    /// its parts wherever rows are added up.
    Ratio,
}

impl Kind {
    /// The kind as the Parquet export's `figures.parquet` names it.
    pub fn id(self) -> &'static str {
        match self {
            Kind::Count => "count",
            Kind::Level => "level",
            Kind::Ratio => "ratio",
        }
    }
}

/// A metric: its name (as gates and `-m` spell it), kind, scopes and meaning.
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub scopes: &'static [Scope],
    pub what: &'static str,
}

use Scope::{Cache, Callsite, Order, PageCallsite, StallSite, Total};
const SLAB_ROWS: &[Scope] = &[Total, Callsite, Cache];

/// Every metric but the misuse counts (`misuse:KIND`, `page_misuse:KIND`).
pub const METRICS: &[Metric] = &[
    m(
        "hits",
        Kind::Count,
        &[Total, Callsite, Cache, PageCallsite, Order],
        "allocations (slab; page allocations for page call sites and orders)",
    ),
    m("req", Kind::Count, SLAB_ROWS, "bytes requested"),
    m(
        "bytes",
        Kind::Count,
        &[Total, Callsite, Cache, PageCallsite],
        "bytes allocated (page_size << order for page call sites)",
    ),
    m(
        "waste",
        Kind::Count,
        SLAB_ROWS,
        "bytes allocated minus requested",
    ),
    m(
        "frag_pct",
        Kind::Ratio,
        SLAB_ROWS,
        "internal fragmentation, 100 - 100 * req / bytes",
    ),
    m(
        "frees",
        Kind::Count,
        SLAB_ROWS,
        "objects allocated and freed in the capture",
    ),
    m(
        "cross_cpu_frees",
        Kind::Count,
        SLAB_ROWS,
        "objects freed on another CPU than the allocating one",
    ),
    m(
        "failed",
        Kind::Count,
        &[Total, Callsite],
        "allocations that returned NULL",
    ),
    m(
        "live_objects",
        Kind::Level,
        SLAB_ROWS,
        "objects allocated and not freed at the end",
    ),
    m(
        "live_bytes",
        Kind::Level,
        &[Total, Callsite, Cache, PageCallsite],
        "their bytes (slab; page blocks' bytes for page call sites)",
    ),
    m(
        "peak_live_bytes",
        Kind::Level,
        SLAB_ROWS,
        "the most live bytes at any moment",
    ),
    m(
        "leaks",
        Kind::Level,
        &[Total, Callsite],
        "live objects the report counts as leaks (not freed by an untraced path)",
    ),
    m("leak_bytes", Kind::Level, &[Total, Callsite], "their bytes"),
    m(
        "live_blocks",
        Kind::Level,
        &[Total, PageCallsite, Order],
        "page blocks allocated and not freed at the end",
    ),
    m(
        "page_allocs",
        Kind::Count,
        &[Total],
        "successful page allocations (mm_page_alloc)",
    ),
    m("page_bytes", Kind::Count, &[Total], "their bytes"),
    m(
        "page_frees",
        Kind::Count,
        &[Total],
        "page frees (mm_page_free)",
    ),
    m(
        "page_failures",
        Kind::Count,
        &[Total],
        "page allocations that found no page",
    ),
    m(
        "fallbacks",
        Kind::Count,
        &[Total],
        "external-fragmentation fallbacks (mm_page_alloc_extfrag)",
    ),
    m(
        "fallbacks_fragmenting",
        Kind::Count,
        &[Total],
        "of those, splitting a pageblock between migratetypes",
    ),
    m(
        "stalls",
        Kind::Count,
        &[Total, StallSite],
        "allocation stall episodes (reclaim, compaction, throttling)",
    ),
    m(
        "stall_ns",
        Kind::Count,
        &[Total, StallSite],
        "their time in reclaim, compaction and throttling, ns",
    ),
    m(
        "stall_p99_ns",
        Kind::Level,
        &[StallSite],
        "an episode's p99 stall time, ns (the largest of the site's rows)",
    ),
    m("oom_kills", Kind::Count, &[Total], "OOM killer victims"),
];

const fn m(name: &'static str, kind: Kind, scopes: &'static [Scope], what: &'static str) -> Metric {
    Metric {
        name,
        kind,
        scopes,
        what,
    }
}

/// Where a page misuse kind's count is in `pages.misuse`.
pub type PageMisuseCount = fn(&PageMisuseReport) -> u64;

/// Page misuse kinds (`page_misuse:KIND`), with their count.
pub const PAGE_MISUSE: [(&str, PageMisuseCount); 5] = [
    ("freed_twice", |m| m.freed_twice.count),
    ("allocated_while_live", |m| m.allocated_while_live.count),
    ("freed_with_larger_order", |m| m.freed_with_larger_order),
    ("freed_with_smaller_order", |m| m.freed_with_smaller_order),
    ("freed_unseen", |m| m.freed_unseen.requests),
];

/// The kind and scopes of the metric named `name`: a table entry, or a
/// misuse count: `misuse:KIND` is the slab finding's `certain` in the
/// totals (what a gate can trust) and, per call site, every occurrence
/// whose object was allocated there (the report has no per-site judgement);
/// `page_misuse:KIND` the page finding's count, totals only, informational.
pub fn lookup(name: &str) -> Option<(Kind, &'static [Scope])> {
    if let Some(t) = METRICS.iter().find(|t| t.name == name) {
        return Some((t.kind, t.scopes));
    }
    match name.split_once(':') {
        Some(("misuse", kind)) if Misuse::ALL.iter().any(|k| k.id() == kind) => {
            Some((Kind::Count, &[Total, Callsite][..]))
        }
        Some(("page_misuse", kind)) if PAGE_MISUSE.iter().any(|(k, _)| *k == kind) => {
            Some((Kind::Count, &[Total][..]))
        }
        _ => None,
    }
}

/// Every metric name, for messages and `--help`.
pub fn metric_names() -> Vec<String> {
    let mut v: Vec<String> = METRICS.iter().map(|m| m.name.to_string()).collect();
    v.extend(Misuse::ALL.iter().map(|k| format!("misuse:{}", k.id())));
    v.extend(PAGE_MISUSE.iter().map(|(k, _)| format!("page_misuse:{k}")));
    v
}

/// A figure's place: scope, row name (`total` for totals) and metric.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub scope: Scope,
    pub name: String,
    pub metric: String,
}

/// One capture's figures.
pub type Figures = BTreeMap<Key, f64>;

/// The figure at (`scope`, `name`, `metric`), 0 until something adds to it.
fn at<'f>(f: &'f mut Figures, scope: Scope, name: &str, metric: &str) -> &'f mut f64 {
    let k = Key {
        scope,
        name: name.to_string(),
        metric: metric.to_string(),
    };
    f.entry(k).or_insert(0.0)
}

/// A call site's function, as different kernels and compilers compare:
/// `name.part.0+0xoff [module]` becomes `name [module]` (the offset, the
/// compiler's suffixes and the allocation-profiling wrapper's `_noprof`
/// taken off, as the page-allocator rule reads names).
pub fn function_of(callsite: &str) -> String {
    let (symbol, module) = match callsite.split_once(' ') {
        Some((s, m)) => (s, Some(m)),
        None => (callsite, None),
    };
    let f = symbol.split_once("+0x").map_or(symbol, |(f, _)| f);
    let f = if f.starts_with("0x") { f } else { base_name(f) };
    match module {
        Some(m) => format!("{f} {m}"),
        None => f.to_string(),
    }
}

/// Reads a report's figures.
pub fn read(report: &Report) -> Figures {
    let mut f = Figures::new();
    let s = &report.summary;
    for (metric, v) in [
        ("hits", s.alloc_events),
        ("req", s.bytes_requested),
        ("bytes", s.bytes_allocated),
        ("waste", s.bytes_wasted),
        ("frees", s.matched_frees),
        ("cross_cpu_frees", s.cross_cpu_frees),
        ("failed", s.failed_allocs),
        ("live_objects", s.live_objects),
        ("live_bytes", s.live_bytes),
        ("peak_live_bytes", s.peak_live_bytes),
    ] {
        *at(&mut f, Total, "total", metric) += v as f64;
    }
    *at(&mut f, Total, "total", "leaks") += report.leaks.objects as f64;
    *at(&mut f, Total, "total", "leak_bytes") += report.leaks.bytes as f64;
    for m in &report.misuse {
        *at(&mut f, Total, "total", &format!("misuse:{}", m.kind)) += m.certain as f64;
    }
    slab_rows(report, &mut f);
    pages(&report.pages, &mut f);
    stalls(&report.sections.stalls, &mut f);
    ratios(&mut f);
    f
}

/// A slab call site's row figures, by metric.
fn callsite_metrics(r: &CallsiteRow) -> [(&'static str, u64); 10] {
    [
        ("hits", r.hits),
        ("req", r.bytes_req),
        ("bytes", r.bytes_alloc),
        ("waste", r.bytes_wasted),
        ("frees", r.frees),
        ("cross_cpu_frees", r.cross_cpu_frees),
        ("failed", r.failed),
        ("live_objects", r.live_objects),
        ("live_bytes", r.live_bytes),
        ("peak_live_bytes", r.peak_live_bytes),
    ]
}

/// A cache's (or size class's) row figures: a call site's but `failed`.
fn cache_metrics(r: &CacheRow) -> [(&'static str, u64); 9] {
    [
        ("hits", r.hits),
        ("req", r.bytes_req),
        ("bytes", r.bytes_alloc),
        ("waste", r.bytes_wasted),
        ("frees", r.frees),
        ("cross_cpu_frees", r.cross_cpu_frees),
        ("live_objects", r.live_objects),
        ("live_bytes", r.live_bytes),
        ("peak_live_bytes", r.peak_live_bytes),
    ]
}

/// Adds one row's figures to the row `name` of `scope`: several rows of
/// one name add up, but for the peak, the largest of theirs.
fn add_row(f: &mut Figures, scope: Scope, name: &str, metrics: &[(&str, u64)]) {
    for &(metric, v) in metrics {
        let e = at(f, scope, name, metric);
        if metric == "peak_live_bytes" {
            *e = e.max(v as f64);
        } else {
            *e += v as f64;
        }
    }
}

/// Call sites (by function: several offsets add up) and caches (`caches`
/// and `size_classes` by name). A row's peak is the largest of its parts'.
fn slab_rows(report: &Report, f: &mut Figures) {
    for r in &report.callsites {
        // Sites that only free have no allocation figures.
        if r.hits == 0 && r.live_objects == 0 {
            continue;
        }
        let name = function_of(&r.callsite);
        // A site with no misuse or leak has those figures at 0 (not
        // absent), so a change to 0 is no vanished row.
        let zero = Misuse::ALL
            .iter()
            .map(|k| format!("misuse:{}", k.id()))
            .chain(["leaks".to_string(), "leak_bytes".to_string()]);
        for metric in zero {
            at(f, Callsite, &name, &metric);
        }
        for (kind, &n) in &r.misuse {
            *at(f, Callsite, &name, &format!("misuse:{kind}")) += n as f64;
        }
        add_row(f, Callsite, &name, &callsite_metrics(r));
    }
    for r in report.caches.iter().chain(&report.size_classes) {
        add_row(f, Cache, &r.name, &cache_metrics(r));
    }
    for g in &report.leaks.groups {
        let name = function_of(&g.callsite);
        *at(f, Callsite, &name, "leaks") += g.objects as f64;
        *at(f, Callsite, &name, "leak_bytes") += g.bytes as f64;
    }
}

/// The page half: totals, call sites by function, orders.
fn pages(p: &PageReport, f: &mut Figures) {
    let mut put = |scope, name: &str, metric: &str, v: u64| *at(f, scope, name, metric) += v as f64;
    for (metric, v) in [
        ("page_allocs", p.allocations.requests),
        ("page_bytes", p.allocations.bytes),
        ("page_frees", p.frees.requests),
        ("page_failures", p.allocation_failures),
        ("live_blocks", p.alloc_only.requests),
        ("fallbacks", p.fallbacks_total),
        ("fallbacks_fragmenting", p.fallbacks_fragmenting),
    ] {
        put(Total, "total", metric, v);
    }
    for (kind, count) in PAGE_MISUSE {
        put(
            Total,
            "total",
            &format!("page_misuse:{kind}"),
            count(&p.misuse),
        );
    }
    for r in &p.callsites {
        let name = function_of(&r.callsite);
        for (metric, v) in [
            ("hits", r.hits),
            ("bytes", r.bytes),
            ("live_blocks", r.live_blocks),
            ("live_bytes", r.live_bytes),
        ] {
            put(PageCallsite, &name, metric, v);
        }
    }
    for (rows, metric) in [
        (&p.by_order_migratetype, "hits"),
        (&p.live_by_order_migratetype, "live_blocks"),
    ] {
        for r in rows {
            // The document's numbers: they saturate.
            let all = r
                .by_migratetype
                .iter()
                .fold(0u64, |a, &n| a.saturating_add(n));
            put(Order, &r.order, metric, all);
        }
    }
}

/// Allocation stalls, where the log recorded them (a capture without has
/// no such figures, rather than zeros it did not measure): totals, and per
/// call site (by function) and order. Rows of one site and order with
/// other GFP flags, task names or kinds add up; their p99 is the largest.
fn stalls(st: &kmemtrace_analysis::model::Stalls, f: &mut Figures) {
    if st.is_empty() {
        return;
    }
    *at(f, Total, "total", "stalls") += st.episodes as f64;
    *at(f, Total, "total", "stall_ns") += st.stall_ns as f64;
    *at(f, Total, "total", "oom_kills") += st.oom_kills.len() as f64;
    for r in &st.sites {
        let site = r
            .callsite
            .as_deref()
            .map_or_else(|| "-".into(), function_of);
        let order = r.order.map_or_else(|| "-".into(), |o| o.to_string());
        let name = format!("{site} order {order}");
        *at(f, StallSite, &name, "stalls") += r.episodes as f64;
        *at(f, StallSite, &name, "stall_ns") += r.total_ns as f64;
        let p99 = at(f, StallSite, &name, "stall_p99_ns");
        *p99 = p99.max(r.p99_ns as f64);
    }
}

/// `frag_pct` of every row with bytes, from its added-up parts.
fn ratios(f: &mut Figures) {
    let rows: Vec<(Scope, String, f64, f64)> = f
        .iter()
        .filter(|(k, _)| k.metric == "bytes" && SLAB_ROWS.contains(&k.scope))
        .map(|(k, &bytes)| {
            let req_key = Key {
                metric: "req".into(),
                ..k.clone()
            };
            (
                k.scope,
                k.name.clone(),
                f.get(&req_key).copied().unwrap_or(0.0),
                bytes,
            )
        })
        .collect();
    for (scope, name, req, bytes) in rows {
        let pct = if bytes > 0.0 {
            100.0 - 100.0 * req / bytes
        } else {
            0.0
        };
        *at(f, scope, &name, "frag_pct") = pct;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_sites_compare_by_function_and_module() {
        assert_eq!(function_of("alloc_pipe_info+0x4a"), "alloc_pipe_info");
        assert_eq!(
            function_of("ext4_fill_super+0x1c0 [ext4]"),
            "ext4_fill_super [ext4]"
        );
        assert_eq!(function_of("0xffffffffc0123456"), "0xffffffffc0123456");
        assert_eq!(function_of("-"), "-");
    }

    #[test]
    fn every_metric_is_known_and_misuse_kinds_come_from_the_analysis() {
        for m in METRICS {
            assert_eq!(lookup(m.name).map(|l| l.0), Some(m.kind));
        }
        assert!(lookup("misuse:double_free").is_some());
        assert!(lookup("page_misuse:freed_twice").is_some());
        assert!(lookup("misuse:freed_twice").is_none());
        assert!(lookup("hitz").is_none());
        assert_eq!(metric_names().len(), METRICS.len() + 8 + PAGE_MISUSE.len());
    }
}
