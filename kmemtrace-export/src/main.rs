//! `kmemtrace-export LOG --to trace-dat|perfetto|parquet -o OUT`.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_USAGE: u8 = 2;
const EXIT_INPUT: u8 = 3;
const EXIT_OUTPUT: u8 = 4;

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

/// Write a kmemtrace log (or a trace.dat) in another tool's format.
///
/// Exit status: 0 written, 2 usage, 3 an input that cannot be read, 4 the
/// output could not be written.
#[derive(Parser)]
#[command(
    version,
    after_help = "Examples:\n  kmemtrace-export board.kmt --to trace-dat -o board.dat && trace-cmd report -i board.dat\n  kmemtrace-export board.kmt --to perfetto -o board.pftrace   # open in ui.perfetto.dev\n  kmemtrace-export board.kmt --to parquet -o dataset/board1   # duckdb, spark: dataset/*/slab_events.parquet\n\nParquet columns and types: kmemtrace-export/PARQUET.md in the sources."
)]
struct Cli {
    /// The log.
    log: PathBuf,
    /// The format to write.
    #[arg(long, value_enum, default_value = "trace-dat")]
    to: Format,
    /// Where to write (for parquet: a directory; `-`: standard output, for
    /// perfetto). New files are readable by their owner only, as the log.
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
    /// Sub-buffer bytes per unit of work (tests: many small ones).
    #[arg(long, hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    run_bytes: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let to_stdout = cli.output.as_os_str() == "-";
    if to_stdout {
        use std::io::IsTerminal;
        let why = if !matches!(cli.to, Format::Perfetto) {
            Some("-o -: standard output takes --to perfetto only (a trace.dat is written with seeks back, Parquet is a directory)")
        } else if std::io::stdout().is_terminal() {
            Some("-o -: refusing to write a binary trace to a terminal: redirect standard output")
        } else {
            None
        };
        if let Some(why) = why {
            eprintln!("kmemtrace-export: {why}");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let mut log = match kmemtrace_import::open_log(&cli.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kmemtrace-export: {}: {e}", cli.log.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    if let Format::Parquet = cli.to {
        let capture = cli.capture.clone().unwrap_or_else(|| {
            cli.log
                .file_stem()
                .map_or("capture".into(), |s| s.to_string_lossy().into_owned())
        });
        let name = log.name.clone();
        let opts = kmemtrace_export::parquet::Options {
            threads: cli.threads.map(usize::from),
            run_bytes: cli.run_bytes,
        };
        return match kmemtrace_export::parquet::write(log, &capture, &cli.output, &opts) {
            Ok(w) => {
                if !cli.quiet {
                    eprintln!(
                        "kmemtrace-export: {name} -> {}: Parquet, capture {capture:?}: {} slab events, {} page events, {} per-CPU list events, {} call sites",
                        cli.output.display(),
                        w.slab_events,
                        w.page_events,
                        w.pcp_events,
                        w.callsites
                    );
                }
                ExitCode::SUCCESS
            }
            Err(e) => output_failed(&cli, e),
        };
    }
    let summary = match cli.to {
        Format::TraceDat => {
            // Written with seeks back (section sizes): a file only.
            let out = match kmemtrace_export::private_file(&cli.output) {
                Ok(f) => std::io::BufWriter::with_capacity(1 << 20, f),
                Err(e) => return output_failed(&cli, e),
            };
            let version = match cli.trace_dat_version {
                DatVersion::V7 => kmemtrace_export::tracedat::Version::V7,
                DatVersion::V6 => kmemtrace_export::tracedat::Version::V6,
            };
            let mut line = progress_line(&cli);
            let written = kmemtrace_export::tracedat::write(&log, out, version, &mut |p| {
                if let Some(l) = line.as_mut() {
                    l.update(p)
                }
            });
            drop(line);
            written.map(|w| {
                format!(
                    "trace.dat version {}{}, {} CPUs, {} pages, {} event formats{}",
                    w.version,
                    if w.version >= 7 {
                        format!(
                            " (zstd: {} of pages in {})",
                            human_bytes(w.page_bytes),
                            human_bytes(w.stored_page_bytes)
                        )
                    } else {
                        String::new()
                    },
                    w.cpus,
                    w.pages,
                    w.formats,
                    if w.unreadable_pages > 0 {
                        format!(
                            "; {} pages unreadable in the log, written empty",
                            w.unreadable_pages
                        )
                    } else {
                        String::new()
                    }
                )
            })
        }
        Format::Perfetto => {
            let out: Box<dyn std::io::Write> = if to_stdout {
                Box::new(std::io::stdout().lock())
            } else {
                match kmemtrace_export::private_file(&cli.output) {
                    Ok(f) => Box::new(f),
                    Err(e) => return output_failed(&cli, e),
                }
            };
            let out = std::io::BufWriter::with_capacity(1 << 20, out);
            let mut line = progress_line(&cli);
            let series = kmemtrace_export::perfetto::derived_series(&mut log, &mut |p| {
                if let Some(l) = line.as_mut() {
                    l.update(p)
                }
            });
            let compression = match cli.perfetto_compression {
                PerfettoCompression::Zlib => kmemtrace_export::perfetto::Compression::Zlib,
                PerfettoCompression::None => kmemtrace_export::perfetto::Compression::None,
            };
            let written =
                kmemtrace_export::perfetto::write(&log, &series, out, compression, &mut |p| {
                    if let Some(l) = line.as_mut() {
                        l.update(p)
                    }
                });
            drop(line);
            written.map(|w| {
                let mut s = format!(
                    "Perfetto trace, {} typed kmem events, {} generic events, {} bundles, {} counter values",
                    w.typed, w.generic, w.bundles, w.counter_points
                );
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
                s
            })
        }
        Format::Parquet => unreachable!("written above"),
    };
    match summary {
        Ok(s) => {
            let to = if to_stdout {
                "standard output".into()
            } else {
                cli.output.display().to_string()
            };
            if !cli.quiet {
                eprintln!("kmemtrace-export: {} -> {to}: {s}", log.name);
            }
            ExitCode::SUCCESS
        }
        Err(e) => output_failed(&cli, e),
    }
}

/// The progress line, where standard error is a terminal and -q is not
/// given.
fn progress_line(cli: &Cli) -> Option<kmemtrace_export::progress::Line> {
    use std::io::IsTerminal;
    (!cli.quiet && std::io::stderr().is_terminal()).then(kmemtrace_export::progress::Line::new)
}

fn human_bytes(n: u64) -> String {
    kmemtrace_format::human::bytes(n as f64)
}

fn output_failed(cli: &Cli, e: std::io::Error) -> ExitCode {
    eprintln!("kmemtrace-export: {}: {e}", cli.output.display());
    ExitCode::from(EXIT_OUTPUT)
}
