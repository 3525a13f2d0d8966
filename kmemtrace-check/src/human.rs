//! The human-readable report: a per-CPU table, losses, problems with their
//! offsets, and the one-line verdict.

use crate::findings::{duration, percent, secs, thousands, Counts, Lost, Report, Verdict};
use std::fmt::Write;

/// How to print.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Only the verdict line.
    pub quiet: bool,
    /// Colour the verdict word (ANSI).
    pub color: bool,
    /// Problems (and loss windows) listed at most; 0: all that were kept.
    pub max_listed: usize,
}

/// The verdict line: `FILE: OK (...)`.
pub fn verdict_line(r: &Report, color: bool) -> String {
    let word = r.verdict.word();
    let rest = r.summary.strip_prefix(word).unwrap_or(&r.summary);
    use kmemtrace_cli::colour::{self, paint};
    let code = match r.verdict {
        Verdict::Ok => colour::GREEN,
        Verdict::Lost => colour::YELLOW,
        Verdict::Damaged | Verdict::Unusable => colour::RED,
    };
    let word = paint(word, code, color);
    format!("{}: {word}{rest}", r.file)
}

fn lost_cell(l: &Lost) -> (String, String) {
    if l.events == 0 && !l.lower_bound {
        return ("0".into(), "-".into());
    }
    let n = if l.lower_bound {
        format!(">={}", thousands(l.events))
    } else {
        thousands(l.events)
    };
    (n, percent(l.fraction))
}

/// The checker's tables: the one text-table printer's spaced layout;
/// `right[c]` says whether column `c` is right-aligned (the default).
fn table(rows: &[Vec<String>], right: &[bool]) -> String {
    use kmemtrace_cli::table::{Align, TextTable};
    let mut t = TextTable::spaced();
    for (c, &r) in right.iter().enumerate() {
        t.align(c, if r { Align::Right } else { Align::Left });
    }
    for r in rows {
        t.row(r.clone());
    }
    t.render()
}

fn opt_ts(t: Option<u64>) -> String {
    t.map(secs).unwrap_or_else(|| "-".into())
}

/// The full report of one file (ending with its verdict line).
pub fn render(r: &Report, style: &Style) -> String {
    let mut out = String::new();
    if style.quiet || r.verdict == Verdict::Unusable {
        out.push_str(&verdict_line(r, style.color));
        out.push('\n');
        return out;
    }
    header(&mut out, r);
    if !r.cpus.is_empty() {
        cpu_table(&mut out, r);
    }
    kernel_loss_lines(&mut out, r);
    if !r.loss_windows.is_empty() {
        loss_windows(&mut out, r, style);
    }
    warnings_and_problems(&mut out, r, style);
    out.push_str(&verdict_line(r, style.color));
    out.push('\n');
    out
}

