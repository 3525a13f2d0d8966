//! The log being written: one file, or the files of a rotated capture
//! (`--max-size`, `--rotate-size`, `--rotate-time`; FORMAT.md §13).
//!
//! A rotated capture is a series of files, each a complete log: header,
//! ARCH, a SEGMENT block (the capture's id, the file's index, where each
//! CPU's blocks begin in it), the start metadata again (formats,
//! kallsyms, task names: kept as encoded and written as they are), start
//! statistics, the CPU data, end statistics and END. The writer thread
//! rotates between two blocks, so no block is split; a file is finished
//! (END) and synced before the next is created and before the oldest is
//! removed, so a SIGKILL or power loss leaves at most the file in progress
//! cut short (its prefix readable, as any log's; one cut before its
//! SEGMENT is left out by the readers).
//!
//! A full disk (or quota) is met as the budget is: where a write finds no
//! room, the file is cut back to its last whole block and the capture's
//! oldest file removed, and the write tried again; with nothing left to
//! remove, the file ends there (END, reason "output failed") and the
//! recording stops. Either way it is said.

use crate::sink::LogFile;
use kmemtrace_format::arch::ArchTag;
use kmemtrace_format::block::Compression;
use kmemtrace_format::records::{
    CpuStart, Meta, MetaKind, NoteRecord, SegmentRecord, StatsPhase, StatsRecord,
    END_OUTPUT_FAILED, END_ROTATED,
};
use kmemtrace_format::rotation::file_path;
use kmemtrace_format::writer::{EncodedBlock, LogWriter};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Room kept in a file for its END block and end statistics.
const END_ROOM: u64 = 16 << 10;

/// What rotation was asked.
#[derive(Debug, Clone)]
pub struct RotationPlan {
    /// The name given with `-o`: the files are named after it.
    pub output: PathBuf,
    /// The budget for all files kept (`--max-size`): the oldest go.
    pub max_size: Option<u64>,
    /// A file is finished before it grows past this (`--rotate-size`).
    pub file_size: Option<u64>,
    /// ... or once it is this old (`--rotate-time`).
    pub period: Option<Duration>,
}

impl RotationPlan {
    /// The size a file is finished at, where each begins with `start`
    /// bytes of metadata: `--rotate-size`, else a quarter of the budget
    /// (three whole files and the one in progress fit), raised to twice
    /// the metadata (kallsyms alone is about a megabyte on a desktop
    /// kernel: files of little more would hold little but it), at most
    /// half the budget.
    pub fn file_limit(&self, start: u64) -> Option<u64> {
        self.file_size.or(self
            .max_size
            .map(|m| (m / 4).max(start.saturating_mul(2)).min(m / 2)))
    }
}

/// Reads each recorded CPU's statistics now, for the end of one file and
/// the start of the next.
pub type StatsReader = Box<dyn FnMut(StatsPhase) -> Vec<StatsRecord> + Send>;

/// Identifies one (kept) metadata block: a later one of the same key
/// replaces it (FORMAT.md §7.2).
type MetaKey = (u16, String, Option<(u32, u32)>, bool);

/// The rotation state of a capture being written.
struct Rotator {
    plan: RotationPlan,
    capture_id: u64,
    index: u32,
    arch: ArchTag,
    meta_compression: Compression,
    cpu_compression: Compression,
    /// The metadata and notes each file starts with, encoded, in order.
    kept: Vec<(MetaKey, Vec<u8>)>,
    /// Where each CPU's next block begins.
    next: BTreeMap<u32, CpuStart>,
    /// The finished files still on disk, oldest first, with their sizes.
    closed: VecDeque<(PathBuf, u64)>,
    begun: Instant,
    /// Bytes of the finished files, removed ones included.
    written_before: u64,
    /// CPU data blocks written to the file in progress.
    data_blocks: u64,
    stats: StatsReader,
    removed: Removed,
    /// Problems met removing files (said at the end).
    problems: Vec<String>,
}

/// The oldest files a rotated capture removed.
#[derive(Default)]
struct Removed {
    files: u64,
    bytes: u64,
    /// Of them, those removed before the budget asked, the disk (or
    /// quota) having no room for a write.
    for_room: u64,
}

/// The log being written.
pub struct Output {
    w: LogWriter<LogFile>,
    rot: Option<Rotator>,
    /// The sync thread's task ids go here (a new file starts one).
    tids: Arc<Mutex<Vec<i32>>>,
    /// `w` has its END: a rotation finished it and could not begin the
    /// next file.
    ended: bool,
}

