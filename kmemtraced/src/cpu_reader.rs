//! One reader thread per CPU: waits in poll() on `per_cpu/cpuN/trace_pipe_raw`
//! until the kernel says the buffer is `buffer_percent` full (or the flush
//! interval passes), reads whole sub-buffers and batches them into blocks of
//! up to 1 MiB, which the CPU's own compressor thread (`compressor.rs`)
//! compresses, checksums and hands to the writer over a bounded queue: the
//! reader never stops draining to compress, and compression runs on every
//! CPU in parallel.
//!
//! How the kernel behaves (kernel/trace/trace.c `tracing_buffers_read`,
//! `tracing_buffers_poll`; kernel/trace/ring_buffer.c `ring_buffer_read_page`,
//! `ring_buffer_poll_wait`, `full_hit`):
//!
//! - A read of at least one sub-buffer returns exactly one sub-buffer. When
//!   the writer has moved on, the page is swapped out whole (no copy). When
//!   the writer is still on it, the events committed so far are *copied*
//!   into a zero-filled page and consumed: a read never blocks on, nor loses,
//!   a partly filled page.
//! - With O_NONBLOCK a read of an empty buffer fails with EAGAIN (without it,
//!   it sleeps until *any* event arrives, which would wake us per event).
//! - poll() on a per-CPU file with `buffer_percent` > 0 reports readable only
//!   once that share of the buffer's sub-buffers is filled (`full_hit`), and
//!   the writer wakes the poller (via irq_work) when it crosses that mark.
//!   So the reader sleeps while the buffer fills, then reads the filled
//!   sub-buffers, not the one being written, and polls again. The default
//!   mark is 25%: lower ones cost more wake-ups for fewer sub-buffers each,
//!   and lost more, not less, with big sub-buffers; with one-page ones
//!   (kernels before 6.8) a very low mark cost much more CPU and saved no
//!   events once readers ran early enough (`cli.rs` `buffer_percent`;
//!   the rounds are in docs/benchmarks.md, "Recording"). Real-time
//!   readers (below), which run as soon as they are woken, wake at 50%
//!   where that leaves 512 KiB or more of room (`cli.rs` `wake_mark`).
//!   (trace-cmd instead reads until empty and sleeps 1 ms in between.)
//!   Readers run at nice -10 by default (`--reader-nice`): when the traced
//!   load keeps every CPU busy, a reader woken during such a burst must
//!   get a CPU within milliseconds, and at nice 0 it often did not.
//!   Below 2 MiB per CPU they run under SCHED_FIFO instead
//!   (`--reader-realtime`): a woken real-time reader takes a CPU from the
//!   load at its next preemption point, where a nice -10 one could still
//!   wait its turn, and 1 MiB still lost events in some exit bursts.
//! - Below 4 MiB per CPU (`--reader-cpus`), each reader (and its
//!   compressor) keeps off the CPU it reads, where there is another. A
//!   burst on CPU n can hold that CPU so that nothing else runs there:
//!   softirq RCU callbacks freeing a dead process's files (thousands of
//!   `kmem_cache_free` in the idle task's context), or code
//!   that does not yield (the kernel here runs with `preempt=none`). The
//!   writer's wake-up (irq_work on CPU n) placed the reader on CPU n,
//!   which looked idle, and the reader waited there
//!   until the buffer had overflowed, while the other CPU ran user code it
//!   could have preempted at once (sched_switch and sched_wakeup recorded
//!   beside the kmem events, `-b 1024`). Reading another CPU's fresh
//!   pages costs CPU (the data crosses caches), so bigger buffers, which
//!   outlast such bursts, leave the readers where the scheduler puts them.
//! - At stop the main thread disables the events and `tracing_on`; each
//!   reader then reads without blocking until EAGAIN, which takes the last,
//!   partly filled page too (as trace-cmd's `tracecmd_flush_recording`).
//! - Whole sub-buffers are spliced (`tracing_buffers_splice_read`, which
//!   takes only pages the writer has left) into a pipe and copied out of
//!   it, as trace-cmd does, rather than read: see `splice.rs` for why. The
//!   page being written is copied out by read(2) once per flush interval
//!   and at stop.

