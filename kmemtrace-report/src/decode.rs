//! Per-CPU decoding: one thread per CPU walks that CPU's sub-buffers
//! ([`Log::visit_cpu`]), decodes kmem events with the recorded kernel's
//! byte order (monomorphised once per thread) and sends compact slab events
//! in batches over a bounded channel. Page-allocator events are only
//! counted, here, since their order does not matter.
//!
//! Lost events are noticed here and marked on the next slab event of the
//! CPU (`lost_before`): a sub-buffer's missed-events flag, a gap in the
//! sub-buffer sequence (blocks lost between recorder and file), a block
//! that cannot be read back, and a sub-buffer that stops decoding midway.

use crate::event::{Ev, Interner, Kind, LocalInterner, NO_CACHE, NO_NODE};
use crate::filter::Filter;
use kmemtrace_format::kmem::{KmemDecoder, KmemKind};
use kmemtrace_format::log::{Log, Problem};
use kmemtrace_format::{BigEndian, Endian, LittleEndian, RunTimeEndian};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};

/// Problems kept per CPU (the rest are counted).
const MAX_PROBLEMS: usize = 20;

/// Page-allocator counts (events in the time window on selected CPUs/pids).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PageStats {
    /// `mm_page_alloc` events.
    pub allocs: u64,
    /// `page_size << order` summed over successful allocations.
    pub alloc_bytes: u64,
    /// `mm_page_alloc` with no page (`pfn` -1).
    pub failed: u64,
    /// `mm_page_free` events.
    pub frees: u64,
    pub free_bytes: u64,
    /// `mm_page_free_batched` events (order 0 each).
    pub batched_frees: u64,
    pub zone_locked: u64,
    pub pcpu_drains: u64,
    pub extfrag: u64,
    /// Successful allocations by order (index = order; the last one
    /// collects orders of 10 and more).
    pub allocs_by_order: Vec<u64>,
}

impl PageStats {
    pub fn merge(&mut self, o: &PageStats) {
        self.allocs += o.allocs;
        self.alloc_bytes += o.alloc_bytes;
        self.failed += o.failed;
        self.frees += o.frees;
        self.free_bytes += o.free_bytes;
        self.batched_frees += o.batched_frees;
        self.zone_locked += o.zone_locked;
        self.pcpu_drains += o.pcpu_drains;
        self.extfrag += o.extfrag;
        if self.allocs_by_order.len() < o.allocs_by_order.len() {
            self.allocs_by_order.resize(o.allocs_by_order.len(), 0);
        }
        for (a, b) in self.allocs_by_order.iter_mut().zip(&o.allocs_by_order) {
            *a += b;
        }
    }
}

/// What one CPU's decoder saw, sent after its last batch.
#[derive(Clone, Debug, Default)]
pub struct CpuSummary {
    pub cpu: u32,
    /// Events were lost after the last slab event sent.
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
    /// Records that did not fit their kmem format.
    pub decode_errors: u64,
    /// Events whose time stamp went backwards on this CPU.
    pub backwards: u64,
    pub first_ts: Option<u64>,
    pub last_ts: Option<u64>,
    pub page: PageStats,
    pub problems: Vec<Problem>,
    pub problems_dropped: u64,
}

impl CpuSummary {
    fn problem(&mut self, offset: u64, what: String) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem { offset, what });
        } else {
            self.problems_dropped += 1;
        }
    }
}

/// A message from a CPU's decoder.
pub enum Msg {
    Batch(Vec<Ev>),
    End(Box<CpuSummary>),
}

/// Everything a decoder thread needs.
pub struct Decoder<'a> {
    pub log: &'a Log,
    pub kmem: &'a KmemDecoder,
    pub interner: &'a Interner,
    pub filter: &'a Filter,
    pub batch: usize,
    /// Sub-buffers decoded so far, all CPUs (progress).
    pub progress: &'a AtomicU64,
    pub page_size: u64,
}

