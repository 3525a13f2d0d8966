//! Runs the pipeline (decoder threads -> merge -> analyses) over a log and
//! turns the result into the [`Report`] model.

use crate::analysis::{Analysis, FindingAgg, LeakGroup, Misuse, Occurrence, NO_SITE};
use crate::decode::{CpuSummary, Decoder, Job, PageStats};
use crate::event::{Interner, NO_CACHE};
use crate::filter::Filter;
use crate::merge::{Merger, Windows};
use crate::model::*;
use crate::model::{Addr, Severity, SortKey};
use kmemtrace_format::kallsyms::Kallsyms;
use kmemtrace_format::log::Log;
use kmemtrace_format::print_flags::FlagTable;
use kmemtrace_format::records::StatsPhase;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Call-site names.
pub struct Symbols {
    pub table: Option<Kallsyms>,
    pub raw: bool,
    /// Where the symbols came from, for the report.
    pub source: String,
}

impl Symbols {
    pub fn name(&self, addr: u64) -> String {
        match (&self.table, self.raw) {
            (Some(k), false) => match k.resolve(addr) {
                Some(s) => s.short().to_string(),
                None => format!("0x{addr:x}"),
            },
            _ => format!("0x{addr:x}"),
        }
    }
}

/// What to compute beyond the defaults.
pub struct Options {
    pub filter: Filter,
    pub comm: Option<String>,
    /// The traced tasks of a pid-filtered recording, when they select.
    pub traced: Option<kmemtrace_format::tasks::TracedTasks>,
    pub per_pointer: bool,
    /// Freed pointers remembered per generation (double-free horizon).
    pub remember_frees: usize,
    pub min_age: u64,
    pub sort: Vec<SortKey>,
    pub lines: Option<usize>,
    pub progress: bool,
}

/// `major.minor` of a release string such as `6.1.0-50-armmp-lpae`.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let a = it.next()?.parse().ok()?;
    let b = it.next()?.parse().ok()?;
    Some((a, b))
}

/// How kfree() of a kmem_cache_alloc()ed object is judged for `release`.
pub fn kfree_cache_judgement(release: Option<&str>) -> (Severity, String) {
    match release.and_then(kernel_version) {
        Some(v) if v >= (6, 4) => (
            Severity::Info,
            format!(
                "legal since 6.4 (SLOB removed; kfree() of kmem_cache_alloc() objects documented as supported, commit ae65a5211d90): the recorded kernel is {}.{} - informational",
                v.0, v.1
            ),
        ),
        Some(v) => (
            Severity::Warning,
            format!(
                "the recorded kernel is {}.{}: kfree() of kmem_cache_alloc() objects works on SLAB and SLUB but breaks SLOB, and is documented as supported only since 6.4 (commit ae65a5211d90)",
                v.0, v.1
            ),
        ),
        None => (
            Severity::Warning,
            "kernel release unknown: kfree() of kmem_cache_alloc() objects is legal since 6.4 (commit ae65a5211d90), breaks SLOB before".into(),
        ),
    }
}

fn describe(m: Misuse) -> (&'static str, Severity, &'static str) {
    match m {
        Misuse::DoubleFree => (
            "object freed twice (no allocation returned it in between)",
            Severity::Warning,
            "a double free, or a re-allocation by a path the kernel does not trace (kmem_cache_alloc_bulk: the maple tree, io_uring, skbuff caches...); confirm with slub_debug=FZ or KASAN",
        ),
        Misuse::KmallocFreedByCacheFree => (
            "kmalloc()ed object freed by kmem_cache_free()",
            Severity::Error,
            "kmem_cache_free() needs the cache the object came from; kmalloc objects belong to kmalloc-* caches or are page-backed",
        ),
        Misuse::CacheMismatch => (
            "kmem_cache_free() names another cache than the allocation",
            Severity::Error,
            "the object is returned to the wrong cache",
        ),
        Misuse::ReqExceedsAlloc => (
            "bytes_alloc smaller than bytes_req",
            Severity::Error,
            "the allocator reported less memory than was asked for",
        ),
        Misuse::LivePointerReturned => (
            "allocation returned a pointer that is still live (a missed free)",
            Severity::Warning,
            "the trace did not show the object's free: an untraced free path (kfree_bulk, kmem_cache_free_bulk) or lost events",
        ),
        Misuse::CacheAllocFreedByKfree => (
            "kmem_cache_alloc()ed object freed by kfree()",
            Severity::Warning,
            "",
        ),
        Misuse::FailedAlloc => (
            "failed allocation (NULL returned)",
            Severity::Warning,
            "the allocator returned NULL",
        ),
        Misuse::FreeOfUnseen => (
            "free of an object not seen allocated (allocated before the capture started)",
            Severity::Info,
            "allocated before the capture, in lost events, or by an untraced path (kmem_cache_alloc_bulk) - informational",
        ),
    }
}

