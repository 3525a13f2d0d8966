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
pub mod epochs;
pub mod losses;
pub mod merge;
pub mod timings;
pub mod tracepoints;

pub use decode::CpuSummary;
pub use losses::{Assembler, StreamInput, Window, Windows};
pub use merge::OrderKey;

use crate::event::Event;
use crate::filter::Filter;
use crate::intern::{Interner, SiteTable, StackTable};
use blocks::Blocks;
use decode::Decoder;
use epochs::{Epochs, InOrder};
use kmemtrace_import::log::{CpuBlockRef, Log};
use kmemtrace_kernel::KmemDecoder;
use merge::Merger;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use timings::{Role, ThreadClock};
use tracepoints::Tracepoints;

/// Time stamps per epoch, as a shift: 2^22 ns, about 4 ms of trace time.
/// Any value gives the same results; it sets how much a shard hands the
/// combiner at a time.
pub const EPOCH_SHIFT: u32 = 22;

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
    /// Kernel stacks by interned id (index 0, [`crate::intern::NO_STACK`],
    /// is empty).
    pub stacks: Vec<Box<[u64]>>,
    /// Each stream thread's time, the calling thread's fold included.
    pub threads: Vec<timings::ThreadTime>,
    /// Events handed to the shards.
    pub events: u64,
}

/// What the stream needs besides the log.
pub struct StreamSetup<'a> {
    pub kmem: &'a KmemDecoder,
    pub filter: &'a Filter,
    pub sites: &'a SiteTable,
    /// The other tracepoints the passes asked for (none: only kmem events
    /// are decoded).
    pub tracepoints: &'a Tracepoints,
    /// Decoder threads; with none, the shards decode every block
    /// themselves (they decode queued blocks whenever they wait).
    pub workers: usize,
    /// Shards (at least 1), each a thread.
    pub shards: usize,
}

/// A shard's consumer of events.
pub trait Shard: Send {
    /// What the combiner needs of one epoch.
    type Epoch: Send;
    /// The next events, before they come one by one to `event`: a shard
    /// may touch the memory they will need, so that its cache misses
    /// overlap.
    fn look_ahead(&mut self, _next: &[(Event, OrderKey)]) {}
    /// One event of the shard, in order.
    fn event(&mut self, ev: &Event, key: OrderKey);
    /// Ends the current epoch.
    fn end_epoch(&mut self) -> Self::Epoch;
}

/// The combiner's fold: an epoch's summary, in epoch order, and the loss
/// assembler (for the windows known so far).
pub type Fold<'c, T> = dyn FnMut(T, &Mutex<Assembler>) + 'c;

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

/// Closes the decoders' queue when dropped: however the stream's scope
/// ends, a panic of a shard or of a fold included, the decoders stop (they
/// wait for work until the queue closes, and the scope waits for them
/// before the panic goes on).
struct CloseOnExit<'x, 'b>(&'x Blocks<'b>);

impl Drop for CloseOnExit<'_, '_> {
    fn drop(&mut self) {
        self.0.close()
    }
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
    let stack_table = StackTable::default();
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
        switches: kmemtrace_import::tasks::SwitchReader::new(log),
        stack_reader: kmemtrace_import::stacks::StackReader::new(log),
        stacks: &stack_table,
        tracepoints: setup.tracepoints,
    };
    let by_cpu = log.blocks_by_cpu();
    let streams: Vec<Vec<CpuBlockRef>> = cpus
        .iter()
        .map(|c| {
            by_cpu
                .get(c)
                .map_or(Vec::new(), |b| b.iter().map(|&&b| b).collect())
        })
        .collect();
    let inputs = StreamInput::of(log, &cpus, &streams);
    // Blocks decoded ahead: per stream, enough to keep every decoder busy
    // on a log whose events are mostly on one CPU; in all, four per decoder
    // and eight more (a decoded block is larger than its raw bytes): fewer
    // starve the decoders, and a shard that decodes while it waits
    // takes queued blocks from them; more only cost memory
    // (docs/benchmarks.md, "Why the defaults").
    let ahead = (2 * setup.workers).clamp(4, 8);
    let cap = 4 * setup.workers + 8;
    let blocks = Blocks::new(&dec, streams, Assembler::new(inputs), cap);
    let epochs = Epochs::<S::Epoch>::new(shards);
    let (job_tx, job_rx) = std::sync::mpsc::channel::<(u64, u64, Vec<S::Epoch>)>();
    let (sum_tx, sum_rx) = std::sync::mpsc::channel::<(u64, T)>();
    let job_rx = Mutex::new(job_rx);
    let threads = Mutex::new(Vec::new());
    let sinks = std::thread::scope(|scope| {
        let _close = CloseOnExit(&blocks);
        for w in 0..setup.workers {
            let blocks = &blocks;
            spawn_timed(scope, Role::Decode, w, &threads, move || blocks.work());
        }
        let handles: Vec<_> = (0..shards)
            .map(|s| {
                let (blocks, epochs, events, make) = (&blocks, &epochs, &events, &make);
                spawn_timed(scope, Role::Shard, s, &threads, move || {
                    let merger = Merger::new(blocks, s, ahead);
                    shard_loop(s, make(s), merger, epochs, events)
                })
            })
            .collect();
        // Summarise every epoch all shards are past, on combiner threads
        // (with one shard there is nothing to merge: here); fold the
        // summaries here, in epoch order.
        let combiners = if shards == 1 { 0 } else { shards.div_ceil(2) };
        for c in 0..combiners {
            let (job_rx, sum_tx, summarise) = (&job_rx, sum_tx.clone(), &summarise);
            spawn_timed(scope, Role::Combine, c, &threads, move || {
                combine_loop(job_rx, sum_tx, summarise)
            });
        }
        drop(sum_tx);
        let clock = ThreadClock::start(Role::Fold, 0);
        let mut summaries = InOrder::default();
        let mut sent = 0u64;
        let mut last_report = Instant::now();
        loop {
            let (ready, finished) =
                timings::waiting_on_input(|| epochs.ready(Duration::from_millis(10)));
            for (e, outs) in ready {
                if combiners == 0 {
                    summaries.put(sent, summarise(e, outs));
                } else {
                    let _ = job_tx.send((sent, e, outs));
                }
                sent += 1;
            }
            if finished {
                break;
            }
            while let Ok((seq, t)) = sum_rx.try_recv() {
                summaries.put(seq, t);
            }
            while let Some(t) = summaries.take() {
                fold(t, &blocks.assembler);
            }
            if last_report.elapsed() >= Duration::from_millis(250) {
                last_report = Instant::now();
                progress(Progress {
                    subbufs_done: done.load(Ordering::Relaxed),
                    subbufs_total,
                    events: events.load(Ordering::Relaxed),
                    elapsed: start.elapsed(),
                });
            }
        }
        drop(job_tx);
        for (seq, t) in sum_rx.iter() {
            summaries.put(seq, t);
        }
        while let Some(t) = summaries.take() {
            fold(t, &blocks.assembler);
        }
        clock.stop(&threads);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Vec<S>>()
    });
    let assembler = blocks
        .assembler
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let (windows, mut summaries) = assembler.finish();
    for s in &mut summaries {
        // A search, not a scan: END may list millions of CPUs.
        if let Ok(ends) = cpus.binary_search(&s.cpu) {
            blocks.stack_ends[ends].add_to(s);
        }
    }
    (
        sinks,
        StreamEnd {
            windows,
            summaries,
            cache_names: interner.names(),
            stacks: stack_table.stacks(),
            threads: threads.into_inner().unwrap_or_else(|e| e.into_inner()),
            events: events.into_inner(),
        },
    )
}

