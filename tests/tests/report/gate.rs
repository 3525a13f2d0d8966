//! `--fail-on warning` as a release gate: what the trace shows the kernel
//! did wrong stays a finding at its severity and exact count; what the
//! trace could not see (untraced allocation and free paths, a pid filter,
//! the capture's edges) is set apart, counted, and said why. Healthy
//! captures pass: the bundled ones, the foreign ones, and fresh recordings
//! of this kernel under load.

use crate::raw::log_from_raw_dir;
use crate::synthetic::{planted, Synth, PLANTED};
use crate::{common, finding, report, report_json, temp_log};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn n(f: &Value, key: &str) -> u64 {
    f[key].as_u64().unwrap_or_else(|| panic!("{key} in {f}"))
}

/// `--fail-on warning`'s exit status, with the findings it counted.
fn gate(log: &Path) -> (Option<i32>, String) {
    let out = report(&[log.to_str().unwrap(), "--fail-on", "warning", "--misuse"]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
    )
}

#[test]
fn planted_misuse_keeps_its_severity_and_exact_certain_counts() {
    for release in ["6.18.44", "6.1.0-50-amd64"] {
        let log = temp_log(&planted(release).build());
        let r = report_json(log.path(), &[]);
        let p = &PLANTED;
        for (kind, severity, count) in [
            ("double_free", "warning", p.double_free),
            (
                "kmalloc_freed_by_kmem_cache_free",
                "error",
                p.kmalloc_cache_free,
            ),
            ("cache_mismatch", "error", p.cache_mismatch),
            ("bytes_alloc_below_bytes_req", "error", p.req_exceeds),
            ("failed_allocation", "warning", p.failed),
        ] {
            let f = finding(&r, kind);
            assert_eq!(f["severity"], severity, "{release} {kind}");
            for key in ["count", "certain"] {
                assert_eq!(n(f, key), count, "{release} {kind} {key}");
            }
            for key in ["uncertain", "at_capture_edges", "explained"] {
                assert_eq!(n(f, key), 0, "{release} {kind} {key}");
            }
        }
        // The planted double frees: kmalloc-64 freed at free_b, whose
        // cache and call site show no untraced traffic: kept, said why.
        let d = finding(&r, "double_free");
        let why = &d["reasons"][0];
        assert_eq!(
            (why["cache"].as_str(), why["kept"].as_bool()),
            (Some("kmalloc-64"), Some(true)),
            "{why}"
        );
        // The planted live pointers returned: six objects of one kmalloc
        // size, so a cache freed by an untraced path (and no double free
        // before any). Counted, set apart.
        let l = finding(&r, "live_pointer_returned");
        assert_eq!(n(l, "count"), p.live_returned);
        assert_eq!(n(l, "explained"), p.live_returned);
        assert_eq!(n(l, "certain"), 0);
        assert_eq!(l["reasons"][0]["kept"], false);
        assert!(l["reasons"][0]["because"]
            .as_str()
            .unwrap()
            .contains("kmalloc-16"));
        // The gate trips on them.
        let (code, _) = gate(log.path());
        assert_eq!(code, Some(1), "{release}");
    }
}

/// Ends a synthetic capture with traffic of every kind after `ts`, so
/// that nothing before lies at the capture's edge.
fn trailer(s: &mut Synth, ts: u64) {
    s.cache_alloc(
        0,
        ts,
        9,
        "cache_alloc_x",
        0xffff_8880_7000_0000,
        "dentry",
        192,
    );
    s.cache_free(
        0,
        ts + 10,
        9,
        "cache_free_x",
        0xffff_8880_7000_0000,
        "dentry",
    );
    s.kmalloc(0, ts + 20, 9, "alloc_a", 0xffff_8880_7000_1000, 100, 128);
    s.kfree(0, ts + 30, 9, "free_a", 0xffff_8880_7000_1000);
}

