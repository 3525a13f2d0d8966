//! Page call sites, per-frame allocations and live pages by owner: the
//! tables `perf kmem stat --page --caller/--alloc` and `page_owner_sort`
//! show, from the stacks recorded with `mm_page_alloc`.

use super::{Ctx, KeyVal};
use crate::intern::{FastMap, NO_STACK};
use crate::model::{
    Addr, CullKey, GfpLegendEntry, LiveGroupRow, PageCallsiteRow, PageSortKey, PfnRow,
};
use crate::page_callers::call_site_index;
use crate::passes::pages::{LivePages, PagesPass, Requests, SiteKey};
use kmemtrace_import::stacks::PageStackSample;
use std::cell::RefCell;
use std::sync::Arc;

/// The recorded stacks, each with its call site found once.
pub(crate) struct StackSites<'a> {
    cx: &'a Ctx<'a>,
    stacks: &'a [Box<[u64]>],
    /// Per stack id, the index of the call-site frame.
    site_at: Vec<Option<usize>>,
    /// Stacks named so far: rows that share a stack share its names
    /// (a stack named per row made a document of rows x frames x names).
    named: RefCell<FastMap<u32, Arc<[String]>>>,
}

impl<'a> StackSites<'a> {
    pub(crate) fn new(cx: &'a Ctx<'a>, stacks: &'a [Box<[u64]>]) -> Self {
        let table = cx.syms.table.as_ref();
        let site_at = stacks.iter().map(|s| call_site_index(s, table)).collect();
        StackSites {
            cx,
            stacks,
            site_at,
            named: RefCell::default(),
        }
    }

    /// The call site's address (0: no stack, or no frame outside the
    /// allocator).
    pub(crate) fn site(&self, stack: u32) -> u64 {
        let i = stack as usize;
        match (self.stacks.get(i), self.site_at.get(i).copied().flatten()) {
            (Some(s), Some(k)) => s[k],
            _ => 0,
        }
    }

    /// The raw frames of a stack.
    fn raw(&self, stack: u32) -> &[u64] {
        self.stacks.get(stack as usize).map_or(&[], |s| &s[..])
    }

    /// A call site's name: `-` for none.
    pub(crate) fn name(&self, site: u64) -> String {
        match site {
            0 => "-".into(),
            a => self.cx.syms.name(a),
        }
    }

    /// The frames from the call site outward, named.
    pub(crate) fn frames(&self, stack: u32) -> Arc<[String]> {
        let named = self.named.borrow_mut().get(&stack).cloned();
        named.unwrap_or_else(|| {
            let i = stack as usize;
            let from = self.site_at.get(i).copied().flatten().unwrap_or(0);
            let frames: Arc<[String]> = self
                .stacks
                .get(i)
                .map(|s| s[from..].iter().map(|&a| self.cx.syms.name(a)).collect())
                .unwrap_or_default();
            self.named.borrow_mut().insert(stack, frames.clone());
            frames
        })
    }
}

/// A call-site row's key: what perf groups by, with the stack replaced by
/// its call site.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct RowKey {
    site: u64,
    order: u32,
    migratetype: i32,
    gfp: u64,
}

#[derive(Default)]
struct RowAcc {
    all: Requests,
    live: Requests,
    /// Hits per stack.
    stacks: FastMap<u32, u64>,
}

fn row_key(ss: &StackSites<'_>, k: &SiteKey) -> RowKey {
    RowKey {
        site: ss.site(k.stack),
        order: k.order,
        migratetype: k.migratetype,
        gfp: k.gfp,
    }
}

