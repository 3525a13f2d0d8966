//! `kmemtrace-diff BASE NEW...`: what changed between captures, and
//! whether the gates hold.

use kmemtrace_cli::exit::{self, Code};
use kmemtrace_diff::compare::{Capture, Group, Partial, SORT_KEYS};
use kmemtrace_diff::{figures, gate, junit, load, text};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_GATE: Code = exit::NO;
const EXIT_USAGE: Code = exit::USAGE;
const EXIT_INPUT: Code = exit::INPUT;
/// Writing the output failed (a full disk): no verdict was delivered.
const EXIT_OUTPUT: Code = exit::OUTPUT;

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
page_callsite, order or stall_site (a glob with * and ?, on the function, cache name, order, or
`function order N` of a stall's call site; none: the totals), and one or more limits:
  max_increase_pct = 20   NEW may exceed BASE by at most 20% (a row absent from BASE breaks it)
  max_increase = 100      ... by at most 100
  max = 0                 NEW itself at most 0
  allow_no_match = true   a pattern matching no row passes (else it fails: likely a typo)
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

  [[gate]]
  metric = \"stall_p99_ns\"
  stall_site = \"filemap_add_folio order 0\"
  max_increase_pct = 50

Metrics (scopes: t total, c callsite, k cache, p page_callsite, o order, s stall_site):
METRICS
  misuse:KIND            tc    totals: the slab finding's certain count (KIND as in the
                               report's misuse[]); call sites: every occurrence whose object
                               was allocated there, uncertain and explained ones included
  page_misuse:KIND       t     page findings (freed_twice, allocated_while_live,
                               freed_with_larger_order, freed_with_smaller_order, freed_unseen)

EXIT_STATUS
With --junit, exits 2, 3 and 5 leave a JUnit file with the error.";

/// Compare kmem captures: per call site (by function, so different kernels
/// and architectures compare), per cache, page call site, page order and in
/// total; absolute and relative change and rates per second; gates for CI.
///
/// Each input is a kmemtrace log or a `kmemtrace-report --json` document.
#[derive(clap::Parser)]
#[command(
    version = kmemtrace_cli::VERSION,
    long_version = kmemtrace_cli::long_version(&diff_reads(), &[format!("JSON ({})", kmemtrace_diff::SCHEMA), "JUnit XML".into()]),
    after_long_help = after_help()
)]
struct Cli {
    /// BASE NEW...: the baseline, then captures each compared with it. With
    /// --base, every one is a new capture.
    captures: Vec<PathBuf>,
    /// Baseline captures; several are runs of one build, whose spread is the
    /// noise. Without --new or other captures (`--base BASE NEW1 NEW2`), the
    /// first is the baseline and the rest are compared with it one by one.
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
    /// Rows of changes per comparison in the table (0: all).
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
                    Scope::StallSite => 's',
                })
                .collect();
            format!("  {:<22} {:<5} {}", m.name, scopes, m.what)
        })
        .collect();
    use kmemtrace_cli::exit::*;
    let codes = help(&[
        (OK, "every gate holds (or none given)"),
        (NO, "a gate failed"),
        (USAGE, "a bad option or rule (it says its line and why)"),
        (INPUT, "an input that cannot be read or compared, or without kmem events: with --gate no gate stands on it (stopped before comparing); without, the comparison is printed with a warning"),
        (OUTPUT, ""),
        (DAMAGED, "an input is cut short or damaged: with --gate no gate stands on it (stopped before comparing); without, the comparison is printed with a warning"),
    ]);
    AFTER_HELP
        .replace("METRICS", &rows.join("\n"))
        .replace("EXIT_STATUS", &codes)
}

/// Says why and exits with `code`; with --junit, leaves a report in error
/// there too, so CI shows a broken run rather than a missing report.
fn fail(code: Code, msg: &str, junit: Option<&PathBuf>) -> ExitCode {
    eprintln!("kmemtrace-diff: {msg}");
    if let Some(path) = junit {
        if let Err(e) = write_file(path, &junit::error(msg)) {
            eprintln!("kmemtrace-diff: {e}");
        }
    }
    code.exit_code()
}