/// Opens a synthetic capture with a traced dentry allocation and free, so
/// that nothing after lies at the capture's edge.
fn opener(s: &mut Synth) {
    let p = 0xffff_8880_6000_0000;
    s.cache_alloc(0, 1_000, 5, "cache_alloc_x", p, "dentry", 192);
    s.cache_free(0, 1_100, 5, "cache_free_x", p, "dentry");
}

/// A cache with bulk-like traffic: objects freed with no traced
/// allocation (once never seen, then again), objects returned while live.
fn bulk_cache(s: &mut Synth, cache: &str, base: u64, ts: u64) {
    for i in 0..4u64 {
        let p = base + i * 0x100;
        let t = ts + i * 1000;
        s.cache_free(1, t, 7, "free_u", p, cache); // never seen
        s.cache_free(1, t + 100, 7, "free_u", p, cache); // again, no alloc
        s.cache_alloc(1, t + 200, 7, "bulk_user", p, cache, 256);
        s.cache_alloc(1, t + 300, 7, "bulk_user", p, cache, 256); // live: free untraced
    }
}

#[test]
fn a_double_free_in_a_cache_with_bulk_traffic_is_still_reported() {
    let mut s = Synth::new("6.18.44");
    // Traffic in both caches first, so that nothing is at an edge.
    opener(&mut s);
    bulk_cache(&mut s, "maple_node", 0xffff_8880_5000_0000, 10_000);
    // One double free planted in each: the bulk cache's is explained,
    // the clean cache's is kept.
    let (y, z) = (0xffff_8880_5100_0000u64, 0xffff_8880_6100_0000u64);
    s.cache_alloc(0, 50_000_000, 5, "cache_alloc_x", y, "maple_node", 256);
    s.cache_free(0, 50_000_100, 5, "cache_free_x", y, "maple_node");
    s.cache_free(0, 50_000_200, 5, "cache_free_x", y, "maple_node");
    s.cache_alloc(0, 60_000_000, 5, "cache_alloc_x", z, "dentry", 192);
    s.cache_free(0, 60_000_100, 5, "cache_free_x", z, "dentry");
    s.cache_free(0, 60_000_200, 5, "cache_free_x", z, "dentry");
    // A kmalloc double free at a call site that also frees objects never
    // seen allocated (a kfree() names no size: evidence per call site).
    let k = 0xffff_8880_5200_0000u64;
    s.kmalloc(0, 70_000_000, 5, "alloc_b", k, 512, 512);
    s.kfree(0, 70_000_100, 5, "free_a", k);
    s.kfree(0, 70_000_200, 5, "free_a", k);
    s.kfree(0, 71_000_000, 5, "free_a", 0xffff_8880_5200_1000);
    // A maple_node object live at the end: not a leak, its free may be
    // untraced.
    s.cache_alloc(
        1,
        80_000_000,
        7,
        "bulk_user",
        0xffff_8880_5300_0000,
        "maple_node",
        256,
    );
    trailer(&mut s, 200_000_000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);

    let d = finding(&r, "double_free");
    // Every double free counted: the 4 of the bulk traffic, y, z, k.
    assert_eq!(n(d, "count"), 7, "{d}");
    assert_eq!(n(d, "certain"), 1, "{d}");
    assert_eq!(n(d, "explained"), 6, "{d}");
    assert_eq!(d["first_certain"]["ptr"], format!("0x{z:x}"));
    let reasons: Vec<(String, bool)> = d["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["cache"].as_str().unwrap().to_string(), x["kept"] == true))
        .collect();
    assert!(
        reasons.contains(&("maple_node".into(), false)),
        "{reasons:?}"
    );
    assert!(reasons.contains(&("dentry".into(), true)), "{reasons:?}");
    assert!(
        reasons.contains(&("kmalloc-512".into(), false)),
        "{reasons:?}"
    );
    // Live pointers returned: on four maple_node objects, set apart.
    let l = finding(&r, "live_pointer_returned");
    assert_eq!((n(l, "count"), n(l, "explained")), (4, 4));
    // What the cache shows, counted.
    let g = r["trace_completeness"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["cache"] == "maple_node")
        .expect("maple_node listed");
    assert_eq!(
        (
            n(g, "unseen_frees"),
            n(g, "freed_again"),
            n(g, "freed_again_twice"),
            n(g, "live_returned")
        ),
        (4, 5, 4, 4)
    );
    assert_eq!(g["live_returned_pointers"], "many");
    // The leak is counted apart.
    assert_eq!(n(&r["leaks"], "freed_untraced"), 5, "{}", r["leaks"]);
    // The text says both, and the gate trips on the kept one.
    let (code, text) = gate(log.path());
    assert_eq!(code, Some(1));
    assert!(text.contains("set apart maple_node"), "{text}");
    assert!(text.contains("kept dentry"), "{text}");
    assert!(text.contains("TRACE COMPLETENESS"), "{text}");
}

/// A named cache that untraced paths free (pointers returned while live,
/// on more than one object) is moved in bulk both ways (the NAPI skb
/// cache): its double frees are set apart. A kmalloc cache freed untraced
/// (kfree_rcu's kfree_bulk) is not allocated untraced: kept.
#[test]
fn a_double_free_in_a_cache_freed_in_bulk_is_set_apart() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    let cache = "skbuff_head_cache";
    for i in 0..3u64 {
        // Allocated traced, freed untraced (a bulk flush), handed out again.
        let p = 0xffff_8880_4000_0000 + i * 0x100;
        s.cache_alloc(1, 10_000 + i * 1000, 7, "bulk_user", p, cache, 256);
        s.cache_alloc(1, 10_500 + i * 1000, 7, "bulk_user", p, cache, 256);
        s.cache_free(1, 10_700 + i * 1000, 7, "cache_free_x", p, cache);
        // kmalloc objects returned while live too (kfree_bulk).
        let k = 0xffff_8880_4100_0000 + i * 0x400;
        s.kmalloc(1, 20_000 + i * 1000, 7, "alloc_b", k, 512, 512);
        s.kmalloc(1, 20_500 + i * 1000, 7, "alloc_b", k, 512, 512);
        s.kfree(1, 20_700 + i * 1000, 7, "free_a", k);
    }
    // One double free in each, at call sites that free traced objects.
    let (y, k) = (0xffff_8880_4200_0000u64, 0xffff_8880_4300_0000u64);
    s.cache_alloc(0, 50_000_000, 5, "bulk_user", y, cache, 256);
    s.cache_free(0, 50_000_100, 5, "cache_free_x", y, cache);
    s.cache_free(0, 50_000_200, 5, "cache_free_x", y, cache);
    s.kmalloc(0, 60_000_000, 5, "alloc_b", k, 512, 512);
    s.kfree(0, 60_000_100, 5, "free_a", k);
    s.kfree(0, 60_000_200, 5, "free_a", k);
    trailer(&mut s, 200_000_000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    let d = finding(&r, "double_free");
    assert_eq!((n(d, "count"), n(d, "certain")), (2, 1), "{d}");
    assert_eq!(d["first_certain"]["ptr"], format!("0x{k:x}"));
    let apart = d["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["cache"] == cache)
        .expect("a reason for the cache");
    assert_eq!(apart["kept"], false, "{apart}");
    assert!(
        apart["because"]
            .as_str()
            .unwrap()
            .contains("moved in bulk both ways"),
        "{apart}"
    );
}

/// A cache that loses frees to untraced paths (maple_node under slab
/// sheaves: pointers returned while live, on more than one object): an
/// object of it freed by `kmem_cache_free` naming another cache was freed
/// untraced and its memory reused by that cache, also untraced, as a real
/// capture of this kernel showed (maple_node -> lsm_inode_cache at
/// rcu_do_batch). Set apart; the same mismatch in a clean cache is kept.
#[test]
fn a_cache_mismatch_in_a_cache_freed_untraced_is_set_apart() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    for i in 0..3u64 {
        // Allocated traced, freed untraced, handed out again.
        let p = 0xffff_8880_3000_0000 + i * 0x100;
        s.cache_alloc(1, 10_000 + i * 1000, 7, "bulk_user", p, "maple_node", 256);
        s.cache_alloc(1, 10_500 + i * 1000, 7, "bulk_user", p, "maple_node", 256);
        s.cache_free(1, 10_700 + i * 1000, 7, "cache_free_x", p, "maple_node");
    }
    let (m, c) = (0xffff_8880_3100_0000u64, 0xffff_8880_3200_0000u64);
    s.cache_alloc(0, 50_000_000, 5, "bulk_user", m, "maple_node", 256);
    s.cache_free(0, 50_000_100, 5, "free_b", m, "lsm_inode_cache");
    s.cache_alloc(0, 60_000_000, 5, "cache_alloc_x", c, "dentry", 192);
    s.cache_free(0, 60_000_100, 5, "free_b", c, "lsm_inode_cache");
    trailer(&mut s, 200_000_000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    let f = finding(&r, "cache_mismatch");
    assert_eq!((n(f, "count"), n(f, "certain")), (2, 1), "{f}");
    assert_eq!(f["first_certain"]["ptr"], format!("0x{c:x}"));
    let apart = f["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["cache"] == "maple_node")
        .unwrap_or_else(|| panic!("a reason for maple_node: {f}"));
    assert_eq!(apart["kept"], false, "{apart}");
    assert!(
        apart["because"]
            .as_str()
            .unwrap()
            .contains("reused by another cache"),
        "{apart}"
    );
}

#[test]
fn textbook_double_frees_in_a_clean_cache_are_kept() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    // Two kfree() statements on one path: the second site never frees
    // anything else.
    let a = 0xffff_8880_4800_0000u64;
    s.kmalloc(0, 10_000, 5, "alloc_b", a, 64, 64);
    s.kfree(0, 10_100, 5, "free_a", a);
    s.kfree(0, 10_200, 5, "free_b", a);
    // A triple free of one object: not a path that allocates untraced.
    let b = 0xffff_8880_4900_0000u64;
    s.cache_alloc(0, 20_000_000, 5, "cache_alloc_x", b, "dentry", 192);
    s.cache_free(0, 20_000_100, 5, "cache_free_x", b, "dentry");
    s.cache_free(0, 20_000_200, 5, "cache_free_x", b, "dentry");
    s.cache_free(0, 20_000_300, 5, "cache_free_x", b, "dentry");
    trailer(&mut s, 50_000_000);
    let log = temp_log(&s.build());
    let d = finding(&report_json(log.path(), &[]), "double_free").clone();
    assert_eq!((n(&d, "count"), n(&d, "certain")), (3, 3), "{d}");
    assert_eq!(gate(log.path()).0, Some(1));
}

#[test]
fn a_call_site_that_only_frees_untraced_allocations_again_and_again_is_set_apart() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    // Two objects freed, then freed again at a call site that frees
    // nothing the trace saw allocated: the objects it frees come from
    // elsewhere (a task the kernel does not record, in this project's VM).
    for (i, a) in [0xffff_8880_4a00_0000u64, 0xffff_8880_4b00_0000]
        .into_iter()
        .enumerate()
    {
        let t = 10_000_000 * (i as u64 + 1);
        s.kmalloc(0, t, 5, "alloc_b", a, 2048, 2048);
        s.kfree(0, t + 100, 5, "free_a", a);
        s.kfree(1, t + 5_000_000, 6, "bulk_user", a);
    }
    trailer(&mut s, 50_000_000);
    let log = temp_log(&s.build());
    let d = finding(&report_json(log.path(), &[]), "double_free").clone();
    assert_eq!((n(&d, "count"), n(&d, "explained")), (2, 2), "{d}");
    assert!(d["reasons"][0]["because"]
        .as_str()
        .unwrap()
        .contains("frees only objects whose allocation the trace did not show"));
}

#[test]
fn a_lone_late_second_free_at_a_call_site_of_untraced_frees_is_set_apart() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    // Freed, then 5 ms later freed again where nothing traced is ever
    // freed: the pointer came back untraced (a vsock skb of a task the
    // kernel does not record, freed by its completion worker).
    let a = 0xffff_8880_4c00_0000u64;
    s.kmalloc(0, 10_000_000, 5, "alloc_b", a, 1024, 1024);
    s.kfree(0, 10_000_100, 5, "free_a", a);
    s.kfree(1, 15_000_000, 6, "leaky_alloc", a);
    trailer(&mut s, 50_000_000);
    let log = temp_log(&s.build());
    let d = finding(&report_json(log.path(), &[]), "double_free").clone();
    assert_eq!((n(&d, "count"), n(&d, "explained")), (1, 1), "{d}");
    assert!(d["reasons"][0]["because"]
        .as_str()
        .unwrap()
        .contains("more than 1 ms apart"));
}

