//! The command line (clap derive) and the checks that turn it into settings.

use clap::{Parser, ValueEnum};
use kmemtrace_format::block::Compression;
use std::path::PathBuf;
use std::time::Duration;

/// `-h`'s text after the options.
pub const SHORT_AFTER_HELP: &str = "\
Examples:
  kmemtraced -o boot.kmt -d 10s                record 10 seconds, system-wide
  kmemtraced -o make.kmt -F -- make -j2        trace only `make` and its children
  kmemtraced -o db.kmt -p $(pidof postgres)    trace running processes until they exit
  kmemtraced -o - | ssh host 'cat > x.kmt'     stream the log to another machine

--help: every option in full, examples, how a recording starts and stops,
the output file, exit status.";

/// `--help`'s text after the options: examples, behaviour, exit status.
pub fn after_help() -> String {
    use kmemtrace_cli::exit::*;
    let codes = help(&[
        (OK, "recording finished (whatever the traced command returned)"),
        (USAGE, "a bad option, an unknown event, a buffer size the kernel cannot allocate"),
        (INPUT, "tracefs unavailable or not permitted (not root, no tracefs, a kernel without tracing); --import: the dump or trace.dat is not usable"),
        (OUTPUT, "the log could not be created or written (a symlink, a missing directory, a full disk)"),
        (FAILED, "reading the ring buffer or a recorder thread failed; the log is finished as far as it could be"),
        (NOT_EXECUTABLE, "found, but not executable (nothing was recorded or touched)"),
        (NOT_FOUND, "not found in PATH (nothing was recorded or touched)"),
    ]);
    format!("{AFTER_HELP}\n\n{codes}")
}

const AFTER_HELP: &str = "\
Examples:
  kmemtraced -o boot.kmt -d 10s                record 10 seconds, system-wide
  kmemtraced -o make.kmt -- make -j2           trace the whole system while `make -j2` runs
  kmemtraced -o make.kmt -F -- make -j2        trace only `make` and its children
  kmemtraced -o db.kmt -p $(pidof postgres)    trace every postgres process (also -p 1234,1240)
  kmemtraced -o - | ssh host 'cat > x.kmt'     stream the log to another machine
  kmemtraced -o slab.kmt -e kmalloc,kfree -b 8192
  kmemtraced -o big.kmt -e kmalloc -f 'bytes_alloc > 4096' -e kfree   a filter on kmalloc
  kmemtraced -o cpu01.kmt -C 0-1 -d 10s        record CPUs 0 and 1 only
  kmemtraced -o old.kmt -c 1                   zstd alone, for readers older than format 1.3
  kmemtraced -o boot.kmt --boot                drain what `trace_event=kmem:...` recorded at boot
  kmemtraced --cleanup                         remove instances left by killed recorders
  kmemtraced --import dump.tar.gz -o board.kmt  log from a kmemtrace-capture.sh dump
  kmemtraced --import trace.dat -o board.kmt    log from trace-cmd record's file

Without -F or -p the whole system is traced, the recorder's own threads
too (the log lists them and the report leaves their own events out;
--trace-self counts them), and the switches from and to the idle task
(the report learns from them which tasks the kernel does not record);
COMMAND is traced. Recording stops on SIGINT,
SIGTERM or SIGHUP, when -d runs out, or when COMMAND exits; the command's own
exit status is stored in the log and does not change kmemtraced's.

COMMAND starts with no signal blocked or ignored. A stop signal is passed on
to it (Ctrl-C reaches it from the terminal directly) and recording goes on
until it exits, at most 10 s; a second signal stops at once. When -d runs
out first, COMMAND is left running. If recording fails (a full disk), the
log is finished as far as it can be and kmemtraced waits for COMMAND to
exit, passing signals on, then exits 4: the command is never orphaned.
Readers run at nice -10 (--reader-nice) so that bursts do not overrun them,
and below 4 MiB per CPU off the CPU they read (--reader-cpus).
A CPU that comes online while recording gets its reader within a second
(the kernel keeps its first events meanwhile); the log notes when.

