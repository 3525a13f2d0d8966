//! `kmemtrace-check FILE...`: see `kmemtrace-check --help`.
#![forbid(unsafe_code)]

use clap::Parser;
use kmemtrace_check::cli::Cli;
use kmemtrace_check::findings::thousands;
use kmemtrace_check::human::{self, Style};
use kmemtrace_check::{check_path, json, Options, Report};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Checks one file, showing progress on stderr if it is a terminal.
fn check_one(path: &std::path::Path, opts: &Options, show_progress: bool) -> Report {
    let progress = AtomicU64::new(0);
    if !show_progress {
        return check_path(path, opts, &progress);
    }
    let done = AtomicBool::new(false);
    let name = path.display().to_string();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut shown = false;
            let mut waited = 0u32;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                waited += 1;
                // Only long checks get a progress line.
                if waited >= 5 && waited % 2 == 1 {
                    let mb = progress.load(Ordering::Relaxed) >> 20;
                    eprint!(
                        "\r\x1b[Kchecking {name}: {} MiB of sub-buffers",
                        thousands(mb)
                    );
                    shown = true;
                }
            }
            if shown {
                eprint!("\r\x1b[K");
            }
        });
        let r = check_path(path, opts, &progress);
        done.store(true, Ordering::Relaxed);
        r
    })
}

/// Writes to standard output. A reader that went away (`| head`) is not an
/// error; any other failure (a full disk, `> /dev/full`) is one line and
/// the one table's output error.
fn write_out(out: &mut impl Write, text: &str) -> Result<(), ExitCode> {
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => {
            eprintln!("kmemtrace-check: writing the result: {e}");
            Err(kmemtrace_cli::exit::OUTPUT.exit_code())
        }
    }
}

fn main() -> ExitCode {
    if let Some(code) = kmemtrace_cli::generate::from_args(<Cli as clap::CommandFactory>::command) {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                kmemtrace_cli::exit::USAGE.code
            } else {
                0
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if cli.files.iter().filter(|f| f.as_os_str() == "-").count() > 1 {
        eprintln!("kmemtrace-check: standard input (-) can be checked only once");
        return kmemtrace_cli::exit::USAGE.exit_code();
    }
    let opts = Options {
        threads: cli.threads,
    };
    let stdout = std::io::stdout();
    let stdout_tty = stdout.is_terminal();
    let color = kmemtrace_cli::colour::use_color(stdout_tty);
    let progress = std::io::stderr().is_terminal();
    let style = Style {
        quiet: cli.quiet,
        color,
        max_listed: cli.max_problems,
    };
    let mut reports = Vec::new();
    let mut worst = kmemtrace_cli::exit::OK;
    let mut out = stdout.lock();
    for f in &cli.files {
        let r = check_one(f, &opts, progress);
        let code = r.verdict.exit();
        worst = kmemtrace_cli::exit::worst(worst, code);
        // Unusable input: the verdict line on standard output says why; on
        // stderr too only where standard output is not the terminal that
        // stderr shows (a pipe, a file), so a terminal sees it once.
        if let (Some(e), true) = (&r.error, !cli.json && !cli.quiet && !stdout_tty) {
            eprintln!("kmemtrace-check: {}: {e}", r.file);
        }
        if !cli.json {
            let text = human::render(&r, &style);
            if let Err(code) = write_out(&mut out, &text) {
                return code;
            }
        }
        reports.push(r);
    }
    if cli.json {
        if let Err(code) = write_out(&mut out, &json::document(&reports, worst.code)) {
            return code;
        }
    }
    worst.exit_code()
}
