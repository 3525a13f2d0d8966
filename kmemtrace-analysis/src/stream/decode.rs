//! Decoding one block at a time, on any decoder thread: its sub-buffers
//! (through [`kmemtrace_import::walk`]), kmem events decoded with the
//! recorded kernel's byte order (monomorphised once per block), handed back
//! as compact events, slab and page alike, already routed: one vector per
//! shard, by the bucket of the event's pointer or page frame.
//!
//! What the loss windows need of a block is noted here, sub-buffer by
//! sub-buffer ([`SubBufRuns`]): each one's missed-events flag, whether it
//! decodes to its commit, its first and last events' times; a block that
//! cannot be read back is one run of missing sub-buffers. The loss
//! assembler ([`super::losses`]) feeds them, in stream order, to the one
//! [`kmemtrace_kernel::LossTracker`] of each CPU.

use super::tracepoints::{Read, Tracepoints};
use crate::event::{bucket, Body, Event, Extfrag, Kind, Page, Slab, NO_CACHE, NO_NODE, NO_PFN};
use crate::filter::Filter;
use crate::intern::{Interner, LocalInterner, LocalSites, LocalStacks, SiteTable, StackTable};
use kmemtrace_import::log::{BlockScratch, CpuBlockRef, Log, Problem, ProblemKind};
use kmemtrace_import::stacks::{KernelStack, StackReader, Waiting, DEPTH};
use kmemtrace_import::tasks::{SwitchReader, TaskSightings};
use kmemtrace_import::walk::{subbufs, SubBufItem};
use kmemtrace_kernel::losses::{SubBufRun, SubBufRuns, RB_EVNT_MIN_SIZE};
use kmemtrace_kernel::{
    BigEndian, Endian, KmemDecoder, KmemEvent, KmemKind, LittleEndian, RbRecordKind, RunTimeEndian,
};
use std::sync::atomic::{AtomicU64, Ordering};

/// A decoded event's cache name, on the way to its interned id.
enum Name<'a> {
    None,
    Known(u32),
    New(&'a str),
}

/// How many events past the last one a part's slots are fetched ahead.
const WRITE_AHEAD: usize = 6;

/// Problems kept per CPU (the rest are counted).
const MAX_PROBLEMS: usize = 20;

/// What the decoder saw of one CPU: per block, then added up in stream
/// order by the loss assembler.
#[derive(Clone, Debug, Default)]
pub struct CpuSummary {
    pub cpu: u32,
    /// Events were lost after the last event read.
    pub pending_loss: bool,
    pub subbufs: u64,
    /// Sub-buffers with the missed-events flag.
    pub missed_subbufs: u64,
    /// Lost events the kernel counted in sub-buffers (`RB_MISSED_STORED`).
    pub lost_stored: u64,
    /// Sub-buffers missing from the sequence (blocks lost or unreadable).
    pub missing_subbufs: u64,
    /// Sub-buffers (or their tails) that could not be decoded.
    pub bad_subbufs: u64,
    /// All data events.
    pub events: u64,
    /// kmem events (slab and page), whatever the filters.
    pub kmem_events: u64,
    /// Slab events sent (in the time window).
    pub slab_events: u64,
    /// Page-allocator events sent (in the time window).
    pub page_events: u64,
    /// Records that did not fit their kmem format.
    pub decode_errors: u64,
    /// Events whose time stamp went backwards on this CPU.
    pub backwards: u64,
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
    pub problems: Vec<Problem>,
    pub problems_dropped: u64,
    /// Tasks switched to from idle, and tasks with events of their own.
    pub tasks: TaskSightings,
    /// Runs of per-CPU list refills and drains (zone->lock acquisitions).
    pub list_runs: crate::passes::pages::ListRuns,
    /// `kernel_stack` records, and those given to the page allocation
    /// they were taken with.
    pub stacks: u64,
    pub stacks_paired: u64,
    /// Allocations still waiting for their stack when the CPU's stream
    /// ended.
    pub stacks_cut_at_end: u64,
    /// Stacks at the start of the CPU's stream that no allocation took.
    pub stacks_cut_at_start: u64,
}

impl CpuSummary {
    pub fn problem(&mut self, offset: u64, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem {
                offset,
                kind: ProblemKind::Data,
                what,
            });
        } else {
            self.problems_dropped += 1;
        }
    }
}

