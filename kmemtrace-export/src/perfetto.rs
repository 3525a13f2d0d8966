//! A log written as a Perfetto trace (`.pftrace`: a `perfetto.protos.Trace`
//! of `TracePacket`s) that ui.perfetto.dev and `trace_processor` open:
//!
//! - a `ClockSnapshot` tying the trace clock to the time of day (the
//!   recorder's start as both clocks read it), a `SystemInfo` packet (the
//!   recorded kernel's uname) and a
//!   `ProcessTree` packet (every task the log names: thread, thread group,
//!   command name);
//! - `FtraceStats` at the start and the end of the recording, from the
//!   kernel's per-CPU counters the log stored (overruns are lost events);
//! - counter tracks of what the analysis derives, at the end of each bin
//!   of its timelines: live slab bytes (`kmemtrace-report`'s `live_bytes`)
//!   and the page allocator's bytes allocated minus freed since the start
//!   (its `alloc_bytes - free_bytes`);
//! - allocation stall episodes (`kmemtrace-report --stalls`), where the log
//!   has them, as slices on the waiting task's thread track, their waits
//!   nested in them (the `stalls` module);
//! - the records as `FtraceEventBundle`s, one CPU each, in each CPU's
//!   order: kmem events as Perfetto's own typed messages (`kmem.proto`:
//!   Kmalloc, KmemCacheAlloc, MmPageAlloc, ...), every other event as a
//!   `GenericFtraceEvent` with its fields (a `kernel_stack` as its frames,
//!   innermost first, in hexadecimal in one `caller` field). A bundle
//!   whose CPU lost records just before it says so (`lost_events`).
//!
//! Time stamps are the recorded trace clock's, as the kernel wrote them;
//! the bundles leave `ftrace_clock` unset, so Perfetto takes them as its
//! default clock (boot time). The `local` clock kmemtraced records with
//! (sched_clock) counts nanoseconds from about boot, close to boot time on
//! a machine that did not suspend (an offset and a drift apart), so the
//! time of day is approximate (to the second for imported dumps, whose
//! wall time is whole seconds). A log recorded with a clock that does not
//! count nanoseconds (`counter`, `x86-tsc`, `uptime`) gets no clock
//! snapshot, and the summary says its times are not nanoseconds.
//!
//! The packets are written in batches, each deflated (zlib, as Perfetto's
//! own service compresses them) into one `TracePacket.compressed_packets`:
//! a serialized `Trace` of the batch's packets, which trace_processor and
//! ui.perfetto.dev inflate as they read; or, on request, as they are.
//!
//! Field numbers are those of Perfetto's `protos/perfetto/trace/` (checked
//! by decoding the output with Perfetto's own generated classes, in the
//! tests).

mod stalls;

use crate::progress::Progress;
use crate::proto::Msg;
use kmemtrace_analysis::in_order::{for_each_record, Record};
use kmemtrace_analysis::model::stalls::Episode;
use kmemtrace_analysis::model::TimeSeries;
use kmemtrace_format::arch::clock_in_ns;
use kmemtrace_format::records::StatsPhase;
use kmemtrace_import::log::ChunkStore;
use kmemtrace_import::log::{BlockScratch, CpuBlockRef, Log, Problem};
use kmemtrace_import::stacks::{StackReader, STACK_EVENT, STACK_SYSTEM};
use kmemtrace_import::walk::SubBufSource;
use kmemtrace_kernel::print_fmt::RECORD_TEXT_MAX;
use kmemtrace_kernel::{
    Endian, EventFormat, Field, FieldKind, KmemKind, RunTimeEndian, SubBufLayout,
};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// `Trace.packet`.
const TRACE_PACKET: u32 = 1;

/// `TracePacket` fields.
mod packet {
    pub const FTRACE_EVENTS: u32 = 1;
    pub const PROCESS_TREE: u32 = 2;
    pub const TIMESTAMP: u32 = 8;
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    /// `SEQ_INCREMENTAL_STATE_CLEARED` on the sequence's first packet.
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const FTRACE_STATS: u32 = 34;
    pub const SYSTEM_INFO: u32 = 45;
    /// `bytes compressed_packets`: a zlib stream of a serialized `Trace`.
    pub const COMPRESSED_PACKETS: u32 = 50;
}

/// `FtraceEventBundle` and `FtraceEvent` fields.
mod bundle {
    pub const CPU: u32 = 1;
    pub const EVENT: u32 = 2;
    pub const LOST_EVENTS: u32 = 3;
    pub const EV_TIMESTAMP: u32 = 1;
    pub const EV_PID: u32 = 2;
    pub const EV_COMMON_FLAGS: u32 = 5;
    /// `FtraceEvent.generic`: `GenericFtraceEvent { event_name = 1; field = 2 }`,
    /// `Field { name = 1; str_value = 3; int_value = 4; uint_value = 5 }`.
    pub const EV_GENERIC: u32 = 327;
}

