//! `kmemtraced --import DUMP -o FILE`: the command line of
//! [`kmemtrace_import`], which turns a raw tracefs dump (as
//! `kmemtrace-capture.sh` writes it) into a log.
//!
//! Exit status (the one table, `kmemtrace_cli::exit`): 0 imported; 2 usage
//! (no `-o`, options that only apply to live recording); 3 the dump is
//! not usable (missing or malformed `events/header_page`, sizes that do not
//! fit the data, a damaged archive); 4 the log could not be written.
//! Errors are one line on stderr; a partly written output file is removed,
//! and a log the output replaced is put back.

use crate::cli::Cli;
use crate::failure::{Failure, Result as CliResult};
use crate::metadata::shell_quote;
use kmemtrace_import::{import, ImportError};
use std::io::BufWriter;
use std::path::Path;

/// `kmemtraced --import DUMP -o FILE`.
pub fn run(cli: &Cli, input: &Path, argv: Vec<String>) -> CliResult<()> {
    let Some(out_path) = cli.output.as_deref() else {
        return Err(Failure::usage(
            "--import needs -o FILE (the log to write; - for standard output)",
        ));
    };
    let out = crate::output::open(out_path)?;
    let out_name = out.name.clone();
    let (file, written) = out.split();
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
            if let Some(note) = written.restore() {
                if !cli.quiet {
                    eprintln!("kmemtraced: {note}");
                }
            }
            Err(match e {
                ImportError::Dump(m) => Failure::input(format!("import: {m}")),
                ImportError::Io(e) => Failure::output(format!("import: writing {out_name}: {e}")),
            })
        }
    }
}
