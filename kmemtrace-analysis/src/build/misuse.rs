//! The misuse section: each kind described, judged (kfree() of a
//! kmem_cache object by the recorded kernel's release), its occurrences
//! told apart (lost events, the capture's edges, untraced traffic the
//! capture shows), and summarised; and the trace-completeness section.

use super::Ctx;
use crate::intern::FastMap;
use crate::judge::{DoubleFree, Judge, Judged, TaskFree, Where, TOGETHER_NS};
use crate::model::{
    Addr, Finding, FindingReason, Severity, TraceCompleteness, UnrecordedTask, UntracedRow,
};
use crate::passes::misuse::{FindingAgg, Misuse, Occurrence};
use crate::passes::objects::NO_SITE;
use crate::passes::untraced::{Group, Pointers, Traffic, UntracedPass};
use crate::passes::Passes;
use crate::stream::OrderKey;
use kmemtrace_kernel::human::thousands;

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

/// A group's name in the report.
fn group_name(ctx: &Ctx<'_>, g: Group) -> String {
    match g {
        Group::Cache(id) => ctx.cache(id).unwrap_or_default(),
        Group::Kmalloc(n) => format!("kmalloc-{n}"),
        Group::KmallocUnknownSize => "kmalloc (size unknown)".into(),
        Group::UnnamedCache => "a kmem_cache (unnamed)".into(),
        Group::None => String::new(),
    }
}

/// What the capture shows of untraced traffic, and whether the log was
/// recorded with a pid filter.
pub(crate) struct Evidence<'a> {
    pub untraced: &'a UntracedPass,
    /// Tasks that ran (switched to from idle) with no event of their own
    /// in the trace: (pid, times).
    pub unrecorded: Vec<(i32, u32)>,
    pub pid_filtered: bool,
}

/// Switches from idle a task needs before its having no event of its own
/// says the kernel does not record it (a task that ran once may simply
/// have gone on to another task each time, never back to idle, without
/// allocating).
pub(crate) const UNRECORDED_MIN_RUNS: u32 = 3;

/// The kinds whose occurrences the capture's own evidence can set apart,
/// each with its reason.
fn can_be_set_apart(m: Misuse) -> bool {
    matches!(
        m,
        Misuse::DoubleFree | Misuse::LivePointerReturned | Misuse::CacheMismatch
    )
}

