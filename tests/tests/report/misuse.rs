//! Synthetic logs with every misuse kind planted a known number of times:
//! the report gives exactly those counts, and marks as uncertain what
//! falls where events were lost.

use crate::synthetic::{planted, Synth, PLANTED};
use crate::{finding, report_json, temp_log};
use serde_json::Value;

fn count(r: &Value, kind: &str) -> (u64, u64) {
    let f = finding(r, kind);
    (
        f["count"].as_u64().unwrap(),
        f["uncertain"].as_u64().unwrap(),
    )
}

fn callsite<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["callsite"] == name)
        .unwrap_or_else(|| panic!("no call site {name}"))
}

#[test]
fn planted_misuse_gives_exact_counts() {
    let s = planted("6.18.44");
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    let p = &PLANTED;
    assert_eq!(count(&r, "double_free"), (p.double_free, 0));
    assert_eq!(
        count(&r, "kmalloc_freed_by_kmem_cache_free"),
        (p.kmalloc_cache_free, 0)
    );
    assert_eq!(
        count(&r, "kmem_cache_alloc_freed_by_kfree"),
        (p.cache_kfree, 0)
    );
    assert_eq!(count(&r, "cache_mismatch"), (p.cache_mismatch, 0));
    assert_eq!(count(&r, "live_pointer_returned"), (p.live_returned, 0));
    assert_eq!(count(&r, "bytes_alloc_below_bytes_req"), (p.req_exceeds, 0));
    assert_eq!(count(&r, "failed_allocation"), (p.failed, 0));
    assert_eq!(
        count(&r, "free_of_object_allocated_before_capture"),
        (p.unseen, 0)
    );

    // Severities, call sites, first occurrences.
    assert_eq!(
        finding(&r, "kmalloc_freed_by_kmem_cache_free")["severity"],
        "error"
    );
    assert_eq!(finding(&r, "cache_mismatch")["severity"], "error");
    assert_eq!(
        finding(&r, "bytes_alloc_below_bytes_req")["severity"],
        "error"
    );
    assert_eq!(
        finding(&r, "free_of_object_allocated_before_capture")["severity"],
        "info"
    );
    let k = finding(&r, "kmem_cache_alloc_freed_by_kfree");
    assert_eq!(k["severity"], "info", "6.18: legal since 6.4");
    assert!(k["judgement"].as_str().unwrap().contains("legal since 6.4"));
    let d = finding(&r, "double_free");
    assert_eq!(d["top_alloc_callsites"][0]["callsite"], "alloc_b+0x10");
    assert_eq!(d["top_alloc_callsites"][0]["count"], p.double_free);
    assert_eq!(d["top_free_callsites"][0]["callsite"], "free_b+0x10");
    assert_eq!(d["first"]["cpu"], 1);
    assert_eq!(d["first"]["comm"], "other");
    assert!(d["first"]["ts_ns"].as_u64().unwrap() > 1_000_000_000);
    assert!(d["first"]["bytes_req"].is_null(), "a free revealed it");
    let q = finding(&r, "bytes_alloc_below_bytes_req");
    assert_eq!(q["first"]["bytes_req"], 200);
    assert_eq!(q["first"]["bytes_alloc"], 192);
    assert_eq!(q["top_alloc_callsites"][0]["callsite"], "odd_alloc+0x10");
    let m = finding(&r, "cache_mismatch");
    assert_eq!(m["cache_pairs"][0][0], "dentry");
    assert_eq!(m["cache_pairs"][0][1], "inode_cache");
    let l = finding(&r, "live_pointer_returned");
    assert_eq!(l["top_alloc_callsites"][0]["callsite"], "bulk_user+0x10");

    // Leaks: exactly the planted ones, about 1 s old.
    let leaks = &r["leaks"];
    assert_eq!(leaks["objects"], p.leaks);
    assert_eq!(leaks["bytes"], p.leak_bytes);
    assert_eq!(leaks["uncertain"], 0);
    let g = &leaks["groups"][0];
    assert_eq!(g["callsite"], "leaky_alloc+0x10");
    assert!(g["newest_age_ns"].as_u64().unwrap() >= 1_000_000_000);
    // --min-age beyond their age: none.
    let r2 = report_json(log.path(), &["--min-age", "5s"]);
    assert_eq!(r2["leaks"]["objects"], 0);

    // Per call site.
    let a = callsite(&r, "alloc_a+0x10");
    assert_eq!(a["hits"], p.normal_pairs + 1);
    assert_eq!(a["bytes_req"], 100 * (p.normal_pairs + 1));
    assert_eq!(a["bytes_alloc"], 128 * (p.normal_pairs + 1));
    assert_eq!(a["bytes_wasted"], 28 * (p.normal_pairs + 1));
    assert_eq!(a["fragmentation_pct"], 21.875);
    assert_eq!(a["frees"], p.normal_pairs + 1);
    assert_eq!(a["cross_cpu_frees"], p.cross_cpu_frees);
    assert_eq!(a["live_objects"], 0);
    assert_eq!(a["peak_live_bytes"], 128);
    assert_eq!(a["gfp"][0]["flags"], "GFP_KERNEL");
    assert_eq!(a["gfp"][0]["compact"], "KERNEL");
    let lk = callsite(&r, "leaky_alloc+0x10");
    assert_eq!(lk["live_objects"], p.leaks);
    assert_eq!(lk["live_bytes"], p.leak_bytes);
    assert_eq!(lk["peak_live_bytes"], p.leak_bytes);

    // Totals, cross-CPU matrix, cross-node.
    let sm = &r["summary"];
    assert_eq!(sm["alloc_events"], s.allocs);
    assert_eq!(sm["free_events"], s.frees);
    assert_eq!(sm["failed_allocs"], p.failed);
    assert_eq!(sm["null_frees"], p.null_frees);
    assert_eq!(sm["cross_cpu_frees"], p.cross_cpu_frees);
    assert_eq!(sm["cross_node_allocs"], p.cross_node);
    assert_eq!(sm["perf_cross_cpu_allocations"], p.cross_node);
    assert_eq!(sm["node_requests"], p.cross_node + 1);
    assert_eq!(sm["live_objects"], p.leaks);
    let x = &r["cross_cpu"];
    assert_eq!(x["cpus"], serde_json::json!([0, 1]));
    assert_eq!(x["matrix"][0][1], p.cross_cpu_frees);
    assert_eq!(x["cross_cpu_frees"], p.cross_cpu_frees);
    // Caches and size classes.
    let caches = r["caches"].as_array().unwrap();
    let dentry = caches.iter().find(|c| c["name"] == "dentry").unwrap();
    assert_eq!(dentry["hits"], p.cache_kfree + p.cache_mismatch);
    let classes = r["size_classes"].as_array().unwrap();
    let k128 = classes.iter().find(|c| c["name"] == "kmalloc-128").unwrap();
    assert_eq!(k128["hits"], p.normal_pairs + 1);
    // Page allocator counted apart.
    assert_eq!(r["page_allocator"]["allocs"], 1);
    assert_eq!(r["page_allocator"]["alloc_bytes"], 4 * 4096);
}

