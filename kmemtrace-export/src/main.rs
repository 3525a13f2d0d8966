//! `kmemtrace-export LOG --to trace-dat|perfetto|parquet -o OUT`.

use clap::{Parser, ValueEnum};
use kmemtrace_analysis::DebugInfo;
use kmemtrace_cli::exit::{self, Code};
use kmemtrace_import::log::Log;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// trace-cmd's trace.dat (version 7, compressed, unless
    /// --trace-dat-version 6): `trace-cmd report -i OUT` and KernelShark
    /// open it.
    TraceDat,
    /// A Perfetto trace (protobuf): ui.perfetto.dev and trace_processor
    /// open it; kmem events as Perfetto's typed events, others generic.
    Perfetto,
    /// Parquet files in the directory OUT (slab, page and per-CPU list
    /// events, call sites) and a manifest: for DuckDB, Spark, pandas.
    Parquet,
}

#[derive(Clone, Copy, ValueEnum)]
enum PerfettoCompression {
    /// In batches, each deflated (zlib) into one `compressed_packets`
    /// packet, as Perfetto's own service writes them: trace_processor and
    /// ui.perfetto.dev inflate them as they read.
    Zlib,
    /// Each packet as it is, for tools that do not inflate them.
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum DatVersion {
    /// Version 7, as trace-cmd 3 writes it: sections, the metadata and
    /// the CPU data compressed with zstd (read by trace-cmd 3.0 and later).
    #[value(name = "7")]
    V7,
    /// Version 6: nothing compressed (every trace-cmd and KernelShark).
    #[value(name = "6")]
    V6,
}

/// `--help`'s exit status.
fn exit_help() -> String {
    use kmemtrace_cli::exit::*;
    help(&[
        (OK, "written"),
        (USAGE, ""),
        (INPUT, "the input cannot be read (the message says what it is)"),
        (OUTPUT, "a symlink, a missing directory, a directory not ours, a full disk; the previous output is put back"),
        (DAMAGED, "the log is cut short or damaged: what could be read was exported, and stderr says per CPU what is unknown"),
    ])
}

/// Write a kmemtrace log (or a trace.dat) in another tool's format.
#[derive(Parser)]
#[command(
    version = kmemtrace_cli::VERSION,
    long_version = kmemtrace_cli::long_version(&kmemtrace_import::sniff::formats_read(), &writes()),
    after_long_help = exit_help(),
    after_help = "Examples:\n  kmemtrace-export board.kmt --to trace-dat -o board.dat && trace-cmd report -i board.dat\n  kmemtrace-export board.kmt --to perfetto -o board.pftrace   # open in ui.perfetto.dev\n  kmemtrace-export board.kmt --to parquet -o dataset/board1   # duckdb, spark: dataset/*/slab_events.parquet\n\nParquet columns and types: kmemtrace-export/PARQUET.md in the sources."
)]
struct Cli {
    /// The log; several: the files of one rotated capture (or the name
    /// it was recorded under, `-o`).
    #[arg(required = true, num_args = 1..)]
    log: Vec<PathBuf>,
    /// The format to write.
    #[arg(long, value_enum, default_value = "trace-dat")]
    to: Format,
    /// Where to write (for parquet: a directory; `-`: standard output, for
    /// perfetto).
    ///
    /// New files are readable by their owner only, as the log. An
    /// existing file is kept as NAME.old, an earlier Parquet dataset as
    /// NAME.old/; the directory it goes in must exist.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// The trace.dat version written by --to trace-dat.
    #[arg(long, value_enum, value_name = "N", default_value = "7")]
    trace_dat_version: DatVersion,
    /// How --to perfetto writes its packets.
    #[arg(long, value_enum, value_name = "HOW", default_value = "zlib")]
    perfetto_compression: PerfettoCompression,
    /// No progress line and no summary on standard error (errors are
    /// still reported). The progress line is shown on a terminal only.
    #[arg(short, long)]
    quiet: bool,
    /// The capture's name in Parquet rows and the manifest (default: the
    /// log's file name without its extension).
    #[arg(long, value_name = "NAME")]
    capture: Option<String>,
    /// Threads writing Parquet files (default: one per core). The files are
    /// the same whatever the number.
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Source lines of the call sites from the recorded kernel's debug
    /// info (a vmlinux with DWARF): callsites.parquet's source_* columns
    /// (--to parquet), the stall slices' `source` argument (--to
    /// perfetto); the KASLR offset comes from the log's kallsyms (_text).
    #[arg(long, value_name = "FILE")]
    vmlinux: Option<PathBuf>,
    /// Modules' debug info: the .ko files with DWARF under DIR, by module
    /// name, for the call sites in modules (as kmemtrace-report --modules).
    #[arg(long, value_name = "DIR")]
    modules: Option<PathBuf>,
    /// Sub-buffer bytes per unit of work (tests: many small ones).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    run_bytes: Option<u64>,
}

/// Why the export stops: a code of the one table and one line.
type Stop = (Code, String);

