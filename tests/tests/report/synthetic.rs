//! Synthetic logs: this kernel's (6.18 x86_64) kmem formats, events laid
//! out by the format library's kernel-rule encoders, a small kallsyms.

use kmemtrace_format::records::{Meta, MetaKind};
use kmemtrace_kernel::{EventFormat, LittleEndian, RunTimeEndian};
use kmemtrace_testkit::subbuf::Missed;
use kmemtrace_testkit::synth::{encode_event, LogBuilder, SynthRecord, Value};

const KMALLOC: &str = include_str!("data/x86_64-6.18/kmalloc.format");
const KFREE: &str = include_str!("data/x86_64-6.18/kfree.format");
const KCA: &str = include_str!("data/x86_64-6.18/kmem_cache_alloc.format");
const KCF: &str = include_str!("data/x86_64-6.18/kmem_cache_free.format");
const PAGE: &str = include_str!("data/x86_64-6.18/mm_page_alloc.format");
const PAGE_FREE: &str = include_str!("data/x86_64-6.18/mm_page_free.format");
const PAGE_FREE_BATCHED: &str = include_str!("data/x86_64-6.18/mm_page_free_batched.format");
const EXTFRAG: &str = include_str!("data/x86_64-6.18/mm_page_alloc_extfrag.format");
const ZONE_LOCKED: &str = include_str!("data/x86_64-6.18/mm_page_alloc_zone_locked.format");
const PCP_DRAIN: &str = include_str!("data/x86_64-6.18/mm_page_pcpu_drain.format");
const FORK: &str = include_str!("data/x86_64-6.18/sched_process_fork.format");

/// Functions of the synthetic kernel, 0x100 bytes each from `TEXT`.
pub const FUNCS: &[&str] = &[
    "alloc_a",
    "alloc_b",
    "alloc_c",
    "cache_alloc_x",
    "leaky_alloc",
    "free_a",
    "free_b",
    "cache_free_x",
    "bulk_user",
    "odd_alloc",
    "free_u",
];
pub const TEXT: u64 = 0xffff_ffff_8100_0000;

/// `func+0x10`'s address.
pub fn site(func: &str) -> u64 {
    let i = FUNCS
        .iter()
        .position(|f| *f == func)
        .expect("known function");
    TEXT + 0x100 * i as u64 + 0x10
}

pub const GFP_KERNEL: u64 = 0xcc0;

/// A log under construction.
pub struct Synth {
    pub b: LogBuilder,
    kmalloc: EventFormat,
    kfree: EventFormat,
    kca: EventFormat,
    kcf: EventFormat,
    page: EventFormat,
    page_free: EventFormat,
    page_free_batched: EventFormat,
    extfrag: EventFormat,
    zone_locked: EventFormat,
    pcp_drain: EventFormat,
    fork: EventFormat,
    pub allocs: u64,
    pub frees: u64,
    /// Write the next event with an absolute time stamp (which may go
    /// back in time, as a CPU's clock can).
    pub absolute: bool,
}

