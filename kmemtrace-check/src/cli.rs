//! The command line (clap derive).

use clap::Parser;
use std::path::PathBuf;

pub const AFTER_HELP: &str = "\
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

Exit status (with several files, the worst):
  0  intact, and the kernel lost no events
  1  intact, but events were lost (ring-buffer overruns, drops)
  2  damaged: corruption (a damaged file header or ARCH block too),
     truncation, sequence gaps, undecodable sub-buffers, time going
     backwards, missing metadata
  3  unusable input (not a kmemtrace log, an unsupported major version,
     unreadable) or a usage error
  4  the result could not be written (standard output full or closed)

--json prints one document (schema kmemtrace-check/1, see JSON.md).";

#[derive(Parser, Debug)]
#[command(
    name = "kmemtrace-check",
    version,
    about = "Check that a kmemtrace log can be trusted, or say exactly why not",
    after_help = AFTER_HELP
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

    /// List at most this many problems (and loss windows) per file in the
    /// text report; 0 lists all. JSON lists all (up to 10,000 per file).
    #[arg(long = "max-problems", value_name = "N", default_value_t = 50)]
    pub max_problems: usize,

    /// Threads for decoding sub-buffers (default: one per core).
    #[arg(short = 'j', long = "threads", value_name = "N", default_value_t = 0)]
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
