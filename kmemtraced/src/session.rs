//! A recording session, from the first block to the END block, whatever
//! buffer it reads (the recorder's instance, or the top-level buffer in boot
//! mode): writes the arch tag and metadata, starts the writer and the
//! per-CPU readers, and at the end drains them and finishes the log.
//!
//! Threads: one reader per CPU (read, batch), one compressor per CPU behind
//! it (compress, checksum), one writer (the only one touching the output),
//! and the main thread (signals, the status line, periodic statistics and
//! pid→comm snapshots). Data flows one way: reader → bounded queue →
//! compressor → bounded queue → writer → file.

use crate::cli::ReaderCpus;
use crate::cpu_reader::{self, Flag, ReaderConfig, Shared};
use crate::events::Event;
use crate::failure::{Failure, Result};
use crate::metadata::{self, Layout};
use crate::sink::{self, Msg};
use crate::status::Counters;
use crate::tracefs::TraceDir;
use kmemtrace_format::block::Compression;
use kmemtrace_format::kpack;
use kmemtrace_format::records::{Meta, NoteRecord, StatsPhase};
use kmemtrace_kernel::{CpuCounters, CpuStats, SubBufLayout};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Compression of META blocks (kallsyms is large): always on, whatever
/// `--compress` says about CPU data.
const META_COMPRESSION: Compression = Compression::Zstd(1);

/// ... and in a rotated capture, where every file repeats them: harder,
/// once (the files replay the blocks as encoded), so that a small budget
/// keeps more data (docs/benchmarks.md, "Rotation on a small budget").
const ROTATED_META_COMPRESSION: Compression = Compression::Zstd(9);

/// What a session reads and how.
pub struct Plan {
    /// The buffer's directory: an instance, or the top level (boot mode).
    pub dir: TraceDir,
    /// The top level (for printk_formats and saved_cmdlines).
    pub top: TraceDir,
    /// Instance name for the arch tag (empty: top-level buffer).
    pub instance: String,
    /// The events recorded (the arch tag lists them) and their formats.
    pub events: Vec<Event>,
    /// Formats the log carries besides: entries nothing enables, which
    /// any writer may leave in the buffer (`trace_marker`'s).
    pub more_formats: Vec<Event>,
    pub layout: Layout,
    pub compression: Compression,
    pub flush_interval: Duration,
    /// `buffer_percent` the instance was given (0..=100).
    pub buffer_percent: u32,
    /// Boot mode: drain at once, at most this many sub-buffers per CPU.
    pub drain_only: Option<u64>,
    /// Nice value of the reader threads (0: unchanged).
    pub reader_nice: i32,
    /// Where the readers (and their compressors) run (`--reader-cpus`).
    pub reader_cpus: ReaderCpus,
    /// The readers' SCHED_FIFO priority, if they are to be real-time
    /// (`--reader-realtime`, decided with the buffer's size).
    pub reader_realtime: Option<u8>,
    /// Move whole sub-buffers out with splice(2) (else read(2)).
    pub splice: bool,
    pub command_line: String,
    /// The files of a rotated capture, instead of one log.
    pub rotation: Option<crate::rotate::RotationPlan>,
}

/// The per-CPU `trace_pipe_raw` files a session reads.
struct CpuPipes {
    files: Vec<(u32, File)>,
    /// CPUs offline at the start (live recording): adopted when they come
    /// online.
    offline: Vec<u32>,
    /// CPUs whose file could not be opened, for the log.
    notes: Vec<String>,
}

/// Opens each online CPU's `trace_pipe_raw`; none at all is an error.
fn open_cpu_pipes(plan: &Plan) -> Result<CpuPipes> {
    let online = metadata::online_cpus();
    let mut p = CpuPipes {
        files: Vec::new(),
        offline: Vec::new(),
        notes: Vec::new(),
    };
    for cpu in metadata::per_cpu_dirs(&plan.dir) {
        if !online.is_empty() && !online.contains(&cpu) {
            if plan.drain_only.is_none() {
                p.offline.push(cpu);
            }
            continue;
        }
        match open_pipe(&plan.dir, cpu) {
            Ok(f) => p.files.push((cpu, f)),
            Err(e) => p.notes.push(format!("CPU {cpu} not recorded: {e}")),
        }
    }
    if p.files.is_empty() {
        return Err(Failure::input(format!(
            "no per-CPU trace_pipe_raw could be opened under {}",
            plan.dir.file("per_cpu").display()
        )));
    }
    Ok(p)
}