impl Synth {
    pub fn new(release: &str) -> Self {
        let mut b = LogBuilder::new(RunTimeEndian::Little, 8, 4096);
        b.arch.release = Some(release.into());
        b.arch.sysname = Some("Linux".into());
        b.arch.machine = Some("x86_64".into());
        b.arch.page_size = Some(4096);
        let kmalloc = b.format("kmem", KMALLOC).unwrap();
        let kfree = b.format("kmem", KFREE).unwrap();
        let kca = b.format("kmem", KCA).unwrap();
        let kcf = b.format("kmem", KCF).unwrap();
        let page = b.format("kmem", PAGE).unwrap();
        let page_free = b.format("kmem", PAGE_FREE).unwrap();
        let page_free_batched = b.format("kmem", PAGE_FREE_BATCHED).unwrap();
        let extfrag = b.format("kmem", EXTFRAG).unwrap();
        let zone_locked = b.format("kmem", ZONE_LOCKED).unwrap();
        let pcp_drain = b.format("kmem", PCP_DRAIN).unwrap();
        let fork = b.format("sched", FORK).unwrap();
        let mut ks = String::new();
        for (i, f) in FUNCS.iter().enumerate() {
            ks.push_str(&format!("{:016x} T {f}\n", TEXT + 0x100 * i as u64));
        }
        ks.push_str(&format!(
            "{:016x} T _etext\n",
            TEXT + 0x100 * FUNCS.len() as u64
        ));
        b.meta(Meta::new(MetaKind::Kallsyms, ks));
        b.meta(Meta::new(
            MetaKind::SavedCmdlines,
            "100 worker\n200 other\n",
        ));
        b.meta(Meta::new(MetaKind::CpuNodeMap, "0 0\n1 1\n"));
        Synth {
            b,
            kmalloc,
            kfree,
            kca,
            kcf,
            page,
            page_free,
            page_free_batched,
            extfrag,
            zone_locked,
            pcp_drain,
            fork,
            allocs: 0,
            frees: 0,
            absolute: false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn kmalloc(
        &mut self,
        cpu: u32,
        ts: u64,
        pid: i32,
        func: &str,
        ptr: u64,
        req: u64,
        alloc: u64,
    ) {
        self.kmalloc_node(cpu, ts, pid, func, ptr, req, alloc, -1);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn kmalloc_node(
        &mut self,
        cpu: u32,
        ts: u64,
        pid: i32,
        func: &str,
        ptr: u64,
        req: u64,
        alloc: u64,
        node: i64,
    ) {
        self.kmalloc_at(cpu, ts, pid, site(func), ptr, req, alloc, node);
    }

    /// `kmalloc_node` from call site address `call_site`.
    #[allow(clippy::too_many_arguments)]
    pub fn kmalloc_at(
        &mut self,
        cpu: u32,
        ts: u64,
        pid: i32,
        call_site: u64,
        ptr: u64,
        req: u64,
        alloc: u64,
        node: i64,
    ) {
        let p = encode_event(
            LittleEndian,
            &self.kmalloc,
            pid,
            &[
                ("call_site", Value::Uint(call_site)),
                ("ptr", Value::Uint(ptr)),
                ("bytes_req", Value::Uint(req)),
                ("bytes_alloc", Value::Uint(alloc)),
                ("gfp_flags", Value::Uint(GFP_KERNEL)),
                ("node", Value::Int(node)),
            ],
        )
        .unwrap();
        self.allocs += 1;
        self.push(cpu, ts, p);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn cache_alloc(
        &mut self,
        cpu: u32,
        ts: u64,
        pid: i32,
        func: &str,
        ptr: u64,
        cache: &str,
        size: u64,
    ) {
        let p = encode_event(
            LittleEndian,
            &self.kca,
            pid,
            &[
                ("call_site", Value::Uint(site(func))),
                ("ptr", Value::Uint(ptr)),
                ("name", Value::Str(cache)),
                ("bytes_req", Value::Uint(size)),
                ("bytes_alloc", Value::Uint(size)),
                ("gfp_flags", Value::Uint(GFP_KERNEL)),
                ("node", Value::Int(-1)),
            ],
        )
        .unwrap();
        self.allocs += 1;
        self.push(cpu, ts, p);
    }

    pub fn kfree(&mut self, cpu: u32, ts: u64, pid: i32, func: &str, ptr: u64) {
        let p = encode_event(
            LittleEndian,
            &self.kfree,
            pid,
            &[
                ("call_site", Value::Uint(site(func))),
                ("ptr", Value::Uint(ptr)),
            ],
        )
        .unwrap();
        self.frees += 1;
        self.push(cpu, ts, p);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn cache_free(&mut self, cpu: u32, ts: u64, pid: i32, func: &str, ptr: u64, cache: &str) {
        let p = encode_event(
            LittleEndian,
            &self.kcf,
            pid,
            &[
                ("call_site", Value::Uint(site(func))),
                ("ptr", Value::Uint(ptr)),
                ("name", Value::Str(cache)),
            ],
        )
        .unwrap();
        self.frees += 1;
        self.push(cpu, ts, p);
    }

    pub fn page_alloc(&mut self, cpu: u32, ts: u64, pfn: u64, order: u64) {
        let p = encode_event(
            LittleEndian,
            &self.page,
            1,
            &[
                ("pfn", Value::Uint(pfn)),
                ("order", Value::Uint(order)),
                ("gfp_flags", Value::Uint(GFP_KERNEL)),
            ],
        )
        .unwrap();
        self.push(cpu, ts, p);
    }

    pub fn page_free(&mut self, cpu: u32, ts: u64, pfn: u64, order: u64) {
        let fields = [("pfn", Value::Uint(pfn)), ("order", Value::Uint(order))];
        let p = encode_event(LittleEndian, &self.page_free, 1, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    pub fn page_free_batched(&mut self, cpu: u32, ts: u64, pfn: u64) {
        let fields = [("pfn", Value::Uint(pfn))];
        let p = encode_event(LittleEndian, &self.page_free_batched, 1, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    /// An order-`alloc_order` Unmovable allocation fell back to an
    /// order-`fallback_order` Movable block.
    pub fn extfrag(&mut self, cpu: u32, ts: u64, pfn: u64, alloc_order: i64, fallback_order: i64) {
        let fields = [
            ("pfn", Value::Uint(pfn)),
            ("alloc_order", Value::Int(alloc_order)),
            ("fallback_order", Value::Int(fallback_order)),
            ("alloc_migratetype", Value::Int(0)),
            ("fallback_migratetype", Value::Int(1)),
            ("change_ownership", Value::Int(0)),
        ];
        let p = encode_event(LittleEndian, &self.extfrag, 1, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    /// An order-0 page refilled into `cpu`'s per-CPU list.
    pub fn pcp_refill(&mut self, cpu: u32, ts: u64, pfn: u64) {
        let fields = [
            ("pfn", Value::Uint(pfn)),
            ("order", Value::Uint(0)),
            ("migratetype", Value::Int(0)),
            ("percpu_refill", Value::Int(1)),
        ];
        let p = encode_event(LittleEndian, &self.zone_locked, 1, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    /// An order-0 page drained from a per-CPU list by `cpu`.
    pub fn pcp_drain(&mut self, cpu: u32, ts: u64, pfn: u64) {
        let fields = [
            ("pfn", Value::Uint(pfn)),
            ("order", Value::Uint(0)),
            ("migratetype", Value::Int(0)),
        ];
        let p = encode_event(LittleEndian, &self.pcp_drain, 1, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    /// A META `other` file of the recorded machine (`proc/...`).
    pub fn other_meta(&mut self, name: &str, content: &str) {
        let mut m = Meta::new(MetaKind::Other, content);
        m.name = name.into();
        self.b.meta(m);
    }

    /// `parent` forks `child` (recorded with the parent's pid).
    pub fn fork(&mut self, cpu: u32, ts: u64, parent: i32, child: i32) {
        let fields = [
            ("parent_comm", Value::Str("worker")),
            ("parent_pid", Value::Int(i64::from(parent))),
            ("child_comm", Value::Str("worker")),
            ("child_pid", Value::Int(i64::from(child))),
        ];
        let p = encode_event(LittleEndian, &self.fork, parent, &fields).unwrap();
        self.push(cpu, ts, p);
    }

    /// The log says it was recorded with `kmemtraced --pid` of `pids`.
    pub fn pid_filter(&mut self, pids: &str) {
        let mut m = Meta::new(MetaKind::Other, pids);
        m.name = kmemtrace_import::tasks::PID_FILTER_META.into();
        self.b.meta(m);
    }

    fn push(&mut self, cpu: u32, ts: u64, payload: Vec<u8>) {
        if std::mem::take(&mut self.absolute) {
            self.b.record(cpu, SynthRecord::AbsEvent { ts, payload });
        } else {
            self.b.event(cpu, ts, payload);
        }
    }

    /// Events of `cpu` are lost here (a new sub-buffer flagged as such).
    pub fn lost(&mut self, cpu: u32, count: u64) {
        self.b.record(cpu, SynthRecord::Lost(Missed::Count(count)));
    }

    pub fn build(&self) -> Vec<u8> {
        self.b.build().unwrap()
    }
}

/// The planted counts of [`planted`].
pub struct Planted {
    pub double_free: u64,
    pub kmalloc_cache_free: u64,
    pub cache_kfree: u64,
    pub cache_mismatch: u64,
    pub live_returned: u64,
    pub req_exceeds: u64,
    pub failed: u64,
    pub unseen: u64,
    pub leaks: u64,
    pub leak_bytes: u64,
    pub cross_cpu_frees: u64,
    pub normal_pairs: u64,
    pub null_frees: u64,
    pub cross_node: u64,
}

pub const PLANTED: Planted = Planted {
    double_free: 3,
    kmalloc_cache_free: 4,
    cache_kfree: 5,
    cache_mismatch: 2,
    live_returned: 6,
    req_exceeds: 7,
    failed: 8,
    unseen: 9,
    leaks: 11,
    leak_bytes: 11 * 256,
    cross_cpu_frees: 10,
    normal_pairs: 100,
    null_frees: 5,
    cross_node: 3,
};

/// A log with every misuse kind planted [`PLANTED`] times, on two CPUs,
/// without any lost events.
pub fn planted(release: &str) -> Synth {
    let p = &PLANTED;
    let mut s = Synth::new(release);
    let mut ts = 1_000_000_000u64; // 1 s
    let mut ptr = 0xffff_8880_1000_0000u64;
    let next = |ts: &mut u64, ptr: &mut u64| {
        *ts += 1000;
        *ptr += 0x1000;
        (*ts, *ptr)
    };
    // Normal pairs: alloc_a kmalloc 100/128 on CPU 0; the first
    // `cross_cpu_frees` freed on CPU 1.
    for i in 0..p.normal_pairs {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(0, t, 100, "alloc_a", q, 100, 128);
        let fcpu = u32::from(i < p.cross_cpu_frees);
        s.kfree(fcpu, t + 500, 100, "free_a", q);
    }
    for _ in 0..p.double_free {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(1, t, 200, "alloc_b", q, 64, 64);
        s.kfree(1, t + 100, 200, "free_b", q);
        s.kfree(1, t + 200, 200, "free_b", q);
    }
    for _ in 0..p.kmalloc_cache_free {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(0, t, 100, "alloc_c", q, 30, 32);
        s.cache_free(0, t + 100, 100, "cache_free_x", q, "kmalloc-32");
    }
    for _ in 0..p.cache_kfree {
        let (t, q) = next(&mut ts, &mut ptr);
        s.cache_alloc(0, t, 100, "cache_alloc_x", q, "dentry", 192);
        s.kfree(0, t + 100, 100, "free_a", q);
    }
    for _ in 0..p.cache_mismatch {
        let (t, q) = next(&mut ts, &mut ptr);
        s.cache_alloc(1, t, 100, "cache_alloc_x", q, "dentry", 192);
        s.cache_free(1, t + 100, 100, "cache_free_x", q, "inode_cache");
    }
    for _ in 0..p.live_returned {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(0, t, 100, "bulk_user", q, 16, 16);
        s.kmalloc(0, t + 100, 100, "bulk_user", q, 16, 16);
        s.kfree(0, t + 200, 100, "free_a", q);
    }
    for _ in 0..p.req_exceeds {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(1, t, 100, "odd_alloc", q, 200, 192);
        s.kfree(1, t + 100, 100, "free_a", q);
    }
    for _ in 0..p.failed {
        let (t, _) = next(&mut ts, &mut ptr);
        s.kmalloc(0, t, 100, "alloc_c", 0, 4096, 4096);
    }
    // Frees of unseen objects at a call site of their own: a site that
    // also frees objects never seen allocated would explain free_b's double
    // frees (untraced allocations).
    for _ in 0..p.unseen {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kfree(1, t, 100, "free_u", q);
    }
    for _ in 0..p.null_frees {
        let (t, _) = next(&mut ts, &mut ptr);
        s.kfree(0, t, 100, "free_a", 0);
    }
    // Cross-node requests: node 1 asked for on CPU 0 (node 0).
    for _ in 0..p.cross_node {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc_node(0, t, 100, "alloc_c", q, 64, 64, 1);
        s.kfree(0, t + 100, 100, "free_a", q);
    }
    // And node 0 on CPU 0: not cross-node.
    let (t, q) = next(&mut ts, &mut ptr);
    s.kmalloc_node(0, t, 100, "alloc_c", q, 64, 64, 0);
    s.kfree(0, t + 100, 100, "free_a", q);
    // Leaks: allocated, never freed.
    for _ in 0..p.leaks {
        let (t, q) = next(&mut ts, &mut ptr);
        s.kmalloc(1, t, 200, "leaky_alloc", q, 250, 256);
    }
    // A page allocation, counted apart.
    let (t, _) = next(&mut ts, &mut ptr);
    s.page_alloc(0, t, 0x1234, 2);
    // The capture ends 1 s after the last leak.
    let (t, q) = next(&mut ts, &mut ptr);
    s.kmalloc(0, t + 1_000_000_000, 100, "alloc_a", q, 100, 128);
    s.kfree(0, t + 1_000_000_100, 100, "free_a", q);
    s
}
