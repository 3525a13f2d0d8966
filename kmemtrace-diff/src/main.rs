//! `kmemtrace-diff BASE NEW...`: what changed between captures, and
//! whether the gates hold.

use kmemtrace_diff::compare::{Capture, Group, SORT_KEYS};
use kmemtrace_diff::{figures, gate, junit, load, text};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_GATE: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_INPUT: u8 = 3;

const AFTER_HELP: &str = "\
Examples:
  kmemtrace-diff base.kmt new.kmt                    what changed, the largest first
  kmemtrace-diff base.json new.kmt                   against a stored `kmemtrace-report --json`
  kmemtrace-diff --base a.kmt b.kmt c.kmt --new x.kmt y.kmt z.kmt
                                                     three runs a side: the baseline's spread is
                                                     the noise, changes inside it are not flagged
  kmemtrace-diff --base base.json board1.kmt board2.kmt --gate rules.toml --junit out.xml
                                                     one baseline, many boards: one summary, one
                                                     JUnit file

Gates (--gate RULES.toml): each [[gate]] names a metric, at most one of callsite, cache,
page_callsite or order (a glob with * and ?, on the function, cache name or order; none: the
totals), and one or more limits:
  max_increase_pct = 20   NEW may exceed BASE by at most 20% (a row absent from BASE breaks it)
  max_increase = 100      ... by at most 100
  max = 0                 NEW itself at most 0
  per_second = true       compare rates per second of capture (counts only), for captures of
                          different lengths
  name = \"...\"            the test case's name in JUnit (default: the rule in words)
With several baseline captures an increase limit breaks only above the highest of them.

  [[gate]]
  metric = \"hits\"
  callsite = \"alloc_pipe_info*\"
  max_increase_pct = 20

  [[gate]]
  metric = \"misuse:double_free\"
  max = 0

Metrics (scopes: t total, c callsite, k cache, p page_callsite, o order):
METRICS
  misuse:KIND            t     the slab finding's certain count (KIND as in the report's misuse[])
  page_misuse:KIND       t     page findings (freed_twice, allocated_while_live,
                               freed_with_larger_order, freed_with_smaller_order, freed_unseen)

Exit status: 0 every gate holds (or none given), 1 a gate failed, 2 usage (a bad rule says its
line and why), 3 an input that cannot be read.";

/// Compare kmem captures: per call site (by function, so different kernels
/// and architectures compare), per cache, page call site, page order and in
/// total; absolute and relative change and rates per second; gates for CI.
///
/// Each input is a kmemtrace log or a `kmemtrace-report --json` document.
#[derive(clap::Parser)]
#[command(version, after_long_help = after_help())]
struct Cli {
    /// BASE NEW...: the baseline, then captures each compared with it. With
    /// --base, every one is a new capture.
    captures: Vec<PathBuf>,
    /// Baseline captures; several are runs of one build, whose spread is the
    /// noise. Without --new or other captures, the first is the baseline and
    /// the rest are compared with it one by one.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    base: Vec<PathBuf>,
    /// One new side of several captures (runs of one build), compared by
    /// their median; repeat for several boards.
    #[arg(long, num_args = 1.., value_name = "FILE", action = clap::ArgAction::Append)]
    new: Vec<PathBuf>,
    /// Rules to check (TOML; see below). Exit 1 if one fails.
    #[arg(long, value_name = "RULES")]
    gate: Option<PathBuf>,
    /// Write the gates' results as JUnit XML (one test case per gate).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Print the comparison as JSON (schema `kmemtrace-diff/1`).
    #[arg(long)]
    json: bool,
    /// Sort keys, comma-separated: change (size of the change, the
    /// default), pct, rate (change of the rate per second), scope, name,
    /// metric.
    #[arg(
        short = 's',
        long = "sort",
        value_delimiter = ',',
        default_value = "change"
    )]
    sort: Vec<String>,
    /// Rows of changes per comparison in the table (default 25).
    #[arg(short = 'l', long = "lines", value_name = "N", default_value_t = 25)]
    lines: usize,
    /// Only these metrics (comma-separated globs: `hits,misuse:*`), in the
    /// table and the JSON.
    #[arg(short = 'm', long = "metric", value_delimiter = ',')]
    metrics: Vec<String>,
    /// Also show changes inside the baseline's spread.
    #[arg(long)]
    all: bool,
}