/// Whether a write failed for want of room: the file system or the
/// user's quota is full.
fn out_of_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// A capture's id: different for every recording (hashed with the
/// process's random hash keys).
fn new_capture_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::metadata::wall_ns());
    h.write_u32(std::process::id());
    h.finish()
}

impl Output {
    /// Begins the log in `file`: a plain log, or the first file of a
    /// rotated capture.
    pub fn start(
        file: LogFile,
        arch: &ArchTag,
        meta_compression: Compression,
        cpu_compression: Compression,
        rotation: Option<(RotationPlan, StatsReader)>,
        tids: Arc<Mutex<Vec<i32>>>,
    ) -> io::Result<Output> {
        let Some((plan, stats)) = rotation else {
            let w = LogWriter::with_cpu_compression(file, arch, meta_compression, cpu_compression)?;
            return Ok(Output {
                w,
                rot: None,
                tids,
                ended: false,
            });
        };
        let capture_id = new_capture_id();
        let seg = SegmentRecord {
            capture_id,
            index: 0,
            wall_ns: Some(crate::metadata::wall_ns()),
            starts: Vec::new(),
        };
        let w = LogWriter::with_segment(file, arch, meta_compression, cpu_compression, &seg)?;
        let rot = Rotator {
            plan,
            capture_id,
            index: 0,
            arch: arch.clone(),
            meta_compression,
            cpu_compression,
            kept: Vec::new(),
            next: BTreeMap::new(),
            closed: VecDeque::new(),
            begun: Instant::now(),
            written_before: 0,
            data_blocks: 0,
            stats,
            removed: Removed::default(),
            problems: Vec::new(),
        };
        Ok(Output {
            w,
            rot: Some(rot),
            tids,
            ended: false,
        })
    }

    /// Bytes written so far, over every file.
    pub fn bytes_written(&self) -> u64 {
        self.rot.as_ref().map_or(0, |r| r.written_before) + self.w.bytes_written()
    }

    /// Writes a META block; a rotated capture keeps it for the next files.
    pub fn write_meta(&mut self, m: &Meta) -> io::Result<()> {
        self.with_room(|w| w.write_meta(m))?;
        if let Some(r) = &mut self.rot {
            // Task names are merged, not replaced: the first (from /proc
            // at the start) and the latest are kept.
            let merged = matches!(m.kind, MetaKind::SavedCmdlines | MetaKind::SavedTgids);
            let first = merged && !r.kept.iter().any(|(k, _)| k.0 == m.kind.to_u16());
            let key = (m.kind.to_u16(), m.name.clone(), m.part, first);
            r.keep(key, self.w.last_block());
        }
        Ok(())
    }

    /// Writes a NOTE block; one written before any CPU data is kept for
    /// the next files.
    pub fn write_note(&mut self, n: &NoteRecord) -> io::Result<()> {
        self.with_room(|w| w.write_note(n))?;
        if let Some(r) = self
            .rot
            .as_mut()
            .filter(|r| r.index == 0 && r.data_blocks == 0)
        {
            let key = (0, n.text.clone(), None, true);
            r.keep(key, self.w.last_block());
        }
        Ok(())
    }

    pub fn write_stats(&mut self, s: &StatsRecord) -> io::Result<()> {
        self.with_room(|w| w.write_stats(s))
    }

    /// Writes a CPU data block, after finishing the file and beginning the
    /// next where the block would take the file past its size, or the
    /// file is older than the period.
    pub fn write_encoded(&mut self, b: &EncodedBlock) -> io::Result<()> {
        if self.due(b.bytes.len() as u64) {
            self.rotate()?;
        }
        self.with_room(|w| w.write_encoded(b))?;
        if let Some(r) = &mut self.rot {
            r.data_blocks += 1;
            r.next.insert(
                b.cpu,
                CpuStart {
                    cpu: b.cpu,
                    block_seq: b.block_seq + 1,
                    first_subbuf: b.first_subbuf + b.subbufs,
                },
            );
        }
        Ok(())
    }

    /// Whether the file in progress is to be finished before a block of
    /// `len` bytes (never one without CPU data: it would only repeat).
    fn due(&self, len: u64) -> bool {
        let Some(r) = self.rot.as_ref().filter(|r| r.data_blocks > 0) else {
            return false;
        };
        let full = r
            .plan
            .file_limit(r.start_bytes())
            .is_some_and(|lim| self.w.bytes_written() + len + END_ROOM > lim);
        let old = r.plan.period.is_some_and(|p| r.begun.elapsed() >= p);
        full || old
    }