/// What every shard learns of a block besides its own events.
#[derive(Clone, Debug, Default)]
pub struct BlockMeta {
    /// Counts over this block (`cpu` set; `pending_loss`: events were lost
    /// after the block's last event).
    pub sum: CpuSummary,
    /// The block's sub-buffers, as the loss tracker needs them.
    pub runs: SubBufRuns,
    /// The latest time stamp in the block (0 if none): the next block's
    /// events are ordered no earlier.
    pub max_ts: u64,
    /// Stacks no allocation of the block took (the first few): those of
    /// the previous block's last allocations, when the kernel wrote the
    /// stack into the next sub-buffer and the recorder cut the block
    /// between the two.
    pub leading_stacks: Vec<LateStack>,
    /// Allocations at the end of the block still waiting for their stack.
    pub trailing: AwaitingStacks,
}

/// A stack the block's own allocations did not take.
#[derive(Clone, Copy, Debug)]
pub struct LateStack {
    pub pid: i32,
    pub in_interrupt: bool,
    pub stack: u32,
}

/// One decoded CPU data block.
pub struct Decoded {
    /// Events by shard, each in the order the CPU wrote them.
    pub parts: Vec<Vec<Event>>,
    pub meta: BlockMeta,
}

/// A decoder thread's own caches (in front of the shared interners) and
/// block buffers.
pub struct Local<'a> {
    names: LocalInterner<'a>,
    sites: LocalSites<'a>,
    stacks: LocalStacks<'a>,
    frames: Vec<u64>,
    scratch: BlockScratch,
}

impl<'a> Local<'a> {
    pub fn new(d: &Decoder<'a>) -> Self {
        Local {
            names: LocalInterner::new(d.interner),
            sites: LocalSites::new(d.sites),
            stacks: LocalStacks::new(d.stacks),
            frames: Vec::new(),
            scratch: BlockScratch::new(),
        }
    }
}

/// Everything a decoder worker needs.
pub struct Decoder<'a> {
    pub log: &'a Log,
    pub kmem: &'a KmemDecoder,
    pub interner: &'a Interner,
    pub sites: &'a SiteTable,
    pub filter: &'a Filter,
    /// Sub-buffers decoded so far, all CPUs (progress).
    pub progress: &'a AtomicU64,
    /// Shards the events are routed to (at least 1).
    pub shards: usize,
    /// Which tasks the trace records ([`TaskSightings`]), where the log has
    /// `sched_switch`.
    pub switches: Option<SwitchReader>,
    /// The stacks recorded with page allocations, where the log has them.
    pub stack_reader: Option<StackReader>,
    pub stacks: &'a StackTable,
    /// The other tracepoints the passes asked for.
    pub tracepoints: &'a Tracepoints,
}

