//! `kmemtrace-export --to parquet`: the files read by DuckDB
//! (`tests/scripts/parquet_query.py`, PyPI `duckdb`) hold every kmem event
//! of the log, by event as the log's decoder counts them, in types both
//! DuckDB and Spark read (no unsigned 64-bit columns); the call sites'
//! allocations summed from the event rows equal the call-site table, and
//! that table is `kmemtrace-report`'s. On this kernel's capture, a 32-bit
//! arm board's and a big-endian s390x one's. The files are the same
//! whatever the number of threads writing them.

use crate::common;
use crate::foreign::import;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The query's JSON, or `None` (skipped) without python3's `duckdb`.
fn query(test: &str, dir: &Path) -> Option<Value> {
    let probe = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        common::skip(
            test,
            common::Missing::Tool,
            "python3 with duckdb (pip install duckdb)",
        );
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/parquet_query.py");
    let out = common::stdout_ok(Command::new("python3").arg(script).arg(dir));
    Some(serde_json::from_str(&out).expect("the query's JSON"))
}

/// A JSON object of counts.
fn counts(v: &Value) -> BTreeMap<String, u64> {
    let o = v.as_object().expect("an object of counts");
    o.iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap()))
        .collect()
}

/// Exports `log` as capture `name` and compares; `None` if skipped.
fn exported_equals_the_log(test: &str, log: &Path, out: &Path, name: &str) -> Option<()> {
    let dir = out.join(name);
    common::stdout_ok(
        Command::new(common::bin("kmemtrace-export"))
            .arg(log)
            // Runs of 32 KiB: many, so that page allocations meet their
            // stacks across the runs' ends too.
            .args([
                "--to",
                "parquet",
                "--capture",
                name,
                "--run-bytes",
                "32768",
                "-o",
            ])
            .arg(&dir),
    );
    let got = query(test, &dir)?;
    let at = log.display();
    // Every kmem event, by event.
    let (_, evs) = common::decode_kmem(log);
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for e in &evs {
        *want.entry(e.kind.name().to_string()).or_default() += 1;
    }
    assert_eq!(counts(&got["events"]), want, "{at}: events");
    // Types Spark and DuckDB both read.
    for (file, cols) in got["types"].as_object().unwrap() {
        for (col, ty) in cols.as_object().unwrap() {
            let ty = ty.as_str().unwrap();
            assert!(
                ["VARCHAR", "BIGINT", "INTEGER", "BOOLEAN"].contains(&ty),
                "{at}: {file}.{col} is {ty}"
            );
        }
    }
    assert_eq!(got["capture"], serde_json::json!([name]), "{at}");
    for (file, n) in got["cpu_back"].as_object().unwrap() {
        assert_eq!(n, 0, "{at}: {file}: rows come CPU by CPU");
    }
    // The call sites' allocations from the events equal the table...
    assert_eq!(got["mismatches"], serde_json::json!([]), "{at}: call sites");
    // ...and the table is the report's.
    let report = crate::report_json(log, &[]);
    let rows = report["callsites"].as_array().unwrap();
    assert!(!rows.is_empty(), "{at}");
    for c in rows {
        let name = c["callsite"].as_str().unwrap();
        let n = |k: &str| c[k].as_u64().unwrap();
        assert_eq!(
            got["callsites"][name],
            serde_json::json!([n("hits"), n("bytes_req"), n("bytes_alloc")]),
            "{at}: {name}"
        );
    }
    // Page allocations by call site (from the stacks) and order: the
    // report's page call-site table.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for c in report["pages"]["callsites"].as_array().unwrap() {
        let key = format!("{}|{}", c["callsite"].as_str().unwrap(), c["order"]);
        *want.entry(key).or_default() += c["hits"].as_u64().unwrap();
    }
    assert_eq!(counts(&got["page_sites"]), want, "{at}: page call sites");
    // `not by_recorder` selects the page frees the report counts.
    assert_eq!(
        got["page_frees"], report["pages"]["frees"]["requests"],
        "{at}: page frees"
    );
    // Each has its stack, ending at the call site's function.
    let stacks = &got["stacks"];
    assert_eq!(stacks[0], stacks[1], "{at}: call sites without a stack");
    assert_eq!(stacks[2], 0, "{at}: stacks not ending at their call site");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["capture"], name);
    assert_eq!(manifest["kernel"]["release"], report["kernel"]["release"]);
    Some(())
}

#[test]
fn parquet_files_hold_every_kmem_event_and_the_reports_call_sites() {
    let test = "parquet_files_hold_every_kmem_event_and_the_reports_call_sites";
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    for (file, name) in [
        ("sample-x86_64.kmt", "x86_64"),
        ("board-armhf.kmt", "armhf"),
    ] {
        if exported_equals_the_log(test, &data.join(file), dir.path(), name).is_none() {
            return;
        }
    }
    let Some(shared) = common::shared_data_or_skip(test) else {
        return;
    };
    let log = import(&shared.join("s390x/raw"), dir.path(), "s390x");
    exported_equals_the_log(test, &log, dir.path(), "s390x-board");
}

#[test]
fn parquet_files_are_the_same_whatever_the_number_of_threads() {
    let dir = tempfile::tempdir().unwrap();
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample-x86_64.kmt");
    let export = |threads: &str| {
        let out = dir.path().join(format!("j{threads}"));
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-export"))
                .arg(&log)
                .args([
                    "--to",
                    "parquet",
                    "--capture",
                    "same",
                    "--run-bytes",
                    "16384",
                ])
                .args(["-j", threads, "-o"])
                .arg(&out),
        );
        out
    };
    let (one, three) = (export("1"), export("3"));
    let mut files: Vec<_> = std::fs::read_dir(&one)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "callsites.parquet",
            "manifest.json",
            "page_events.parquet",
            "pcp_events.parquet",
            "slab_events.parquet"
        ],
        "no scratch files left"
    );
    for f in &files {
        let a = std::fs::read(one.join(f)).unwrap();
        let b = std::fs::read(three.join(f)).unwrap();
        assert!(a == b, "{f:?} differs between -j 1 and -j 3");
    }
}

#[test]
fn page_allocations_of_this_kernel_carry_the_reports_call_sites() {
    let test = "page_allocations_of_this_kernel_carry_the_reports_call_sites";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("live.kmt");
    // Forks and directory walks: page tables, stacks, page cache.
    crate::tracedat::record(
        &log,
        &["-q"],
        "for i in 1 2 3 4 5 6; do ls -R /usr/lib > /dev/null; done",
    );
    if exported_equals_the_log(test, &log, dir.path(), "live").is_none() {
        return;
    }
    // The comparison above is only worth something with stacks.
    let got = query(test, &dir.path().join("live")).unwrap();
    let named = got["page_sites"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !k.starts_with("-|"))
        .count();
    assert!(
        named > 0,
        "no page allocation has a call site: {}",
        got["page_sites"]
    );
}
