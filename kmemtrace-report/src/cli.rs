//! The command line.

use clap::Parser;
use kmemtrace_analysis::model::Severity;
use std::path::PathBuf;

/// The call-site sort when `-s` is not given: the most bytes first, then
/// the most hits (`-s frag,hit,bytes` is perf kmem's order).
pub const DEFAULT_SORT: &str = "bytes,hit";

/// `-h`'s text after the options.
const SHORT_AFTER_HELP: &str = "\
Examples:
  kmemtrace-report x.kmt                          summary, top call sites, misuse, leaks
  kmemtrace-report x.kmt -s waste,hit -l 40       the 40 most wasteful call sites
  kmemtrace-report x.kmt --page --caller --stacks page call sites with their stacks
  kmemtrace-report x.kmt --events --cpu 1          the events, as the kernel's trace file

--help: every option in full, more examples, sort keys, filters, exit status.";

/// `--help`'s text after the options.
pub fn after_help() -> String {
    use kmemtrace_cli::exit::*;
    let codes = help(&[
        (OK, "report printed"),
        (NO, "--fail-on given and a certain finding of that severity or worse exists"),
        (USAGE, "a bad option; a filter (--cpu, --pid, --comm, --callsite, --time, --event) that selects nothing: the message names what the log has"),
        (INPUT, "not a capture (the message says what the file is), no ARCH block, unreadable, no kmem formats"),
        (OUTPUT, "the report or --html page could not be written (other than a closed pipe)"),
        (DAMAGED, "the log is cut short or damaged: the report covers what could be read, and stderr says per CPU what is unknown (also with --fail-on: a gate never passes on it)"),
    ]);
    format!("{AFTER_HELP}\n\n{codes}")
}

const AFTER_HELP: &str = "\
Examples:
  kmemtrace-report boot.kmt                       summary, top call sites, misuse, leaks
  kmemtraced -o - -d 10s | kmemtrace-report -     analyse while recording
  kmemtrace-report x.kmt -s waste,hit -l 40       the 40 most wasteful call sites
  kmemtrace-report x.kmt -s frag,hit,bytes        call sites in perf kmem's order
  kmemtrace-report x.kmt --caches --matrix        per-cache and size-class tables, CPU x CPU frees
  kmemtrace-report x.kmt --leaks --min-age 2s     objects still live after 2 s, by call site
  kmemtrace-report x.kmt --callsite 'ext4_*' --cpu 0-3 --time 1.5..3
  kmemtrace-report x.kmt --comm 'nginx*' --pid 4242,4243
  kmemtrace-report x.kmt --kallsyms System.map-6.1.0   symbols from another file
  kmemtrace-report x.kmt --json > report.json     everything, schema kmemtrace-report/1
  kmemtrace-report x.kmt --html report.html       and a page with plots (one file, no network)
  kmemtrace-report x.kmt --fail-on error          exit 1 on certain error findings (CI gates)
  kmemtrace-report x.kmt --page --caller --stacks page call sites, each with its commonest stack
  kmemtrace-report x.kmt --page --live --cull pid,callsite   pages still allocated, by owner
  kmemtrace-report x.kmt --page --alloc -s page    allocations per page frame
  kmemtrace-report x.kmt --events --event 'mm_page*' --cpu 1   the events, as the kernel's trace file

Sort keys (-s, comma-separated, first key first): callsite, bytes (allocated),
req, hit, frag, waste, pingpong (cross-CPU frees), live (live bytes at the
end), peak (peak live bytes). Default: bytes,hit (what costs most first);
perf kmem's order is -s frag,hit,bytes. -s shows the call-site table
beside other section flags (--caches --matrix).
The page tables take page (frame), callsite, bytes, hit, order, migtype and
gfp from the same list (numbers the largest first, the rest ascending);
default bytes,hit, as perf kmem --page.

Page call sites come from the kernel stacks kmemtraced records with page
allocations (--page-stacks: by default for 1 in 16 page frames, whose
allocations then count as the 16 they stand for, the table's hits and bytes
estimates with their margin; `all` for every one): the first frame outside
the tracing machinery and the page allocator, whose functions in the
recorded kernel the JSON lists (pages.allocator_functions). Without stacks
the call site is `-`.

Filters: --time cuts the capture to a window (seconds after the first event,
or @ABSOLUTE trace-clock seconds as the kernel's trace prints them). --cpu,
--pid, --comm and --callsite select allocations by the allocating event
(--cpu in every section, --callsite in the slab ones only: the page section
is not filtered by it); an object is followed to its free on any CPU, by
any task. A log recorded with `kmemtraced -p` or `-F` is analysed for the
traced tasks and their descendants (from the forks it recorded);
--all-tasks keeps the events of other tasks that the kernel's pid filter
let through.

Findings that fall where the log lost events are counted as uncertain and
never reported as kernel bugs.";

#[derive(Parser, Debug)]
#[command(
    name = "kmemtrace-report",
    version = kmemtrace_cli::VERSION,
    long_version = kmemtrace_cli::long_version(
        &kmemtrace_import::sniff::formats_read(),
        &[format!("JSON ({})", kmemtrace_analysis::model::SCHEMA)]
    ),
    about = "Slab fragmentation, cross-CPU frees, leaks and allocator misuse per call site, from a kmemtrace log",
    after_help = SHORT_AFTER_HELP,
    after_long_help = after_help()
)]
pub struct Cli {
    /// The log (`-` for standard input); several: the files of one
    /// rotated capture (or the name it was recorded under, `-o`).
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    pub file: Vec<PathBuf>,

