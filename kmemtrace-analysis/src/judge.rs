//! The judgement of each misuse occurrence, in the stream's one order (on
//! the combiner, whatever the number of shards): whether the log lost
//! events where they could explain it, and whether the event it lacks
//! (the allocation between two frees, the free between two allocations)
//! falls outside the span in which the trace had that kind of event at all:
//! a recorder turns events on and off one after another, so near the
//! capture's edges frees are traced while allocations are not yet or no
//! longer (or the reverse). The counts are kept per [`Where`], so that the
//! report can then tell which groups' traffic explains them.

use crate::event::Kind;
use crate::intern::FastMap;
use crate::passes::misuse::{Misuse, Occurrence, Pending};
use crate::passes::objects::NO_SITE;
use crate::passes::untraced::{Group, Spans};
use crate::stream::{OrderKey, Windows};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Where an occurrence's explanation is looked for: the object's group,
/// and a call site: for double frees the second free's, for live pointers
/// returned the replaced object's allocation's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Where {
    pub group: Group,
    pub site: u32,
}

/// The occurrences of one kind at one [`Where`].
#[derive(Clone, Debug, Default)]
pub struct Judged {
    pub count: u64,
    /// Where the log lost events that could explain it.
    pub lost: u64,
    /// Where the event it lacks falls outside its kind's traced span.
    pub edge: u64,
    /// The first occurrence, and the first neither lost nor at an edge.
    pub first: Option<(OrderKey, Occurrence)>,
    pub first_other: Option<(OrderKey, Occurrence)>,
    /// Live pointers returned, neither lost nor at an edge, whose pointer
    /// had a double free before: the allocator handing out an object twice
    /// after it was freed twice. The others lack a free the trace missed.
    pub after_double_free: u64,
    pub first_after_double_free: Option<(OrderKey, Occurrence)>,
}

fn keep_first(slot: &mut Option<(OrderKey, Occurrence)>, key: OrderKey, o: &Occurrence) {
    if slot.as_ref().is_none_or(|(k, _)| key < *k) {
        *slot = Some((key, o.clone()));
    }
}

/// The event kind whose absence an occurrence shows, if any.
fn missing_kind(kind: Misuse, group: Group) -> Option<Kind> {
    let kmalloc = group.is_kmalloc();
    match kind {
        Misuse::DoubleFree if kmalloc => Some(Kind::Kmalloc),
        Misuse::DoubleFree => Some(Kind::CacheAlloc),
        Misuse::LivePointerReturned if kmalloc => Some(Kind::Kfree),
        Misuse::LivePointerReturned => Some(Kind::CacheFree),
        _ => None,
    }
}

/// How close in time (same task, same CPU) a free must be to a double free
/// to count as made together with it: the frees of one structure (an skb's
/// head and the skb) come within microseconds.
pub const TOGETHER_NS: u64 = 100_000;

/// A task's free in process context, by CPU, pid and time (the stream's
/// order time, [`OrderKey::ts`]): the frees of one structure come together
/// (interrupt-context frees run on behalf of any task, and are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskFree {
    pub cpu: u32,
    pub pid: i32,
    pub ts: u64,
    pub ptr: u64,
}

impl TaskFree {
    fn of(p: &Pending) -> Option<TaskFree> {
        let o = &p.occurrence;
        (!o.in_interrupt && o.pid != 0).then_some(TaskFree {
            cpu: o.cpu,
            pid: o.pid,
            ts: p.key.ts,
            ptr: o.ptr,
        })
    }

    /// Made together with `o`: the same task on the same CPU, another
    /// object, within [`TOGETHER_NS`].
    pub fn together_with(&self, o: &TaskFree) -> bool {
        self.cpu == o.cpu
            && self.pid == o.pid
            && self.ptr != o.ptr
            && self.ts.abs_diff(o.ts) <= TOGETHER_NS
    }
}

/// A double free neither lost nor at an edge.
#[derive(Clone, Debug)]
pub struct DoubleFree {
    pub key: OrderKey,
    pub at: Where,
    /// Made in process context.
    pub free: Option<TaskFree>,
    pub occurrence: Box<Occurrence>,
    /// Made together with a free of an unseen object that the judge no
    /// longer keeps ([`Judge::forget_before`]).
    pub near_unseen: bool,
}