#[test]
fn a_double_free_made_together_with_an_untraced_free_is_set_apart() {
    let mut s = Synth::new("6.18.44");
    opener(&mut s);
    // An skb-like pair: the head's double free comes with the free of a
    // structure never seen allocated, by the same task, 1 us apart.
    let (head, skb) = (0xffff_8880_4400_0000u64, 0xffff_8880_4500_0000u64);
    s.kmalloc(0, 10_000, 5, "alloc_b", head, 512, 512);
    s.kfree(0, 10_100, 5, "free_b", head);
    s.kfree(1, 5_000_000, 6, "free_b", head);
    s.cache_free(1, 5_001_000, 6, "free_u", skb, "skbuff_head_cache");
    // The same shape with a structure whose allocation the trace showed,
    // double freed itself: a real double free of both, kept.
    let (head2, skb2) = (0xffff_8880_4600_0000u64, 0xffff_8880_4700_0000u64);
    s.kmalloc(0, 20_000, 5, "alloc_b", head2, 512, 512);
    s.cache_alloc(0, 20_050, 5, "cache_alloc_x", skb2, "dentry", 192);
    s.kfree(0, 20_100, 5, "free_b", head2);
    s.cache_free(0, 20_150, 5, "cache_free_x", skb2, "dentry");
    s.kfree(1, 9_000_000, 6, "free_b", head2);
    s.cache_free(1, 9_001_000, 6, "cache_free_x", skb2, "dentry");
    trailer(&mut s, 50_000_000);
    let log = temp_log(&s.build());
    let d = finding(&report_json(log.path(), &[]), "double_free").clone();
    assert_eq!(
        (n(&d, "count"), n(&d, "explained"), n(&d, "certain")),
        (3, 1, 2),
        "{d}"
    );
    assert_eq!(d["first_certain"]["ptr"], format!("0x{head2:x}"));
}

