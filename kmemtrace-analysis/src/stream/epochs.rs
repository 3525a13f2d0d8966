//! The hand-over between the shards and the combiner: each shard hands
//! over its output for an epoch as it passes it; the combiner takes the
//! epochs every shard is past, in order. A shard too far ahead of the
//! slowest waits (it would only hold decoded blocks and epochs in memory).

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Epochs a shard may run ahead of the slowest one.
const EPOCH_LAG: u64 = 8;

struct State<E> {
    epochs: BTreeMap<u64, Vec<E>>,
    /// Per shard: every epoch before this one is handed over (`u64::MAX`:
    /// the shard is done).
    watermark: Vec<u64>,
}

impl<E> State<E> {
    fn low(&self) -> u64 {
        self.watermark.iter().copied().min().unwrap_or(u64::MAX)
    }
}

/// Shards ahead of the slowest wait on `lagging`; the combiner polls
/// (waking it per epoch would cost a context switch per epoch) and hears at
/// once when a shard is done.
pub struct Epochs<E> {
    state: Mutex<State<E>>,
    lagging: Condvar,
    finished_one: Condvar,
}

impl<E> Epochs<E> {
    pub fn new(shards: usize) -> Self {
        Epochs {
            state: Mutex::new(State {
                epochs: BTreeMap::new(),
                watermark: vec![0; shards],
            }),
            lagging: Condvar::new(),
            finished_one: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<E>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shard `shard` hands over its output for `epoch` (if it had events
    /// in it) and goes on to `next` (`u64::MAX`: it is done).
    pub fn hand_over(&self, shard: usize, epoch: u64, out: Option<E>, next: u64) {
        let mut x = self.lock();
        if let Some(out) = out {
            x.epochs.entry(epoch).or_default().push(out);
        }
        let low = x.low();
        x.watermark[shard] = next;
        if x.low() != low {
            self.lagging.notify_all();
        }
        if next == u64::MAX {
            self.finished_one.notify_all();
        }
        while next != u64::MAX && next > x.low().saturating_add(EPOCH_LAG) {
            x = super::timings::waiting_on_next(|| {
                self.lagging.wait(x).unwrap_or_else(|e| e.into_inner())
            });
        }
    }

    /// A shard that stops early (a panic): nothing waits for it.
    pub fn give_up(&self, shard: usize) {
        self.lock().watermark[shard] = u64::MAX;
        self.lagging.notify_all();
        self.finished_one.notify_all();
    }

    /// The epochs every shard is past, in order, waiting up to `timeout`
    /// for some; and whether every shard is done (then nothing is left).
    pub fn ready(&self, timeout: Duration) -> (BTreeMap<u64, Vec<E>>, bool) {
        let mut x = self.lock();
        if x.epochs
            .first_key_value()
            .is_none_or(|(&e, _)| e >= x.low())
            && x.low() != u64::MAX
        {
            x = self
                .finished_one
                .wait_timeout(x, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let low = x.low();
        let later = x.epochs.split_off(&low);
        let ready = std::mem::replace(&mut x.epochs, later);
        (ready, low == u64::MAX && x.epochs.is_empty())
    }
}

/// Results numbered in order of request, handed out in that order.
pub struct InOrder<T> {
    next: u64,
    waiting: BTreeMap<u64, T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            next: 0,
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> InOrder<T> {
    pub fn put(&mut self, seq: u64, t: T) {
        self.waiting.insert(seq, t);
    }

    /// The next results in order, as far as they are in.
    pub fn take(&mut self) -> Option<T> {
        let t = self.waiting.remove(&self.next)?;
        self.next += 1;
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_come_out_once_every_shard_is_past_them() {
        let e = Epochs::new(2);
        e.hand_over(0, 3, Some("a3"), 5);
        let (r, done) = e.ready(Duration::ZERO);
        assert!(r.is_empty() && !done, "shard 1 is still at 0");
        e.hand_over(1, 2, Some("b2"), 4);
        let (r, done) = e.ready(Duration::ZERO);
        assert_eq!(
            r.into_iter().collect::<Vec<_>>(),
            [(2, vec!["b2"]), (3, vec!["a3"])]
        );
        assert!(!done);
        e.hand_over(0, 5, Some("a5"), u64::MAX);
        e.give_up(1);
        let (r, done) = e.ready(Duration::ZERO);
        assert_eq!(r.into_iter().collect::<Vec<_>>(), [(5, vec!["a5"])]);
        assert!(done);
    }

    #[test]
    fn results_in_order() {
        let mut o = InOrder::default();
        o.put(1, 'b');
        assert_eq!(o.take(), None);
        o.put(0, 'a');
        assert_eq!(o.take(), Some('a'));
        assert_eq!(o.take(), Some('b'));
        assert_eq!(o.take(), None);
    }
}
