//! The typed [`Report`] from what the stream and the passes computed:
//! names for ids, rows sorted and cut, findings judged.

mod misuse;

pub use misuse::{kernel_version, kfree_cache_judgement};

mod page_advice;
mod page_misuse;
mod page_sites;
mod pages;

use crate::event::NO_CACHE;
use crate::model::*;
use crate::passes::leaks::LeakGroup;
use crate::passes::misuse::Occurrence;
use crate::passes::objects::NO_SITE;
use crate::passes::timeline::{CpuRates, TimeBins};
use crate::passes::Passes;
use crate::run::Options;
use crate::stream::StreamEnd;
use crate::symbols::Symbols;
use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::Log;
use kmemtrace_kernel::{FlagTable, KmemDecoder};

pub(crate) struct Ctx<'a> {
    log: &'a Log,
    an: &'a Passes<'a>,
    /// Call-site addresses by id.
    sites: &'a [u64],
    /// Pointers the object tables held at the end.
    tracked: usize,
    opts: &'a Options,
    syms: &'a Symbols,
    names: Vec<String>,
    first_ts: u64,
    gfp: Option<&'a FlagTable>,
    allocator_functions: Vec<String>,
}

impl Ctx<'_> {
    pub(crate) fn cache(&self, id: u32) -> Option<String> {
        (id != NO_CACHE).then(|| {
            self.names
                .get(id as usize)
                .cloned()
                .unwrap_or_else(|| format!("#{id}"))
        })
    }
    /// A task's name from the log, if it has one.
    pub(crate) fn comm(&self, pid: i32) -> Option<String> {
        self.log.pids.comm(pid).map(str::to_string)
    }
    /// A call site's address by id.
    pub(crate) fn addr(&self, site: u32) -> u64 {
        self.sites.get(site as usize).copied().unwrap_or(0)
    }
    pub(crate) fn site_name(&self, i: u32) -> Option<String> {
        (i != NO_SITE).then(|| self.syms.name(self.addr(i)))
    }
    pub(crate) fn occurrence(&self, o: &Occurrence) -> OccurrenceRow {
        OccurrenceRow {
            ts_ns: o.ts,
            rel_s: o.ts.saturating_sub(self.first_ts) as f64 / 1e9,
            cpu: o.cpu,
            pid: o.pid,
            comm: self.log.pids.comm(o.pid).map(str::to_string),
            ptr: Addr(o.ptr),
            alloc_callsite: self.site_name(o.alloc_site),
            free_callsite: self.site_name(o.free_site),
            earlier_ts_ns: o.earlier_ts,
            earlier_cpu: o.earlier_cpu,
            alloc_cache: self.cache(o.alloc_cache),
            free_cache: self.cache(o.free_cache),
            bytes_req: o.bytes.map(|b| b.0),
            bytes_alloc: o.bytes.map(|b| b.1),
            uncertain: o.uncertain,
        }
    }
    pub(crate) fn top_sites(&self, m: &crate::intern::FastMap<u32, u64>) -> Vec<SiteCount> {
        let mut v: Vec<(u32, u64)> = m.iter().map(|(&k, &c)| (k, c)).collect();
        let addr = |i: u32| self.addr(i);
        v.sort_by(|x, y| y.1.cmp(&x.1).then(addr(x.0).cmp(&addr(y.0))));
        v.truncate(5);
        v.into_iter()
            .map(|(s, count)| SiteCount {
                callsite: self.syms.name(self.addr(s)),
                addr: Addr(self.addr(s)),
                count,
            })
            .collect()
    }
    pub(crate) fn gfp(&self, value: u64, count: u64) -> Gfp {
        gfp_of(self.gfp, value, count)
    }
}