/// Writes each CPU's start statistics; returns them, and whether the
/// kernel counts the events its readers take on every CPU.
fn write_start_stats(
    plan: &Plan,
    cpus: &[u32],
    w: &mut crate::rotate::Output,
) -> Result<(BTreeMap<u32, CpuStats>, bool)> {
    let werr = |e: std::io::Error| Failure::output(format!("writing the log: {e}"));
    let mut start_stats = BTreeMap::new();
    // Boot mode: the buffer has been filling since boot, so its counters
    // from zero are the capture's (a start snapshot would hide the losses
    // of boot itself). The log then has no start statistics, which says
    // exactly that.
    let start_cpus: &[u32] = if plan.drain_only.is_some() { &[] } else { cpus };
    // The kernel counts the events its readers take (`read events`,
    // ring_buffer_read_page), so the recorder need not count them. Not in
    // boot mode, whose buffer others may have read before. (A 32-bit kernel
    // prints it negative past 2^31 and wraps it at 2^32:
    // `CpuStats::from_kernel` and `ReadCount` read it in the long's width.)
    let mut kernel_counts = !start_cpus.is_empty();
    for &cpu in start_cpus {
        let s = metadata::stats_record(&plan.dir, cpu, StatsPhase::Start);
        let stats = s
            .as_ref()
            .and_then(|s| CpuStats::from_kernel(&s.text, usize::from(plan.layout.long_size)));
        kernel_counts &= stats.is_some_and(|st| st.read_events.is_some());
        if let Some(s) = &s {
            start_stats.insert(cpu, stats.unwrap_or_default());
            w.write_stats(s).map_err(werr)?;
        }
    }
    Ok((start_stats, kernel_counts))
}

/// Sub-buffers a reader takes after a wake-up: the filled ones, not the
/// one the kernel is writing. The kernel wakes a poller once (dirty
/// sub-buffers + 1) * 100 >= buffer_percent * nr_pages: below 100 /
/// nr_pages it would report an empty buffer readable, so the mark is
/// raised to at least one sub-buffer's worth (and written, live).
fn pages_per_wake(plan: &Plan, buffer_size_kb: Option<u32>) -> Result<usize> {
    let sb = plan.layout.subbuf_size as usize;
    let nr_pages = buffer_size_kb.map_or(0, |kb| kb as usize * 1024 / sb.max(1));
    let mut pct = plan.buffer_percent as usize;
    if pct > 0 && nr_pages > 0 && pct * nr_pages <= 100 {
        pct = (100 / nr_pages + 1).min(100);
        if plan.drain_only.is_none() {
            plan.dir.write("buffer_percent", &pct.to_string())?;
        }
    }
    Ok(if pct == 0 || nr_pages == 0 {
        usize::MAX
    } else {
        (nr_pages * pct / 100).saturating_sub(1).max(1)
    })
}