impl Decoder<'_> {
    /// Decodes `cpu`, sending batches to `tx` and taking empty vectors back
    /// from `recycle`.
    pub fn run(&self, cpu: u32, tx: SyncSender<Msg>, recycle: Receiver<Vec<Ev>>) {
        match self.log.endian {
            RunTimeEndian::Little => self.run_e(LittleEndian, cpu, tx, recycle),
            RunTimeEndian::Big => self.run_e(BigEndian, cpu, tx, recycle),
        }
    }

    fn run_e<E: Endian>(&self, e: E, cpu: u32, tx: SyncSender<Msg>, recycle: Receiver<Vec<Ev>>) {
        let mut sum = CpuSummary {
            cpu,
            page: PageStats {
                allocs_by_order: vec![0; 11],
                ..Default::default()
            },
            ..Default::default()
        };
        let mut names = LocalInterner::new(self.interner);
        let mut batch: Vec<Ev> = Vec::with_capacity(self.batch);
        let pending = std::cell::Cell::new(false);
        let mut expected: Option<u64> = None;
        let mut last_ts: Option<u64> = None;
        let mut dead = false; // the receiver hung up
        let cpu16 = cpu.min(u32::from(u16::MAX)) as u16;
        let filter = self.filter;
        let page_sel = |cpu: u32, pid: i32| filter.cpu_pid(cpu, pid);
        let mut errors: Vec<Problem> = Vec::new();

        self.log.visit_cpu(
            cpu,
            |v| {
                if dead {
                    return;
                }
                sum.subbufs += 1;
                self.progress.fetch_add(1, Ordering::Relaxed);
                if let Some(x) = expected {
                    if v.index > x {
                        sum.missing_subbufs += v.index - x;
                        pending.set(true);
                    }
                }
                expected = Some(v.index + 1);
                let sb = match v.subbuf {
                    Ok(sb) => sb,
                    Err(err) => {
                        sum.bad_subbufs += 1;
                        pending.set(true);
                        let off = self.log.subbuf_file_offset(v.block, v.index);
                        sum.problem(
                            off.unwrap_or(v.block.offset),
                            format!("CPU {cpu} sub-buffer {}: {err}", v.index),
                        );
                        return;
                    }
                };
                if sb.missed_events {
                    sum.missed_subbufs += 1;
                    sum.lost_stored += sb.lost_events.unwrap_or(0);
                    pending.set(true);
                }
                for r in sb.data_events(e) {
                    let (_, ts, payload) = match r {
                        Ok(x) => x,
                        Err(err) => {
                            sum.bad_subbufs += 1;
                            pending.set(true);
                            let off = self.log.subbuf_file_offset(v.block, v.index);
                            sum.problem(
                                off.unwrap_or(v.block.offset),
                                format!("CPU {cpu} sub-buffer {}: {err}", v.index),
                            );
                            break;
                        }
                    };
                    sum.events += 1;
                    if let Some(l) = last_ts {
                        if ts < l {
                            sum.backwards += 1;
                        }
                    }
                    last_ts = Some(ts);
                    if sum.first_ts.is_none() {
                        sum.first_ts = Some(ts);
                    }
                    sum.last_ts = Some(ts);
                    let ev = match self.kmem.decode(e, payload) {
                        Ok(Some(ev)) => ev,
                        Ok(None) => continue,
                        Err(err) => {
                            sum.decode_errors += 1;
                            pending.set(true);
                            if sum.decode_errors <= 3 {
                                sum.problem(
                                    v.block.offset,
                                    format!("CPU {cpu} sub-buffer {}: {err}", v.index),
                                );
                            }
                            continue;
                        }
                    };
                    sum.kmem_events += 1;
                    if !filter.in_time(ts) {
                        continue;
                    }
                    let kind = match ev.kind {
                        KmemKind::Kmalloc | KmemKind::KmallocNode => Kind::Kmalloc,
                        KmemKind::KmemCacheAlloc | KmemKind::KmemCacheAllocNode => Kind::CacheAlloc,
                        KmemKind::Kfree => Kind::Kfree,
                        KmemKind::KmemCacheFree => Kind::CacheFree,
                        k => {
                            if page_sel(cpu, ev.pid) {
                                let p = &mut sum.page;
                                match k {
                                    KmemKind::MmPageAlloc => {
                                        p.allocs += 1;
                                        if ev.pfn.is_some() {
                                            let o = ev.order.min(63);
                                            p.alloc_bytes = p
                                                .alloc_bytes
                                                .saturating_add(self.page_size << o.min(40));
                                            p.allocs_by_order[(o as usize).min(10)] += 1;
                                        } else {
                                            p.failed += 1;
                                        }
                                    }
                                    KmemKind::MmPageFree => {
                                        p.frees += 1;
                                        p.free_bytes = p
                                            .free_bytes
                                            .saturating_add(self.page_size << ev.order.min(40));
                                    }
                                    KmemKind::MmPageFreeBatched => {
                                        p.batched_frees += 1;
                                        p.free_bytes = p.free_bytes.saturating_add(self.page_size);
                                    }
                                    KmemKind::MmPageAllocZoneLocked => p.zone_locked += 1,
                                    KmemKind::MmPagePcpuDrain => p.pcpu_drains += 1,
                                    KmemKind::MmPageAllocExtfrag => p.extfrag += 1,
                                    _ => {}
                                }
                            }
                            continue;
                        }
                    };
                    let cache = match ev.cache_name {
                        Some(n) => names.get(n),
                        None => NO_CACHE,
                    };
                    batch.push(Ev {
                        ts,
                        ptr: ev.ptr,
                        call_site: ev.call_site,
                        bytes_req: ev.bytes_req,
                        bytes_alloc: ev.bytes_alloc,
                        gfp: ev.gfp_flags,
                        pid: ev.pid,
                        cache,
                        node: ev.node.unwrap_or(NO_NODE),
                        cpu: cpu16,
                        kind,
                        lost_before: pending.take(),
                    });
                    sum.slab_events += 1;
                    if batch.len() >= self.batch {
                        let fresh = recycle
                            .try_recv()
                            .unwrap_or_else(|_| Vec::with_capacity(self.batch));
                        let full = std::mem::replace(&mut batch, fresh);
                        if tx.send(Msg::Batch(full)).is_err() {
                            dead = true;
                            return;
                        }
                    }
                }
            },
            |p| {
                pending.set(true);
                errors.push(p);
            },
        );
        for p in errors {
            sum.problem(p.offset, p.what);
        }
        sum.pending_loss = pending.get();
        if !batch.is_empty() && !dead {
            let _ = tx.send(Msg::Batch(batch));
        }
        let _ = tx.send(Msg::End(Box::new(sum)));
    }
}

/// The first data event's time of each CPU that has one, read from its
/// first blocks only.
pub fn first_event_ts(log: &Log) -> Option<u64> {
    fn first<E: Endian>(log: &Log, e: E) -> Option<u64> {
        let mut best: Option<u64> = None;
        let mut stored = Vec::new();
        let mut data = Vec::new();
        let sb = log.layout.subbuf_size.max(1);
        for cpu in log.cpus() {
            'blocks: for r in log.cpu_blocks(cpu) {
                if log.read_cpu_block(r, &mut stored, &mut data).is_err() {
                    continue;
                }
                for raw in data.chunks_exact(sb) {
                    let Ok(s) = kmemtrace_format::subbuf::parse_subbuf(e, &log.layout, raw) else {
                        continue;
                    };
                    if let Some(Ok((_, ts, _))) = s.data_events(e).next() {
                        best = Some(best.map_or(ts, |b: u64| b.min(ts)));
                        break 'blocks;
                    }
                }
            }
        }
        best
    }
    match log.endian {
        RunTimeEndian::Little => first(log, LittleEndian),
        RunTimeEndian::Big => first(log, BigEndian),
    }
}