    /// Runs one write. Where it finds no room in a rotated capture, the
    /// file is cut back to its last whole block and the capture's oldest
    /// finished file removed, and the write tried again, while there is
    /// one to remove.
    fn with_room(
        &mut self,
        mut write: impl FnMut(&mut LogWriter<LogFile>) -> io::Result<()>,
    ) -> io::Result<()> {
        loop {
            let e = match write(&mut self.w) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let Some(r) = self
                .rot
                .as_mut()
                .filter(|r| out_of_room(&e) && !r.closed.is_empty())
            else {
                return Err(e);
            };
            let whole = self.w.bytes_written();
            if !self.w.get_mut().cut_back(whole)? {
                return Err(e);
            }
            r.remove_oldest(true);
        }
    }

    /// Finishes the file in progress (end statistics, END, synced), begins
    /// the next (SEGMENT, the kept metadata, start statistics), then
    /// removes the oldest files the budget has no room for.
    fn rotate(&mut self) -> io::Result<()> {
        let Some(r) = &mut self.rot else {
            return Ok(());
        };
        let snapshot = (r.stats)(StatsPhase::End);
        for s in &snapshot {
            self.write_stats(s)?;
        }
        let wall = Some(crate::metadata::wall_ns());
        self.with_room(|w| w.write_end(wall, END_ROTATED, None))?;
        self.ended = true;
        let Some(r) = &mut self.rot else {
            return Ok(());
        };
        let size = self.w.bytes_written();
        r.written_before += size;
        r.closed
            .push_back((file_path(&r.plan.output, r.index), size));
        let next = r.begin_next(&snapshot, &self.tids).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "could not begin file {} of the capture ({e}); it ends with file {}, whole",
                    r.index + 1,
                    r.index
                ),
            )
        })?;
        // The finished file's writer goes (its sync thread with it).
        self.w = next;
        self.ended = false;
        r.index += 1;
        r.begun = Instant::now();
        r.data_blocks = 0;
        let current = self.w.bytes_written();
        r.trim(current);
        Ok(())
    }

    /// After a write that failed (the writer stops): cuts the file back to
    /// its last whole block and ends it there (END, reason "output
    /// failed: ..."), so that all that was written reads as a whole log.
    /// Says how the log ends, and what rotation removed.
    pub fn end_after_failure(mut self, e: &io::Error) -> String {
        let mut said = self.removal_notes();
        let at = self.w.bytes_written();
        if self.ended {
            said.push("the files written are whole".into());
            return said.join("; ");
        }
        let ends = match self.w.get_mut().cut_back(at) {
            Ok(true) => {
                let wall = Some(crate::metadata::wall_ns());
                let reason = format!("{END_OUTPUT_FAILED}: {e}");
                match self.w.write_end(wall, &reason, None) {
                    Ok(()) => format!("the log ends whole, at byte {}", self.w.bytes_written()),
                    Err(_) => {
                        let _ = self.w.get_mut().cut_back(at);
                        format!("the log ends at its last whole block (byte {at}), without END")
                    }
                }
            }
            Ok(false) => format!("the log is cut after byte {at}"),
            Err(c) => format!("the log is cut short after byte {at} (cutting back: {c})"),
        };
        said.push(ends);
        said.join("; ")
    }

    /// What rotation removed, and the problems it met, to be said.
    fn removal_notes(&mut self) -> Vec<String> {
        let Some(r) = &mut self.rot else {
            return Vec::new();
        };
        let mut said = Vec::new();
        let n = &r.removed;
        if n.files > 0 {
            let early = match n.for_room {
                0 => String::new(),
                k => format!(", {k} of them early: the disk had no room"),
            };
            said.push(format!(
                "rotation removed the capture's {} oldest files ({} bytes) for the {}-byte budget{early}",
                n.files,
                n.bytes,
                r.plan.max_size.unwrap_or(0)
            ));
        }
        said.append(&mut r.problems);
        said
    }

    /// Writes the END block (and in a rotated capture says what rotation
    /// removed). Returns the notes the caller adds to its summary.
    pub fn finish(
        mut self,
        wall_ns: Option<u64>,
        reason: &str,
        exit_status: Option<i32>,
    ) -> io::Result<Vec<String>> {
        let said = self.removal_notes();
        let mut end = || -> io::Result<()> {
            for s in &said {
                let note = NoteRecord {
                    warning: false,
                    text: s.clone(),
                };
                self.with_room(|w| w.write_note(&note))?;
            }
            self.with_room(|w| w.write_end(wall_ns, reason, exit_status))
        };
        if let Err(e) = end() {
            // No block cut short at the end (the disk full at the last
            // moment): the log ends at its last whole block, without END.
            let whole = self.w.bytes_written();
            let _ = self.w.get_mut().cut_back(whole);
            return Err(e);
        }
        Ok(said)
    }
}