/// A running session.
pub struct Session {
    pub plan: Plan,
    pub cpus: Vec<u32>,
    pub counters: Arc<Counters>,
    pub tx: Option<sink::Sender>,
    pub shared: Shared,
    readers: Vec<JoinHandle<std::result::Result<(), String>>>,
    /// Threads other than readers that report a task id (writer, sync).
    helper_threads: usize,
    /// How every reader is set up (all but the CPU and its file).
    reader_tmpl: ReaderTemplate,
    /// CPUs with a ring buffer directory that were offline at the start:
    /// each gets a reader when it comes online (the kernel allocates its
    /// buffer then; until then its trace_pipe_raw reads fail with ENODEV).
    offline: Vec<u32>,
    writer: Option<JoinHandle<std::io::Result<crate::rotate::Output>>>,
    /// The CPUs read, for the statistics of a rotated capture's files.
    stats_cpus: Arc<Mutex<Vec<u32>>>,
    start_stats: BTreeMap<u32, CpuStats>,
    /// The events read are the kernel's `read events` since the start,
    /// not counted by the readers (see `poll_stats`).
    kernel_counts: bool,
    /// Per CPU, the kernel's loss counters and `read events` followed
    /// look by look, across resets (someone truncating the instance's
    /// `trace`, or changing its tracer or clock, sets them back to 0) and,
    /// on 32-bit kernels, across 2^32. Only a reset seen as a fall between
    /// two looks is followed: looks come each second with a status line,
    /// else every 10 s, so the summary may count too few after one (the
    /// log itself is whole: `kmemtrace-check` counts it).
    followed: BTreeMap<u32, CpuCounters>,
    last_cmdlines: Vec<Meta>,
    pub started: Instant,
    notes: Vec<String>,
}

/// The parts of a [`ReaderConfig`] shared by all CPUs.
struct ReaderTemplate {
    subbuf_size: usize,
    layout: SubBufLayout,
    /// The sub-buffers' shape for `--compress kpack`.
    kpack_shape: Option<kpack::Shape>,
    pages_per_wake: usize,
    /// Readers (and their compressors) keep off the CPU they read.
    away: bool,
    /// The readers' SCHED_FIFO priority, if any.
    realtime: Option<u8>,
}