/// GFP flags `value` named by the recorded kernel's table (hex without).
pub(crate) fn gfp_of(table: Option<&FlagTable>, value: u64, count: u64) -> Gfp {
    let (flags, compact) = match table {
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

pub(crate) fn sort_rows<T>(rows: &mut [T], keys: &[SortKey], key: impl Fn(&T, SortKey) -> KeyVal) {
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

/// The figures of a call-site or cache row that `-s` sorts by.
struct Figures<'a> {
    name: &'a str,
    bytes_alloc: u64,
    bytes_req: u64,
    hits: u64,
    frag: f64,
    waste: u64,
    pingpong: u64,
    live: u64,
    peak: u64,
}

/// Rows sorted by [`Figures`].
trait HasFigures {
    fn figures(&self) -> Figures<'_>;
}

/// The sort key of a call-site or cache row.
fn figure_key<T: HasFigures>(r: &T, k: SortKey) -> KeyVal {
    r.figures().key(k)
}

/// Call-site and cache rows share these figures, under other names.
macro_rules! has_figures {
    ($row:ty, $name:ident) => {
        impl HasFigures for $row {
            fn figures(&self) -> Figures<'_> {
                Figures {
                    name: &self.$name,
                    bytes_alloc: self.bytes_alloc,
                    bytes_req: self.bytes_req,
                    hits: self.hits,
                    frag: self.fragmentation_pct,
                    waste: self.bytes_wasted,
                    pingpong: self.cross_cpu_frees,
                    live: self.live_bytes,
                    peak: self.peak_live_bytes,
                }
            }
        }
    };
}
has_figures!(CallsiteRow, callsite);
has_figures!(CacheRow, name);

impl Figures<'_> {
    fn key(&self, k: SortKey) -> KeyVal {
        match k {
            SortKey::Callsite => KeyVal::S(self.name.to_string()),
            SortKey::Bytes => KeyVal::U(self.bytes_alloc),
            SortKey::Req => KeyVal::U(self.bytes_req),
            SortKey::Hit => KeyVal::U(self.hits),
            SortKey::Frag => KeyVal::F(self.frag),
            SortKey::Waste => KeyVal::U(self.waste),
            SortKey::Pingpong => KeyVal::U(self.pingpong),
            SortKey::Live => KeyVal::U(self.live),
            SortKey::Peak => KeyVal::U(self.peak),
        }
    }
}

pub(crate) enum KeyVal {
    S(String),
    U(u64),
    F(f64),
}

/// What the passes found, added up over the shards.
pub struct Found<'a> {
    pub passes: &'a Passes<'a>,
    /// Call-site addresses by id.
    pub sites: &'a [u64],
    /// Pointers the object tables held at the end.
    pub tracked: usize,
    /// The misuse occurrences, judged.
    pub judge: &'a crate::judge::Judge,
    /// Page blocks still allocated at the end.
    pub live_pages: &'a crate::passes::pages::LivePages,
    /// The kernel functions the page allocator's rule matches
    /// ([`crate::page_callers::allocator_functions`]).
    pub allocator_functions: Vec<String>,
}

/// The report, and the worst severity among certain findings.
pub struct Built {
    pub report: Report,
    pub worst: Option<Severity>,
}

/// The sections the passes make themselves, from what they may read.
fn pass_sections(
    ctx: &Ctx<'_>,
    windows: &crate::stream::losses::Windows,
    stacks: &[Box<[u64]>],
    summaries: &[crate::stream::CpuSummary],
) -> crate::model::PassSections {
    let last_ts = summaries
        .iter()
        .filter_map(|s| s.last_ts)
        .max()
        .unwrap_or(ctx.first_ts);
    crate::model::PassSections::of(
        ctx.an,
        &crate::passes::SectionContext {
            log: ctx.log,
            syms: ctx.syms,
            windows,
            names: &ctx.names,
            stacks,
            gfp: ctx.gfp,
            span: (ctx.first_ts, last_ts),
        },
    )
}