    /// Print everything as one JSON document (see JSON.md).
    #[arg(long)]
    pub json: bool,

    /// Also write the report as one HTML page with plots.
    ///
    /// One self-contained page (live bytes over time, rates per CPU with
    /// lost-event windows, heat maps, sortable tables) to FILE (`-`: to
    /// standard output instead of the text report).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// List every event, as the kernel's `trace` file prints it.
    ///
    /// Instead of a report: in time order across CPUs, as the recorded
    /// kernel's own `trace` file prints it (with --cpu, --pid,
    /// --comm, --time and --event). The recorder's own threads' events are
    /// left out, as in the report (--all-tasks keeps them).
    #[arg(long, conflicts_with_all = ["json", "html", "caller", "caches", "matrix", "alloc", "leaks", "misuse", "page", "live", "stalls", "callsite", "fail_on"])]
    pub events: bool,
    /// With --events: only these events (globs).
    ///
    /// `name` or `system:name`, comma-separated, globs with * and ?; the
    /// stacks taken with them follow them.
    #[arg(
        long = "event",
        value_name = "NAME,...",
        value_delimiter = ',',
        requires = "events"
    )]
    pub event: Vec<String>,

    /// Sort keys (default: bytes,hit; perf's: frag,hit,bytes).
    ///
    /// For call sites (and caches, pointers), the first first; see below.
    #[arg(
        short = 's',
        long = "sort",
        value_name = "KEYS",
        default_value = DEFAULT_SORT,
        hide_default_value = true
    )]
    pub sort: String,

    /// Rows per table (default 20; HTML: 500; JSON: all; 0: all).
    #[arg(short = 'l', long = "lines", value_name = "N")]
    pub lines: Option<usize>,

    /// Show the per-call-site table.
    #[arg(long)]
    pub caller: bool,
    /// Show per-cache and per-kmalloc-size-class tables.
    #[arg(long)]
    pub caches: bool,
    /// Show the allocating CPU x freeing CPU matrix.
    #[arg(long)]
    pub matrix: bool,
    /// Show the per-object (per pointer) table.
    #[arg(long)]
    pub alloc: bool,
    /// Show the leak table.
    #[arg(long)]
    pub leaks: bool,
    /// Show the misuse findings.
    #[arg(long)]
    pub misuse: bool,
    /// Show the page-allocator section.
    ///
    /// perf kmem --page's summary, order x migratetype, per-CPU lists,
    /// external fragmentation.
    #[arg(long)]
    pub page: bool,
    /// Show the allocation stalls section.
    ///
    /// Reclaim, compaction, throttling and OOM kills joined into episodes
    /// per task, by call site, order and GFP; in the default report
    /// whenever the log has stall events.
    #[arg(long)]
    pub stalls: bool,
    /// With --page: the pages still allocated at the end.
    ///
    /// Grouped by --cull (page_owner_sort's question, answered from the
    /// trace).
    #[arg(long)]
    pub live: bool,
    /// How --live groups: stack, callsite, pid, comm.
    #[arg(long, value_name = "KEYS", default_value = "stack")]
    pub cull: String,
    /// Whole kernel stacks in the page tables.
    #[arg(long)]
    pub stacks: bool,

    /// Leaks: only objects this old at the end (`2s`).
    #[arg(long = "min-age", value_name = "DURATION", value_parser = parse_duration_ns, default_value = "0")]
    pub min_age: u64,

    /// Frees remembered to recognise double frees.
    ///
    /// Double frees are recognised while the first free is among the last
    /// N to 2N frees (counted in each of 64 buckets of the pointer hash,
    /// N/64 each; a bucket's N grows to a quarter of the pointers it
    /// tracks, live and remembered freed, if that is more; memory: about
    /// 80 bytes x 2N).
    #[arg(long = "remember-frees", value_name = "N", default_value = "32768")]
    pub remember_frees: usize,

    /// Only allocations on these CPUs (`0-3,6`).
    #[arg(long, value_name = "LIST")]
    pub cpu: Option<String>,
    /// Only allocations by these pids (comma-separated).
    #[arg(long, value_name = "PID,...", value_delimiter = ',')]
    pub pid: Vec<i32>,
    /// Every task's events, not only the traced tree's.
    ///
    /// A log recorded with `kmemtraced --pid` or `-F` is analysed for the
    /// traced tasks and their descendants only (the kernel's pid filter
    /// lets through some events of tasks switched or woken beside them):
    /// keep every task's events instead. With --events: the recorder's
    /// own threads' events too.
    #[arg(long = "all-tasks", conflicts_with_all = ["pid", "comm"])]
    pub all_tasks: bool,
    /// Only allocations by tasks of this name (a glob).
    ///
    /// From the log's task names: the whole name, or a glob with * and ?
    /// (`'stress-ng*'`).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Only events in this window (seconds).
    ///
    /// `START..END` seconds after the first event, or `@START..@END`
    /// trace-clock seconds; either side optional.
    #[arg(long, value_name = "START..END", allow_hyphen_values = true)]
    pub time: Option<String>,
    /// Only slab call sites whose symbol matches.
    ///
    /// A glob with * and ?, else a part of the name; pages are not
    /// selected by it.
    #[arg(long, value_name = "PATTERN")]
    pub callsite: Option<String>,

    /// Symbols from this kallsyms or System.map.
    #[arg(long, value_name = "FILE")]
    pub kallsyms: Option<PathBuf>,
    /// Source lines from the recorded kernel's debug info.
    ///
    /// A vmlinux with DWARF (CONFIG_DEBUG_INFO; Debian's linux-image-*-dbg
    /// has one under /usr/lib/debug/boot): each call site of the slab, leak
    /// and page tables gets its function, file:line and the functions
    /// inlined at the call, as scripts/faddr2line prints them (the SOURCE
    /// LINES section; `sources` in JSON). The KASLR offset comes from the
    /// log's kallsyms (_text).
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// Modules' debug info: the .ko files with DWARF under DIR (a build
    /// tree, /lib/modules/VERSION, or Debian's
    /// /usr/lib/debug/lib/modules/VERSION), by module name: call sites in
    /// modules get their source lines as --vmlinux gives the kernel's,
    /// placed by the log's kallsyms. With or without --vmlinux.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Show call sites as raw addresses.
    #[arg(long = "raw-ip")]
    pub raw_ip: bool,

    /// Exit 1 on a certain finding this severe or worse.
    #[arg(long = "fail-on", value_name = "SEVERITY", value_parser = parse_severity)]
    pub fail_on: Option<Severity>,

    /// Threads (default: one per core, at most 16).
    ///
    /// Up to 2: one analysis shard and N-1 decoder threads (the shard
    /// decodes blocks itself while it waits, and with -j 1 decodes them
    /// all); beyond, N decoders and N shards, each following the pointers
    /// of its buckets (default: one per core, at most 16). The report is
    /// the same whatever the number. Opening the log parses the kernel's
    /// symbol table on every core the process may run on, whatever N.
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// Where the time went, on standard error after the report: each
    /// phase, each stream stage's threads (CPU time, time waiting on the
    /// stage before or after), and the run's wall time predicted on CORES
    /// cores (default 16) by its critical path. Run with `-j CORES` to
    /// predict a machine of CORES cores on this one (`--timings=CORES`).
    #[arg(long, value_name = "CORES", num_args = 0..=1, require_equals = true,
          default_missing_value = "16",
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub timings: Option<u16>,

    /// No progress line and no warnings.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `--min-age`: a duration in nanoseconds.
fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let d = kmemtrace_cli::args::parse_duration(s)?;
    u64::try_from(d.as_nanos()).map_err(|_| format!("duration `{s}` is out of range"))
}

/// `--fail-on`: `info`, `warning` or `error`.
fn parse_severity(s: &str) -> Result<Severity, String> {
    Severity::ALL
        .into_iter()
        .find(|v| v.name() == s)
        .ok_or_else(|| format!("`{s}` is not a severity: use info, warning or error"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults `--help` states are the ones the code uses.
    #[test]
    fn the_help_states_the_defaults_in_use() {
        use crate::output::{HTML_LINES, TEXT_LINES};
        use clap::CommandFactory;
        use kmemtrace_analysis::run::MAX_DEFAULT_THREADS;
        let help = Cli::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let timings = Cli::try_parse_from(["kmemtrace-report", "x.kmt", "--timings"])
            .unwrap()
            .timings
            .unwrap();
        for phrase in [
            format!("Sort keys (default: {DEFAULT_SORT};"),
            format!("Default: {DEFAULT_SORT} (what costs most first)"),
            format!("default {DEFAULT_SORT}, as perf kmem --page"),
            format!("Rows per table (default {TEXT_LINES}; HTML: {HTML_LINES};"),
            format!("Threads (default: one per core, at most {MAX_DEFAULT_THREADS})"),
            format!("cores (default {timings})"),
        ] {
            assert!(help.contains(&phrase), "--help lacks {phrase:?}");
        }
    }

    #[test]
    fn min_ages() {
        assert_eq!(parse_duration_ns("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration_ns("2").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration_ns("1m").unwrap(), 60_000_000_000);
        assert!(parse_duration_ns("1y").is_err());
    }
}