struct Ctx<'a> {
    log: &'a Log,
    syms: &'a Symbols,
    names: Vec<String>,
    first_ts: u64,
    gfp: Option<&'a FlagTable>,
}

impl Ctx<'_> {
    fn cache(&self, id: u32) -> Option<String> {
        (id != NO_CACHE).then(|| {
            self.names
                .get(id as usize)
                .cloned()
                .unwrap_or_else(|| format!("#{id}"))
        })
    }
    fn site_name(&self, a: &Analysis, i: u32) -> Option<String> {
        (i != NO_SITE).then(|| self.syms.name(a.sites[i as usize].addr))
    }
    fn occurrence(&self, a: &Analysis, o: &Occurrence) -> OccurrenceRow {
        OccurrenceRow {
            ts_ns: o.ts,
            rel_s: o.ts.saturating_sub(self.first_ts) as f64 / 1e9,
            cpu: o.cpu,
            pid: o.pid,
            comm: self.log.pids.comm(o.pid).map(str::to_string),
            ptr: Addr(o.ptr),
            alloc_callsite: self.site_name(a, o.alloc_site),
            free_callsite: self.site_name(a, o.free_site),
            earlier_ts_ns: o.earlier_ts,
            earlier_cpu: o.earlier_cpu,
            alloc_cache: self.cache(o.alloc_cache),
            free_cache: self.cache(o.free_cache),
            bytes_req: o.bytes.map(|b| b.0),
            bytes_alloc: o.bytes.map(|b| b.1),
            uncertain: o.uncertain,
        }
    }
    fn top_sites(&self, a: &Analysis, m: &crate::event::FastMap<u32, u64>) -> Vec<SiteCount> {
        let mut v: Vec<(u32, u64)> = m.iter().map(|(&k, &c)| (k, c)).collect();
        let addr = |i: u32| a.sites[i as usize].addr;
        v.sort_by(|x, y| y.1.cmp(&x.1).then(addr(x.0).cmp(&addr(y.0))));
        v.truncate(5);
        v.into_iter()
            .map(|(s, count)| SiteCount {
                callsite: self.syms.name(a.sites[s as usize].addr),
                addr: Addr(a.sites[s as usize].addr),
                count,
            })
            .collect()
    }
    fn gfp(&self, value: u64, count: u64) -> Gfp {
        let (flags, compact) = match self.gfp {
            Some(t) => (
                t.decode(value).to_string(),
                t.decode_compact(value).to_string(),
            ),
            None => (format!("0x{value:x}"), format!("0x{value:x}")),
        };
        Gfp {
            value: format!("0x{value:x}"),
            flags,
            compact,
            count,
        }
    }
}

/// The result of a run.
pub struct Outcome {
    pub report: Report,
    /// The worst severity among certain findings.
    pub worst: Option<Severity>,
}