/// Builds the report.
pub fn build(
    log: &Log,
    syms: &Symbols,
    opts: &Options,
    kmem: &KmemDecoder,
    found: Found<'_>,
    end: StreamEnd,
    leaks: Vec<LeakGroup>,
) -> Built {
    let StreamEnd {
        windows,
        summaries,
        cache_names: names,
        stacks,
        ..
    } = end;
    let windows = &windows;
    let an = found.passes;
    let first_ts = an
        .first_ts
        .or_else(|| summaries.iter().filter_map(|s| s.first_ts).min())
        .unwrap_or(0);
    let ctx = Ctx {
        log,
        an,
        sites: found.sites,
        tracked: found.tracked,
        opts,
        syms,
        names,
        first_ts,
        gfp: kmem.gfp_table(),
        allocator_functions: found.allocator_functions,
    };
    let a = &log.arch;

    let (capture, problems) = capture(&ctx, kmem, &summaries, windows);
    let summary = summary(&ctx);
    let callsites = callsites(&ctx);
    let (caches, size_classes) = caches(&ctx);
    let sections = pass_sections(&ctx, windows, &stacks, &summaries);
    let mut tasks = kmemtrace_import::tasks::TaskSightings::default();
    for c in &summaries {
        tasks.absorb(&c.tasks);
    }
    let evidence = misuse::Evidence {
        untraced: &an.untraced,
        unrecorded: tasks.unrecorded(misuse::UNRECORDED_MIN_RUNS),
        pid_filtered: log
            .meta(
                kmemtrace_format::records::MetaKind::Other,
                kmemtrace_import::tasks::PID_FILTER_META,
            )
            .is_some(),
    };
    let (misuse, worst) = misuse::findings(&ctx, an, found.judge, &evidence, a.release.as_deref());
    let trace_completeness = misuse::completeness(&ctx, &evidence);
    let pages = pages::section(
        &ctx,
        &an.pages,
        found.live_pages,
        &summaries,
        &stacks,
        windows,
    );
    let leaks_m = leak_section(&ctx, &leaks);
    let allocs = allocs(&ctx);

    let f = &opts.filter;
    let sorted_set = |s: &Option<std::collections::HashSet<u32>>| {
        s.as_ref().map(|s| {
            let mut v: Vec<u32> = s.iter().copied().collect();
            v.sort_unstable();
            v
        })
    };
    let report = Report {
        schema: SCHEMA.into(),
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
            byte_order: log.endian.name().into(),
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
            recorder_tasks: {
                let mut v: Vec<i32> = f.recorder.iter().copied().collect();
                v.sort_unstable();
                v
            },
        },
        capture,
        summary,
        sort: opts.sort.iter().map(|k| k.name().to_string()).collect(),
        lines: opts.lines,
        callsites,
        caches,
        size_classes,
        sections,
        misuse,
        trace_completeness,
        leaks: leaks_m,
        allocs,
        page_allocator: an.pages.stats(),
        pages,
        live_timeline: running(&an.slab.live_series),
        page_timeline: running(&an.pages.held_series),
        timelines: timelines(&ctx),
        problems,
        sources: None,
    };
    Built { report, worst }
}

