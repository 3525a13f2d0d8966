//! Page call sites from the kernel stacks recorded with `mm_page_alloc`:
//! synthetic logs laid out with each kernel's own `kernel_stack` and
//! `mm_page_alloc` formats (x86_64 6.18; armhf and s390x 6.1 from the
//! foreign captures: 4-byte longs, big-endian), with stacks that nest
//! (an interrupt's allocation inside a task's) and stacks the recorder's
//! block cuts separate from their allocation. Every allocation gets its
//! stack (but the last one, whose stack the capture's stop cut off: it is
//! counted), and every stack its allocation (but the first one, whose
//! allocation came as tracing started: counted too), the call sites'
//! counts are exact, whatever the thread count.
//! The recorder's own allocations, which the trigger takes no stack with
//! outside interrupts, wait for none.

use crate::{common, report_json, temp_log};
use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_import::stacks::{page_stacks_text, PageStackSample, PAGE_STACKS_META};
use kmemtrace_import::tasks::RECORDER_TIDS_META;
use kmemtrace_kernel::{BigEndian, Endian, EventFormat, LittleEndian, RunTimeEndian};
use kmemtrace_testkit::synth::{encode_event, LogBuilder, Value};
use serde_json::Value as Json;
use std::collections::BTreeMap;

const PAGE: &str = include_str!("data/x86_64-6.18/mm_page_alloc.format");
const PAGE_FREE: &str = include_str!("data/x86_64-6.18/mm_page_free.format");
const STACK: &str = include_str!("data/x86_64-6.18/kernel_stack.format");

/// The synthetic kernel's functions, 0x100 bytes each.
const FUNCS: [&str; 9] = [
    "trace_event_raw_event_mm_page_alloc",
    "__alloc_pages_noprof",
    "alloc_pages_mpol",
    "pgd_alloc",
    "copy_process",
    "do_anonymous_page",
    "handle_mm_fault",
    "net_rx_refill",
    "__do_softirq",
];

/// One kernel's layout.
struct Kernel {
    order: RunTimeEndian,
    long: u8,
    text: u64,
    page: String,
    page_free: String,
    stack: String,
}

fn at(k: &Kernel, func: &str) -> u64 {
    let i = FUNCS.iter().position(|f| *f == func).unwrap() as u64;
    k.text + 0x100 * i + 0x10
}

/// The stacks, innermost first, and the call site each should give.
fn stacks() -> Vec<(Vec<&'static str>, &'static str)> {
    vec![
        (
            vec![
                "trace_event_raw_event_mm_page_alloc",
                "__alloc_pages_noprof",
                "alloc_pages_mpol",
                "pgd_alloc",
                "copy_process",
            ],
            "pgd_alloc+0x10",
        ),
        (
            vec![
                "trace_event_raw_event_mm_page_alloc",
                "__alloc_pages_noprof",
                "do_anonymous_page",
                "handle_mm_fault",
            ],
            "do_anonymous_page+0x10",
        ),
        (
            vec![
                "trace_event_raw_event_mm_page_alloc",
                "__alloc_pages_noprof",
                "net_rx_refill",
                "__do_softirq",
            ],
            "net_rx_refill+0x10",
        ),
    ]
}

const SOFTIRQ: u8 = 0x10;

struct Writer<'a, E: Endian> {
    e: E,
    k: &'a Kernel,
    b: LogBuilder,
    page: EventFormat,
    page_free: EventFormat,
    stack: EventFormat,
    /// The task the next records are of.
    pid: i32,
}

/// The recorder's thread: the trigger leaves it out, as kmemtraced's does.
const RECORDER: i32 = 4242;

