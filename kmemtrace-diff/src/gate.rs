//! Gates: rules a new capture must keep, read from a small TOML file, each
//! checked against the comparison and reported with its figures.
//!
//! ```toml
//! [[gate]]
//! metric = "hits"
//! callsite = "alloc_pipe_info*"   # or cache, page_callsite, order, stall_site; none: totals
//! max_increase_pct = 20
//! [[gate]]
//! metric = "misuse:double_free"
//! max = 0
//! ```

use crate::compare::{median, opt_number, opt_pair, spread, whole, Group};
use crate::figures::{self, Key, Kind, Scope};
use serde::{Deserialize, Serialize};
use toml::Spanned;

/// A rule, checked.
#[derive(Clone, Debug, Serialize)]
pub struct Gate {
    pub name: String,
    /// Line of the rule's `metric` in the rules file.
    pub line: usize,
    pub metric: String,
    pub scope: Scope,
    /// Glob on the row's name (`*`, `?`); `None` for the totals.
    pub pattern: Option<String>,
    #[serde(serialize_with = "opt_number")]
    pub max_increase_pct: Option<f64>,
    #[serde(serialize_with = "opt_number")]
    pub max_increase: Option<f64>,
    #[serde(serialize_with = "opt_number")]
    pub max: Option<f64>,
    /// Compare rates per second of capture rather than totals.
    pub per_second: bool,
    /// A pattern that matches no row passes (else it fails: a typo).
    pub allow_no_match: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    #[serde(default)]
    gate: Vec<RawGate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    name: Option<String>,
    metric: Spanned<String>,
    callsite: Option<Spanned<String>>,
    cache: Option<Spanned<String>>,
    page_callsite: Option<Spanned<String>>,
    order: Option<Spanned<toml::Value>>,
    stall_site: Option<Spanned<String>>,
    max_increase_pct: Option<Spanned<f64>>,
    max_increase: Option<Spanned<f64>>,
    max: Option<Spanned<f64>>,
    #[serde(default)]
    per_second: bool,
    #[serde(default)]
    allow_no_match: bool,
}

/// Where a text's lines begin: a rule's line is a search, not a count of
/// the newlines before it (a count per rule is quadratic in the file).
struct Lines(Vec<usize>);

impl Lines {
    fn of(text: &str) -> Lines {
        Lines(text.match_indices('\n').map(|(i, _)| i).collect())
    }

    /// The 1-based line holding byte `at`.
    fn line_of(&self, at: usize) -> usize {
        self.0.partition_point(|&nl| nl < at) + 1
    }
}

/// Reads rules; an error names the file's line and says why.
pub fn parse(file: &str, text: &str) -> Result<Vec<Gate>, String> {
    let lines = Lines::of(text);
    let at = |span: std::ops::Range<usize>, why: String| {
        format!("{file} line {}: {why}", lines.line_of(span.start))
    };
    let raw: RawRules = toml::from_str(text).map_err(|e| match e.span() {
        Some(span) => at(span, e.message().trim().to_string()),
        None => format!("{file}: {}", e.message().trim()),
    })?;
    if raw.gate.is_empty() {
        return Err(format!("{file}: no [[gate]] rule"));
    }
    raw.gate
        .into_iter()
        .map(|g| gate(g, file, &lines))
        .collect()
}

