//! Leaks: objects still live at the end of the capture, at least
//! `min_age` old, grouped by allocation call site.

use super::objects::{Obj, Objects};
use super::untraced::Group;
use crate::event::NO_CACHE;
use crate::intern::{fast_map, FastMap};
use crate::stream::Windows;

/// Whether a live object's free may have been untraced: its cache (or
/// kmalloc size) shows untraced frees, or its call site frees the trace
/// missed.
pub fn freed_untraced(an: &super::Passes<'_>, o: &Obj) -> bool {
    // Objects of caches whose events name none (before 6.2) share one
    // group: too coarse to set a whole boot's live objects apart.
    let g = Group::of(o, NO_CACHE);
    let group = (g != Group::UnnamedCache)
        .then(|| an.untraced.groups.get(&g))
        .flatten();
    group.is_some_and(|t| t.untraced_frees())
        || an
            .slab
            .sites
            .get(o.site as usize)
            .is_some_and(|s| s.missed_frees > 0)
}

/// Live objects of one call site at the end.
#[derive(Clone, Debug, Default)]
pub struct LeakGroup {
    pub site: u32,
    pub objects: u64,
    pub bytes: u64,
    pub oldest_ts: u64,
    pub newest_ts: u64,
    /// Objects whose free may have been among lost events.
    pub uncertain: u64,
    /// Objects (and bytes), not counted above, whose free may have taken a
    /// path the kernel does not trace: their cache (or kmalloc size), or
    /// their call site, shows frees the trace missed.
    pub freed_untraced: u64,
    pub freed_untraced_bytes: u64,
    /// Up to 5 oldest objects: (ptr, alloc ts, cpu, bytes).
    pub examples: Vec<(u64, u64, u32, u64)>,
}

impl LeakGroup {
    fn add(&mut self, ptr: u64, o: &Obj, windows: &Windows, untraced: bool) {
        let b = u64::from(o.bytes_alloc);
        if untraced {
            self.freed_untraced += 1;
            self.freed_untraced_bytes = self.freed_untraced_bytes.saturating_add(b);
            return;
        }
        self.objects += 1;
        self.bytes = self.bytes.saturating_add(b);
        self.oldest_ts = self.oldest_ts.min(o.ts);
        self.newest_ts = self.newest_ts.max(o.ts);
        self.uncertain += u64::from(windows.after(o.ts));
        let ex = (ptr, o.ts, u32::from(o.cpu), b);
        let key = |e: &(u64, u64, u32, u64)| (e.1, e.0);
        if self.examples.len() < 5 {
            self.examples.push(ex);
        } else if key(&ex) < key(&self.examples[4]) {
            self.examples[4] = ex;
        } else {
            return;
        }
        self.examples.sort_by_key(key);
    }
}

/// The leak groups at the end (`end`: the last event's time) over every
/// shard's objects, largest first, equal ones by call-site address
/// (`addr`: a site id's address); `untraced` says whether an object's free
/// may have been untraced.
pub fn leaks(
    objects: &[Objects<'_>],
    addr: impl Fn(u32) -> u64,
    untraced: impl Fn(&Obj) -> bool,
    windows: &Windows,
    end: u64,
    min_age: u64,
) -> Vec<LeakGroup> {
    let mut groups: FastMap<u32, LeakGroup> = fast_map();
    for (ptr, o) in objects.iter().flat_map(Objects::live_selected) {
        if end.saturating_sub(o.ts) < min_age {
            continue;
        }
        groups
            .entry(o.site)
            .or_insert_with(|| LeakGroup {
                site: o.site,
                oldest_ts: u64::MAX,
                ..Default::default()
            })
            .add(ptr, o, windows, untraced(o));
    }
    let mut v: Vec<LeakGroup> = groups.into_values().collect();
    v.sort_by(|a, b| {
        (b.bytes, b.freed_untraced_bytes)
            .cmp(&(a.bytes, a.freed_untraced_bytes))
            .then(addr(a.site).cmp(&addr(b.site)))
    });
    v
}