/// What `--to` writes, for `--version`.
fn writes() -> Vec<String> {
    vec![
        kmemtrace_import::tracedat::versions_named(),
        "Perfetto trace (protobuf)".into(),
        format!("Parquet ({})", kmemtrace_export::parquet::SCHEMA),
    ]
}

fn main() -> ExitCode {
    if let Some(code) = kmemtrace_cli::generate::from_args(<Cli as clap::CommandFactory>::command) {
        return code;
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code.exit_code(),
        Err((code, msg)) => {
            eprintln!("kmemtrace-export: {msg}");
            code.exit_code()
        }
    }
}

/// `-o -`: standard output takes a Perfetto trace only, never a terminal.
fn check_stdout(cli: &Cli) -> Result<(), Stop> {
    if cli.output.as_os_str() != "-" {
        return Ok(());
    }
    if !matches!(cli.to, Format::Perfetto) {
        return Err((
            exit::USAGE,
            "-o -: standard output takes --to perfetto only (a trace.dat is written with seeks back, Parquet is a directory)".into(),
        ));
    }
    kmemtrace_cli::output::stdout_binary("a binary trace")
        .map(drop)
        .map_err(|r| (r.code, format!("-o -: {}", r.msg)))
}

/// The export: the summary line on stderr, then what the log lacks, if
/// anything (exit 5: what could be read was exported).
fn run(cli: &Cli) -> Result<Code, Stop> {
    check_stdout(cli)?;
    let debug_files = cli.vmlinux.is_some() || cli.modules.is_some();
    if debug_files && matches!(cli.to, Format::TraceDat) {
        return Err((
            exit::USAGE,
            "--vmlinux, --modules: a trace.dat has no place for source lines (--to parquet and --to perfetto have)".into(),
        ));
    }
    let mut log = kmemtrace_import::open_capture(&cli.log)
        .map_err(|e| (exit::INPUT, format!("{}: {e}", cli.log[0].display())))?;
    // Read before the export starts: unusable debug info is the input's
    // fault, and the log's kallsyms (the KASLR offset) is still in it.
    let debug = debug_files
        .then(|| {
            DebugInfo::open(
                cli.vmlinux.as_deref(),
                cli.modules.as_deref(),
                log.kallsyms.as_ref(),
            )
        })
        .transpose()
        .map_err(|e| (exit::INPUT, e))?;
    let incomplete = log.incomplete();
    let name = log.name.clone();
    let (summary, kept) = match cli.to {
        Format::TraceDat => to_file(cli, |out| trace_dat(cli, &log, out))?,
        Format::Perfetto if cli.output.as_os_str() == "-" => {
            let out = Box::new(std::io::stdout().lock());
            (
                perfetto(cli, &mut log, debug.as_ref(), out).map_err(|e| output_failed(cli, e))?,
                None,
            )
        }
        Format::Perfetto => to_file(cli, |out| {
            perfetto(cli, &mut log, debug.as_ref(), Box::new(out))
        })?,
        Format::Parquet => parquet(cli, log, debug.as_ref())?,
    };
    if !cli.quiet {
        let to = if cli.output.as_os_str() == "-" {
            "standard output".into()
        } else {
            cli.output.display().to_string()
        };
        eprintln!("kmemtrace-export: {name} -> {to}: {summary}");
        if let Some(note) = kept {
            eprintln!("kmemtrace-export: {note}");
        }
    }
    Ok(match incomplete {
        Some(inc) => {
            if !cli.quiet {
                for l in inc.lines(&name) {
                    eprintln!("kmemtrace-export: {l}");
                }
            }
            exit::DAMAGED
        }
        None => exit::OK,
    })
}

/// Writes the output file under the output policy with `write`; a failed
/// write puts the previous file back. The summary, and where the previous
/// file went.
fn to_file(
    cli: &Cli,
    write: impl FnOnce(std::fs::File) -> std::io::Result<String>,
) -> Result<(String, Option<String>), Stop> {
    let out = kmemtrace_cli::output::create(&cli.output).map_err(|r| (r.code, r.msg))?;
    let file = out.file.try_clone().map_err(|e| output_failed(cli, e))?;
    match write(file) {
        Ok(s) => Ok((s, out.kept_note())),
        Err(e) => {
            let _ = out.restore();
            Err(output_failed(cli, e))
        }
    }
}

