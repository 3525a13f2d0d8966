//! Faults while recording (against the real kernel): a disk that fills, a
//! SIGKILL while a rotated capture turns to its next file, a reader of
//! `-o -` that stalls. The recorder never makes the traced system wait
//! (the kernel overwrites what cannot be handed over, and counts it), says
//! what was lost, and leaves what it wrote whole.

mod common;

use common::{kmemtraced, run, Missing};
use kmemtrace_format::block::BlockType;
use kmemtrace_format::reader::{Item, LogReader};
use kmemtrace_format::records::Record;
use kmemtrace_format::rotation::files_of;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A load that allocates steadily (file opens, seq_file buffers), until
/// dropped.
struct Load(Child);

impl Load {
    fn start() -> Load {
        let c = Command::new("sh")
            .args([
                "-c",
                "while :; do cat /proc/self/stat /proc/self/maps >/dev/null; done",
            ])
            .spawn()
            .unwrap();
        Load(c)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tmpfs of `size` mounted for one test, unmounted when dropped: a disk
/// that fills.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(test: &str, size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("kmemtrace-test")
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            common::skip(test, Missing::Tracefs, "cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// kmemtrace-check's exit status and JSON document for `args`.
fn check(args: &[&Path]) -> (i32, serde_json::Value) {
    let out = Command::new(common::bin("kmemtrace-check"))
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    });
    (out.status.code().unwrap(), doc)
}

/// What a log's blocks are: whether one is damaged or cut inside, and the
/// END's reason if it has one.
fn blocks_of(log: &Path) -> (bool, bool, Option<String>) {
    let f = std::fs::File::open(log).unwrap();
    let (mut damaged, mut cut, mut end) = (false, false, None);
    let Ok(reader) = LogReader::new(f) else {
        return (false, true, None);
    };
    for item in reader {
        match item.unwrap() {
            Item::Block(b) if b.header.block_type == BlockType::End => {
                let payload = b.payload().unwrap();
                if let Ok(Record::End(e)) = Record::decode(b.header.block_type, &payload, None) {
                    end = Some(e.reason);
                }
            }
            Item::Block(_) => {}
            Item::Damage(_) => damaged = true,
            Item::Truncated(_) => cut = true,
        }
    }
    (damaged, cut, end)
}

/// The events lost in the recorder's summary line (`lost: cpu0 N, ...`).
fn lost_in_summary(stderr: &str) -> u64 {
    let line = stderr.lines().find(|l| l.contains(" lost: ")).unwrap();
    let list = line.split(" lost: ").nth(1).unwrap();
    list.split(';')
        .next()
        .unwrap()
        .split(", ")
        .map(|c| {
            let n = c.rsplit(' ').next().unwrap();
            n.replace(',', "").parse::<u64>().unwrap()
        })
        .sum()
}

/// The budget asks for more than the disk holds: where a write finds no
/// room, the oldest files go early and the recording goes on, and says so.
#[test]
fn a_full_disk_removes_a_rotated_captures_oldest_files_early() {
    let test = "a_full_disk_removes_a_rotated_captures_oldest_files_early";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    let Some(disk) = SmallDisk::mount(test, "5m") else {
        return;
    };
    let name = disk.path().join("r.kmt");
    let load = Load::start();
    let out = run(kmemtraced().arg("-o").arg(&name).args([
        "--max-size",
        "64M",
        "--rotate-size",
        "2M",
        "-d",
        "6s",
    ]));
    drop(load);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("of them early: the disk had no room"),
        "{stderr}"
    );
    let files = files_of(&name);
    let first = files[0].0;
    assert!(first > 0, "the oldest removed: {files:?}");
    let indexes: Vec<u32> = files.iter().map(|f| f.0).collect();
    let in_a_row: Vec<u32> = (first..first + files.len() as u32).collect();
    assert_eq!(indexes, in_a_row);
    for (_, f) in &files {
        let (code, c) = check(&[f]);
        // 1: the kernel lost events (a burst); never damaged.
        assert!(matches!(code, 0 | 1), "{}: {c}", f.display());
    }
    let (code, c) = check(&[&name]);
    assert!(matches!(code, 0 | 1), "{c}");
    let f = &c["files"][0];
    assert_eq!(
        f["rotation"]["not_read"],
        serde_json::json!([[0, first - 1]])
    );
}