/// Opens a CPU's `trace_pipe_raw` for the reader (non-blocking).
fn open_pipe(dir: &TraceDir, cpu: u32) -> std::result::Result<File, String> {
    let p = dir.file(&format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&p)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// How a session ended.
pub struct Finished {
    pub lost: Vec<(u32, u64)>,
    pub elapsed: Duration,
    /// Problems that make the exit status non-zero (the log is finished).
    pub errors: Vec<String>,
    /// What rotation removed, said to the user.
    pub rotation_notes: Vec<String>,
}

/// A trace directory's per-CPU buffer size, KiB (`buffer_size_kb`).
pub fn buffer_kb(dir: &TraceDir) -> Option<u32> {
    parse_buffer_kb(&dir.read_string("buffer_size_kb").ok()?)
}

/// `1408` or `7 (expanded: 1408)` → 1408.
pub fn parse_buffer_kb(s: &str) -> Option<u32> {
    if let Some(i) = s.find("expanded:") {
        return s[i + 9..].trim().trim_end_matches(')').trim().parse().ok();
    }
    s.split_whitespace().next()?.parse().ok()
}

impl Session {
    /// Opens the per-CPU files, writes the arch tag, metadata and start
    /// statistics, and starts the writer and the readers. Nothing is
    /// enabled here: the caller enables events afterwards.
    pub fn start(plan: Plan, out: File) -> Result<Session> {
        let CpuPipes {
            files,
            offline,
            mut notes,
        } = open_cpu_pipes(&plan)?;
        let cpus: Vec<u32> = files.iter().map(|(c, _)| *c).collect();
        let buffer_size_kb = buffer_kb(&plan.dir);

        let arch = metadata::arch_tag(&metadata::ArchInput {
            dir: &plan.dir,
            layout: &plan.layout,
            instance: &plan.instance,
            events: &plan.events,
            buffer_size_kb,
            command_line: plan.command_line.clone(),
        });
        let werr = |e: std::io::Error| Failure::output(format!("writing the log: {e}"));
        let tids = Arc::new(Mutex::new(Vec::new()));
        let output = sink::LogFile::new(out, tids.clone());
        let helper_threads = 1 + usize::from(output.has_sync_thread());
        let kpack_shape = kpack::Shape::of(&arch);
        let stats_cpus = Arc::new(Mutex::new(cpus.clone()));
        let rotation = plan.rotation.clone().map(|r| {
            let (dir, cpus) = (plan.dir.clone(), stats_cpus.clone());
            let read: crate::rotate::StatsReader = Box::new(move |phase| {
                let cpus = cpus.lock().map(|c| c.clone()).unwrap_or_default();
                cpus.into_iter()
                    .filter_map(|c| metadata::stats_record(&dir, c, phase))
                    .collect()
            });
            (r, read)
        });
        let meta_compression = match rotation {
            Some(_) => ROTATED_META_COMPRESSION,
            None => META_COMPRESSION,
        };
        let mut w = crate::rotate::Output::start(
            output,
            &arch,
            meta_compression,
            plan.compression,
            rotation,
            tids.clone(),
        )
        .map_err(werr)?;
        let formats: Vec<Event> = plan
            .events
            .iter()
            .chain(&plan.more_formats)
            .cloned()
            .collect();
        let (metas, more_notes) =
            metadata::static_metas(&plan.dir, &plan.top, &plan.layout, &formats);
        notes.extend(more_notes);
        for m in &metas {
            w.write_meta(m).map_err(werr)?;
        }
        drop(metas);
        for text in &notes {
            w.write_note(&NoteRecord {
                warning: true,
                text: text.clone(),
            })
            .map_err(werr)?;
        }
        // At the start /proc knows every task there is; the kernel's tables
        // (costly to read: saved_tgids spans pid_max) matter for tasks that
        // come and go while recording, and are read periodically and at the end.
        for m in &metadata::proc_cmdlines() {
            w.write_meta(m).map_err(werr)?;
        }
        let last_cmdlines = Vec::new();
        let (start_stats, kernel_counts) = write_start_stats(&plan, &cpus, &mut w)?;

        let counters = Arc::new(Counters::new(
            &cpus.iter().chain(&offline).copied().collect::<Vec<_>>(),
        ));
        counters.written.store(w.bytes_written(), Relaxed);
        let shared = Shared {
            drain: Arc::new(Flag::new().map_err(|e| Failure::runtime(format!("pipe: {e}")))?),
            alarm: Arc::new(Flag::new().map_err(|e| Failure::runtime(format!("pipe: {e}")))?),
            tids,
        };
        if plan.drain_only.is_some() {
            shared.drain.raise();
        }
        let (tx, rx) = sync_channel(sink::QUEUE_BLOCKS_PER_CPU * cpus.len());
        let alarm = shared.alarm.clone();
        let writer = sink::spawn(w, rx, counters.clone(), shared.tids.clone(), move || {
            alarm.raise()
        })
        .map_err(|e| Failure::runtime(format!("starting the writer thread: {e}")))?;

        let sb = plan.layout.subbuf_size as usize;
        let pages_per_wake = pages_per_wake(&plan, buffer_size_kb)?;
        let layout = SubBufLayout {
            long_size: plan.layout.long_size as usize,
            data_offset: plan.layout.data_offset as usize,
            subbuf_size: sb,
        };
        let away = plan.reader_cpus.away(buffer_size_kb);
        let realtime = plan.reader_realtime;
        let mut session = Session {
            plan,
            cpus: Vec::new(),
            counters,
            tx: Some(tx),
            shared,
            readers: Vec::new(),
            helper_threads,
            reader_tmpl: ReaderTemplate {
                subbuf_size: sb,
                layout,
                kpack_shape,
                pages_per_wake,
                away,
                realtime,
            },
            offline,
            writer: Some(writer),
            stats_cpus,
            start_stats,
            kernel_counts,
            followed: BTreeMap::new(),
            last_cmdlines,
            started: Instant::now(),
            notes: Vec::new(),
        };
        for (cpu, file) in files {
            session.start_reader(cpu, file)?;
        }
        Ok(session)
    }

    fn start_reader(&mut self, cpu: u32, file: File) -> Result<()> {
        let t = &self.reader_tmpl;
        let cfg = ReaderConfig {
            cpu,
            file,
            subbuf_size: t.subbuf_size,
            layout: t.layout,
            kpack_shape: t.kpack_shape,
            pages_per_wake: t.pages_per_wake,
            flush_interval: self.plan.flush_interval,
            compression: self.plan.compression,
            drain_limit: self.plan.drain_only,
            nice: self.plan.reader_nice,
            away: t.away,
            realtime: t.realtime,
            splice: self.plan.splice,
            count_events: !self.kernel_counts,
        };
        let Some(tx) = self.tx.clone() else {
            return Err(Failure::runtime("the session is finishing"));
        };
        let h = cpu_reader::spawn(cfg, tx, &self.shared, self.counters.clone())
            .map_err(|e| Failure::runtime(format!("starting a reader thread: {e}")))?;
        self.readers.push(h);
        self.cpus.push(cpu);
        if let Ok(mut c) = self.stats_cpus.lock() {
            if !c.contains(&cpu) {
                c.push(cpu);
            }
        }
        Ok(())
    }

    /// Starts readers for CPUs that came online since the start. Returns
    /// those CPUs (their readers' task ids join [`thread_ids`](Self::thread_ids)).
    pub fn adopt_onlined_cpus(&mut self) -> Vec<u32> {
        if self.offline.is_empty() {
            return Vec::new();
        }
        let online = metadata::online_cpus();
        let mut started = Vec::new();
        for cpu in std::mem::take(&mut self.offline) {
            if !online.contains(&cpu) {
                self.offline.push(cpu);
                continue;
            }
            let at = self.started.elapsed().as_secs_f64();
            match open_pipe(&self.plan.dir, cpu)
                .and_then(|f| self.start_reader(cpu, f).map_err(|e| e.msg))
            {
                Ok(()) => {
                    self.notes.push(format!(
                        "CPU {cpu} came online {at:.1} s into the recording; recorded from then on"
                    ));
                    started.push(cpu);
                }
                Err(e) => self.notes.push(format!(
                    "CPU {cpu} came online {at:.1} s into the recording but is not recorded: {e}"
                )),
            }
        }
        started
    }

    /// Task ids of the reader, compressor, writer and sync threads started
    /// so far.
    pub fn thread_ids_now(&self) -> Vec<i32> {
        self.shared
            .tids
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Task ids of the reader, compressor, writer and sync threads, once
    /// they all started.
    pub fn thread_ids(&self) -> Vec<i32> {
        // Each reader starts its CPU's compressor.
        let want = 2 * self.readers.len() + self.helper_threads;
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let t = self
                .shared
                .tids
                .lock()
                .map(|t| t.clone())
                .unwrap_or_default();
            if t.len() >= want || Instant::now() > until {
                return t;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Marks the start of tracing (after the events were enabled).
    pub fn mark_started(&mut self) {
        self.started = Instant::now();
    }

    /// Writes a META block now (a later one of the same kind and name
    /// replaces it, FORMAT.md §7.2).
    pub fn write_meta(&self, m: Meta) {
        self.send(Msg::Meta(m));
    }

    /// Remembers a remark for a NOTE block at the end.
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    fn send(&self, m: Msg) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(m);
        }
    }

    /// Reads each CPU's kernel statistics: takes the events read so far
    /// into the counters (where the kernel counts them) and returns the
    /// events lost per CPU since the start (0 where unreadable).
    pub fn poll_stats(&mut self) -> Vec<(u32, u64)> {
        let cpus = self.cpus.clone();
        cpus.into_iter()
            .map(|c| {
                let now = self
                    .plan
                    .dir
                    .read_bytes(&format!("per_cpu/cpu{c}/stats"))
                    .ok()
                    .and_then(|t| {
                        CpuStats::from_kernel(&t, usize::from(self.plan.layout.long_size))
                    });
                (c, now.map_or(0, |now| self.since_start(c, &now)))
            })
            .collect()
    }

    /// The events lost on `cpu` since the start, given its statistics
    /// `now`; takes the events read from them too, where the kernel counts.
    fn since_start(&mut self, cpu: u32, now: &CpuStats) -> u64 {
        // A CPU come online later: its buffer is new, counted from 0.
        let start = self.start_stats.get(&cpu).copied().unwrap_or_default();
        let followed = self
            .followed
            .entry(cpu)
            .or_insert_with(|| CpuCounters::from(&start));
        followed.update(now);
        if self.kernel_counts && now.read_events.is_some() {
            if let Some(k) = self.counters.cpu(cpu) {
                let count = followed.read_events.total();
                k.events.store(count, std::sync::atomic::Ordering::Relaxed);
            }
        }
        followed.lost()
    }

    /// Writes `cpu`'s statistics now to the log and takes its figures
    /// ([`Session::since_start`]): the events lost since the start, `None`
    /// where they could not be read.
    fn record_stats(&mut self, cpu: u32, phase: StatsPhase) -> Option<u64> {
        let s = metadata::stats_record(&self.plan.dir, cpu, phase)?;
        let now = CpuStats::from_kernel(&s.text, usize::from(self.plan.layout.long_size));
        let lost = now.map(|now| self.since_start(cpu, &now));
        self.send(Msg::Stats(s));
        lost
    }

    /// Periodic statistics, and the kernel's pid→comm tables when changed.
    pub fn periodic(&mut self) {
        // Their figures taken also without a status line: a reset of the
        // kernel's count is seen only by watching it.
        for cpu in self.cpus.clone() {
            self.record_stats(cpu, StatsPhase::Periodic);
        }
        for m in metadata::kernel_cmdlines(&self.plan.top) {
            if !self.last_cmdlines.contains(&m) {
                self.last_cmdlines.retain(|o| o.kind != m.kind);
                self.last_cmdlines.push(m.clone());
                self.send(Msg::Meta(m));
            }
        }
    }

    /// Whether a reader or the writer failed.
    pub fn failed(&self) -> bool {
        self.shared.alarm.is_raised()
    }

    /// Drains the readers (the caller has disabled the events), writes the
    /// end statistics, pid→comm tables and the END block.
    pub fn finish(mut self, reason: &str, exit_status: Option<i32>) -> Result<Finished> {
        self.shared.drain.raise();
        let mut errors = Vec::new();
        for h in self.readers.drain(..) {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("a reader thread panicked".into()),
            }
        }
        let elapsed = self.started.elapsed();
        let mut lost = Vec::new();
        for cpu in self.cpus.clone() {
            if let Some(l) = self.record_stats(cpu, StatsPhase::End) {
                lost.push((cpu, l));
            } else if self.kernel_counts {
                self.notes.push(format!(
                    "CPU {cpu}: its end statistics could not be read: the events read are counted up to the last look at them"
                ));
            }
        }
        for m in metadata::proc_cmdlines() {
            self.send(Msg::Meta(m));
        }
        for m in metadata::kernel_cmdlines(&self.plan.top) {
            self.send(Msg::Meta(m));
        }
        if let (n @ 1.., Some(why)) = self.counters.realtime_refused() {
            self.notes.push(format!(
                "{n} readers could not run under SCHED_FIFO as asked (--reader-realtime): {why}"
            ));
        }
        let waits = self.counters.compressor_waits();
        if waits > 0 {
            self.notes.push(format!(
                "readers waited {waits} times for their compressors (compression slower than the trace)"
            ));
        }
        let waits = self.counters.backpressure();
        if waits > 0 {
            self.notes.push(format!(
                "compressors waited {waits} times for the writer (output slower than the trace)"
            ));
        }
        for e in &errors {
            self.notes.push(format!("recording error: {e}"));
        }
        for n in std::mem::take(&mut self.notes) {
            self.send(Msg::Note(NoteRecord {
                warning: true,
                text: n,
            }));
        }
        drop(self.tx.take());
        let w = match self.writer.take().map(|h| h.join()) {
            Some(Ok(Ok(w))) => w,
            Some(Ok(Err(e))) => {
                return Err(Failure::output(format!("writing the log: {e}")));
            }
            _ => return Err(Failure::runtime("the writer thread panicked")),
        };
        let rotation_notes = w
            .finish(Some(metadata::wall_ns()), reason, exit_status)
            .map_err(|e| Failure::output(format!("writing the log: {e}")))?;
        Ok(Finished {
            lost,
            elapsed,
            errors,
            rotation_notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_kb("1408\n"), Some(1408));
        assert_eq!(parse_buffer_kb("7 (expanded: 1408)\n"), Some(1408));
        assert_eq!(parse_buffer_kb("X\n"), None);
    }
}
