//! Page allocations paired with the kernel stack taken with each, as the
//! analysis pairs them (`kmemtrace_analysis::stream::decode`, chunk by
//! chunk), by [`Waiting`]'s rule within a chunk. A chunk's first four
//! stacks its own allocations do not take can belong to the previous
//! chunk's last allocations (the recorder cut between event and stack);
//! after that chunk those give up. Rows wait in their order until settled,
//! so the table keeps the CPU's order.

use kmemtrace_import::stacks::{Waiting, DEPTH};
use std::collections::VecDeque;

/// Rows held in order until each waiting one has its call site.
pub struct Held<R> {
    /// Rows from sequence number `first` on, and whether each is settled.
    rows: VecDeque<(R, bool)>,
    first: u64,
    /// This chunk's waiting allocations, and the previous chunk's.
    this: Waiting<u64>,
    previous: Waiting<u64>,
    /// This chunk's stacks its own allocations did not take, so far.
    leading: usize,
}

/// Rows held at most: past it the front row gives up its stack (one lost
/// in the ring buffer would otherwise hold every page row after it to the
/// chunk's end, and a trace.dat's chunk can be a whole CPU).
const MAX_HELD: usize = 1 << 16;

impl<R> Held<R> {
    pub fn new() -> Self {
        Held {
            rows: VecDeque::new(),
            first: 0,
            this: Waiting::default(),
            previous: Waiting::default(),
            leading: 0,
        }
    }

    /// Adds a row; `waits` if a stack will come for it.
    pub fn push(&mut self, row: R, pid: i32, in_interrupt: bool, waits: bool) {
        let seq = self.first + self.rows.len() as u64;
        self.rows.push_back((row, !waits));
        if waits {
            if let Some(old) = self.this.push(pid, in_interrupt, seq) {
                self.settle(old);
            }
        }
        if self.rows.len() > MAX_HELD {
            // The front row is the one waiting, or it would be out.
            let front = self.first;
            if self.this.remove(&front) || self.previous.remove(&front) {
                self.settle(front);
            }
        }
    }

    /// A stack of `pid` in that context: `set` gives its row the call
    /// site.
    pub fn stack(&mut self, pid: i32, in_interrupt: bool, set: impl FnOnce(&mut R)) {
        let mut lost = Vec::new();
        let mut give_up = |seq| lost.push(seq);
        let taken = match self.this.take(pid, in_interrupt, &mut give_up) {
            Some(t) => Some(t),
            None if self.leading < DEPTH => {
                self.leading += 1;
                self.previous.take(pid, in_interrupt, &mut give_up)
            }
            None => None,
        };
        for seq in lost {
            self.settle(seq);
        }
        let Some(seq) = taken else {
            return;
        };
        if let Some((row, _)) = self.rows.get_mut((seq - self.first) as usize) {
            set(row);
        }
        self.settle(seq);
    }

    /// The chunk ends: the previous chunk's waiting give up, this one's
    /// wait for the next chunk's first stacks.
    pub fn end_chunk(&mut self) {
        for seq in self.previous.clear() {
            self.settle(seq);
        }
        std::mem::swap(&mut self.previous, &mut self.this);
        self.leading = 0;
    }

    /// Whether an allocation of the last chunk waits.
    pub fn is_waiting(&self) -> bool {
        !self.previous.is_empty() || !self.this.is_empty()
    }

    /// Gives up every stack still awaited.
    pub fn settle_all(&mut self) {
        for seq in self.this.clear().into_iter().chain(self.previous.clear()) {
            self.settle(seq);
        }
    }

    fn settle(&mut self, seq: u64) {
        if let Some(r) = self.rows.get_mut((seq - self.first) as usize) {
            r.1 = true;
        }
    }

    /// The next row whose turn it is, settled.
    pub fn pop(&mut self) -> Option<R> {
        if !self.rows.front()?.1 {
            return None;
        }
        self.first += 1;
        self.rows.pop_front().map(|r| r.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_goes_to_the_latest_allocation_of_its_task_and_context() {
        let mut h: Held<(&str, Option<u64>)> = Held::new();
        h.push(("a", None), 1, false, true);
        h.push(("free", None), 1, false, false);
        // An interrupt's allocation nests, and gets its stack first.
        h.push(("irq", None), 1, true, true);
        h.stack(1, true, |r| r.1 = Some(10));
        assert_eq!(h.pop(), None, "a still waits, and the rows keep order");
        h.stack(1, false, |r| r.1 = Some(20));
        let rows: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(rows, [("a", Some(20)), ("free", None), ("irq", Some(10))]);
        assert!(!h.is_waiting());
    }

    #[test]
    fn allocations_nested_in_a_stacked_one_lost_theirs() {
        let mut h: Held<(&str, Option<u64>)> = Held::new();
        h.push(("outer", None), 1, false, true);
        h.push(("inner", None), 2, false, true);
        h.stack(1, false, |r| r.1 = Some(5));
        let rows: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(rows, [("outer", Some(5)), ("inner", None)]);
        assert!(!h.is_waiting());
    }

    #[test]
    fn a_chunks_first_stacks_can_go_to_the_previous_chunks_last_allocations() {
        let mut h: Held<(&str, Option<u64>)> = Held::new();
        h.push(("lost", None), 1, false, true);
        h.end_chunk();
        h.push(("cut", None), 2, false, true);
        h.end_chunk();
        // The next chunk: its own allocation takes its stack first; then
        // one it does not take goes to the previous chunk's.
        h.push(("own", None), 2, false, true);
        h.stack(2, false, |r| r.1 = Some(1));
        h.stack(2, false, |r| r.1 = Some(2));
        h.stack(1, false, |_| panic!("two chunks back: given up"));
        h.end_chunk();
        h.settle_all();
        let rows: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(rows, [("lost", None), ("cut", Some(2)), ("own", Some(1))]);
    }

    #[test]
    fn only_a_chunks_first_four_unmatched_stacks_look_back() {
        let mut h: Held<(u32, Option<u64>)> = Held::new();
        h.push((0, None), 9, false, true);
        h.end_chunk();
        for pid in 1..=4 {
            h.stack(pid, false, |_| ());
        }
        h.stack(9, false, |_| panic!("the fifth unmatched stack"));
        h.settle_all();
        assert_eq!(h.pop(), Some((0, None)));
    }

    #[test]
    fn past_the_depth_the_oldest_gives_up() {
        let mut h: Held<u32> = Held::new();
        for i in 0..5 {
            h.push(i, i as i32, false, true);
        }
        assert_eq!(h.pop(), Some(0), "the fifth pushed the first out");
        assert_eq!(h.pop(), None);
        h.settle_all();
        assert_eq!(std::iter::from_fn(|| h.pop()).count(), 4);
    }
}