#[test]
fn a_page_freed_through_the_batched_path_is_counted_once() {
    // Since 2.6.34 every page freed in a batch first passes
    // free_pages_prepare(), which emits mm_page_free; mm_page_free_batched
    // follows (v4.15+; before it on 3.3-4.14) for the same pfn.
    let mut s = Synth::new("6.18.0");
    s.page_free(0, 1_000, 0x100, 0);
    s.page_free_batched(0, 1_001, 0x100);
    s.page_free(0, 2_000, 0x200, 2);
    s.page_free(1, 3_000, 0x300, 0);
    s.page_free_batched(1, 3_001, 0x300);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    let p = &r["page_allocator"];
    assert_eq!(p["frees"], 3);
    assert_eq!(p["batched_frees"], 2);
    assert_eq!(p["free_bytes"], 4096 + 4 * 4096 + 4096);
}

#[test]
fn kfree_of_cache_objects_is_judged_by_the_recorded_release() {
    let log = temp_log(&planted("6.1.0-50-amd64").build());
    let r = report_json(log.path(), &[]);
    let k = finding(&r, "kmem_cache_alloc_freed_by_kfree");
    assert_eq!(k["severity"], "warning");
    assert!(k["judgement"].as_str().unwrap().contains("6.1"));
    assert_eq!(k["count"], PLANTED.cache_kfree);
}

