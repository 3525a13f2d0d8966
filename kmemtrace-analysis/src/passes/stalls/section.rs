//! The stall pass's section of the model, from its state added up over the
//! shards.

use super::folded::{EpTimes, Folded, Group};
use super::{stall_site_index, Background, Ep, Kill, Reaping, StallsPass, Wait, WaitTotals};
use crate::intern::NO_STACK;
use crate::model::stalls::*;
use crate::passes::SectionContext;
use kmemtrace_kernel::FlagTable;
use std::collections::{BTreeMap, HashMap};

/// Episodes listed in full.
pub const LONGEST: usize = 20;
/// About this many bins over the capture.
const BINS: u64 = 50;

/// How the section names what the pass holds.
struct Names<'x> {
    ctx: &'x SectionContext<'x>,
    /// `mm_compaction_end`'s status names by value (the first entry of a
    /// value, as the kernel's `__print_symbolic` prints it).
    status: HashMap<u64, String>,
}

impl Names<'_> {
    fn comm(&self, pid: i32) -> Option<String> {
        self.ctx.log.pids.comm(pid).map(str::to_string)
    }

    /// The call site of the stack the kernel took with a stall event.
    fn site(&self, stack: u32) -> Option<String> {
        self.site_addr(stack).map(|a| self.ctx.syms.name(a))
    }

    /// Its address.
    fn site_addr(&self, stack: u32) -> Option<u64> {
        if stack == NO_STACK {
            return None;
        }
        let frames = self.ctx.stacks.get(stack as usize)?;
        let i = stall_site_index(frames, self.ctx.syms.table.as_ref())?;
        Some(frames[i])
    }

    /// A memcg reclaim a write to the cgroup's files asked for (its stack
    /// passes through the file's handler), not an allocation's charge:
    /// an episode whose first wait is `first`, under `stack`.
    fn proactive(&self, first: Wait, stack: u32) -> bool {
        const HANDLERS: [&str; 4] = [
            "memory_reclaim",
            "memory_high_write",
            "memory_max_write",
            "mem_cgroup_resize_max",
        ];
        let (Some(k), Some(frames)) = (
            self.ctx.syms.table.as_ref(),
            self.ctx.stacks.get(stack as usize),
        ) else {
            return false;
        };
        first == Wait::Memcg
            && stack != NO_STACK
            && frames.iter().any(|&a| {
                k.resolve(a)
                    .is_some_and(|s| HANDLERS.contains(&crate::page_callers::base_name(s.name)))
            })
    }

    /// An episode's call site: under `stack`, else of the slab
    /// allocation that ended it.
    fn episode_site(&self, stack: u32, slab_site: Option<u64>) -> Option<String> {
        self.episode_site_addr(stack, slab_site)
            .map(|a| self.ctx.syms.name(a))
    }

    fn episode_site_addr(&self, stack: u32, slab_site: Option<u64>) -> Option<u64> {
        self.site_addr(stack).or(slab_site)
    }

    fn gfp(&self, v: Option<u64>) -> Option<crate::model::Gfp> {
        v.map(|v| crate::build::gfp_of(self.ctx.gfp, v, 1))
    }

    /// A compaction phase's zones by result: `2 partial_skipped, 1 success`.
    fn statuses(&self, s: &super::Statuses) -> String {
        let parts: Vec<String> = s
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(v, n)| format!("{n} {}", self.status(v as i64)))
            .collect();
        parts.join(", ")
    }

    fn status(&self, v: i64) -> String {
        match self.status.get(&(v as u64)) {
            Some(name) => name.clone(),
            None => format!("status {v}"),
        }
    }
}

