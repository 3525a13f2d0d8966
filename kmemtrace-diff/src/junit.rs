//! JUnit XML, as Jenkins, GitLab and GitHub read test reports: one test
//! suite per new capture (or group of runs), one test case per gate, a
//! `failure` with the figures for each gate that fails.

use crate::gate::{fmt, Checked, Verdict};
use crate::{Comparison, Diff};
use kmemtrace_cli::markup::{self, Markup};

fn escape(s: &str) -> String {
    markup::escape(s, Markup::XmlText)
}

fn attr(s: &str) -> String {
    markup::escape(s, Markup::XmlAttribute)
}

/// A class name CI servers will not split: Jenkins takes what follows the
/// last `.` as the class and the rest as the package.
fn class_name(board: &str) -> String {
    let base = board.rsplit('/').next().unwrap_or(board);
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("kmemtrace-diff.{clean}")
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
        attr(&v.gate.name),
        attr(&class_name(board))
    ));
    let failures: Vec<&Checked> = v.failures().collect();
    if let Some(first) = failures.first() {
        let more = match failures.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        o.push_str(&format!(
            "      <failure type=\"gate\" message=\"{}\">{}</failure>\n",
            attr(&format!("{}{more}", row_text(first))),
            escape(
                &failures
                    .iter()
                    .map(|c| row_text(c))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        ));
    } else if v.checked.is_empty() {
        let why = "matched no row in either capture";
        if v.passed {
            o.push_str(&format!("      <skipped message=\"{why}\"/>\n"));
        } else {
            o.push_str(&format!(
                "      <failure type=\"gate\" message=\"{why}\">{why}: call sites are named by function (no +0x offset), caches and size classes by name, orders 0..9 and 10+ (allow_no_match = true lets it pass)</failure>\n"
            ));
        }
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
    let skipped = c
        .gates
        .iter()
        .filter(|v| v.passed && v.checked.is_empty())
        .count();
    o.push_str(&format!(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"0\">\n",
        attr(&board),
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
            attr(&v)
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

/// A report for CI when no comparison could be made (bad rules, an input
/// that cannot be read): one test case in error, so the run shows as
/// broken rather than as a missing report.
pub fn error(message: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"kmemtrace-diff\" tests=\"1\" failures=\"0\" errors=\"1\" time=\"0\">\n\
         \x20 <testsuite name=\"kmemtrace-diff\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0\">\n\
         \x20   <testcase name=\"compare the captures\" classname=\"kmemtrace-diff.run\" time=\"0\">\n\
         \x20     <error type=\"kmemtrace-diff\" message=\"{}\">{}</error>\n\
         \x20   </testcase>\n\
         \x20 </testsuite>\n\
         </testsuites>\n",
        attr(message),
        escape(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(attr("a<&\"b\nc\td"), "a&lt;&amp;&quot;b&#10;c&#9;d");
        assert_eq!(escape("x\ny\u{1}\u{fffe}"), "x\ny\u{fffd}\u{fffd}");
        assert_eq!(class_name("/tmp/board 1.kmt"), "kmemtrace-diff.board_1_kmt");
    }
}
