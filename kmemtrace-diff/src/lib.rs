//! Captures compared: the figures of the report model, read from a log or
//! from a stored `kmemtrace-report --json` document (the documented
//! contract, so a stored baseline needs no log), per slab call
//! site, cache, page call site, page order and in total, with absolute and
//! relative change, rates per second of capture, the baseline's noise when
//! it has several captures, and gates checked on the result. Call sites are
//! keyed by function (the `+0xoff` taken off), so captures of different
//! kernels and architectures compare.
//!
//! Data flows: [`load`] (a log or a document -> [`compare::Capture`]) ->
//! [`compare`] and [`gate`] -> [`Diff`] -> printers ([`text`], [`junit`],
//! JSON by serde).
#![forbid(unsafe_code)]

use serde::Serialize;

pub mod compare;
pub mod figures;
pub mod gate;
pub mod junit;
pub mod load;
pub mod text;

use compare::{Change, Group};
use figures::Scope;
use gate::{Gate, Verdict};
use kmemtrace_analysis::model::Filters;

pub const SCHEMA: &str = "kmemtrace-diff/1";

/// One capture as the document names it.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureInfo {
    pub name: String,
    pub seconds: f64,
    /// `release machine` of the recorded kernel.
    pub kernel: String,
}

/// One side: its captures and their median length.
#[derive(Clone, Debug, Serialize)]
pub struct SideInfo {
    pub captures: Vec<CaptureInfo>,
    pub seconds: f64,
}

impl SideInfo {
    fn of(g: &Group) -> SideInfo {
        SideInfo {
            captures: g
                .captures
                .iter()
                .map(|c| CaptureInfo {
                    name: c.name.clone(),
                    seconds: c.seconds,
                    kernel: c.kernel.clone(),
                })
                .collect(),
            seconds: g.seconds(),
        }
    }

    /// The captures' names, for titles.
    pub fn label(&self) -> String {
        let names: Vec<&str> = self.captures.iter().map(|c| c.name.as_str()).collect();
        names.join(" + ")
    }
}

/// One new capture (or group of runs) against the baseline.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub new: SideInfo,
    /// Every figure that changed, in the sort order.
    pub changes: Vec<Change>,
    /// Changes inside the baseline's spread (with several baseline
    /// captures): in `changes` with `outside_noise` false.
    pub within_noise: usize,
    pub new_callsites: Vec<String>,
    pub vanished_callsites: Vec<String>,
    pub new_page_callsites: Vec<String>,
    pub vanished_page_callsites: Vec<String>,
    pub gates: Vec<Verdict>,
    pub gates_failed: usize,
    /// Selections (`kmemtrace-report` filters) that differ between the
    /// sides' captures: their figures cover different things.
    pub filters_differ: Vec<String>,
}

/// The filters a person chooses (pids and time windows differ between runs
/// in their values, so only whether they were given counts), each as a
/// value to compare.
fn selection(filters: &Filters) -> Vec<(&'static str, String)> {
    vec![
        ("cpus", format!("{:?}", filters.cpus)),
        ("comm", format!("{:?}", filters.comm)),
        ("callsite", format!("{:?}", filters.callsite)),
        ("min_age_ns", filters.min_age_ns.to_string()),
        ("pids given", filters.pids.is_some().to_string()),
        (
            "time window given",
            (filters.time_start_ns.is_some() || filters.time_end_ns.is_some()).to_string(),
        ),
    ]
}

/// Which selections differ among the captures of both sides.
fn filters_differ(base: &Group, new: &Group) -> Vec<String> {
    let all: Vec<Vec<(&str, String)>> = base
        .captures
        .iter()
        .chain(&new.captures)
        .map(|c| selection(&c.filters))
        .collect();
    let Some(first) = all.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .filter(|(i, _)| all.iter().any(|s| s[*i].1 != first[*i].1))
        .map(|(_, (k, _))| k.to_string())
        .collect()
}

/// The whole comparison: one baseline, one or more new sides.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub schema: &'static str,
    pub generator: String,
    pub base: SideInfo,
    pub sort: Vec<String>,
    pub comparisons: Vec<Comparison>,
    /// Failed gates over all comparisons.
    pub gates_failed: usize,
}

/// Compares each of `news` with `base` and checks `gates` on each.
pub fn diff(base: &Group, news: &[Group], gates: &[Gate], sort: &[String]) -> Diff {
    let comparisons: Vec<Comparison> = news
        .iter()
        .map(|new| {
            let mut changes = compare::changes(base, new);
            compare::sort(&mut changes, sort);
            let (new_callsites, vanished_callsites) =
                compare::appeared_vanished(base, new, Scope::Callsite);
            let (new_page_callsites, vanished_page_callsites) =
                compare::appeared_vanished(base, new, Scope::PageCallsite);
            let verdicts: Vec<Verdict> = gates.iter().map(|g| gate::check(g, base, new)).collect();
            Comparison {
                new: SideInfo::of(new),
                within_noise: changes.iter().filter(|c| !c.flagged()).count(),
                changes,
                new_callsites,
                vanished_callsites,
                new_page_callsites,
                vanished_page_callsites,
                gates_failed: verdicts.iter().filter(|v| !v.passed).count(),
                gates: verdicts,
                filters_differ: filters_differ(base, new),
            }
        })
        .collect();
    Diff {
        schema: SCHEMA,
        generator: format!("kmemtrace-diff {}", env!("CARGO_PKG_VERSION")),
        base: SideInfo::of(base),
        sort: sort.to_vec(),
        gates_failed: comparisons.iter().map(|c| c.gates_failed).sum(),
        comparisons,
    }
}