impl Decoder<'_> {
    /// A block that could not be decoded (`what` says why, at `offset`):
    /// no events, its sub-buffers missing, events lost after it.
    pub fn lost(&self, r: &CpuBlockRef, offset: u64, what: String) -> Decoded {
        let mut sum = CpuSummary {
            cpu: r.cpu,
            pending_loss: true,
            missing_subbufs: u64::from(r.count),
            ..Default::default()
        };
        sum.problem(offset, what);
        Decoded {
            parts: vec![Vec::new(); self.shards.max(1)],
            meta: BlockMeta {
                sum,
                runs: SubBufRuns(vec![SubBufRun::unreadable(r.first_subbuf, r.count)]),
                ..Default::default()
            },
        }
    }

    /// Decodes one block with a thread's own caches and buffers; `spare`
    /// hands out emptied vectors for the events.
    pub fn decode(
        &self,
        block: &CpuBlockRef,
        local: &mut Local<'_>,
        spare: &mut dyn FnMut() -> Vec<Event>,
    ) -> Decoded {
        match self.log.endian {
            RunTimeEndian::Little => self.block(LittleEndian, block, local, spare),
            RunTimeEndian::Big => self.block(BigEndian, block, local, spare),
        }
    }

    fn block<E: Endian>(
        &self,
        e: E,
        r: &CpuBlockRef,
        local: &mut Local<'_>,
        spare: &mut dyn FnMut() -> Vec<Event>,
    ) -> Decoded {
        let Local {
            names,
            sites,
            stacks,
            frames,
            scratch,
        } = local;
        let cpu = r.cpu;
        let shards = self.shards.max(1);
        // Events take 48 to 80 bytes of the block: room for the block's
        // without the doubling that growing would overshoot with.
        let room = ((r.count as usize).saturating_mul(self.log.layout.data_size()) / 56 / shards)
            .min(1 << 16);
        let parts: Vec<Vec<Event>> = (0..shards)
            .map(|_| {
                let mut v = spare();
                v.reserve(room);
                v
            })
            .collect();
        let data = match self.log.read_cpu_block_into(r, scratch) {
            Ok(d) => d,
            Err(p) => return self.lost(r, p.offset, p.what),
        };
        let mut b = BlockDecode {
            names,
            sites,
            stacks,
            frames,
            cpu16: cpu.min(u32::from(u16::MAX)) as u16,
            shards,
            sum: CpuSummary {
                cpu,
                ..Default::default()
            },
            parts,
            runs: SubBufRuns::default(),
            pos: 0,
            max_ts: 0,
            pending: false,
            awaiting: AwaitingStacks::default(),
            leading: Vec::new(),
            last_ts: None,
            next_alloc_is_mark: crate::intern::fast_map(),
        };
        for item in subbufs(e, &self.log.layout, r.first_subbuf, data) {
            self.subbuf(e, &mut b, r, item);
        }
        self.progress
            .fetch_add(u64::from(r.count), Ordering::Relaxed);
        b.sum.pending_loss = b.pending;
        let meta = BlockMeta {
            sum: b.sum,
            runs: b.runs,
            max_ts: b.max_ts,
            leading_stacks: b.leading,
            trailing: b.awaiting,
        };
        Decoded {
            parts: b.parts,
            meta,
        }
    }

    /// One sub-buffer of block `r`: its records walked to the commit, its
    /// data events decoded; what the loss tracker needs of it noted in a
    /// [`SubBufRun`].
    fn subbuf<E: Endian>(
        &self,
        e: E,
        b: &mut BlockDecode<'_, '_>,
        r: &CpuBlockRef,
        item: SubBufItem<'_>,
    ) {
        let cpu = r.cpu;
        let index = item.index;
        b.sum.subbufs += 1;
        let off = || self.log.subbuf_file_offset(r, index).unwrap_or(r.offset);
        let sbuf = match item.subbuf {
            Ok(x) => x,
            Err(err) => {
                b.sum.bad_subbufs += 1;
                b.pending = true;
                b.runs.push(SubBufRun::undecodable(index));
                b.sum
                    .problem(off(), format!("CPU {cpu} sub-buffer {index}: {err}"));
                return;
            }
        };
        if sbuf.missed_events {
            b.sum.missed_subbufs += 1;
            // The kernel's stored count is a word of the log: a damaged
            // one may be anything.
            b.sum.lost_stored = b
                .sum
                .lost_stored
                .saturating_add(sbuf.lost_events.unwrap_or(0));
            b.pending = true;
        }
        let mut run = SubBufRun::read(index, sbuf.missed_events, sbuf.lost_events);
        for rec in sbuf.events(e) {
            let (ts, payload) = match rec {
                Ok(x) => match x.kind {
                    RbRecordKind::Data { payload } => (x.ts, payload),
                    // A null padding inside the commit hides the
                    // committed records after it.
                    RbRecordKind::Padding {
                        len,
                        discarded: false,
                    } if len >= RB_EVNT_MIN_SIZE => {
                        run.tail_lost = true;
                        b.pending = true;
                        continue;
                    }
                    _ => continue,
                },
                Err(err) => {
                    b.sum.bad_subbufs += 1;
                    b.pending = true;
                    run.tail_lost = true;
                    b.sum
                        .problem(off(), format!("CPU {cpu} sub-buffer {index}: {err}"));
                    break;
                }
            };
            run.event(ts);
            b.pending = false;
            self.data_event(e, b, ts, payload, || {
                (off(), format!("CPU {cpu} sub-buffer {index}"))
            });
        }
        b.runs.push(run);
    }

    /// A requested tracepoint's event `r` at `ts`: kept where the filters
    /// select it; a stack the kernel took with it awaited even where not,
    /// so that it goes to no other event.
    fn tracepoint(&self, b: &mut BlockDecode<'_, '_>, r: Read<'_>, ts: u64) {
        let stacked = self
            .stack_reader
            .as_ref()
            .is_some_and(|s| s.takes_tracepoint_stack(r.id));
        // Every filter but the call site's, which the passes apply to kmem
        // events (they follow objects of tasks not selected too).
        let cpu = u32::from(b.cpu16);
        if !self.filter.in_time(ts) || !self.filter.selects_task(cpu, r.pid, r.in_interrupt) {
            if stacked {
                b.awaiting.push(r.pid, r.in_interrupt, None);
            }
            return;
        }
        if self.tracepoints.has_marks() && !r.in_interrupt {
            b.next_alloc_is_mark.insert(r.pid, true);
        }
        b.keep_tracepoint(r, ts, stacked);
    }

    /// One data event of the block at `ts`: counted, its task noted; a
    /// stack given to the allocation waiting for it; a kmem event decoded
    /// and, in the time window, kept. `place` says where the event is, for
    /// a problem: its file offset and `CPU n sub-buffer i`.
    fn data_event<E: Endian>(
        &self,
        e: E,
        b: &mut BlockDecode<'_, '_>,
        ts: u64,
        payload: &[u8],
        place: impl Fn() -> (u64, String),
    ) {
        b.sum.events += 1;
        if let Some(l) = b.last_ts {
            if ts < l {
                b.sum.backwards += 1;
            }
        }
        b.last_ts = Some(ts);
        if b.sum.first_ts.is_none() {
            b.sum.first_ts = Some(ts);
        }
        b.sum.last_ts = Some(ts);
        if let Some(r) = &self.switches {
            b.sum.tasks.record(r, e, payload);
        }
        if let Some(st) = self
            .stack_reader
            .as_ref()
            .and_then(|sr| sr.read(e, payload))
        {
            b.kernel_stack(&st);
            return;
        }
        // Names already met are recognised by their bytes; only new
        // ones are checked to be UTF-8 (as `decode` would, with its
        // error), and interned where slab events are kept.
        let names = &*b.names;
        let decoded = self.kmem.decode_raw_name(e, payload).and_then(|d| {
            d.map(|(ev, raw)| {
                let name = match raw {
                    None => Name::None,
                    Some(r) => match names.peek(r.bytes) {
                        Some(id) => Name::Known(id),
                        None => Name::New(r.to_str()?),
                    },
                };
                Ok((ev, name))
            })
            .transpose()
        });
        let (ev, name) = match decoded {
            Ok(Some(x)) => x,
            Ok(None) => {
                b.sum.list_runs.event(None);
                // Only a log some pass asked tracepoints of reads the
                // ids of its other events.
                if !self.tracepoints.is_empty() {
                    if let Some(r) = self.tracepoints.read(e, payload) {
                        self.tracepoint(b, r, ts);
                    }
                }
                return;
            }
            Err(err) => {
                // The record is there, its fields unreadable: a
                // problem, not a loss of the stream.
                b.sum.decode_errors += 1;
                if b.sum.decode_errors <= 3 {
                    let (offset, at) = place();
                    b.sum.problem(offset, format!("{at}: {err}"));
                }
                return;
            }
        };
        b.sum.kmem_events += 1;
        let stacked = self
            .stack_reader
            .as_ref()
            .is_some_and(|r| r.takes_stack(&ev));
        if !self.filter.in_time(ts) {
            b.sum.list_runs.event(None);
            if stacked {
                b.awaiting.push(ev.pid, ev.in_interrupt, None);
            }
            return;
        }
        b.keep(&ev, name, ts, stacked);
        if self.tracepoints.has_marks()
            && !ev.in_interrupt
            && b.needs_mark(ev.pid)
            && self.filter.selects_task(u32::from(b.cpu16), ev.pid, false)
        {
            if let Some(r) = self.tracepoints.read(e, payload) {
                if r.mark {
                    b.next_alloc_is_mark.insert(r.pid, false);
                    b.keep_tracepoint(r, ts, false);
                }
            }
        }
    }
}

