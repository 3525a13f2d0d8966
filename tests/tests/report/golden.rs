//! The JSON document `kmemtrace-report/1` keeps every key and value it has:
//! golden outputs of the report as it was before the analysis library
//! (tests/data/golden/*.json.gz), for the committed real captures, the
//! foreign captures and the synthetic logs, with and without options. A
//! report may add keys; it may not drop or change one.
//!
//! `KMT_BLESS=1 cargo test -p kmemtrace-tests --test report golden` writes
//! them again, for a change that means to alter the document (say so in its
//! commit and in JSON.md).

use crate::raw::log_from_raw_dir;
use crate::synthetic::planted;
use crate::{common, report_json, temp_log};
use kmemtrace_testkit::Rng;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

fn golden_dir() -> PathBuf {
    common::workspace().join("tests/data/golden")
}

/// Values that changed on purpose since the golden outputs were made,
/// each with its reason (JSON.md says so too).
const CHANGED: &[(&str, &str)] = &[
    (
        ".capture.tracked_pointers",
        "freed pointers are forgotten per bucket of the pointer hash since the \
         sharded analysis (the same for every thread count), not over all pointers",
    ),
    (
        "cpu1.pages.frees.requests",
        "filtered page frees are the frees that pass the filters, as perf's \
         summary, no longer also the frees (on other CPUs) of selected allocations",
    ),
    ("cpu1.pages.frees.bytes", "as cpu1.pages.frees.requests"),
    (
        "cpu1.pages.alloc_freed.requests",
        "alloc+freed counts the selected frees of blocks allocated in the capture, \
         so that frees = alloc_freed + free_only under any filter",
    ),
    (
        "cpu1.pages.alloc_freed.bytes",
        "as cpu1.pages.alloc_freed.requests",
    ),
    (
        "cpu1.pages.per_cpu_lists",
        "the per-CPU list rows are of the CPUs --cpu keeps: CPU 0's lock runs \
         were listed beside none of its pages",
    ),
];

/// Values that became null on purpose: a leak row with no leaked
/// objects (only objects counted apart, `freed_untraced`) has no ages,
/// where the golden outputs had the end of the capture as the newest age
/// and 0 as the oldest (JSON.md says so too).
fn nulled(row: &serde_json::Map<String, Value>, key: &str) -> bool {
    matches!(key, "oldest_age_ns" | "newest_age_ns")
        && row.contains_key("freed_untraced")
        && row.get("objects") == Some(&Value::from(0))
}

/// Every key and value of `want` is in `got` (arrays element by element,
/// of the same length); `got` may have more keys.
fn assert_keeps(want: &Value, got: &Value, at: &str) {
    if CHANGED.iter().any(|(path, _)| at.ends_with(path)) {
        assert_eq!(want.is_number(), got.is_number(), "{at}: type");
        return;
    }
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g.get(k).unwrap_or_else(|| panic!("{at}.{k}: key dropped"));
                if gv.is_null() && nulled(w, k) {
                    continue;
                }
                assert_keeps(wv, gv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            assert_eq!(w.len(), g.len(), "{at}: array length");
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                assert_keeps(wv, gv, &format!("{at}[{i}]"));
            }
        }
        // Percentages in the golden documents differ from today's in their
        // last bits: the parser rounded both alike until it read floats
        // exactly (`float_roundtrip`, so that a document reads back into
        // the very model that wrote it).
        (Value::Number(w), Value::Number(g)) if w.is_f64() || g.is_f64() => {
            let (w, g) = (w.as_f64().unwrap(), g.as_f64().unwrap());
            assert!(
                (w - g).abs() <= 1e-14 * w.abs().max(g.abs()),
                "{at}: {w} != {g}"
            );
        }
        _ => assert_eq!(want, got, "{at}"),
    }
}

/// Compares (or with KMT_BLESS, writes) one golden output. `input` is
/// dropped for logs made by the tests (their container bytes are not what
/// is compared).
fn golden(name: &str, log: &Path, args: &[&str], keep_input: bool) {
    // The documents were made when perf's order was the default sort.
    let mut args = args.to_vec();
    if !args.contains(&"-s") {
        args.extend(["-s", "frag,hit,bytes"]);
    }
    let mut got = report_json(log, &args);
    let doc = got.as_object_mut().unwrap();
    if keep_input {
        doc["input"]["name"] = Value::from("<log>");
    } else {
        doc.remove("input");
    }
    let path = golden_dir().join(format!("{name}.json.gz"));
    if std::env::var_os("KMT_BLESS").is_some() {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(serde_json::to_string_pretty(&got).unwrap().as_bytes())
            .unwrap();
        std::fs::write(&path, z.finish().unwrap()).unwrap();
        return;
    }
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .read_to_string(&mut text)
    .unwrap();
    let want: Value = serde_json::from_str(&text).unwrap();
    assert_keeps(&want, &got, name);
}

