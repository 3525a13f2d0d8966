//! The page-allocator section: exact counts on a synthetic log, and the
//! foreign captures' figures equal to an independent count from the
//! foreign kernel's own text of the same events.

use crate::raw::{gunzip, log_from_raw_dir};
use crate::synthetic::Synth;
use crate::{common, report_json, temp_log};
use serde_json::Value;
use std::collections::BTreeMap;

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn page_requests_are_told_apart_exactly() {
    let mut s = Synth::new("6.18.44");
    // 5 order-0 blocks allocated and freed, 2 order-2 allocated only, 3
    // frees of blocks allocated before the capture.
    for i in 0..5u64 {
        s.page_alloc(0, 1_000 + i * 10, 0x1000 + i, 0);
        s.page_free(1, 2_000 + i * 10, 0x1000 + i, 0);
    }
    for i in 0..2u64 {
        s.page_alloc(1, 3_000 + i * 10, 0x2000 + i * 4, 2);
    }
    for i in 0..3u64 {
        s.page_free(0, 4_000 + i * 10, 0x3000 + i, 0);
    }
    // A slab pair, so that the capture has a slab span.
    s.kmalloc(0, 5_000, 1, "alloc_a", 0xffff_8880_1000_0000, 8, 8);
    s.kfree(0, 5_100, 1, "free_a", 0xffff_8880_1000_0000);
    let log = temp_log(&s.build());
    let p = &report_json(log.path(), &[])["pages"];
    let pair = |k: &str| (n(&p[k]["requests"]), n(&p[k]["bytes"]));
    assert_eq!(pair("allocations"), (7, 5 * 4096 + 2 * 16384));
    assert_eq!(pair("frees"), (8, 8 * 4096));
    assert_eq!(pair("alloc_freed"), (5, 5 * 4096));
    assert_eq!(pair("alloc_only"), (2, 2 * 16384));
    assert_eq!(pair("free_only"), (3, 3 * 4096));
    // Order x migratetype: the synthetic allocations are migratetype 0.
    let rows: Vec<(String, u64)> = p["by_order_migratetype"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["order"].as_str().unwrap().to_string(),
                n(&r["by_migratetype"][0]),
            )
        })
        .collect();
    assert_eq!(rows, [("0".to_string(), 5), ("2".to_string(), 2)]);
    // No /proc/pagetypeinfo in the log: names by version, said so.
    assert_eq!(p["migratetypes"][1], "Movable");
    assert!(p["migratetype_names_fallback"]
        .as_str()
        .unwrap()
        .contains("6.18"));
}

/// What the kernel's text says of the page events.
#[derive(Default, Debug, PartialEq, Eq)]
pub struct TextPages {
    /// Successful allocations by (order, migratetype).
    pub allocs: BTreeMap<(u64, u64), u64>,
    pub frees: u64,
    /// By CPU: (refilled pages, drained pages, refill runs, drain runs).
    pub per_cpu: BTreeMap<u32, (u64, u64, u64, u64)>,
}

fn field(line: &str, key: &str) -> Option<u64> {
    let v = line.split_whitespace().find_map(|w| w.strip_prefix(key))?;
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

pub fn text_pages(text: &str) -> TextPages {
    let mut t = TextPages::default();
    // The last list event kind of each CPU's own sequence (1 refill, 2
    // drain, 0 anything else): a run is consecutive events of one kind.
    let mut last: BTreeMap<u32, u8> = BTreeMap::new();
    for line in text.lines() {
        let Some(cpu) = line
            .split('[')
            .nth(1)
            .and_then(|r| r.split(']').next())
            .and_then(|c| c.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let mut kind = 0u8;
        if line.contains(" mm_page_alloc: ") {
            // A failed allocation has no page: pfn is absent or -1.
            let pfn = field(line, "pfn=");
            if pfn.is_some_and(|p| p != u64::from(u32::MAX) && p != u64::MAX) {
                let k = (
                    field(line, "order=").unwrap(),
                    field(line, "migratetype=").unwrap(),
                );
                *t.allocs.entry(k).or_insert(0) += 1;
            }
        } else if line.contains(" mm_page_free: ") {
            t.frees += 1;
        } else if line.contains(" mm_page_alloc_zone_locked: ") {
            if field(line, "percpu_refill=") == Some(1) {
                t.per_cpu.entry(cpu).or_default().0 += 1;
                kind = 1;
            }
        } else if line.contains(" mm_page_pcpu_drain: ") {
            t.per_cpu.entry(cpu).or_default().1 += 1;
            kind = 2;
        }
        let prev = last.insert(cpu, kind).unwrap_or(0);
        if kind != 0 && kind != prev {
            let e = t.per_cpu.entry(cpu).or_default();
            if kind == 1 {
                e.2 += 1;
            } else {
                e.3 += 1;
            }
        }
    }
    t
}

pub fn report_pages(r: &Value) -> TextPages {
    let p = &r["pages"];
    let mut t = TextPages {
        frees: n(&p["frees"]["requests"]),
        ..Default::default()
    };
    for row in p["by_order_migratetype"].as_array().unwrap() {
        let order: u64 = row["order"]
            .as_str()
            .unwrap()
            .trim_end_matches('+')
            .parse()
            .unwrap();
        for (mt, c) in row["by_migratetype"].as_array().unwrap().iter().enumerate() {
            if n(c) > 0 {
                t.allocs.insert((order, mt as u64), n(c));
            }
        }
    }
    for c in p["per_cpu_lists"].as_array().unwrap() {
        t.per_cpu.insert(
            n(&c["cpu"]) as u32,
            (
                n(&c["refilled"]),
                n(&c["drained"]),
                n(&c["refill_lock_acquisitions"]),
                n(&c["drain_lock_acquisitions"]),
            ),
        );
    }
    t
}

#[test]
fn foreign_page_figures_equal_the_kernels_text() {
    let Some(data) = common::shared_data_or_skip("foreign_page_figures_equal_the_kernels_text")
    else {
        return;
    };
    for (arch, big, long) in [("armhf", false, 4u8), ("s390x", true, 8)] {
        let dir = data.join(arch);
        let log = temp_log(&log_from_raw_dir(&dir.join("raw"), big, long));
        let r = report_json(log.path(), &[]);
        let want = text_pages(&gunzip(&dir.join("trace.txt.gz")));
        assert!(
            want.frees > 1000 && want.allocs.len() > 2,
            "{arch}: {want:?}"
        );
        assert!(!want.per_cpu.is_empty(), "{arch}: no per-CPU list events");
        assert_eq!(report_pages(&r), want, "{arch}");
        // alloc+freed + alloc-only = allocations; alloc+freed + free-only
        // = frees.
        let p = &r["pages"];
        let q = |k: &str| n(&p[k]["requests"]);
        assert_eq!(
            q("alloc_freed") + q("alloc_only"),
            q("allocations"),
            "{arch}"
        );
        assert_eq!(q("alloc_freed") + q("free_only"), q("frees"), "{arch}");
    }
}