/// The section.
pub fn build(p: &StallsPass, ctx: &SectionContext<'_>) -> Stalls {
    let not_recorded = not_recorded(ctx);
    let busy_recorded = kmemtrace_kernel::stalls::BUSY_STALL_EVENTS
        .iter()
        .any(|t| has_format(ctx, t));
    if not_recorded.len() == kmemtrace_kernel::stalls::STALL_EVENTS.len() && !busy_recorded {
        return Stalls::default();
    }
    let status = ctx
        .log
        .formats
        .iter()
        .find(|f| f.system == "compaction" && f.name == "mm_compaction_end")
        .and_then(|f| FlagTable::for_field(&f.print_fmt, "status").ok().flatten());
    let mut names = HashMap::new();
    for e in status.iter().flat_map(|t| &t.entries) {
        names.entry(e.value).or_insert_with(|| e.name.clone());
    }
    let n = Names { ctx, status: names };
    // Episodes the capture's end cut, their open waits counted to it.
    let mut cut: Vec<Ep> = p.open.values().map(|e| e.finished_at(ctx.span.1)).collect();
    // By task, not in the map's order (which differs from run to run).
    cut.sort_by_key(|e| e.pid);
    let cut_folded = Folded::of(&cut);
    let view = View::new(&n, [&p.folded, &cut_folded]);
    // The longest: among those kept whole (or every episode, where all
    // are kept) and those cut.
    let whole: Vec<&Ep> = if p.keep_all {
        p.ended.iter().collect()
    } else {
        p.longest.iter().collect()
    };
    let mut eps: Vec<&Ep> = whole
        .into_iter()
        .chain(&cut)
        .filter(|e| !n.proactive(e.first, e.stack))
        .collect();
    // The kept episodes come per class from a map: ordered in full here
    // (the class is the stack of a memcg wait).
    eps.sort_by_key(|e| (e.start, e.pid, e.cpu, e.last, e.stack, e.first as u8));
    let uncertain = |start: u64, last: u64, cut: bool| cut || ctx.windows.touches(start, last);
    // A stable sort: ties keep their order by start and pid.
    let mut longest: Vec<&Ep> = eps.clone();
    longest.sort_by(|a, b| b.stall_ns().cmp(&a.stall_ns()).then(a.start.cmp(&b.start)));
    longest.truncate(LONGEST);
    let model = |e: &&Ep| episode(&n, e, uncertain(e.start, e.last, e.cut));
    let charged = || view.episodes(false);
    Stalls {
        recorded: true,
        events: p.events,
        episodes: charged().count() as u64,
        stall_ns: charged()
            .map(|(t, ..)| t.stall_ns)
            .fold(0, u64::saturating_add),
        uncertain_episodes: charged()
            .filter(|(t, ..)| uncertain(t.start, t.last, t.cut))
            .count() as u64,
        kinds: kinds(view.groups(false)),
        tasks: tasks(&n, &view),
        sites: sites(&n, &view),
        longest: longest.iter().map(model).collect(),
        // Every episode only where an output lists them all: a long
        // capture under pressure has hundreds of thousands.
        all: if p.keep_all {
            eps.iter().map(model).collect()
        } else {
            Vec::new()
        },
        over_time: over_time(ctx, &view),
        background: background(&p.background),
        wakers: wakers(&n, p),
        oom_kills: {
            let reaping = reaping_by_victim(p);
            p.kills.iter().map(|k| oom_kill(&n, &reaping, k)).collect()
        },
        shrinkers: shrinkers(ctx, p),
        proactive: ProactiveReclaim {
            reclaims: view
                .groups(true)
                .map(|g| g.waits[Wait::Memcg as usize].phases)
                .sum(),
            ns: view
                .episodes(true)
                .map(|(t, ..)| t.stall_ns)
                .fold(0, u64::saturating_add),
            pages_reclaimed: view
                .groups(true)
                .map(|g| g.waits[Wait::Memcg as usize].pages)
                .fold(0, u64::saturating_add),
        },
        unpaired: Unpaired {
            ends_without_begin: p.ends_without_begin,
            begins_without_end: p.begins_without_end
                + p.open
                    .values()
                    .map(|e| e.open.iter().filter(|w| w.wait.is_reclaim()).count() as u64)
                    .sum::<u64>(),
            open_at_end: p.open.len() as u64,
        },
        not_recorded,
    }
}

/// The stall events the log has no format for.
fn not_recorded(ctx: &SectionContext<'_>) -> Vec<String> {
    kmemtrace_kernel::stalls::STALL_EVENTS
        .iter()
        .filter(|t| !has_format(ctx, t))
        .map(|t| t.to_string())
        .collect()
}

/// The log has the format of tracepoint `t` (`system:name`).
fn has_format(ctx: &SectionContext<'_>, t: &str) -> bool {
    let (system, name) = t.split_once(':').unwrap_or(("", t));
    ctx.log
        .formats
        .iter()
        .any(|f| f.system == system && f.name == name)
}