impl Evidence<'_> {
    /// Why the occurrences of `m` at `w` are set apart, if they are.
    fn explains(&self, ctx: &Ctx<'_>, m: Misuse, w: &Where) -> Option<String> {
        if !can_be_set_apart(m) {
            return None;
        }
        if self.pid_filtered {
            return Some("recorded with a pid filter: the kernel dropped every other task's events, and with them RCU callbacks, interrupts and workers run while those tasks were current".into());
        }
        let t = self
            .untraced
            .groups
            .get(&w.group)
            .copied()
            .unwrap_or_default();
        let name = group_name(ctx, w.group);
        let site = self.untraced.site(w.site);
        let site_name = || ctx.syms.name(ctx.addr(w.site));
        if m == Misuse::CacheMismatch {
            // The allocation's cache loses frees to untraced paths: the
            // object went back untraced, its slab page to the page
            // allocator, and the memory came back in another cache through
            // an allocation the trace did not show either (slab sheaves
            // move both ways in bulk).
            return (w.group != Group::UnnamedCache && t.untraced_frees()).then(|| {
                format!(
                    "{name} has pointers returned while live on more than one object ({} in all): it is freed by a path the kernel does not trace, and the memory was reused by another cache through an allocation the trace did not show",
                    thousands(t.live_returned)
                )
            });
        }
        if m == Misuse::LivePointerReturned {
            // Caches whose events name none share one group: too coarse.
            if w.group != Group::UnnamedCache && t.untraced_frees() {
                return Some(format!(
                    "{name} has pointers returned while live on more than one object ({} in all): it is freed by a path the kernel does not trace (kfree_rcu's kfree_bulk, kmem_cache_free_bulk, slab sheaves)",
                    thousands(t.live_returned)
                ));
            }
            return (w.site != NO_SITE && site.matched_frees_of_its_objects == 0).then(|| {
                format!(
                    "no object allocated at {} is ever seen freed: they are freed by a path or task the trace does not show",
                    site_name()
                )
            });
        }
        if t.untraced_allocs() {
            return Some(format!(
                "{name} has pointers freed again and again with no traced allocation, on more than one object ({} times in all): it is allocated by a path the kernel does not trace (kmem_cache_alloc_bulk, slab sheaves)",
                thousands(t.freed_again_twice)
            ));
        }
        // A named cache that untraced paths free, on more than one object,
        // is one moved in bulk both ways: the NAPI skb cache, io_uring's
        // requests, the maple tree and slab sheaves pair
        // kmem_cache_free_bulk with kmem_cache_alloc_bulk. (kmalloc caches
        // are freed untraced by kfree_rcu's kfree_bulk alone: not them.)
        if matches!(w.group, Group::Cache(_)) && t.untraced_frees() {
            return Some(format!(
                "{name} has pointers returned while live on more than one object ({} in all): a cache moved in bulk both ways (kmem_cache_free_bulk and kmem_cache_alloc_bulk: the NAPI skb cache, io_uring, the maple tree, slab sheaves), so it is allocated by a path the kernel does not trace too",
                thousands(t.live_returned)
            ));
        }
        if w.site == NO_SITE {
            return None;
        }
        if site.unseen_frees_here > 0 {
            return Some(format!(
                "{} also frees {} objects never seen allocated: allocated before the capture or by a path or task the trace does not show",
                site_name(),
                thousands(site.unseen_frees_here)
            ));
        }
        // A call site that, again and again, frees only objects whose
        // allocation the trace did not show: what it frees comes from a
        // path or task the trace does not show. (Once is kept: a second
        // kfree() that runs only in the bug.)
        (site.matched_frees_here == 0 && site.unallocated_frees_here >= 2).then(|| {
            format!(
                "{} frees only objects whose allocation the trace did not show ({} frees, none of a traced allocation): they come from a path or task the trace does not show",
                site_name(),
                thousands(site.unallocated_frees_here)
            )
        })
    }
}

/// A finding's occurrences added up over its [`Where`]s.
#[derive(Default)]
struct Tally {
    count: u64,
    lost: u64,
    edge: u64,
    explained: u64,
    first: Option<(OrderKey, Occurrence)>,
    first_certain: Option<(OrderKey, Occurrence)>,
    reasons: Vec<FindingReason>,
}

fn earliest(slot: &mut Option<(OrderKey, Occurrence)>, c: &Option<(OrderKey, Occurrence)>) {
    if let Some((k, o)) = c {
        if slot.as_ref().is_none_or(|(s, _)| k < s) {
            *slot = Some((*k, o.clone()));
        }
    }
}

/// The gap between the two frees of a double free past which they are not
/// two frees on one code path (an error path's kfree() and the cleanup's
/// run within microseconds).
const LONE_GAP_NS: u64 = 1_000_000;

/// Double frees, in `Where`s not set apart, at a call site that frees no
/// object whose allocation the trace shows, whose two frees are more than
/// [`LONE_GAP_NS`] apart: the pointer was reused by an allocation the
/// trace does not show, then freed by code that only ever frees such.
fn lone_site_frees(
    ev: &Evidence<'_>,
    double_frees: &FastMap<Where, Vec<&DoubleFree>>,
    explained: &[Where],
) -> std::collections::HashSet<OrderKey> {
    let mut out = std::collections::HashSet::new();
    for (w, list) in double_frees {
        let site = ev.untraced.site(w.site);
        if w.site == NO_SITE || site.matched_frees_here > 0 || explained.binary_search(w).is_ok() {
            continue;
        }
        for d in list {
            let o = &d.occurrence;
            if o.earlier_ts
                .is_some_and(|t0| o.ts.saturating_sub(t0) > LONE_GAP_NS)
            {
                out.insert(d.key);
            }
        }
    }
    out
}