/// Records per bundle: Perfetto's own producer writes bundles of a few
/// hundred to a few thousand events. A bundle is also written once it
/// holds [`BATCH_BYTES`], so that large records do not make one of
/// gigabytes.
const BUNDLE_EVENTS: usize = 1024;

/// How a proto field's value is written.
#[derive(Clone, Copy)]
enum Wire {
    /// `uint64`/`uint32`: zero-extended (a `uint32` cut to 32 bits).
    U64,
    U32,
    /// `int32`: sign-extended.
    I32,
}

/// A kmem event Perfetto has a typed message for: the `FtraceEvent` oneof
/// field, and (kernel field name, message field, wire) for its fields.
struct Typed {
    event: &'static str,
    oneof: u32,
    fields: Fields,
}

use Wire::{I32, U32, U64};

/// Kmalloc and KmemCacheAlloc, their `_node` forms, Kfree and
/// KmemCacheFree share their fields.
type Fields = &'static [(&'static str, u32, Wire)];
const SLAB_ALLOC: Fields = &[
    ("bytes_alloc", 1, U64),
    ("bytes_req", 2, U64),
    ("call_site", 3, U64),
    ("gfp_flags", 4, U32),
    ("ptr", 5, U64),
];
const SLAB_ALLOC_NODE: Fields = &[
    ("bytes_alloc", 1, U64),
    ("bytes_req", 2, U64),
    ("call_site", 3, U64),
    ("gfp_flags", 4, U32),
    ("node", 5, I32),
    ("ptr", 6, U64),
];
const SLAB_FREE: Fields = &[("call_site", 1, U64), ("ptr", 2, U64)];

/// `protos/perfetto/trace/ftrace/kmem.proto` and `ftrace_event.proto`.
const TYPED: &[Typed] = &[
    Typed {
        event: "kfree",
        oneof: 298,
        fields: SLAB_FREE,
    },
    Typed {
        event: "kmalloc",
        oneof: 299,
        fields: SLAB_ALLOC,
    },
    Typed {
        event: "kmalloc_node",
        oneof: 300,
        fields: SLAB_ALLOC_NODE,
    },
    Typed {
        event: "kmem_cache_alloc",
        oneof: 301,
        fields: SLAB_ALLOC,
    },
    Typed {
        event: "kmem_cache_alloc_node",
        oneof: 302,
        fields: SLAB_ALLOC_NODE,
    },
    Typed {
        event: "kmem_cache_free",
        oneof: 303,
        fields: SLAB_FREE,
    },
    Typed {
        event: "mm_page_alloc",
        oneof: 307,
        fields: &[
            ("gfp_flags", 1, U32),
            ("migratetype", 2, I32),
            ("order", 3, U32),
            ("page", 4, U64),
            ("pfn", 5, U64),
        ],
    },
    Typed {
        event: "mm_page_alloc_extfrag",
        oneof: 308,
        fields: &[
            ("alloc_migratetype", 1, I32),
            ("alloc_order", 2, I32),
            ("fallback_migratetype", 3, I32),
            ("fallback_order", 4, I32),
            ("page", 5, U64),
            ("change_ownership", 6, I32),
            ("pfn", 7, U64),
        ],
    },
    Typed {
        event: "mm_page_alloc_zone_locked",
        oneof: 309,
        fields: &[
            ("migratetype", 1, I32),
            ("order", 2, U32),
            ("page", 3, U64),
            ("pfn", 4, U64),
        ],
    },
    Typed {
        event: "mm_page_free",
        oneof: 310,
        fields: &[("order", 1, U32), ("page", 2, U64), ("pfn", 3, U64)],
    },
    Typed {
        event: "mm_page_free_batched",
        oneof: 311,
        fields: &[("cold", 1, I32), ("page", 2, U64), ("pfn", 3, U64)],
    },
    Typed {
        event: "mm_page_pcpu_drain",
        oneof: 312,
        fields: &[
            ("migratetype", 1, I32),
            ("order", 2, U32),
            ("page", 3, U64),
            ("pfn", 4, U64),
        ],
    },
];

/// How the packets are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// In batches, each deflated into one `compressed_packets` packet.
    #[default]
    Zlib,
    /// Each packet as it is.
    None,
}

/// Uncompressed bytes of packets per `compressed_packets` packet.
const BATCH_BYTES: usize = 512 << 10;

/// The packets out, each a `Trace.packet` (its field key and length
/// first): written as they come, or gathered in batches that threads
/// deflate while the records are read, written in order.
struct Packets<W: Write> {
    out: W,
    batch: Vec<u8>,
    deflater: Option<Deflater>,
    /// `compressed_packets` packets written.
    compressed: u64,
}