The output is created with mode 0600: kallsyms and raw kernel pointers
reveal the kernel's layout. A symlink is refused, and its directory must
exist. It is opened only after every option has been accepted and COMMAND
found; an existing file is kept as FILE.old, as perf keeps perf.data.old,
and put back where the run records nothing of what was asked.

Each run traces in its own tracefs instance, instances/kmemtraced-<pid>-<start>,
removed on exit. A guardian process (`kmemtraced --guard`, in ps) stops
tracing there and removes it if the recorder is killed (SIGKILL, OOM);
any instance of a dead recorder left otherwise is removed by the next run.

";

#[derive(Parser, Debug)]
#[command(
    name = "kmemtraced",
    version = kmemtrace_cli::VERSION,
    long_version = kmemtrace_cli::long_version(&kmemtrace_import::sniff::formats_imported(), &[kmemtrace_format::block::versions_written()]),
    about = "Record the kernel's kmem trace events (slab and page allocations) into a kmemtrace log",
    after_help = SHORT_AFTER_HELP,
    after_long_help = after_help()
)]
pub struct Cli {
    /// Log file to write; `-`: standard output.
    ///
    /// Standard output must not be a terminal.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Stop after this long: `10s`, `500ms`, `2m`, `1h`, seconds.
    #[arg(short = 'd', long = "duration", value_name = "DURATION", allow_hyphen_values = true, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Events to record, comma-separated (default: kmem's and the stalls').
    ///
    /// `kmalloc`, `kmem:kfree`, `kmem:*`, `sched:sched_process_exec`.
    /// Default: every kmem allocation event this kernel has, and its
    /// allocation stall events (--stalls).
    #[arg(
        short = 'e',
        long = "events",
        value_name = "EVENTS",
        value_delimiter = ','
    )]
    pub events: Vec<String>,

    /// A kernel event filter for the `-e` before it.
    ///
    /// The kernel's syntax: `'bytes_alloc > 4096'`,
    /// `'call_site == 0xffffffff81234567'`, as trace-cmd's `-f`;
    /// before any `-e`, for every event recorded. The kernel checks it:
    /// one it refuses is a usage error with its reason.
    #[arg(short = 'f', long = "filter", value_name = "FILTER")]
    pub filters: Vec<String>,

    /// For each `-f`, the `-e` list just before it (`None`: every event):
    /// set by [`Cli::parse_args`] from where each option stands.
    #[arg(skip)]
    pub filter_events: Vec<Option<Vec<String>>>,

    /// Record only these CPUs (`0-3,6`), as perf's -C.
    ///
    /// The instance's `tracing_cpumask`. Default: every CPU.
    #[arg(short = 'C', long = "cpus", value_name = "LIST", value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,

    /// Per-CPU ring-buffer size in KiB (default: 4096).
    ///
    /// Default: 4096, or less to keep all CPUs' buffers within 1/64 of the
    /// available memory, and never below the kernel's own (usually 1408).
    /// A process freeing its memory at exit writes a megabyte of events
    /// within milliseconds: smaller buffers keep them only if their reader
    /// gets a CPU at once (see --reader-cpus).
    #[arg(short = 'b', long = "buffer-kb", value_name = "KB", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(4..))]
    pub buffer_kb: Option<u32>,

    /// Sub-buffer size in KiB (Linux 6.8+).
    ///
    /// Larger sub-buffers mean fewer reads and wake-ups. Default there: 64,
    /// or less to keep 64 sub-buffers per CPU; elsewhere the kernel's (one
    /// page). The kernel rounds up to a power of two of pages (24 is 32),
    /// and kmemtraced says so.
    #[arg(long = "subbuf-kb", value_name = "KB", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub subbuf_kb: Option<u32>,

    /// Trace clock (`local`, `global`, `mono`, `boot`, ...).
    ///
    /// Default: the kernel's (`local`); `trace_clock` lists what it has.
    #[arg(long = "clock", value_name = "CLOCK")]
    pub clock: Option<String>,

    /// kpack[=LEVEL], a zstd LEVEL 1-19, or none.
    ///
    /// `kpack` (the default; `kpack=LEVEL` for another zstd level behind
    /// it) stores each block's records as columns of like fields, then
    /// zstd (FORMAT.md §8.3), format 1.3. A zstd level 1-19 or zstd's
    /// faster `fast=1`..`fast=7` alone writes format 1.1, which readers
    /// older than 1.3 read whole (they skip kpack blocks) at more bytes.
    /// `none` stores the sub-buffers as they are, for a fast
    /// local disk only. docs/benchmarks.md has the sizes and costs.
    #[arg(short = 'c', long = "compress", value_name = "HOW", default_value = "kpack", allow_hyphen_values = true, value_parser = parse_compression)]
    pub compress: Compression,

    /// Trace only these processes and their descendants.
    ///
    /// `-p 1234,1240`, `-p 1234 1240` (so `-p $(pidof postgres)`), or `-p`
    /// repeated; every thread of each. The log also records
    /// the traced tasks' forks (`sched:sched_process_fork`) and the pids
    /// traced, so that the report keeps exactly this tree: the kernel's
    /// pid filter lets some events of neighbouring tasks through. Without
    /// a command, recording stops once every process asked for has exited
    /// (as perf record -p).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        num_args = 1..,
        value_delimiter = ',',
        allow_negative_numbers = true
    )]
    pub pids: Vec<u32>,

    /// Trace only COMMAND and its descendants.
    #[arg(short = 'F', long = "follow-command")]
    pub follow_command: bool,

    /// Count the recorder's own allocations as the workload's.
    ///
    /// The kernel records every task's events either way; by
    /// default the log lists the recorder's threads and the report leaves
    /// their own (not interrupt) events out of its figures.
    #[arg(long = "trace-self")]
    pub trace_self: bool,

    /// Record the allocation stall events (with the default events).
    ///
    /// Reclaim (direct, memcg, node) begin and end, throttling, kswapd and
    /// kcompactd wake and sleep, compaction, the OOM killer's retries,
    /// victims and reaping: those this kernel has. They fire only under
    /// memory pressure; the kernel takes a stack with the first event of
    /// each wait (unless --page-stacks off), for its call site.
    #[arg(long = "stalls", value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub stalls: bool,

    /// Also record reclaim's busy events: shrinkers, LRU isolation and
    /// shrinking, compaction's scanning.
    ///
    /// They fire for every batch reclaim works through (kswapd's too), so
    /// they cost in proportion to the pressure. Adds to -e lists too.
    #[arg(long = "stall-detail")]
    pub stall_detail: bool,

    /// Kernel stacks with page allocations, for the report's page call sites.
    ///
    /// N (a power of two up to 1024; default 16): a stack for the blocks
    /// in 1 in N page-frame regions (frame numbers with the log2(N) bits
    /// from bit 8 up clear: 1 MiB regions of 4 KiB pages), about 1 in N
    /// allocations; blocks aligned past those bits always pass. The report
    /// counts each sampled allocation as the allocations it stands for,
    /// and says so. `all` (or `on`, or 1):
    /// a stack with every allocation, which costs the traced tasks about as
    /// much as recording the events does. `off`: none (no page call sites).
    /// By the `stacktrace` event trigger in the recorder's own instance, not
    /// for the recorder's own threads outside interrupts (unless
    /// --trace-self).
    #[arg(long = "page-stacks", value_name = "N|all|off", default_value = "16", value_parser = parse_page_stacks)]
    pub page_stacks: u32,

    /// Drain what boot-time tracing left in the top buffer.
    ///
    /// What `trace_event=kmem:...` on the kernel command line recorded,
    /// without resetting the buffer
    /// or changing its events; no instance is created. Boot with
    /// `trace_buf_size=` large enough for the boot, and with `trace_clock=`
    /// set: a kernel that finds its clock unstable switches clocks at
    /// late_initcall, which empties the buffer (the log notes it).
    #[arg(long = "boot", conflicts_with_all = ["duration", "pids", "follow_command", "events", "filters", "cpus", "buffer_kb", "subbuf_kb", "clock", "command"])]
    pub boot: bool,

    /// Remove instances left by killed recorders, and exit.
    #[arg(long = "cleanup", conflicts_with_all = ["output", "boot", "command"])]
    pub cleanup: bool,

    /// Wake a reader when its buffer is this full (percent).
    ///
    /// Written to the instance's `buffer_percent`, raised to one
    /// sub-buffer's worth on small buffers; 0 wakes the reader for every
    /// event (costly). Default 25, or 50 where readers are real-time
    /// (`--reader-realtime`) and the buffer is 1 MiB per CPU or more.
    // A lower mark wakes a reader for fewer sub-buffers each time, which
    // costs more per event and lost events where 25% lost none: the
    // rounds that chose 25% are in docs/benchmarks.md ("Recording").
    #[arg(long = "buffer-percent", value_name = "PCT", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub buffer_percent: Option<u32>,

    /// Nice value of the per-CPU readers (-20..19).
    ///
    /// 0 leaves them at the normal priority. Readers need little CPU but need it at once
    /// when a burst fills the buffer while the traced load keeps every CPU
    /// busy. Their compressor threads take half a negative value (-5).
    #[arg(long = "reader-nice", value_name = "N", default_value_t = -10, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub reader_nice: i32,

    /// Where readers run: auto, others, any.
    ///
    /// `others` keeps each off the CPU it reads, `any` leaves it to the
    /// scheduler, `auto` is `others` below 4 MiB per CPU. A burst can hold
    /// a CPU where nothing else runs (softirq RCU work in an idle CPU's
    /// context, kernel code that does not yield), and the scheduler wakes
    /// that CPU's reader there because it looks idle: a small buffer
    /// overflows first. Reading from another CPU costs some recorder CPU
    /// (the data crosses caches), which a 4 MiB buffer need not pay.
    #[arg(
        long = "reader-cpus",
        value_name = "WHERE",
        hide_possible_values = true,
        default_value = "auto"
    )]
    pub reader_cpus: ReaderCpus,

    /// Readers under SCHED_FIFO at PRIO 1-99, auto, off.
    ///
    /// `auto` is 1 below 2 MiB per CPU, else `off`. A woken real-time
    /// reader takes a CPU from the traced load at its next preemption
    /// point, where a nice -10 one may still wait its turn, and small
    /// buffers overrun first. Their compressors keep their nice value
    /// (`--reader-nice`).
    /// `auto` is `off` with `--boot`, which only drains. Needs CAP_SYS_NICE
    /// (or RLIMIT_RTPRIO); where refused, readers keep the normal policy and
    /// the log says so.
    #[arg(
        long = "reader-realtime",
        value_name = "PRIO",
        default_value = "auto",
        value_parser = parse_reader_realtime
    )]
    pub reader_realtime: ReaderRealtime,

    /// Read sub-buffers with read(2) instead of splice(2).
    ///
    /// With read the kernel puts the page it last handed out back into the
    /// ring, so the padding inside records keeps that page's old bytes;
    /// splice gives it fresh zeroed pages instead (as trace-cmd gets), and
    /// the log compresses better. Splice falls back to read by itself where
    /// the kernel refuses it.
    #[arg(long = "no-splice")]
    pub no_splice: bool,

    /// Keep the capture's files within this many bytes: `64M`, `1G`.
    ///
    /// Rotates the log (as --rotate-size: by default a quarter of this, at
    /// least twice the metadata, at most half) and removes the oldest
    /// files, keeping the newest data, as perf's --switch-output with
    /// --switch-max-files, or trace-cmd's -m. Each file is a complete log;
    /// every kmemtrace tool reads the files left as one capture
    /// (`kmemtrace-report trace.kmt` finds them), the removed span a loss
    /// window of cause `rotated`. Where the disk fills first, the oldest
    /// files go early, and the summary says how many.
    #[arg(long = "max-size", value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,

    /// Finish each file of the capture before it grows past this size.
    ///
    /// `-o trace.kmt` writes `trace.000000.kmt`, `trace.000001.kmt`, ...
    /// Each file carries the metadata again (kallsyms: about a megabyte
    /// on a desktop kernel), so files much smaller than that waste space.
    #[arg(long = "rotate-size", value_name = "SIZE", value_parser = parse_size)]
    pub rotate_size: Option<u64>,

    /// Finish each file of the capture once it is this old: `10m`, `1h`.
    #[arg(long = "rotate-time", value_name = "DURATION", allow_hyphen_values = true, value_parser = parse_duration)]
    pub rotate_time: Option<Duration>,

    /// Write what a CPU has at least this often.
    ///
    /// Even if its buffer is not yet full: bounds what a crash loses and
    /// the latency of `-o -`.
    #[arg(long = "flush-interval", value_name = "DURATION", default_value = "1s", allow_hyphen_values = true, value_parser = parse_duration)]
    pub flush_interval: Duration,

    /// Tracefs mount point.
    ///
    /// Default: /sys/kernel/tracing, then /sys/kernel/debug/tracing.
    #[arg(long = "tracefs", value_name = "DIR")]
    pub tracefs: Option<PathBuf>,

    /// No status line and no summary.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// A capture-script dump or a trace.dat into a log.
    ///
    /// A dump is a directory, or a tar, gzip'd or not, as
    /// kmemtrace-capture.sh writes on machines that cannot run kmemtraced;
    /// a trace.dat of versions 6 and 7 gives its top buffer, else the first
    /// instance with data. The log keeps the recorded kernel's own byte
    /// order and sizes.
    #[arg(long = "import", value_name = "DUMP", conflicts_with_all = ["duration", "pids", "follow_command", "events", "filters", "cpus", "buffer_kb", "subbuf_kb", "clock", "command", "boot", "cleanup", "trace_self", "page_stacks"])]
    pub import: Option<PathBuf>,

    /// Internal: the guardian of a recording's instance (see guard.rs).
    #[arg(long = "guard", value_name = "DIR", hide = true)]
    pub guard: Option<PathBuf>,

    /// Command to run while tracing (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl Cli {
    /// Parses the command line (clap's errors exit 2), pairing each `-f`
    /// with the `-e` before it.
    /// The rotation asked, if any, for the output `output`.
    pub fn rotation(&self, output: &std::path::Path) -> Option<crate::rotate::RotationPlan> {
        (self.max_size.is_some() || self.rotate_size.is_some() || self.rotate_time.is_some()).then(
            || crate::rotate::RotationPlan {
                output: output.to_path_buf(),
                max_size: self.max_size,
                file_size: self.rotate_size,
                period: self.rotate_time,
            },
        )
    }

    pub fn parse_args() -> Cli {
        use clap::{CommandFactory, FromArgMatches};
        let m = Cli::command().get_matches();
        let mut cli = Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
        // Each value of `-e a,b` has an index of its own: an occurrence
        // starts at its first.
        let mut at = m.indices_of("events").into_iter().flatten();
        let events: Vec<(usize, Vec<String>)> = m
            .get_occurrences::<String>("events")
            .into_iter()
            .flatten()
            .map(|o| {
                let v: Vec<String> = o.cloned().collect();
                let first = at.next().unwrap_or(0);
                at.by_ref().take(v.len().saturating_sub(1)).for_each(drop);
                (first, v)
            })
            .collect();
        cli.filter_events = m
            .indices_of("filters")
            .into_iter()
            .flatten()
            .map(|at| {
                events
                    .iter()
                    .filter(|(i, _)| *i < at)
                    .max_by_key(|(i, _)| *i)
                    .map(|(_, v)| v.clone())
            })
            .collect();
        cli
    }
}

