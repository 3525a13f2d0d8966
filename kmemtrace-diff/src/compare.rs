//! Two groups of captures compared figure by figure. A group is one or
//! more captures of the same build (runs of one test); its value for a
//! figure is the median of its captures, and with two or more baseline
//! captures their range is the noise: a change whose new value stays
//! inside it is not flagged.

use crate::figures::{self, Figures, Key, Kind, Scope};
use serde::{Serialize, Serializer};
use std::collections::BTreeSet;

/// One capture: its name, length and figures.
pub struct Capture {
    pub name: String,
    pub seconds: f64,
    /// `release machine` of the recorded kernel.
    pub kernel: String,
    pub figures: Figures,
    /// The report's `filters`: what was selected.
    pub filters: kmemtrace_analysis::model::Filters,
    /// Why its figures are not a whole capture's, if they are not: a gate
    /// cannot stand on them.
    pub partial: Option<Partial>,
}

/// Why a capture's figures are not a whole capture's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Partial {
    /// Cut short or damaged: what could be read (exit 5), and why.
    Damaged(String),
    /// Whole, but without a kmem event (exit 3).
    NoKmemEvents,
}

impl std::fmt::Display for Partial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Partial::Damaged(why) => f.write_str(why),
            Partial::NoKmemEvents => f.write_str("no kmem events"),
        }
    }
}

/// Captures of one side.
pub struct Group {
    pub captures: Vec<Capture>,
}

impl Group {
    /// The median length, in seconds.
    pub fn seconds(&self) -> f64 {
        median(self.captures.iter().map(|c| c.seconds).collect()).unwrap_or(0.0)
    }

    /// Each capture's value of `key`, where the group has that row at all:
    /// a row seen in some captures counts 0 in the others (a call site not
    /// reached in one run), except for ratios, which have no value there.
    pub fn values(&self, key: &Key, kind: Kind) -> Vec<f64> {
        self.captures
            .iter()
            .filter_map(|c| match c.figures.get(key) {
                Some(&v) => Some(v),
                None if kind == Kind::Ratio => None,
                None => Some(0.0),
            })
            .collect()
    }

    pub fn has(&self, key: &Key) -> bool {
        self.captures.iter().any(|c| c.figures.contains_key(key))
    }

    /// Each capture's rate per second of `key`.
    pub fn rates(&self, key: &Key) -> Vec<f64> {
        self.captures
            .iter()
            .map(|c| c.figures.get(key).copied().unwrap_or(0.0) / c.seconds.max(1e-6))
            .collect()
    }
}

/// The median (the mean of the two middle values for an even count).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Lowest and highest of two or more values.
pub fn spread(v: &[f64]) -> Option<[f64; 2]> {
    (v.len() >= 2).then(|| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        [lo, hi]
    })
}

/// `v` as an integer, where it is a whole number an f64 holds exactly.
pub fn whole(v: f64) -> Option<i64> {
    (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
}

/// Writes whole numbers as JSON integers, the rest as they are.
pub fn number<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    match whole(*v) {
        Some(i) => s.serialize_i64(i),
        None => s.serialize_f64(*v),
    }
}

/// [`number`] for an optional figure.
pub fn opt_number<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => number(v, s),
        None => s.serialize_none(),
    }
}

/// [`number`] for an optional `[low, high]`.
pub fn opt_pair<S: Serializer>(v: &Option<[f64; 2]>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeTuple;
    match v {
        Some([lo, hi]) => {
            struct N(f64);
            impl Serialize for N {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    number(&self.0, s)
                }
            }
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(&N(*lo))?;
            t.serialize_element(&N(*hi))?;
            t.end()
        }
        None => s.serialize_none(),
    }
}

/// One figure on both sides.
#[derive(Clone, Debug, Serialize)]
pub struct Change {
    pub scope: Scope,
    /// The function (call sites), cache, order, or `total`.
    pub name: String,
    pub metric: String,
    /// The median over the side's captures; `None`: no capture of that side
    /// has the row (a new or vanished call site or cache).
    #[serde(serialize_with = "opt_number")]
    pub base: Option<f64>,
    #[serde(serialize_with = "opt_number")]
    pub new: Option<f64>,
    #[serde(serialize_with = "number")]
    pub delta: f64,
    /// `100 * delta / base`; `None` where either side is absent or base
    /// is 0.
    pub pct: Option<f64>,
    /// Median rates per second (counts only).
    pub base_per_s: Option<f64>,
    pub new_per_s: Option<f64>,
    /// Lowest and highest over the side's captures (two or more).
    #[serde(serialize_with = "opt_pair")]
    pub base_spread: Option<[f64; 2]>,
    #[serde(serialize_with = "opt_pair")]
    pub new_spread: Option<[f64; 2]>,
    /// The new value lies outside the baseline's spread; `None` with one
    /// baseline capture (no noise known).
    pub outside_noise: Option<bool>,
}

