//! `kmemtrace-export LOG --to trace-dat|perfetto -o OUT`.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

const EXIT_INPUT: u8 = 3;
const EXIT_OUTPUT: u8 = 4;

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// trace-cmd's trace.dat, version 6 (uncompressed): `trace-cmd report
    /// -i OUT` and KernelShark open it.
    TraceDat,
    /// A Perfetto trace (protobuf): ui.perfetto.dev and trace_processor
    /// open it; kmem events as Perfetto's typed events, others generic.
    Perfetto,
}

/// Write a kmemtrace log (or a trace.dat) in another tool's format.
///
/// Exit status: 0 written, 2 usage, 3 an input that cannot be read, 4 the
/// output could not be written.
#[derive(Parser)]
#[command(
    version,
    after_help = "Examples:\n  kmemtrace-export board.kmt --to trace-dat -o board.dat && trace-cmd report -i board.dat\n  kmemtrace-export board.kmt --to perfetto -o board.pftrace   # open in ui.perfetto.dev"
)]
struct Cli {
    /// The log.
    log: PathBuf,
    /// The format to write.
    #[arg(long, value_enum, default_value = "trace-dat")]
    to: Format,
    /// Where to write.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut log = match kmemtrace_import::open_log(&cli.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kmemtrace-export: {}: {e}", cli.log.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let out = match std::fs::File::create(&cli.output) {
        Ok(f) => std::io::BufWriter::with_capacity(1 << 20, f),
        Err(e) => return output_failed(&cli, e),
    };
    let summary = match cli.to {
        Format::TraceDat => kmemtrace_export::tracedat::write(&log, out).map(|w| {
            format!(
                "trace.dat version 6, {} CPUs, {} pages, {} event formats{}",
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
        }),
        Format::Perfetto => {
            let series = kmemtrace_export::perfetto::derived_series(&mut log);
            kmemtrace_export::perfetto::write(&log, &series, out).map(|w| {
            let mut s = format!(
                "Perfetto trace, {} typed kmem events, {} generic events, {} bundles, {} counter values",
                w.typed, w.generic, w.bundles, w.counter_points
            );
            if w.unknown > 0 {
                s += &format!("; {} records of unknown events left out", w.unknown);
            }
            for (event, fields) in &w.dropped_fields {
                s += &format!("; {event}: {} not in Perfetto's message", fields.join(", "));
            }
            s
        })
        }
    };
    match summary {
        Ok(s) => {
            eprintln!(
                "kmemtrace-export: {} -> {}: {s}",
                log.name,
                cli.output.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => output_failed(&cli, e),
    }
}

fn output_failed(cli: &Cli, e: std::io::Error) -> ExitCode {
    eprintln!("kmemtrace-export: {}: {e}", cli.output.display());
    ExitCode::from(EXIT_OUTPUT)
}