/// Threads deflating batches: jobs numbered in order, results written in
/// that order whatever order they come back in.
struct Deflater {
    jobs: Option<mpsc::SyncSender<(u64, Vec<u8>)>>,
    results: mpsc::Receiver<(u64, io::Result<Vec<u8>>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
    sent: u64,
    next: u64,
    back: BTreeMap<u64, Vec<u8>>,
}

impl Deflater {
    fn new() -> Self {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        // At most two batches waiting per thread.
        let (jobs, queue) = mpsc::sync_channel::<(u64, Vec<u8>)>(2 * n);
        let queue = Arc::new(Mutex::new(queue));
        let (done, results) = mpsc::channel();
        let threads = (0..n)
            .map(|_| {
                let (queue, done) = (Arc::clone(&queue), done.clone());
                std::thread::spawn(move || loop {
                    let job = queue.lock().map(|q| q.recv());
                    let Ok(Ok((seq, batch))) = job else { break };
                    if done.send((seq, deflate(&batch))).is_err() {
                        break;
                    }
                })
            })
            .collect();
        Deflater {
            jobs: Some(jobs),
            results,
            threads,
            sent: 0,
            next: 0,
            back: BTreeMap::new(),
        }
    }
}

/// A batch as a zlib stream (Perfetto's level, 6).
fn deflate(batch: &[u8]) -> io::Result<Vec<u8>> {
    let mut z = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(batch.len() / 4),
        flate2::Compression::default(),
    );
    z.write_all(batch)?;
    z.finish()
}

impl<W: Write> Packets<W> {
    fn new(out: W, compression: Compression) -> Self {
        Packets {
            out,
            batch: Vec::new(),
            deflater: (compression == Compression::Zlib).then(Deflater::new),
            compressed: 0,
        }
    }

    /// One `Trace.packet`, whole.
    fn put(&mut self, packet: &[u8]) -> io::Result<()> {
        if self.deflater.is_none() {
            return self.out.write_all(packet);
        }
        self.batch.extend_from_slice(packet);
        if self.batch.len() >= BATCH_BYTES {
            self.send()?;
        }
        Ok(())
    }

    /// The batch to the threads; what they have deflated out.
    fn send(&mut self) -> io::Result<()> {
        let Some(d) = self.deflater.as_mut() else {
            return Ok(());
        };
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH_BYTES));
            let sent = d.jobs.as_ref().map(|j| j.send((d.sent, batch)));
            if !matches!(sent, Some(Ok(()))) {
                return Err(io::Error::other("the deflating threads stopped"));
            }
            d.sent += 1;
        }
        self.collect(false)
    }

    /// Writes the deflated batches that are next in order; with `all`,
    /// waits for every batch sent.
    fn collect(&mut self, all: bool) -> io::Result<()> {
        let Some(d) = self.deflater.as_mut() else {
            return Ok(());
        };
        while d.next < d.sent {
            if let Some(z) = d.back.remove(&d.next) {
                // `TracePacket { compressed_packets }`.
                let mut p = Msg::new();
                p.bytes(packet::COMPRESSED_PACKETS, &z);
                self.out
                    .write_all(Msg::new().msg(TRACE_PACKET, &p).as_bytes())?;
                d.next += 1;
                self.compressed += 1;
                continue;
            }
            let r = if all {
                d.results.recv().map_err(|_| ())
            } else {
                d.results.try_recv().map_err(|_| ())
            };
            match r {
                Ok((seq, z)) => {
                    d.back.insert(seq, z?);
                }
                Err(()) if all => return Err(io::Error::other("the deflating threads stopped")),
                Err(()) => break,
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        self.send()?;
        self.collect(true)?;
        if let Some(mut d) = self.deflater.take() {
            d.jobs = None;
            for t in d.threads.drain(..) {
                let _ = t.join();
            }
        }
        self.out.flush()
    }
}

/// The log as the in-order walk reads it, counting the sub-buffers read.
struct Counted<'a> {
    log: &'a Log,
    done: AtomicU64,
}

impl SubBufSource for Counted<'_> {
    fn endian(&self) -> RunTimeEndian {
        self.log.endian
    }
    fn layout(&self) -> &SubBufLayout {
        &self.log.layout
    }
    fn chunks_by_cpu(&self) -> BTreeMap<u32, Vec<&CpuBlockRef>> {
        self.log.blocks_by_cpu()
    }
}

impl ChunkStore for Counted<'_> {
    fn read_chunk<'s>(
        &self,
        chunk: &CpuBlockRef,
        scratch: &'s mut BlockScratch,
    ) -> Result<&'s [u8], Problem> {
        self.done
            .fetch_add(u64::from(chunk.count), Ordering::Relaxed);
        self.log.read_cpu_block_into(chunk, scratch)
    }

    fn subbuf_offset(&self, chunk: &CpuBlockRef, index: u64) -> Option<u64> {
        self.log.subbuf_file_offset(chunk, index)
    }
}