/// Runs everything.
pub fn run(log: &Log, syms: &Symbols, opts: Options) -> Outcome {
    let kmem = log.kmem_decoder();
    let interner = Interner::new();
    let site_table = crate::event::SiteTable::default();
    let progress = AtomicU64::new(0);
    let total_subbufs: u64 = log.blocks.iter().map(|b| u64::from(b.count)).sum();
    // CPUs with data, and those END says had data whose blocks are all
    // missing (a loss over the whole capture).
    let mut cpus = log.cpus();
    if let Some(end) = &log.end {
        cpus.extend(end.cpus.iter().filter(|t| t.subbufs > 0).map(|t| t.cpu));
        cpus.sort_unstable();
        cpus.dedup();
    }
    let page_size = u64::from(log.arch.page_size.unwrap_or(4096));
    let filter = opts.filter.clone();
    let namer = |addr: u64| syms.name(addr);
    let mut an = Analysis::new(
        &filter,
        &log.cpu_nodes,
        opts.per_pointer,
        opts.remember_frees,
        &site_table,
        Box::new(namer),
    );
    let start = Instant::now();

    let pool = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 16);
    // Blocks decoded ahead (~1.2 MB of events each): per CPU, enough to
    // keep every decoder busy on a log whose events are mostly on one CPU;
    // in all, twice the decoders. On 2 cores, 4 ahead ran 1.3-1.7x faster
    // than 1 (the merge waited less, and slept less).
    let ahead = (2 * workers).clamp(2, 8);
    let cap = 2 * workers;
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let job_rx = std::sync::Mutex::new(job_rx);
    let dec = Decoder {
        log,
        kmem: &kmem,
        interner: &interner,
        sites: &site_table,
        filter: &filter,
        progress: &progress,
        page_size,
        pool: &pool,
    };
    let (windows, summaries) = std::thread::scope(|scope| {
        for w in 0..workers {
            let (dec, job_rx) = (&dec, &job_rx);
            std::thread::Builder::new()
                .name(format!("decode-{w}"))
                .spawn_scoped(scope, move || dec.work(job_rx))
                .expect("spawn a decoder thread");
        }
        let blocks: Vec<Vec<kmemtrace_format::log::CpuBlockRef>> = cpus
            .iter()
            .map(|&c| log.cpu_blocks(c).into_iter().copied().collect())
            .collect();
        let inputs = cpus
            .iter()
            .zip(&blocks)
            .map(|(&cpu, b)| crate::merge::StreamInput {
                cpu,
                blocks: b.iter().map(|r| (r.first_subbuf, r.count)).collect(),
                written: log.end_total(cpu).map(|t| t.subbufs),
            })
            .collect();
        let submit: crate::merge::Submit<'_> = Box::new(move |i, k| {
            let (tx, rx) = mpsc::sync_channel(1);
            let _ = job_tx.send(Job {
                block: blocks[i][k],
                reply: tx,
            });
            rx
        });
        let mut m = Merger::new(inputs, submit, (ahead, cap), Some(&pool));
        let mut n: u64 = 0;
        let mut last_print = Instant::now();
        let mut printed = false;
        while let Some(ev) = m.next() {
            an.event(&ev, &m.windows);
            n += 1;
            if opts.progress && n & 0xffff == 0 && last_print.elapsed() > Duration::from_millis(250)
            {
                last_print = Instant::now();
                let done = progress.load(Ordering::Relaxed);
                eprint!(
                    "\rkmemtrace-report: {:>3}% of {} sub-buffers, {} events, {:.1} s ",
                    (done * 100).checked_div(total_subbufs).unwrap_or(100),
                    crate::text::thousands(total_subbufs),
                    crate::text::thousands(n),
                    start.elapsed().as_secs_f64()
                );
                printed = true;
            }
        }
        if printed {
            eprint!("\r{:70}\r", "");
        }
        let out = (
            std::mem::take(&mut m.windows),
            std::mem::take(&mut m.summaries),
        );
        drop(m); // closes the job queue: the workers end
        out
    });
    let leaks = an.finish(&windows, opts.min_age);
    build(
        log,
        syms,
        &opts,
        &an,
        &kmem,
        interner.names(),
        &windows,
        summaries,
        leaks,
    )
}