fn trace_dat(cli: &Cli, log: &Log, out: std::fs::File) -> std::io::Result<String> {
    // Written with seeks back (section sizes): a file only.
    let out = std::io::BufWriter::with_capacity(1 << 20, out);
    let version = match cli.trace_dat_version {
        DatVersion::V7 => kmemtrace_export::tracedat::Version::V7,
        DatVersion::V6 => kmemtrace_export::tracedat::Version::V6,
    };
    let mut line = progress_line(cli);
    let written = kmemtrace_export::tracedat::write(log, out, version, &mut |p| {
        if let Some(l) = line.as_mut() {
            l.update(|t| kmemtrace_export::progress::line(p, t))
        }
    });
    drop(line);
    let w = written?;
    let zstd = if w.version >= 7 {
        format!(
            " (zstd: {} of pages in {})",
            human_bytes(w.page_bytes),
            human_bytes(w.stored_page_bytes)
        )
    } else {
        String::new()
    };
    let mut unreadable = if w.unreadable_pages > 0 {
        format!(
            "; {} pages unreadable in the log, written empty",
            w.unreadable_pages
        )
    } else {
        String::new()
    };
    if w.blocks_left_out > 0 {
        unreadable.push_str(&format!(
            "; {} blocks of CPUs numbered past Linux's {} left out",
            w.blocks_left_out,
            kmemtrace_kernel::LINUX_MAX_NR_CPUS
        ));
    }
    Ok(format!(
        "trace.dat version {}{zstd}, {} CPUs, {} pages, {} event formats{unreadable}",
        w.version, w.cpus, w.pages, w.formats
    ))
}

fn perfetto(
    cli: &Cli,
    log: &mut Log,
    debug: Option<&DebugInfo>,
    out: Box<dyn std::io::Write + '_>,
) -> std::io::Result<String> {
    let out = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut line = progress_line(cli);
    let mut series = kmemtrace_export::perfetto::derived_series(log, &mut |p| {
        if let Some(l) = line.as_mut() {
            l.update(|t| kmemtrace_export::progress::line(p, t))
        }
    });
    if let Some(d) = debug {
        series.add_sources(d);
    }
    let compression = match cli.perfetto_compression {
        PerfettoCompression::Zlib => kmemtrace_export::perfetto::Compression::Zlib,
        PerfettoCompression::None => kmemtrace_export::perfetto::Compression::None,
    };
    let written = kmemtrace_export::perfetto::write(log, &series, out, compression, &mut |p| {
        if let Some(l) = line.as_mut() {
            l.update(|t| kmemtrace_export::progress::line(p, t))
        }
    });
    drop(line);
    let w = written?;
    let mut s = format!(
        "Perfetto trace, {} typed kmem events, {} generic events, {} bundles, {} counter values",
        w.typed, w.generic, w.bundles, w.counter_points
    );
    if w.stall_episodes > 0 {
        s += &format!(
            ", {} allocation stall episodes as slices ({} waits in them)",
            w.stall_episodes, w.stall_phases
        );
    }
    if w.compressed_packets > 0 {
        s += &format!(", zlib-compressed in {} packets", w.compressed_packets);
    }
    if w.unknown > 0 {
        s += &format!("; {} records of unknown events left out", w.unknown);
    }
    if !kmemtrace_format::arch::clock_in_ns(log.arch.trace_clock.as_deref()) {
        s += &format!(
            "; the trace clock {:?} does not count nanoseconds: times are its own counts",
            log.arch.trace_clock.as_deref().unwrap_or("?")
        );
    }
    for (event, fields) in &w.dropped_fields {
        s += &format!("; {event}: {} not in Perfetto's message", fields.join(", "));
    }
    Ok(s)
}

/// The Parquet dataset in its directory, under the output policy (an
/// earlier dataset, with its manifest, is kept as `NAME.old`).
fn parquet(
    cli: &Cli,
    log: Log,
    debug: Option<&DebugInfo>,
) -> Result<(String, Option<String>), Stop> {
    let capture = cli.capture.clone().unwrap_or_else(|| {
        cli.log[0]
            .file_stem()
            .map_or("capture".into(), |s| s.to_string_lossy().into_owned())
    });
    let opts = kmemtrace_export::parquet::Options {
        threads: cli.threads.map(usize::from),
        run_bytes: cli.run_bytes,
        debug,
    };
    let dir = kmemtrace_cli::output::create_dir(&cli.output, |p| {
        p.join(kmemtrace_export::parquet::MANIFEST).is_file()
    })
    .map_err(|r| (r.code, r.msg))?;
    match kmemtrace_export::parquet::write(log, &capture, &cli.output, &opts) {
        Ok(w) => Ok((
            format!(
                "Parquet, capture {capture:?}: {} slab events, {} page events, {} per-CPU list events, {} call sites, {} figures{}",
                w.slab_events,
                w.page_events,
                w.pcp_events,
                w.callsites,
                w.figures,
                w.episodes
                    .map_or(String::new(), |n| format!(", {n} allocation stall episodes"))
            ),
            dir.kept_note(),
        )),
        Err(e) => {
            let _ = dir.restore();
            Err(output_failed(cli, e))
        }
    }
}

/// The progress line, where standard error is a terminal and -q is not
/// given.
fn progress_line(cli: &Cli) -> Option<kmemtrace_cli::progress::Line> {
    kmemtrace_cli::progress::Line::on_terminal(cli.quiet)
}

fn human_bytes(n: u64) -> String {
    kmemtrace_kernel::human::bytes(n as f64)
}

fn output_failed(cli: &Cli, e: std::io::Error) -> Stop {
    (exit::OUTPUT, format!("{}: {e}", cli.output.display()))
}
