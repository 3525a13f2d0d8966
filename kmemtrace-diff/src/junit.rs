//! JUnit XML, as Jenkins, GitLab and GitHub read test reports: one test
//! suite per new capture (or group of runs), one test case per gate, a
//! `failure` with the figures for each gate that fails.

use crate::gate::{fmt, Checked, Verdict};
use crate::{Comparison, Diff};

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // XML 1.0 allows no other control characters, even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// `alloc_pipe_info: 2,000 -> 3,000 (spread 1,990..2,010): increase 50.0% > 20%`.
fn row_text(c: &Checked) -> String {
    let v = |x: Option<f64>| x.map_or("none".to_string(), fmt);
    let spread = c
        .base_spread
        .map(|[lo, hi]| format!(" (baseline spread {}..{})", fmt(lo), fmt(hi)))
        .unwrap_or_default();
    let why = if c.breaches.is_empty() {
        "within limits".to_string()
    } else {
        c.breaches.join("; ")
    };
    format!("{}: {} -> {}{spread}: {why}", c.name, v(c.base), v(c.new))
}

fn testcase(o: &mut String, board: &str, v: &Verdict) {
    o.push_str(&format!(
        "    <testcase name=\"{}\" classname=\"{}\" time=\"0\">\n",
        escape(&v.gate.name),
        escape(board)
    ));
    let failures: Vec<&Checked> = v.failures().collect();
    if let Some(first) = failures.first() {
        let more = match failures.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        o.push_str(&format!(
            "      <failure type=\"gate\" message=\"{}\">{}</failure>\n",
            escape(&format!("{}{more}", row_text(first))),
            escape(
                &failures
                    .iter()
                    .map(|c| row_text(c))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        ));
    }
    let seen = if v.checked.is_empty() {
        "no row matched in either capture".to_string()
    } else {
        v.checked
            .iter()
            .map(row_text)
            .collect::<Vec<_>>()
            .join("\n")
    };
    o.push_str(&format!(
        "      <system-out>rules line {}: {}\n{}</system-out>\n",
        v.gate.line,
        escape(&v.gate.describe()),
        escape(&seen)
    ));
    o.push_str("    </testcase>\n");
}

fn suite(o: &mut String, d: &Diff, c: &Comparison) {
    let board = c.new.label();
    let failures = c.gates.iter().filter(|v| !v.passed).count();
    o.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"0\">\n",
        escape(&board),
        c.gates.len()
    ));
    o.push_str("    <properties>\n");
    for (k, v) in [
        ("base", d.base.label()),
        ("new", board.clone()),
        ("base_seconds", format!("{:.3}", d.base.seconds)),
        ("new_seconds", format!("{:.3}", c.new.seconds)),
    ] {
        o.push_str(&format!(
            "      <property name=\"{k}\" value=\"{}\"/>\n",
            escape(&v)
        ));
    }
    o.push_str("    </properties>\n");
    for v in &c.gates {
        testcase(o, &board, v);
    }
    o.push_str("  </testsuite>\n");
}

/// The whole comparison as one JUnit document.
pub fn write(d: &Diff) -> String {
    let tests: usize = d.comparisons.iter().map(|c| c.gates.len()).sum();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    o.push_str(&format!(
        "<testsuites name=\"kmemtrace-diff\" tests=\"{tests}\" failures=\"{}\" errors=\"0\" time=\"0\">\n",
        d.gates_failed
    ));
    for c in &d.comparisons {
        suite(&mut o, d, c);
    }
    o.push_str("</testsuites>\n");
    o
}
