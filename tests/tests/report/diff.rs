//! kmemtrace-diff: a capture with a known extra loop against its baseline,
//! from logs and from stored report documents.

use crate::synthetic::Synth;
use crate::{common, report_json, temp_log};
use serde_json::Value;
use std::process::Command;

/// `loops` rounds of 40 kmalloc/kfree pairs from `alloc_a`, and `extra`
/// more 192-byte kmallocs from `alloc_b` (freed), over about a second.
fn workload(extra: u64) -> Vec<u8> {
    let mut s = Synth::new("6.18.44");
    let mut ts = 1_000_000_000u64;
    let mut ptr = 0xffff_8880_1000_0000u64;
    for i in 0..400u64 {
        ts += 2_000_000;
        s.kmalloc((i % 2) as u32, ts, 100, "alloc_a", ptr, 100, 128);
        s.kfree((i % 2) as u32, ts + 1_000, 100, "free_a", ptr);
        ptr += 0x80;
    }
    for i in 0..extra {
        ts += 1_000;
        s.kmalloc(0, ts, 100, "alloc_b", ptr, 150, 192);
        s.kfree(1, ts + 500, 100, "free_b", ptr);
        ptr += 0x100 + i % 2 * 0x40;
    }
    s.build()
}

fn diff_json(base: &std::path::Path, new: &std::path::Path) -> Value {
    common::json_stdout(
        Command::new(common::bin("kmemtrace-diff"))
            .arg(base)
            .arg(new)
            .arg("--json"),
    )
}

fn change<'a>(d: &'a Value, scope: &str, name: &str, metric: &str) -> Option<&'a Value> {
    d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["scope"] == scope && c["name"] == name && c["metric"] == metric)
}

#[test]
fn an_extra_loop_is_named_with_its_size_from_logs_and_from_reports() {
    let base = temp_log(&workload(0));
    let new = temp_log(&workload(250));
    let d = diff_json(base.path(), new.path());
    assert_eq!(d["schema"], "kmemtrace-diff/1");
    assert_eq!(d["new_callsites"], serde_json::json!(["alloc_b"]));
    let hits = change(&d, "callsite", "alloc_b", "hits").unwrap();
    assert_eq!(
        (hits["base"].clone(), hits["new"].as_u64()),
        (Value::Null, Some(250))
    );
    let total = change(&d, "total", "total", "hits").unwrap();
    assert_eq!(
        (total["base"].as_u64(), total["new"].as_u64()),
        (Some(400), Some(650))
    );
    assert_eq!(total["delta"], 250);
    let bytes = change(&d, "total", "total", "bytes").unwrap();
    assert_eq!(bytes["delta"], 250 * 192);
    let cache = change(&d, "cache", "kmalloc-192", "hits").unwrap();
    assert_eq!(cache["delta"], 250);
    // alloc_a did not change.
    assert!(change(&d, "callsite", "alloc_a", "hits").is_none());
    // The largest change comes first.
    assert_eq!(d["changes"][0]["delta"], 250 * 192);

    // The same from stored report documents.
    let store = |log: &tempfile::NamedTempFile| {
        let mut f = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
        let v = report_json(log.path(), &[]);
        std::io::Write::write_all(&mut f, v.to_string().as_bytes()).unwrap();
        f
    };
    let (jb, jn) = (store(&base), store(&new));
    let from_json = diff_json(jb.path(), jn.path());
    assert_eq!(from_json["changes"], d["changes"]);

    // A capture against itself: nothing changed.
    let same = diff_json(base.path(), base.path());
    assert_eq!(same["changes"], serde_json::json!([]));
}

#[test]
fn unusable_input_exits_3() {
    let base = temp_log(&workload(0));
    let mut bad = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut bad, b"{\"not\": \"a report\"}").unwrap();
    let out = Command::new(common::bin("kmemtrace-diff"))
        .arg(base.path())
        .arg(bad.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kmemtrace-report schema"));
}