/// Double frees made in process context together with a free the capture
/// shows had no traced allocation (a free of an unseen object, or a double
/// free set apart), by the same task on the same CPU: the structure they
/// belong to was allocated by a path or task the trace does not show.
/// `explained`: the double-free [`Where`]s set apart, sorted. Returns the
/// keys of such double frees.
fn freed_together(
    judge: &Judge,
    explained: &[Where],
    apart: &std::collections::HashSet<OrderKey>,
) -> std::collections::HashSet<OrderKey> {
    let untraced =
        |d: &DoubleFree| explained.binary_search(&d.at).is_ok() || apart.contains(&d.key);
    // The untraced frees by task and time; for each, where the next one
    // of another pointer is.
    let mut untraced_frees: Vec<TaskFree> = judge
        .unseen_frees
        .iter()
        .copied()
        .chain(
            judge
                .double_frees
                .iter()
                .filter(|d| untraced(d))
                .filter_map(|d| d.free),
        )
        .collect();
    untraced_frees.sort_unstable();
    let other_ptr_from = other_ptr_after(&untraced_frees);
    // Kept double frees made with an unseen free the judge has forgotten.
    let mut out: std::collections::HashSet<OrderKey> = judge
        .double_frees
        .iter()
        .filter(|d| d.near_unseen && d.free.is_some() && !untraced(d))
        .map(|d| d.key)
        .collect();
    for d in judge.double_frees.iter().filter(|d| !untraced(d)) {
        let Some(f) = d.free else { continue };
        let at = |ts: u64| (f.cpu, f.pid, ts);
        let from = untraced_frees
            .partition_point(|u| (u.cpu, u.pid, u.ts) < at(f.ts.saturating_sub(TOGETHER_NS)));
        let to = untraced_frees
            .partition_point(|u| (u.cpu, u.pid, u.ts) <= at(f.ts.saturating_add(TOGETHER_NS)));
        let another = from < to && (untraced_frees[from].ptr != f.ptr || other_ptr_from[from] < to);
        if another {
            out.insert(d.key);
        }
    }
    out
}

/// For each free of `frees`, the index of the next one of another pointer
/// (`frees.len()` if none).
fn other_ptr_after(frees: &[TaskFree]) -> Vec<usize> {
    let mut next = vec![frees.len(); frees.len()];
    for i in (0..frees.len().saturating_sub(1)).rev() {
        next[i] = if frees[i + 1].ptr != frees[i].ptr {
            i + 1
        } else {
            next[i + 1]
        };
    }
    next
}