fn after_help() -> String {
    use figures::Scope;
    let rows: Vec<String> = figures::METRICS
        .iter()
        .map(|m| {
            let scopes: String = m
                .scopes
                .iter()
                .map(|s| match s {
                    Scope::Total => 't',
                    Scope::Callsite => 'c',
                    Scope::Cache => 'k',
                    Scope::PageCallsite => 'p',
                    Scope::Order => 'o',
                })
                .collect();
            format!("  {:<22} {:<5} {}", m.name, scopes, m.what)
        })
        .collect();
    AFTER_HELP.replace("METRICS", &rows.join("\n"))
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("kmemtrace-diff: {msg}");
    ExitCode::from(EXIT_USAGE)
}

/// The baseline's files and the new sides' files, from the arguments.
fn sides(
    cli: &Cli,
    new_groups: Vec<Vec<PathBuf>>,
) -> Result<(Vec<PathBuf>, Vec<Vec<PathBuf>>), String> {
    let mut positional = cli.captures.clone();
    let mut base = cli.base.clone();
    if base.is_empty() {
        if positional.is_empty() {
            return Err("no baseline: give BASE NEW, or --base".into());
        }
        base.push(positional.remove(0));
    } else if cli.new.is_empty() && positional.is_empty() {
        positional = base.split_off(1);
    }
    let mut news = new_groups;
    news.extend(positional.into_iter().map(|p| vec![p]));
    if news.is_empty() {
        return Err("nothing to compare with the baseline: give NEW captures".into());
    }
    Ok((base, news))
}

fn group(files: &[PathBuf]) -> Result<Group, String> {
    let captures = files
        .iter()
        .map(|f| load::capture(f))
        .collect::<Result<Vec<Capture>, String>>()?;
    Ok(Group { captures })
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // Each --new is one side: its values stay together.
    let new_groups: Vec<Vec<PathBuf>> = matches
        .get_occurrences::<PathBuf>("new")
        .map(|o| o.map(|g| g.cloned().collect()).collect())
        .unwrap_or_default();
    if let Some(bad) = cli.sort.iter().find(|k| !SORT_KEYS.contains(&k.as_str())) {
        return usage(&format!(
            "sort key \"{bad}\": one of {}",
            SORT_KEYS.join(", ")
        ));
    }
    let (base_files, new_files) = match sides(&cli, new_groups) {
        Ok(s) => s,
        Err(e) => return usage(&e),
    };
    let gates = match &cli.gate {
        None => Vec::new(),
        Some(path) => {
            let name = path.display().to_string();
            let parsed = std::fs::read_to_string(path)
                .map_err(|e| format!("{name}: {e}"))
                .and_then(|t| gate::parse(&name, &t));
            match parsed {
                Ok(g) => g,
                Err(e) => return usage(&e),
            }
        }
    };
    if cli.junit.is_some() && gates.is_empty() {
        return usage("--junit writes the gates' results: give --gate RULES");
    }
    let groups = group(&base_files).and_then(|b| {
        let news = new_files
            .iter()
            .map(|f| group(f))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((b, news))
    });
    let (base, news) = match groups {
        Ok(g) => g,
        Err(e) => {
            eprintln!("kmemtrace-diff: {e}");
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let mut d = kmemtrace_diff::diff(&base, &news, &gates, &cli.sort);
    if !cli.metrics.is_empty() {
        for c in &mut d.comparisons {
            c.changes
                .retain(|ch| cli.metrics.iter().any(|m| gate::glob(m, &ch.metric)));
            c.within_noise = c.changes.iter().filter(|ch| !ch.flagged()).count();
        }
    }
    if let Some(path) = &cli.junit {
        if let Err(e) = std::fs::write(path, junit::write(&d)) {
            eprintln!("kmemtrace-diff: {}: {e}", path.display());
            return ExitCode::from(EXIT_INPUT);
        }
    }
    if cli.json {
        match serde_json::to_string_pretty(&d) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("kmemtrace-diff: {e}");
                return ExitCode::from(EXIT_INPUT);
            }
        }
    } else {
        let opts = text::Options {
            lines: cli.lines,
            all: cli.all,
        };
        print!("{}", text::write(&d, &opts));
    }
    if d.gates_failed > 0 {
        ExitCode::from(EXIT_GATE)
    } else {
        ExitCode::SUCCESS
    }
}
