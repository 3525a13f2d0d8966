//! The report printed: which printer and sections the options ask for,
//! and where the output goes (standard output, the `--html` file).

use crate::cli::{self, Cli};
use crate::Stop;
use kmemtrace_analysis::model::Report;
use kmemtrace_cli::exit;
use kmemtrace_print::{html, json, text};
use std::io::{IsTerminal, Write};

/// Rows per table of the HTML page unless `-l` says otherwise.
pub const HTML_LINES: usize = 500;
/// Rows per table of the text report unless `-l` says otherwise.
pub const TEXT_LINES: usize = 20;

/// Which text sections the options ask for. Section flags add sections
/// to what the other options imply: `-s` names call-site sort keys, so it
/// shows the call-site table beside `--caches --matrix` (as the README's
/// example reads).
fn text_sections(cli: &Cli, page_only: bool, color: bool) -> text::Sections {
    let any_section = cli.caller
        || cli.caches
        || cli.matrix
        || cli.alloc
        || cli.leaks
        || cli.misuse
        || cli.page
        || cli.live
        || cli.stalls;
    let sorted = cli.sort != cli::DEFAULT_SORT;
    text::Sections {
        callsites: !any_section || ((cli.caller || sorted) && !page_only),
        caches: cli.caches,
        matrix: cli.matrix,
        alloc: cli.alloc && !page_only,
        leaks: !any_section || cli.leaks,
        misuse: !any_section || cli.misuse,
        page: !any_section || cli.page || cli.live,
        page_callers: !any_section || cli.caller || (cli.page && !cli.alloc && !cli.live),
        page_alloc: cli.alloc && (cli.page || cli.live),
        page_live: cli.live,
        page_asked: cli.page || cli.live,
        stalls: !any_section || cli.stalls,
        color,
        lines: cli.lines.unwrap_or(TEXT_LINES),
    }
}

/// Writes `text` to standard output; a reader that went away is no error.
fn write_stdout(text: &str, what: &str) -> Result<(), Stop> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err((exit::OUTPUT, format!("writing {what}: {e}")))
        }
        _ => Ok(()),
    }
}

/// Writes the HTML page to `path` under the output policy.
fn write_html(cli: &Cli, path: &std::path::Path, page: &str) -> Result<(), Stop> {
    // The page holds kernel addresses: the policy's owner-only file.
    let mut f = kmemtrace_cli::output::create(path).map_err(|r| (r.code, r.msg))?;
    if let Err(e) = f.file.write_all(page.as_bytes()) {
        let _ = f.restore();
        return Err((exit::OUTPUT, format!("{}: {e}", path.display())));
    }
    if let (Some(note), false) = (f.kept_note(), cli.quiet) {
        eprintln!("kmemtrace-report: {note}");
    }
    Ok(())
}

/// Prints `r` as the options ask: the `--html` page to its file, and the
/// text report, the JSON document or the page (`--html -`) to standard
/// output.
pub fn print(cli: &Cli, r: &Report, page_only: bool) -> Result<(), Stop> {
    let html_to_stdout = cli.html.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = cli.html.as_deref().filter(|_| !html_to_stdout) {
        write_html(cli, path, &html::render(r, cli.lines.unwrap_or(HTML_LINES)))?;
    }
    let text = if html_to_stdout {
        html::render(r, cli.lines.unwrap_or(HTML_LINES))
    } else if cli.json {
        json::render(r).map_err(|e| (exit::OUTPUT, format!("JSON: {e}")))?
    } else {
        let color = kmemtrace_cli::colour::use_color(std::io::stdout().is_terminal());
        text::render(r, &text_sections(cli, page_only, color))
    };
    write_stdout(&text, "the report")
}