fn gate(g: RawGate, file: &str, lines: &Lines) -> Result<Gate, String> {
    let at = |span: std::ops::Range<usize>, why: String| {
        format!("{file} line {}: {why}", lines.line_of(span.start))
    };
    let metric = g.metric.get_ref().clone();
    let here = g.metric.span();
    let Some((kind, scopes)) = figures::lookup(&metric) else {
        return Err(at(
            here,
            format!(
                "metric \"{metric}\" is not known; metrics: {}",
                figures::metric_names().join(", ")
            ),
        ));
    };
    let order = match g.order {
        None => None,
        Some(o) => {
            let span = o.span();
            let why = "order is a number, 0 to 10 (10: the row of orders 10 and above, `10+`), or a glob on those names";
            match o.into_inner() {
                toml::Value::String(s) => Some(Spanned::new(span, s)),
                toml::Value::Integer(i @ 0..=9) => Some(Spanned::new(span, i.to_string())),
                toml::Value::Integer(10) => Some(Spanned::new(span, "10+".to_string())),
                _ => return Err(at(span, why.into())),
            }
        }
    };
    if let Some(p) = g.callsite.as_ref().filter(|p| p.get_ref().contains("+0x")) {
        return Err(at(
            p.span(),
            "call sites compare by function: leave out the +0x offset".into(),
        ));
    }
    let selectors: Vec<(Scope, Spanned<String>)> = [
        (Scope::Callsite, g.callsite),
        (Scope::Cache, g.cache),
        (Scope::PageCallsite, g.page_callsite),
        (Scope::Order, order),
        (Scope::StallSite, g.stall_site),
    ]
    .into_iter()
    .filter_map(|(s, p)| p.map(|p| (s, p)))
    .collect();
    if let Some((_, second)) = selectors.get(1) {
        return Err(at(
            second.span(),
            "a rule selects one of callsite, cache, page_callsite, order, stall_site (or none, for the totals)"
                .into(),
        ));
    }
    let (scope, pattern) = match selectors.into_iter().next() {
        None => (Scope::Total, None),
        Some((s, p)) => {
            if p.get_ref().trim().is_empty() {
                return Err(at(p.span(), format!("an empty {} pattern", s.id())));
            }
            // A glob costs its length times the name's at worst: a name
            // (a symbol, a cache) is at most a few hundred characters.
            let chars = p.get_ref().chars().count();
            if chars > MAX_PATTERN_CHARS {
                return Err(at(
                    p.span(),
                    format!(
                        "a {} pattern of {chars} characters: at most {MAX_PATTERN_CHARS}",
                        s.id()
                    ),
                ));
            }
            (s, Some(p.into_inner()))
        }
    };
    if !scopes.contains(&scope) {
        let per: Vec<&str> = scopes.iter().map(|s| s.id()).collect();
        return Err(at(
            here,
            format!(
                "metric \"{metric}\" has no figure per {}: it has {}",
                scope.id(),
                per.join(", ")
            ),
        ));
    }
    if g.per_second && kind != Kind::Count {
        return Err(at(
            here,
            format!("metric \"{metric}\" is not a count over time: it has no rate per second"),
        ));
    }
    for limit in [&g.max_increase_pct, &g.max_increase, &g.max]
        .into_iter()
        .flatten()
    {
        if !limit.get_ref().is_finite() || *limit.get_ref() < 0.0 {
            return Err(at(limit.span(), "a limit is a number, 0 or more".into()));
        }
    }
    let get = |l: Option<Spanned<f64>>| l.map(Spanned::into_inner);
    let (max_increase_pct, max_increase, max) =
        (get(g.max_increase_pct), get(g.max_increase), get(g.max));
    if max_increase_pct.is_none() && max_increase.is_none() && max.is_none() {
        return Err(at(
            here,
            "the rule has no limit: give max_increase_pct, max_increase or max".into(),
        ));
    }
    let mut gate = Gate {
        name: g.name.unwrap_or_default(),
        line: lines.line_of(here.start),
        metric,
        scope,
        pattern,
        max_increase_pct,
        max_increase,
        max,
        per_second: g.per_second,
        allow_no_match: g.allow_no_match,
    };
    if gate.name.is_empty() {
        gate.name = gate.describe();
    }
    Ok(gate)
}

impl Gate {
    /// `hits of callsite alloc_pipe_info*: increase <= 20%`.
    pub fn describe(&self) -> String {
        let mut s = self.metric.clone();
        if self.per_second {
            s.push_str(" per second");
        }
        if let Some(p) = &self.pattern {
            s.push_str(&format!(" of {} {p}", self.scope.id()));
        }
        let mut limits = Vec::new();
        if let Some(v) = self.max_increase_pct {
            limits.push(format!("increase <= {v}%"));
        }
        if let Some(v) = self.max_increase {
            limits.push(format!("increase <= {v}"));
        }
        if let Some(v) = self.max {
            limits.push(format!("<= {v}"));
        }
        format!("{s}: {}", limits.join(", "))
    }
}

/// Longest pattern a gate may have.
const MAX_PATTERN_CHARS: usize = 1024;

/// Shell-style glob with `*` and `?`.
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// One row a gate looked at.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    pub name: String,
    /// Median over each side's captures (rates with `per_second`);
    /// `None`: the row is not on that side.
    #[serde(serialize_with = "opt_number")]
    pub base: Option<f64>,
    #[serde(serialize_with = "opt_number")]
    pub new: Option<f64>,
    #[serde(serialize_with = "opt_pair")]
    pub base_spread: Option<[f64; 2]>,
    /// The limits this row breaks, as text; empty when it keeps them.
    pub breaches: Vec<String>,
}

/// A gate's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub gate: Gate,
    pub passed: bool,
    /// Every matching row (the totals' one row without a pattern).
    pub checked: Vec<Checked>,
}

impl Verdict {
    pub fn failures(&self) -> impl Iterator<Item = &Checked> {
        self.checked.iter().filter(|c| !c.breaches.is_empty())
    }
}

