//! Page allocations paired with the kernel stack taken with each, as the
//! analysis pairs them (`kmemtrace_analysis::stream::decode`): the kernel
//! writes the stack right after the event, on the same CPU; an interrupt's
//! allocation and stack can come between and nest, so a stack belongs to
//! the latest allocation waiting of its task and context, and the ones
//! after that lost theirs. Rows wait in their order until settled, so the
//! table keeps the CPU's order.

use std::collections::VecDeque;

/// Allocations waiting for their stack: (pid, in interrupt, what).
pub struct Waiting<T> {
    list: Vec<(i32, bool, T)>,
}

impl<T> Waiting<T> {
    /// At most this many wait (process, soft and hard interrupt, NMI), as
    /// in the analysis.
    const DEPTH: usize = 4;

    pub fn new() -> Self {
        Waiting { list: Vec::new() }
    }

    /// Adds one; the oldest is given up (returned) past the depth.
    pub fn push(&mut self, pid: i32, in_interrupt: bool, what: T) -> Option<T> {
        let old = (self.list.len() == Self::DEPTH).then(|| self.list.remove(0).2);
        self.list.push((pid, in_interrupt, what));
        old
    }

    /// The allocation a stack of task `pid` in that context was taken
    /// with, if one waits, and those after it, which lost theirs.
    pub fn take(&mut self, pid: i32, in_interrupt: bool) -> Option<(T, Vec<T>)> {
        let i = self
            .list
            .iter()
            .rposition(|&(p, intr, _)| p == pid && intr == in_interrupt)?;
        let lost = self.list.drain(i + 1..).map(|w| w.2).collect();
        let (_, _, what) = self.list.pop()?;
        Some((what, lost))
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn clear(&mut self) -> Vec<T> {
        self.list.drain(..).map(|w| w.2).collect()
    }
}

/// Rows held in order until each waiting one has its call site.
pub struct Held<R> {
    /// Rows from sequence number `first` on, and whether each is settled.
    rows: VecDeque<(R, bool)>,
    first: u64,
    waiting: Waiting<u64>,
}

/// Rows held at most; past it the oldest waiting gives up its stack (one
/// lost in the ring buffer would otherwise hold every row after it).
const MAX_HELD: usize = 4096;

impl<R> Held<R> {
    pub fn new() -> Self {
        Held {
            rows: VecDeque::new(),
            first: 0,
            waiting: Waiting::new(),
        }
    }

    /// Adds a row; `waits` if a stack will come for it.
    pub fn push(&mut self, row: R, pid: i32, in_interrupt: bool, waits: bool) {
        let seq = self.first + self.rows.len() as u64;
        self.rows.push_back((row, !waits));
        if waits {
            if let Some(old) = self.waiting.push(pid, in_interrupt, seq) {
                self.settle(old);
            }
        }
        if self.rows.len() > MAX_HELD {
            for seq in self.waiting.clear() {
                self.settle(seq);
            }
        }
    }

    /// A stack of `pid` in that context: `set` gives its row the call
    /// site. False if no row waits for it.
    pub fn stack(&mut self, pid: i32, in_interrupt: bool, set: impl FnOnce(&mut R)) -> bool {
        let Some((seq, lost)) = self.waiting.take(pid, in_interrupt) else {
            return false;
        };
        if let Some((row, _)) = self.rows.get_mut((seq - self.first) as usize) {
            set(row);
        }
        self.settle(seq);
        for seq in lost {
            self.settle(seq);
        }
        true
    }

    pub fn is_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Gives up every stack still awaited.
    pub fn settle_all(&mut self) {
        for seq in self.waiting.clear() {
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
        assert!(h.stack(1, true, |r| r.1 = Some(10)));
        assert_eq!(h.pop(), None, "a still waits, and the rows keep order");
        assert!(h.stack(1, false, |r| r.1 = Some(20)));
        let rows: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(rows, [("a", Some(20)), ("free", None), ("irq", Some(10))]);
        assert!(!h.stack(1, false, |_| ()), "nothing waits");
    }

    #[test]
    fn allocations_nested_in_a_stacked_one_lost_theirs() {
        let mut h: Held<(&str, Option<u64>)> = Held::new();
        h.push(("outer", None), 1, false, true);
        h.push(("inner", None), 2, false, true);
        assert!(h.stack(1, false, |r| r.1 = Some(5)));
        let rows: Vec<_> = std::iter::from_fn(|| h.pop()).collect();
        assert_eq!(rows, [("outer", Some(5)), ("inner", None)]);
        assert!(!h.is_waiting());
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