use crate::compressor::{Batch, BatchPool};
use crate::sink::Sender;
use crate::splice::{Fill, SplicePipe};
use crate::status::CpuCounters;
use crate::sys;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{cpu_data_block_bytes, CPU_DATA_HEADER_LEN};
use kmemtrace_format::writer::CpuBlockEncoder;
use kmemtrace_kernel::{parse_subbuf, RbRecordKind, RunTimeEndian, SubBufLayout};
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A one-shot, level-triggered wake-up that any thread can poll on.
pub struct Flag {
    set: AtomicBool,
    r: OwnedFd,
    w: OwnedFd,
}

impl Flag {
    pub fn new() -> std::io::Result<Flag> {
        let (r, w) = sys::pipe()?;
        Ok(Flag {
            set: AtomicBool::new(false),
            r,
            w,
        })
    }
    /// Raises the flag (once; later calls do nothing).
    pub fn raise(&self) {
        if !self.set.swap(true, Ordering::SeqCst) {
            sys::poke(self.w.as_fd());
        }
    }
    pub fn is_raised(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }
    /// Readable once raised (the byte is never consumed).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.r.as_fd()
    }
}

/// How one CPU is read.
pub struct ReaderConfig {
    pub cpu: u32,
    /// `per_cpu/cpuN/trace_pipe_raw`, opened O_RDONLY | O_NONBLOCK.
    pub file: File,
    pub subbuf_size: usize,
    /// The sub-buffer layout, for counting events.
    pub layout: SubBufLayout,
    /// The sub-buffers' shape, for `Compression::Kpack`.
    pub kpack_shape: Option<kmemtrace_format::kpack::Shape>,
    /// Sub-buffers to read after a buffer-full wake-up before polling again
    /// (`usize::MAX`: until empty).
    pub pages_per_wake: usize,
    /// Read everything, partial page included, at least this often.
    pub flush_interval: Duration,
    pub compression: Compression,
    /// Stop draining after this many sub-buffers (boot mode, where events
    /// may still be arriving); `None`: until empty.
    pub drain_limit: Option<u64>,
    /// Nice value for the reader thread (0: leave it).
    pub nice: i32,
    /// Keep the reader and its compressor off CPU `cpu` (`--reader-cpus`).
    pub away: bool,
    /// Run the reader (not its compressor) under SCHED_FIFO at this
    /// priority (`--reader-realtime`).
    pub realtime: Option<u8>,
    /// Move whole sub-buffers out with splice(2) (see `splice.rs`).
    pub splice: bool,
    /// Count the events of each sub-buffer read (else the main thread
    /// takes the kernel's count: `Session::poll_stats`).
    pub count_events: bool,
}

/// Shared between the readers, their compressors and the main thread.
#[derive(Clone)]
pub struct Shared {
    /// Raised by the main thread: read what is left, then exit.
    pub drain: Arc<Flag>,
    /// Raised by a reader or compressor that failed, to wake the main
    /// thread.
    pub alarm: Arc<Flag>,
    pub tids: Arc<Mutex<Vec<i32>>>,
}

struct Reader<'a> {
    cfg: ReaderConfig,
    counters: &'a CpuCounters,
    /// Where full batches go to be compressed, and empty ones come from.
    pool: BatchPool,
    /// Room for the CPU_DATA header, then up to 1 MiB of sub-buffers: the
    /// pages are read into the block to be and compressed from there.
    batch: Vec<u8>,
    /// Sub-buffer bytes in the batch (after the header room).
    filled: usize,
    total_subbufs: u64,
    /// `None`: read(2) only (asked for, or the kernel refused splice).
    splice: Option<SplicePipe>,
}

