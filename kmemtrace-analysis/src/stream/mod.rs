//! The ordered event stream, in shards: decoder threads ([`decode`]) turn
//! blocks into events routed by the bucket of their pointer or page frame
//! ([`blocks`]); each shard merges its per-CPU sub-streams into time order
//! ([`merge`]) and feeds its own passes, epoch by epoch; the calling thread
//! combines the shards' epochs in time order (what is not additive: peaks,
//! first occurrences, loss judgements). The loss windows and per-CPU counts
//! are assembled once, from every block in stream order ([`losses`]).
//!
//! A shard sees all events of its buckets, in the one order (see
//! [`merge::OrderKey`]), so whatever the number of shards the passes see
//! each pointer's life the same way.

pub mod blocks;
pub mod decode;
pub mod losses;
pub mod merge;

pub use decode::CpuSummary;
pub use losses::{Assembler, StreamInput, Window, Windows};
pub use merge::OrderKey;

use crate::event::Event;
use crate::filter::Filter;
use crate::intern::{Interner, SiteTable};
use blocks::Blocks;
use decode::Decoder;
use kmemtrace_format::kmem::KmemDecoder;
use kmemtrace_format::log::{CpuBlockRef, Log};
use merge::Merger;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Time stamps per epoch, as a shift: 2^22 ns, about 4 ms of trace time.
/// Any value gives the same results; it sets how much a shard hands the
/// combiner at a time.
pub const EPOCH_SHIFT: u32 = 22;
/// Epochs a shard may run ahead of the slowest one (bounds the blocks kept
/// decoded for it).
const EPOCH_LAG: u64 = 8;

/// How far the stream has got, for a progress indicator.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    pub subbufs_done: u64,
    pub subbufs_total: u64,
    pub events: u64,
    pub elapsed: Duration,
}

/// What the stream leaves behind: the loss windows and each CPU's counts.
pub struct StreamEnd {
    pub windows: Windows,
    /// By ascending CPU.
    pub summaries: Vec<CpuSummary>,
    /// Cache names by interned id (index 0 is empty).
    pub cache_names: Vec<String>,
}

/// What the stream needs besides the log.
pub struct StreamSetup<'a> {
    pub kmem: &'a KmemDecoder,
    pub filter: &'a Filter,
    pub sites: &'a SiteTable,
    /// Decoder threads (at least 1).
    pub workers: usize,
    /// Shards (at least 1), each a thread.
    pub shards: usize,
}

/// A shard's consumer of events.
pub trait Shard: Send {
    /// What the combiner needs of one epoch.
    type Epoch: Send;
    /// One event of the shard, in order.
    fn event(&mut self, ev: &Event, key: OrderKey);
    /// Ends the current epoch.
    fn end_epoch(&mut self) -> Self::Epoch;
}

/// The combiner's fold: an epoch's summary, in epoch order, and the loss
/// assembler (for the windows known so far).
pub type Fold<'c, T> = dyn FnMut(T, &Mutex<Assembler>) + 'c;

/// The epochs the shards have handed over, and how far each has got.
struct Exchange<E> {
    epochs: BTreeMap<u64, Vec<E>>,
    /// Per shard: every epoch before this one is handed over (`u64::MAX`:
    /// the shard is done).
    watermark: Vec<u64>,
}

impl<E> Exchange<E> {
    fn low(&self) -> u64 {
        self.watermark.iter().copied().min().unwrap_or(u64::MAX)
    }
}

/// The CPUs to read: those with data, and those END says had data whose
/// blocks are all missing (a loss over the whole capture).
fn stream_cpus(log: &Log) -> Vec<u32> {
    let mut cpus = log.cpus();
    if let Some(end) = &log.end {
        cpus.extend(end.cpus.iter().filter(|t| t.subbufs > 0).map(|t| t.cpu));
        cpus.sort_unstable();
        cpus.dedup();
    }
    cpus
}

