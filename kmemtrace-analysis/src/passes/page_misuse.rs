//! Page misuse, followed frame by frame beside the page pass: frames freed
//! again with no traced allocation since their last free, allocations
//! returning a block still live, and frees whose order differs from the
//! allocation's.
//!
//! None of these is certain misuse from the trace alone. The kernel hands
//! out pages without `mm_page_alloc`: the bulk allocator
//! (`alloc_pages_bulk`, order 0, from the per-CPU lists, untraced since
//! 5.13: vmalloc, kernel stacks, sunrpc, page_pool), compaction's
//! isolation of free pages for migration and `alloc_contig_range()`. A real
//! second free (a stale reference's `get_page`/`put_page` on a freed page)
//! looks the same. The report counts them, says where events were lost
//! between the two events, and names the tasks.
//!
//! Freed frames are remembered per bucket in two generations of
//! [`FRAMES_PER_GENERATION`] each, so memory stays bounded on machines
//! with millions of frames; a frame forgotten counts as never seen.

use super::freed_frames::FreedFrames;
use super::pages::{Requests, ORDER_SLOTS};
use crate::event::{bucket, BUCKETS};
use crate::intern::FastMap;

/// Freed frames a bucket remembers per generation (64 buckets: about a
/// million frames in all, the most recent first).
pub const FRAMES_PER_GENERATION: usize = 8192;

/// How finely the span between two events of a frame is kept for the loss
/// check (2^20 ns, about a millisecond): spans are counted by their
/// rounded ends, and a span touching a loss window counts as uncertain.
pub const SPAN_GRAIN_SHIFT: u32 = 20;

/// The deepest buddy block a frame's free is looked for in (see
/// [`crate::event::PFN_GROUP_SHIFT`]).
pub(crate) const MAX_BLOCK_ORDER: u32 = crate::event::PFN_GROUP_SHIFT;

/// The last free of a frame (the head of the block freed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FreedFrame {
    pub ts: u64,
    pub pid: i32,
    pub cpu: u16,
    pub order: u8,
}

impl FreedFrame {
    /// `order` kept in a byte (orders past 255 are not real).
    pub fn new(ts: u64, pid: i32, cpu: u16, order: u32) -> Self {
        FreedFrame {
            ts,
            pid,
            cpu,
            order: order.min(u32::from(u8::MAX)) as u8,
        }
    }
}

/// Spans between two events of a frame, by their ends rounded to
/// [`SPAN_GRAIN_SHIFT`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spans(pub FastMap<(u64, u64), u64>);

impl Spans {
    fn add(&mut self, t0: u64, t1: u64) {
        let key = (t0 >> SPAN_GRAIN_SHIFT, t1 >> SPAN_GRAIN_SHIFT);
        *self.0.entry(key).or_insert(0) += 1;
    }
    fn absorb(&mut self, o: &Spans) {
        for (&k, &n) in &o.0 {
            *self.0.entry(k).or_insert(0) += n;
        }
    }
    /// How many spans `touches(t0, t1)` says events may have been lost in
    /// (the rounded span covers the exact one).
    pub fn touching(&self, touches: impl Fn(u64, u64) -> bool) -> u64 {
        let grain = 1u64 << SPAN_GRAIN_SHIFT;
        self.0
            .iter()
            .filter(|(&(a, b), _)| {
                touches(a << SPAN_GRAIN_SHIFT, (b << SPAN_GRAIN_SHIFT) + grain - 1)
            })
            .map(|(_, &n)| n)
            .sum()
    }
}

/// The first occurrence of a finding: the event, and the earlier event of
/// the frame it follows (the earlier free, or the live block's allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOccurrence {
    pub ts: u64,
    pub pfn: u64,
    pub order: u32,
    pub cpu: u16,
    pub pid: i32,
    pub earlier: FreedFrame,
}

/// One kind of finding, over a shard's frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageFindingCounts {
    pub occurrences: Requests,
    pub by_order: [u64; ORDER_SLOTS],
    /// By the task of the event that revealed it.
    pub by_pid: FastMap<i32, u64>,
    pub spans: Spans,
    pub first: Option<PageOccurrence>,
}

impl Default for PageFindingCounts {
    fn default() -> Self {
        PageFindingCounts {
            occurrences: Requests::default(),
            by_order: [0; ORDER_SLOTS],
            by_pid: FastMap::default(),
            spans: Spans::default(),
            first: None,
        }
    }
}

