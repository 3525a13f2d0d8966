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
    held: Vec<(Pending, Kind)>,
    /// Double frees (to find the frees made together with them), in the
    /// order filed.
    pub double_frees: Vec<DoubleFree>,
    /// Frees of unseen objects in process context, in time order: those
    /// a double free still to be judged may have been made together with
    /// (the older ones are forgotten, having marked the double frees made
    /// with them: [`DoubleFree::near_unseen`]).
    pub unseen_frees: std::collections::VecDeque<TaskFree>,
    /// Double frees made in process context, by time: (time, index in
    /// `double_frees`).
    doubles_by_time: std::collections::BTreeSet<(u64, usize)>,
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            by_kind: vec![FastMap::default(); Misuse::ALL.len()],
            spans: Spans::default(),
            held: Vec::new(),
            double_frees: Vec::new(),
            unseen_frees: Default::default(),
            doubles_by_time: Default::default(),
        }
    }
}

impl Judge {
    /// An epoch's spans, folded in epoch order: releases the held
    /// occurrences a later event now covers.
    pub fn spans(&mut self, s: &Spans) {
        self.spans.absorb(s);
        let spans = self.spans;
        let mut keep = Vec::new();
        for (p, k) in std::mem::take(&mut self.held) {
            if spans.of(k).is_some_and(|(_, last)| p.key.ts <= last) {
                self.file(p, false);
            } else {
                keep.push((p, k));
            }
        }
        self.held = keep;
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
            (Some((_, last)), _) if p.key.ts > last => self.held.push((p, k)),
            _ => self.file(p, false),
        }
    }

    /// Nothing judged from now on is earlier in the stream than `low`: the
    /// unseen frees too old to have been made together with a double free
    /// still to come are forgotten, marking the double frees made with
    /// them, so that they take memory for a window of time, not for the
    /// capture's length.
    pub fn forget_before(&mut self, low: u64) {
        let low = self.held.iter().map(|(p, _)| p.key.ts).fold(low, u64::min);
        while let Some(u) = self
            .unseen_frees
            .front()
            .filter(|u| u.ts.saturating_add(TOGETHER_NS) < low)
            .copied()
        {
            self.unseen_frees.pop_front();
            let from = (u.ts.saturating_sub(TOGETHER_NS), 0);
            let to = (u.ts.saturating_add(TOGETHER_NS), usize::MAX);
            for &(_, i) in self.doubles_by_time.range(from..=to) {
                let d = &mut self.double_frees[i];
                if d.free.is_some_and(|f| f.together_with(&u)) {
                    d.near_unseen = true;
                }
            }
        }
    }

    /// Every epoch folded: what is still held lies past the last event of
    /// its lacking kind.
    pub fn finish(&mut self) {
        for (p, _) in std::mem::take(&mut self.held) {
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
                        self.doubles_by_time.insert((f.ts, self.double_frees.len()));
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
mod tests {
    use super::*;

    fn free(kind: Misuse, ts: u64, pid: i32, ptr: u64) -> Pending {
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
}