/// `-C`'s CPUs, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<u32>);

/// `-C`: a CPU list of at least one CPU.
fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let v = kmemtrace_kernel::human::parse_cpu_list(s)?;
    if v.is_empty() {
        return Err("an empty CPU list".into());
    }
    Ok(CpuList(v))
}

/// A size of at least 64 KiB ([`kmemtrace_cli::args::parse_size`]).
pub fn parse_size(s: &str) -> Result<u64, String> {
    match kmemtrace_cli::args::parse_size(s)? {
        n if n < 64 << 10 => Err(format!("size `{s}` is below 64 KiB")),
        n => Ok(n),
    }
}

/// A positive duration ([`kmemtrace_cli::args::parse_duration`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match kmemtrace_cli::args::parse_duration(s)? {
        d if d.is_zero() => Err(format!("duration `{s}` must be more than zero")),
        d => Ok(d),
    }
}

pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "yes" | "1" => Ok(true),
        "off" | "no" | "0" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

/// `--page-stacks`: 1 in how many page frames (0: off).
pub fn parse_page_stacks(s: &str) -> Result<u32, String> {
    match s {
        "all" | "on" => Ok(1),
        "off" => Ok(0),
        _ => match s.parse::<u32>() {
            Ok(n) if n.is_power_of_two() && n <= 1024 => Ok(n),
            _ => Err(format!(
                "`{s}`: expected a power of two from 1 to 1024, all or off"
            )),
        },
    }
}

