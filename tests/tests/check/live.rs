//! kmemtrace-check on logs recorded from this machine's kernel by
//! kmemtraced: a clean capture passes; a capture with a tiny buffer under
//! stress-ng load reports the losses the kernel's statistics for that
//! instance show (and the recorder saw); real logs cut or with a flipped
//! byte are caught. Skipped, with a message, where tracefs cannot be had.

use crate::common;
use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::Log;
use std::path::Path;
use std::process::Command;

/// Records with kmemtraced into `out`; returns its stderr.
fn record(out: &Path, args: &[&str]) -> String {
    let o = Command::new(common::bin("kmemtraced"))
        .arg("-o")
        .arg(out)
        .args(args)
        .output()
        .expect("run kmemtraced");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "kmemtraced {args:?}: {err}");
    err
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

/// CPU `cpu`'s figure in the recorder's summary (`lost: cpu0 221,346, cpu1 7`).
fn recorder_lost(stderr: &str, cpu: u32) -> Option<u64> {
    let tail = stderr.rsplit("lost: ").next()?;
    let key = format!("cpu{cpu} ");
    let at = tail.find(&key)? + key.len();
    let b = &tail.as_bytes()[at..];
    let mut n = String::new();
    for (i, &c) in b.iter().enumerate() {
        if c.is_ascii_digit() {
            n.push(c as char);
        } else if c == b',' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
            continue;
        } else {
            break;
        }
    }
    n.parse().ok()
}

#[test]
fn recorder_summary_parses() {
    let s = "kmemtraced: 5 events; lost: cpu0 221,346, cpu1 7; recorder CPU 0.5 s";
    assert_eq!(recorder_lost(s, 0), Some(221_346));
    assert_eq!(recorder_lost(s, 1), Some(7));
    assert_eq!(recorder_lost(s, 2), None);
}

#[test]
fn live_clean_capture_passes_and_damage_is_caught() {
    if common::tracefs_or_skip("live_clean_capture_passes").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("clean.kmt");
    // Only the command's own events (-F), into a generous buffer: nothing
    // can overflow, however busy the machine is.
    record(
        &log,
        &[
            "-q",
            "-F",
            "-b",
            "16384",
            "--",
            "sh",
            "-c",
            "ls -lR /usr/lib >/dev/null; ls -lR /usr/share >/dev/null",
        ],
    );
    let (code, r) = crate::check_json(&log);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["verdict"], "ok");
    assert!(r["total"]["events"].as_u64().unwrap() > 100, "{r:#}");
    assert_eq!(r["total"]["lost"]["events"], 0);
    assert_eq!(r["total"]["lost"]["source"], "stats");
    let (code, out, _) = crate::run(&[log.to_str().unwrap()], None);
    assert_eq!(code, 0);
    assert!(out.lines().last().unwrap().contains(": OK ("), "{out}");

    // The same log cut and damaged.
    let bytes = std::fs::read(&log).unwrap();
    crate::assert_truncations(&bytes, 15, 0x11ce_c0de);
    crate::assert_flips(&bytes, 15, 0xf11b_f11b);
}

#[test]
fn live_tiny_buffer_under_load_reports_the_kernels_losses() {
    if common::tracefs_or_skip("live_tiny_buffer_under_load").is_none() {
        return;
    }
    if !have("stress-ng") {
        common::skip(
            "live_tiny_buffer_under_load",
            common::Missing::Tool,
            "stress-ng is not installed (apt-get install stress-ng)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.kmt");
    let err = record(
        &path,
        &[
            "-b",
            "4",
            "--",
            "stress-ng",
            "--vm",
            "2",
            "--vm-bytes",
            "64M",
            "-t",
            "3",
            "--quiet",
        ],
    );
    let (code, r) = crate::check_json(&path);
    assert_eq!(code, 1, "{r:#}");
    assert!(
        r["problems"].as_array().unwrap().is_empty(),
        "{:#}",
        r["problems"]
    );

    // The kernel's statistics for the instance, as the recorder stored
    // them at start and end, read here with the library.
    let log = Log::open(&path).unwrap();
    let mut total = 0u64;
    for c in r["cpus"].as_array().unwrap() {
        let cpu = c["cpu"].as_u64().unwrap() as u32;
        let start = log
            .cpu_stats(cpu, StatsPhase::Start)
            .next()
            .and_then(|s| s.parsed)
            .expect("start stats");
        let end = log
            .cpu_stats(cpu, StatsPhase::End)
            .last()
            .and_then(|s| s.parsed)
            .expect("end stats");
        let d = |a: Option<u64>, b: Option<u64>| a.unwrap_or(0) - b.unwrap_or(0);
        let kernel = d(end.overrun, start.overrun)
            + d(end.commit_overrun, start.commit_overrun)
            + d(end.dropped_events, start.dropped_events);
        assert_eq!(c["lost"]["events"], kernel, "cpu {cpu}");
        assert_eq!(c["lost"]["stats"]["overrun"], d(end.overrun, start.overrun));
        // The sub-buffers' stored counts are part of the overruns.
        assert!(c["lost"]["subbuf_stored"].as_u64().unwrap() <= kernel);
        // What the recorder said on stderr: `lost: cpu0 N, cpu1 M`.
        let said = recorder_lost(&err, cpu);
        if let Some(n) = said {
            assert_eq!(n, kernel, "cpu {cpu}: recorder said {err}");
        }
        total += kernel;
    }
    assert!(
        total > 0,
        "a 4 KiB buffer under stress-ng lost nothing? {r:#}"
    );
    assert_eq!(r["total"]["lost"]["events"], total);
    let flagged: u64 = r["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["lost"]["subbuf_flagged"].as_u64().unwrap())
        .sum();
    assert!(flagged > 0, "{r:#}");
    assert_eq!(r["total"]["ordering_violations"], 0);
}