/// One block's decoding in progress: the decoder thread's caches, the
/// events by shard, and what the block's metadata will say.
struct BlockDecode<'l, 'a> {
    names: &'l mut LocalInterner<'a>,
    sites: &'l mut LocalSites<'a>,
    stacks: &'l mut LocalStacks<'a>,
    /// A stack's frames, on the way to their interned id.
    frames: &'l mut Vec<u64>,
    cpu16: u16,
    shards: usize,
    sum: CpuSummary,
    parts: Vec<Vec<Event>>,
    /// The block's sub-buffers so far, for the loss tracker.
    runs: SubBufRuns,
    /// Events kept so far (the next one's position, plus one).
    pos: u32,
    /// The latest kmem time stamp kept so far (0 if none).
    max_ts: u64,
    /// Events were lost after the last data event read.
    pending: bool,
    awaiting: AwaitingStacks,
    leading: Vec<LateStack>,
    /// The previous data event's time, to count time going backwards.
    last_ts: Option<u64>,
    /// Tasks of the block by whether their next allocation is to be handed
    /// on as a mark ([`super::tracepoints::Delivery::TaskMarks`]): absent
    /// or `true` until one is.
    next_alloc_is_mark: crate::intern::FastMap<i32, bool>,
}

impl BlockDecode<'_, '_> {
    /// A `kernel_stack` record: given to the allocation of the block
    /// waiting for it, or else kept (the first few) for the previous
    /// block's.
    fn kernel_stack<E: Endian>(&mut self, st: &KernelStack<'_, E>) {
        let interrupt = st.context != 0;
        let intern = |frames: &mut Vec<u64>, stacks: &mut LocalStacks<'_>| {
            frames.clear();
            frames.extend(st.frames());
            stacks.get(frames)
        };
        // The page figures count page allocations' stacks only, not a
        // stall event's.
        let page_stack = match self.awaiting.take(st.pid, interrupt) {
            Some(Some((shard, i))) => {
                let id = intern(self.frames, self.stacks);
                let page = set_stack(&mut self.parts[shard][i], id);
                self.sum.stacks_paired += u64::from(page);
                page
            }
            Some(None) => {
                self.sum.stacks_paired += 1;
                true
            }
            // No allocation of this block took it: one of the
            // previous block's may (an interrupt's allocation
            // and stack can come between).
            None => {
                if self.leading.len() < DEPTH {
                    self.leading.push(LateStack {
                        pid: st.pid,
                        in_interrupt: interrupt,
                        stack: intern(self.frames, self.stacks),
                    });
                }
                true
            }
        };
        self.sum.stacks += u64::from(page_stack);
    }

    /// A kmem event in the time window, made a compact event and routed to
    /// its shard; a page allocation the kernel takes a stack with waits
    /// for it.
    fn keep(&mut self, ev: &KmemEvent<'_>, name: Name<'_>, ts: u64, stacked: bool) {
        let kind = kind_of(ev.kind);
        let (pos, lag) = self.place(ts);
        let body = if kind.is_slab() {
            Body::Slab(self.slab(ev, name))
        } else {
            self.sum.page_events += 1;
            let page = page_fields(ev);
            self.sum.list_runs.event(list_event(kind, &page));
            Body::Page(page)
        };
        let ev = Event {
            ts,
            pos,
            lag,
            pid: ev.pid,
            cpu: self.cpu16,
            kind,
            in_interrupt: ev.in_interrupt,
            body,
        };
        self.route(ev, stacked);
    }

    /// Puts a kept event in its shard's part; `stacked`: the kernel took a
    /// stack with it, which it waits for.
    #[inline]
    fn route(&mut self, ev: Event, stacked: bool) {
        let shard = self.shard_of(&ev);
        if stacked {
            self.awaiting.push(
                ev.pid,
                ev.in_interrupt,
                Some((shard, self.parts[shard].len())),
            );
        }
        let part = &mut self.parts[shard];
        part.push(ev);
        // The slots a few events on are written soon: fetching them now
        // overlaps the miss of a first store to a line with the decoding.
        crate::hint::prefetch(part.spare_capacity_mut(), WRITE_AHEAD);
    }

    /// The next kept event's position in the block and lag behind the
    /// latest time stamp before it.
    #[inline]
    fn place(&mut self, ts: u64) -> (u32, u32) {
        self.max_ts = self.max_ts.max(ts);
        let lag = (self.max_ts - ts).min(u64::from(u32::MAX)) as u32;
        self.pos += 1;
        (self.pos - 1, lag)
    }

    #[inline]
    fn shard_of(&self, ev: &Event) -> usize {
        if self.shards == 1 {
            0
        } else {
            bucket(ev.key()) % self.shards
        }
    }

    /// Whether task `pid`'s allocation is to be a mark: its first in the
    /// block, or its first since one of its other requested events.
    #[inline]
    fn needs_mark(&self, pid: i32) -> bool {
        self.next_alloc_is_mark.get(&pid).copied().unwrap_or(true)
    }

    /// A requested tracepoint's event in the time window, routed by its
    /// request's shard key; `stacked`: the kernel took a stack with it,
    /// which it waits for. A string field is interned here.
    fn keep_tracepoint(&mut self, mut r: Read<'_>, ts: u64, stacked: bool) {
        if let Some((i, text)) = r.text {
            let id = match self.names.peek(text) {
                Some(id) => id,
                None => self.names.get(&String::from_utf8_lossy(text)),
            };
            r.tp.values[i] = u64::from(id);
            r.tp.present |= 1 << i;
        }
        let (pos, lag) = self.place(ts);
        let ev = Event {
            ts,
            pos,
            lag,
            pid: r.pid,
            cpu: self.cpu16,
            kind: Kind::Tracepoint,
            in_interrupt: r.in_interrupt,
            body: Body::Tracepoint(r.tp),
        };
        self.route(ev, stacked);
    }

    /// A slab event's fields, its cache name interned.
    fn slab(&mut self, ev: &KmemEvent<'_>, name: Name<'_>) -> Slab {
        let cache = match name {
            Name::Known(id) => id,
            Name::New(n) => self.names.get(n),
            Name::None => NO_CACHE,
        };
        self.sum.slab_events += 1;
        self.sum.list_runs.event(None);
        Slab {
            ptr: ev.ptr,
            site: self.sites.get(ev.call_site),
            bytes_req: ev.bytes_req,
            bytes_alloc: ev.bytes_alloc,
            gfp: ev.gfp_flags,
            cache,
            node: ev.node.unwrap_or(NO_NODE),
        }
    }
}

