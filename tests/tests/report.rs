//! kmemtrace-report end to end: synthetic logs with every misuse kind
//! planted a known number of times, foreign-kernel captures (armhf 32-bit,
//! s390x big-endian) against the kernel's own text, a real capture of this
//! kernel against its text, and the command line's behaviour.

mod common;

#[path = "report/raw.rs"]
mod raw;
#[path = "report/rotation.rs"]
mod rotation;
#[path = "report/synthetic.rs"]
mod synthetic;

#[path = "report/cli.rs"]
mod cli;
#[path = "report/debug_package.rs"]
mod debug_package;
#[path = "report/diff.rs"]
mod diff;
#[path = "report/events.rs"]
mod events;
#[path = "report/fleet.rs"]
mod fleet;
#[path = "report/foreign.rs"]
mod foreign;
#[path = "report/gate.rs"]
mod gate;
#[path = "report/golden.rs"]
mod golden;
#[path = "report/html.rs"]
mod html;
#[path = "report/live.rs"]
mod live;
#[path = "report/markers.rs"]
mod markers;
#[path = "report/misuse.rs"]
mod misuse;
#[path = "report/page_stacks.rs"]
mod page_stacks;
#[path = "report/pages.rs"]
mod pages;
#[path = "report/parquet.rs"]
mod parquet;
#[path = "report/perfetto.rs"]
mod perfetto;
#[path = "report/pid.rs"]
mod pid;
#[path = "report/sources.rs"]
mod sources;
#[path = "report/stalls.rs"]
mod stalls;
#[path = "report/tracedat.rs"]
mod tracedat;
#[path = "report/trust.rs"]
mod trust;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// Runs kmemtrace-report with `args`.
pub fn report(args: &[&str]) -> Output {
    Command::new(common::bin("kmemtrace-report"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kmemtrace-report")
}

/// Runs kmemtrace-report --json on a log file, asserting success.
pub fn report_json(path: &Path, extra: &[&str]) -> Value {
    common::json_stdout(
        Command::new(common::bin("kmemtrace-report"))
            .arg(path)
            .arg("--json")
            .args(extra)
            .env("NO_COLOR", "1"),
    )
}

/// Writes bytes to a temporary file that lives as long as the returned
/// guard.
pub fn temp_log(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .prefix("kmt-report-")
        .suffix(".kmt")
        .tempfile()
        .unwrap();
    std::io::Write::write_all(&mut f, bytes).unwrap();
    f
}

/// The finding of `kind` in a report.
pub fn finding<'a>(r: &'a Value, kind: &str) -> &'a Value {
    r["misuse"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no finding {kind}"))
}
