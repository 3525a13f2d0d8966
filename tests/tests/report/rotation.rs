//! The files of a rotated capture (FORMAT.md §13) read as one capture:
//! an object allocated in one file and freed in the next is neither a
//! leak nor a free of an unseen object; the files not given (removed by
//! the size budget) are a loss window of cause `rotated`, not damage; each
//! file checks on its own; files of two captures are refused.

use crate::synthetic::Synth;
use crate::{report, report_json};
use kmemtrace_testkit::synth::rotate;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The object allocated first and freed last.
const P: u64 = 0xffff_8880_1000_0000;

/// One capture cut into three files: `P` allocated in the first, freed
/// in the last, 300 objects allocated and freed at once in between (on
/// one CPU, a sub-buffer a block: 8 blocks).
fn capture(dir: &Path, id: u64) -> Vec<PathBuf> {
    let mut s = Synth::new("6.18.44");
    s.b.subbufs_per_block = 1;
    let mut ts = 1_000_000_000;
    s.kmalloc(0, ts, 100, "alloc_a", P, 100, 128);
    for i in 0..300u64 {
        ts += 1_000;
        s.kmalloc(0, ts, 100, "alloc_b", P + 0x1000 + i * 64, 64, 64);
        ts += 1_000;
        s.kfree(0, ts, 100, "free_b", P + 0x1000 + i * 64);
    }
    s.kfree(0, ts + 1_000, 100, "free_a", P);
    let files = rotate(&s.build(), &[3, 6], id).unwrap();
    assert_eq!(files.len(), 3);
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let p = kmemtrace_format::rotation::file_path(&dir.join("cap.kmt"), i as u32);
            std::fs::write(&p, f).unwrap();
            p
        })
        .collect()
}

fn json_of(files: &[&Path]) -> Value {
    crate::common::json_stdout(
        Command::new(crate::common::bin("kmemtrace-report"))
            .args(files)
            .arg("--json"),
    )
}