impl Rotator {
    /// The next file, begun: its SEGMENT, the kept metadata, the start
    /// statistics (the end ones of the file before, so that the
    /// kernel's counters add up over the files). Where the disk has no
    /// room for it, the oldest files are removed (never the one just
    /// finished) and it is tried again.
    fn begin_next(
        &mut self,
        snapshot: &[StatsRecord],
        tids: &Arc<Mutex<Vec<i32>>>,
    ) -> io::Result<LogWriter<LogFile>> {
        loop {
            match self.try_begin_next(snapshot, tids) {
                Err(e) if out_of_room(&e) && self.closed.len() > 1 => self.remove_oldest(true),
                begun => return begun,
            }
        }
    }

    fn try_begin_next(
        &self,
        snapshot: &[StatsRecord],
        tids: &Arc<Mutex<Vec<i32>>>,
    ) -> io::Result<LogWriter<LogFile>> {
        let index = self.index + 1;
        let path = file_path(&self.plan.output, index);
        let file = kmemtrace_cli::output::create(&path)
            .map_err(|e| io::Error::other(e.to_string()))?
            .file;
        // A file begun only in part (a full disk) is not left behind.
        self.write_start(file, index, snapshot, tids)
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&path);
            })
    }

    fn write_start(
        &self,
        file: std::fs::File,
        index: u32,
        snapshot: &[StatsRecord],
        tids: &Arc<Mutex<Vec<i32>>>,
    ) -> io::Result<LogWriter<LogFile>> {
        let seg = SegmentRecord {
            capture_id: self.capture_id,
            index,
            wall_ns: Some(crate::metadata::wall_ns()),
            starts: self.next.values().copied().collect(),
        };
        let mut w = LogWriter::with_segment(
            LogFile::new(file, tids.clone()),
            &self.arch,
            self.meta_compression,
            self.cpu_compression,
            &seg,
        )?;
        for (_, block) in &self.kept {
            w.write_block_bytes(block)?;
        }
        for s in snapshot {
            w.write_stats(&StatsRecord {
                phase: StatsPhase::Start,
                ..s.clone()
            })?;
        }
        w.write_arch_copy()?;
        Ok(w)
    }

    /// The bytes each file begins with: the kept metadata (the header,
    /// ARCH, SEGMENT and statistics are a few KiB more).
    fn start_bytes(&self) -> u64 {
        self.kept.iter().map(|(_, b)| b.len() as u64).sum()
    }

    fn keep(&mut self, key: MetaKey, block: &[u8]) {
        match self.kept.iter_mut().find(|(k, _)| *k == key) {
            Some((_, b)) => *b = block.to_vec(),
            None => self.kept.push((key, block.to_vec())),
        }
    }

    /// Removes the oldest finished files while they and a whole file more
    /// than `current` would take the capture past its budget.
    fn trim(&mut self, current: u64) {
        let limit = self.plan.file_limit(self.start_bytes());
        let (Some(budget), Some(file)) = (self.plan.max_size, limit) else {
            return;
        };
        let room_for = file.max(current);
        loop {
            let kept: u64 = self.closed.iter().map(|c| c.1).sum();
            if kept + room_for <= budget || self.closed.is_empty() {
                return;
            }
            self.remove_oldest(false);
        }
    }

    /// Removes the oldest finished file: for the budget, or because the
    /// disk had no room (`for_room`).
    fn remove_oldest(&mut self, for_room: bool) {
        let Some((path, size)) = self.closed.pop_front() else {
            return;
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {
                self.removed.files += 1;
                self.removed.bytes += size;
                self.removed.for_room += u64::from(for_room);
            }
            Err(e) => self
                .problems
                .push(format!("could not remove {}: {e}", path.display())),
        }
    }
}