/// Exits on an error of the command line as clap does; where it is a
/// usage error and `--junit PATH` can be read from the arguments, the
/// JUnit file says so first, as for the errors found after parsing: a CI
/// job whose gate step was mistyped fails its report, not only its log.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if let (false, Some(path)) = (informational, junit_in_args(std::env::args_os())) {
        let rendered = e.render().to_string();
        let msg = rendered.lines().next().unwrap_or("usage error");
        let msg = msg.strip_prefix("error: ").unwrap_or(msg);
        if let Err(w) = write_file(&path, &junit::error(msg)) {
            eprintln!("kmemtrace-diff: {w}");
        }
    }
    e.exit()
}

/// The value of the last `--junit PATH` or `--junit=PATH` before any `--`.
fn junit_in_args(args: impl Iterator<Item = std::ffi::OsString>) -> Option<PathBuf> {
    let mut args = args.skip(1);
    let mut found = None;
    while let Some(a) = args.next() {
        if a == "--" {
            break;
        }
        if a == "--junit" {
            found = args.next().map(PathBuf::from);
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--junit=")) {
            found = Some(PathBuf::from(v));
        }
    }
    found
}

/// Writes `text` to `path` under the output policy of every kmemtrace
/// program (an existing file kept as `.old`, no symlink, no directory
/// created on the way).
fn write_file(path: &std::path::Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut f = kmemtrace_cli::output::create(path).map_err(|r| r.msg)?;
    f.file
        .write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Values of `id`, each occurrence together, with the command-line index
/// of its first value.
fn occurrences(m: &clap::ArgMatches, id: &str) -> Vec<(usize, Vec<PathBuf>)> {
    let mut indices = m.indices_of(id).into_iter().flatten();
    m.get_occurrences::<PathBuf>(id)
        .into_iter()
        .flatten()
        .map(|o| {
            let files: Vec<PathBuf> = o.cloned().collect();
            let first = indices.next().unwrap_or(0);
            indices
                .by_ref()
                .take(files.len().saturating_sub(1))
                .for_each(drop);
            (first, files)
        })
        .collect()
}

/// The baseline's files and the new sides' files, in command-line order.
/// `BASE NEW...`; `--base B... --new N... [--new ...]`; and without --new
/// or other captures, `--base BASE NEW...`: the first is the baseline.
fn sides(m: &clap::ArgMatches) -> Result<(Vec<PathBuf>, Vec<Vec<PathBuf>>), String> {
    let mut positional: Vec<(usize, Vec<PathBuf>)> = m
        .get_many::<PathBuf>("captures")
        .into_iter()
        .flatten()
        .zip(m.indices_of("captures").into_iter().flatten())
        .map(|(p, i)| (i, vec![p.clone()]))
        .collect();
    let mut base: Vec<PathBuf> = m
        .get_many::<PathBuf>("base")
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    let mut news = occurrences(m, "new");
    if base.is_empty() {
        if positional.is_empty() {
            return Err("no baseline: give BASE NEW, or --base".into());
        }
        base = positional.remove(0).1;
    } else if news.is_empty() && positional.is_empty() {
        let first = m.indices_of("base").and_then(|mut i| i.next()).unwrap_or(0);
        positional = base
            .split_off(1)
            .into_iter()
            .enumerate()
            .map(|(k, p)| (first + 1 + k, vec![p]))
            .collect();
    }
    news.extend(positional);
    news.sort_by_key(|(i, _)| *i);
    if news.is_empty() {
        return Err("nothing to compare with the baseline: give NEW captures".into());
    }
    let stdin = |f: &Vec<PathBuf>| f.iter().filter(|p| p.as_os_str() == "-").count();
    if stdin(&base) + news.iter().map(|(_, f)| stdin(f)).sum::<usize>() > 1 {
        return Err("standard input (-) can be read once: give it as one capture".into());
    }
    Ok((base, news.into_iter().map(|(_, f)| f).collect()))
}

fn group(files: &[PathBuf]) -> Result<Group, String> {
    let captures = files
        .iter()
        .map(|f| load::capture(f))
        .collect::<Result<Vec<Capture>, String>>()?;
    Ok(Group { captures })
}

/// Writes to standard output; a reader that went away (`| head`) is no
/// error.
fn emit(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

/// What the inputs may be, for `--version`.
fn diff_reads() -> Vec<String> {
    let mut r = kmemtrace_import::sniff::formats_read();
    r.push(format!("JSON ({})", kmemtrace_analysis::model::SCHEMA));
    r
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    if let Some(code) = kmemtrace_cli::generate::from_args(Cli::command) {
        return code;
    }
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => usage_error(e),
    };
    let junit_path = cli.junit.as_ref();
    if let Some(bad) = cli.sort.iter().find(|k| !SORT_KEYS.contains(&k.as_str())) {
        let msg = format!("sort key \"{bad}\": one of {}", SORT_KEYS.join(", "));
        return fail(EXIT_USAGE, &msg, junit_path);
    }
    // A -m that names no metric would show "no figure changed".
    let names = figures::metric_names();
    if let Some(bad) = cli
        .metrics
        .iter()
        .find(|m| !names.iter().any(|n| gate::glob(m, n)))
    {
        let msg = format!("metric \"{bad}\" matches none of {}", names.join(", "));
        return fail(EXIT_USAGE, &msg, junit_path);
    }
    let (base_files, new_files) = match sides(&matches) {
        Ok(s) => s,
        Err(e) => return fail(EXIT_USAGE, &e, junit_path),
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
                Err(e) => return fail(EXIT_USAGE, &e, junit_path),
            }
        }
    };
    if cli.junit.is_some() && gates.is_empty() {
        let msg = "--junit writes the gates' results: give --gate RULES";
        return fail(EXIT_USAGE, msg, junit_path);
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
        Err(e) => return fail(EXIT_INPUT, &e, junit_path),
    };
    // A capture that is not whole is said; a gate cannot stand on it.
    let mut done = exit::OK;
    let partial = std::iter::once(&base)
        .chain(&news)
        .flat_map(|g| &g.captures)
        .filter_map(|c| {
            c.partial
                .as_ref()
                .map(|why| (format!("{}: {why}", c.name), why))
        });
    for (said, why) in partial {
        let code = match why {
            Partial::NoKmemEvents => EXIT_INPUT,
            Partial::Damaged(_) => exit::DAMAGED,
        };
        if !gates.is_empty() {
            let msg = format!("cannot gate on {said} (kmemtrace-check says more)");
            return fail(code, &msg, junit_path);
        }
        eprintln!("kmemtrace-diff: warning: {said}: its figures are not the whole capture's");
        done = exit::worst(done, code);
    }
    let d = kmemtrace_diff::diff(&base, &news, &gates, &cli.sort);
    for c in d
        .comparisons
        .iter()
        .filter(|c| !c.filters_differ.is_empty())
    {
        eprintln!(
            "kmemtrace-diff: warning: {} and {} were analysed with different selections ({})",
            d.base.label(),
            c.new.label(),
            c.filters_differ.join(", ")
        );
    }
    if let Some(path) = junit_path {
        if let Err(e) = write_file(path, &junit::write(&d)) {
            eprintln!("kmemtrace-diff: {e}");
            return EXIT_OUTPUT.exit_code();
        }
    }
    let opts = text::Options {
        // 0: every row.
        lines: if cli.lines == 0 {
            usize::MAX
        } else {
            cli.lines
        },
        all: cli.all,
        metrics: cli.metrics.clone(),
        color: {
            use std::io::IsTerminal;
            kmemtrace_cli::colour::use_color(std::io::stdout().is_terminal())
        },
    };
    let printed = if cli.json {
        // -m selects the changes in the document as in the table.
        let mut shown = d.clone();
        for c in &mut shown.comparisons {
            c.changes.retain(|ch| opts.keeps(&ch.metric));
            c.within_noise = c.changes.iter().filter(|ch| !ch.flagged()).count();
        }
        serde_json::to_string_pretty(&shown)
            .map_err(std::io::Error::other)
            .and_then(|s| emit(&(s + "\n")))
    } else {
        emit(&text::write(&d, &opts))
    };
    if let Err(e) = printed {
        eprintln!("kmemtrace-diff: {e}");
        return EXIT_OUTPUT.exit_code();
    }
    if d.gates_failed > 0 {
        done = exit::worst(done, EXIT_GATE);
    }
    done.exit_code()
}