/// A plain log on a disk that fills: the recording stops (exit 4, the
/// output could not be written), says why, and the log is cut back to its
/// last whole block, ended there where the room allows.
#[test]
fn a_full_disk_stops_a_plain_log_at_its_last_whole_block() {
    let test = "a_full_disk_stops_a_plain_log_at_its_last_whole_block";
    let Some(tracefs) = common::tracefs_or_skip(test) else {
        return;
    };
    let Some(disk) = SmallDisk::mount(test, "2m") else {
        return;
    };
    let log = disk.path().join("p.kmt");
    let load = Load::start();
    let rec = kmemtraced()
        .arg("-o")
        .arg(&log)
        .args(["-d", "60s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("kmemtraced-{}-", rec.id());
    let out = rec.wait_with_output().unwrap();
    drop(load);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("the log ends"), "{stderr}");
    let (damaged, cut, end) = blocks_of(&log);
    assert!(!damaged && !cut, "whole blocks only: {stderr}");
    if let Some(reason) = &end {
        assert!(reason.starts_with("output failed: "), "{reason}");
    }
    // What was written reads.
    let report = Command::new(common::bin("kmemtrace-report"))
        .arg(&log)
        .output()
        .unwrap();
    let expected = if end.is_some() { 0 } else { 5 };
    assert_eq!(
        report.status.code(),
        Some(expected),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(!report.stdout.is_empty());
    assert!(
        common::instances_with_prefix(&prefix).is_empty(),
        "the instance is removed ({})",
        tracefs.display()
    );
}

/// SIGKILL at moments where a capture of small files turns to its next
/// file often: every file but the last checks whole on its own, the last
/// is a readable prefix (or, killed as it began, left out), and the
/// capture reads.
#[test]
fn sigkill_while_rotating_leaves_whole_files_and_a_readable_last() {
    let test = "sigkill_while_rotating_leaves_whole_files_and_a_readable_last";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    let load = Load::start();
    for (round, after_ms) in [700u64, 1300, 2100].into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let name = d.path().join("k.kmt");
        // Files the size of their metadata and a block: each block turns.
        let mut rec = kmemtraced()
            .arg("-o")
            .arg(&name)
            .args(["--max-size", "64M", "--rotate-size", "64K", "-q"])
            .spawn()
            .unwrap();
        let turned = common::wait_until(15, || files_of(&name).len() >= 2);
        assert!(turned, "round {round}: no second file within 15 s");
        std::thread::sleep(Duration::from_millis(after_ms));
        rec.kill().unwrap();
        rec.wait().unwrap();
        let files = files_of(&name);
        let on_disk = std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(
            on_disk,
            files.len(),
            "round {round}: only the capture's files"
        );
        let (last, whole) = files.split_last().unwrap();
        for (_, f) in whole {
            let (code, c) = check(&[f]);
            assert!(matches!(code, 0 | 1), "round {round}: {}: {c}", f.display());
        }
        // Killed between two files, the last is whole (END "rotated").
        let (damaged, _, end) = blocks_of(&last.1);
        assert!(!damaged, "round {round}: the last file is cut, not damaged");
        assert!(
            end.as_deref().is_none_or(|r| r == "rotated"),
            "round {round}: {end:?}"
        );
        let (code, c) = check(&[&name]);
        let f = &c["files"][0];
        let problems = f["problems"].as_array().unwrap();
        assert!(
            problems.iter().all(|p| p["kind"] == "truncation"),
            "round {round}: {c}"
        );
        assert!(matches!(code, 0 | 1 | 5), "round {round}: {c}");
        let report = Command::new(common::bin("kmemtrace-report"))
            .arg(&name)
            .output()
            .unwrap();
        assert!(matches!(report.status.code(), Some(0 | 5)), "round {round}");
        assert!(!report.stdout.is_empty());
    }
    drop(load);
    let out = run(kmemtraced().arg("--cleanup"));
    assert_eq!(out.status.code(), Some(0));
}

/// A reader of `-o -` that stops reading for seconds (a slow link): the
/// recorder waits, not the traced system; the kernel overwrites what the
/// recorder cannot take, and the loss is counted the same in the summary
/// and in the log, not damage.
#[test]
fn a_stalled_reader_of_standard_output_costs_counted_events_only() {
    let test = "a_stalled_reader_of_standard_output_costs_counted_events_only";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let load = Load::start();
    let mut rec = kmemtraced()
        .args(["-o", "-", "-d", "6s", "-b", "512"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = rec.stdout.take().unwrap();
    let mut log = vec![0u8; 1 << 20];
    stdout.read_exact(&mut log).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    stdout.read_to_end(&mut log).unwrap();
    let out = rec.wait_with_output().unwrap();
    drop(load);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("times for the writer"), "{stderr}");
    let lost = lost_in_summary(&stderr);
    assert!(
        lost > 0,
        "the kernel overwrote events while the reader stalled: {stderr}"
    );
    let path: PathBuf = d.path().join("stalled.kmt");
    std::fs::write(&path, &log).unwrap();
    let (code, c) = check(&[&path]);
    assert_eq!(code, 1, "LOST, not damaged: {c}");
    let f = &c["files"][0];
    assert_eq!(f["total"]["lost"]["events"], lost, "{c}");
    assert!(f["loss_windows"].as_array().is_some_and(|w| !w.is_empty()));
}