/// What was written.
#[derive(Debug, Default)]
pub struct Written {
    /// Records as typed kmem messages and as generic events.
    pub typed: u64,
    pub generic: u64,
    /// Records of an event id the log has no format for (left out).
    pub unknown: u64,
    pub bundles: u64,
    /// Values written to counter tracks.
    pub counter_points: u64,
    /// Allocation stall episodes, and the waits in them, written as
    /// slices.
    pub stall_episodes: u64,
    pub stall_phases: u64,
    /// Kernel fields of typed events that Perfetto's messages have no
    /// place for, by event (`kmalloc: accounted, node`): left out.
    pub dropped_fields: BTreeMap<String, Vec<String>>,
    /// `compressed_packets` packets holding the others (0: none
    /// compressed).
    pub compressed_packets: u64,
}

/// How the records of one event id are written.
enum Mapping<'a> {
    Typed {
        oneof: u32,
        fields: Vec<(&'a Field, u32, Wire)>,
        common: Common<'a>,
    },
    Generic {
        name: &'a str,
        fields: &'a [Field],
        /// The recorded kernel's `sizeof(long)`, for `long[]` fields.
        long_size: usize,
        common: Common<'a>,
    },
    /// A `kernel_stack` record: its frames may reach past the format's
    /// `caller[8]`, so they are read as the stack reader reads them.
    Stack {
        reader: Box<StackReader>,
        common: Common<'a>,
    },
}

/// The common fields every record starts with.
#[derive(Clone, Copy)]
struct Common<'a> {
    pid: Option<&'a Field>,
    flags: Option<&'a Field>,
}