pub fn parse_compression(s: &str) -> Result<Compression, String> {
    // kpack, then zstd at the level given (1 by default).
    if let Some(rest) = s.strip_prefix("kpack") {
        let level = match rest.strip_prefix(['=', ',']) {
            None if rest.is_empty() => 1,
            Some(l) => match parse_compression(l)? {
                Compression::Zstd(l) => l,
                _ => {
                    return Err(format!(
                        "`{s}`: kpack takes a zstd level: kpack=1..19 or kpack=fast=1..7"
                    ))
                }
            },
            None => return Err(format!("`{s}`: expected kpack or kpack=LEVEL")),
        };
        return Ok(Compression::Kpack(level));
    }
    if s.eq_ignore_ascii_case("none") || s == "0" {
        return Ok(Compression::None);
    }
    // zstd's fast levels, spelled as its command line does: fast=N.
    if let Some(n) = s.strip_prefix("fast=").or_else(|| s.strip_prefix("fast")) {
        return match n.parse::<i32>() {
            Ok(n) if (1..=7).contains(&n) => Ok(Compression::Zstd(-n)),
            _ => Err(format!("`{s}`: zstd fast levels are fast=1 to fast=7")),
        };
    }
    match s.parse::<i32>() {
        Ok(l) if (1..=19).contains(&l) => Ok(Compression::Zstd(l)),
        _ => Err(format!(
            "`{s}` is neither `none`, a zstd level 1-19, fast=1..7, nor kpack[=LEVEL]"
        )),
    }
}