/// Runs the shards over the log. Each epoch all shards are past is
/// summarised (`summarise`, on combiner threads, in parallel) and folded
/// (`fold`, on this thread, in epoch order); `progress` is called about
/// every 250 ms. Returns the shards and what the stream learned.
pub fn run<S: Shard, T: Send>(
    log: &Log,
    setup: &StreamSetup<'_>,
    make: impl Fn(usize) -> S + Sync,
    summarise: impl Fn(u64, Vec<S::Epoch>) -> T + Sync,
    fold: &mut Fold<'_, T>,
    progress: &mut dyn FnMut(Progress),
) -> (Vec<S>, StreamEnd) {
    let interner = Interner::new();
    let done = AtomicU64::new(0);
    let events = AtomicU64::new(0);
    let subbufs_total: u64 = log.blocks.iter().map(|b| u64::from(b.count)).sum();
    let cpus = stream_cpus(log);
    let start = Instant::now();
    let shards = setup.shards.max(1);
    let dec = Decoder {
        log,
        kmem: setup.kmem,
        interner: &interner,
        sites: setup.sites,
        filter: setup.filter,
        progress: &done,
        shards,
    };
    let streams: Vec<Vec<CpuBlockRef>> = cpus
        .iter()
        .map(|&c| log.cpu_blocks(c).into_iter().copied().collect())
        .collect();
    let inputs = StreamInput::of(log, &cpus, &streams);
    // Blocks decoded ahead: per stream, enough to keep every decoder busy
    // on a log whose events are mostly on one CPU; in all, four per decoder
    // (a decoded block holds about 1.6 times its raw size). On 2 cores, a
    // 5.5 M-event capture took 1.25 s with two per decoder, 0.92 s with
    // four (+6 MB), no faster with six.
    let ahead = (2 * setup.workers).clamp(2, 8);
    let blocks = Blocks::new(&dec, streams, Assembler::new(inputs), 4 * setup.workers);
    let exchange = Mutex::new(Exchange::<S::Epoch> {
        epochs: BTreeMap::new(),
        watermark: vec![0; shards],
    });
    // Shards ahead of the slowest wait on `lagging`; the combiner polls
    // (waking it per epoch would cost a context switch per epoch) and hears
    // at once when a shard is done.
    let lagging = Condvar::new();
    let finished_one = Condvar::new();
    let lock = || exchange.lock().unwrap_or_else(|e| e.into_inner());
    let hand_over = |shard: usize, epoch: u64, out: Option<S::Epoch>, next: u64| {
        let mut x = lock();
        if let Some(out) = out {
            x.epochs.entry(epoch).or_default().push(out);
        }
        let low = x.low();
        x.watermark[shard] = next;
        if x.low() != low {
            lagging.notify_all();
        }
        if next == u64::MAX {
            finished_one.notify_all();
        }
        while next != u64::MAX && next > x.low().saturating_add(EPOCH_LAG) {
            x = lagging.wait(x).unwrap_or_else(|e| e.into_inner());
        }
    };
    let shard_loop = |shard: usize| -> S {
        // A shard that panics still says it is done (as it unwinds), so
        // that nothing waits for it; the panic reaches the caller at join.
        struct Done<'x, F: Fn()>(&'x F);
        impl<F: Fn()> Drop for Done<'_, F> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    (self.0)()
                }
            }
        }
        let give_up = || {
            let mut x = lock();
            x.watermark[shard] = u64::MAX;
            lagging.notify_all();
            finished_one.notify_all();
        };
        let _done = Done(&give_up);
        let mut sink = make(shard);
        let mut m = Merger::new(&blocks, shard, ahead);
        let mut epoch: Option<u64> = None;
        let mut n: u64 = 0;
        while let Some((ev, key)) = m.next_event() {
            let e = key.ts >> EPOCH_SHIFT;
            match epoch {
                Some(cur) if e > cur => {
                    hand_over(shard, cur, Some(sink.end_epoch()), e);
                    epoch = Some(e);
                }
                None => epoch = Some(e),
                _ => {}
            }
            sink.event(&ev, key);
            n += 1;
            if n & 0xffff == 0 {
                events.fetch_add(0x10000, Ordering::Relaxed);
            }
        }
        events.fetch_add(n & 0xffff, Ordering::Relaxed);
        let last = epoch.map(|_| sink.end_epoch());
        hand_over(shard, epoch.unwrap_or(0), last, u64::MAX);
        sink
    };
    let (job_tx, job_rx) = std::sync::mpsc::channel::<(u64, u64, Vec<S::Epoch>)>();
    let (sum_tx, sum_rx) = std::sync::mpsc::channel::<(u64, T)>();
    let job_rx = Mutex::new(job_rx);
    let sinks = std::thread::scope(|scope| {
        for w in 0..setup.workers.max(1) {
            let blocks = &blocks;
            std::thread::Builder::new()
                .name(format!("decode-{w}"))
                .spawn_scoped(scope, move || blocks.work())
                .expect("spawn a decoder thread");
        }
        let handles: Vec<_> = (0..shards)
            .map(|s| {
                let shard_loop = &shard_loop;
                std::thread::Builder::new()
                    .name(format!("shard-{s}"))
                    .spawn_scoped(scope, move || shard_loop(s))
                    .expect("spawn a shard thread")
            })
            .collect();
        // Summarise every epoch all shards are past, on combiner threads;
        // fold the summaries here, in epoch order.
        // With one shard there is nothing to merge: summarise here.
        let combiners = if shards == 1 { 0 } else { shards.div_ceil(2) };
        for c in 0..combiners {
            let (job_rx, sum_tx, summarise) = (&job_rx, sum_tx.clone(), &summarise);
            std::thread::Builder::new()
                .name(format!("combine-{c}"))
                .spawn_scoped(scope, move || loop {
                    let job = job_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((seq, epoch, outs)) = job else { return };
                    if sum_tx.send((seq, summarise(epoch, outs))).is_err() {
                        return;
                    }
                })
                .expect("spawn a combiner thread");
        }
        drop(sum_tx);
        let (mut sent, mut folded) = (0u64, 0u64);
        let mut done_out: BTreeMap<u64, T> = BTreeMap::new();
        let mut fold_ready = |done_out: &mut BTreeMap<u64, T>, folded: &mut u64| {
            while let Some(t) = done_out.remove(folded) {
                fold(t, &blocks.assembler);
                *folded += 1;
            }
        };
        let mut last_report = Instant::now();
        loop {
            let mut x = lock();
            let ready = loop {
                let low = x.low();
                if x.epochs.first_key_value().is_some_and(|(&e, _)| e < low) {
                    let later = x.epochs.split_off(&low);
                    break std::mem::replace(&mut x.epochs, later);
                }
                if low == u64::MAX {
                    break BTreeMap::new();
                }
                let (g, _) = finished_one
                    .wait_timeout(x, Duration::from_millis(10))
                    .unwrap_or_else(|e| e.into_inner());
                x = g;
                drop(x);
                while let Ok((seq, t)) = sum_rx.try_recv() {
                    done_out.insert(seq, t);
                }
                fold_ready(&mut done_out, &mut folded);
                if last_report.elapsed() >= Duration::from_millis(250) {
                    last_report = Instant::now();
                    progress(Progress {
                        subbufs_done: done.load(Ordering::Relaxed),
                        subbufs_total,
                        events: events.load(Ordering::Relaxed),
                        elapsed: start.elapsed(),
                    });
                }
                x = lock();
            };
            let finished = ready.is_empty() && x.low() == u64::MAX;
            drop(x);
            for (e, outs) in ready {
                if combiners == 0 {
                    done_out.insert(sent, summarise(e, outs));
                } else {
                    let _ = job_tx.send((sent, e, outs));
                }
                sent += 1;
            }
            while let Ok((seq, t)) = sum_rx.try_recv() {
                done_out.insert(seq, t);
            }
            fold_ready(&mut done_out, &mut folded);
            if finished {
                break;
            }
        }
        drop(job_tx);
        for (seq, t) in sum_rx.iter() {
            done_out.insert(seq, t);
        }
        fold_ready(&mut done_out, &mut folded);
        let sinks: Vec<S> = handles
            .into_iter()
            .map(|h| h.join().expect("a shard thread panicked"))
            .collect();
        blocks.close();
        sinks
    });
    let assembler = blocks
        .assembler
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let (windows, summaries) = assembler.finish();
    (
        sinks,
        StreamEnd {
            windows,
            summaries,
            cache_names: interner.names(),
        },
    )
}