impl<'a> Mapping<'a> {
    fn of(f: &'a EventFormat, long_size: usize, written: &mut Written) -> Mapping<'a> {
        let common = Common {
            pid: f.field("common_pid"),
            flags: f.field("common_flags"),
        };
        if f.system == STACK_SYSTEM && f.name == STACK_EVENT {
            if let Some(reader) = StackReader::from_format(f, long_size) {
                return Mapping::Stack {
                    reader: Box::new(reader),
                    common,
                };
            }
        }
        // By kind, so that the names of older kernels (`mm_pagevec_free`,
        // `mm_page_free_direct`) find their messages too.
        let typed = (f.system == "kmem" || f.system.is_empty())
            .then(|| KmemKind::from_event_name(&f.name))
            .flatten()
            .and_then(|k| TYPED.iter().find(|t| t.event == k.name()));
        let Some(t) = typed else {
            return Mapping::Generic {
                name: &f.name,
                fields: &f.fields,
                long_size,
                common,
            };
        };
        let mut fields = Vec::new();
        let mut dropped = Vec::new();
        for field in &f.fields {
            match t.fields.iter().find(|(n, _, _)| *n == field.name) {
                Some(&(_, number, wire)) if field.kind == FieldKind::Scalar => {
                    fields.push((field, number, wire))
                }
                _ => dropped.push(field.name.clone()),
            }
        }
        if !dropped.is_empty() {
            written.dropped_fields.insert(f.name.clone(), dropped);
        }
        Mapping::Typed {
            oneof: t.oneof,
            fields,
            common,
        }
    }
}

/// What the analysis derives from a log, over time, for counter tracks.
pub struct Series {
    /// Live slab bytes.
    pub slab_live: TimeSeries,
    /// Page-allocator bytes allocated minus freed since the start.
    pub page_held: TimeSeries,
    /// Every allocation stall episode, by start.
    pub episodes: Vec<Episode>,
    /// The episodes' call sites' source chains (`--vmlinux`), by address:
    /// the slices' `source` argument.
    pub sources: std::collections::HashMap<u64, String>,
}

impl Series {
    /// The episodes' call sites' source chains from `debug`.
    pub fn add_sources(&mut self, debug: &kmemtrace_analysis::DebugInfo) {
        for a in self.episodes.iter().filter_map(|e| e.callsite_addr) {
            self.sources.entry(a).or_insert_with(|| {
                let frames = debug.frames_of_return_address(a);
                kmemtrace_analysis::debuginfo::chain_lines(&frames).join("; ")
            });
        }
    }
}

/// The series `kmemtrace-report LOG` derives (its selection: the
/// recorder's own threads left out, as `analyse_as_recorded`), telling
/// `progress` how far the analysis has got.
pub fn derived_series(log: &mut Log, progress: &mut dyn FnMut(Progress)) -> Series {
    let syms = kmemtrace_analysis::Symbols::of_log(log);
    let opts = kmemtrace_analysis::Options {
        episodes: true,
        ..kmemtrace_analysis::Options::as_recorded(log)
    };
    let r = kmemtrace_analysis::analyse(log, &syms, opts, &mut |p| {
        progress(Progress {
            step: "analysing",
            done: p.subbufs_done,
            total: p.subbufs_total,
        })
    })
    .report;
    Series {
        slab_live: r.live_timeline,
        page_held: r.page_timeline,
        episodes: r.sections.stalls.all,
        sources: Default::default(),
    }
}

/// Writes `log` as a Perfetto trace, with `series` as counter tracks and
/// slices, its packets compressed or not; tells `progress` how many of the
/// log's sub-buffers have been read as they are.
pub fn write<W: Write>(
    log: &Log,
    series: &Series,
    out: W,
    compression: Compression,
    progress: &mut dyn FnMut(Progress),
) -> io::Result<Written> {
    let mut out = Packets::new(out, compression);
    let mut written = Written::default();
    let mut first = Msg::new();
    first
        .msg(packet::SYSTEM_INFO, &system_info(log))
        .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, 1)
        .uint(packet::SEQUENCE_FLAGS, 1);
    out.put(Msg::new().msg(TRACE_PACKET, &first).as_bytes())?;
    put_packet(&mut out, packet::PROCESS_TREE, &process_tree(log))?;
    if let Some(c) = clock_snapshot(log) {
        put_packet(&mut out, packet::CLOCK_SNAPSHOT, &c)?;
    }
    if let Some(s) = ftrace_stats(log, StatsPhase::Start) {
        put_packet(&mut out, packet::FTRACE_STATS, &s)?;
    }
    written.counter_points = counter_track(
        &mut out,
        LIVE_SLAB_TRACK,
        "slab live bytes",
        &series.slab_live,
    )?;
    if !series.page_held.points.is_empty() {
        written.counter_points += counter_track(
            &mut out,
            PAGE_HELD_TRACK,
            "page allocator: bytes allocated - freed",
            &series.page_held,
        )?;
    }
    let slices = stalls::write(&mut out, log, &series.episodes, &series.sources)?;
    written.stall_episodes = slices.episodes;
    written.stall_phases = slices.phases;
    let e = log.endian;
    let long_size = usize::from(log.arch.long_size);
    let mut mappings: HashMap<u32, Option<Mapping<'_>>> = HashMap::new();
    // The formats by id, the first of an id as `Log::format_by_id` finds
    // it, looked up once per id met: a search per id cost ids x formats.
    let mut formats: HashMap<u32, &EventFormat> = HashMap::new();
    for f in &log.formats {
        formats.entry(f.id).or_insert(f);
    }
    let mut bundles: BTreeMap<u32, Bundle> = BTreeMap::new();
    let mut result = Ok(());
    let mut event = Msg::new();
    let mut body = Msg::new();
    let source = Counted {
        log,
        done: AtomicU64::new(0),
    };
    let total = log.blocks.iter().map(|b| u64::from(b.count)).sum();
    let mut shown = 0;
    for_each_record(
        &source,
        |_| true,
        |r: Record<'_>| {
            if result.is_err() {
                return;
            }
            let done = source.done.load(Ordering::Relaxed);
            if done != shown {
                shown = done;
                progress(Progress {
                    step: "writing",
                    done,
                    total,
                });
            }
            let b = bundles.entry(r.cpu).or_insert_with(|| Bundle::new(r.cpu));
            if r.lost_before.is_some() && b.events > 0 {
                result = b.flush(&mut out, &mut written);
                if result.is_err() {
                    return;
                }
            }
            b.lost |= r.lost_before.is_some();
            let Some(id) = e.read_u16(r.payload, 0) else {
                written.unknown += 1;
                return;
            };
            let mapping = mappings.entry(u32::from(id)).or_insert_with(|| {
                (formats.get(&u32::from(id))).map(|f| Mapping::of(f, long_size, &mut written))
            });
            let Some(mapping) = mapping else {
                written.unknown += 1;
                return;
            };
            event.clear();
            event.uint(bundle::EV_TIMESTAMP, r.ts);
            encode(e, mapping, r.payload, &mut event, &mut body, &mut written);
            b.msg.msg(bundle::EVENT, &event);
            b.events += 1;
            if b.events >= BUNDLE_EVENTS || b.msg.as_bytes().len() >= BATCH_BYTES {
                result = b.flush(&mut out, &mut written);
            }
        },
    );
    result?;
    for b in bundles.values_mut() {
        b.flush(&mut out, &mut written)?;
    }
    if let Some(s) = ftrace_stats(log, StatsPhase::End) {
        put_packet(&mut out, packet::FTRACE_STATS, &s)?;
    }
    out.finish()?;
    written.compressed_packets = out.compressed;
    progress(Progress {
        step: "writing",
        done: total,
        total,
    });
    Ok(written)
}

/// One CPU's bundle being filled.
struct Bundle {
    cpu: u32,
    msg: Msg,
    events: usize,
    /// The CPU lost records before the first of these.
    lost: bool,
}

impl Bundle {
    fn new(cpu: u32) -> Self {
        Bundle {
            cpu,
            msg: Msg::new(),
            events: 0,
            lost: false,
        }
    }