/// The compact event's kind of a kmem event.
fn kind_of(kind: KmemKind) -> Kind {
    match kind {
        KmemKind::Kmalloc | KmemKind::KmallocNode => Kind::Kmalloc,
        KmemKind::KmemCacheAlloc | KmemKind::KmemCacheAllocNode => Kind::CacheAlloc,
        KmemKind::Kfree => Kind::Kfree,
        KmemKind::KmemCacheFree => Kind::CacheFree,
        KmemKind::MmPageAlloc => Kind::PageAlloc,
        KmemKind::MmPageFree => Kind::PageFree,
        KmemKind::MmPageFreeBatched => Kind::PageFreeBatched,
        KmemKind::MmPageAllocZoneLocked => Kind::PageAllocZoneLocked,
        KmemKind::MmPagePcpuDrain => Kind::PagePcpuDrain,
        KmemKind::MmPageAllocExtfrag => Kind::PageAllocExtfrag,
    }
}

/// Where a decoded event went: its shard and index there (`None` for an
/// allocation not kept).
type Placed = (usize, usize);

/// Page allocations of a block still waiting for the stack the kernel
/// takes right after each, paired by [`Waiting`]'s rule. Older ones whose
/// stack never came (lost, or in the next block) are passed over.
#[derive(Clone, Debug, Default)]
pub struct AwaitingStacks {
    /// Where each event went.
    list: Waiting<Option<Placed>>,
}