/// The judge.
pub struct Judge {
    /// By [`Misuse`] kind.
    pub by_kind: Vec<FastMap<Where, Judged>>,
    /// The spans of the slab kinds in the epochs folded so far.
    spans: Spans,
    /// Occurrences later than the last traced event of the kind they lack,
    /// so far: at an edge unless a later one comes.
    held: Held,
    /// Double frees (to find the frees made together with them), in the
    /// order filed.
    pub double_frees: Vec<DoubleFree>,
    /// Frees of unseen objects in process context, in time order: those
    /// a double free still to be judged may have been made together with
    /// (the older ones are forgotten, having marked the double frees made
    /// with them: [`DoubleFree::near_unseen`]).
    pub unseen_frees: std::collections::VecDeque<TaskFree>,
    /// Double frees made in process context and not yet found made
    /// together with a forgotten unseen free, by task and time: (CPU, pid,
    /// time, index in `double_frees`).
    doubles_by_task: BTreeSet<(u32, i32, u64, usize)>,
    /// Per (CPU, pid), the last forgotten unseen free's search: from time
    /// `from` to `to`, the double frees left in `doubles_by_task` are all
    /// of pointer `ptr` (the others were marked), so the next unseen free
    /// of that pointer need not look at them again.
    searched: FastMap<(u32, i32), Searched>,
}

/// See [`Judge::searched`].
#[derive(Clone, Copy)]
struct Searched {
    ptr: u64,
    from: u64,
    to: u64,
}

/// Occurrences held back ([`Judge::held`]), by the kind they lack and then
/// time, each with its number in the order they came: each kind's are
/// released from the earliest, all filed in the order they came.
#[derive(Default)]
struct Held {
    by_kind: BTreeMap<Kind, BTreeMap<(u64, u64), Pending>>,
    came: u64,
}

impl Held {
    fn push(&mut self, p: Pending, k: Kind) {
        self.came += 1;
        let by_time = self.by_kind.entry(k).or_default();
        by_time.insert((p.key.ts, self.came), p);
    }

    /// Those of each kind at or before `last(kind)`, in the order they
    /// came.
    fn release(&mut self, last: impl Fn(Kind) -> Option<u64>) -> Vec<Pending> {
        let mut out: Vec<(u64, Pending)> = Vec::new();
        for (&k, by_time) in &mut self.by_kind {
            let Some(last) = last(k) else { continue };
            let later = match last.checked_add(1) {
                Some(after) => by_time.split_off(&(after, 0)),
                None => BTreeMap::new(),
            };
            let released = std::mem::replace(by_time, later);
            out.extend(released.into_iter().map(|((_, came), p)| (came, p)));
        }
        out.sort_unstable_by_key(|&(came, _)| came);
        out.into_iter().map(|(_, p)| p).collect()
    }

    /// The earliest time held.
    fn earliest(&self) -> Option<u64> {
        let firsts = self.by_kind.values().filter_map(|m| m.keys().next());
        firsts.map(|&(ts, _)| ts).min()
    }
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            by_kind: vec![FastMap::default(); Misuse::ALL.len()],
            spans: Spans::default(),
            held: Held::default(),
            double_frees: Vec::new(),
            unseen_frees: Default::default(),
            doubles_by_task: Default::default(),
            searched: Default::default(),
        }
    }
}

impl Judge {
    /// An epoch's spans, folded in epoch order: releases the held
    /// occurrences a later event now covers.
    pub fn spans(&mut self, s: &Spans) {
        self.spans.absorb(s);
        let spans = self.spans;
        for p in self.held.release(|k| spans.of(k).map(|(_, last)| last)) {
            self.file(p, false);
        }
    }

    /// Judges an occurrence whose loss windows are all known.
    pub fn judge(&mut self, mut p: Pending, windows: &Windows) {
        let o = &mut p.occurrence;
        // On the monotonic clock of the windows' `since`: the event's
        // place in the stream.
        o.uncertain = o.earlier_ts.is_some_and(|t0| windows.touches(t0, p.key.ts));
        let missing = missing_kind(p.kind, o.group).filter(|_| !o.uncertain);
        let Some(k) = missing else {
            return self.file(p, false);
        };
        match (self.spans.of(k), o.earlier_ts) {
            // Not yet traced when the lacking event had to happen.
            (None, _) => self.file(p, true),
            (Some((first, _)), Some(t0)) if t0 < first => self.file(p, true),
            (Some((_, last)), _) if p.key.ts > last => self.held.push(p, k),
            _ => self.file(p, false),
        }
    }

    /// Nothing judged from now on is earlier in the stream than `low`: the
    /// unseen frees too old to have been made together with a double free
    /// still to come are forgotten, marking the double frees made with
    /// them, so that they take memory for a window of time, not for the
    /// capture's length.
    pub fn forget_before(&mut self, low: u64) {
        let low = self.held.earliest().map_or(low, |t| t.min(low));
        while let Some(u) = self
            .unseen_frees
            .front()
            .filter(|u| u.ts.saturating_add(TOGETHER_NS) < low)
            .copied()
        {
            self.unseen_frees.pop_front();
            self.mark_made_with(&u);
        }
    }

