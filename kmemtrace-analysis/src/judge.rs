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

/// A task's free in process context, by CPU, pid and time: the frees of
/// one structure come together (interrupt-context frees run on behalf of
/// any task, and are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaskFree {
    pub cpu: u32,
    pub pid: i32,
    pub ts: u64,
    pub ptr: u64,
}

impl TaskFree {
    fn of(o: &Occurrence) -> Option<TaskFree> {
        (!o.in_interrupt && o.pid != 0).then_some(TaskFree {
            cpu: o.cpu,
            pid: o.pid,
            ts: o.ts,
            ptr: o.ptr,
        })
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
    /// Frees of unseen objects in process context.
    pub unseen_frees: Vec<TaskFree>,
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            by_kind: vec![FastMap::default(); Misuse::ALL.len()],
            spans: Spans::default(),
            held: Vec::new(),
            double_frees: Vec::new(),
            unseen_frees: Vec::new(),
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
                Misuse::DoubleFree => self.double_frees.push(DoubleFree {
                    key: p.key,
                    at: w,
                    free: TaskFree::of(o),
                    occurrence: Box::new(o.clone()),
                }),
                Misuse::FreeOfUnseen => self.unseen_frees.extend(TaskFree::of(o)),
                _ => {}
            }
        }
    }
}
