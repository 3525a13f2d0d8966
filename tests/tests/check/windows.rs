//! Issue 45: `kmemtrace-check --json` and `kmemtrace-report --json` name
//! the same loss windows (cpu, start, end), decided by the one
//! `LossTracker`, on logs that lost events in every way: overflowed in
//! the kernel, byte-flipped, cut short, a CPU_DATA block dropped; and
//! `kmemtrace-report --events` marks them there: `CPU:N [LOST n EVENTS]`
//! before the first record after each window on its CPU (`##### CPU N
//! buffer started ####` where the window comes before the CPU's first).

use super::capture::block_offsets;
use crate::common;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// (cpu, start, end): start 0 for none, end `None` for none.
type Win = (u64, u64, Option<u64>);

fn json(tool: &str, log: &Path) -> Value {
    let out = Command::new(common::bin(tool))
        .arg("--json")
        .arg(log)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{tool} {}: {e}: {}",
            log.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The checker's windows, each with the events it lost where known.
fn checker_windows(log: &Path) -> Vec<(Win, Option<u64>)> {
    let d = json("kmemtrace-check", log);
    let mut v: Vec<(Win, Option<u64>)> = d["files"][0]["loss_windows"]
        .as_array()
        .unwrap_or_else(|| panic!("{d:#}"))
        .iter()
        .map(|w| {
            (
                (
                    w["cpu"].as_u64().unwrap(),
                    w["after_ts"].as_u64().unwrap_or(0),
                    w["before_ts"].as_u64(),
                ),
                w["count"].as_u64(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A record's line in the listing: its CPU and time stamp as printed
/// (`[001] d..1.  3044.266089:`).
fn record_at(line: &str) -> Option<(u64, &str)> {
    let open = line.find(" [")?;
    let rest = &line[open + 2..];
    let cpu = rest.get(..3)?.parse().ok()?;
    let rest = rest.get(3..)?.strip_prefix("] ")?;
    let rest = rest.get(5..)?.trim_start();
    let ts = &rest[..rest.find(": ")?];
    ts.contains('.').then_some((cpu, ts))
}

/// The `trace` file's time stamp (`ns2usecs()` rounds to microseconds).
fn usecs(ns: u64) -> String {
    let us = (ns + 500) / 1000;
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

/// The `--events --all-tasks` listing marks exactly `windows`: each
/// marker line with the record after it, against those the windows call
/// for.
fn listing_marks(what: &str, log: &Path, windows: &[(Win, Option<u64>)]) {
    let out = Command::new(common::bin("kmemtrace-report"))
        .args(["--events", "--all-tasks"])
        .arg(log)
        .output()
        .unwrap();
    // 5: the log is damaged (the listing is printed all the same).
    assert!(
        matches!(out.status.code(), Some(0 | 5)),
        "{what}: --events: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let first_record = lines.iter().position(|l| record_at(l).is_some());
    // Markers, each with the record after it; each CPU's first record,
    // and whether the `trace` file's annotation (none before the
    // listing's first) stands before it.
    let mut found = Vec::new();
    let mut firsts = std::collections::HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((cpu, ts)) = record_at(l) {
            let started = format!("##### CPU {cpu} buffer started ####");
            let annotated = Some(i) == first_record || (i > 0 && lines[i - 1] == started);
            firsts.entry(cpu).or_insert((ts.to_string(), annotated));
        } else if l.starts_with("CPU:") && l.contains(" [LOST ") {
            let (cpu, ts) = lines
                .get(i + 1)
                .and_then(|n| record_at(n))
                .unwrap_or_else(|| panic!("{what}: no record after {l:?}"));
            found.push((cpu, ts.to_string(), l.to_string()));
        }
    }
    let mut want = Vec::new();
    for &((cpu, start, end), count) in windows {
        let Some(end) = end else {
            continue; // No record follows it.
        };
        if start == 0 {
            // Before the CPU's first record: the kernel's `trace` file
            // annotates that record (as it does every CPU's first, once
            // some CPU lost records), trace_pipe prints no count.
            assert_eq!(
                firsts.get(&cpu),
                Some(&(usecs(end), true)),
                "{what}: CPU {cpu}'s first record, after a window"
            );
            continue;
        }
        let marker = match count {
            Some(n) => format!("CPU:{cpu} [LOST {n} EVENTS]"),
            None => format!("CPU:{cpu} [LOST EVENTS]"),
        };
        want.push((cpu, usecs(end), marker));
    }
    found.sort();
    want.sort();
    assert_eq!(found, want, "{what}: --events markers vs windows");
}

fn report_windows(log: &Path) -> Vec<Win> {
    let d = json("kmemtrace-report", log);
    let c = &d["capture"];
    let mut v: Vec<Win> = c["lost_windows"]
        .as_array()
        .unwrap_or_else(|| panic!("{d:#}"))
        .iter()
        .map(|w| {
            (
                w["cpu"].as_u64().unwrap(),
                w["start_ns"].as_u64().unwrap(),
                w["end_ns"].as_u64(),
            )
        })
        .collect();
    assert_eq!(c["lost_windows_total"].as_u64(), Some(v.len() as u64));
    v.sort();
    v
}

/// Both tools' windows, required equal; returned for further checks.
fn same_windows(what: &str, bytes: &[u8]) -> Vec<Win> {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), bytes).unwrap();
    let check = checker_windows(f.path());
    let report = report_windows(f.path());
    let bounds: Vec<Win> = check.iter().map(|w| w.0).collect();
    assert_eq!(bounds, report, "{what}: checker vs report");
    listing_marks(what, f.path(), &check);
    bounds
}

fn sample() -> Vec<u8> {
    std::fs::read(common::workspace().join("tests/data/sample-x86_64.kmt")).unwrap()
}

#[test]
fn checker_and_report_name_the_same_windows_on_damaged_logs() {
    let s = sample();
    let n = s.len();
    assert!(same_windows("intact sample", &s).is_empty());

    let mut one = s.clone();
    one[n / 2] ^= 0xff;
    same_windows("one byte flipped", &one);

    let mut three = s.clone();
    for p in [n / 3, n / 2, 2 * n / 3] {
        three[p] ^= 0xff;
    }
    let w = same_windows("three bytes flipped", &three);
    // CPU 0's lost block (its problems say 256 sub-buffers are missing)
    // is a window before its first event left.
    assert!(
        w.iter().any(|w| w.0 == 0 && w.1 == 0 && w.2.is_some()),
        "{w:?}"
    );

    same_windows("cut at 90%", &s[..n * 9 / 10]);

    // One CPU_DATA block (type 3) from the middle dropped.
    let data: Vec<(u64, u64)> = block_offsets(&s)
        .into_iter()
        .filter(|(o, _)| u16::from_le_bytes([s[*o as usize + 4], s[*o as usize + 5]]) == 3)
        .collect();
    assert!(data.len() >= 3, "{data:?}");
    let (a, b) = data[data.len() / 2];
    let dropped = [&s[..a as usize], &s[b as usize..]].concat();
    let w = same_windows("a block dropped", &dropped);
    assert!(!w.is_empty());

    let boot = std::fs::read(common::workspace().join("tests/data/boot-6.1-x86_64.kmt")).unwrap();
    assert_eq!(same_windows("boot capture", &boot).len(), 1);
}

#[test]
fn checker_and_report_name_the_same_windows_on_overflowed_dumps() {
    let Some(data) =
        common::shared_data_or_skip("checker_and_report_name_the_same_windows_on_overflowed_dumps")
    else {
        return;
    };
    for arch in ["armhf", "s390x"] {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("o.kmt");
        let out = Command::new(common::bin("kmemtraced"))
            .arg("--import")
            .arg(data.join(arch).join("raw_overflow"))
            .arg("-o")
            .arg(&log)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let w = same_windows(arch, &std::fs::read(&log).unwrap());
        assert_eq!(w.len(), 2, "{arch}: {w:?}");
    }
}
