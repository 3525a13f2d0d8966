//! `kmemtrace-export LOG --to trace-dat -o OUT`.

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
}

/// Write a kmemtrace log (or a trace.dat) in another tool's format.
///
/// Exit status: 0 written, 2 usage, 3 an input that cannot be read, 4 the
/// output could not be written.
#[derive(Parser)]
#[command(
    version,
    after_help = "Example:\n  kmemtrace-export board.kmt --to trace-dat -o board.dat && trace-cmd report -i board.dat"
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
    let log = match kmemtrace_import::open_log(&cli.log) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kmemtrace-export: {}: {e}", cli.log.display());
            return ExitCode::from(EXIT_INPUT);
        }
    };
    let written = std::fs::File::create(&cli.output).and_then(|f| match cli.to {
        Format::TraceDat => {
            kmemtrace_export::tracedat::write(&log, std::io::BufWriter::with_capacity(1 << 20, f))
        }
    });
    match written {
        Ok(w) => {
            eprintln!(
                "kmemtrace-export: {} -> {}: trace.dat version 6, {} CPUs, {} pages, {} event formats{}",
                log.name,
                cli.output.display(),
                w.cpus,
                w.pages,
                w.formats,
                if w.unreadable_pages > 0 {
                    format!("; {} pages unreadable in the log, written empty", w.unreadable_pages)
                } else {
                    String::new()
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kmemtrace-export: {}: {e}", cli.output.display());
            ExitCode::from(EXIT_OUTPUT)
        }
    }
}