fn check_json(files: &[&Path]) -> (i32, Value) {
    let out = Command::new(crate::common::bin("kmemtrace-check"))
        .args(files)
        .arg("--json")
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

fn unseen_frees(r: &Value) -> u64 {
    r["misuse"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "free_of_object_allocated_before_capture")
        .map_or(0, |f| f["count"].as_u64().unwrap())
}

fn rotated_windows(check: &Value) -> usize {
    check["files"][0]["loss_windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["cause"] == "rotated")
        .count()
}

#[test]
fn objects_freed_in_a_later_file_are_neither_leaks_nor_unseen_frees() {
    let d = tempfile::tempdir().unwrap();
    let f = capture(d.path(), 7);
    let all: Vec<&Path> = f.iter().map(PathBuf::as_path).collect();
    // Every file checks on its own, and the three together.
    for p in &all {
        let (code, c) = check_json(&[p]);
        assert_eq!(code, 0, "{p:?}: {c}");
        assert_eq!(c["files"][0]["verdict"], "ok");
    }
    let r = json_of(&all);
    assert_eq!(r["leaks"]["objects"], 0, "P was freed, in the last file");
    assert_eq!(unseen_frees(&r), 0);
    // Given in any order, or by the name it was recorded under.
    let shuffled = [all[2], all[0], all[1]];
    assert_eq!(json_of(&shuffled)["leaks"], r["leaks"]);
    let by_name = d.path().join("cap.kmt");
    assert_eq!(json_of(&[&by_name])["leaks"], r["leaks"]);
    let (code, c) = check_json(&[&by_name]);
    assert_eq!((code, rotated_windows(&c)), (0, 0), "{c}");
    assert_eq!(
        c["files"][0]["rotation"]["files"],
        serde_json::json!([0, 1, 2])
    );
    // The first file alone: P is live at its end (a leak), nothing unseen.
    let first = json_of(&all[..1]);
    assert_eq!(first["leaks"]["objects"], 1);
    assert_eq!(unseen_frees(&first), 0);
}

#[test]
fn files_not_given_are_a_rotated_loss_window_not_damage() {
    let d = tempfile::tempdir().unwrap();
    let f = capture(d.path(), 7);
    // The last file alone: what came before it was removed by rotation.
    let (code, c) = check_json(&[&f[2]]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(rotated_windows(&c), 1, "{c}");
    assert_eq!(
        c["files"][0]["rotation"]["not_read"],
        serde_json::json!([[0, 1]])
    );
    let last = json_of(&[&f[2]]);
    assert!(
        unseen_frees(&last) >= 1,
        "P's free, its allocation not here"
    );
    // The first and the last: the middle is a window, P's pair is whole.
    std::fs::remove_file(&f[1]).unwrap();
    let by_name = d.path().join("cap.kmt");
    let (code, c) = check_json(&[&by_name]);
    assert_eq!(code, 0, "{c}");
    assert_eq!(c["files"][0]["verdict"], "ok");
    assert_eq!(rotated_windows(&c), 1, "{c}");
    assert_eq!(
        c["files"][0]["rotation"]["not_read"],
        serde_json::json!([[1, 1]])
    );
    let text = report(&[by_name.to_str().unwrap()]);
    assert!(text.status.success());
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("lost events: none; 1 window where files of the rotated capture are not here"),
        "{out}"
    );
    let r = report_json(&by_name, &[]);
    assert_eq!(r["leaks"]["objects"], 0, "P's free is in the last file");
    let c = &r["capture"];
    assert_eq!(
        (&c["lost_windows_total"], &c["lost_windows_rotated"]),
        (&1.into(), &1.into())
    );
    assert_eq!(c["lost_windows"][0]["cause"], "rotated");
}

#[test]
fn files_of_two_captures_or_one_twice_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let a = capture(d.path(), 7);
    let other = tempfile::tempdir().unwrap();
    let b = capture(other.path(), 8);
    let plain = d.path().join("plain.kmt");
    std::fs::write(&plain, Synth::new("6.18.44").build()).unwrap();
    for (files, says) in [
        (vec![&a[0], &b[1]], "another capture"),
        (vec![&a[1], &a[1]], "given twice"),
        (vec![&a[0], &plain], "not a file of a rotated capture"),
    ] {
        let out = Command::new(crate::common::bin("kmemtrace-report"))
            .args(&files)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{files:?}: {err}");
        assert!(err.contains(says), "{files:?}: {err}");
    }
}

/// A recorder stopped (SIGKILL, power loss) as it began the next file
/// leaves that file empty, or with its header and ARCH block but no
/// SEGMENT: the capture is read without it, and check says so.
#[test]
fn a_file_cut_before_its_start_is_left_out_with_a_warning() {
    let d = tempfile::tempdir().unwrap();
    let f = capture(d.path(), 7);
    let whole = json_of(&[&d.path().join("cap.kmt")]);
    let next = kmemtrace_format::rotation::file_path(&d.path().join("cap.kmt"), 3);
    let last = std::fs::read(&f[2]).unwrap();
    // The header and the ARCH block end where the SEGMENT block begins.
    let segment_at = kmemtrace_format::reader::LogReader::new(std::io::Cursor::new(&last))
        .unwrap()
        .filter_map(Result::ok)
        .find_map(|i| match i {
            kmemtrace_format::reader::Item::Block(b)
                if b.header.block_type == kmemtrace_format::block::BlockType::Segment =>
            {
                Some(b.offset as usize)
            }
            _ => None,
        })
        .unwrap();
    for cut in [0, 10, 16, segment_at - 3, segment_at] {
        std::fs::write(&next, &last[..cut]).unwrap();
        let by_name = d.path().join("cap.kmt");
        let (code, c) = check_json(&[&by_name]);
        assert_eq!(code, 0, "cut at {cut}: {c}");
        assert_eq!(
            c["files"][0]["rotation"]["files"],
            serde_json::json!([0, 1, 2])
        );
        let warned = c["files"][0]["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| {
                w["kind"] == "truncation"
                    && w["message"]
                        .as_str()
                        .unwrap()
                        .contains("cut before its start")
            });
        assert!(warned, "cut at {cut}: {c}");
        let given: Vec<&Path> = f
            .iter()
            .map(PathBuf::as_path)
            .chain([next.as_path()])
            .collect();
        assert_eq!(json_of(&given)["leaks"], whole["leaks"], "cut at {cut}");
    }
    // Cut inside its SEGMENT: still nothing of it read.
    std::fs::write(&next, &last[..segment_at + 5]).unwrap();
    let (code, c) = check_json(&[&d.path().join("cap.kmt")]);
    assert_eq!(code, 0, "{c}");
}