#[test]
fn a_live_pointer_returned_is_kept_after_a_double_free_only() {
    let mut s = Synth::new("6.18.44");
    s.kfree(0, 500, 5, "free_a", 0xffff_8880_4000_f000); // frees traced from the start
                                                         // One object returned while live, alone in its cache: its free was
                                                         // missed (set apart).
    let p = 0xffff_8880_4000_0000u64;
    s.kmalloc(0, 1_000, 5, "alloc_a", p, 100, 128);
    s.kmalloc(0, 2_000, 5, "alloc_a", p, 100, 128);
    s.kfree(0, 3_000, 5, "free_a", p);
    // Freed twice, then handed out twice: the allocator's corruption.
    let q = 0xffff_8880_4100_0000u64;
    s.kmalloc(0, 4_000, 5, "odd_alloc", q, 40, 64);
    s.kfree(0, 5_000, 5, "free_b", q);
    s.kfree(0, 6_000, 5, "free_b", q);
    s.kmalloc(0, 7_000, 5, "odd_alloc", q, 40, 64);
    s.kmalloc(0, 8_000, 5, "odd_alloc", q, 40, 64);
    s.kfree(0, 9_000, 5, "free_b", q);
    trailer(&mut s, 10_000_000);
    let log = temp_log(&s.build());
    let l = finding(&report_json(log.path(), &[]), "live_pointer_returned").clone();
    assert_eq!(
        (n(&l, "count"), n(&l, "explained"), n(&l, "certain")),
        (2, 1, 1),
        "{l}"
    );
    assert_eq!(l["first_certain"]["ptr"], format!("0x{q:x}"));
    assert_eq!(gate(log.path()).0, Some(1));
}