/// The folded episodes, of the pass and of those the capture's end cut,
/// with which of their groups are proactive reclaim.
struct View<'f> {
    parts: [(&'f Folded, Vec<bool>); 2],
}

impl<'f> View<'f> {
    fn new(n: &Names<'_>, parts: [&'f Folded; 2]) -> View<'f> {
        let proactive = |f: &Folded| {
            f.groups
                .iter()
                .map(|g| n.proactive(g.key.first, g.key.stack))
                .collect()
        };
        View {
            parts: parts.map(|f| (f, proactive(f))),
        }
    }

    /// The groups that are (or are not) proactive reclaim.
    fn groups(&self, proactive: bool) -> impl Iterator<Item = &Group> + '_ {
        self.parts.iter().flat_map(move |(f, p)| {
            f.groups
                .iter()
                .zip(p)
                .filter(move |(_, &is)| is == proactive)
                .map(|(g, _)| g)
        })
    }

    /// The episodes that are (or are not) proactive reclaim, with their
    /// groups and their part's index.
    fn episodes(&self, proactive: bool) -> impl Iterator<Item = (&EpTimes, &Group, usize)> + '_ {
        self.parts.iter().enumerate().flat_map(move |(i, (f, p))| {
            f.episodes
                .iter()
                .filter(move |t| p[t.group as usize] == proactive)
                .map(move |t| (t, &f.groups[t.group as usize], i))
        })
    }

    /// Each group's value of `key`, per part, for the episodes to look up.
    fn per_group<K>(&self, key: impl Fn(&Group) -> K) -> [Vec<K>; 2] {
        [0, 1].map(|i| self.parts[i].0.groups.iter().map(&key).collect())
    }
}

fn tasks(n: &Names<'_>, view: &View<'_>) -> Vec<StallTaskRow> {
    let mut by_pid: BTreeMap<i32, (u64, u64, Vec<&Group>)> = BTreeMap::new();
    for (t, g, _) in view.episodes(false) {
        let e = by_pid.entry(g.key.pid).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(t.stall_ns);
    }
    for g in view.groups(false) {
        by_pid.entry(g.key.pid).or_default().2.push(g);
    }
    let mut rows: Vec<StallTaskRow> = by_pid
        .into_iter()
        .map(|(pid, (episodes, stall_ns, groups))| StallTaskRow {
            pid,
            comm: n.comm(pid),
            episodes,
            stall_ns,
            waits: kinds(groups.into_iter()),
        })
        .collect();
    rows.sort_by(|a, b| b.stall_ns.cmp(&a.stall_ns).then(a.pid.cmp(&b.pid)));
    rows
}

fn kinds<'g>(groups: impl Iterator<Item = &'g Group>) -> Vec<StallKindRow> {
    let mut sums = [WaitTotals::default(); 7];
    for g in groups {
        for (s, w) in sums.iter_mut().zip(&g.waits) {
            s.add(w);
        }
    }
    Wait::ALL
        .iter()
        .map(|&w| {
            let s = sums[w as usize];
            StallKindRow {
                kind: w.name().into(),
                phases: s.phases,
                ns: s.ns,
                pages_reclaimed: s.pages,
            }
        })
        .filter(|r| r.phases > 0 || r.pages_reclaimed > 0)
        .collect()
}

fn sites(n: &Names<'_>, view: &View<'_>) -> Vec<StallSiteRow> {
    type Key = (
        Wait,
        Option<String>,
        Option<u32>,
        Option<u64>,
        Option<String>,
    );
    // Names resolved once a group, not once an episode.
    let key = |g: &Group| -> Key {
        let k = &g.key;
        let site = n.episode_site(k.stack, k.slab_site);
        (k.first, site, k.order, k.gfp, n.comm(k.pid))
    };
    let mut rows_of: BTreeMap<Key, (Vec<u64>, u64)> = BTreeMap::new();
    let keys = view.per_group(key);
    for (t, _, i) in view.episodes(false) {
        let k = &keys[i][t.group as usize];
        match rows_of.get_mut(k) {
            Some(r) => r.0.push(t.stall_ns),
            None => {
                rows_of.insert(k.clone(), (vec![t.stall_ns], 0));
            }
        }
    }
    for (i, (f, proactive)) in view.parts.iter().enumerate() {
        for (j, g) in f.groups.iter().enumerate().filter(|&(j, _)| !proactive[j]) {
            if let Some(r) = rows_of.get_mut(&keys[i][j]) {
                let pages = g.waits.iter().map(|w| w.pages);
                r.1 = pages.fold(r.1, u64::saturating_add);
            }
        }
    }
    let mut rows: Vec<StallSiteRow> = rows_of
        .into_iter()
        .map(
            |((w, callsite, order, gfp, comm), (mut ns, pages_reclaimed))| {
                ns.sort_unstable();
                let pct = |q: f64| percentile(&ns, q);
                StallSiteRow {
                    kind: w.name().into(),
                    callsite,
                    order,
                    gfp: n.gfp(gfp),
                    comm,
                    episodes: ns.len() as u64,
                    total_ns: ns.iter().copied().fold(0, u64::saturating_add),
                    p50_ns: pct(0.50),
                    p90_ns: pct(0.90),
                    p99_ns: pct(0.99),
                    max_ns: ns.last().copied().unwrap_or(0),
                    pages_reclaimed,
                    histogram: histogram(&ns),
                }
            },
        )
        .collect();
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then(b.episodes.cmp(&a.episodes))
    });
    rows
}