fn tally(ctx: &Ctx<'_>, ev: &Evidence<'_>, m: Misuse, judge: &Judge) -> Tally {
    let judged = &judge.by_kind[m as usize];
    let mut t = Tally::default();
    let mut wheres: Vec<(&Where, &Judged)> = judged.iter().collect();
    wheres.sort_by_key(|(w, _)| **w);
    let because: Vec<Option<String>> = wheres.iter().map(|(w, _)| ev.explains(ctx, m, w)).collect();
    let mut together = std::collections::HashSet::new();
    let mut lone = std::collections::HashSet::new();
    let mut double_frees: FastMap<Where, Vec<&DoubleFree>> = FastMap::default();
    if m == Misuse::DoubleFree {
        let explained: Vec<Where> = wheres
            .iter()
            .zip(&because)
            .filter(|(_, b)| b.is_some())
            .map(|((w, _), _)| **w)
            .collect();
        for d in &judge.double_frees {
            double_frees.entry(d.at).or_default().push(d);
        }
        lone = lone_site_frees(ev, &double_frees, &explained);
        together = freed_together(judge, &explained, &lone);
    }
    let mut reason = |w: &Where, count: u64, kept: bool, because: String| {
        if count > 0 && can_be_set_apart(m) {
            t.reasons.push(FindingReason {
                cache: group_name(ctx, w.group),
                callsite: (w.site != NO_SITE).then(|| ctx.syms.name(ctx.addr(w.site))),
                addr: Addr(ctx.addr(w.site)),
                count,
                kept,
                because,
            });
        }
    };
    let mut counts = (0u64, 0u64, 0u64, 0u64);
    let mut first = None;
    let mut first_certain = None;
    for ((w, j), because) in wheres.iter().zip(because) {
        counts.0 += j.count;
        counts.1 += j.lost;
        counts.2 += j.edge;
        earliest(&mut first, &j.first);
        let rest = j.count - j.lost - j.edge;
        if let Some(b) = because {
            counts.3 += rest;
            reason(w, rest, false, b);
            continue;
        }
        if m == Misuse::LivePointerReturned {
            // Kept only after a double free of the pointer.
            let kept = j.after_double_free;
            counts.3 += rest - kept;
            reason(
                w,
                rest - kept,
                false,
                "no double free of the pointer came before: the allocator hands out a live object only after one, so the trace missed this object's free".into(),
            );
            earliest(&mut first_certain, &j.first_after_double_free);
            reason(w, kept, true, KEPT.into());
            continue;
        }
        if m != Misuse::DoubleFree {
            earliest(&mut first_certain, &j.first_other);
            continue;
        }
        // Kept, but for the double frees made together with untraced ones.
        let mine = double_frees.get(*w).map_or(&[][..], Vec::as_slice);
        let alone = mine.iter().filter(|d| lone.contains(&d.key)).count() as u64;
        let apart = mine
            .iter()
            .filter(|d| together.contains(&d.key) && !lone.contains(&d.key))
            .count() as u64;
        for (n, because) in [
            (alone, format!("its call site frees no object whose allocation the trace shows, and the two frees are more than {} ms apart (not two frees on one path): the object came back from a path or task the trace does not show", LONE_GAP_NS / 1_000_000)),
            (apart, format!("freed by the same task within {} us of an object the capture shows was allocated untraced: the structure they belong to was allocated by a path or task the trace does not show", TOGETHER_NS / 1000)),
        ] {
            counts.3 += n;
            reason(w, n, false, because);
        }
        let left = mine
            .iter()
            .filter(|d| !together.contains(&d.key) && !lone.contains(&d.key))
            .map(|d| (d.key, (*d.occurrence).clone()))
            .min_by_key(|(k, _)| *k);
        earliest(&mut first_certain, &left);
        reason(w, rest - apart - alone, true, KEPT.into());
    }
    t.count = counts.0;
    t.lost = counts.1;
    t.edge = counts.2;
    t.explained = counts.3;
    t.first = first;
    t.first_certain = first_certain;
    t.reasons = merge_reasons(std::mem::take(&mut t.reasons));
    // Kept ones first (a gate's reader needs them), then the most; ties by
    // name, call-site address and reason (interned ids vary between runs).
    t.reasons.sort_by(|a, b| {
        (b.kept, b.count)
            .cmp(&(a.kept, a.count))
            .then_with(|| (&a.cache, a.addr.0, &a.because).cmp(&(&b.cache, b.addr.0, &b.because)))
    });
    t.reasons.truncate(10);
    t
}

/// One row per cache and reason: a reason about the cache as a whole
/// (its call sites differ, the reason does not) loses its call site.
fn merge_reasons(rows: Vec<FindingReason>) -> Vec<FindingReason> {
    let mut at: std::collections::HashMap<(String, bool, String), usize> = Default::default();
    let mut out: Vec<FindingReason> = Vec::new();
    for r in rows {
        match at.entry((r.cache.clone(), r.kept, r.because.clone())) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let o = &mut out[*e.get()];
                o.count += r.count;
                if o.callsite != r.callsite {
                    o.callsite = None;
                    o.addr = Addr(0);
                }
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(out.len());
                out.push(r);
            }
        }
    }
    out
}

const KEPT: &str = "kept: the capture shows no untraced traffic that explains it";

/// The misuse section, and the worst severity among certain findings.
pub(crate) fn findings(
    ctx: &Ctx<'_>,
    an: &Passes<'_>,
    judge: &Judge,
    ev: &Evidence<'_>,
    release: Option<&str>,
) -> (Vec<Finding>, Option<Severity>) {
    let mut worst: Option<Severity> = None;
    let misuse: Vec<Finding> = Misuse::ALL
        .iter()
        .map(|&m| {
            let f: &FindingAgg = &an.misuse.findings[m as usize];
            let t = tally(ctx, ev, m, judge);
            let (title, mut sev, why) = describe(m);
            let judgement = if m == Misuse::CacheAllocFreedByKfree {
                let (s, j) = kfree_cache_judgement(release);
                sev = s;
                j
            } else {
                why.to_string()
            };
            let certain = t.count - t.lost - t.edge - t.explained;
            if certain > 0 {
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
            pairs.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (&a.0, &a.1).cmp(&(&b.0, &b.1))));
            pairs.truncate(10);
            Finding {
                kind: m.id().into(),
                title: title.into(),
                severity: sev,
                count: f.count,
                uncertain: t.lost,
                at_capture_edges: t.edge,
                explained: t.explained,
                certain,
                judgement,
                reasons: t.reasons,
                first: t.first.as_ref().map(|(_, o)| ctx.occurrence(o)),
                first_certain: t.first_certain.as_ref().map(|(_, o)| ctx.occurrence(o)),
                top_alloc_callsites: ctx.top_sites(&f.alloc_sites),
                top_free_callsites: ctx.top_sites(&f.free_sites),
                cache_pairs: pairs,
            }
        })
        .collect();

    (misuse, worst)
}