impl Change {
    /// The figure differs (a row on one side only counts 0 on the other:
    /// a new row whose figure is 0 is no change).
    pub fn changed(&self) -> bool {
        self.delta != 0.0
    }

    /// Counts as a change for people and gates: outside the noise, or no
    /// noise known.
    pub fn flagged(&self) -> bool {
        self.outside_noise != Some(false)
    }

    /// The highest baseline capture's value (the median with one).
    pub fn base_high(&self) -> f64 {
        self.base_spread
            .map_or(self.base.unwrap_or(0.0), |[_, hi]| hi)
    }
}

/// Figure `key` of the two groups, changed or not; `None` for a metric
/// this version does not know.
pub fn compare(base: &Group, new: &Group, key: &Key) -> Option<Change> {
    let (kind, _) = figures::lookup(&key.metric)?;
    let (hb, hn) = (base.has(key), new.has(key));
    let (vb, vn) = (base.values(key, kind), new.values(key, kind));
    let b = if hb { median(vb.clone()) } else { None };
    let n = if hn { median(vn.clone()) } else { None };
    let delta = n.unwrap_or(0.0) - b.unwrap_or(0.0);
    let base_spread = if hb { spread(&vb) } else { None };
    let outside_noise = base_spread.map(|[lo, hi]| {
        let v = n.unwrap_or(0.0);
        v < lo || v > hi
    });
    let rate = |g: &Group, has: bool| {
        (kind == Kind::Count && has)
            .then(|| median(g.rates(key)))
            .flatten()
    };
    Some(Change {
        scope: key.scope,
        name: key.name.clone(),
        metric: key.metric.clone(),
        base: b,
        new: n,
        delta,
        pct: b
            .filter(|&b| b != 0.0 && n.is_some())
            .map(|b| 100.0 * delta / b),
        base_per_s: rate(base, hb),
        new_per_s: rate(new, hn),
        base_spread,
        new_spread: if hn { spread(&vn) } else { None },
        outside_noise,
    })
}

/// Every figure that changed, unsorted.
pub fn changes(base: &Group, new: &Group) -> Vec<Change> {
    let keys: BTreeSet<&Key> = base
        .captures
        .iter()
        .chain(&new.captures)
        .flat_map(|c| c.figures.keys())
        .collect();
    keys.into_iter()
        .filter_map(|k| compare(base, new, k))
        .filter(Change::changed)
        .collect()
}

/// Row names of `scope` the new group has and the baseline has not, and
/// the other way round.
pub fn appeared_vanished(base: &Group, new: &Group, scope: Scope) -> (Vec<String>, Vec<String>) {
    let names = |g: &Group| -> BTreeSet<String> {
        g.captures
            .iter()
            .flat_map(|c| c.figures.keys())
            .filter(|k| k.scope == scope && k.metric == "hits")
            .map(|k| k.name.clone())
            .collect()
    };
    let (b, n) = (names(base), names(new));
    (
        n.difference(&b).cloned().collect(),
        b.difference(&n).cloned().collect(),
    )
}

/// Sort keys for `-s`.
pub const SORT_KEYS: [&str; 6] = ["change", "pct", "rate", "scope", "name", "metric"];

/// Sorts by the keys: sizes descending (a new or vanished row's `pct`
/// counts as the largest), names ascending.
pub fn sort(changes: &mut [Change], keys: &[String]) {
    use std::cmp::Ordering;
    let size = |c: &Change, key: &str| -> f64 {
        match key {
            "change" => c.delta.abs(),
            "pct" => c.pct.map_or(f64::INFINITY, f64::abs),
            "rate" => (c.new_per_s.unwrap_or(0.0) - c.base_per_s.unwrap_or(0.0)).abs(),
            _ => 0.0,
        }
    };
    changes.sort_by(|a, b| {
        keys.iter()
            .map(|k| match k.as_str() {
                "scope" => a.scope.cmp(&b.scope),
                "name" => a.name.cmp(&b.name),
                "metric" => a.metric.cmp(&b.metric),
                k => size(b, k).total_cmp(&size(a, k)),
            })
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
            .then_with(|| (a.scope, &a.name, &a.metric).cmp(&(b.scope, &b.name, &b.metric)))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spreads() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        assert_eq!(spread(&[5.0]), None);
        assert_eq!(spread(&[5.0, 2.0, 9.0]), Some([2.0, 9.0]));
    }
}
