//! The comparison as text for people: per new side a table of changes,
//! new and vanished call sites and the gates; with several new sides a
//! summary table, one row each.

use crate::compare::Change;
use crate::figures::Scope;
use crate::gate::{fmt, Verdict};
use crate::{Comparison, Diff, SideInfo};
use kmemtrace_kernel::human::thousands;

/// What to print.
pub struct Options {
    /// Rows of changes per comparison.
    pub lines: usize,
    /// Show changes inside the baseline's spread too.
    pub all: bool,
    /// Only these metrics in the tables of changes (globs; empty: all).
    pub metrics: Vec<String>,
    /// Gate verdicts in colour (a terminal, `NO_COLOR` unset).
    pub color: bool,
}

impl Options {
    /// Whether `-m` keeps `metric`.
    pub fn keeps(&self, metric: &str) -> bool {
        self.metrics.is_empty() || self.metrics.iter().any(|m| crate::gate::glob(m, metric))
    }
}

/// A figure with thousands separators; a fraction (a median of an even
/// number of captures, a percentage) to two places.
fn num(v: f64) -> String {
    let whole = thousands(v.abs().trunc() as u64);
    let sign = if v < 0.0 { "-" } else { "" };
    if v.fract() == 0.0 {
        format!("{sign}{whole}")
    } else {
        let cents = format!("{:.2}", v.abs().fract());
        match cents.strip_prefix("1.") {
            // 0.996 rounds up to the next whole number.
            Some(c) => format!("{sign}{}.{c}", thousands(v.abs().trunc() as u64 + 1)),
            None => format!("{sign}{whole}{}", &cents[1..]),
        }
    }
}

fn signed(v: f64) -> String {
    if v > 0.0 {
        format!("+{}", num(v))
    } else {
        num(v)
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), num)
}

/// A rate: tenths below 100 a second, whole numbers above.
fn rate(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(r) if r.abs() < 100.0 => format!("{r:.1}"),
        Some(r) => num(r.round()),
    }
}

fn pct(c: &Change) -> String {
    match (c.pct, c.base, c.new) {
        (Some(p), _, _) => format!("{p:+.1}%"),
        (None, None, Some(_)) => "new".into(),
        (None, Some(_), None) => "gone".into(),
        _ => "-".into(),
    }
}

fn side(s: &SideInfo) -> String {
    match s.captures.as_slice() {
        [one] => format!("{} ({:.3} s, {})", one.name, one.seconds, one.kernel),
        many => format!(
            "{} captures ({}; median {:.3} s)",
            many.len(),
            s.label(),
            s.seconds
        ),
    }
}

const WIDE: usize = 150;

fn changes_table(o: &mut String, c: &Comparison, noisy: bool, opts: &Options) {
    let shown: Vec<&Change> = c
        .changes
        .iter()
        .filter(|ch| (opts.all || ch.flagged()) && opts.keeps(&ch.metric))
        .collect();
    // Names and metrics as wide as the longest shown (cache names such as
    // `kmalloc-large (order 3, 32768 bytes)` run long), within reason.
    let width = |f: fn(&Change) -> usize, least: usize| {
        shown
            .iter()
            .take(opts.lines)
            .map(|c| f(c))
            .max()
            .unwrap_or(0)
            .clamp(least, 60)
    };
    let nw = width(|c| c.name.chars().count(), 34);
    let mw = width(|c| c.metric.len(), 15);
    let line = |cols: [&str; 9]| {
        format!(
            "{:<13} {:<nw$} {:<mw$} {:>14} {:>14} {:>14} {:>8} {:>11} {:>11}",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8]
        )
    };
    let head = line([
        "scope", "name", "metric", "base", "new", "change", "change%", "base/s", "new/s",
    ]);
    let rule = "-".repeat(head.len() + if noisy { 16 } else { 0 });
    o.push_str(&head);
    o.push_str(if noisy { "  baseline range\n" } else { "\n" });
    o.push_str(&format!("{rule}\n"));
    for ch in shown.iter().take(opts.lines) {
        o.push_str(&line([
            ch.scope.id(),
            &ch.name,
            &ch.metric,
            &opt(ch.base),
            &opt(ch.new),
            &signed(ch.delta),
            &pct(ch),
            &rate(ch.base_per_s),
            &rate(ch.new_per_s),
        ]));
        match ch.base_spread {
            Some([lo, hi]) if noisy => {
                let mark = if ch.flagged() { "" } else { " (noise)" };
                o.push_str(&format!("  {}..{}{mark}\n", num(lo), num(hi)));
            }
            _ => o.push('\n'),
        }
    }
    if shown.is_empty() {
        o.push_str("no figure changed\n");
    } else if shown.len() > opts.lines {
        o.push_str(&format!(
            "... {} more changes (-l)\n",
            shown.len() - opts.lines
        ));
    }
    let hidden = c
        .changes
        .iter()
        .filter(|ch| !ch.flagged() && opts.keeps(&ch.metric))
        .count();
    if noisy && !opts.all && hidden > 0 {
        o.push_str(&format!(
            "{hidden} changes inside the baseline's own spread not shown (--all)\n"
        ));
    }
}