/// The trace-completeness section: every group with a mark of untraced
/// traffic, the most marked first.
pub(crate) fn completeness(ctx: &Ctx<'_>, ev: &Evidence<'_>) -> TraceCompleteness {
    let weight = |t: &Traffic| t.unseen_frees + t.freed_again + t.live_returned;
    // Interned ids depend on the threads' timing: ties go by name.
    // The group's kind breaks ties between equal names (a cache named
    // kmalloc-64 and kmalloc objects of 64 bytes).
    let kind = |g: Group| match g {
        Group::Cache(_) => 0,
        Group::Kmalloc(_) => 1,
        Group::KmallocUnknownSize => 2,
        Group::UnnamedCache => 3,
        Group::None => 4,
    };
    let mut groups: Vec<(String, u8, &Traffic)> = ev
        .untraced
        .groups
        .iter()
        .map(|(&g, t)| (group_name(ctx, g), kind(g), t))
        .collect();
    groups.sort_by(|a, b| {
        weight(b.2)
            .cmp(&weight(a.2))
            .then_with(|| (&a.0, a.1).cmp(&(&b.0, b.1)))
    });
    TraceCompleteness {
        pid_filtered: ev.pid_filtered,
        unrecorded_tasks: ev
            .unrecorded
            .iter()
            .map(|&(pid, n)| UnrecordedTask {
                pid,
                comm: ctx.comm(pid),
                switched_in_from_idle: n,
            })
            .collect(),
        groups: groups
            .into_iter()
            .map(|(cache, _, t)| UntracedRow {
                cache,
                unseen_frees: t.unseen_frees,
                freed_again: t.freed_again,
                freed_again_twice: t.freed_again_twice,
                live_returned: t.live_returned,
                live_returned_pointers: match t.live_returned_pointers {
                    Pointers::None => "none",
                    Pointers::One(_) => "one",
                    Pointers::Many => "many",
                }
                .into(),
                untraced_allocs: t.untraced_allocs(),
                untraced_frees: t.untraced_frees(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

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

    /// `freed_together` as a scan of every pair of near frees.
    fn together_by_pairs(judge: &Judge, apart: &HashSet<OrderKey>) -> HashSet<OrderKey> {
        let untraced_frees: Vec<TaskFree> = (judge.unseen_frees.iter().copied())
            .chain(
                judge
                    .double_frees
                    .iter()
                    .filter(|d| apart.contains(&d.key))
                    .filter_map(|d| d.free),
            )
            .collect();
        let kept = judge
            .double_frees
            .iter()
            .filter(|d| !apart.contains(&d.key));
        kept.filter(|d| {
            d.near_unseen && d.free.is_some()
                || d.free
                    .is_some_and(|f| untraced_frees.iter().any(|u| f.together_with(u)))
        })
        .map(|d| d.key)
        .collect()
    }

    #[test]
    fn double_frees_are_found_made_together_with_untraced_frees_of_other_objects() {
        let mut found = 0;
        for seed in 1..=10u64 {
            let (j, _) = crate::judge::tests::random_frees(seed * 0x2545_f491);
            // Every third double free set apart (untraced); keys are unique
            // by time.
            let apart: HashSet<OrderKey> =
                j.double_frees.iter().step_by(3).map(|d| d.key).collect();
            let got = freed_together(&j, &[], &apart);
            assert_eq!(got, together_by_pairs(&j, &apart), "seed {seed}");
            found += got.len();
        }
        assert!(found > 100, "{found}");
    }
}