    fn flush<W: Write>(&mut self, out: &mut Packets<W>, written: &mut Written) -> io::Result<()> {
        if self.events == 0 {
            return Ok(());
        }
        let mut b = Msg::new();
        b.uint(bundle::CPU, u64::from(self.cpu));
        if self.lost {
            b.uint(bundle::LOST_EVENTS, 1);
        }
        // The events follow the header fields: a bundle is their
        // concatenation, as repeated fields may be written in pieces.
        let mut whole = b.as_bytes().to_vec();
        whole.extend_from_slice(self.msg.as_bytes());
        put_packet_bytes(out, packet::FTRACE_EVENTS, &whole)?;
        written.bundles += 1;
        self.msg.clear();
        self.events = 0;
        self.lost = false;
        Ok(())
    }
}

/// The `FtraceEvent` fields after the time stamp.
fn encode(
    e: RunTimeEndian,
    mapping: &Mapping<'_>,
    payload: &[u8],
    event: &mut Msg,
    body: &mut Msg,
    written: &mut Written,
) {
    let common = match mapping {
        Mapping::Typed { common, .. }
        | Mapping::Generic { common, .. }
        | Mapping::Stack { common, .. } => *common,
    };
    if let Some(pid) = common.pid.and_then(|f| f.read_i64(e, payload)) {
        event.uint(bundle::EV_PID, pid as u32 as u64);
    }
    if let Some(flags) = common.flags.and_then(|f| f.read_u64(e, payload)) {
        event.uint(bundle::EV_COMMON_FLAGS, flags);
    }
    body.clear();
    match mapping {
        Mapping::Typed { oneof, fields, .. } => {
            for &(field, number, wire) in fields {
                match wire {
                    U64 => field.read_u64(e, payload).map(|v| body.uint(number, v)),
                    U32 => field
                        .read_u64(e, payload)
                        .map(|v| body.uint(number, v & 0xffff_ffff)),
                    I32 => field.read_i64(e, payload).map(|v| body.int(number, v)),
                };
            }
            event.msg(*oneof, body);
            written.typed += 1;
        }
        Mapping::Generic {
            name,
            fields,
            long_size,
            ..
        } => {
            body.string(1, name);
            let mut f = Msg::new();
            for field in fields.iter() {
                // A record's fields within the text bound of one record's
                // line: a format may declare thousands of fields of bytes.
                if body.as_bytes().len() > RECORD_TEXT_MAX {
                    break;
                }
                f.clear();
                f.string(1, &field.name);
                generic_value(e, field, payload, *long_size, &mut f);
                body.msg(2, &f);
            }
            event.msg(bundle::EV_GENERIC, body);
            written.generic += 1;
        }
        Mapping::Stack { reader, .. } => {
            body.string(1, STACK_EVENT);
            let frames: Vec<String> = reader
                .read(e, payload)
                .map(|s| s.frames().map(|ip| format!("{ip:#x}")).collect())
                .unwrap_or_default();
            let mut f = Msg::new();
            f.string(1, "caller").string(3, &frames.join(" "));
            body.msg(2, &f);
            event.msg(bundle::EV_GENERIC, body);
            written.generic += 1;
        }
    }
}

/// A generic field's value: `char` arrays and strings as text, other
/// arrays (fixed or dynamic) as hexadecimal words, integers as
/// `int_value` when signed, else `uint_value`.
fn generic_value(e: RunTimeEndian, field: &Field, payload: &[u8], long: usize, f: &mut Msg) {
    if !field.is_bytes() {
        if field.signed {
            field.read_i64(e, payload).map(|v| f.int(4, v));
        } else {
            field.read_u64(e, payload).map(|v| f.uint(5, v));
        }
        return;
    }
    if field.type_decl.contains("char") {
        if let Some(s) = field.read_bytes(e, payload) {
            f.string(3, &String::from_utf8_lossy(s));
        }
        return;
    }
    // An array of integers: as many whole words as the record holds.
    let elem = array_elem_size(field).unwrap_or_else(|| decl_elem_size(&field.type_decl, long));
    let Some(bytes) = field.read_raw_bytes(e, payload) else {
        return;
    };
    let words: Vec<String> = bytes
        .chunks_exact(elem)
        .filter_map(|w| e.read_uint(w, 0, elem))
        .map(|v| format!("{v:#x}"))
        .collect();
    f.string(3, &words.join(" "));
}

/// The element size a dynamic array's declaration names (`__data_loc
/// unsigned long[]`: the recorded kernel's `long`).
fn decl_elem_size(decl: &str, long: usize) -> usize {
    let has = |w: &str| {
        decl.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|x| x == w)
    };
    if has("u64") || has("s64") || decl.contains("long long") {
        8
    } else if has("long") {
        long
    } else if has("u32") || has("s32") || has("int") {
        4
    } else if has("u16") || has("s16") || has("short") {
        2
    } else {
        1
    }
}