impl PageFindingCounts {
    fn add(&mut self, o: PageOccurrence, bytes: u64) {
        self.occurrences.add(bytes);
        self.by_order[(o.order as usize).min(ORDER_SLOTS - 1)] += 1;
        *self.by_pid.entry(o.pid).or_insert(0) += 1;
        self.spans.add(o.earlier.ts, o.ts);
        self.keep_first(Some(o));
    }

    fn keep_first(&mut self, o: Option<PageOccurrence>) {
        let key = |x: &PageOccurrence| (x.ts, x.pfn);
        self.first = match (self.first, o) {
            (Some(a), Some(b)) => Some(if key(&b) < key(&a) { b } else { a }),
            (a, b) => a.or(b),
        };
    }

    pub fn absorb(&mut self, o: &PageFindingCounts) {
        self.occurrences.absorb(&o.occurrences);
        for (a, b) in self.by_order.iter_mut().zip(&o.by_order) {
            *a += b;
        }
        for (&p, &n) in &o.by_pid {
            *self.by_pid.entry(p).or_insert(0) += n;
        }
        self.spans.absorb(&o.spans);
        self.keep_first(o.first);
    }
}

/// The page-misuse pass's state: a shard's frames.
pub struct PageMisuse {
    /// By bucket (those of other shards stay empty).
    freed: Vec<FreedFrames>,
    /// Frees of a frame freed before with no traced allocation since
    /// (selected frees only).
    pub freed_twice: PageFindingCounts,
    /// Allocations returning a block the trace had live.
    pub allocated_while_live: PageFindingCounts,
    /// Frees of a live block with a larger order than its allocation's,
    /// and with a smaller one (split_page(), alloc_pages_exact()).
    pub freed_larger: u64,
    pub freed_smaller: u64,
}

/// A page event's frame, order, time and task.
#[derive(Clone, Copy, Debug)]
pub struct FrameEvent {
    pub pfn: u64,
    pub order: u32,
    pub ts: u64,
    pub pid: i32,
    pub cpu: u16,
}

impl FrameEvent {
    /// The free as remembered: blocks above the group size are not buddy
    /// blocks, and are remembered by their first group (as [`PageMisuse::alloc`]
    /// clears them), which keeps the block arithmetic within 64 bits.
    fn freed(&self) -> FreedFrame {
        FreedFrame::new(self.ts, self.pid, self.cpu, self.order.min(MAX_BLOCK_ORDER))
    }
    fn occurrence(&self, earlier: FreedFrame) -> PageOccurrence {
        PageOccurrence {
            ts: self.ts,
            pfn: self.pfn,
            order: self.order,
            cpu: self.cpu,
            pid: self.pid,
            earlier,
        }
    }
}

impl Default for PageMisuse {
    fn default() -> Self {
        PageMisuse {
            freed: (0..BUCKETS)
                .map(|_| FreedFrames::new(FRAMES_PER_GENERATION))
                .collect(),
            freed_twice: PageFindingCounts::default(),
            allocated_while_live: PageFindingCounts::default(),
            freed_larger: 0,
            freed_smaller: 0,
        }
    }
}

impl PageMisuse {
    fn frames(&mut self, pfn: u64) -> &mut FreedFrames {
        &mut self.freed[bucket(crate::event::pfn_key(pfn))]
    }

    /// A successful allocation; `live`: the block the trace had live at
    /// its frame (an earlier allocation's time, task, CPU and order).
    pub fn alloc(&mut self, e: FrameEvent, live: Option<FreedFrame>, bytes: u64, selected: bool) {
        // Blocks above the group size are not buddy blocks (the buddy
        // allocator stops at MAX_PAGE_ORDER): their first group is cleared.
        self.frames(e.pfn)
            .allocated(e.pfn, e.order.min(MAX_BLOCK_ORDER));
        if let (Some(l), true) = (live, selected) {
            self.allocated_while_live.add(e.occurrence(l), bytes);
        }
    }

