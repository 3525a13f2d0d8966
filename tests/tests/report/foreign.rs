//! Foreign-kernel captures (`../shared/data`): armhf (32-bit little-endian)
//! and s390x (64-bit big-endian), Linux 6.1, reported on this host. The
//! per-callsite totals must equal an independent reading of the kernel's
//! own text rendering of the same events.

use crate::raw::{gunzip, log_from_raw_dir, text_totals, TextTotals};
use crate::{common, finding, report_json, temp_log};
use std::collections::BTreeMap;

struct Foreign {
    arch: &'static str,
    big: bool,
    long: u8,
    machine: &'static str,
}

const CAPTURES: [Foreign; 2] = [
    Foreign {
        arch: "armhf",
        big: false,
        long: 4,
        machine: "armv7l",
    },
    Foreign {
        arch: "s390x",
        big: true,
        long: 8,
        machine: "s390x",
    },
];

fn callsite_totals(r: &serde_json::Value) -> BTreeMap<String, TextTotals> {
    let mut m = BTreeMap::new();
    for c in r["callsites"].as_array().unwrap() {
        let t = TextTotals {
            hits: c["hits"].as_u64().unwrap(),
            bytes_req: c["bytes_req"].as_u64().unwrap(),
            bytes_alloc: c["bytes_alloc"].as_u64().unwrap(),
            free_calls: c["free_calls"].as_u64().unwrap(),
        };
        let prev = m.insert(c["callsite"].as_str().unwrap().to_string(), t);
        assert!(prev.is_none(), "call site listed twice: {}", c["callsite"]);
    }
    m
}

#[test]
fn foreign_callsite_totals_equal_the_kernels_text() {
    let Some(data) = common::shared_data_or_skip("foreign_callsite_totals_equal_the_kernels_text")
    else {
        return;
    };
    for c in CAPTURES {
        let dir = data.join(c.arch);
        let log = temp_log(&log_from_raw_dir(&dir.join("raw"), c.big, c.long));
        let r = report_json(log.path(), &[]);
        assert_eq!(r["schema"], "kmemtrace-report/1");
        assert_eq!(r["kernel"]["machine"], c.machine);
        assert_eq!(
            r["kernel"]["byte_order"],
            if c.big { "big" } else { "little" }
        );
        let want = text_totals(&gunzip(&dir.join("trace.txt.gz")));
        let got = callsite_totals(&r);
        assert!(
            want.len() > 50,
            "{}: only {} call sites in the text",
            c.arch,
            want.len()
        );
        for (k, w) in &want {
            assert_eq!(got.get(k), Some(w), "{}: call site {k}", c.arch);
        }
        assert_eq!(got.len(), want.len(), "{}: extra call sites", c.arch);
        // Totals hang together.
        let s = &r["summary"];
        let hits: u64 = want.values().map(|t| t.hits).sum();
        let frees: u64 = want.values().map(|t| t.free_calls).sum();
        assert_eq!(s["alloc_events"].as_u64().unwrap(), hits, "{}", c.arch);
        assert_eq!(s["free_events"].as_u64().unwrap(), frees, "{}", c.arch);
        let req: u64 = want.values().map(|t| t.bytes_req).sum();
        let alloc: u64 = want.values().map(|t| t.bytes_alloc).sum();
        assert_eq!(s["bytes_requested"].as_u64().unwrap(), req);
        assert_eq!(s["bytes_allocated"].as_u64().unwrap(), alloc);
        // No loss in these captures: nothing uncertain, no lost windows.
        assert_eq!(r["capture"]["lost_windows_total"], 0, "{}", c.arch);
        for f in r["misuse"].as_array().unwrap() {
            assert_eq!(f["uncertain"], 0, "{}: {}", c.arch, f["kind"]);
        }
        // 6.1 kernel: kfree() of kmem_cache objects is judged by release.
        let k = finding(&r, "kmem_cache_alloc_freed_by_kfree");
        assert_eq!(k["severity"], "warning");
        assert!(k["judgement"].as_str().unwrap().contains("6.4"));
        // The cache names come from kmem_cache_free (6.1 has no name in
        // kmem_cache_alloc).
        let caches = r["caches"].as_array().unwrap();
        assert!(
            caches.iter().any(|x| x["name"] == "names_cache"),
            "{}: {caches:?}",
            c.arch
        );
        // GFP flags named with the recorded kernel's own table.
        assert_eq!(r["kernel"]["gfp_table"], true);
        let any_kernel = r["callsites"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|x| x["gfp"].as_array().unwrap())
            .any(|g| g["flags"].as_str().unwrap().contains("GFP_KERNEL"));
        assert!(any_kernel, "{}", c.arch);
    }
}

