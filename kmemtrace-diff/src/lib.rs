//! Two captures compared: the figures of `kmemtrace-report --json` (the
//! documented contract, so a stored baseline needs no log), per call site,
//! per cache and in total, with absolute and relative change and rates per
//! second of capture. Call sites are keyed by function (the `+0xoff` taken
//! off), so captures of different kernels and architectures compare.
#![forbid(unsafe_code)]

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

pub mod load;

/// The figures compared, with their `kmemtrace-report --json` keys: in
/// `summary` for the totals, in each row for call sites and caches.
pub const TOTAL_METRICS: [(&str, &str); 8] = [
    ("hits", "alloc_events"),
    ("req", "bytes_requested"),
    ("bytes", "bytes_allocated"),
    ("waste", "bytes_wasted"),
    ("cross_cpu_frees", "cross_cpu_frees"),
    ("live_objects", "live_objects"),
    ("live_bytes", "live_bytes"),
    ("failed", "failed_allocs"),
];
pub const ROW_METRICS: [(&str, &str); 7] = [
    ("hits", "hits"),
    ("req", "bytes_req"),
    ("bytes", "bytes_alloc"),
    ("waste", "bytes_wasted"),
    ("cross_cpu_frees", "cross_cpu_frees"),
    ("live_objects", "live_objects"),
    ("live_bytes", "live_bytes"),
];

/// One side of the comparison: a report document and its length.
pub struct Side {
    pub name: String,
    pub report: Value,
}

impl Side {
    /// Seconds of capture (at least a microsecond, so rates stay finite).
    pub fn seconds(&self) -> f64 {
        let ns = self.report["capture"]["duration_ns"].as_u64().unwrap_or(0);
        (ns as f64 / 1e9).max(1e-6)
    }
}

/// Where a figure belongs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Total,
    Callsite,
    Cache,
}

/// One figure on both sides.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub scope: Scope,
    /// The function (call sites), the cache or size class, `total`.
    pub name: String,
    pub metric: &'static str,
    /// `None`: absent on that side (a new or vanished call site or cache).
    pub base: Option<u64>,
    pub new: Option<u64>,
    pub delta: i128,
    /// `100 * delta / base`; `None` where base is absent or 0.
    pub pct: Option<f64>,
    pub base_per_s: Option<f64>,
    pub new_per_s: Option<f64>,
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub schema: &'static str,
    pub base: String,
    pub new: String,
    pub base_seconds: f64,
    pub new_seconds: f64,
    /// Every figure that changed, the largest change first.
    pub changes: Vec<Change>,
    pub new_callsites: Vec<String>,
    pub vanished_callsites: Vec<String>,
}

pub const SCHEMA: &str = "kmemtrace-diff/1";

/// A call site's function: `name+0xoff` without the offset.
pub fn function_of(callsite: &str) -> &str {
    callsite.split_once("+0x").map_or(callsite, |(f, _)| f)
}

/// Rows of a report array by name, with their figures added up (several
/// offsets of one function, or one cache in `caches` and `size_classes`).
fn rows(
    report: &Value,
    arrays: &[&str],
    key: fn(&Value) -> Option<String>,
) -> BTreeMap<String, BTreeMap<&'static str, u64>> {
    let mut out: BTreeMap<String, BTreeMap<&'static str, u64>> = BTreeMap::new();
    for a in arrays {
        for r in report[*a].as_array().into_iter().flatten() {
            let Some(name) = key(r) else { continue };
            let e = out.entry(name).or_default();
            for (metric, k) in ROW_METRICS {
                *e.entry(metric).or_insert(0) += r[k].as_u64().unwrap_or(0);
            }
        }
    }
    out
}

fn callsite_key(r: &Value) -> Option<String> {
    // Sites that only free have no allocation figures to compare.
    if r["hits"].as_u64().unwrap_or(0) == 0 && r["live_objects"].as_u64().unwrap_or(0) == 0 {
        return None;
    }
    r["callsite"].as_str().map(|c| function_of(c).to_string())
}

fn cache_key(r: &Value) -> Option<String> {
    r["name"].as_str().map(str::to_string)
}

fn change(
    scope: Scope,
    name: &str,
    metric: &'static str,
    b: Option<u64>,
    n: Option<u64>,
    sb: f64,
    sn: f64,
) -> Option<Change> {
    let delta = i128::from(n.unwrap_or(0)) - i128::from(b.unwrap_or(0));
    if delta == 0 && b.is_some() == n.is_some() {
        return None;
    }
    Some(Change {
        scope,
        name: name.to_string(),
        metric,
        base: b,
        new: n,
        delta,
        pct: b
            .filter(|&b| b > 0)
            .map(|b| delta as f64 * 100.0 / b as f64),
        base_per_s: b.map(|b| b as f64 / sb),
        new_per_s: n.map(|n| n as f64 / sn),
    })
}

/// Compares `base` with `new`.
pub fn diff(base: &Side, new: &Side) -> Diff {
    let (sb, sn) = (base.seconds(), new.seconds());
    let mut changes = Vec::new();
    for (metric, k) in TOTAL_METRICS {
        let b = base.report["summary"][k].as_u64();
        let n = new.report["summary"][k].as_u64();
        changes.extend(change(Scope::Total, "total", metric, b, n, sb, sn));
    }
    let mut appeared = Vec::new();
    let mut vanished = Vec::new();
    for (scope, arrays, key) in [
        (
            Scope::Callsite,
            &["callsites"][..],
            callsite_key as fn(&Value) -> Option<String>,
        ),
        (Scope::Cache, &["caches", "size_classes"][..], cache_key),
    ] {
        let b = rows(&base.report, arrays, key);
        let n = rows(&new.report, arrays, key);
        let names: std::collections::BTreeSet<&String> = b.keys().chain(n.keys()).collect();
        for name in names {
            let (rb, rn) = (b.get(name), n.get(name));
            if scope == Scope::Callsite {
                match (rb, rn) {
                    (None, Some(_)) => appeared.push(name.clone()),
                    (Some(_), None) => vanished.push(name.clone()),
                    _ => {}
                }
            }
            for (metric, _) in ROW_METRICS {
                let get = |r: Option<&BTreeMap<&str, u64>>| {
                    r.map(|m| m.get(metric).copied().unwrap_or(0))
                };
                changes.extend(change(
                    scope.clone(),
                    name,
                    metric,
                    get(rb),
                    get(rn),
                    sb,
                    sn,
                ));
            }
        }
    }
    changes.sort_by(|a, b| {
        b.delta
            .unsigned_abs()
            .cmp(&a.delta.unsigned_abs())
            .then_with(|| (&a.scope, &a.name, a.metric).cmp(&(&b.scope, &b.name, b.metric)))
    });
    Diff {
        schema: SCHEMA,
        base: base.name.clone(),
        new: new.name.clone(),
        base_seconds: sb,
        new_seconds: sn,
        changes,
        new_callsites: appeared,
        vanished_callsites: vanished,
    }
}