#[test]
fn what_lacks_an_event_kind_not_yet_or_no_longer_traced_is_at_the_edge() {
    let mut s = Synth::new("6.18.44");
    // Allocations traced before any free: the object allocated then may
    // have been freed before frees were on.
    let p = 0xffff_8880_3000_0000u64;
    s.cache_alloc(0, 1_000, 5, "cache_alloc_x", p, "dentry", 192);
    s.cache_free(0, 2_000, 5, "cache_free_x", 0xffff_8880_3000_f000, "dentry");
    s.cache_alloc(0, 3_000, 5, "cache_alloc_x", p, "dentry", 192);
    s.cache_free(0, 4_000, 5, "cache_free_x", p, "dentry");
    // A double free after the last traced allocation of its kind, in a
    // later epoch: allocations may have been off by then.
    let q = 0xffff_8880_3100_0000u64;
    s.cache_alloc(0, 5_000, 5, "cache_alloc_x", q, "dentry", 192);
    s.cache_free(0, 6_000, 5, "cache_free_x", q, "dentry");
    s.cache_free(0, 90_000_000, 5, "cache_free_x", q, "dentry");
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &[]);
    for kind in ["live_pointer_returned", "double_free"] {
        let f = finding(&r, kind);
        assert_eq!(
            (n(f, "count"), n(f, "at_capture_edges"), n(f, "certain")),
            (1, 1, 0),
            "{kind}: {f}"
        );
    }
    // The same double free with an allocation after it (epochs later) is
    // certain: the edge is judged at the end of the stream.
    let mut s2 = Synth::new("6.18.44");
    s2.cache_alloc(0, 5_000, 5, "cache_alloc_x", q, "dentry", 192);
    s2.cache_free(0, 6_000, 5, "cache_free_x", q, "dentry");
    s2.cache_free(0, 90_000_000, 5, "cache_free_x", q, "dentry");
    trailer(&mut s2, 200_000_000);
    let log2 = temp_log(&s2.build());
    let d = finding(&report_json(log2.path(), &[]), "double_free").clone();
    assert_eq!((n(&d, "at_capture_edges"), n(&d, "certain")), (0, 1), "{d}");
}

