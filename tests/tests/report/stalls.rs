//! Allocation stalls end to end: a synthetic log of this kernel's layout
//! (x86_64 6.18 formats, stacks with each wait's first event as kmemtraced
//! asks for them) in which tasks stall in direct and memcg reclaim, one
//! block a sub-buffer so that waits and the allocations that end them fall
//! in different blocks, tasks move between CPUs inside an episode, an OOM
//! kill ends one task's waits and the capture stops inside another's. The
//! report's episodes, stall time, call sites and OOM kill are the planted
//! ones, whatever the thread count.

use crate::{report_json, temp_log};
use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_import::stacks::{page_stacks_text, stacked_event_line, PAGE_STACKS_META};
use kmemtrace_kernel::{stalls, Endian, EventFormat, LittleEndian, RunTimeEndian};
use kmemtrace_testkit::subbuf::Missed;
use kmemtrace_testkit::synth::{encode_event, LogBuilder, Rng, SynthRecord, Value};
use std::collections::BTreeMap;

const DATA: &str = "report/data/x86_64-6.18";

fn format(name: &str) -> String {
    let p = crate::common::workspace()
        .join("tests/tests")
        .join(DATA)
        .join(format!("{name}.format"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const TEXT: u64 = 0xffff_ffff_8100_0000;

/// The synthetic kernel's functions, 0x100 bytes each.
const FUNCS: [&str; 18] = [
    "trace_event_raw_event_mm_vmscan_direct_reclaim_begin_template",
    "__traceiter_mm_vmscan_memcg_reclaim_begin",
    "try_to_free_pages",
    "__alloc_pages_slowpath.constprop.0",
    "__alloc_pages_noprof",
    "alloc_pages_mpol",
    "do_anonymous_page",
    "handle_mm_fault",
    "try_to_free_mem_cgroup_pages",
    "try_charge_memcg",
    "charge_memcg",
    "__mem_cgroup_charge",
    "filemap_add_folio",
    "page_cache_ra_unbounded",
    "trace_event_raw_event_mm_page_alloc",
    "kmalloc_reserve",
    "memory_reclaim",
    "kernfs_fop_write_iter",
];

fn at(func: &str) -> u64 {
    TEXT + 0x100 * FUNCS.iter().position(|f| *f == func).unwrap() as u64 + 0x10
}

const DIRECT_STACK: [&str; 7] = [
    "trace_event_raw_event_mm_vmscan_direct_reclaim_begin_template",
    "try_to_free_pages",
    "__alloc_pages_slowpath.constprop.0",
    "__alloc_pages_noprof",
    "alloc_pages_mpol",
    "do_anonymous_page",
    "handle_mm_fault",
];
const MEMCG_STACK: [&str; 8] = [
    "trace_event_raw_event_mm_vmscan_direct_reclaim_begin_template",
    "__traceiter_mm_vmscan_memcg_reclaim_begin",
    "try_to_free_mem_cgroup_pages",
    "try_charge_memcg",
    "charge_memcg",
    "__mem_cgroup_charge",
    "filemap_add_folio",
    "page_cache_ra_unbounded",
];
/// A write to `memory.reclaim`: proactive, not an allocation's wait.
const PROACTIVE_STACK: [&str; 5] = [
    "trace_event_raw_event_mm_vmscan_direct_reclaim_begin_template",
    "__traceiter_mm_vmscan_memcg_reclaim_begin",
    "try_to_free_mem_cgroup_pages",
    "memory_reclaim",
    "kernfs_fop_write_iter",
];
const PAGE_STACK: [&str; 3] = [
    "trace_event_raw_event_mm_page_alloc",
    "__alloc_pages_noprof",
    "do_anonymous_page",
];

struct Formats {
    page: EventFormat,
    kmalloc: EventFormat,
    stack: EventFormat,
    direct: (EventFormat, EventFormat),
    memcg: (EventFormat, EventFormat),
    victim: EventFormat,
}

/// What the report should find.
#[derive(Default, Debug)]
pub(crate) struct Planted {
    pub(crate) episodes: u64,
    pub(crate) stall_ns: u64,
    /// call site -> (episodes, stall ns)
    pub(crate) sites: BTreeMap<&'static str, (u64, u64)>,
    pub(crate) open_at_end: u64,
}

/// Events in time order, each `(cpu, ts, payload)`; the builder takes
/// them per CPU.
struct Timeline {
    e: LittleEndian,
    f: Formats,
    /// `None`: the CPU lost events here.
    events: Vec<(u32, u64, Option<Vec<u8>>)>,
}

impl Timeline {
    fn push(&mut self, cpu: u32, ts: u64, p: Vec<u8>) {
        self.events.push((cpu, ts, Some(p)));
    }

    fn stack(&mut self, cpu: u32, ts: u64, pid: i32, frames: &[&str]) {
        let p = encode_event(
            self.e,
            &self.f.stack,
            pid,
            &[("size", Value::Int(frames.len() as i64))],
        )
        .unwrap();
        let mut p = p;
        p.truncate(self.f.stack.field("caller").unwrap().offset);
        for fr in frames {
            self.e.write_uint(&mut p, at(fr), 8);
        }
        self.push(cpu, ts, p);
    }

    fn begin(&mut self, cpu: u32, ts: u64, pid: i32, memcg: bool) {
        let f = if memcg {
            &self.f.memcg.0
        } else {
            &self.f.direct.0
        };
        let p = encode_event(
            self.e,
            f,
            pid,
            &[
                ("order", Value::Int(0)),
                ("gfp_flags", Value::Uint(0x140cca)),
            ],
        )
        .unwrap();
        self.push(cpu, ts, p);
        let frames: &[&str] = if memcg { &MEMCG_STACK } else { &DIRECT_STACK };
        self.stack(cpu, ts + 1, pid, frames);
    }

    fn end(&mut self, cpu: u32, ts: u64, pid: i32, memcg: bool) {
        let f = if memcg {
            &self.f.memcg.1
        } else {
            &self.f.direct.1
        };
        let p = encode_event(self.e, f, pid, &[("nr_reclaimed", Value::Uint(32))]).unwrap();
        self.push(cpu, ts, p);
    }

    fn page_alloc(&mut self, cpu: u32, ts: u64, pid: i32, pfn: u64) {
        let fields = [
            ("pfn", Value::Uint(pfn)),
            ("order", Value::Uint(0)),
            ("gfp_flags", Value::Uint(0x140cca)),
        ];
        let p = encode_event(self.e, &self.f.page, pid, &fields).unwrap();
        self.push(cpu, ts, p);
        self.stack(cpu, ts + 1, pid, &PAGE_STACK);
    }

    fn kmalloc(&mut self, cpu: u32, ts: u64, pid: i32, ptr: u64) {
        let fields = [
            ("call_site", Value::Uint(at("kmalloc_reserve"))),
            ("ptr", Value::Uint(ptr)),
            ("bytes_req", Value::Uint(64)),
            ("bytes_alloc", Value::Uint(64)),
            ("gfp_flags", Value::Uint(0xcc0)),
            ("node", Value::Int(-1)),
        ];
        let p = encode_event(self.e, &self.f.kmalloc, pid, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    fn victim(&mut self, cpu: u32, ts: u64, pid: i32, victim: i32) {
        let fields = [
            ("pid", Value::Int(i64::from(victim))),
            ("comm", Value::Str("hog")),
            ("total_vm", Value::Uint(100_000)),
            ("anon_rss", Value::Uint(60_000)),
            ("file_rss", Value::Uint(1_000)),
            ("shmem_rss", Value::Uint(24)),
        ];
        let p = encode_event(self.e, &self.f.victim, pid, &fields).unwrap();
        self.push(cpu, ts, p);
    }
}

/// Builds the log: per round, each of six tasks on two CPUs stalls (direct
/// or memcg reclaim, one or two rounds of the charge loop, sometimes moving
/// CPU between its reclaim's end and its allocation), among the other
/// tasks' slab allocations.
pub(crate) fn build() -> (Vec<u8>, Planted) {
    build_with(1, false)
}

/// [`build`], each reclaim `slower` times as long.
fn build_slower(slower: u64) -> (Vec<u8>, Planted) {
    build_with(slower, false)
}

/// [`build`], each reclaim `slower` times as long; with `lossy`, the CPU
/// of one episode (round 10's first) loses events inside its reclaim.
fn build_with(slower: u64, lossy: bool) -> (Vec<u8>, Planted) {
    let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
    b.arch.release = Some("6.18.0".into());
    b.arch.page_size = Some(4096);
    b.subbufs_per_block = 1;
    let f = Formats {
        page: b.format("kmem", &format("mm_page_alloc")).unwrap(),
        kmalloc: b.format("kmem", &format("kmalloc")).unwrap(),
        stack: b.format("ftrace", &format("kernel_stack")).unwrap(),
        direct: (
            b.format("vmscan", &format("mm_vmscan_direct_reclaim_begin"))
                .unwrap(),
            b.format("vmscan", &format("mm_vmscan_direct_reclaim_end"))
                .unwrap(),
        ),
        memcg: (
            b.format("vmscan", &format("mm_vmscan_memcg_reclaim_begin"))
                .unwrap(),
            b.format("vmscan", &format("mm_vmscan_memcg_reclaim_end"))
                .unwrap(),
        ),
        victim: b.format("oom", &format("mark_victim")).unwrap(),
    };
    let mut ks = String::new();
    for (i, name) in FUNCS.iter().enumerate() {
        ks.push_str(&format!("{:016x} T {name}\n", TEXT + 0x100 * i as u64));
    }
    ks.push_str(&format!(
        "{:016x} T _etext\n",
        TEXT + 0x100 * FUNCS.len() as u64
    ));
    b.meta(Meta::new(MetaKind::Kallsyms, ks));
    let mut text = page_stacks_text("stacktrace");
    for t in [stalls::DIRECT_RECLAIM_BEGIN, stalls::MEMCG_RECLAIM_BEGIN] {
        text.push_str(&stacked_event_line(t, "stacktrace"));
    }
    let mut m = Meta::new(MetaKind::Other, text);
    m.name = PAGE_STACKS_META.into();
    b.meta(m);

    let mut t = Timeline {
        e: LittleEndian,
        f,
        events: Vec::new(),
    };
    let mut planted = Planted::default();
    // A task writes to its cgroup's memory.reclaim: it waits in memcg
    // reclaim, and allocates afterwards, but no allocation waited.
    {
        let p = encode_event(
            t.e,
            &t.f.memcg.0,
            300,
            &[("order", Value::Int(0)), ("gfp_flags", Value::Uint(0xcc0))],
        )
        .unwrap();
        t.push(0, 999_000_000, p);
        t.stack(0, 999_000_001, 300, &PROACTIVE_STACK);
        t.end(0, 999_500_000, 300, true);
        t.page_alloc(0, 999_600_000, 300, 0x9_0000);
    }
    let mut rng = Rng(7);
    let mut pfn = 0x10_0000;
    let mut ts = 1_000_000_000u64;
    let filler = |t: &mut Timeline, ts: &mut u64, rng: &mut Rng, n: u64| {
        for _ in 0..n {
            *ts += 50;
            let cpu = rng.below(2) as u32;
            // Task 900+cpu: never stalls.
            t.kmalloc(
                cpu,
                *ts,
                900 + cpu as i32,
                0xffff_8880_0000_0000 + (*ts % 4096) * 64,
            );
        }
    };
    for round in 0..40u64 {
        for task in 0..6i32 {
            let pid = 200 + task;
            let memcg = task % 2 == 1;
            let cpu = (task % 2) as u32;
            let loops = if memcg && round % 3 == 0 { 2 } else { 1 };
            let mut stall = 0;
            for _ in 0..loops {
                ts += 10;
                t.begin(cpu, ts, pid, memcg);
                if lossy && round == 10 && task == 0 {
                    t.events.push((cpu, ts + 2, None));
                }
                let b0 = ts;
                let n = rng.below(60);
                filler(&mut t, &mut ts, &mut rng, n);
                // Its own allocation inside the wait (a shrinker's): no end.
                ts += 10;
                t.kmalloc(cpu, ts, pid, 0xffff_8880_1000_0000 + ts);
                ts += (1_000 + rng.below(5_000)) * slower;
                let moved = round % 4 == 3;
                let end_cpu = if moved { 1 - cpu } else { cpu };
                t.end(end_cpu, ts, pid, memcg);
                stall += ts - b0;
            }
            let last = round == 39 && task == 5;
            if last {
                // The capture stops before its allocation.
                planted.open_at_end += 1;
            } else {
                if round == 20 && task == 3 {
                    ts += 10;
                    t.victim(cpu, ts, pid, 4242);
                }
                let n = rng.below(40);
                filler(&mut t, &mut ts, &mut rng, n);
                ts += 10;
                let alloc_cpu = if round % 4 == 3 { 1 - cpu } else { cpu };
                pfn += 1;
                t.page_alloc(alloc_cpu, ts, pid, pfn);
            }
            planted.episodes += 1;
            planted.stall_ns += stall;
            let site = if memcg {
                "filemap_add_folio+0x10"
            } else {
                "do_anonymous_page+0x10"
            };
            let s = planted.sites.entry(site).or_default();
            s.0 += 1;
            s.1 += stall;
        }
    }
    for (cpu, ts, p) in t.events {
        match p {
            Some(p) => b.event(cpu, ts, p),
            None => b.record(cpu, SynthRecord::Lost(Missed::Count(5))),
        };
    }
    (b.build().unwrap(), planted)
}

/// Every episode of the log at `path`, by start, as the exporters' own
/// analysis makes them (`Stalls::all`, not in the JSON document).
pub(crate) fn episodes_of(
    path: &std::path::Path,
) -> Vec<kmemtrace_analysis::model::stalls::Episode> {
    let mut log = kmemtrace_import::log::Log::open(path).unwrap();
    let syms = kmemtrace_analysis::Symbols::of_log(&mut log);
    // Every episode, as the exports ask for them.
    let opts = kmemtrace_analysis::Options {
        episodes: true,
        ..kmemtrace_analysis::Options::as_recorded(&log)
    };
    kmemtrace_analysis::analyse(&log, &syms, opts, &mut |_| {})
        .report
        .sections
        .stalls
        .all
}

#[test]
fn episodes_call_sites_and_the_oom_kill_are_the_planted_ones() {
    let (log, planted) = build();
    let f = temp_log(&log);
    let one = report_json(f.path(), &["-j", "1"]);
    let st = &one["stalls"];
    assert_eq!(st["episodes"], planted.episodes, "{st:#}");
    assert_eq!(st["stall_ns"], planted.stall_ns);
    assert_eq!(st["unpaired"]["open_at_end"], planted.open_at_end);
    assert_eq!(st["unpaired"]["ends_without_begin"], 0);
    assert_eq!(st["unpaired"]["begins_without_end"], 0);
    assert_eq!(st["uncertain_episodes"], 0);
    assert_eq!(st["proactive"]["reclaims"], 1);
    assert_eq!(st["proactive"]["ns"], 500_000);
    let mut sites: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in st["sites"].as_array().unwrap() {
        let e = sites
            .entry(r["callsite"].as_str().unwrap().to_string())
            .or_default();
        e.0 += r["episodes"].as_u64().unwrap();
        e.1 += r["total_ns"].as_u64().unwrap();
    }
    let want: BTreeMap<String, (u64, u64)> = planted
        .sites
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    assert_eq!(sites, want);
    let kinds: BTreeMap<&str, u64> = st["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["kind"].as_str().unwrap(), k["ns"].as_u64().unwrap()))
        .collect();
    assert_eq!(kinds.values().sum::<u64>(), planted.stall_ns);
    // Every episode but the open one ended with its task's allocation.
    let ended: Vec<&str> = st["longest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ended_by"].as_str().unwrap())
        .collect();
    assert!(ended
        .iter()
        .all(|e| *e == "page allocation" || *e == "capture end"));
    let kills = st["oom_kills"].as_array().unwrap();
    assert_eq!(kills.len(), 1);
    let k = &kills[0];
    assert_eq!(k["victim_pid"], 4242);
    assert_eq!(k["victim_comm"], "hog");
    assert_eq!(k["victim_rss_kb"], 61_024);
    assert_eq!(k["killer_pid"], 203);
    assert_eq!(k["callsite"], "filemap_add_folio+0x10");
    for j in ["2", "3"] {
        assert_eq!(
            one["stalls"],
            report_json(f.path(), &["-j", j])["stalls"],
            "-j 1 and -j {j} differ"
        );
    }
}

#[test]
fn the_text_report_shows_stalls_by_default_and_only_where_the_log_has_them() {
    let (log, _) = build();
    let f = temp_log(&log);
    let text = crate::common::stdout_ok(
        std::process::Command::new(crate::common::bin("kmemtrace-report"))
            .arg(f.path())
            .env("NO_COLOR", "1"),
    );
    assert!(text.contains("ALLOCATION STALLS: 240 episodes"), "{text}");
    assert!(text.contains("filemap_add_folio+0x10"), "{text}");
    let sample = crate::common::workspace().join("tests/data/sample-x86_64.kmt");
    let plain = report_json(&sample, &[]);
    assert!(plain.get("stalls").is_none());
}

/// A memory cgroup limited to `limit` bytes: cgroup v1's
/// `memory.limit_in_bytes`, or v2's `memory.max`; removed on drop (its
/// tasks must have exited).
struct MemCgroup(std::path::PathBuf);

impl MemCgroup {
    fn new(name: &str, limit: u64) -> Option<MemCgroup> {
        let v1 = std::path::Path::new("/sys/fs/cgroup/memory");
        if v1.join("memory.limit_in_bytes").is_file() {
            let d = v1.join(name);
            std::fs::create_dir(&d).ok()?;
            std::fs::write(d.join("memory.limit_in_bytes"), limit.to_string()).ok()?;
            return Some(MemCgroup(d));
        }
        for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let root = std::path::Path::new(root);
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers"));
            if !controllers.is_ok_and(|c| c.split_whitespace().any(|w| w == "memory")) {
                continue;
            }
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
            let d = root.join(name);
            std::fs::create_dir(&d).ok()?;
            if std::fs::write(d.join("memory.max"), limit.to_string()).is_err() {
                let _ = std::fs::remove_dir(&d);
                continue;
            }
            return Some(MemCgroup(d));
        }
        None
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A tracefs instance of this test's own, removed on drop.
struct Instance(std::path::PathBuf);

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("tracing_on"), "0");
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Episodes from the kernel's own text, by the rule the report states: a
/// task's reclaim phases (outer begin to end, in process context) up to
/// its next allocation (page or slab) outside a phase. Returns (episodes,
/// phases, stall ns, episodes whose allocation came on another CPU than
/// their last reclaim's end).
fn episodes_of_text(text: &str) -> (u64, u64, u64, u64) {
    struct Task {
        depth: u32,
        begin: u64,
        open: bool,
        end_cpu: u32,
    }
    let mut tasks: BTreeMap<i32, Task> = BTreeMap::new();
    let (mut episodes, mut phases, mut ns, mut moved) = (0, 0, 0, 0);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        // `comm-pid [cpu] flags ts: event: ...`
        let Some((head, rest)) = line.split_once("]") else {
            continue;
        };
        let Some((who, cpu)) = head.rsplit_once('[') else {
            continue;
        };
        let pid: i32 = match who.trim().rsplit_once('-').map(|(_, p)| p.parse()) {
            Some(Ok(p)) => p,
            _ => continue,
        };
        let cpu: u32 = cpu.trim().parse().unwrap();
        let mut f = rest.split_whitespace();
        let flags = f.next().unwrap_or("");
        let ts = f.next().unwrap_or("").trim_end_matches(':');
        let event = f.next().unwrap_or("").trim_end_matches(':');
        // Interrupts' events are not the task's.
        if flags.len() > 2 && matches!(&flags[2..3], "h" | "s" | "H" | "z" | "Z") {
            continue;
        }
        let (s, us) = ts.split_once('.').unwrap();
        let t = s.parse::<u64>().unwrap() * 1_000_000_000 + us.parse::<u64>().unwrap() * 1_000;
        let task = tasks.entry(pid).or_insert(Task {
            depth: 0,
            begin: 0,
            open: false,
            end_cpu: 0,
        });
        match event {
            e if e.ends_with("reclaim_begin") => {
                if task.depth == 0 {
                    task.begin = t;
                }
                task.depth += 1;
                task.open = true;
            }
            e if e.ends_with("reclaim_end") && task.depth > 0 => {
                task.depth -= 1;
                phases += 1;
                if task.depth == 0 {
                    ns += t - task.begin;
                }
                task.end_cpu = cpu;
            }
            "mm_page_alloc" | "kmalloc" | "kmem_cache_alloc" if task.open && task.depth == 0 => {
                episodes += 1;
                task.open = false;
                if cpu != task.end_cpu {
                    moved += 1;
                }
            }
            _ => {}
        }
    }
    episodes += tasks.values().filter(|t| t.open).count() as u64;
    (episodes, phases, ns, moved)
}

#[test]
fn a_task_over_its_memory_cgroups_limit_stalls_as_the_kernels_text_says() {
    use crate::common;
    let test = "stalls: memcg reclaim on this kernel";
    let Some(tfs) = common::tracefs_or_skip(test) else {
        return;
    };
    let name = format!("kmt-stalls-{}", std::process::id());
    let Some(cg) = MemCgroup::new(&name, 32 << 20) else {
        common::skip(
            test,
            common::Missing::Machine,
            "no memory cgroup controller to limit a task",
        );
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = dir.path().join("data");
    // Written past the page cache, so that reading it allocates.
    let st = std::process::Command::new("dd")
        .args([
            "if=/dev/urandom",
            "bs=1M",
            "count=96",
            "conv=fdatasync",
            "status=none",
        ])
        .arg(format!("of={}", file.display()))
        .status()
        .unwrap();
    assert!(st.success());
    // GNU dd's way to drop a file's pages from the cache.
    let st = std::process::Command::new("dd")
        .args(["iflag=nocache", "count=0", "status=none"])
        .arg(format!("if={}", file.display()))
        .status()
        .unwrap();
    assert!(st.success());
    let inst = Instance(tfs.join("instances").join(&name));
    std::fs::create_dir(&inst.0).unwrap();
    std::fs::write(inst.0.join("buffer_size_kb"), "32768").unwrap();
    for e in [
        "vmscan/mm_vmscan_memcg_reclaim_begin",
        "vmscan/mm_vmscan_memcg_reclaim_end",
        "vmscan/mm_vmscan_direct_reclaim_begin",
        "vmscan/mm_vmscan_direct_reclaim_end",
        "kmem/mm_page_alloc",
        "kmem/kmalloc",
        "kmem/kmem_cache_alloc",
    ] {
        std::fs::write(inst.0.join("events").join(e).join("enable"), "1").unwrap();
    }
    let log = dir.path().join("stalls.kmt");
    let script = format!(
        "echo $$ > {}/cgroup.procs && dd if={f} of=/dev/null bs=64k status=none && dd if={f} of=/dev/null bs=64k status=none",
        cg.0.display(),
        f = file.display()
    );
    std::fs::write(inst.0.join("tracing_on"), "1").unwrap();
    common::stdout_ok(
        std::process::Command::new(common::bin("kmemtraced"))
            .args(["-q", "-o"])
            .arg(&log)
            .args(["--", "sh", "-c", &script]),
    );
    std::fs::write(inst.0.join("tracing_on"), "0").unwrap();
    let text = std::fs::read_to_string(inst.0.join("trace")).unwrap();
    drop(inst);
    drop(cg);
    let header = text
        .lines()
        .find(|l| l.contains("entries-in-buffer"))
        .unwrap();
    let (episodes, phases, ns, moved) = episodes_of_text(&text);
    assert!(
        phases > 0,
        "no reclaim: the cgroup's limit did not bite\n{header}"
    );
    let st = report_json(&log, &["-l", "0"])["stalls"].clone();
    let kinds = st["kinds"].as_array().unwrap();
    let report_phases: u64 = kinds.iter().map(|k| k["phases"].as_u64().unwrap()).sum();
    assert_eq!(report_phases, phases, "{header}");
    // The text has microseconds: each phase within one of the log's.
    let got_ns = st["stall_ns"].as_u64().unwrap();
    assert!(
        got_ns.abs_diff(ns) <= 1_000 * phases,
        "stall time: report {got_ns} ns, text {ns} ns over {phases} phases"
    );
    // An allocation on another CPU than the reclaim's end may come as a
    // later mark (the module's rule): at most those episodes join.
    let got = st["episodes"].as_u64().unwrap();
    eprintln!(
        "{test}: report {got} episodes, {got_ns} ns; text {episodes} episodes, {phases} phases, {ns} ns, {moved} moved CPU"
    );
    assert!(
        got <= episodes && got + moved >= episodes,
        "episodes: report {got}, text {episodes} ({moved} moved CPU)"
    );
    for r in st["sites"].as_array().unwrap() {
        assert!(
            r["callsite"].is_string(),
            "a group without a call site: {r}"
        );
    }
}

#[test]
fn every_key_of_the_section_is_in_json_md() {
    let (log, _) = build();
    let f = temp_log(&log);
    let st = report_json(f.path(), &[])["stalls"].clone();
    let doc = std::fs::read_to_string(crate::common::workspace().join("kmemtrace-report/JSON.md"))
        .unwrap();
    fn keys(v: &serde_json::Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    out.insert(k.clone());
                    keys(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut all = std::collections::BTreeSet::new();
    keys(&st, &mut all);
    assert!(all.len() > 40, "{all:?}");
    for k in all {
        assert!(doc.contains(&format!("`{k}`")), "JSON.md lacks `{k}`");
    }
}

#[test]
fn the_diff_compares_and_gates_stalls_per_call_site_and_order() {
    let (base, _) = build();
    let (slow, _) = build_slower(4);
    let (base, slow) = (temp_log(&base), temp_log(&slow));
    let mut rules = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    std::io::Write::write_all(
        &mut rules,
        br#"
[[gate]]
metric = "stalls"
max_increase_pct = 0
[[gate]]
metric = "stall_p99_ns"
stall_site = "do_anonymous_page order 0"
max_increase_pct = 50
[[gate]]
metric = "oom_kills"
max = 1
"#,
    )
    .unwrap();
    let rules_arg = rules.path().to_str().unwrap();
    let out = crate::diff::diff(
        &[base.path(), slow.path()],
        &["--json", "--gate", rules_arg],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let gates = d["comparisons"][0]["gates"].as_array().unwrap();
    let passed: Vec<bool> = gates
        .iter()
        .map(|g| g["passed"].as_bool().unwrap())
        .collect();
    assert_eq!(passed, [true, false, true], "{gates:#?}");
    let changes = d["comparisons"][0]["changes"].as_array().unwrap();
    let stall_ns = changes
        .iter()
        .find(|c| c["scope"] == "total" && c["metric"] == "stall_ns")
        .expect("a stall time change");
    let (b, n) = (
        stall_ns["base"].as_f64().unwrap(),
        stall_ns["new"].as_f64().unwrap(),
    );
    assert!(n > 3.0 * b, "{stall_ns}");
    // The same capture against itself: every gate holds.
    let out = crate::diff::diff(&[base.path(), base.path()], &["--gate", rules_arg]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn an_episode_across_lost_events_is_uncertain_and_the_others_are_not() {
    let (log, planted) = build_with(1, true);
    let f = temp_log(&log);
    let r = report_json(f.path(), &[]);
    assert!(
        !r["capture"]["lost_windows"].as_array().unwrap().is_empty(),
        "{:#}",
        r["capture"]
    );
    let st = &r["stalls"];
    assert_eq!(st["episodes"], planted.episodes);
    assert_eq!(st["uncertain_episodes"], 1, "{st:#}");
}

#[test]
fn the_task_filters_select_stalls_as_they_select_allocations() {
    let (log, planted) = build();
    let f = temp_log(&log);
    let st = report_json(f.path(), &["--pid", "201"])["stalls"].clone();
    // Task 201 stalls once a round.
    assert_eq!(st["episodes"], 40, "{st:#}");
    let tasks = st["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["pid"], 201);
    let all = report_json(f.path(), &[])["stalls"].clone();
    let per_task: u64 = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["episodes"].as_u64().unwrap())
        .sum();
    assert_eq!(per_task, planted.episodes);
    let ns: u64 = all["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["stall_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(ns, planted.stall_ns);
}

/// The committed capture of a Debian 6.1 guest under global memory
/// pressure (`tests/data/make-stall-capture.sh`) against the guest's own
/// text of the same stall events, recorded by a second instance: direct
/// reclaim's phases and time, the compaction attempts, kswapd's time awake
/// and the OOM kill, each as the text says.
#[test]
fn a_guests_global_reclaim_compaction_and_oom_kill_as_its_own_text_says() {
    use flate2::read::GzDecoder;
    use std::io::Read;
    let data = crate::common::workspace().join("tests/data");
    let mut text = String::new();
    GzDecoder::new(std::fs::File::open(data.join("stalls-6.1-x86_64.trace.txt.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let r = report_json(&data.join("stalls-6.1-x86_64.kmt"), &[]);
    let recorder: Vec<i64> = r["filters"]["recorder_tasks"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_i64()).collect())
        .unwrap_or_default();
    assert!(!recorder.is_empty(), "the log lists the recorder's threads");
    // (pid, ts ns, event, rest of the line) of the text's process-context events.
    let events: Vec<(i64, u64, &str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (head, rest) = l.split_once(']')?;
            let pid = head
                .rsplit_once('[')?
                .0
                .trim()
                .rsplit_once('-')?
                .1
                .parse()
                .ok()?;
            let mut f = rest.split_whitespace();
            let flags = f.next()?;
            if flags.len() > 2 && matches!(&flags[2..3], "h" | "s" | "H" | "z" | "Z") {
                return None;
            }
            let (s, us) = f.next()?.trim_end_matches(':').split_once('.')?;
            let ts = s.parse::<u64>().ok()? * 1_000_000_000 + us.parse::<u64>().ok()? * 1_000;
            let ev = f.next()?.trim_end_matches(':');
            Some((pid, ts, ev, rest))
        })
        .filter(|e| !recorder.contains(&e.0))
        .collect();
    let mut begun: BTreeMap<i64, u64> = BTreeMap::new();
    let (mut phases, mut ns) = (0u64, 0u64);
    for &(pid, ts, ev, _) in &events {
        match ev {
            "mm_vmscan_direct_reclaim_begin" => {
                begun.insert(pid, ts);
            }
            "mm_vmscan_direct_reclaim_end" => {
                if let Some(b) = begun.remove(&pid) {
                    phases += 1;
                    ns += ts - b;
                }
            }
            _ => {}
        }
    }
    let st = &r["stalls"];
    let kind = |k: &str| {
        st["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["kind"] == k)
            .cloned()
            .unwrap_or_else(|| panic!("no {k} in {:#}", st["kinds"]))
    };
    let direct = kind("direct reclaim");
    assert!(phases > 100, "{phases}");
    assert_eq!(direct["phases"], phases);
    let got = direct["ns"].as_u64().unwrap();
    assert!(
        got.abs_diff(ns) <= 1_000 * phases,
        "report {got} ns, text {ns} ns"
    );
    let compactions = events
        .iter()
        .filter(|e| e.2 == "mm_compaction_try_to_compact_pages")
        .count() as u64;
    assert_eq!(kind("compaction")["phases"], compactions);
    // kswapd: awake from a wake while asleep to the sleep after it.
    let (mut since, mut awake) = (None, 0u64);
    for &(_, ts, ev, _) in &events {
        match ev {
            "mm_vmscan_kswapd_wake" => {
                since.get_or_insert(ts);
            }
            "mm_vmscan_kswapd_sleep" => {
                if let Some(s) = since.take() {
                    awake += ts - s;
                }
            }
            _ => {}
        }
    }
    let kswapd = st["background"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["thread"] == "kswapd")
        .unwrap();
    let got = kswapd["awake_ns"].as_u64().unwrap();
    assert!(
        got.abs_diff(awake) <= 20_000,
        "kswapd awake: report {got}, text {awake}"
    );
    // The OOM kill: its victim as the text names it, and the allocation
    // that led to it.
    let victim = events
        .iter()
        .find(|e| e.2 == "mark_victim")
        .expect("an OOM kill in the text");
    let kills = st["oom_kills"].as_array().unwrap();
    assert_eq!(kills.len(), 1);
    let k = &kills[0];
    let pid = victim
        .3
        .split("pid=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_eq!(k["victim_pid"].to_string(), pid);
    let comm = victim
        .3
        .split("comm=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_eq!(k["victim_comm"], comm);
    assert!(k["callsite"].is_string(), "{k}");
    assert!(k["stalled_ns"].as_u64().unwrap() > 0);
    // Every episode's group names its call site.
    for s in st["sites"].as_array().unwrap() {
        assert!(s["callsite"].is_string(), "{s}");
    }
}
