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
    // Per CPU, as perf's summary: the frees on a CPU are of blocks
    // allocated in the capture (on any CPU) or not, and the CPUs' frees
    // add up to all of them.
    let on = |cpu: &str| {
        let p = report_json(log.path(), &["--cpu", cpu])["pages"].clone();
        let q = |k: &str| n(&p[k]["requests"]);
        let keys = [
            "allocations",
            "frees",
            "alloc_freed",
            "alloc_only",
            "free_only",
        ];
        keys.map(q)
    };
    assert_eq!(on("0"), [5, 3, 0, 0, 3]);
    assert_eq!(on("1"), [2, 5, 5, 2, 0]);
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
    /// Frees of a frame freed before, no allocation covering it since;
    /// allocations of a block still live.
    pub freed_twice: u64,
    pub allocated_while_live: u64,
}

/// Frame by frame, with no notion of buddy blocks: every frame of a freed
/// block is marked free, every frame of an allocated one unmarked.
#[derive(Default)]
struct Frames {
    live: std::collections::HashSet<u64>,
    free: std::collections::HashSet<u64>,
}

impl Frames {
    fn alloc(&mut self, t: &mut TextPages, pfn: u64, order: u64) {
        t.allocated_while_live += u64::from(!self.live.insert(pfn));
        for f in pfn..pfn + (1 << order) {
            self.free.remove(&f);
        }
    }
    fn free(&mut self, t: &mut TextPages, pfn: u64, order: u64) {
        if !self.live.remove(&pfn) && self.free.contains(&pfn) {
            t.freed_twice += 1;
        }
        self.free.extend(pfn..pfn + (1 << order));
    }
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
    let mut frames = Frames::default();
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
                frames.alloc(&mut t, pfn.unwrap(), k.0);
            }
        } else if line.contains(" mm_page_free: ") {
            t.frees += 1;
            let (pfn, order) = (field(line, "pfn=").unwrap(), field(line, "order=").unwrap());
            frames.free(&mut t, pfn, order);
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
        freed_twice: n(&p["misuse"]["freed_twice"]["count"]),
        allocated_while_live: n(&p["misuse"]["allocated_while_live"]["count"]),
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

/// Two nodes' /proc/pagetypeinfo (pageblock order 9).
const PAGETYPEINFO_2_NODES: &str = "Page block order: 9
Pages per block:  512

Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate 
Node 0, zone   Normal          183         2475          222            0            0 
Node 1, zone   Normal          180         2470          220            0            0 
";

fn advice_kinds(p: &Value) -> Vec<String> {
    p["advice"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Fragmenting fallbacks (order < pageblock order 9) for `seconds` whole
/// seconds, 1,500 in each.
fn fragmenting(seconds: u64) -> Synth {
    let mut s = Synth::new("6.18.44");
    s.other_meta(
        kmemtrace_import::pagetypes::PAGETYPEINFO_META,
        PAGETYPEINFO_2_NODES,
    );
    s.other_meta(kmemtrace_import::pagetypes::MIN_FREE_KBYTES_META, "67584\n");
    for sec in 0..seconds {
        for i in 0..1_500u64 {
            let ts = 1_000_000_000 * (sec + 1) + i * 1_000;
            s.extfrag((i % 2) as u32, ts, 0x10_0000 + i, 0, 3);
        }
    }
    s
}

#[test]
fn sustained_fragmentation_gets_the_documents_min_free_kbytes_step() {
    let log = temp_log(&fragmenting(4).build());
    let p = &report_json(log.path(), &[])["pages"];
    assert_eq!(n(&p["fallbacks_fragmenting"]), 6_000);
    assert_eq!(
        p["fallbacks_fragmenting_per_second"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(advice_kinds(p), ["fragmentation_sustained"]);
    let m = &p["advice"][0]["min_free_kbytes"];
    // 3 x pageblock (512 pages of 4 KB) x 2 nodes.
    assert_eq!(n(&m["pageblock_kb"]), 2048);
    assert_eq!(
        (n(&m["nodes"]), m["nodes_from"].as_str()),
        (2, Some("pagetypeinfo"))
    );
    assert_eq!(n(&m["step"]), 3 * 2048 * 2);
    assert_eq!(n(&m["current"]), 67_584);
    assert_eq!(n(&m["suggested"]), 67_584 + 12_288);
    let out = crate::report(&[log.path().to_str().unwrap(), "--page"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("vm.min_free_kbytes=79872"), "{text}");

    // Two seconds of it are not sustained.
    let log = temp_log(&fragmenting(2).build());
    let p = &report_json(log.path(), &[])["pages"];
    assert!(advice_kinds(p).is_empty(), "{p}");
}

#[test]
fn per_cpu_lists_filled_on_one_cpu_and_drained_on_another_are_said_so() {
    let mut s = Synth::new("6.18.44");
    // CPU 0 refills 2,000 pages in runs of 50; CPU 1 drains them. 3,000
    // order-0 allocations on each CPU, freed where allocated.
    let mut ts = 1_000_000u64;
    for run in 0..40u64 {
        for i in 0..50 {
            ts += 100;
            s.pcp_refill(0, ts, 0x20_0000 + run * 50 + i);
        }
        ts += 100;
        s.page_alloc(0, ts, 0x30_0000 + run, 0);
    }
    for i in 0..2_000u64 {
        ts += 100;
        s.pcp_drain(1, ts, 0x20_0000 + i);
    }
    for i in 0..3_000u64 {
        ts += 100;
        s.page_alloc((i % 2) as u32, ts, 0x40_0000 + i, 0);
        s.page_free((i % 2) as u32, ts + 50, 0x40_0000 + i, 0);
    }
    let log = temp_log(&s.build());
    let p = &report_json(log.path(), &[])["pages"];
    // Bigger lists would not keep pages that CPU 1 frees and CPU 0 needs.
    assert_eq!(advice_kinds(p), ["per_cpu_imbalance", "cross_cpu_frees"]);
    assert!(p["advice"][0]["observed"]
        .as_str()
        .unwrap()
        .starts_with("CPU 0 refilled 2,000 pages and drained 0; CPU 1 drained 2,000"));
}

/// CPU 0 allocates and frees `cycles` times 50 order-0 pages; each time its
/// list overflows (50 drained) and runs empty again (50 refilled in one
/// run) when `drains`, else it only refills (a page cache growing).
fn list_cycles(cycles: u64, drains: bool) -> Vec<u8> {
    let mut s = Synth::new("6.18.44");
    let mut ts = 1_000_000u64;
    for c in 0..cycles {
        let frames = 0x20_0000 + c * 50;
        for i in 0..50 {
            ts += 100;
            s.pcp_refill(0, ts, frames + i);
        }
        for i in 0..50 {
            ts += 100;
            s.page_alloc(0, ts, frames + i, 0);
        }
        if drains {
            for i in 0..50 {
                ts += 100;
                s.page_free(0, ts, frames + i, 0);
            }
            for i in 0..50 {
                ts += 100;
                s.pcp_drain(0, ts, frames + i);
            }
        }
    }
    s.build()
}

#[test]
fn per_cpu_lists_are_called_small_only_when_pages_cycle_through_zone_lock() {
    let log = temp_log(&list_cycles(40, true));
    let p = &report_json(log.path(), &[])["pages"];
    assert_eq!(advice_kinds(p), ["per_cpu_lists_small"], "{p}");
    let observed = p["advice"][0]["observed"].as_str().unwrap();
    assert!(
        observed.starts_with("100% of 2,000 order-0 allocations were refilled")
            && observed.contains("50.0 pages per acquisition")
            && observed.contains("as many pages in the same second for 100% of the allocations"),
        "{observed}"
    );
    // The same refills with nothing freed: a bigger list would not have
    // saved one.
    let log = temp_log(&list_cycles(40, false));
    let p = &report_json(log.path(), &[])["pages"];
    assert_eq!(p["per_cpu_lists"][0]["refilled"], 2_000, "{p}");
    assert!(advice_kinds(p).is_empty(), "{p}");
    // Grown early, given back more than a second later (a process that
    // faults its memory in and exits): a bigger list would not have
    // saved a refill.
    let mut s = Synth::new("6.18.44");
    for i in 0..2_000u64 {
        s.pcp_refill(0, 1_000_000 + 100 * i, 0x20_0000 + i);
        s.page_alloc(0, 1_000_050 + 100 * i, 0x20_0000 + i, 0);
    }
    for i in 0..2_000u64 {
        s.page_free(0, 3_000_000_000 + 100 * i, 0x20_0000 + i, 0);
        s.pcp_drain(0, 3_000_000_050 + 100 * i, 0x20_0000 + i);
    }
    let log = temp_log(&s.build());
    let p = &report_json(log.path(), &[])["pages"];
    assert_eq!(p["per_cpu_lists"][0]["drained"], 2_000, "{p}");
    assert!(advice_kinds(p).is_empty(), "{p}");
    // Too few pages to say anything.
    let log = temp_log(&list_cycles(19, true));
    let p = &report_json(log.path(), &[])["pages"];
    assert!(advice_kinds(p).is_empty(), "{p}");
}

#[test]
fn frames_freed_twice_are_uncertain_where_events_were_lost_between() {
    let mut s = Synth::new("6.18.44");
    // Frame 0x500 freed twice with nothing lost; frames 0x600.. freed
    // twice around a loss on CPU 1; an order-2 block freed, one frame
    // inside allocated and freed, another frame freed with no allocation.
    s.page_free(0, 1_000_000, 0x500, 0);
    s.page_free(0, 2_000_000, 0x500, 0);
    s.page_free(0, 10_000_000, 0x600, 0);
    s.kmalloc(1, 11_000_000, 1, "alloc_a", 0xffff_8880_1000_0000, 8, 8);
    s.lost(1, 5);
    s.kmalloc(1, 12_000_000, 1, "alloc_a", 0xffff_8880_1000_1000, 8, 8);
    s.page_free(0, 13_000_000, 0x600, 0);
    s.page_free(0, 20_000_000, 0x800, 2);
    s.page_alloc(0, 21_000_000, 0x801, 0);
    s.page_free(0, 22_000_000, 0x801, 0);
    s.page_free(0, 23_000_000, 0x803, 0);
    // A block allocated while the trace had it live.
    s.page_alloc(1, 30_000_000, 0x900, 1);
    s.page_alloc(1, 31_000_000, 0x900, 1);
    let log = temp_log(&s.build());
    let m = &report_json(log.path(), &[])["pages"]["misuse"];
    let twice = &m["freed_twice"];
    assert_eq!((n(&twice["count"]), n(&twice["uncertain"])), (3, 1), "{m}");
    assert_eq!(twice["severity"], "info");
    assert_eq!(twice["first"]["pfn"], "0x500");
    let live = &m["allocated_while_live"];
    assert_eq!((n(&live["count"]), n(&live["uncertain"])), (1, 0));
    // 0x600's and 0x800's first frees, and 0x500's: never seen before.
    assert_eq!(n(&m["freed_unseen"]["requests"]), 3);
}