impl AwaitingStacks {
    fn push(&mut self, pid: i32, in_interrupt: bool, at: Option<Placed>) {
        self.list.push(pid, in_interrupt, at);
    }

    pub fn is_empty(&self) -> bool {
        self.waiting() == 0
    }

    /// Kept allocations waiting.
    pub fn waiting(&self) -> u64 {
        self.list.values().filter(|a| a.is_some()).count() as u64
    }

    /// The allocation a stack of task `pid` was taken with, if one waits:
    /// `Some(None)` when it was not kept.
    fn take(&mut self, pid: i32, interrupt: bool) -> Option<Option<Placed>> {
        self.list.take(pid, interrupt, |_| ())
    }

    /// Gives the previous block's waiting allocations (`self`) the next
    /// block's leading stacks; returns how many were matched (a stall
    /// event's stack is not counted: the page figures are of page stacks).
    pub fn late(&mut self, stacks: &[LateStack], parts: &mut [Option<Vec<Event>>]) -> u64 {
        let mut n = 0;
        for l in stacks {
            let Some(at) = self.take(l.pid, l.in_interrupt) else {
                continue;
            };
            let ev = at.and_then(|(shard, i)| parts.get_mut(shard)?.as_mut()?.get_mut(i));
            n += u64::from(ev.is_none_or(|ev| set_stack(ev, l.stack)));
        }
        n
    }
}

