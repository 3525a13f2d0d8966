//! Decoded blocks, shared by the shards: each block is decoded once, on
//! the first shard's request, by whichever decoder thread is free; its
//! events wait, routed by shard, until each shard takes its part. The
//! loss assembler hears of every block as it is decoded.

use super::decode::{AwaitingStacks, CpuSummary, Decoded, Decoder, LateStack, Local};
use super::losses::Assembler;
use crate::event::Event;
use kmemtrace_import::log::CpuBlockRef;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Condvar, Mutex};

/// How long a shard waiting for its block sleeps before it looks for a
/// queued block to decode again.
const HELP_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// One block's place.
struct Slot {
    queued: AtomicBool,
    /// Shards that have taken their part.
    taken: AtomicUsize,
    state: Mutex<Option<Ready>>,
    ready: Condvar,
    /// The block's leading stacks, once decoded (for the block before).
    leading: Mutex<Option<Vec<LateStack>>>,
}

/// A decoded block's parts, as the shards take them.
struct Ready {
    parts: Vec<Option<Vec<Event>>>,
    max_ts: u64,
    /// Allocations waiting for a stack from the next block, until it is
    /// decoded; the parts are handed out only then.
    trailing: Option<AwaitingStacks>,
}

impl Ready {
    /// Whether the shards may take their parts: no allocation waits for a
    /// stack from the next block.
    fn complete(&self) -> bool {
        self.trailing.is_none()
    }
}

/// The blocks of every stream (one per CPU), decoded on demand.
pub struct Blocks<'a> {
    decoder: &'a Decoder<'a>,
    streams: Vec<Vec<CpuBlockRef>>,
    slots: Vec<Vec<Slot>>,
    jobs: Mutex<Option<Sender<(usize, usize)>>>,
    queue: Mutex<Receiver<(usize, usize)>>,
    pub assembler: Mutex<Assembler>,
    /// Emptied event vectors, for reuse (a fresh one per block costs page
    /// faults and zeroing).
    pool: Mutex<Vec<Vec<Event>>>,
    shards: usize,
    /// Blocks asked for and not yet taken by every shard, and how many
    /// may be asked for ahead of need (decoded blocks are the memory).
    in_flight: AtomicUsize,
    cap: usize,
    /// Per stream, how its stacks and allocations paired across blocks.
    pub stack_ends: Vec<StackEnds>,
}

/// How a stream's stacks and allocations paired where its blocks meet,
/// and at its two ends.
#[derive(Default)]
pub struct StackEnds {
    /// Stacks matched across a block boundary.
    pub late: AtomicU64,
    /// Allocations still waiting for their stack when the stream ended
    /// (the capture stopped between the two).
    pub cut_at_end: AtomicU64,
    /// The first block's stacks that no allocation took: with tracing
    /// still off, the kernel puts an event whose trigger has a filter in a
    /// scratch buffer for the filter (`trace.c`
    /// `trace_event_buffer_lock_reserve`), so the allocation was not
    /// recorded and its stack, taken a moment later, was: tracing came on
    /// in between.
    pub cut_at_start: AtomicU64,
}

impl StackEnds {
    /// Adds the counts to a CPU's summary.
    pub fn add_to(&self, s: &mut CpuSummary) {
        s.stacks_paired += self.late.load(Ordering::Relaxed);
        s.stacks_cut_at_end += self.cut_at_end.load(Ordering::Relaxed);
        s.stacks_cut_at_start += self.cut_at_start.load(Ordering::Relaxed);
    }
}