/// Checks `gate` on the comparison of `base` with `new`.
pub fn check(gate: &Gate, base: &Group, new: &Group) -> Verdict {
    let mut names: Vec<String> = match &gate.pattern {
        None => vec!["total".into()],
        Some(p) => base
            .captures
            .iter()
            .chain(&new.captures)
            .flat_map(|c| c.figures.keys())
            .filter(|k| k.scope == gate.scope && k.metric == gate.metric && glob(p, &k.name))
            .map(|k| k.name.clone())
            .collect(),
    };
    names.sort();
    names.dedup();
    let checked: Vec<Checked> = names
        .into_iter()
        .map(|name| {
            let key = Key {
                scope: gate.scope,
                name,
                metric: gate.metric.clone(),
            };
            row(gate, base, new, key)
        })
        .collect();
    let matched = !checked.is_empty() || gate.allow_no_match;
    Verdict {
        passed: matched && checked.iter().all(|c| c.breaches.is_empty()),
        gate: gate.clone(),
        checked,
    }
}

fn row(gate: &Gate, base: &Group, new: &Group, key: Key) -> Checked {
    let kind = figures::lookup(&gate.metric).map_or(Kind::Count, |(k, _)| k);
    let values = |g: &Group| -> Vec<f64> {
        if !g.has(&key) {
            Vec::new()
        } else if gate.per_second {
            g.rates(&key)
        } else {
            g.values(&key, kind)
        }
    };
    let (vb, vn) = (values(base), values(new));
    let (b, n) = (median(vb.clone()), median(vn));
    let base_spread = spread(&vb);
    let nv = n.unwrap_or(0.0);
    let delta = nv - b.unwrap_or(0.0);
    // With several baseline captures, an increase within their own spread
    // is noise: it breaks an increase limit only above the highest of them.
    let above_noise = base_spread.is_none_or(|[_, hi]| nv > hi);
    let mut breaches = Vec::new();
    if let Some(max) = gate.max {
        if nv > max {
            breaches.push(format!("{} > max {}", fmt(nv), fmt(max)));
        }
    }
    if let Some(lim) = gate.max_increase {
        if delta > lim && above_noise {
            breaches.push(format!("increase {} > {}", fmt(delta), fmt(lim)));
        }
    }
    if let Some(lim) = gate.max_increase_pct {
        match b.filter(|&b| b > 0.0) {
            Some(b) if above_noise && 100.0 * delta / b > lim => {
                breaches.push(format!(
                    "increase {:.1}% > {}%",
                    100.0 * delta / b,
                    fmt(lim)
                ));
            }
            None if nv > 0.0 && above_noise => {
                let from = if b.is_some() { "0" } else { "none" };
                breaches.push(format!("from {from} to {} (limit {}%)", fmt(nv), fmt(lim)));
            }
            _ => {}
        }
    }
    Checked {
        name: key.name,
        base: b,
        new: n,
        base_spread,
        breaches,
    }
}

/// A figure for messages: whole numbers without decimals.
pub fn fmt(v: f64) -> String {
    whole(v).map_or_else(|| format!("{v:.2}"), |i| i.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_the_shell_does() {
        assert!(glob("alloc_pipe_info*", "alloc_pipe_info"));
        assert!(glob("alloc_pipe_info*", "alloc_pipe_info [pipe]"));
        assert!(glob("*pipe*", "alloc_pipe_info"));
        assert!(glob("kmalloc-?k", "kmalloc-1k"));
        assert!(!glob("kmalloc-?k", "kmalloc-192"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(glob("*", ""));
        assert!(!glob("", "x"));
    }

    #[test]
    fn rules_give_their_lines() {
        let g = parse("r", "\n\n[[gate]]\nmetric = \"hits\"\norder = 3\nmax = 5\n").unwrap();
        assert_eq!(
            (g[0].line, g[0].scope, g[0].pattern.as_deref()),
            (4, Scope::Order, Some("3"))
        );
        assert_eq!(g[0].name, "hits of order 3: <= 5");
        let e = parse("r", "[[gate]]\nmetric = \"hits\"\norder = -1\nmax = 5\n").unwrap_err();
        assert!(e.starts_with("r line 3: order is"), "{e}");
    }

    #[test]
    fn a_pattern_is_at_most_max_pattern_chars() {
        let rule = |n: usize| {
            format!(
                "[[gate]]\nmetric = \"hits\"\ncallsite = \"*{}\"\nmax = 5\n",
                "é".repeat(n - 1)
            )
        };
        assert!(parse("r", &rule(MAX_PATTERN_CHARS)).is_ok());
        let e = parse("r", &rule(MAX_PATTERN_CHARS + 1)).unwrap_err();
        assert!(e.contains("1025 characters: at most 1024"), "{e}");
    }

    #[test]
    fn lines_are_the_newlines_before_plus_one() {
        for text in ["", "a", "\n", "ab\n\ncd\n", "\n\nx"] {
            let lines = Lines::of(text);
            for at in 0..=text.len() + 2 {
                let before = text.as_bytes()[..at.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count();
                assert_eq!(lines.line_of(at), before + 1, "{text:?} at {at}");
            }
        }
    }
}