impl<E: Endian> Writer<'_, E> {
    fn flags(&self, mut p: Vec<u8>, f: &EventFormat, flags: u8) -> Vec<u8> {
        let off = f.field("common_flags").unwrap().offset;
        p[off] = flags;
        p
    }

    fn alloc(&mut self, cpu: u32, ts: u64, pfn: u64, flags: u8) {
        let fields = [
            ("pfn", Value::Uint(pfn)),
            ("order", Value::Uint(0)),
            ("gfp_flags", Value::Uint(0xcc0)),
        ];
        let p = encode_event(self.e, &self.page, self.pid, &fields).unwrap();
        let p = self.flags(p, &self.page, flags);
        self.b.event(cpu, ts, p);
    }

    fn free(&mut self, cpu: u32, ts: u64, pfn: u64) {
        let fields = [("pfn", Value::Uint(pfn)), ("order", Value::Uint(0))];
        let p = encode_event(self.e, &self.page_free, self.pid, &fields).unwrap();
        self.b.event(cpu, ts, p);
    }

    /// A `kernel_stack` record sized to its frames, as the kernel writes it.
    fn stack(&mut self, cpu: u32, ts: u64, which: usize, flags: u8) {
        let frames: Vec<u64> = stacks()[which].0.iter().map(|f| at(self.k, f)).collect();
        let n = frames.len() as i64;
        let p = encode_event(self.e, &self.stack, self.pid, &[("size", Value::Int(n))]).unwrap();
        let mut p = self.flags(p, &self.stack, flags);
        p.truncate(self.stack.field("caller").unwrap().offset);
        for a in frames {
            self.e.write_uint(&mut p, a, usize::from(self.k.long));
        }
        self.b.event(cpu, ts, p);
    }
}

/// A writer of a log with `k`'s formats and kallsyms and the page-stack
/// trigger `trigger`, one sub-buffer per block (block cuts fall between
/// many an allocation and its stack).
fn writer<'k, E: Endian>(e: E, k: &'k Kernel, release: &str, trigger: &str) -> Writer<'k, E> {
    let mut b = LogBuilder::new(k.order, k.long, 4096);
    b.arch.release = Some(release.into());
    b.arch.page_size = Some(4096);
    b.subbufs_per_block = 1;
    let page = b.format("kmem", &k.page).unwrap();
    let page_free = b.format("kmem", &k.page_free).unwrap();
    let stack = b.format("ftrace", &k.stack).unwrap();
    let mut ks = String::new();
    let width = usize::from(k.long) * 2;
    for (i, f) in FUNCS.iter().enumerate() {
        ks.push_str(&format!("{:0width$x} T {f}\n", k.text + 0x100 * i as u64));
    }
    ks.push_str(&format!(
        "{:0width$x} T _etext\n",
        k.text + 0x100 * FUNCS.len() as u64
    ));
    b.meta(Meta::new(MetaKind::Kallsyms, ks));
    let mut m = Meta::new(MetaKind::Other, page_stacks_text(trigger));
    m.name = PAGE_STACKS_META.into();
    b.meta(m);
    Writer {
        e,
        k,
        b,
        page,
        page_free,
        stack,
        pid: 100,
    }
}

/// The log, and the allocations (all, live) planted per call site.
fn build<E: Endian>(e: E, k: &Kernel) -> (Vec<u8>, BTreeMap<&'static str, (u64, u64)>) {
    let trigger = format!("stacktrace if (common_pid != {RECORDER}) || common_flags & 0x58");
    let mut w = writer(e, k, "6.1.0", &trigger);
    let mut m = Meta::new(MetaKind::Other, RECORDER.to_string());
    m.name = RECORDER_TIDS_META.into();
    w.b.meta(m);
    let mut planted: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let sites = stacks();
    let mut pfn = 0x10_0000u64;
    for cpu in 0..2u32 {
        let mut ts = 1_000_000 + u64::from(cpu);
        if cpu == 0 {
            // Tracing came on between an allocation and its stack.
            w.stack(cpu, ts, 0, 0);
        }
        for i in 0..700u64 {
            ts += 1_000;
            pfn += 1;
            let which = (i % 2) as usize;
            let live = i % 5 == 0;
            w.alloc(cpu, ts, pfn, 0);
            if i % 7 == 3 {
                // A softirq allocates between the task's allocation and
                // its stack: the two nest.
                pfn += 1;
                w.alloc(cpu, ts + 100, pfn, SOFTIRQ);
                w.stack(cpu, ts + 200, 2, SOFTIRQ);
                w.free(cpu, ts + 250, pfn);
                planted.entry(sites[2].1).or_default().0 += 1;
                pfn -= 1;
            }
            w.stack(cpu, ts + 300, which, 0);
            let e = planted.entry(sites[which].1).or_default();
            e.0 += 1;
            if live {
                e.1 += 1;
            } else {
                w.free(cpu, ts + 500, pfn);
            }
            pfn += 1;
        }
        // The recorder allocates last on each CPU: no stack (its own,
        // left out of the report), but in a softirq (counted, stacked).
        w.pid = RECORDER;
        for j in 0..3 {
            pfn += 1;
            w.alloc(cpu, ts + 600 + j, pfn, 0);
            if j == 1 {
                pfn += 1;
                w.alloc(cpu, ts + 700, pfn, SOFTIRQ);
                w.stack(cpu, ts + 710, 2, SOFTIRQ);
                let e = planted.entry(sites[2].1).or_default();
                e.0 += 1;
                e.1 += 1;
            }
        }
        w.pid = 100;
        if cpu == 1 {
            // The capture stops between the last allocation and its stack.
            pfn += 1;
            w.alloc(cpu, ts + 1_000, pfn, 0);
            let e = planted.entry("-").or_default();
            e.0 += 1;
            e.1 += 1;
        }
    }
    (w.b.build().unwrap(), planted)
}