#[test]
fn a_pid_filtered_recording_explains_double_frees() {
    let mut s = Synth::new("6.18.44");
    s.pid_filter("5");
    let q = 0xffff_8880_2100_0000u64;
    s.kmalloc(0, 1_000, 5, "alloc_b", q, 64, 64);
    s.kfree(0, 2_000, 5, "free_b", q);
    s.kfree(0, 3_000, 5, "free_b", q);
    trailer(&mut s, 10_000_000);
    let log = temp_log(&s.build());
    let r = report_json(log.path(), &["--all-tasks"]);
    let d = finding(&r, "double_free");
    assert_eq!((n(d, "count"), n(d, "explained")), (1, 1), "{d}");
    assert!(d["reasons"][0]["because"]
        .as_str()
        .unwrap()
        .contains("pid filter"));
    assert_eq!(r["trace_completeness"]["pid_filtered"], true);
}

#[test]
fn bundled_and_foreign_captures_pass_the_gate() {
    let data = common::workspace().join("tests/data");
    let mut logs: Vec<(String, tempfile::NamedTempFile)> = Vec::new();
    for name in ["sample-x86_64.kmt", "boot-6.1-x86_64.kmt"] {
        let bytes = std::fs::read(data.join(name)).unwrap();
        logs.push((name.into(), temp_log(&bytes)));
    }
    if let Some(shared) = common::shared_data_or_skip("bundled_and_foreign_captures_pass_the_gate")
    {
        for (arch, big, long) in [("armhf", false, 4), ("s390x", true, 8)] {
            let raw = shared.join(arch).join("raw");
            logs.push((arch.into(), temp_log(&log_from_raw_dir(&raw, big, long))));
        }
    }
    for (name, log) in &logs {
        let r = report_json(log.path(), &[]);
        let (code, text) = gate(log.path());
        assert_eq!(code, Some(0), "{name}:\n{text}");
        // The raw counts stay: each of these has double frees or live
        // pointers returned.
        let raw: u64 = ["double_free", "live_pointer_returned"]
            .iter()
            .map(|k| n(finding(&r, k), "count"))
            .sum();
        assert!(raw > 0, "{name}");
    }
}