#[test]
fn findings_where_events_were_lost_are_uncertain() {
    let mut s = Synth::new("6.18.0");
    let (p, q, r0, lk) = (
        0xffff_8880_2000_0000u64,
        0xffff_8880_2000_1000u64,
        0xffff_8880_2000_2000u64,
        0xffff_8880_2000_3000u64,
    );
    // CPU 1: an object that stays live across the loss below: uncertain leak.
    s.kmalloc(1, 50, 100, "leaky_alloc", lk, 8, 8);
    // CPU 0: p allocated, then events lost, then p allocated again: its
    // free may have been among the lost events.
    s.kmalloc(0, 100, 100, "bulk_user", p, 16, 16);
    // CPU 1: q allocated and freed before the loss, freed again after it:
    // an allocation of q may have been lost.
    s.kmalloc(1, 110, 100, "alloc_b", q, 16, 16);
    s.kfree(1, 120, 100, "free_b", q);
    s.lost(0, 1000);
    s.kmalloc(0, 300, 100, "bulk_user", p, 16, 16);
    s.kfree(0, 310, 100, "free_a", p);
    s.kfree(1, 400, 100, "free_b", q);
    // After the loss, a certain double free.
    s.kmalloc(1, 500, 100, "alloc_b", r0, 16, 16);
    s.kfree(1, 510, 100, "free_b", r0);
    s.kfree(1, 520, 100, "free_b", r0);
    // Allocations go on being traced after it (else it would be at the
    // capture's edge: the allocation it lacks could have come after the
    // recorder turned allocations off).
    s.kmalloc(0, 600, 100, "alloc_a", 0xffff_8880_2000_9000, 16, 16);
    s.kfree(0, 610, 100, "free_a", 0xffff_8880_2000_9000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    assert_eq!(r["capture"]["lost_windows_total"], 1);
    let w = &r["capture"]["lost_windows"][0];
    assert_eq!(
        (
            w["cpu"].as_u64(),
            w["start_ns"].as_u64(),
            w["end_ns"].as_u64()
        ),
        (Some(0), Some(100), Some(300))
    );
    assert_eq!(r["capture"]["cpus"][0]["lost_stored"], 1000);
    assert_eq!(count(&r, "live_pointer_returned"), (1, 1));
    assert_eq!(count(&r, "double_free"), (2, 1));
    let d = finding(&r, "double_free");
    assert_eq!(d["certain"], 1);
    assert_eq!(d["first"]["uncertain"], true);
    assert_eq!(d["first_certain"]["ptr"], format!("0x{r0:x}"));
    assert_eq!(r["leaks"]["objects"], 1);
    assert_eq!(r["leaks"]["uncertain"], 1);
}

#[test]
fn filters_select_allocations() {
    let log = temp_log(&planted("6.18.44").build());
    let p = &PLANTED;
    // CPU 1: double frees, mismatches, bytes_alloc < bytes_req, leaks, and
    // the frees of unseen objects made there.
    let r = report_json(log.path(), &["--cpu", "1"]);
    assert_eq!(r["filters"]["cpus"], serde_json::json!([1]));
    assert_eq!(count(&r, "double_free").0, p.double_free);
    assert_eq!(count(&r, "kmalloc_freed_by_kmem_cache_free").0, 0);
    assert_eq!(
        count(&r, "free_of_object_allocated_before_capture").0,
        p.unseen
    );
    assert_eq!(r["leaks"]["objects"], p.leaks);
    assert!(r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["callsite"] != "alloc_a+0x10" || c["hits"] == 0));
    // A call-site pattern.
    let r = report_json(log.path(), &["--callsite", "leaky*"]);
    let sites: Vec<&str> = r["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["callsite"].as_str().unwrap())
        .collect();
    assert_eq!(sites, ["leaky_alloc+0x10"]);
    assert_eq!(r["summary"]["alloc_events"], p.leaks);
    // pid and comm: pid 200 ("other") made the double frees and the leaks.
    for args in [&["--pid", "200"][..], &["--comm", "other"][..]] {
        let r = report_json(log.path(), args);
        assert_eq!(r["leaks"]["objects"], p.leaks, "{args:?}");
        assert_eq!(count(&r, "double_free").0, p.double_free, "{args:?}");
        assert_eq!(
            r["summary"]["alloc_events"],
            p.double_free + p.leaks,
            "{args:?}"
        );
    }
    // A time window: the first 100 pairs only (1 s + 100 us).
    let r = report_json(log.path(), &["--time", "0..0.00009999"]);
    assert_eq!(r["summary"]["alloc_events"], p.normal_pairs);
    assert_eq!(r["summary"]["cross_cpu_frees"], p.cross_cpu_frees);
    assert_eq!(count(&r, "double_free").0, 0);
    // Absolute: the same window.
    let r2 = report_json(log.path(), &["--time", "@1.000001..@1.0001"]);
    assert_eq!(r2["summary"]["alloc_events"], p.normal_pairs);
    // Sort and limit.
    let r = report_json(log.path(), &["-s", "hit", "-l", "1"]);
    assert_eq!(r["callsites"].as_array().unwrap().len(), 1);
    assert_eq!(r["callsites"][0]["callsite"], "alloc_a+0x10");
    let r = report_json(log.path(), &["-s", "live"]);
    assert_eq!(r["callsites"][0]["callsite"], "leaky_alloc+0x10");
    let r = report_json(log.path(), &["-s", "pingpong"]);
    assert_eq!(r["callsites"][0]["callsite"], "alloc_a+0x10");
    // Per pointer.
    let r = report_json(log.path(), &["--alloc"]);
    let allocs = r["allocs"].as_array().unwrap();
    assert!(allocs.len() as u64 >= p.normal_pairs + p.leaks);
}

#[test]
fn memory_follows_live_objects_not_log_length() {
    // 30,000 objects allocated and freed at distinct addresses, 7 live.
    let mut s = Synth::new("6.18.0");
    let mut ts = 1000;
    for i in 0..30_000u64 {
        let p = 0xffff_8880_4000_0000 + i * 64;
        s.kmalloc((i % 2) as u32, ts, 1, "alloc_a", p, 60, 64);
        s.kfree((i % 2) as u32, ts + 10, 1, "free_a", p);
        ts += 100;
    }
    for i in 0..7u64 {
        s.kmalloc(
            0,
            ts + i,
            1,
            "leaky_alloc",
            0xffff_8880_9000_0000 + i * 64,
            8,
            8,
        );
    }
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &["--remember-frees", "1000"]);
    let tracked = r["capture"]["tracked_pointers"].as_u64().unwrap();
    assert!(tracked <= 2000 + 7, "{tracked} pointers tracked");
    assert_eq!(r["leaks"]["objects"], 7);
    assert_eq!(r["summary"]["matched_frees"], 30_000);
    // A double free within the horizon is still seen.
    let mut s = Synth::new("6.18.0");
    s.kmalloc(0, 10, 1, "alloc_b", 0xffff_8880_0000_1000, 8, 8);
    s.kfree(0, 20, 1, "free_b", 0xffff_8880_0000_1000);
    for i in 0..500u64 {
        let p = 0xffff_8880_5000_0000 + i * 64;
        s.kmalloc(0, 30 + i * 10, 1, "alloc_a", p, 8, 8);
        s.kfree(0, 35 + i * 10, 1, "free_a", p);
    }
    s.kfree(1, 100_000, 1, "free_b", 0xffff_8880_0000_1000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &["--remember-frees", "1000"]);
    assert_eq!(count(&r, "double_free"), (1, 0));
    // Beyond it, the second free looks like one of an unseen object.
    let r = report_json(log.path(), &["--remember-frees", "100"]);
    assert_eq!(count(&r, "double_free"), (0, 0));
    assert_eq!(count(&r, "free_of_object_allocated_before_capture"), (1, 0));
}