/// Gives an event the stack the kernel took with it; whether it is a page
/// allocation.
fn set_stack(ev: &mut Event, stack: u32) -> bool {
    match &mut ev.body {
        Body::Page(p) => {
            p.stack = stack;
            true
        }
        Body::Tracepoint(t) => {
            t.stack = stack;
            false
        }
        Body::Slab(_) => true,
    }
}

/// The page fields of a decoded page-allocator event.
fn page_fields(ev: &KmemEvent<'_>) -> Page {
    let small = |v: i32| v.clamp(-1, i32::from(i8::MAX)) as i8;
    Page {
        pfn: ev.pfn.unwrap_or(NO_PFN),
        gfp: ev.gfp_flags,
        order: ev.order,
        migratetype: ev.migratetype.unwrap_or(-1),
        percpu_refill: ev.percpu_refill.unwrap_or(-1),
        extfrag: ev.extfrag.map_or(Extfrag::NONE, |x| Extfrag {
            fallback_order: small(x.fallback_order),
            alloc_migratetype: small(x.alloc_migratetype),
            fallback_migratetype: small(x.fallback_migratetype),
            change_ownership: x.change_ownership.map_or(-1, small),
        }),
        stack: crate::intern::NO_STACK,
    }
}

/// Which per-CPU-list event a page event is.
fn list_event(kind: Kind, page: &Page) -> Option<crate::passes::pages::ListEvent> {
    use crate::passes::pages::{refills_a_list, ListEvent};
    match kind {
        Kind::PagePcpuDrain => Some(ListEvent::Drain),
        Kind::PageAllocZoneLocked if refills_a_list(page) => Some(ListEvent::Refill),
        _ => None,
    }
}

impl CpuSummary {
    /// Adds a later block's counts.
    pub fn absorb(&mut self, o: &CpuSummary) {
        self.subbufs += o.subbufs;
        self.missed_subbufs += o.missed_subbufs;
        self.lost_stored = self.lost_stored.saturating_add(o.lost_stored);
        self.missing_subbufs = self.missing_subbufs.saturating_add(o.missing_subbufs);
        self.bad_subbufs += o.bad_subbufs;
        self.events += o.events;
        self.kmem_events += o.kmem_events;
        self.slab_events += o.slab_events;
        self.page_events += o.page_events;
        self.decode_errors += o.decode_errors;
        self.backwards += o.backwards;
        if let (Some(a), Some(b)) = (self.last_ts, o.first_ts) {
            if b < a {
                self.backwards += 1;
            }
        }
        self.first_ts = self.first_ts.or(o.first_ts);
        self.last_ts = o.last_ts.or(self.last_ts);
        for p in &o.problems {
            self.problem(p.offset, p.what.clone());
        }
        self.problems_dropped += o.problems_dropped;
        self.tasks.absorb(&o.tasks);
        self.list_runs.absorb(&o.list_runs);
        self.stacks += o.stacks;
        self.stacks_paired += o.stacks_paired;
    }
}

#[cfg(test)]
mod tests {
    use super::CpuSummary;

    /// Stored loss counts are words of the log: added up, a damaged one
    /// saturates instead of overflowing (a fuzzing finding).
    #[test]
    fn stored_losses_add_up_saturating() {
        let mut a = CpuSummary {
            lost_stored: u64::MAX - 1,
            ..Default::default()
        };
        let b = CpuSummary {
            lost_stored: 5,
            ..Default::default()
        };
        a.absorb(&b);
        assert_eq!(a.lost_stored, u64::MAX);
    }
}
