//! Shared by the integration tests of this crate and of kmemtrace-format.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

#[path = "../../../tests/skip.rs"]
mod skip_kit;
pub use skip_kit::{skip, Missing};

/// The repository: the nearest directory above the crate under test that
/// holds the workspace's `Cargo.lock` (this file serves crates at
/// different depths).
fn repository() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(crate_dir)
        .to_path_buf()
}

/// `../shared/data` beside the repository (the real foreign-kernel
/// captures), or `None` after printing why `test` skips.
pub fn data_dir(test: &str) -> Option<PathBuf> {
    let d = repository().join("../shared/data");
    if d.join("armhf").is_dir() && d.join("s390x").is_dir() {
        Some(d)
    } else {
        skip(
            test,
            Missing::SharedData,
            &format!(
                "capture directory {} not found (expected ../shared/data beside the repository)",
                d.display()
            ),
        );
        None
    }
}

/// `O_NONBLOCK` of this platform, for opening `trace_pipe_raw`.
pub const O_NONBLOCK: i32 = nix::libc::O_NONBLOCK;

/// `(cpu, usecs, event name)` of each event line of a tracefs `trace` file,
/// and the number of `CPU:n [LOST m EVENTS]` lines, counted apart. Panics
/// on a line it cannot read.
pub fn parse_trace_text(text: &str) -> (Vec<(usize, u64, String)>, u64) {
    let mut out = Vec::new();
    let mut lost_lines = 0;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if line.starts_with("CPU:") && line.contains("LOST") {
            lost_lines += 1;
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        let parsed = (0..toks.len()).find_map(|i| {
            let cpu = toks[i]
                .strip_prefix('[')?
                .strip_suffix(']')?
                .parse::<usize>()
                .ok()?;
            let ts = toks.get(i + 2)?.strip_suffix(':')?;
            let (s, us) = ts.split_once('.')?;
            if us.len() != 6 {
                return None;
            }
            let usecs = s.parse::<u64>().ok()? * 1_000_000 + us.parse::<u64>().ok()?;
            let name = toks.get(i + 3)?.strip_suffix(':')?;
            Some((cpu, usecs, name.to_string()))
        });
        out.push(parsed.unwrap_or_else(|| panic!("cannot parse trace line: {line}")));
    }
    (out, lost_lines)
}

/// The kernel prints `ns2usecs(ts)`: `(ns + 500) / 1000`.
pub fn ns_to_printed_usecs(ns: u64) -> u64 {
    (ns + 500) / 1000
}