fn check(what: &str, log: &[u8], planted: &BTreeMap<&'static str, (u64, u64)>) {
    let f = temp_log(log);
    let one = report_json(f.path(), &["-j", "1"]);
    let p = &one["pages"];
    let all = p["allocations"]["requests"].as_u64().unwrap();
    assert_eq!(all, planted.values().map(|v| v.0).sum::<u64>(), "{what}");
    assert_eq!(p["stacks"]["allocations_with_stack"], all - 1, "{what}");
    assert_eq!(p["stacks"]["cut_at_end"], 1, "{what}");
    assert_eq!(p["stacks"]["cut_at_start"], 1, "{what}");
    let records = p["stacks"]["records"].as_u64().unwrap();
    assert_eq!(
        records,
        p["stacks"]["matched"].as_u64().unwrap() + 1,
        "{what}"
    );
    assert_eq!(p["stacks"]["distinct"], 3, "{what}");
    assert_eq!(p["stacks"]["recorded"], true, "{what}");
    let got: BTreeMap<String, (u64, u64)> = p["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r: &Json| {
            (
                r["callsite"].as_str().unwrap().to_string(),
                (
                    r["hits"].as_u64().unwrap(),
                    r["live_blocks"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let want: BTreeMap<String, (u64, u64)> =
        planted.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_eq!(got, want, "{what}");
    let fns: Vec<&str> = p["allocator_functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(fns, ["__alloc_pages_noprof", "alloc_pages_mpol"], "{what}");
    for j in ["2", "3", "5"] {
        assert_eq!(
            one,
            report_json(f.path(), &["-j", j]),
            "{what}: -j 1 and -j {j} differ"
        );
    }
}

/// A log of this kernel's layout (x86_64 6.18) with page stacks, and the
/// call sites planted in it.
pub(crate) fn x86_64_log() -> (Vec<u8>, BTreeMap<&'static str, (u64, u64)>) {
    build(LittleEndian, &x86_64())
}

/// This kernel's layout.
fn x86_64() -> Kernel {
    Kernel {
        order: RunTimeEndian::Little,
        long: 8,
        text: 0xffff_ffff_8100_0000,
        page: PAGE.into(),
        page_free: PAGE_FREE.into(),
        stack: STACK.into(),
    }
}

#[test]
fn call_sites_from_stacks_on_this_kernels_layout() {
    let (log, planted) = x86_64_log();
    check("x86_64", &log, &planted);
}

#[test]
fn call_sites_from_stacks_on_foreign_layouts() {
    let Some(d) = common::shared_data_or_skip("page_stacks (foreign layouts)") else {
        return;
    };
    let read = |arch: &str, ev: &str| {
        std::fs::read_to_string(d.join(arch).join("raw/events").join(ev).join("format")).unwrap()
    };
    for (arch, order, long, text) in [
        ("armhf", RunTimeEndian::Little, 4u8, 0xc010_0000u64),
        ("s390x", RunTimeEndian::Big, 8, 0x0010_0000),
    ] {
        let k = Kernel {
            order,
            long,
            text,
            page: read(arch, "kmem/mm_page_alloc"),
            page_free: read(arch, "kmem/mm_page_free"),
            stack: read(arch, "ftrace/kernel_stack"),
        };
        let (log, planted) = match order {
            RunTimeEndian::Little => build(LittleEndian, &k),
            RunTimeEndian::Big => build(BigEndian, &k),
        };
        check(arch, &log, &planted);
    }
}

/// Stacks for a sample of page frames (`kmemtraced --page-stacks 16`, here
/// with bits 4-7 as the mask so that a short run of frames holds both
/// kinds): the allocations outside the sample wait for no stack (none is
/// cut, none is paired with another's), each sampled one counts as the
/// 16 it stands for, and the sample is said in the JSON and the text.
#[test]
fn a_sample_of_page_stacks_is_scaled_and_said() {
    let k = x86_64();
    let trigger = "stacktrace if ((common_pid != 4242) || common_flags & 0x58) && !(pfn & 0xf0)";
    let mut w = writer(LittleEndian, &k, "6.18.0", trigger);
    // 2,048 consecutive frames on each CPU: 128 of them in the sample,
    // their stacks alternating between two call sites.
    let (mut sampled, mut outside) = ([0u64; 2], 0u64);
    // Sampled allocations per call site and region (frames that differ
    // below bit 4, which the sample takes or leaves together).
    let mut regions: [BTreeMap<u64, u64>; 2] = Default::default();
    for cpu in 0..2u32 {
        let mut ts = 1_000_000 + u64::from(cpu);
        for i in 0..2048u64 {
            let pfn = 0x40_0000 * u64::from(cpu + 1) + i;
            ts += 1_000;
            w.alloc(cpu, ts, pfn, 0);
            if pfn & 0xf0 == 0 {
                let which = (i / 7 % 2) as usize;
                w.stack(cpu, ts + 100, which, 0);
                sampled[which] += 1;
                *regions[which].entry(pfn >> 4).or_default() += 1;
            } else {
                outside += 1;
            }
            if i % 3 == 0 {
                w.free(cpu, ts + 500, pfn);
            }
        }
    }
    let f = temp_log(&w.b.build().unwrap());
    let one = report_json(f.path(), &["-j", "1"]);
    let p = &one["pages"];
    assert_eq!(p["allocations"]["requests"], 4096);
    let s = &p["stacks"];
    assert_eq!(
        (s["cut_at_end"].as_u64(), s["cut_at_start"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(s["matched"], s["records"]);
    assert_eq!(s["allocations_with_stack"], sampled[0] + sampled[1]);
    assert_eq!(s["sample"]["one_in"], 16);
    assert_eq!(s["sample"]["pfn_mask"], "0xf0");
    assert_eq!(s["sample"]["not_sampled"], outside);
    assert_eq!(
        s["sample"]["weight_by_order"],
        serde_json::json!([16, 16, 16, 16, 16, 8, 4, 2, 1])
    );
    let rows: BTreeMap<String, (u64, u64, u64)> = p["callsites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (
                r["callsite"].as_str().unwrap().to_string(),
                (n("hits"), n("sampled"), n("margin")),
            )
        })
        .collect();
    let sites = stacks();
    let want: BTreeMap<String, (u64, u64, u64)> = (0..2)
        .map(|i| {
            let margin = PageStackSample::margin(16, regions[i].values().copied());
            (
                sites[i].1.to_string(),
                (16 * sampled[i], sampled[i], margin),
            )
        })
        .collect();
    assert_eq!(rows, want);
    // The estimate of all allocations is the allocations.
    assert_eq!(rows.values().map(|r| r.0).sum::<u64>(), 4096);
    for j in ["2", "5"] {
        assert_eq!(
            one,
            report_json(f.path(), &["-j", j]),
            "-j 1 and -j {j} differ"
        );
    }
    let o = crate::report(&["--page", "--caller", f.path().to_str().unwrap()]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("stacks for 1 in 16 page frames, those whose number has bits 0xf0 clear")
            && t.contains(
                "16x at orders 0-4, 8x at order 5, 4x at order 6, 2x at order 7, once from order 8"
            )
            && t.contains(&format!(
                "{} allocations outside the sample",
                kmemtrace_kernel::human::thousands(outside)
            )),
        "{t}"
    );
}