    /// Marks the double frees made together with `u`, an unseen free
    /// forgotten now (no double free still to be filed is near it), and
    /// takes them out of the search: each double free is marked once, and
    /// each unseen free looks only at what the last one of its task did
    /// not rule out.
    fn mark_made_with(&mut self, u: &TaskFree) {
        let task = (u.cpu, u.pid);
        let (from, to) = (
            u.ts.saturating_sub(TOGETHER_NS),
            u.ts.saturating_add(TOGETHER_NS),
        );
        // Where the task's last search, of this pointer, covered the start
        // of this one: up to there only double frees of this pointer are
        // left, and none can come (they would be filed before `low`).
        let covered = self
            .searched
            .get(&task)
            .filter(|s| s.ptr == u.ptr && s.from <= from && s.to >= from)
            .map(|s| s.to);
        let start = match covered {
            Some(end) if end >= to => return,
            Some(end) => Bound::Excluded((u.cpu, u.pid, end, usize::MAX)),
            None => Bound::Included((u.cpu, u.pid, from, 0)),
        };
        let end = Bound::Included((u.cpu, u.pid, to, usize::MAX));
        let mut marked = Vec::new();
        for &entry in self.doubles_by_task.range((start, end)) {
            let d = &mut self.double_frees[entry.3];
            if d.free.is_some_and(|f| f.together_with(u)) {
                d.near_unseen = true;
                marked.push(entry);
            }
        }
        for entry in marked {
            self.doubles_by_task.remove(&entry);
        }
        let searched = Searched {
            ptr: u.ptr,
            from,
            to,
        };
        self.searched.insert(task, searched);
    }

    /// Every epoch folded: what is still held lies past the last event of
    /// its lacking kind.
    pub fn finish(&mut self) {
        for p in self.held.release(|_| Some(u64::MAX)) {
            self.file(p, true);
        }
    }