fn gates(o: &mut String, verdicts: &[Verdict], color: bool) {
    use kmemtrace_cli::colour::{self, paint};
    if verdicts.is_empty() {
        return;
    }
    let failed = verdicts.iter().filter(|v| !v.passed).count();
    o.push_str(&format!(
        "\nGates: {} of {} failed\n",
        failed,
        verdicts.len()
    ));
    for v in verdicts {
        o.push_str(&format!(
            "  {}  {}  (rules line {})\n",
            if v.passed {
                paint("pass", colour::GREEN, color)
            } else {
                paint("FAIL", colour::RED, color)
            },
            v.gate.name,
            v.gate.line
        ));
        if v.checked.is_empty() {
            o.push_str(if v.passed {
                "        no row matched in either capture (allow_no_match)\n"
            } else {
                "        no row matched in either capture: call sites are named by function, orders 0..9 and 10+\n"
            });
        }
        for c in v.failures() {
            let spread = c
                .base_spread
                .map(|[lo, hi]| format!(" (baseline {}..{})", fmt(lo), fmt(hi)))
                .unwrap_or_default();
            o.push_str(&format!(
                "        {}: {} -> {}{spread}: {}\n",
                c.name,
                opt(c.base),
                opt(c.new),
                c.breaches.join("; ")
            ));
        }
    }
}

fn comparison(o: &mut String, d: &Diff, c: &Comparison, opts: &Options) {
    o.push_str(&format!(
        "kmemtrace-diff: {}\n            -> {}\n\n",
        side(&d.base),
        side(&c.new)
    ));
    if !c.filters_differ.is_empty() {
        o.push_str(&format!(
            "The captures were analysed with different selections ({}): their figures cover different things.\n\n",
            c.filters_differ.join(", ")
        ));
    }
    let noisy = d.base.captures.len() > 1;
    changes_table(o, c, noisy, opts);
    for (what, list) in [
        ("New call sites", &c.new_callsites),
        ("Vanished call sites", &c.vanished_callsites),
        ("New page call sites", &c.new_page_callsites),
        ("Vanished page call sites", &c.vanished_page_callsites),
    ] {
        if !list.is_empty() {
            o.push_str(&format!("\n{what}: {}\n", list.join(", ")));
        }
    }
    gates(o, &c.gates, opts.color);
}

/// The change of a total, as a percentage or `=`.
fn total_pct(c: &Comparison, metric: &str) -> String {
    c.changes
        .iter()
        .find(|ch| ch.scope == Scope::Total && ch.metric == metric)
        .map_or("=".into(), pct)
}

fn summary(o: &mut String, d: &Diff, color: bool) {
    use kmemtrace_cli::colour::{self, paint};
    o.push_str(&format!(
        "\nSummary: {} against {} new sides\n",
        side(&d.base),
        d.comparisons.len()
    ));
    let cols = ["hits", "bytes", "live_bytes", "page_allocs", "leaks"];
    o.push_str(&format!("{:<40} {:>9} {:<24}", "new", "seconds", "kernel"));
    for c in cols {
        o.push_str(&format!(" {c:>11}"));
    }
    o.push_str("  gates\n");
    for c in &d.comparisons {
        let kernel = c.new.captures.first().map_or("", |k| k.kernel.as_str());
        o.push_str(&format!(
            "{:<40} {:>9.3} {:<24}",
            c.new.label(),
            c.new.seconds,
            kernel
        ));
        for m in cols {
            o.push_str(&format!(" {:>11}", total_pct(c, m)));
        }
        o.push_str(&match (c.gates.len(), c.gates_failed) {
            (0, _) => "  -\n".to_string(),
            (n, 0) => format!(
                "  {}\n",
                paint(&format!("{n} passed"), colour::GREEN, color)
            ),
            (n, f) => format!(
                "  {}\n",
                paint(&format!("{f} of {n} FAILED"), colour::RED, color)
            ),
        });
    }
}

/// The comparison as text.
pub fn write(d: &Diff, opts: &Options) -> String {
    let mut o = String::new();
    for (i, c) in d.comparisons.iter().enumerate() {
        if i > 0 {
            o.push_str(&format!("\n{}\n\n", "=".repeat(WIDE)));
        }
        comparison(&mut o, d, c, opts);
    }
    if d.comparisons.len() > 1 {
        summary(&mut o, d, opts.color);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_print_with_separators_and_two_places() {
        assert_eq!(num(1234567.0), "1,234,567");
        assert_eq!(num(-1234.0), "-1,234");
        assert_eq!(num(19866.5), "19,866.50");
        assert_eq!(num(-0.25), "-0.25");
        assert_eq!(num(1999.996), "2,000.00");
        assert_eq!(rate(Some(84233783.4)), "84,233,783");
        assert_eq!(rate(Some(12.34)), "12.3");
    }
}