/// The nearest-rank percentile of sorted `v`.
pub fn percentile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = (q * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Counts per power-of-two bucket: `d` falls in the one whose `below_ns`
/// is the least power of two above it (`u64::MAX` above 2^63, where a
/// saturated sum of a hostile log's phases may land).
pub fn histogram(v: &[u64]) -> Vec<HistBucket> {
    let mut b: BTreeMap<u64, u64> = BTreeMap::new();
    for &d in v {
        let below = d
            .checked_add(1)
            .and_then(u64::checked_next_power_of_two)
            .unwrap_or(u64::MAX);
        *b.entry(below).or_default() += 1;
    }
    b.into_iter()
        .map(|(below_ns, count)| HistBucket { below_ns, count })
        .collect()
}

fn episode(n: &Names<'_>, e: &Ep, uncertain: bool) -> Episode {
    let wait = |w: Wait| e.per_wait[w as usize];
    let reclaim: Vec<_> = Wait::ALL
        .iter()
        .filter(|w| w.is_reclaim())
        .map(|&w| wait(w))
        .collect();
    // By count, then name, then value: two values of one name (a
    // hostile table's) would otherwise fall in the map's order.
    let mut results: Vec<(i64, Count)> = e
        .compaction_results
        .iter()
        .map(|(&s, &count)| {
            let name = n.status(s);
            (s, Count { name, count })
        })
        .collect();
    results.sort_by(|(sa, a), (sb, b)| {
        (b.count.cmp(&a.count))
            .then(a.name.cmp(&b.name))
            .then(sa.cmp(sb))
    });
    let results: Vec<Count> = results.into_iter().map(|(_, c)| c).collect();
    Episode {
        pid: e.pid,
        comm: n.comm(e.pid),
        cpu: u32::from(e.cpu),
        start_ns: e.start,
        span_ns: e.last.saturating_sub(e.start),
        stall_ns: e.stall_ns(),
        kind: e.first.name().into(),
        callsite: n.episode_site(e.stack, e.slab_site),
        callsite_addr: n.episode_site_addr(e.stack, e.slab_site),
        order: e.order,
        gfp: n.gfp(e.gfp),
        reclaims: reclaim.iter().map(|r| r.phases).sum(),
        reclaim_ns: reclaim.iter().map(|r| r.ns).fold(0, u64::saturating_add),
        pages_reclaimed: reclaim.iter().map(|r| r.pages).fold(0, u64::saturating_add),
        compactions: wait(Wait::Compaction).phases,
        compaction_ns: wait(Wait::Compaction).ns,
        compaction_results: results,
        throttles: wait(Wait::Throttle).phases,
        throttle_ns: wait(Wait::Throttle).ns,
        retries: e.retries,
        kswapd_wakeups: e.kswapd_wakeups,
        oom_victim: e.victim,
        ended_by: e.ended_by.unwrap_or("capture end").into(),
        phases: e
            .phases
            .iter()
            .map(|p| Phase {
                kind: p.wait.name().into(),
                start_ns: p.start,
                ns: p.ns,
                detail: match p.wait {
                    Wait::Compaction => n.statuses(&p.statuses),
                    Wait::Throttle => format!("reason {}", p.detail),
                    _ => format!("{} pages", p.detail),
                },
            })
            .collect(),
        uncertain,
    }
}

fn over_time(ctx: &SectionContext<'_>, view: &View<'_>) -> StallSeries {
    let (first, last) = ctx.span;
    let bin_ns = ((last.saturating_sub(first)) / BINS)
        .max(1)
        .next_power_of_two();
    let mut bins: BTreeMap<u64, StallBin> = BTreeMap::new();
    for (e, ..) in view.episodes(false) {
        let start_ns = e.start / bin_ns * bin_ns;
        let b = bins.entry(start_ns).or_insert(StallBin {
            start_ns,
            ..Default::default()
        });
        b.episodes += 1;
        b.stall_ns = b.stall_ns.saturating_add(e.stall_ns);
    }
    StallSeries {
        bin_ns,
        bins: bins.into_values().collect(),
    }
}

fn background(m: &crate::intern::FastMap<(bool, i32), Background>) -> Vec<BackgroundRow> {
    let mut rows: Vec<BackgroundRow> = m
        .iter()
        // A sleep with no wake before it: awake since before the capture.
        .filter(|(_, b)| b.wake_events > 0 || b.awake_ns > 0)
        .map(|(&(kcompactd, node), b)| {
            let mut orders: Vec<OrderCount> = b
                .orders
                .iter()
                .map(|(&order, &count)| OrderCount { order, count })
                .collect();
            orders.sort_by_key(|o| o.order);
            BackgroundRow {
                thread: if kcompactd { "kcompactd" } else { "kswapd" }.into(),
                node,
                wakes: b.wakes,
                wake_events: b.wake_events,
                awake_ns: b.awake_ns,
                orders,
                awake_at_end: b.awake_since.is_some(),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.thread.cmp(&b.thread).then(a.node.cmp(&b.node)));
    rows
}

fn wakers(n: &Names<'_>, p: &StallsPass) -> Vec<WakerRow> {
    let mut m: BTreeMap<(bool, Option<String>, i32), u64> = BTreeMap::new();
    for (&(kcompactd, stack, order), &count) in &p.wakers {
        *m.entry((kcompactd, n.site(stack), order)).or_default() += count;
    }
    let mut rows: Vec<WakerRow> = m
        .into_iter()
        .map(|((kcompactd, callsite, order), wakeups)| WakerRow {
            thread: if kcompactd { "kcompactd" } else { "kswapd" }.into(),
            callsite,
            order,
            wakeups,
        })
        .collect();
    rows.sort_by(|a, b| {
        a.thread
            .cmp(&b.thread)
            .then(b.wakeups.cmp(&a.wakeups))
            .then(a.order.cmp(&b.order))
    });
    rows
}

/// The OOM reaper's work per victim, by start (the order found among
/// equal starts).
pub(super) fn reaping_by_victim(p: &StallsPass) -> HashMap<i32, Vec<Reaping>> {
    let mut m: HashMap<i32, Vec<Reaping>> = HashMap::new();
    for &r in &p.reaping {
        m.entry(r.victim).or_default().push(r);
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| r.start);
    }
    m
}

/// How long the OOM reaper took over `victim`'s first reaping from `ts` on.
pub(super) fn reaped_ns(reaping: &HashMap<i32, Vec<Reaping>>, victim: i32, ts: u64) -> Option<u64> {
    let v = reaping.get(&victim)?;
    let r = v.get(v.partition_point(|r| r.start < ts))?;
    r.end.map(|end| end.saturating_sub(r.start))
}

fn oom_kill(n: &Names<'_>, reaping: &HashMap<i32, Vec<Reaping>>, k: &Kill) -> OomKill {
    let reaped = reaped_ns(reaping, k.victim, k.ts);
    let victim_comm = k
        .victim_comm
        .and_then(|id| n.ctx.names.get(id as usize).cloned())
        .or_else(|| n.comm(k.victim));
    let ep = k.episode.as_ref();
    OomKill {
        ts_ns: k.ts,
        victim_pid: k.victim,
        victim_comm,
        victim_rss_kb: k.rss_kb,
        killer_pid: k.killer,
        killer_comm: n.comm(k.killer),
        callsite: ep.and_then(|e| n.episode_site(e.stack, e.slab_site)),
        order: ep.and_then(|e| e.order),
        gfp: n.gfp(ep.and_then(|e| e.gfp)),
        stalled_ns: ep.map_or(0, |e| e.stall_ns),
        waited_ns: ep.map_or(0, |e| k.ts.saturating_sub(e.start)),
        phases_before: ep.map_or(0, |e| e.phases),
        reaped_ns: reaped,
    }
}

fn shrinkers(ctx: &SectionContext<'_>, p: &StallsPass) -> Vec<ShrinkerRow> {
    let mut rows: Vec<(u64, ShrinkerRow)> = p
        .shrinkers
        .iter()
        .map(|(&f, t)| {
            let row = ShrinkerRow {
                shrinker: ctx.syms.name(f),
                calls: t.calls,
                scanned: t.scanned,
                freed: t.freed,
                ns: t.ns,
            };
            (f, row)
        })
        .collect();
    // Two functions may share a name: then by address.
    rows.sort_by(|(fa, a), (fb, b)| {
        b.ns.cmp(&a.ns)
            .then(a.shrinker.cmp(&b.shrinker))
            .then(fa.cmp(fb))
    });
    rows.into_iter().map(|(_, r)| r).collect()
}