    fn file(&mut self, p: Pending, edge: bool) {
        let o = &p.occurrence;
        let site = match p.kind {
            Misuse::DoubleFree => o.free_site,
            Misuse::LivePointerReturned => o.alloc_site,
            _ => NO_SITE,
        };
        let w = Where {
            group: o.group,
            site,
        };
        let j = self.by_kind[p.kind as usize].entry(w).or_default();
        j.count += 1;
        j.lost += u64::from(o.uncertain);
        j.edge += u64::from(edge && !o.uncertain);
        keep_first(&mut j.first, p.key, o);
        if !o.uncertain && !edge {
            keep_first(&mut j.first_other, p.key, o);
            if p.kind == Misuse::LivePointerReturned && o.after_double_free {
                j.after_double_free += 1;
                keep_first(&mut j.first_after_double_free, p.key, o);
            }
            match p.kind {
                Misuse::DoubleFree => {
                    let free = TaskFree::of(&p);
                    if let Some(f) = free {
                        let i = self.double_frees.len();
                        self.doubles_by_task.insert((f.cpu, f.pid, f.ts, i));
                    }
                    self.double_frees.push(DoubleFree {
                        key: p.key,
                        at: w,
                        free,
                        occurrence: Box::new(o.clone()),
                        near_unseen: false,
                    });
                }
                Misuse::FreeOfUnseen => self.unseen_frees.extend(TaskFree::of(&p)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kmemtrace_testkit::Rng;

    pub(crate) fn free(kind: Misuse, ts: u64, pid: i32, ptr: u64) -> Pending {
        Pending {
            key: OrderKey {
                ts,
                ..Default::default()
            },
            kind,
            occurrence: Occurrence {
                ts,
                cpu: 0,
                pid,
                ptr,
                alloc_site: NO_SITE,
                free_site: 0,
                earlier_ts: None,
                earlier_cpu: None,
                alloc_cache: 0,
                free_cache: 0,
                bytes: None,
                uncertain: false,
                group: Group::None,
                in_interrupt: false,
                after_double_free: false,
            },
        }
    }

    #[test]
    fn unseen_frees_take_a_window_of_time_not_the_capture_s_length() {
        // Allocations traced over the whole second: the double free is
        // neither uncertain nor at an edge.
        let mut traced = Spans::default();
        traced.add(Kind::CacheAlloc, 0);
        traced.add(Kind::CacheAlloc, 2_000_000_000);
        let mut j = Judge::default();
        j.spans(&traced);
        let w = Windows::default();
        // One unseen free every 10 us for a second.
        for i in 0..100_000u64 {
            let ts = i * 10_000;
            j.judge(free(Misuse::FreeOfUnseen, ts, 7, i), &w);
            if i == 50_000 {
                // A double free by the same task 5 us after one.
                j.judge(free(Misuse::DoubleFree, ts + 5_000, 7, 1 << 40), &w);
            }
            j.forget_before(ts);
        }
        assert!(j.unseen_frees.len() <= 12, "{}", j.unseen_frees.len());
        assert_eq!(j.double_frees.len(), 1);
        assert!(j.double_frees[0].near_unseen);
        // Another task's double free is made with none of them.
        let mut j = Judge::default();
        j.spans(&traced);
        j.judge(free(Misuse::FreeOfUnseen, 1_000, 7, 1), &w);
        j.judge(free(Misuse::DoubleFree, 2_000, 8, 2), &w);
        j.forget_before(u64::MAX);
        assert!(j.unseen_frees.is_empty() && !j.double_frees[0].near_unseen);
    }

    /// A judge fed unseen and double frees of two tasks on three pointers,
    /// a few microseconds apart, in time order, forgetting as it goes as
    /// the combiner does; and the unseen frees.
    pub(crate) fn random_frees(seed: u64) -> (Judge, Vec<TaskFree>) {
        let mut traced = Spans::default();
        traced.add(Kind::CacheAlloc, 0);
        traced.add(Kind::CacheAlloc, u64::MAX / 2);
        let mut j = Judge::default();
        j.spans(&traced);
        let (w, mut rng, mut unseen) = (Windows::default(), Rng(seed), Vec::new());
        let mut ts = 1_000_000;
        for _ in 0..3000 {
            ts += rng.below(40_000);
            let kind = match rng.below(3) {
                0 => Misuse::FreeOfUnseen,
                _ => Misuse::DoubleFree,
            };
            let p = free(kind, ts, 7 + rng.below(2) as i32, 1 + rng.below(3));
            if kind == Misuse::FreeOfUnseen {
                unseen.extend(TaskFree::of(&p));
            }
            j.judge(p, &w);
            j.forget_before(ts);
        }
        (j, unseen)
    }

    #[test]
    fn a_double_free_is_marked_made_with_any_forgotten_unseen_free_near_it() {
        let mut marked = [0, 0];
        for seed in 1..=10 {
            let (mut j, unseen) = random_frees(seed * 0x9e37_79b9);
            j.forget_before(u64::MAX);
            assert!(j.unseen_frees.is_empty());
            for d in &j.double_frees {
                let f = d.free.unwrap();
                let near = unseen.iter().any(|u| f.together_with(u));
                assert_eq!(d.near_unseen, near, "seed {seed}: {f:?}");
                marked[usize::from(near)] += 1;
            }
        }
        assert!(marked[0] > 100 && marked[1] > 100, "{marked:?}");
    }

    #[test]
    fn held_occurrences_are_filed_as_their_kind_is_traced_in_the_order_they_came() {
        let spans = |kind, last| {
            let mut s = Spans::default();
            s.add(kind, 0);
            s.add(kind, last);
            s
        };
        let mut j = Judge::default();
        j.spans(&spans(Kind::CacheAlloc, 100));
        j.spans(&spans(Kind::Kmalloc, 100));
        let w = Windows::default();
        let at = |ts, group| {
            let mut p = free(Misuse::DoubleFree, ts, 7, ts);
            p.occurrence.group = group;
            p
        };
        for (ts, group) in [
            (400, Group::None),
            (200, Group::None),
            (300, Group::Kmalloc(64)),
        ] {
            j.judge(at(ts, group), &w);
        }
        assert!(j.double_frees.is_empty());
        j.forget_before(1_000);
        assert_eq!(j.held.earliest(), Some(200));
        j.spans(&spans(Kind::Kmalloc, 350));
        assert_eq!(j.double_frees.len(), 1);
        // Released together: in the order they came, not by time.
        j.spans(&spans(Kind::CacheAlloc, 1_000));
        let filed: Vec<u64> = j.double_frees.iter().map(|d| d.key.ts).collect();
        assert_eq!(filed, [300, 400, 200]);
        assert_eq!(j.held.earliest(), None);
        let edge: u64 = j.by_kind[Misuse::DoubleFree as usize]
            .values()
            .map(|v| v.edge)
            .sum();
        assert_eq!(edge, 0);
        // What no later event covers is at an edge.
        j.judge(at(2_000, Group::None), &w);
        j.finish();
        let edge: u64 = j.by_kind[Misuse::DoubleFree as usize]
            .values()
            .map(|v| v.edge)
            .sum();
        assert_eq!(edge, 1);
    }
}