    /// A free; `live`: the order of the live block it frees and whether
    /// that block's allocation passed the filters, if the trace had one at
    /// its frame; `selected`: the free passed them.
    pub fn free(&mut self, e: FrameEvent, live: Option<(u32, bool)>, bytes: u64, selected: bool) {
        // A free whose frame the record lacks (-1, or no `pfn` field) has
        // nothing to follow (once, every such free after the first counted
        // as freed twice).
        if e.pfn == crate::event::NO_PFN {
            return;
        }
        match live {
            Some((o, true)) => {
                self.freed_larger += u64::from(e.order > o);
                self.freed_smaller += u64::from(e.order < o);
            }
            Some(_) => {}
            None if selected => {
                if let Some(f) = self.frames(e.pfn).covering(e.pfn) {
                    self.freed_twice.add(e.occurrence(f), bytes);
                }
            }
            None => {}
        }
        self.frames(e.pfn).insert(e.pfn, e.freed());
    }

    /// Adds another shard's counts.
    pub fn absorb(&mut self, o: &PageMisuse) {
        self.freed_twice.absorb(&o.freed_twice);
        self.allocated_while_live.absorb(&o.allocated_while_live);
        self.freed_larger += o.freed_larger;
        self.freed_smaller += o.freed_smaller;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(pfn: u64, order: u32, ts: u64) -> FrameEvent {
        FrameEvent {
            pfn,
            order,
            ts,
            pid: 7,
            cpu: 0,
        }
    }

    #[test]
    fn a_frame_freed_inside_a_freed_block_is_freed_twice() {
        let mut m = PageMisuse::default();
        m.free(ev(64, 3, 1), Some((3, true)), 4096 << 3, true);
        // A traced allocation of one frame inside the block leaves the
        // block's other frames freed.
        m.alloc(ev(66, 0, 2), None, 4096, true);
        m.free(ev(66, 0, 3), Some((0, true)), 4096, true);
        assert_eq!(m.freed_twice.occurrences.requests, 0);
        m.free(ev(69, 0, 4), None, 4096, true);
        assert_eq!(m.freed_twice.occurrences.requests, 1);
        let first = m.freed_twice.first.unwrap();
        // The block holding it then: the order-2 half left by the split.
        assert_eq!(
            (first.pfn, first.earlier.ts, first.earlier.order),
            (69, 1, 2)
        );
        // The block's head allocated again: the rest of the block stays
        // free, split as the buddy allocator splits it.
        m.alloc(ev(64, 0, 5), None, 4096, true);
        m.free(ev(65, 0, 6), None, 4096, true);
        m.free(ev(70, 0, 7), None, 4096, true);
        assert_eq!(m.freed_twice.occurrences.requests, 3);
        // The whole block allocated: nothing in it is free any more.
        m.alloc(ev(64, 3, 8), None, 4096 << 3, true);
        m.free(ev(71, 0, 9), None, 4096, true);
        assert_eq!(m.freed_twice.occurrences.requests, 3);
    }

    #[test]
    fn frees_without_a_frame_are_not_followed() {
        let mut m = PageMisuse::default();
        for ts in 1..4 {
            m.free(ev(crate::event::NO_PFN, 0, ts), None, 4096, true);
        }
        assert_eq!(m.freed_twice.occurrences.requests, 0);
    }

    #[test]
    fn split_pages_freed_one_by_one_are_not_freed_twice() {
        let mut m = PageMisuse::default();
        m.alloc(ev(8, 2, 1), None, 4096 << 2, true);
        m.free(ev(8, 0, 2), Some((2, true)), 4096, true);
        for (i, pfn) in (9..12).enumerate() {
            m.free(ev(pfn, 0, 3 + i as u64), None, 4096, true);
        }
        assert_eq!(m.freed_twice.occurrences.requests, 0);
        assert_eq!((m.freed_smaller, m.freed_larger), (1, 0));
        m.free(ev(10, 0, 9), None, 4096, true);
        assert_eq!(m.freed_twice.occurrences.requests, 1);
    }

    #[test]
    fn spans_round_outwards() {
        let mut s = Spans::default();
        s.add(5 << SPAN_GRAIN_SHIFT, (7 << SPAN_GRAIN_SHIFT) + 3);
        // A window just after the exact end but inside its grain counts.
        let window = (7 << SPAN_GRAIN_SHIFT) + 10;
        assert_eq!(s.touching(|a, b| a <= window && window <= b), 1);
        assert_eq!(s.touching(|_, b| b < 5 << SPAN_GRAIN_SHIFT), 0);
    }
}