/// The capture section (CPUs, losses), and the problems met.
fn capture(
    cx: &Ctx<'_>,
    kmem: &KmemDecoder,
    summaries: &[crate::stream::CpuSummary],
    windows: &crate::stream::Windows,
) -> (Capture, Vec<Problem>) {
    let log = cx.log;
    let mut problems: Vec<Problem> = log.problems.iter().cloned().map(Problem::Log).collect();
    for w in kmem.warnings() {
        problems.push(Problem::Format(w.to_string()));
    }
    // One pass over the statistics: END may list millions of CPUs.
    let counters = log.counters_by_cpu();
    let cpu_rows: Vec<CpuRow> = summaries
        .iter()
        .map(|s| {
            for p in &s.problems {
                problems.push(Problem::Data {
                    cpu: s.cpu,
                    problem: p.clone(),
                });
            }
            if s.problems_dropped > 0 {
                problems.push(Problem::NotListed {
                    cpu: s.cpu,
                    count: s.problems_dropped,
                });
            }
            // Only a capture's end says what it lost: a periodic look is
            // a lower bound.
            let lost_stats = counters
                .get(&s.cpu)
                .filter(|r| r.end.record.phase == StatsPhase::End)
                .map(|r| r.counters.lost());
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
    let window_list = windows.list();
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
        lost_windows_total: windows.len(),
        lost_windows_rotated: window_list
            .iter()
            .filter(|w| w.cause == kmemtrace_kernel::losses::Cause::Rotated)
            .count(),
        lost_windows: window_list
            .iter()
            .take(1000)
            .map(|w| LostWindow {
                cpu: w.cpu,
                start_ns: w.start,
                end_ns: (w.end != u64::MAX).then_some(w.end),
                cause: w.cause.name().to_string(),
            })
            .collect(),
        tracked_pointers: cx.tracked,
    };

    (capture, problems)
}

/// Bytes allocated less bytes freed, at the ends of `i64` where a damaged
/// log's sizes (each up to a field's width) add up beyond them.
fn net_bytes(allocated: u64, freed: u64) -> i64 {
    let net = i128::from(allocated) - i128::from(freed);
    i64::try_from(net).unwrap_or(if net > 0 { i64::MAX } else { i64::MIN })
}

/// Totals as `perf kmem stat` prints them.
fn summary(cx: &Ctx<'_>) -> Summary {
    let (log, an) = (cx.log, cx.an);
    let t = &an.slab.totals;
    Summary {
        alloc_events: t.alloc_events,
        failed_allocs: t.agg.failed,
        free_events: t.free_events,
        null_frees: t.null_frees,
        bytes_requested: t.agg.bytes_req,
        bytes_allocated: t.agg.bytes_alloc,
        bytes_freed: t.agg.freed_bytes,
        net_bytes_allocated: net_bytes(t.agg.bytes_alloc, t.agg.freed_bytes),
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
    }
}

fn running(b: &TimeBins) -> TimeSeries {
    TimeSeries {
        bin_ns: b.bin_ns(),
        points: b.running(),
    }
}

fn per_bin(b: &TimeBins) -> TimeSeries {
    TimeSeries {
        bin_ns: b.bin_ns(),
        points: b.per_bin(),
    }
}

/// The per-CPU rates and the live bytes of the call sites with the
/// highest peaks, when the passes kept them.
fn timelines(cx: &Ctx<'_>) -> Option<Timelines> {
    let an = cx.an;
    let rates = |r: &CpuRates| -> Vec<CpuRateSeries> {
        r.iter()
            .map(|(cpu, a, f)| CpuRateSeries {
                cpu,
                allocs: per_bin(a),
                frees: per_bin(f),
            })
            .collect()
    };
    let site_bins = an.slab.site_live.as_ref()?;
    let mut top: Vec<(u64, String, &TimeBins)> = site_bins
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .filter_map(|(id, b)| {
            let peak = an.slab.sites.get(id)?.agg.peak_live_bytes;
            Some((peak, cx.syms.name(cx.addr(id as u32)), b))
        })
        .collect();
    top.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    top.truncate(Timelines::TOP_SITES);
    Some(Timelines {
        slab_rates: an.slab.rates.as_ref().map(rates).unwrap_or_default(),
        page_rates: an.pages.rates.as_ref().map(rates).unwrap_or_default(),
        site_live: top
            .into_iter()
            .map(|(peak, callsite, b)| SiteSeries {
                callsite,
                peak_live_bytes: peak,
                live: running(b),
            })
            .collect(),
    })
}

/// Call sites (allocation sites; free-only sites are in JSON too).
fn callsites(cx: &Ctx<'_>) -> Vec<CallsiteRow> {
    let (an, opts, syms, ctx) = (cx.an, cx.opts, cx.syms, cx);
    let mut callsites: Vec<CallsiteRow> = an
        .slab
        .sites
        .iter()
        .enumerate()
        .filter(|(_, s)| s.agg.hits > 0 || s.free_calls > 0)
        .map(|(id, s)| {
            let addr = ctx.addr(id as u32);
            let g = &s.agg;
            let kinds = s.kind_names().map(Into::into).collect();
            let mut gfp: Vec<Gfp> = s.gfp.iter().map(|&(v, c, _)| ctx.gfp(v, c)).collect();
            gfp.sort_by_key(|g| std::cmp::Reverse(g.count));
            let misuse = crate::passes::misuse::Misuse::ALL
                .iter()
                .filter_map(|&m| {
                    let n = an.misuse.findings[m as usize]
                        .alloc_sites
                        .get(&(id as u32))?;
                    Some((m.id().into(), *n))
                })
                .collect();
            CallsiteRow {
                callsite: syms.name(addr),
                addr: Addr(addr),
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
                misuse,
                gfp,
                gfp_other: s.gfp_other,
            }
        })
        .collect();
    // Allocation sites first, then free-only ones; equal keys by address
    // (site ids depend on which decoder saw a site first).
    callsites.sort_by_key(|a| (a.hits == 0, a.addr));
    let split = callsites
        .iter()
        .position(|r| r.hits == 0)
        .unwrap_or(callsites.len());
    sort_rows(&mut callsites[..split], &opts.sort, figure_key);
    sort_rows(&mut callsites[split..], &[SortKey::Callsite], figure_key);
    // Tie-break stability by address is already given by sort order of
    // equal keys being the site order (first seen).
    if let Some(l) = opts.lines {
        callsites.truncate(l);
    }
    callsites
}

/// Caches and kmalloc size classes.
fn caches(cx: &Ctx<'_>) -> (Vec<CacheRow>, Vec<CacheRow>) {
    let (an, opts, log, ctx) = (cx.an, cx.opts, cx.log, cx);
    let cache_row = |name: String, size: Option<u64>, g: &crate::passes::slab::Agg| CacheRow {
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
    let mut caches: Vec<CacheRow> = an
        .slab
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
    sort_rows(&mut caches, &opts.sort, figure_key);
    let mut size_classes: Vec<CacheRow> = an
        .slab
        .size_classes()
        .map(|(size, g)| cache_row(size_class_name(size, page_size_of(log)), Some(size), g))
        .collect();
    size_classes.sort_by_key(|r| r.object_size);
    if let Some(l) = opts.lines {
        caches.truncate(l);
        size_classes.truncate(l);
    }
    (caches, size_classes)
}

/// Leak groups, largest first.
fn leak_section(cx: &Ctx<'_>, leaks: &[LeakGroup]) -> Leaks {
    let (an, opts, syms) = (cx.an, cx.opts, cx.syms);
    let end = an.last_ts;
    let leak_rows: Vec<LeakRow> = leaks
        .iter()
        .map(|g| LeakRow {
            callsite: syms.name(cx.addr(g.site)),
            addr: Addr(cx.addr(g.site)),
            objects: g.objects,
            bytes: g.bytes,
            oldest_age_ns: (g.objects > 0).then(|| end.saturating_sub(g.oldest_ts)),
            newest_age_ns: (g.objects > 0).then(|| end.saturating_sub(g.newest_ts)),
            uncertain: g.uncertain,
            site_missed_frees: an
                .slab
                .sites
                .get(g.site as usize)
                .map_or(0, |s| s.missed_frees),
            freed_untraced: g.freed_untraced,
            freed_untraced_bytes: g.freed_untraced_bytes,
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
        freed_untraced: leak_rows.iter().map(|r| r.freed_untraced).sum(),
        freed_untraced_bytes: leak_rows.iter().map(|r| r.freed_untraced_bytes).sum(),
        groups_total: leak_rows.len(),
        groups: leak_rows,
    };
    if let Some(l) = opts.lines {
        leaks_m.groups.truncate(l);
    }
    leaks_m
}

/// Per pointer (`--alloc`).
fn allocs(cx: &Ctx<'_>) -> Option<Vec<AllocRow>> {
    let (an, opts, syms) = (cx.an, cx.opts, cx.syms);
    an.slab.ptrs.as_ref().map(|p| {
        let mut v: Vec<AllocRow> = p
            .iter()
            .map(|(&ptr, g)| AllocRow {
                ptr: Addr(ptr),
                callsite: syms.name(cx.addr(g.site)),
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
    })
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
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("kmalloc-{}k", size / 1024)
    } else {
        format!("kmalloc-{size}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn net_bytes_stop_at_the_ends_of_i64() {
        assert_eq!(net_bytes(10, 3), 7);
        assert_eq!(net_bytes(3, 10), -7);
        assert_eq!(net_bytes(u64::MAX, 0), i64::MAX);
        assert_eq!(net_bytes(1 << 63, 1), i64::MAX);
        assert_eq!(net_bytes(0, u64::MAX), i64::MIN);
        assert_eq!(net_bytes(u64::MAX, u64::MAX), 0);
    }
}