/// Records `cmd` with kmemtraced into a temporary log.
fn record(dir: &Path, name: &str, cmd: &[&str]) -> std::path::PathBuf {
    let log = dir.join(name);
    let out = Command::new(common::bin("kmemtraced"))
        .arg("-q")
        .arg("-o")
        .arg(&log)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run kmemtraced");
    assert!(
        out.status.success(),
        "kmemtraced {cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    log
}

#[test]
fn fresh_captures_of_this_kernel_pass_the_gate() {
    let test = "fresh_captures_of_this_kernel_pass_the_gate";
    if common::tracefs_or_skip(test).is_none() {
        return;
    }
    if Command::new("stress-ng").arg("--version").output().is_err() {
        common::skip(
            test,
            common::Missing::Tool,
            "stress-ng is not installed (apt-get install stress-ng)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let loads: [(&str, &[&str]); 2] = [
        (
            "demo.kmt",
            &[
                "stress-ng",
                "--quiet",
                "--malloc",
                "2",
                "--vm",
                "1",
                "--vm-bytes",
                "64M",
                "--dentry",
                "1",
                "--timeout",
                "3s",
            ],
        ),
        (
            "forkpipe.kmt",
            &[
                "stress-ng",
                "--quiet",
                "--fork",
                "2",
                "--pipe",
                "2",
                "--malloc",
                "1",
                "--timeout",
                "4s",
            ],
        ),
    ];
    for (name, cmd) in loads {
        let log = record(dir.path(), name, cmd);
        let r = report_json(&log, &[]);
        let (code, text) = gate(&log);
        if code != Some(0) {
            // A real capture that fails the gate is worth keeping: the
            // finding is either the kernel's or ours.
            let kept = std::env::temp_dir().join(format!("kmt-gate-failed-{name}"));
            let _ = std::fs::copy(&log, &kept);
            panic!("{name} (kept as {}):\n{text}", kept.display());
        }
        // The recorder lists its threads, and the report leaves them out.
        assert!(
            r["filters"]["recorder_tasks"].as_array().unwrap().len() >= 2,
            "{}",
            r["filters"]
        );
        for f in r["misuse"].as_array().unwrap() {
            eprintln!(
                "{name}: {} count {} uncertain {} edges {} explained {} certain {}",
                f["kind"],
                f["count"],
                f["uncertain"],
                f["at_capture_edges"],
                f["explained"],
                f["certain"]
            );
        }
    }
}
