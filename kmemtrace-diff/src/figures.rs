//! The figures a comparison looks at, read from a `kmemtrace-report --json`
//! document (its documented contract, `JSON.md`), so a stored baseline and a
//! log analysed here give the same figures. Each has a scope (totals, a slab
//! call site, a cache, a page call site, a page order), a row name and a
//! metric; the metrics are one table, shared by the comparison, the gates'
//! validation and `--help`.

use kmemtrace_analysis::page_callers::base_name;
use kmemtrace_analysis::passes::misuse::Misuse;
use serde::Serialize;
use serde_json::Value;
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
}

impl Scope {
    pub fn id(self) -> &'static str {
        match self {
            Scope::Total => "total",
            Scope::Callsite => "callsite",
            Scope::Cache => "cache",
            Scope::PageCallsite => "page_callsite",
            Scope::Order => "order",
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

/// A metric: its name (as gates and `-m` spell it), kind, scopes and meaning.
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub scopes: &'static [Scope],
    pub what: &'static str,
}

use Scope::{Cache, Callsite, Order, PageCallsite, Total};
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
];

const fn m(name: &'static str, kind: Kind, scopes: &'static [Scope], what: &'static str) -> Metric {
    Metric {
        name,
        kind,
        scopes,
        what,
    }
}

/// Page misuse kinds (`page_misuse:KIND`), with where `pages.misuse` has them.
pub const PAGE_MISUSE: [(&str, &str); 5] = [
    ("freed_twice", "/freed_twice/count"),
    ("allocated_while_live", "/allocated_while_live/count"),
    ("freed_with_larger_order", "/freed_with_larger_order"),
    ("freed_with_smaller_order", "/freed_with_smaller_order"),
    ("freed_unseen", "/freed_unseen/requests"),
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

fn u(v: &Value) -> f64 {
    v.as_u64().unwrap_or(0) as f64
}

/// Reads a report document's figures.
pub fn read(report: &Value) -> Figures {
    let mut f = Figures::new();
    let s = &report["summary"];
    for (metric, key) in [
        ("hits", "alloc_events"),
        ("req", "bytes_requested"),
        ("bytes", "bytes_allocated"),
        ("waste", "bytes_wasted"),
        ("frees", "matched_frees"),
        ("cross_cpu_frees", "cross_cpu_frees"),
        ("failed", "failed_allocs"),
        ("live_objects", "live_objects"),
        ("live_bytes", "live_bytes"),
        ("peak_live_bytes", "peak_live_bytes"),
    ] {
        *at(&mut f, Total, "total", metric) += u(&s[key]);
    }
    *at(&mut f, Total, "total", "leaks") += u(&report["leaks"]["objects"]);
    *at(&mut f, Total, "total", "leak_bytes") += u(&report["leaks"]["bytes"]);
    for m in report["misuse"].as_array().into_iter().flatten() {
        if let Some(kind) = m["kind"].as_str() {
            *at(&mut f, Total, "total", &format!("misuse:{kind}")) += u(&m["certain"]);
        }
    }
    slab_rows(report, &mut f);
    pages(&report["pages"], &mut f);
    ratios(&mut f);
    f
}

const ROW_METRICS: [(&str, &str); 10] = [
    ("hits", "hits"),
    ("req", "bytes_req"),
    ("bytes", "bytes_alloc"),
    ("waste", "bytes_wasted"),
    ("frees", "frees"),
    ("cross_cpu_frees", "cross_cpu_frees"),
    ("failed", "failed"),
    ("live_objects", "live_objects"),
    ("live_bytes", "live_bytes"),
    ("peak_live_bytes", "peak_live_bytes"),
];

/// Call sites (by function: several offsets add up) and caches (`caches`
/// and `size_classes` by name). A row's peak is the largest of its parts'.
fn slab_rows(report: &Value, f: &mut Figures) {
    for (scope, arrays) in [
        (Callsite, &["callsites"][..]),
        (Cache, &["caches", "size_classes"][..]),
    ] {
        for a in arrays {
            for r in report[*a].as_array().into_iter().flatten() {
                // Sites that only free have no allocation figures.
                if scope == Callsite && u(&r["hits"]) == 0.0 && u(&r["live_objects"]) == 0.0 {
                    continue;
                }
                let name = match scope {
                    Callsite => r["callsite"].as_str().map(function_of),
                    _ => r["name"].as_str().map(str::to_string),
                };
                let Some(name) = name else { continue };
                if scope == Callsite {
                    // A site with no misuse or leak has those figures at
                    // 0 (not absent), so a change to 0 is no vanished row.
                    let zero = Misuse::ALL
                        .iter()
                        .map(|k| format!("misuse:{}", k.id()))
                        .chain(["leaks".to_string(), "leak_bytes".to_string()]);
                    for metric in zero {
                        at(f, scope, &name, &metric);
                    }
                    for (kind, n) in r["misuse"].as_object().into_iter().flatten() {
                        *at(f, scope, &name, &format!("misuse:{kind}")) += u(n);
                    }
                }
                for (metric, key) in ROW_METRICS {
                    if scope == Cache && metric == "failed" {
                        continue;
                    }
                    let e = at(f, scope, &name, metric);
                    if metric == "peak_live_bytes" {
                        *e = e.max(u(&r[key]));
                    } else {
                        *e += u(&r[key]);
                    }
                }
            }
        }
    }
    for g in report["leaks"]["groups"].as_array().into_iter().flatten() {
        let Some(site) = g["callsite"].as_str() else {
            continue;
        };
        let name = function_of(site);
        for (metric, key) in [("leaks", "objects"), ("leak_bytes", "bytes")] {
            *at(f, Callsite, &name, metric) += u(&g[key]);
        }
    }
}

/// The page half: totals, call sites by function, orders.
fn pages(p: &Value, f: &mut Figures) {
    let mut put = |scope, name: &str, metric: &str, v: f64| *at(f, scope, name, metric) += v;
    for (metric, v) in [
        ("page_allocs", &p["allocations"]["requests"]),
        ("page_bytes", &p["allocations"]["bytes"]),
        ("page_frees", &p["frees"]["requests"]),
        ("page_failures", &p["allocation_failures"]),
        ("live_blocks", &p["alloc_only"]["requests"]),
        ("fallbacks", &p["fallbacks_total"]),
        ("fallbacks_fragmenting", &p["fallbacks_fragmenting"]),
    ] {
        put(Total, "total", metric, u(v));
    }
    for (kind, path) in PAGE_MISUSE {
        let v = p["misuse"].pointer(path).map_or(0.0, u);
        put(Total, "total", &format!("page_misuse:{kind}"), v);
    }
    for r in p["callsites"].as_array().into_iter().flatten() {
        let Some(site) = r["callsite"].as_str() else {
            continue;
        };
        let name = function_of(site);
        for (metric, key) in [
            ("hits", "hits"),
            ("bytes", "bytes"),
            ("live_blocks", "live_blocks"),
            ("live_bytes", "live_bytes"),
        ] {
            put(PageCallsite, &name, metric, u(&r[key]));
        }
    }
    for (array, metric) in [
        ("by_order_migratetype", "hits"),
        ("live_by_order_migratetype", "live_blocks"),
    ] {
        for r in p[array].as_array().into_iter().flatten() {
            let order = match &r["order"] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let n: f64 = r["by_migratetype"]
                .as_array()
                .into_iter()
                .flatten()
                .map(u)
                .sum();
            put(Order, &order, metric, n);
        }
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
