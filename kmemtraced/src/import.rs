//! `kmemtraced --import DUMP -o FILE`: the command line of
//! [`kmemtrace_import`], which turns a raw tracefs dump (as
//! `kmemtrace-capture.sh` writes it) into a log.
//!
//! Exit status: 0 imported; 1 the log could not be written; 2 usage
//! (no `-o`, options that only apply to live recording); 4 the dump is
//! not usable (missing or malformed `events/header_page`, sizes that do not
//! fit the data, a damaged archive). Errors are one line on stderr; a
//! partly written output file is removed, and a log the output replaced is
//! put back.

use crate::cli::Cli;
use crate::failure::{Failure, Result as CliResult, EXIT_RUNTIME};
use crate::metadata::shell_quote;
use kmemtrace_import::{import, ImportError};
use std::io::BufWriter;
use std::path::Path;

/// Exit status for a dump that cannot be imported.
pub const EXIT_BAD_DUMP: u8 = 4;

/// `kmemtraced --import DUMP -o FILE`.
pub fn run(cli: &Cli, input: &Path, argv: Vec<String>) -> CliResult<()> {
    let Some(out_path) = cli.output.as_deref() else {
        return Err(Failure::usage(
            "--import needs -o FILE (the log to write; - for standard output)",
        ));
    };
    let crate::output::Output {
        file,
        name: out_name,
        kept_old,
    } = crate::output::open(out_path)?;
    let to_stdout = out_path.as_os_str() == "-";
    let res = import(
        input,
        BufWriter::with_capacity(1 << 20, file),
        cli.compress,
        shell_quote(argv),
    );
    match res {
        Ok(s) => {
            if !cli.quiet {
                for w in &s.warnings {
                    eprintln!("kmemtraced: warning: {w}");
                }
                eprintln!(
                    "kmemtraced: imported {}: {} {}-endian ({}), {} CPUs, {} sub-buffers, {} events{} -> {out_name}",
                    input.display(),
                    s.machine.as_deref().unwrap_or("unknown machine"),
                    s.byte_order.map(|o| o.name()).unwrap_or("?"),
                    s.byte_order_source,
                    s.cpus,
                    s.subbufs,
                    s.events,
                    if s.lost > 0 {
                        format!(", {} lost by the kernel", s.lost)
                    } else {
                        String::new()
                    }
                );
            }
            Ok(())
        }
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(out_path);
                if let Some(old) = kept_old {
                    let _ = std::fs::rename(old, out_path);
                }
            }
            Err(match e {
                ImportError::Dump(m) => Failure {
                    code: EXIT_BAD_DUMP,
                    msg: format!("import: {m}"),
                },
                ImportError::Io(e) => Failure {
                    code: EXIT_RUNTIME,
                    msg: format!("import: writing {out_name}: {e}"),
                },
            })
        }
    }
}
