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
            "figures.parquet",
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

/// The synthetic stall log's episodes are one row each of
/// `episodes.parquet`, by start, with the model's figures, in types both
/// engines read, counted in the manifest; a log without stall events has
/// neither the file nor the manifest's entry.
#[test]
fn stall_episodes_are_one_row_each_of_episodes_parquet() {
    let test = "stall_episodes_are_one_row_each_of_episodes_parquet";
    let dir = tempfile::tempdir().unwrap();
    let (bytes, planted) = crate::stalls::build();
    let log = dir.path().join("stalls.kmt");
    std::fs::write(&log, bytes).unwrap();
    let export = |log: &Path, name: &str| {
        let out = dir.path().join(name);
        common::stdout_ok(
            Command::new(common::bin("kmemtrace-export"))
                .arg(log)
                .args(["--to", "parquet", "--capture", name, "-o"])
                .arg(&out),
        );
        let m = std::fs::read_to_string(out.join("manifest.json")).unwrap();
        (out, serde_json::from_str::<Value>(&m).unwrap())
    };
    let (out, manifest) = export(&log, "stalls");
    let Some(got) = query(test, &out) else {
        return;
    };
    let eps = crate::stalls::episodes_of(&log);
    assert_eq!(eps.len() as u64, planted.episodes);
    assert_eq!(manifest["files"]["episodes.parquet"], planted.episodes);
    let types = got["types"]["episodes"].as_object().unwrap();
    for (col, ty) in [
        ("pid", "INTEGER"),
        ("start_ns", "BIGINT"),
        ("gfp", "BIGINT"),
        ("oom_victim", "INTEGER"),
        ("uncertain", "BOOLEAN"),
        ("callsite", "VARCHAR"),
    ] {
        assert_eq!(types[col], ty, "{col}");
    }
    assert_eq!(types.len(), 22);
    let rows = got["episodes"].as_array().unwrap();
    assert_eq!(rows.len(), eps.len());
    let mut stall_ns = 0;
    for (r, e) in rows.iter().zip(&eps) {
        let at = format!("{r}");
        assert_eq!(r["capture"], "stalls");
        assert_eq!(
            (&r["pid"], &r["cpu"]),
            (&e.pid.into(), &e.cpu.into()),
            "{at}"
        );
        assert_eq!(r["comm"].as_str(), e.comm.as_deref(), "{at}");
        for (col, v) in [
            ("start_ns", e.start_ns),
            ("span_ns", e.span_ns),
            ("stall_ns", e.stall_ns),
            ("reclaims", e.reclaims),
            ("reclaim_ns", e.reclaim_ns),
            ("pages_reclaimed", e.pages_reclaimed),
            ("compactions", e.compactions),
            ("compaction_ns", e.compaction_ns),
            ("throttles", e.throttles),
            ("throttle_ns", e.throttle_ns),
            ("retries", u64::from(e.retries)),
        ] {
            assert_eq!(r[col], v, "{col}: {at}");
        }
        assert_eq!(r["kind"], e.kind.as_str(), "{at}");
        assert_eq!(r["callsite"].as_str(), e.callsite.as_deref(), "{at}");
        assert_eq!(r["order"].as_u64(), e.order.map(u64::from), "{at}");
        let gfp = e.gfp.as_ref().unwrap().value.trim_start_matches("0x");
        assert_eq!(r["gfp"], u64::from_str_radix(gfp, 16).unwrap(), "{at}");
        assert_eq!(
            r["oom_victim"].as_i64(),
            e.oom_victim.map(i64::from),
            "{at}"
        );
        assert_eq!(r["ended_by"], e.ended_by.as_str(), "{at}");
        assert_eq!(r["uncertain"], e.uncertain, "{at}");
        stall_ns += r["stall_ns"].as_u64().unwrap();
    }
    assert_eq!(stall_ns, planted.stall_ns);
    // By start; the OOM kill's episode names its victim; the one the
    // capture's end cut says so.
    assert!(rows
        .windows(2)
        .all(|w| w[0]["start_ns"].as_u64() <= w[1]["start_ns"].as_u64()));
    let victims: Vec<(i64, i64)> = rows
        .iter()
        .filter(|r| !r["oom_victim"].is_null())
        .map(|r| {
            (
                r["pid"].as_i64().unwrap(),
                r["oom_victim"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(victims, [(203, 4242)]);
    let cut = rows
        .iter()
        .filter(|r| r["ended_by"] == "capture end")
        .count();
    assert_eq!(cut as u64, planted.open_at_end);
    // The sample has no stall events.
    let sample = common::workspace().join("tests/data/sample-x86_64.kmt");
    let (out, manifest) = export(&sample, "sample");
    assert!(!out.join("episodes.parquet").exists());
    assert!(
        manifest["files"].get("episodes.parquet").is_none(),
        "{manifest}"
    );
}