/// The call-site table.
pub(crate) fn callsites(
    ss: &StackSites<'_>,
    p: &PagesPass<'_>,
    live: &LivePages,
    mt_name: &dyn Fn(i32) -> String,
) -> Vec<PageCallsiteRow> {
    let cx = ss.cx;
    let mut rows: FastMap<RowKey, RowAcc> = FastMap::default();
    // Sampled allocations per row and region, for the margins.
    let mut regions: FastMap<(RowKey, u64), u64> = FastMap::default();
    for ((k, region), n) in &p.sampled_regions {
        *regions.entry((row_key(ss, k), *region)).or_insert(0) += n;
    }
    let mut by_row: FastMap<RowKey, Vec<u64>> = FastMap::default();
    for ((k, _), n) in regions {
        by_row.entry(k).or_default().push(n);
    }
    // The margin sums floats: in one order in every run.
    by_row.values_mut().for_each(|v| v.sort_unstable());
    for (k, r) in &p.by_site {
        let acc = rows.entry(row_key(ss, k)).or_default();
        acc.all.absorb(r);
        *acc.stacks.entry(k.stack).or_insert(0) += r.requests;
    }
    for (k, r) in &live.by_site {
        rows.entry(row_key(ss, k)).or_default().live.absorb(r);
    }
    // In key order before the rows' own (whose ties, such as two
    // migratetypes of one name, would otherwise fall in the map's order,
    // which differs from run to run).
    let mut rows: Vec<(RowKey, RowAcc)> = rows.into_iter().collect();
    rows.sort_unstable_by_key(|(k, _)| *k);
    let mut out: Vec<PageCallsiteRow> = rows
        .into_iter()
        .map(|(k, acc)| {
            // Ids depend on the decoders' timing: ties go by the frames.
            let top = acc
                .stacks
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then_with(|| ss.raw(*b.0).cmp(ss.raw(*a.0))))
                .map(|(&id, _)| id);
            let commonest = match top {
                Some(id) if id != NO_STACK => ss.frames(id),
                _ => Arc::default(),
            };
            PageCallsiteRow {
                callsite: ss.name(k.site),
                addr: Addr(k.site),
                order: k.order,
                migratetype: mt_name(k.migratetype),
                gfp: cx.gfp(k.gfp, acc.all.requests),
                hits: acc.all.requests,
                bytes: acc.all.bytes,
                sampled: p.sample.is_sampled().then_some(acc.all.samples),
                margin: p.sample.is_sampled().then(|| {
                    let counts = by_row.get(&k).map_or(&[][..], Vec::as_slice);
                    PageStackSample::margin(p.sample.weight(k.order), counts.iter().copied())
                }),
                live_blocks: acc.live.requests,
                live_bytes: acc.live.bytes,
                stacks: acc.stacks.keys().filter(|&&s| s != NO_STACK).count() as u64,
                top_stack: if cx.opts.page_stacks {
                    commonest.clone()
                } else {
                    Arc::default()
                },
                commonest_stack: commonest,
            }
        })
        .collect();
    let keys = &cx.opts.page_sort;
    out.sort_by(|a, b| {
        order_by(keys, |k| site_key(a, k), |k| site_key(b, k)).then_with(|| {
            (a.addr, a.order, &a.migratetype, &a.gfp.value).cmp(&(
                b.addr,
                b.order,
                &b.migratetype,
                &b.gfp.value,
            ))
        })
    });
    out
}

fn site_key(r: &PageCallsiteRow, k: PageSortKey) -> KeyVal {
    match k {
        PageSortKey::Callsite | PageSortKey::Page => KeyVal::S(r.callsite.clone()),
        PageSortKey::Bytes => KeyVal::U(r.bytes),
        PageSortKey::Hit => KeyVal::U(r.hits),
        PageSortKey::Order => KeyVal::S(format!("{:04}", r.order)),
        PageSortKey::Migtype => KeyVal::S(r.migratetype.clone()),
        PageSortKey::Gfp => KeyVal::S(r.gfp.flags.clone()),
    }
}

/// Compares two rows by `keys`, in order: numbers the larger first, text
/// (names, and order, migratetype and flags as perf sorts them) in
/// ascending order.
fn order_by(
    keys: &[PageSortKey],
    a: impl Fn(PageSortKey) -> KeyVal,
    b: impl Fn(PageSortKey) -> KeyVal,
) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    for &k in keys {
        let o = match (a(k), b(k)) {
            (KeyVal::S(x), KeyVal::S(y)) => x.cmp(&y),
            (KeyVal::U(x), KeyVal::U(y)) => y.cmp(&x),
            (KeyVal::F(x), KeyVal::F(y)) => y.total_cmp(&x),
            _ => Equal,
        };
        if o != Equal {
            return o;
        }
    }
    Equal
}

/// The per-page-frame table, when the pass kept it.
pub(crate) fn by_pfn(
    ss: &StackSites<'_>,
    p: &PagesPass<'_>,
    mt_name: &dyn Fn(i32) -> String,
) -> Option<Vec<PfnRow>> {
    let cx = ss.cx;
    let m = p.by_pfn.as_ref()?;
    // Stacks with one call site make one row, as in the call-site table.
    let mut merged: FastMap<(u64, RowKey), Requests> = FastMap::default();
    for (k, r) in m {
        merged
            .entry((k.pfn, row_key(ss, &k.site)))
            .or_default()
            .absorb(r);
    }
    // In key order before the rows' own, as in the call-site table.
    let mut merged: Vec<((u64, RowKey), Requests)> = merged.into_iter().collect();
    merged.sort_unstable_by_key(|(k, _)| *k);
    let mut rows: Vec<PfnRow> = merged
        .into_iter()
        .map(|((pfn, k), r)| PfnRow {
            pfn: Addr(pfn),
            hits: r.requests,
            bytes: r.bytes,
            order: k.order,
            migratetype: mt_name(k.migratetype),
            gfp: cx.gfp(k.gfp, r.requests),
            callsite: ss.name(k.site),
        })
        .collect();
    let keys = &cx.opts.page_sort;
    rows.sort_by(|a, b| {
        order_by(keys, |k| pfn_key(a, k), |k| pfn_key(b, k)).then_with(|| {
            (a.pfn, &a.callsite, a.order, &a.migratetype, &a.gfp.value).cmp(&(
                b.pfn,
                &b.callsite,
                b.order,
                &b.migratetype,
                &b.gfp.value,
            ))
        })
    });
    Some(rows)
}