/// A double free made by the task that, 50 us before on the same CPU, freed
/// an object the capture never saw allocated, is set apart (the structure
/// they belong to was allocated untraced), however long the capture goes
/// on after the two: the report keeps the unseen frees for a window of
/// time, not for the capture's length, and the ones it forgets have marked
/// the double frees made with them. By another task, it stays certain.
#[test]
fn a_double_free_made_with_an_unseen_free_is_set_apart_after_any_length() {
    let run = |unseen_pid: i32| {
        let mut s = Synth::new("6.18.44");
        let (a, b) = (0xffff_8880_0200_0000u64, 0xffff_8880_0300_0000u64);
        // Normal traffic before, so that allocations are traced from the
        // start (the double free is not at the capture's edge).
        let mut ts = 1_000_000_000u64;
        for i in 0..50u64 {
            s.kmalloc(0, ts, 100, "alloc_a", a + 0x100 * i, 64, 64);
            s.kfree(0, ts + 10, 100, "free_a", a + 0x100 * i);
            ts += 1_000;
        }
        s.kmalloc(0, ts, 100, "alloc_b", b, 64, 64);
        s.kfree(0, ts + 1_000, 100, "free_b", b);
        // The unseen free, then 50 us later the second free of `b`.
        s.kfree(
            0,
            ts + 2_000_000,
            unseen_pid,
            "free_u",
            0xffff_8880_0400_0000,
        );
        s.kfree(0, ts + 2_050_000, 100, "free_b", b);
        // 100 ms more: about 24 epochs folded after the two.
        ts += 3_000_000;
        for i in 0..1000u64 {
            s.kmalloc(1, ts, 200, "alloc_a", a + 0x10_0000 + 0x100 * i, 64, 64);
            s.kfree(1, ts + 10, 200, "free_a", a + 0x10_0000 + 0x100 * i);
            ts += 100_000;
        }
        let log = temp_log(&s.build());
        report_json(log.path(), &[])
    };
    let r = run(100);
    let d = finding(&r, "double_free");
    assert_eq!(
        (d["count"].as_u64(), d["certain"].as_u64()),
        (Some(1), Some(0)),
        "{d}"
    );
    assert_eq!(d["explained"], 1, "{d}");
    assert!(
        d["reasons"][0]["because"]
            .as_str()
            .unwrap()
            .contains("freed by the same task within 100 us"),
        "{d}"
    );
    let r = run(200);
    let d = finding(&r, "double_free");
    assert_eq!(
        (d["count"].as_u64(), d["certain"].as_u64()),
        (Some(1), Some(1)),
        "{d}"
    );
}