/// `--reader-cpus`: where the per-CPU readers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReaderCpus {
    /// `others` below [`ReaderCpus::AUTO_AWAY_BELOW_KB`] per CPU, else `any`.
    Auto,
    /// Each reader keeps off the CPU it reads (where there is another).
    Others,
    /// Wherever the scheduler puts them.
    Any,
}

impl ReaderCpus {
    /// Per-CPU buffers smaller than this (KiB) make `auto` keep readers off
    /// their CPU: a smaller buffer cannot outlast an exit burst while its
    /// reader waits on the busy CPU (docs/benchmarks.md, "Why the defaults").
    pub const AUTO_AWAY_BELOW_KB: u32 = 4096;

    /// Whether readers keep off their CPU with this per-CPU buffer size
    /// (`None`: unknown, treated as small).
    pub fn away(self, buffer_kb: Option<u32>) -> bool {
        match self {
            ReaderCpus::Others => true,
            ReaderCpus::Any => false,
            ReaderCpus::Auto => buffer_kb.is_none_or(|kb| kb < Self::AUTO_AWAY_BELOW_KB),
        }
    }
}

/// `--reader-realtime`: the readers' real-time priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderRealtime {
    /// Priority 1 below [`ReaderRealtime::AUTO_BELOW_KB`] per CPU, else off.
    Auto,
    Off,
    /// SCHED_FIFO at this priority (1..=99).
    Fifo(u8),
}

