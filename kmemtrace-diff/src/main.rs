//! `kmemtrace-diff BASE NEW`: what changed between two captures.

use clap::Parser;
use kmemtrace_diff::{diff, load, Change, Diff};
use kmemtrace_format::human::thousands;
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_INPUT: u8 = 3;

/// Compare two kmem captures: per call site (by function, so different
/// kernels and architectures compare), per cache and in total; absolute
/// and relative change and rates per second of capture.
///
/// Each input is a kmemtrace log or a `kmemtrace-report --json` document
/// (a stored baseline needs no log).
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// The baseline capture.
    base: PathBuf,
    /// The capture compared with it.
    new: PathBuf,
    /// Print the comparison as JSON (schema `kmemtrace-diff/1`).
    #[arg(long)]
    json: bool,
    /// Rows in the table (default 25).
    #[arg(short = 'l', long = "lines", value_name = "N")]
    lines: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let sides = load::side(&cli.base).and_then(|b| Ok((b, load::side(&cli.new)?)));
    let (base, new) = match sides {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kmemtrace-diff: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let d = diff(&base, &new);
    if cli.json {
        match serde_json::to_string_pretty(&d) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("kmemtrace-diff: {e}");
                return ExitCode::from(EXIT_INPUT);
            }
        }
    } else {
        print!("{}", table(&d, cli.lines.unwrap_or(25)));
    }
    ExitCode::SUCCESS
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), thousands)
}

fn rate(v: Option<f64>) -> String {
    v.map_or("-".into(), |r| format!("{r:.1}"))
}

fn row(c: &Change) -> String {
    let scope = match c.scope {
        kmemtrace_diff::Scope::Total => "total",
        kmemtrace_diff::Scope::Callsite => "callsite",
        kmemtrace_diff::Scope::Cache => "cache",
    };
    let sign = if c.delta > 0 { "+" } else { "" };
    let delta = if c.delta < 0 {
        format!("-{}", thousands(c.delta.unsigned_abs() as u64))
    } else {
        format!("{sign}{}", thousands(c.delta as u64))
    };
    format!(
        "{scope:<9} {:<32} {:<15} {:>14} {:>14} {:>14} {:>9} {:>12} {:>12}\n",
        c.name,
        c.metric,
        opt(c.base),
        opt(c.new),
        delta,
        c.pct.map_or("new".into(), |p| format!("{p:+.1}%")),
        rate(c.base_per_s),
        rate(c.new_per_s)
    )
}

fn table(d: &Diff, lines: usize) -> String {
    let mut o = format!(
        "kmemtrace-diff: {} ({:.3} s) -> {} ({:.3} s)\n\n",
        d.base, d.base_seconds, d.new, d.new_seconds
    );
    o.push_str(&format!(
        "{:<9} {:<32} {:<15} {:>14} {:>14} {:>14} {:>9} {:>12} {:>12}\n",
        "scope", "name", "metric", "base", "new", "change", "change%", "base/s", "new/s"
    ));
    o.push_str(&format!("{}\n", "-".repeat(139)));
    for c in d.changes.iter().take(lines) {
        o.push_str(&row(c));
    }
    if d.changes.len() > lines {
        o.push_str(&format!(
            "... {} more changes (-l)\n",
            d.changes.len() - lines
        ));
    }
    if d.changes.is_empty() {
        o.push_str("no figure changed\n");
    }
    for (what, list) in [
        ("New call sites", &d.new_callsites),
        ("Vanished call sites", &d.vanished_callsites),
    ] {
        if !list.is_empty() {
            o.push_str(&format!("\n{what}: {}\n", list.join(", ")));
        }
    }
    o
}