/// Spawns the stream thread `role`-`index` in `scope`, its time added to
/// `threads` as it ends.
fn spawn_timed<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    role: Role,
    index: usize,
    threads: &'scope Mutex<Vec<timings::ThreadTime>>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> std::thread::ScopedJoinHandle<'scope, T> {
    std::thread::Builder::new()
        .name(format!("{}-{index}", role.name()))
        .spawn_scoped(scope, move || {
            let clock = ThreadClock::start(role, index);
            let out = f();
            clock.stop(threads);
            out
        })
        .unwrap_or_else(|e| panic!("spawn a {} thread: {e}", role.name()))
}

/// A combiner thread: summarises the epochs it is sent, until the
/// channel closes.
fn combine_loop<E, T>(
    jobs: &Mutex<std::sync::mpsc::Receiver<(u64, u64, Vec<E>)>>,
    sums: std::sync::mpsc::Sender<(u64, T)>,
    summarise: &impl Fn(u64, Vec<E>) -> T,
) {
    loop {
        let job =
            timings::waiting_on_input(|| jobs.lock().unwrap_or_else(|e| e.into_inner()).recv());
        let Ok((seq, epoch, outs)) = job else { return };
        if sums.send((seq, summarise(epoch, outs))).is_err() {
            return;
        }
    }
}

/// Events a shard is shown ahead ([`Shard::look_ahead`]): enough for their
/// cache misses to overlap, few enough that what the first touches is
/// still cached when the last is handled.
pub const LOOK_AHEAD: usize = 16;

/// One shard: its events in order into its sink, its epochs handed over as
/// it passes them.
fn shard_loop<S: Shard>(
    shard: usize,
    mut sink: S,
    mut merger: Merger<'_, '_>,
    epochs: &Epochs<S::Epoch>,
    events: &AtomicU64,
) -> S {
    // A shard that panics still says it is done (as it unwinds), so that
    // nothing waits for it; the panic reaches the caller at join.
    struct GiveUp<'x, E>(&'x Epochs<E>, usize);
    impl<E> Drop for GiveUp<'_, E> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                self.0.give_up(self.1)
            }
        }
    }
    let _guard = GiveUp(epochs, shard);
    let mut epoch: Option<u64> = None;
    let mut n: u64 = 0;
    let mut next = Vec::with_capacity(LOOK_AHEAD);
    loop {
        next.clear();
        next.extend(std::iter::from_fn(|| merger.next_event()).take(LOOK_AHEAD));
        if next.is_empty() {
            break;
        }
        sink.look_ahead(&next);
        for (ev, key) in &next {
            let e = key.ts >> EPOCH_SHIFT;
            match epoch {
                Some(cur) if e > cur => {
                    epochs.hand_over(shard, cur, Some(sink.end_epoch()), e);
                    epoch = Some(e);
                }
                None => epoch = Some(e),
                _ => {}
            }
            sink.event(ev, *key);
            n += 1;
            if n & 0xffff == 0 {
                events.fetch_add(0x10000, Ordering::Relaxed);
            }
        }
    }
    events.fetch_add(n & 0xffff, Ordering::Relaxed);
    let last = epoch.map(|_| sink.end_epoch());
    epochs.hand_over(shard, epoch.unwrap_or(0), last, u64::MAX);
    sink
}