impl ReaderRealtime {
    /// Per-CPU buffers smaller than this (KiB) make `auto` real-time: from
    /// here on nice -10 readers keep up, and real-time ones would only cost
    /// CPU (docs/benchmarks.md, "Why the defaults").
    pub const AUTO_BELOW_KB: u32 = 2048;

    /// The SCHED_FIFO priority with this per-CPU buffer size (`None`:
    /// none; an unknown size is treated as small).
    pub fn priority(self, buffer_kb: Option<u32>) -> Option<u8> {
        match self {
            ReaderRealtime::Fifo(p) => Some(p),
            ReaderRealtime::Off => None,
            ReaderRealtime::Auto => buffer_kb
                .is_none_or(|kb| kb < Self::AUTO_BELOW_KB)
                .then_some(1),
        }
    }
}

/// The wake-up mark (`buffer_percent`) where `--buffer-percent` gives none:
/// 50 for real-time readers of 1 MiB per CPU or more, 25 for the others.
// A real-time reader takes a CPU as soon as it is woken, so it needs less
// of the buffer as room and can read twice the sub-buffers per wake-up;
// what loses events is the room left, hence 1 MiB or more (the rounds are
// in docs/benchmarks.md, "Why the defaults").
pub fn wake_mark(asked: Option<u32>, realtime_readers: bool, buffer_kb: Option<u32>) -> u32 {
    let room_at_half = buffer_kb.is_some_and(|kb| kb >= WAKE_AT_HALF_FROM_KB);
    asked.unwrap_or(if realtime_readers && room_at_half {
        WAKE_MARK_REALTIME
    } else {
        WAKE_MARK
    })
}