/// The file's header: what the log is, where it came from, its size and
/// blocks; then who recorded it, its clock and why it ended.
fn header(out: &mut String, r: &Report) {
    let in_place = r.origin.foreign();
    match in_place {
        Some(what) => {
            let how = if r.origin.offsets_are_the_inputs() {
                "read as"
            } else {
                "converted to"
            };
            let _ = write!(out, "{}: {what}, checked {how} kmemtrace log", r.file);
        }
        None => {
            let _ = write!(out, "{}: kmemtrace log", r.file);
        }
    }
    if let Some(v) = &r.format_version {
        let _ = write!(out, " {v}");
    }
    if let Some(a) = &r.arch {
        let who: Vec<&str> = [a.machine.as_deref(), a.release.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        if !who.is_empty() {
            let _ = write!(out, " from {}", who.join(" "));
        }
        let _ = write!(
            out,
            " ({}-endian, long {}, sub-buffer {})",
            a.byte_order, a.long_size, a.subbuf_size
        );
    }
    let _ = writeln!(
        out,
        ", {} bytes, {} blocks ({} of CPU data{}){}",
        thousands(r.bytes),
        thousands(r.blocks.before_end),
        thousands(r.blocks.cpu_data),
        if r.blocks.cpu_data > 0 {
            format!(": {}", r.blocks.cpu_data_codecs.describe())
        } else {
            String::new()
        },
        match (in_place, r.origin.offsets_are_the_inputs()) {
            (Some(_), true) => "; read in place: sizes and offsets are the file's",
            (Some(_), false) => "; sizes and offsets are that log's",
            (None, _) => "",
        }
    );
    let mut info = Vec::new();
    if let Some(a) = &r.arch {
        // Read in place, the arch tag names the import whose log is read.
        if let Some(rec) = &a.recorder {
            info.push(match in_place {
                Some(_) => format!("read in place as {rec} would convert it"),
                None => format!("recorded by {rec}"),
            });
        }
        if let Some(c) = &a.trace_clock {
            info.push(format!("clock {c}"));
        }
    }
    if let Some(e) = &r.end {
        info.push(format!("ended: {}", e.reason));
    }
    if let Some(g) = &r.rotation {
        let runs = |v: &[[u32; 2]]| {
            v.iter()
                .map(|[a, b]| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut files: Vec<[u32; 2]> = Vec::new();
        for &i in &g.files {
            match files.last_mut() {
                Some(r) if r[1].checked_add(1) == Some(i) => r[1] = i,
                _ => files.push([i, i]),
            }
        }
        let one = g.files.len() == 1;
        let mut line = format!(
            "rotated capture {}, {} {}",
            g.capture,
            if one { "file" } else { "files" },
            runs(&files)
        );
        if !g.not_read.is_empty() {
            line += &format!(
                " (files {} not here: removed by rotation, or not given)",
                runs(&g.not_read)
            );
        }
        info.push(line);
    }
    if !info.is_empty() {
        let _ = writeln!(out, "  {}", info.join("; "));
    }
}

/// The per-CPU table, with a line for all CPUs.
fn cpu_table(out: &mut String, r: &Report) {
    let mut rows = vec![[
        "CPU",
        "blocks",
        "sub-buffers",
        "events",
        "first ts",
        "last ts",
        "span",
        "lost",
        "lost %",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    let row = |label: String, c: &Counts, span_ns: u64, lost: &Lost| {
        let (lost, pct) = lost_cell(lost);
        vec![
            label,
            thousands(c.blocks),
            thousands(c.subbufs),
            thousands(c.events),
            opt_ts(c.first_ts),
            opt_ts(c.last_ts),
            duration(span_ns),
            lost,
            pct,
        ]
    };
    for c in &r.cpus {
        rows.push(row(c.cpu.to_string(), &c.counts, c.span_ns, &c.lost));
    }
    let t = &r.total;
    rows.push(row("all".into(), &t.counts, t.span_ns, &t.lost));
    out.push_str(&table(&rows, &[true; 9]));
}

/// The kernel statistics' losses (end minus start), one line per CPU that
/// lost events.
fn kernel_loss_lines(out: &mut String, r: &Report) {
    let stats: Vec<String> = r
        .cpus
        .iter()
        .filter_map(|c| {
            c.lost.stats.as_ref().filter(|d| d.total > 0).map(|d| {
                format!(
                    "CPU {}: overrun {}, commit overrun {}, dropped {}{}{}",
                    c.cpu,
                    thousands(d.overrun),
                    thousands(d.commit_overrun),
                    thousands(d.dropped_events),
                    if d.end_phase == "end" {
                        ""
                    } else {
                        " (to the last periodic snapshot)"
                    },
                    if d.since == "start" {
                        ""
                    } else {
                        " (no start snapshot: since the buffer was created)"
                    }
                )
            })
        })
        .collect();
    for line in &stats {
        let _ = writeln!(out, "  kernel statistics, end minus start: {line}");
    }
}

/// The losses flagged in sub-buffers: per CPU, then the first few windows.
fn loss_windows(out: &mut String, r: &Report, style: &Style) {
    let per_cpu: Vec<String> = r
        .cpus
        .iter()
        .filter(|c| c.lost.subbuf_flagged > 0)
        .map(|c| {
            let l = &c.lost;
            format!(
                "CPU {}: {} flagged, {} events counted{}",
                c.cpu,
                thousands(l.subbuf_flagged),
                thousands(l.subbuf_stored),
                if l.subbuf_flag_only > 0 {
                    format!(", {} without a count", thousands(l.subbuf_flag_only))
                } else {
                    String::new()
                }
            )
        })
        .collect();
    if per_cpu.is_empty() {
        let _ = writeln!(out, "  loss windows:");
    } else {
        let _ = writeln!(
            out,
            "  losses flagged in sub-buffers ({}):",
            per_cpu.join("; ")
        );
    }
    // A few windows by default: they can number thousands.
    let n = if style.max_listed == 0 {
        r.loss_windows.len()
    } else {
        r.loss_windows.len().min(style.max_listed.min(10))
    };
    for w in &r.loss_windows[..n] {
        let count = match (w.count, w.cause) {
            (Some(c), _) => format!("{} events lost", thousands(c)),
            (None, "overwritten") => "events lost, count not stored (see the statistics)".into(),
            (None, "rotated") => {
                "events not here (files of the capture removed by rotation, or not given)".into()
            }
            (None, cause) => format!("events lost ({cause} sub-buffers)"),
        };
        let when = match (w.after_ts, w.before_ts) {
            (Some(a), Some(b)) => format!("between {} and {}", secs(a), secs(b)),
            (None, Some(b)) => format!("before {}", secs(b)),
            (Some(a), None) => format!("after {}", secs(a)),
            (None, None) => "with no event around".into(),
        };
        let _ = writeln!(out, "    {}: {count} {when}", w.location);
    }
    if n < r.loss_windows.len() {
        let _ = writeln!(
            out,
            "    ... and {} more (--max-problems 0 or --json lists all)",
            thousands((r.loss_windows.len() - n) as u64)
        );
    }
}

/// The warnings, then the problems, each list cut at `--max-problems`.
fn warnings_and_problems(out: &mut String, r: &Report, style: &Style) {
    let limit = |n: usize| {
        if style.max_listed == 0 {
            n
        } else {
            n.min(style.max_listed)
        }
    };
    for (title, list, total) in [
        ("warnings", &r.warnings, r.warnings_total),
        ("problems", &r.problems, r.problems_total),
    ] {
        if total == 0 {
            continue;
        }
        let _ = writeln!(out, "  {title} ({}):", thousands(total));
        let n = limit(list.len());
        for f in &list[..n] {
            let _ = writeln!(out, "    {f}");
        }
        if (n as u64) < total {
            let _ = writeln!(
                out,
                "    ... and {} more{}",
                thousands(total - n as u64),
                if n < list.len() {
                    " (--max-problems 0 lists all)"
                } else {
                    ""
                }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(
            &[
                vec!["CPU".into(), "events".into()],
                vec!["0".into(), "1,234".into()],
            ],
            &[true, true],
        );
        assert_eq!(t, "  CPU  events\n    0   1,234\n");
    }

    #[test]
    fn verdict_lines() {
        let r = Report {
            file: "x.kmt".into(),
            verdict: Verdict::Ok,
            summary: "OK (3 events on 1 CPU, nothing lost)".into(),
            ..Default::default()
        };
        assert_eq!(
            verdict_line(&r, false),
            "x.kmt: OK (3 events on 1 CPU, nothing lost)"
        );
        assert!(verdict_line(&r, true).contains("\x1b[1;32mOK\x1b[0m"));
    }
}