fn sort_rows<T>(rows: &mut [T], keys: &[SortKey], key: impl Fn(&T, SortKey) -> KeyVal) {
    rows.sort_by(|a, b| {
        for &k in keys {
            let o = match (key(a, k), key(b, k)) {
                (KeyVal::S(x), KeyVal::S(y)) => x.cmp(&y),
                (KeyVal::U(x), KeyVal::U(y)) => y.cmp(&x),
                (KeyVal::F(x), KeyVal::F(y)) => y.total_cmp(&x),
                _ => std::cmp::Ordering::Equal,
            };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
}

enum KeyVal {
    S(String),
    U(u64),
    F(f64),
}

#[allow(clippy::too_many_arguments)]
fn build(
    log: &Log,
    syms: &Symbols,
    opts: &Options,
    an: &Analysis,
    kmem: &kmemtrace_format::kmem::KmemDecoder,
    names: Vec<String>,
    windows: &Windows,
    mut summaries: Vec<CpuSummary>,
    leaks: Vec<LeakGroup>,
) -> Outcome {
    summaries.sort_by_key(|s| s.cpu);
    let first_ts = an
        .first_ts
        .or_else(|| summaries.iter().filter_map(|s| s.first_ts).min())
        .unwrap_or(0);
    let ctx = Ctx {
        log,
        syms,
        names,
        first_ts,
        gfp: kmem.gfp_table(),
    };
    let a = &log.arch;

    // Capture.
    let mut page = PageStats::default();
    let mut problems: Vec<String> = log.problems.iter().map(|p| p.to_string()).collect();
    for w in kmem.warnings() {
        problems.push(format!("format: {w}"));
    }
    let cpu_rows: Vec<CpuRow> = summaries
        .iter()
        .map(|s| {
            page.merge(&s.page);
            for p in &s.problems {
                problems.push(p.to_string());
            }
            if s.problems_dropped > 0 {
                problems.push(format!(
                    "CPU {}: {} more problems not listed",
                    s.cpu, s.problems_dropped
                ));
            }
            let lost_stats = {
                let st = log
                    .cpu_stats(s.cpu, StatsPhase::Start)
                    .filter_map(|x| x.parsed)
                    .next();
                let en = log
                    .cpu_stats(s.cpu, StatsPhase::End)
                    .filter_map(|x| x.parsed)
                    .last();
                match (st, en) {
                    (Some(st), Some(en)) => Some(en.lost_since(&st)),
                    (None, Some(en)) => Some(en.lost_events()),
                    _ => None,
                }
            };
            CpuRow {
                cpu: s.cpu,
                node: log.cpu_nodes.get(&s.cpu).copied(),
                subbufs: s.subbufs,
                events: s.events,
                kmem_events: s.kmem_events,
                slab_events: s.slab_events,
                missed_subbufs: s.missed_subbufs,
                lost_stored: s.lost_stored,
                lost_stats,
                missing_subbufs: s.missing_subbufs,
                bad_subbufs: s.bad_subbufs,
                decode_errors: s.decode_errors,
                backwards: s.backwards,
                first_ts_ns: s.first_ts,
                last_ts_ns: s.last_ts,
            }
        })
        .collect();
    if page.allocs_by_order.is_empty() {
        page.allocs_by_order = vec![0; 11];
    }
    let all_first = summaries.iter().filter_map(|s| s.first_ts).min();
    let all_last = summaries.iter().filter_map(|s| s.last_ts).max();
    let capture = Capture {
        first_ts_ns: all_first,
        last_ts_ns: all_last,
        duration_ns: match (all_first, all_last) {
            (Some(f), Some(l)) => l.saturating_sub(f),
            _ => 0,
        },
        events: summaries.iter().map(|s| s.events).sum(),
        kmem_events: summaries.iter().map(|s| s.kmem_events).sum(),
        slab_events: summaries.iter().map(|s| s.slab_events).sum(),
        cpus: cpu_rows,
        lost_windows_total: windows.list().len(),
        lost_windows: windows
            .list()
            .iter()
            .take(1000)
            .map(|w| LostWindow {
                cpu: w.cpu,
                start_ns: w.start,
                end_ns: (w.end != u64::MAX).then_some(w.end),
            })
            .collect(),
        tracked_pointers: an.tracked(),
    };

    // Summary.
    let t = &an.totals;
    let summary = Summary {
        alloc_events: t.alloc_events,
        failed_allocs: t.agg.failed,
        free_events: t.free_events,
        null_frees: t.null_frees,
        bytes_requested: t.agg.bytes_req,
        bytes_allocated: t.agg.bytes_alloc,
        bytes_freed: t.agg.freed_bytes,
        net_bytes_allocated: t.agg.bytes_alloc as i64 - t.agg.freed_bytes as i64,
        bytes_wasted: t.agg.bytes_alloc.saturating_sub(t.agg.bytes_req),
        fragmentation_pct: fragmentation(t.agg.bytes_req, t.agg.bytes_alloc),
        matched_frees: t.matched_frees,
        cross_cpu_frees: t.agg.cross_cpu_frees,
        cross_node_allocs: (!log.cpu_nodes.is_empty()).then_some(t.cross_node_allocs),
        node_requests: t.node_requests,
        allocs_with_node_field: t.allocs_with_node_field,
        perf_cross_cpu_allocations: t.perf_cross_allocs,
        live_objects: t.agg.live_objs,
        live_bytes: t.agg.live_bytes,
        peak_live_bytes: t.agg.peak_live_bytes,
    };

    // Call sites (allocation sites; free-only sites are in JSON too).
    let mut callsites: Vec<CallsiteRow> = an
        .sites
        .iter()
        .filter(|s| s.agg.hits > 0 || s.free_calls > 0)
        .map(|s| {
            let g = &s.agg;
            let mut kinds = Vec::new();
            for (bit, k) in [
                (1, "kmalloc"),
                (2, "kmem_cache_alloc"),
                (4, "kfree"),
                (8, "kmem_cache_free"),
            ] {
                if s.kinds & bit != 0 {
                    kinds.push(k);
                }
            }
            let mut gfp: Vec<Gfp> = s.gfp.iter().map(|&(v, c)| ctx.gfp(v, c)).collect();
            gfp.sort_by_key(|g| std::cmp::Reverse(g.count));
            CallsiteRow {
                callsite: syms.name(s.addr),
                addr: Addr(s.addr),
                kinds,
                hits: g.hits,
                failed: g.failed,
                bytes_req: g.bytes_req,
                bytes_alloc: g.bytes_alloc,
                req_per_hit: g.bytes_req.checked_div(g.hits).unwrap_or(0),
                alloc_per_hit: g.bytes_alloc.checked_div(g.hits).unwrap_or(0),
                bytes_wasted: g.bytes_alloc.saturating_sub(g.bytes_req),
                fragmentation_pct: fragmentation(g.bytes_req, g.bytes_alloc),
                frees: g.frees,
                cross_cpu_frees: g.cross_cpu_frees,
                free_calls: s.free_calls,
                missed_frees: s.missed_frees,
                live_objects: g.live_objs,
                live_bytes: g.live_bytes,
                peak_live_bytes: g.peak_live_bytes,
                cache: ctx.cache(s.cache),
                gfp,
                gfp_other: s.gfp_other,
            }
        })
        .collect();
    let row_key = |r: &CallsiteRow, k: SortKey| match k {
        SortKey::Callsite => KeyVal::S(r.callsite.clone()),
        SortKey::Bytes => KeyVal::U(r.bytes_alloc),
        SortKey::Req => KeyVal::U(r.bytes_req),
        SortKey::Hit => KeyVal::U(r.hits),
        SortKey::Frag => KeyVal::F(r.fragmentation_pct),
        SortKey::Waste => KeyVal::U(r.bytes_wasted),
        SortKey::Pingpong => KeyVal::U(r.cross_cpu_frees),
        SortKey::Live => KeyVal::U(r.live_bytes),
        SortKey::Peak => KeyVal::U(r.peak_live_bytes),
    };
    // Allocation sites first, then free-only ones; equal keys by address
    // (site ids depend on which decoder saw a site first).
    callsites.sort_by_key(|a| (a.hits == 0, a.addr));
    let split = callsites
        .iter()
        .position(|r| r.hits == 0)
        .unwrap_or(callsites.len());
    sort_rows(&mut callsites[..split], &opts.sort, row_key);
    sort_rows(&mut callsites[split..], &[SortKey::Callsite], row_key);
    // Tie-break stability by address is already given by sort order of
    // equal keys being the site order (first seen).
    if let Some(l) = opts.lines {
        callsites.truncate(l);
    }

    // Caches and size classes.
    let cache_row = |name: String, size: Option<u64>, g: &crate::analysis::Agg| CacheRow {
        name,
        object_size: size,
        hits: g.hits,
        bytes_req: g.bytes_req,
        bytes_alloc: g.bytes_alloc,
        bytes_wasted: g.bytes_alloc.saturating_sub(g.bytes_req),
        fragmentation_pct: fragmentation(g.bytes_req, g.bytes_alloc),
        frees: g.frees,
        cross_cpu_frees: g.cross_cpu_frees,
        live_objects: g.live_objs,
        live_bytes: g.live_bytes,
        peak_live_bytes: g.peak_live_bytes,
    };
    let cache_key = |r: &CacheRow, k: SortKey| match k {
        SortKey::Callsite => KeyVal::S(r.name.clone()),
        SortKey::Bytes => KeyVal::U(r.bytes_alloc),
        SortKey::Req => KeyVal::U(r.bytes_req),
        SortKey::Hit => KeyVal::U(r.hits),
        SortKey::Frag => KeyVal::F(r.fragmentation_pct),
        SortKey::Waste => KeyVal::U(r.bytes_wasted),
        SortKey::Pingpong => KeyVal::U(r.cross_cpu_frees),
        SortKey::Live => KeyVal::U(r.live_bytes),
        SortKey::Peak => KeyVal::U(r.peak_live_bytes),
    };
    let mut caches: Vec<CacheRow> = an
        .caches
        .iter()
        .enumerate()
        .filter(|(_, g)| g.hits > 0 || g.frees > 0)
        .map(|(i, g)| {
            let name = if i == 0 {
                "(unknown cache)".to_string()
            } else {
                ctx.cache(i as u32).unwrap_or_default()
            };
            cache_row(name, None, g)
        })
        .collect();
    caches.sort_by(|a, b| a.name.cmp(&b.name));
    sort_rows(&mut caches, &opts.sort, cache_key);
    let mut size_classes: Vec<CacheRow> = an
        .size_classes()
        .map(|(size, g)| cache_row(size_class_name(size, page_size_of(log)), Some(size), g))
        .collect();
    size_classes.sort_by_key(|r| r.object_size);
    if let Some(l) = opts.lines {
        caches.truncate(l);
        size_classes.truncate(l);
    }

    // Cross-CPU matrix.
    let mut mcpus: Vec<u32> = an.cpu_matrix().flat_map(|((a, b), _)| [a, b]).collect();
    mcpus.sort_unstable();
    mcpus.dedup();
    let idx = |c: u32| mcpus.binary_search(&c).unwrap_or(0);
    let mut matrix = vec![vec![0u64; mcpus.len()]; mcpus.len()];
    let (mut same, mut cross) = (0, 0);
    for ((x, y), n) in an.cpu_matrix() {
        matrix[idx(x)][idx(y)] += n;
        if x == y {
            same += n;
        } else {
            cross += n;
        }
    }
    let cross_cpu = CrossCpu {
        cpus: mcpus.clone(),
        matrix,
        same_cpu_frees: same,
        cross_cpu_frees: cross,
    };

    // Misuse.
    let release = a.release.as_deref();
    let mut worst: Option<Severity> = None;
    let misuse: Vec<Finding> = Misuse::ALL
        .iter()
        .map(|&m| {
            let f: &FindingAgg = &an.findings[m as usize];
            let (title, mut sev, why) = describe(m);
            let judgement = if m == Misuse::CacheAllocFreedByKfree {
                let (s, j) = kfree_cache_judgement(release);
                sev = s;
                j
            } else {
                why.to_string()
            };
            if f.count > f.uncertain {
                worst = worst.max(Some(sev));
            }
            let mut pairs: Vec<(String, String, u64)> = f
                .cache_pairs
                .iter()
                .map(|(&(x, y), &n)| {
                    (
                        ctx.cache(x).unwrap_or_default(),
                        ctx.cache(y).unwrap_or_default(),
                        n,
                    )
                })
                .collect();
            pairs.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
            pairs.truncate(10);
            Finding {
                kind: m.id(),
                title,
                severity: sev,
                count: f.count,
                uncertain: f.uncertain,
                certain: f.count - f.uncertain,
                judgement,
                first: f.first.as_ref().map(|o| ctx.occurrence(an, o)),
                first_certain: f.first_certain.as_ref().map(|o| ctx.occurrence(an, o)),
                top_alloc_callsites: ctx.top_sites(an, &f.alloc_sites),
                top_free_callsites: ctx.top_sites(an, &f.free_sites),
                cache_pairs: pairs,
            }
        })
        .collect();

    // Leaks.
    let end = an.last_ts;
    let leak_rows: Vec<LeakRow> = leaks
        .iter()
        .map(|g| LeakRow {
            callsite: syms.name(an.sites[g.site as usize].addr),
            addr: Addr(an.sites[g.site as usize].addr),
            objects: g.objects,
            bytes: g.bytes,
            oldest_age_ns: end.saturating_sub(g.oldest_ts),
            newest_age_ns: end.saturating_sub(g.newest_ts),
            uncertain: g.uncertain,
            site_missed_frees: an.sites[g.site as usize].missed_frees,
            examples: g
                .examples
                .iter()
                .map(|&(p, ts, cpu, bytes)| LeakExample {
                    ptr: Addr(p),
                    age_ns: end.saturating_sub(ts),
                    cpu,
                    bytes,
                })
                .collect(),
        })
        .collect();
    let mut leaks_m = Leaks {
        min_age_ns: opts.min_age,
        end_ts_ns: end,
        objects: leak_rows.iter().map(|r| r.objects).sum(),
        bytes: leak_rows.iter().map(|r| r.bytes).sum(),
        uncertain: leak_rows.iter().map(|r| r.uncertain).sum(),
        groups_total: leak_rows.len(),
        groups: leak_rows,
    };
    if let Some(l) = opts.lines {
        leaks_m.groups.truncate(l);
    }

    // Per pointer.
    let allocs = an.ptrs.as_ref().map(|p| {
        let mut v: Vec<AllocRow> = p
            .iter()
            .map(|(&ptr, g)| AllocRow {
                ptr: Addr(ptr),
                callsite: syms.name(an.sites[g.site as usize].addr),
                hits: g.hits,
                bytes_req: g.bytes_req,
                bytes_alloc: g.bytes_alloc,
                fragmentation_pct: fragmentation(g.bytes_req, g.bytes_alloc),
                cross_cpu_frees: g.cross_cpu_frees,
                live: g.live,
            })
            .collect();
        v.sort_by_key(|a| a.ptr);
        let key = |r: &AllocRow, k: SortKey| match k {
            SortKey::Callsite => KeyVal::S(r.ptr.to_string()),
            SortKey::Bytes | SortKey::Live | SortKey::Peak => KeyVal::U(r.bytes_alloc),
            SortKey::Req => KeyVal::U(r.bytes_req),
            SortKey::Hit => KeyVal::U(r.hits),
            SortKey::Frag => KeyVal::F(r.fragmentation_pct),
            SortKey::Waste => KeyVal::U(r.bytes_alloc.saturating_sub(r.bytes_req)),
            SortKey::Pingpong => KeyVal::U(r.cross_cpu_frees),
        };
        sort_rows(&mut v, &opts.sort, key);
        if let Some(l) = opts.lines {
            v.truncate(l);
        }
        v
    });

    let f = &opts.filter;
    let sorted_set = |s: &Option<std::collections::HashSet<u32>>| {
        s.as_ref().map(|s| {
            let mut v: Vec<u32> = s.iter().copied().collect();
            v.sort_unstable();
            v
        })
    };
    let report = Report {
        schema: SCHEMA,
        generator: format!("kmemtrace-report {}", env!("CARGO_PKG_VERSION")),
        input: Input {
            name: log.name.clone(),
            bytes: log.len,
            format_version: format!("{}.{}", log.version.0, log.version.1),
            complete: log.end.is_some(),
            end_reason: log.end.as_ref().map(|e| e.reason.clone()),
            truncated: log.truncated.as_ref().map(|t| format!("{t:?}")),
            recorder: a.recorder.clone(),
            kallsyms: syms.source.clone(),
        },
        kernel: Kernel {
            sysname: a.sysname.clone(),
            release: a.release.clone(),
            version: a.version.clone(),
            machine: a.machine.clone(),
            hostname: a.hostname.clone(),
            byte_order: log.endian.name(),
            long_size: a.long_size,
            page_size: a.page_size,
            nr_cpus: a.nr_cpus,
            trace_clock: a.trace_clock.clone(),
            gfp_table: kmem.gfp_table().is_some(),
        },
        filters: Filters {
            cpus: sorted_set(&f.cpus),
            pids: f.pids.as_ref().map(|s| {
                let mut v: Vec<i32> = s.iter().copied().collect();
                v.sort_unstable();
                v
            }),
            comm: opts.comm.clone(),
            traced_tasks: opts.traced.as_ref().map(|t| crate::model::TracedTree {
                asked: t.asked.clone(),
                tasks: t.tree.len() as u64,
                forks: t.forks,
                forks_recorded: t.forks_recorded,
            }),
            time_start_ns: f.time.map(|t| t.0),
            time_end_ns: f.time.map(|t| t.1),
            callsite: f.callsite.clone(),
            min_age_ns: opts.min_age,
        },
        capture,
        summary,
        sort: opts.sort.iter().map(|k| k.name().to_string()).collect(),
        callsites,
        caches,
        size_classes,
        cross_cpu,
        misuse,
        leaks: leaks_m,
        allocs,
        page_allocator: page,
        problems,
    };
    Outcome { report, worst }
}

fn page_size_of(log: &Log) -> u64 {
    u64::from(log.arch.page_size.unwrap_or(4096).max(1))
}

/// The kmalloc cache a `bytes_alloc` comes from: `kmalloc-96`,
/// `kmalloc-2k`, or page-backed above `2 * PAGE_SIZE` (SLUB's
/// KMALLOC_MAX_CACHE_SIZE).
pub fn size_class_name(size: u64, page_size: u64) -> String {
    let page_size = page_size.max(1);
    if size > page_size.saturating_mul(2) {
        let order = (size.div_ceil(page_size))
            .next_power_of_two()
            .trailing_zeros();
        return format!("kmalloc-large (order {order}, {} bytes)", size);
    }
    if size >= 1024 && size % 1024 == 0 {
        format!("kmalloc-{}k", size / 1024)
    } else {
        format!("kmalloc-{size}")
    }
}

/// Whether standard error should carry a progress indicator.
pub fn progress_wanted(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_judgement() {
        assert_eq!(kernel_version("6.1.0-50-armmp-lpae"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("x"), None);
        assert_eq!(kfree_cache_judgement(Some("6.18.4")).0, Severity::Info);
        assert_eq!(kfree_cache_judgement(Some("6.4.0")).0, Severity::Info);
        assert_eq!(kfree_cache_judgement(Some("6.1.0")).0, Severity::Warning);
        assert_eq!(kfree_cache_judgement(None).0, Severity::Warning);
    }

    #[test]
    fn size_classes() {
        assert_eq!(size_class_name(96, 4096), "kmalloc-96");
        assert_eq!(size_class_name(2048, 4096), "kmalloc-2k");
        assert_eq!(size_class_name(8192, 4096), "kmalloc-8k");
        assert_eq!(
            size_class_name(16384, 4096),
            "kmalloc-large (order 2, 16384 bytes)"
        );
    }
}