/// [`wake_mark`]'s default, its mark for real-time readers, and the
/// per-CPU buffer (KiB) from which these wake at it.
pub const WAKE_MARK: u32 = 25;
pub const WAKE_MARK_REALTIME: u32 = 50;
pub const WAKE_AT_HALF_FROM_KB: u32 = 1024;

pub fn parse_reader_realtime(s: &str) -> Result<ReaderRealtime, String> {
    match s {
        "auto" => Ok(ReaderRealtime::Auto),
        "off" | "no" | "0" => Ok(ReaderRealtime::Off),
        _ => match s.parse::<u8>() {
            Ok(p) if (1..=99).contains(&p) => Ok(ReaderRealtime::Fifo(p)),
            _ => Err(format!(
                "`{s}`: expected auto, off or a SCHED_FIFO priority 1-99"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_real_time_below_2_mib_unless_told() {
        let auto = ReaderRealtime::Auto;
        assert_eq!(auto.priority(Some(512)), Some(1));
        assert_eq!(auto.priority(Some(2047)), Some(1));
        assert_eq!(auto.priority(Some(2048)), None);
        assert_eq!(auto.priority(None), Some(1));
        assert_eq!(ReaderRealtime::Off.priority(Some(64)), None);
        assert_eq!(ReaderRealtime::Fifo(50).priority(Some(65536)), Some(50));
        let parse = |v: &str| {
            Cli::try_parse_from(["kmemtraced", "--reader-realtime", v]).map(|c| c.reader_realtime)
        };
        assert_eq!(parse("auto").unwrap(), auto);
        assert_eq!(parse("off").unwrap(), ReaderRealtime::Off);
        assert_eq!(parse("99").unwrap(), ReaderRealtime::Fifo(99));
        for bad in ["100", "-1", "fifo", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn real_time_readers_wake_at_half_unless_told() {
        let mark = |args: &[&str], realtime, kb| {
            let cli = Cli::try_parse_from(["kmemtraced"].iter().chain(args)).unwrap();
            wake_mark(cli.buffer_percent, realtime, kb)
        };
        assert_eq!(mark(&[], false, Some(1024)), 25);
        assert_eq!(mark(&[], true, Some(1024)), 50);
        assert_eq!(mark(&[], true, Some(65536)), 50);
        // Half of a small buffer leaves too little room.
        assert_eq!(mark(&[], true, Some(512)), 25);
        assert_eq!(mark(&[], true, None), 25);
        assert_eq!(mark(&["--buffer-percent", "10"], true, Some(1024)), 10);
        assert_eq!(mark(&["--buffer-percent", "0"], false, None), 0);
    }

    #[test]
    fn readers_keep_off_their_cpu_below_4_mib_unless_told() {
        let auto = ReaderCpus::Auto;
        assert!(auto.away(Some(1024)));
        assert!(auto.away(Some(4095)));
        assert!(!auto.away(Some(4096)));
        assert!(!auto.away(Some(65536)));
        assert!(auto.away(None));
        assert!(ReaderCpus::Others.away(Some(65536)));
        assert!(!ReaderCpus::Any.away(Some(1024)));
        let cli = Cli::try_parse_from(["kmemtraced", "--reader-cpus", "any"]).unwrap();
        assert_eq!(cli.reader_cpus, ReaderCpus::Any);
        assert!(Cli::try_parse_from(["kmemtraced", "--reader-cpus", "cpu0"]).is_err());
    }

    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The defaults `--help` states are the ones the code uses.
    #[test]
    fn the_help_states_the_defaults_in_use() {
        use crate::record::{
            COMMAND_GRACE, DEFAULT_BUFFER_KB, DEFAULT_SUBBUF_KB, MIN_SUBBUFS_PER_CPU,
        };
        let help = Cli::command().render_long_help().to_string();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let mib = |kb: u32| kb / 1024;
        let defaults = Cli::try_parse_from(["kmemtraced"]).unwrap();
        for phrase in [
            format!("size in KiB (default: {DEFAULT_BUFFER_KB})"),
            format!("Default: {DEFAULT_BUFFER_KB}, or less"),
            format!("Default there: {DEFAULT_SUBBUF_KB}, or less to keep {MIN_SUBBUFS_PER_CPU} sub-buffers per CPU"),
            format!("`auto` is `others` below {} MiB per CPU", mib(ReaderCpus::AUTO_AWAY_BELOW_KB)),
            format!("which a {} MiB buffer need not pay", mib(ReaderCpus::AUTO_AWAY_BELOW_KB)),
            format!("below {} MiB per CPU off the CPU they read", mib(ReaderCpus::AUTO_AWAY_BELOW_KB)),
            format!("`auto` is 1 below {} MiB per CPU", mib(ReaderRealtime::AUTO_BELOW_KB)),
            format!(
                "Default {WAKE_MARK}, or {WAKE_MARK_REALTIME} where readers are real-time (`--reader-realtime`) and the buffer is {} MiB per CPU or more",
                mib(WAKE_AT_HALF_FROM_KB)
            ),
            format!("default {}): a stack", defaults.page_stacks),
            format!("Readers run at nice {} (--reader-nice)", defaults.reader_nice),
            format!("at most {} s; a second signal", COMMAND_GRACE.as_secs()),
        ] {
            assert!(help.contains(&phrase), "--help lacks {phrase:?}");
        }
    }

    #[test]
    fn durations_are_positive() {
        // The units are the library's (tested there).
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn compression() {
        assert_eq!(parse_compression("none").unwrap(), Compression::None);
        assert_eq!(parse_compression("3").unwrap(), Compression::Zstd(3));
        assert_eq!(parse_compression("fast=3").unwrap(), Compression::Zstd(-3));
        assert!(parse_compression("fast=9").is_err());
        assert_eq!(parse_compression("kpack").unwrap(), Compression::Kpack(1));
        assert_eq!(parse_compression("kpack=3").unwrap(), Compression::Kpack(3));
        assert_eq!(
            parse_compression("kpack=fast=2").unwrap(),
            Compression::Kpack(-2)
        );
        assert!(parse_compression("kpack=none").is_err());
        assert!(parse_compression("kpacks").is_err());
        assert!(parse_compression("99").is_err());
    }
}