/// The element size of a fixed integer array, from its size and count.
fn array_elem_size(field: &Field) -> Option<usize> {
    let FieldKind::Array { len } = field.kind else {
        return None;
    };
    let elem = field.size.checked_div(len)?;
    matches!(elem, 1 | 2 | 4 | 8).then_some(elem)
}

fn system_info(log: &Log) -> Msg {
    let a = &log.arch;
    let mut uts = Msg::new();
    for (number, v) in [
        (1, &a.sysname),
        (2, &a.version),
        (3, &a.release),
        (4, &a.machine),
    ] {
        if let Some(v) = v {
            uts.string(number, v);
        }
    }
    let mut m = Msg::new();
    m.msg(1, &uts);
    if let Some(p) = a.page_size {
        m.uint(6, u64::from(p));
    }
    if let Some(n) = a.nr_cpus {
        m.uint(8, u64::from(n));
    }
    m
}

/// The recorder's start as the trace clock and the wall clock read it:
/// `ClockSnapshot { clocks = 1; primary_trace_clock = 2 }`, `Clock {
/// clock_id = 1; timestamp = 2 }`, with the trace clock as `BOOTTIME` (6),
/// as the events' time stamps are taken, and the wall clock as `REALTIME`
/// (1): Perfetto shows the events at their time of day.
fn clock_snapshot(log: &Log) -> Option<Msg> {
    if !clock_in_ns(log.arch.trace_clock.as_deref()) {
        return None;
    }
    let (trace, wall) = (log.arch.start_trace_ns?, log.arch.start_wall_ns?);
    let mut m = Msg::new();
    for (id, ts) in [(6, trace), (1, wall)] {
        let mut c = Msg::new();
        c.uint(1, id).uint(2, ts);
        m.msg(1, &c);
    }
    m.uint(2, 6);
    Some(m)
}

/// `ProcessTree { processes = 1; threads = 2 }`, `Process { pid = 1;
/// cmdline = 3; cmdline_is_comm = 9 }`, `Thread { tid = 1; name = 2;
/// tgid = 3 }`: every pid with its name and, where the log knows it, its
/// thread group; a thread group's leader is also a process (a pid whose
/// group is not known is left to Perfetto to place).
fn process_tree(log: &Log) -> Msg {
    let mut tree = Msg::new();
    for pid in log.pids.pids() {
        let comm = log.pids.comm(pid);
        let tgid = log.pids.tgid(pid);
        let mut t = Msg::new();
        t.int(1, i64::from(pid));
        if let Some(c) = comm {
            t.string(2, c);
        }
        if let Some(g) = tgid {
            t.int(3, i64::from(g));
        }
        tree.msg(2, &t);
        if tgid == Some(pid) {
            let mut p = Msg::new();
            p.int(1, i64::from(pid));
            if let Some(c) = comm {
                p.string(3, c).uint(9, 1);
            }
            tree.msg(1, &p);
        }
    }
    tree
}

/// `FtraceStats { phase = 1; cpu_stats = 2 }` (phase 1 start of trace, 2
/// end), `FtraceCpuStats { cpu = 1; entries = 2; overrun = 3;
/// commit_overrun = 4; bytes_read = 5; dropped_events = 8; read_events =
/// 9 }`, from the last snapshot of each CPU in that phase.
fn ftrace_stats(log: &Log, phase: StatsPhase) -> Option<Msg> {
    let mut m = Msg::new();
    m.uint(1, if phase == StatsPhase::Start { 1 } else { 2 });
    let mut any = false;
    let last = log.last_stats_by_cpu(phase);
    for cpu in log.cpus() {
        let Some(s) = last.get(&cpu).and_then(|s| s.parsed.as_ref()) else {
            continue;
        };
        let mut c = Msg::new();
        c.uint(1, u64::from(cpu));
        for (number, v) in [
            (2, s.entries),
            (3, s.overrun),
            (4, s.commit_overrun),
            (5, s.bytes),
            (8, s.dropped_events),
            (9, s.read_events),
        ] {
            if let Some(v) = v {
                c.uint(number, v);
            }
        }
        m.msg(2, &c);
        any = true;
    }
    any.then_some(m)
}

/// The counter tracks' uuids.
const LIVE_SLAB_TRACK: u64 = 1;
const PAGE_HELD_TRACK: u64 = 2;

/// A counter track: `TrackDescriptor { uuid = 1; name = 2; counter = 8 }`
/// with `CounterDescriptor { unit = 3 }` (`UNIT_SIZE_BYTES` = 3), then a
/// packet per value: `TracePacket.timestamp` and `TrackEvent { type = 9
/// (TYPE_COUNTER = 4); track_uuid = 11; counter_value = 30 }`.
fn counter_track<W: Write>(
    out: &mut Packets<W>,
    uuid: u64,
    name: &str,
    series: &TimeSeries,
) -> io::Result<u64> {
    let mut counter = Msg::new();
    counter.uint(3, 3);
    let mut track = Msg::new();
    track.uint(1, uuid).string(2, name).msg(8, &counter);
    put_packet(out, packet::TRACK_DESCRIPTOR, &track)?;
    let mut n = 0;
    for p in &series.points {
        let mut ev = Msg::new();
        ev.uint(9, 4).uint(11, uuid).int(30, p.value);
        let mut pkt = Msg::new();
        pkt.uint(packet::TIMESTAMP, p.ts_ns)
            .msg(packet::TRACK_EVENT, &ev)
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, 1);
        out.put(Msg::new().msg(TRACE_PACKET, &pkt).as_bytes())?;
        n += 1;
    }
    Ok(n)
}