#[test]
fn golden_outputs_of_the_committed_captures() {
    let data = common::workspace().join("tests/data");
    let sample = data.join("sample-x86_64.kmt");
    golden("sample-x86_64", &sample, &[], true);
    golden(
        "sample-x86_64.alloc",
        &sample,
        &["--alloc", "-s", "bytes,hit"],
        true,
    );
    golden(
        "sample-x86_64.cpu1",
        &sample,
        &["--cpu", "1", "--time", "0.1..0.5"],
        true,
    );
    golden(
        "boot-6.1-x86_64",
        &data.join("boot-6.1-x86_64.kmt"),
        &[],
        true,
    );
}

#[test]
fn golden_outputs_of_the_synthetic_logs() {
    for release in ["6.18.44", "6.1.0-50-amd64"] {
        let log = temp_log(&planted(release).build());
        golden(
            &format!("planted-{release}"),
            log.path(),
            &["--alloc"],
            false,
        );
    }
}

#[test]
fn golden_outputs_of_the_foreign_captures() {
    let Some(data) = common::shared_data_or_skip("golden_outputs_of_the_foreign_captures") else {
        return;
    };
    for (arch, big, long) in [("armhf", false, 4), ("s390x", true, 8)] {
        let log = temp_log(&log_from_raw_dir(&data.join(arch).join("raw"), big, long));
        golden(&format!("foreign-{arch}"), log.path(), &[], false);
    }
}

#[test]
fn the_golden_comparison_catches_drops_and_changes_not_additions() {
    let want = serde_json::json!({"a": 1, "b": [{"c": "x"}], "d": null});
    let added = serde_json::json!({"a": 1, "b": [{"c": "x", "e": 2}], "d": null, "f": 3});
    assert_keeps(&want, &added, "doc");
    for bad in [
        serde_json::json!({"a": 1, "b": [{"c": "x"}]}),
        serde_json::json!({"a": 2, "b": [{"c": "x"}], "d": null}),
        serde_json::json!({"a": 1, "b": [{"c": "x"}, {"c": "y"}], "d": null}),
        serde_json::json!({"a": 1, "b": [{"c": "y"}], "d": null}),
    ] {
        let r = std::panic::catch_unwind(|| assert_keeps(&want, &bad, "doc"));
        assert!(r.is_err(), "{bad} passed");
    }
}

/// A busy synthetic log: four CPUs, pointers and pages reused at random
/// (double frees, pointers returned live, cross-CPU frees, frees of unseen
/// objects), losses, time going back on a CPU now and then, about a second
/// of trace time (hundreds of epochs).
fn shuffled() -> Vec<u8> {
    use crate::synthetic::Synth;
    let mut s = Synth::new("6.18.44");
    // A block per sub-buffer: clocks also go back across blocks.
    s.b.subbufs_per_block = 1;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut rnd = |n: u64| rng.below(n);
    let mut ts = 1_000_000_000u64;
    let allocs = ["alloc_a", "alloc_b", "alloc_c", "leaky_alloc", "odd_alloc"];
    let caches = ["dentry", "inode_cache", "filp"];
    for _ in 0..40_000 {
        ts += 1 + rnd(50_000);
        let cpu = rnd(4) as u32;
        // A CPU's clock behind its last event (by up to 60 ms: several
        // events of the same pointer on other CPUs).
        let ts = if rnd(40) == 0 {
            s.absolute = true;
            ts - 1_000_000 - rnd(60_000_000).min(ts - 1_000_000_000)
        } else {
            ts
        };
        let ptr = 0xffff_8880_2000_0000 + 64 * rnd(600);
        let pid = 100 + rnd(3) as i32;
        match rnd(12) {
            0..=3 => {
                let req = 8 + rnd(500);
                let f = allocs[rnd(5) as usize];
                s.kmalloc(cpu, ts, pid, f, ptr, req, req.next_power_of_two());
            }
            4 | 5 => {
                let c = caches[rnd(3) as usize];
                s.cache_alloc(cpu, ts, pid, "cache_alloc_x", ptr, c, 192);
            }
            6..=8 => s.kfree(cpu, ts, pid, ["free_a", "free_b"][rnd(2) as usize], ptr),
            9 => {
                let c = caches[rnd(3) as usize];
                s.cache_free(cpu, ts, pid, "cache_free_x", ptr, c);
            }
            10 => s.page_alloc(cpu, ts, 0x10_0000 + rnd(300), rnd(3)),
            _ if rnd(40) == 0 => s.lost(cpu, 1 + rnd(100)),
            _ => s.page_free(cpu, ts, 0x10_0000 + rnd(300), rnd(3)),
        }
    }
    s.build()
}