/// Starts the reader of one CPU. The thread returns an error message if
/// reading or handing over data failed (after raising `shared.alarm`).
pub fn spawn(
    cfg: ReaderConfig,
    tx: Sender,
    shared: &Shared,
    counters: Arc<crate::status::Counters>,
) -> std::io::Result<JoinHandle<Result<(), String>>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(format!("kmt-cpu{}", cfg.cpu))
        .spawn(move || {
            let cpu = cfg.cpu;
            read_cpu(cfg, tx, &shared, counters).map_err(|e| {
                shared.alarm.raise();
                format!("CPU {cpu}: {e}")
            })
        })
}

/// The reader thread: sets itself up, starts its compressor, reads until
/// told to drain, then waits for the compressor to finish.
fn read_cpu(
    cfg: ReaderConfig,
    tx: Sender,
    shared: &Shared,
    counters: Arc<crate::status::Counters>,
) -> Result<(), String> {
    if let Ok(mut t) = shared.tids.lock() {
        t.push(sys::gettid());
    }
    if cfg.nice != 0 {
        // Best effort: without CAP_SYS_NICE the reader keeps the normal
        // priority.
        let _ = sys::set_thread_nice(cfg.nice);
    }
    let cpu = cfg.cpu;
    if cfg.away {
        // Off the CPU it reads (it and its compressor, which inherits
        // this): see the module comment. Best effort.
        let _ = sys::avoid_cpu(cpu);
    }
    let c = counters
        .cpu(cpu)
        .ok_or_else(|| format!("no counters for CPU {cpu}"))?;
    let sb = cfg.subbuf_size.max(1);
    let batch_len = cpu_data_block_bytes(sb as u64) as usize;
    let encoder = CpuBlockEncoder::new(cpu, sb as u32, cfg.compression).with_shape(cfg.kpack_shape);
    let nice = compressor_nice(cfg.nice);
    let mut pool = BatchPool::start(cpu, encoder, batch_len, tx, counters.clone(), shared, nice)
        .map_err(|e| format!("starting its compressor: {e}"))?;
    if let Some(prio) = cfg.realtime {
        // After the compressor is started, which must not inherit it: a
        // real-time thread that compresses would take whole CPUs from the
        // load. Best effort, as the nice value, but noted in the log.
        if let Err(e) = sys::set_thread_fifo(prio) {
            c.realtime_refused
                .store(e.raw_os_error().unwrap_or(-1), Relaxed);
        }
    }
    let batch = pool.take_empty(c)?;
    let mut r = Reader {
        cfg,
        counters: c,
        pool,
        batch,
        filled: 0,
        total_subbufs: 0,
        splice: None,
    };
    if r.cfg.splice {
        r.splice = SplicePipe::new(batch_len, sb).ok();
    }
    // The compressor finishes the batches handed over even when reading
    // failed (the one being filled is lost then).
    r.run(&shared.drain).and(r.pool.finish())
}

