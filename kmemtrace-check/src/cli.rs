//! The command line (clap derive).

use clap::Parser;
use std::path::PathBuf;

/// `--help`'s text after the options.
pub fn after_help() -> String {
    use kmemtrace_cli::exit::*;
    let codes = help(&[
        (OK, "intact, and the kernel lost no events"),
        (NO, "intact, but events were lost (ring-buffer overruns, drops)"),
        (USAGE, ""),
        (INPUT, "not a kmemtrace log (the message says what it is), an unsupported major version, unreadable"),
        (OUTPUT, "standard output full or closed"),
        (DAMAGED, "corruption (a damaged file header or ARCH block too), truncation, sequence gaps, undecodable sub-buffers, time going backwards, missing metadata"),
    ]);
    format!("{AFTER_HELP}\n\nWith several files, the exit status is the worst: unusable, then damaged, then lost.\n{codes}")
}

const AFTER_HELP: &str = "\
Examples:
  kmemtrace-check boot.kmt                    per-CPU table, problems, verdict
  kmemtrace-check -q *.kmt                    one verdict line per file
  kmemtrace-check --json make.kmt | jq .files[0].total.lost
  ssh host cat x.kmt | kmemtrace-check -      check a log from standard input

What is checked: the file header and arch tag; every block's CRC; per-CPU
block sequence numbers (a gap is lost data); every sub-buffer decoded to the
end of its commit, with event ids the log's formats describe; time stamps
never going backwards on a CPU; lost events from the sub-buffers'
missed-events flags and from the kernel's per-CPU statistics; truncation;
END totals; missing metadata (kallsyms, formats). Damage does not stop the
check: the reader resynchronises at the next intact block, and every
problem is listed with its file offset (inside a compressed block: the
block's offset and the sub-buffer's index in it).

--json prints one document (schema kmemtrace-check/1, see JSON.md).";

#[derive(Parser, Debug)]
#[command(
    name = "kmemtrace-check",
    version = kmemtrace_cli::VERSION,
    long_version = kmemtrace_cli::long_version(&kmemtrace_import::sniff::formats_read(), &[]),
    about = "Check that a kmemtrace log can be trusted, or say exactly why not",
    after_help = after_help()
)]
pub struct Cli {
    /// Logs to check; `-` reads standard input.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Print a JSON document (schema kmemtrace-check/1) instead of text.
    #[arg(long = "json", conflicts_with = "quiet")]
    pub json: bool,

    /// Print only the verdict line of each file.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// List at most this many problems, warnings and loss windows per file
    /// in the text report; 0 lists all. JSON lists all (up to 10,000 per
    /// file).
    #[arg(long = "max-problems", value_name = "N", default_value_t = 50)]
    pub max_problems: usize,

    /// Threads for decoding sub-buffers (default: one per core).
    #[arg(
        short = 'j',
        long = "threads",
        value_name = "N",
        default_value_t = 0,
        hide_default_value = true
    )]
    pub threads: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }
}