fn put_packet<W: Write>(out: &mut Packets<W>, field: u32, body: &Msg) -> io::Result<()> {
    put_packet_bytes(out, field, body.as_bytes())
}

/// One `Trace.packet`: `TracePacket { <field> = body;
/// trusted_packet_sequence_id = 1 }`.
fn put_packet_bytes<W: Write>(out: &mut Packets<W>, field: u32, body: &[u8]) -> io::Result<()> {
    let mut p = Msg::new();
    p.bytes(field, body)
        .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, 1);
    let mut t = Msg::new();
    t.msg(TRACE_PACKET, &p);
    out.put(t.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A varint at `at`, and where it ends.
    fn varint(b: &[u8], mut at: usize) -> (u64, usize) {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let c = b[at];
            at += 1;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return (v, at);
            }
            shift += 7;
        }
    }

    #[test]
    fn a_generic_record_is_within_one_record_s_text_bound() {
        // Forty fields of bytes over one 4,000-byte stretch: 160 KB of
        // text a record before the bound.
        let mut text = String::from(
            "name: many\nID: 900\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n",
        );
        for i in 0..40 {
            text.push_str(&format!(
                "\tfield:char b{i}[4000];\toffset:8;\tsize:4000;\tsigned:0;\n"
            ));
        }
        text.push_str("\nprint fmt: \"\"\n");
        let f = EventFormat::parse(&text, Some("x")).unwrap();
        let mut written = Written::default();
        let mapping = Mapping::of(&f, 8, &mut written);
        assert!(matches!(mapping, Mapping::Generic { .. }));
        let payload = vec![b'x'; 4008];
        let (mut event, mut body) = (Msg::new(), Msg::new());
        encode(
            RunTimeEndian::Little,
            &mapping,
            &payload,
            &mut event,
            &mut body,
            &mut written,
        );
        let n = event.as_bytes().len();
        assert!(
            (RECORD_TEXT_MAX..RECORD_TEXT_MAX + 4100).contains(&n),
            "{n}"
        );
    }

    /// The `Trace.packet`s of a trace: (field, bytes) of their first field.
    fn packets(b: &[u8]) -> Vec<(u64, &[u8])> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < b.len() {
            let (key, i) = varint(b, at);
            assert_eq!(key, u64::from(TRACE_PACKET << 3 | 2));
            let (len, i) = varint(b, i);
            let p = &b[i..i + len as usize];
            let (key, j) = varint(p, 0);
            let (n, j) = varint(p, j);
            assert_eq!(j + n as usize, p.len(), "one field a packet");
            out.push((key >> 3, &p[j..]));
            at = i + len as usize;
        }
        out
    }

    /// Packets compressed in batches: each batch is one packet holding
    /// only `compressed_packets`, a zlib stream of whole packets, and the
    /// batches inflated, one after the other, are the packets as written
    /// uncompressed.
    #[test]
    fn compressed_batches_inflate_to_the_packets_whole() {
        let mut plain = Packets::new(Vec::new(), Compression::None);
        let mut zlib = Packets::new(Vec::new(), Compression::Zlib);
        for i in 0..12000usize {
            let body: Vec<u8> = (0..100 + i % 700).map(|j| (i * 31 + j / 8) as u8).collect();
            let mut p = Msg::new();
            p.bytes(packet::FTRACE_EVENTS, &body);
            let t = Msg::new().msg(TRACE_PACKET, &p).as_bytes().to_vec();
            plain.put(&t).unwrap();
            zlib.put(&t).unwrap();
        }
        plain.finish().unwrap();
        zlib.finish().unwrap();
        assert_eq!(plain.compressed, 0);
        let batches = packets(&zlib.out);
        assert!(batches.len() > 1, "{} batches", batches.len());
        assert_eq!(zlib.compressed, batches.len() as u64);
        let mut inflated = Vec::new();
        for (field, data) in batches {
            assert_eq!(field, u64::from(packet::COMPRESSED_PACKETS));
            let mut batch = Vec::new();
            flate2::read::ZlibDecoder::new(data)
                .read_to_end(&mut batch)
                .unwrap();
            // Whole packets.
            assert!(!packets(&batch).is_empty());
            inflated.extend(batch);
        }
        assert_eq!(inflated, plain.out);
        assert!(zlib.out.len() * 4 < plain.out.len());
    }
}