/// The report is the same whatever the number of threads (decoders, and
/// shards from 1 to 4): peak live bytes, first occurrences, judgements,
/// loss windows and all.
#[test]
fn the_report_does_not_depend_on_the_thread_count() {
    let data = common::workspace().join("tests/data");
    let planted = temp_log(&planted("6.18.44").build());
    let shuffled = temp_log(&shuffled());
    let busy = report_json(shuffled.path(), &[]);
    assert!(
        busy["misuse"][0]["count"].as_u64().unwrap() > 100,
        "double frees"
    );
    assert!(busy["capture"]["lost_windows_total"].as_u64().unwrap() > 10);
    let backwards: u64 = busy["capture"]["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["backwards"].as_u64().unwrap())
        .sum();
    assert!(backwards > 20, "{backwards} backwards");
    let uncertain: u64 = busy["misuse"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["uncertain"].as_u64().unwrap())
        .sum();
    let certain: u64 = busy["misuse"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["certain"].as_u64().unwrap())
        .sum();
    assert!(
        uncertain > 10 && certain > 10,
        "{uncertain} uncertain, {certain} certain"
    );
    for log in [
        data.join("sample-x86_64.kmt"),
        data.join("boot-6.1-x86_64.kmt"),
        planted.path().to_path_buf(),
        shuffled.path().to_path_buf(),
    ] {
        let one = report_json(&log, &["--alloc", "-j", "1"]);
        for threads in ["2", "3", "5", "8", "16"] {
            let many = report_json(&log, &["--alloc", "-j", threads]);
            assert!(
                one == many,
                "{}: -j 1 and -j {threads} differ",
                log.display()
            );
        }
    }
}

/// A leak row of objects counted apart only (their free may have been
/// untraced) has no leaked objects and so no ages: null in the JSON, `-`
/// in the text, where both once showed the end of the capture as the
/// newest age.
#[test]
fn leak_rows_without_leaked_objects_have_no_ages() {
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    let r = report_json(&sample, &[]);
    let groups = r["leaks"]["groups"].as_array().unwrap();
    let apart = groups.iter().filter(|g| g["objects"] == 0).count();
    assert!(
        apart > 0,
        "the sample has rows of objects counted apart only"
    );
    for g in groups {
        let (oldest, newest) = (&g["oldest_age_ns"], &g["newest_age_ns"]);
        if g["objects"] == 0 {
            assert!(oldest.is_null() && newest.is_null(), "{g}");
            assert!(g["freed_untraced"].as_u64().unwrap() > 0, "{g}");
        } else {
            assert!(oldest.as_u64().unwrap() >= newest.as_u64().unwrap(), "{g}");
        }
    }
    let out = crate::report(&[sample.to_str().unwrap(), "--lines", "1000"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let name = groups.iter().find(|g| g["objects"] == 0).unwrap()["callsite"]
        .as_str()
        .unwrap()
        .to_string();
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("LEAKS"))
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no leak row of {name}:\n{text}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!((cells[1], cells[3], cells[4]), ("0", "-", "-"), "{row}");
}

/// The report's text (`--json` as the report prints it) read back into the
/// typed model and written again: the same bytes. The committed captures,
/// with options that fill the optional rows (`--alloc`, page frames).
#[test]
fn the_document_reads_back_into_the_model_and_writes_the_same_bytes() {
    use kmemtrace_analysis::model::Report;
    let data = common::workspace().join("tests/data");
    for (log, args) in [
        ("sample-x86_64.kmt", &[][..]),
        ("sample-x86_64.kmt", &["--alloc", "--page", "--caches"][..]),
        ("boot-6.1-x86_64.kmt", &[][..]),
        ("board-arm64.kmt", &[][..]),
        ("board-armhf.kmt", &[][..]),
        (
            "sample-x86_64.kmt",
            &["--cpu", "1", "--time", "0.1..0.5"][..],
        ),
    ] {
        let out =
            crate::report(&[&[data.join(log).to_str().unwrap(), "--json"][..], args].concat());
        assert!(out.status.success(), "{log} {args:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let report: Report =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{log} {args:?}: {e}"));
        let again = serde_json::to_string_pretty(&report).unwrap() + "\n";
        let first_change = text.lines().zip(again.lines()).position(|(a, b)| a != b);
        assert!(
            again == text,
            "{log} {args:?}: the round trip changed the document at line {first_change:?}: {:?}",
            first_change.map(|i| (text.lines().nth(i), again.lines().nth(i)))
        );
    }
}

/// Every golden document (made by reports from before the typed model
/// could be read back, some lacking keys added since) loads into the model,
/// and the model written again keeps every key and value the document had.
#[test]
fn the_golden_documents_load_into_the_model() {
    let mut loaded = 0;
    for entry in std::fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let report: kmemtrace_analysis::model::Report =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let want: Value = serde_json::from_str(&text).unwrap();
        let got = serde_json::to_value(&report).unwrap();
        assert_keeps(&want, &got, &path.display().to_string());
        loaded += 1;
    }
    assert!(loaded >= 8, "{loaded} golden documents");
}