impl Reader<'_> {
    fn run(&mut self, drain: &Flag) -> Result<(), String> {
        let mut last_flush = Instant::now();
        let mut idle_wakeups = 0u32;
        loop {
            if drain.is_raised() {
                self.read_pages(usize::MAX, usize::MAX)?;
                self.take_spliced()?;
                return self.flush();
            }
            let since = last_flush.elapsed();
            if since >= self.cfg.flush_interval {
                // One copy of the page being written: under load a loop
                // until empty would chase the writer, a few events a read.
                self.read_pages(usize::MAX, 1)?;
                self.take_spliced()?;
                self.flush()?;
                last_flush = Instant::now();
                continue;
            }
            let ready = sys::wait_readable(
                &[self.cfg.file.as_fd(), drain.fd()],
                self.cfg.flush_interval - since,
            )
            .map_err(|e| format!("poll: {e}"))?;
            if ready[1] {
                continue;
            }
            if ready[0] {
                if self.read_pages(self.cfg.pages_per_wake, 0)? == 0 {
                    // Readable but nothing to read: do not spin.
                    idle_wakeups += 1;
                    if idle_wakeups > 2 {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                } else {
                    idle_wakeups = 0;
                }
            }
        }
    }

    /// Reads up to `limit` sub-buffers (stopping when the buffer is empty),
    /// sending full batches on the way. Returns how many were read. When
    /// splicing, which takes only whole sub-buffers and leaves them in the
    /// pipe until the batch is whole ([`take_spliced`](Self::take_spliced)),
    /// up to `partial_reads` times the events of the one the kernel is
    /// still writing are copied out by read(2) (read(2) alone always takes
    /// them).
    fn read_pages(&mut self, limit: usize, mut partial_reads: usize) -> Result<usize, String> {
        let sb = self.cfg.subbuf_size;
        let mut n = 0;
        while n < limit {
            let pending = self.splice.as_ref().map_or(0, SplicePipe::pending);
            let mut want = limit - n;
            if let Some(max) = self.cfg.drain_limit {
                let done = self.total_subbufs + (pending / sb) as u64;
                if done >= max {
                    break;
                }
                want = want.min(usize::try_from(max - done).unwrap_or(usize::MAX));
            }
            let room = (self.batch.len() - CPU_DATA_HEADER_LEN - self.filled - pending) / sb;
            if room == 0 {
                self.take_spliced()?;
                self.flush()?;
                continue;
            }
            if let Some(p) = &mut self.splice {
                match p.fill(self.cfg.file.as_fd(), want.min(room) * sb) {
                    Fill::Moved(bytes) => {
                        n += bytes.div_ceil(sb);
                        continue;
                    }
                    Fill::Full => {
                        self.take_spliced()?;
                        continue;
                    }
                    Fill::NoneWhole if partial_reads == 0 => break,
                    Fill::NoneWhole => {
                        partial_reads -= 1;
                        self.take_spliced()?;
                    }
                    Fill::Failed => self.take_spliced()?,
                    Fill::Refused => {
                        self.take_spliced()?;
                        self.splice = None;
                    }
                }
            }
            if !self.read_one()? {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    /// Moves the sub-buffers waiting in the splice pipe into the batch.
    fn take_spliced(&mut self) -> Result<(), String> {
        let Some(p) = &mut self.splice else {
            return Ok(());
        };
        let start = CPU_DATA_HEADER_LEN + self.filled;
        let got = p
            .take(&mut self.batch[start..])
            .map_err(|e| format!("reading the splice pipe: {e}"))?;
        let sb = self.cfg.subbuf_size;
        for k in 0..got / sb {
            self.account(start + k * sb);
        }
        Ok(())
    }

    /// Reads one whole sub-buffer into the batch; `false` if none is there.
    fn read_one(&mut self) -> Result<bool, String> {
        let sb = self.cfg.subbuf_size;
        let start = CPU_DATA_HEADER_LEN + self.filled;
        let (mut got, mut waits) = (0, 0);
        while got < sb {
            match self.cfg.file.read(&mut self.batch[start + got..start + sb]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // The CPU's buffer is not there (the CPU went offline
                // before the instance was made): nothing to read.
                Err(e) if got == 0 && e.raw_os_error() == Some(nix::libc::ENODEV) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if got == 0 {
                        break;
                    }
                    // The rest of a page being read is always there at
                    // once; should it not be (a page smaller than we
                    // think), a real-time reader must not spin on it, nor
                    // wait for it forever at stop.
                    waits += 1;
                    if waits > 100 {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                Err(e) => return Err(format!("reading trace_pipe_raw: {e}")),
            }
        }
        if got == 0 {
            return Ok(false);
        }
        if got < sb {
            self.batch[start + got..start + sb].fill(0);
        }
        self.account(start);
        Ok(true)
    }

    /// Counts the sub-buffer just put in the batch at `start` and keeps it.
    fn account(&mut self, start: usize) {
        let sb = self.cfg.subbuf_size;
        let page = &self.batch[start..start + sb];
        let (events, missed) = scan_subbuf(&self.cfg.layout, page, self.cfg.count_events);
        self.counters.events.fetch_add(events, Relaxed);
        self.counters.missed.fetch_add(missed, Relaxed);
        self.counters.subbufs.fetch_add(1, Relaxed);
        self.counters.data_bytes.fetch_add(sb as u64, Relaxed);
        self.filled += sb;
        self.total_subbufs += 1;
    }

    /// Hands the batch to the compressor, as the CPU's next block, and
    /// takes an empty one.
    fn flush(&mut self) -> Result<(), String> {
        if self.filled == 0 {
            return Ok(());
        }
        let empty = self.pool.take_empty(self.counters)?;
        let buf = std::mem::replace(&mut self.batch, empty);
        let filled = std::mem::take(&mut self.filled);
        self.pool.hand_over(Batch { buf, filled })
    }
}

/// The compressor's nice value (`None`: the reader's, inherited). Half a
/// raised reader's, so that a reader woken by a filling buffer preempts
/// its compressor, while the compressor still gets more CPU than the traced
/// load's tasks at nice 0; a reader left alone (0) or lowered leaves its
/// compressor alike.
fn compressor_nice(reader_nice: i32) -> Option<i32> {
    (reader_nice < 0).then_some(reader_nice / 2)
}

/// The byte order of this host, which is the recorded kernel's.
const HOST: RunTimeEndian = if cfg!(target_endian = "big") {
    RunTimeEndian::Big
} else {
    RunTimeEndian::Little
};

/// Counts the data events in a sub-buffer (up to the first malformed
/// record; 0 unless `count`), and the events the kernel says it lost
/// before it.
pub fn scan_subbuf(layout: &SubBufLayout, page: &[u8], count: bool) -> (u64, u64) {
    let Ok(sb) = parse_subbuf(HOST, layout, page) else {
        return (0, 0);
    };
    let missed = if sb.missed_events {
        sb.lost_events.unwrap_or(1)
    } else {
        0
    };
    if !count {
        return (0, missed);
    }
    let events = sb
        .events(HOST)
        .map_while(|r| r.ok())
        .filter(|r| matches!(r.kind, RbRecordKind::Data { .. }))
        .count();
    (events as u64, missed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: SubBufLayout = SubBufLayout {
        long_size: 8,
        data_offset: 16,
        subbuf_size: 4096,
    };

    fn page(commit: u64, data: &[u32]) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        p[8..16].copy_from_slice(&commit.to_ne_bytes());
        for (k, w) in data.iter().enumerate() {
            p[16 + 4 * k..20 + 4 * k].copy_from_slice(&w.to_ne_bytes());
        }
        p
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn counts_events_and_losses() {
        // Event of 2 data words (type_len 2), time extend, event with a
        // length word (type_len 0, array[0] = 12: the word and 8 data
        // bytes), discarded padding of 8 bytes.
        let words = [2, 0, 0, 30, 0, 0, 12, 0, 0, (1 << 5) | 29, 4];
        let len = (words.len() * 4) as u64;
        assert_eq!(scan_subbuf(&LAYOUT, &page(len, &words), true), (2, 0));
        // Missed events, count stored after the data.
        let mut p = page(len | (1 << 31) | (1 << 30), &words);
        p[16 + len as usize..24 + len as usize].copy_from_slice(&77u64.to_ne_bytes());
        assert_eq!(scan_subbuf(&LAYOUT, &p, true), (2, 77));
        assert_eq!(scan_subbuf(&LAYOUT, &p, false), (0, 77));
        // Garbage never panics.
        assert_eq!(scan_subbuf(&LAYOUT, &[1, 2, 3], true), (0, 0));
        let junk = page(u64::MAX, &[0, u32::MAX, 5]);
        let _ = scan_subbuf(&LAYOUT, &junk, true);
    }
}