#[test]
fn foreign_overflow_findings_are_uncertain_where_events_were_lost() {
    let Some(data) = common::shared_data_or_skip(
        "foreign_overflow_findings_are_uncertain_where_events_were_lost",
    ) else {
        return;
    };
    for c in CAPTURES {
        let dir = data.join(c.arch);
        let log = temp_log(&log_from_raw_dir(&dir.join("raw_overflow"), c.big, c.long));
        let r = report_json(log.path(), &[]);
        // Both CPUs' first sub-buffers carry the missed-events flag.
        assert!(r["capture"]["lost_windows_total"].as_u64().unwrap() >= 2);
        for cpu in r["capture"]["cpus"].as_array().unwrap() {
            assert_eq!(cpu["missed_subbufs"], 1, "{}", c.arch);
            assert!(cpu["lost_stats"].as_u64().unwrap() > 8000, "{}", c.arch);
        }
        // The per-callsite totals still equal the text's.
        let want = text_totals(&gunzip(&dir.join("trace_overflow.txt.gz")));
        let got = callsite_totals(&r);
        assert_eq!(got, want, "{}", c.arch);
        // Frees of objects allocated before the (overwritten) start are
        // informational.
        let unseen = finding(&r, "free_of_object_allocated_before_capture");
        assert!(unseen["count"].as_u64().unwrap() > 0);
        assert_eq!(unseen["severity"], "info");
        // Leaks: the capture lost events on the other CPU after most
        // allocations: those are uncertain.
        let l = &r["leaks"];
        assert!(l["uncertain"].as_u64().unwrap() <= l["objects"].as_u64().unwrap());
    }
}

/// Writes the foreign logs to `$KMT_REPORT_DUMP_DIR` (for manual runs and
/// the benchmark); does nothing without it.
#[test]
fn dump_foreign_logs_when_asked() {
    let Ok(out) = std::env::var("KMT_REPORT_DUMP_DIR") else {
        return;
    };
    let Some(data) = common::shared_data() else {
        return;
    };
    for c in CAPTURES {
        for d in ["raw", "raw_overflow"] {
            let bytes = log_from_raw_dir(&data.join(c.arch).join(d), c.big, c.long);
            std::fs::write(format!("{out}/{}-{d}.kmt", c.arch), bytes).unwrap();
        }
    }
}

/// `kmemtraced --import INPUT -o DIR/NAME.kmt`, asserting success.
pub fn import(input: &std::path::Path, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let out = dir.join(format!("{name}.kmt"));
    let st = std::process::Command::new(common::bin("kmemtraced"))
        .arg("--import")
        .arg(input)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "kmemtraced --import {}: {}",
        input.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// The same captures through the recorder's importer
/// (`kmemtraced --import DIR`): the report is the same.
#[test]
fn foreign_captures_imported_by_kmemtraced_report_the_same() {
    let Some(data) =
        common::shared_data_or_skip("foreign_captures_imported_by_kmemtraced_report_the_same")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for c in CAPTURES {
        let raw = data.join(c.arch).join("raw");
        let out = import(&raw, dir.path(), c.arch);
        let imported = report_json(&out, &[]);
        let want = text_totals(&gunzip(&data.join(c.arch).join("trace.txt.gz")));
        assert_eq!(callsite_totals(&imported), want, "{}", c.arch);
        assert_eq!(
            imported["kernel"]["byte_order"],
            if c.big { "big" } else { "little" }
        );
        let mine = temp_log(&log_from_raw_dir(&raw, c.big, c.long));
        let r = report_json(mine.path(), &[]);
        for k in [
            "summary",
            "misuse",
            "leaks",
            "cross_cpu",
            "caches",
            "size_classes",
        ] {
            assert_eq!(imported[k], r[k], "{}: {k}", c.arch);
        }
    }
}