fn pfn_key(r: &PfnRow, k: PageSortKey) -> KeyVal {
    match k {
        PageSortKey::Page => KeyVal::S(format!("{:016x}", r.pfn.0)),
        PageSortKey::Callsite => KeyVal::S(r.callsite.clone()),
        PageSortKey::Bytes => KeyVal::U(r.bytes),
        PageSortKey::Hit => KeyVal::U(r.hits),
        PageSortKey::Order => KeyVal::S(format!("{:04}", r.order)),
        PageSortKey::Migtype => KeyVal::S(r.migratetype.clone()),
        PageSortKey::Gfp => KeyVal::S(r.gfp.flags.clone()),
    }
}

/// Live blocks grouped by `--cull`, the most bytes first.
pub(crate) fn live_groups(ss: &StackSites<'_>, live: &LivePages) -> Vec<LiveGroupRow> {
    let cx = ss.cx;
    let cull = &cx.opts.page_cull;
    let by = |k: CullKey| cull.contains(&k);
    #[derive(PartialEq, Eq, Hash)]
    struct Key {
        site: u64,
        stack: Option<u32>,
        pid: Option<i32>,
        comm: Option<String>,
    }
    let mut groups: FastMap<Key, crate::passes::pages::LiveGroup> = FastMap::default();
    for (&(stack, pid), g) in &live.by_owner {
        let key = Key {
            site: if by(CullKey::Callsite) || by(CullKey::Stack) {
                ss.site(stack)
            } else {
                0
            },
            stack: by(CullKey::Stack).then_some(stack),
            pid: by(CullKey::Pid).then_some(pid),
            comm: if by(CullKey::Comm) {
                Some(cx.comm(pid).unwrap_or_else(|| "<...>".into()))
            } else {
                None
            },
        };
        groups.entry(key).or_default().absorb(g);
    }
    let end = cx.an.last_ts;
    // In key order before the rows' own, as in the call-site table; a
    // stack by its frames, its id depending on the decoders' timing.
    let mut groups: Vec<(Key, crate::passes::pages::LiveGroup)> = groups.into_iter().collect();
    groups.sort_by(|(a, _), (b, _)| {
        let raw = |k: &Key| k.stack.map(|s| ss.raw(s));
        (a.site, raw(a), a.pid, &a.comm).cmp(&(b.site, raw(b), b.pid, &b.comm))
    });
    let mut rows: Vec<LiveGroupRow> = groups
        .into_iter()
        .map(|(k, g)| LiveGroupRow {
            callsite: match k.site {
                0 if !(by(CullKey::Callsite) || by(CullKey::Stack)) => String::new(),
                0 => "-".into(),
                a => cx.syms.name(a),
            },
            stack: k.stack.map(|s| ss.frames(s)),
            pid: k.pid,
            comm: k.comm.clone(),
            blocks: g.pages.requests,
            bytes: g.pages.bytes,
            oldest_age_ns: g.oldest_ts.map_or(0, |t| end.saturating_sub(t)),
        })
        .collect();
    rows.sort_by(|a, b| {
        b.bytes.cmp(&a.bytes).then_with(|| {
            (&a.callsite, &a.stack, a.pid, &a.comm).cmp(&(&b.callsite, &b.stack, b.pid, &b.comm))
        })
    });
    rows
}

/// The short GFP names the call-site table uses, each with the kernel's
/// name and value, in the kernel's table order.
pub(crate) fn gfp_legend(cx: &Ctx<'_>, values: impl Iterator<Item = u64>) -> Vec<GfpLegendEntry> {
    let Some(t) = cx.gfp else {
        return Vec::new();
    };
    let mut used = vec![false; t.entries.len()];
    for v in values {
        for i in t.flags_of(v) {
            used[i] = true;
        }
    }
    t.entries
        .iter()
        .zip(used)
        .filter(|(_, u)| *u)
        .map(|(e, _)| GfpLegendEntry {
            short: e.short_name().to_string(),
            name: e.name.clone(),
            value: format!("0x{:x}", e.value),
        })
        .collect()
}