impl<'a> Blocks<'a> {
    /// `cap`: blocks decoded ahead of need, at most.
    pub fn new(
        decoder: &'a Decoder<'a>,
        streams: Vec<Vec<CpuBlockRef>>,
        assembler: Assembler,
        cap: usize,
    ) -> Self {
        let slots = streams
            .iter()
            .map(|s| {
                s.iter()
                    .map(|_| Slot {
                        queued: AtomicBool::new(false),
                        taken: AtomicUsize::new(0),
                        state: Mutex::new(None),
                        ready: Condvar::new(),
                        leading: Mutex::new(None),
                    })
                    .collect()
            })
            .collect();
        let (tx, rx) = channel();
        Blocks {
            stack_ends: streams.iter().map(|_| Default::default()).collect(),
            decoder,
            streams,
            slots,
            jobs: Mutex::new(Some(tx)),
            queue: Mutex::new(rx),
            assembler: Mutex::new(assembler),
            pool: Mutex::new(Vec::new()),
            shards: decoder.shards.max(1),
            in_flight: AtomicUsize::new(0),
            cap: cap.max(1),
        }
    }

    /// Blocks of stream `i`.
    pub fn len(&self, i: usize) -> usize {
        self.streams[i].len()
    }

    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Asks for block `k` of stream `i` to be decoded ahead of need, if
    /// fewer than the cap are.
    pub fn request_ahead(&self, i: usize, k: usize) {
        if self.in_flight.load(Ordering::Relaxed) < self.cap {
            self.request(i, k);
        }
    }

    /// Asks for block `k` of stream `i` to be decoded (once).
    pub fn request(&self, i: usize, k: usize) {
        let Some(slot) = self.slots[i].get(k) else {
            return;
        };
        if !slot.queued.swap(true, Ordering::AcqRel) {
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            if let Some(tx) = &*self.jobs.lock().unwrap_or_else(|e| e.into_inner()) {
                let _ = tx.send((i, k));
            }
        }
    }

    /// Shard `shard`'s events of block `k` of stream `i`, and the block's
    /// latest time stamp; waits for the decoding, decoding queued blocks
    /// meanwhile with `helper` (the shard's own caches, made on first use)
    /// where every decoder thread is busy: the shard's core would idle
    /// otherwise, and with as many threads as cores it does not.
    pub fn take(
        &self,
        i: usize,
        k: usize,
        shard: usize,
        helper: &mut Option<Local<'a>>,
    ) -> (Vec<Event>, u64) {
        self.request(i, k);
        let slot = &self.slots[i][k];
        loop {
            let mut st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = st.as_mut().filter(|r| r.complete()) {
                let part = r.parts.get_mut(shard).and_then(Option::take);
                if slot.taken.fetch_add(1, Ordering::AcqRel) + 1 == self.shards {
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                }
                return (part.unwrap_or_default(), r.max_ts);
            }
            drop(st);
            if self.help(helper) {
                continue;
            }
            st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if !st.as_ref().is_some_and(Ready::complete) {
                // Woken by the block, or in a while to look for queued
                // blocks again.
                let _ = super::timings::waiting_on_input(|| {
                    slot.ready
                        .wait_timeout(st, HELP_POLL)
                        .unwrap_or_else(|e| e.into_inner())
                });
            }
        }
    }

    /// Decodes the next queued block on the calling thread, if one is
    /// queued and no decoder thread is idle (an idle one holds the queue,
    /// waiting): whether it did.
    fn help(&self, helper: &mut Option<Local<'a>>) -> bool {
        let job = match self.queue.try_lock() {
            Ok(q) => q.try_recv().ok(),
            Err(_) => None,
        };
        let Some((i, k)) = job else {
            return false;
        };
        let local = helper.get_or_insert_with(|| Local::new(self.decoder));
        super::timings::helping(|| self.decode_job(local, i, k));
        true
    }

    /// Gives an emptied event vector back for reuse.
    pub fn recycle(&self, mut v: Vec<Event>) {
        if v.capacity() == 0 {
            return;
        }
        v.clear();
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() < 64 {
            p.push(v);
        }
    }

    /// A decoder thread: serves requests until [`Blocks::close`].
    pub fn work(&self) {
        let mut local = Local::new(self.decoder);
        loop {
            let job = super::timings::waiting_on_input(|| {
                self.queue.lock().unwrap_or_else(|e| e.into_inner()).recv()
            });
            let Ok((i, k)) = job else { return };
            self.decode_job(&mut local, i, k);
        }
    }

    /// Decodes block `k` of stream `i` with a thread's caches `local`,
    /// tells the loss assembler, and makes the block ready.
    fn decode_job(&self, local: &mut Local<'a>, i: usize, k: usize) {
        let spare = || self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let block = &self.streams[i][k];
        // A decoder that panics on a block (a bug) leaves the block
        // lost, not a shard waiting for it forever.
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.decoder
                .decode(block, local, &mut || spare().unwrap_or_default())
        }));
        let Decoded { parts, mut meta } = decoded.unwrap_or_else(|_| {
            *local = Local::new(self.decoder);
            let what = format!(
                "CPU {} block {}: the decoder failed",
                block.cpu, block.block_seq
            );
            self.decoder.lost(block, block.offset, what)
        });
        let max_ts = meta.max_ts;
        let leading = std::mem::take(&mut meta.leading_stacks);
        let trailing = std::mem::take(&mut meta.trailing);
        self.assembler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(i, k, meta);
        self.publish(i, k, parts, max_ts, trailing);
        self.hand_back(i, k, leading);
    }

    /// Makes block `k` of stream `i` ready, once its last allocations have
    /// the stacks at the start of block `k + 1` (see [`Blocks::hand_back`]).
    fn publish(
        &self,
        i: usize,
        k: usize,
        parts: Vec<Vec<Event>>,
        max_ts: u64,
        trailing: AwaitingStacks,
    ) {
        let slot = &self.slots[i][k];
        let mut parts: Vec<Option<Vec<Event>>> = parts.into_iter().map(Some).collect();
        let mut trailing = (!trailing.is_empty()).then_some(trailing);
        // The next block's leading stacks stay locked until this block is
        // in place: its decoder hands them back after setting them, and
        // then finds this block waiting (see `hand_back`).
        let next = self.slots[i].get(k + 1);
        let lead = next.map(|n| n.leading.lock().unwrap_or_else(|e| e.into_inner()));
        match (trailing.as_mut(), lead.as_ref()) {
            (None, _) => {}
            // The stream's last block: the kernel takes a stack after its
            // event, and tracing stopped in between.
            (Some(t), None) => {
                self.stack_ends[i]
                    .cut_at_end
                    .fetch_add(t.waiting(), Ordering::Relaxed);
                trailing = None;
            }
            (Some(t), Some(l)) => {
                if let Some(l) = l.as_ref() {
                    let n = t.late(l, &mut parts);
                    self.stack_ends[i].late.fetch_add(n, Ordering::Relaxed);
                    trailing = None;
                }
            }
        }
        let waits = trailing.is_some();
        *slot.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(Ready {
            parts,
            max_ts,
            trailing,
        });
        drop(lead);
        slot.ready.notify_all();
        if waits {
            self.request(i, k + 1);
        }
    }

    /// Block `k` of stream `i` is decoded: its leading stacks go to the
    /// block before, if that one waits for them.
    fn hand_back(&self, i: usize, k: usize, leading: Vec<LateStack>) {
        *self.slots[i][k]
            .leading
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(leading.clone());
        let Some(prev) = k.checked_sub(1).map(|p| &self.slots[i][p]) else {
            let n = leading.len() as u64;
            self.stack_ends[i]
                .cut_at_start
                .fetch_add(n, Ordering::Relaxed);
            return;
        };
        let mut st = prev.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = st.as_mut() {
            if let Some(mut t) = r.trailing.take() {
                let n = t.late(&leading, &mut r.parts);
                self.stack_ends[i].late.fetch_add(n, Ordering::Relaxed);
                prev.ready.notify_all();
            }
        }
    }

    /// The decoders stop once the queue is empty. (Every shard takes every
    /// block, so by the time the shards are done every block was decoded
    /// and assembled.)
    pub fn close(&self) {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
