//! The writer thread: the only owner of the output. The per-CPU
//! compressors send it the CPU data blocks they encoded; the main thread
//! sends metadata and statistics. Each block reaches the file in one `write_all` on an
//! unbuffered descriptor, so a SIGKILL or power loss leaves only whole
//! blocks (plus at most one partial one, which readers skip).

use crate::rotate::Output;
use crate::status::Counters;
use kmemtrace_format::records::{Meta, NoteRecord, StatsRecord};
use kmemtrace_format::writer::EncodedBlock;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The output file. Each block reaches it in one `write_all` (no user-space
/// buffering). A regular file is also synced to the disk about once a
/// second, so a power loss costs at most the last seconds' blocks; the sync
/// runs in a thread of its own, because an fdatasync of a second's data can
/// take longer than the ring buffer can wait (docs/benchmarks.md, "Why the
/// defaults").
pub struct LogFile {
    file: File,
    regular: bool,
    syncer: Option<Syncer>,
}

/// How often a regular output file is synced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Syncs a file once a second until dropped.
struct Syncer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    fn start(file: File, tids: Arc<Mutex<Vec<i32>>>) -> io::Result<Syncer> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("kmt-sync".into())
            .spawn(move || {
                if let Ok(mut t) = tids.lock() {
                    t.push(crate::sys::gettid());
                }
                let (lock, cv) = &*s;
                let Ok(mut stopped) = lock.lock() else {
                    return;
                };
                loop {
                    let Ok((g, _)) = cv.wait_timeout(stopped, SYNC_INTERVAL) else {
                        return;
                    };
                    stopped = g;
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    // Errors show at the final sync, which the writer makes.
                    let _ = file.sync_data();
                    stopped = match lock.lock() {
                        Ok(g) => g,
                        Err(_) => return,
                    };
                }
            })?;
        Ok(Syncer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        if let Ok(mut g) = self.stop.0.lock() {
            *g = true;
        }
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl LogFile {
    /// The sync thread, if any, adds its task id to `tids` (to keep it out
    /// of the trace).
    pub fn new(file: File, tids: Arc<Mutex<Vec<i32>>>) -> LogFile {
        let regular = file.metadata().map(|m| m.is_file()).unwrap_or(false);
        // Without a second descriptor the file is synced at the end only.
        let syncer = regular
            .then(|| {
                file.try_clone()
                    .ok()
                    .and_then(|f| Syncer::start(f, tids).ok())
            })
            .flatten();
        LogFile {
            file,
            regular,
            syncer,
        }
    }
}

impl LogFile {
    /// Whether a thread of its own syncs the file.
    pub fn has_sync_thread(&self) -> bool {
        self.syncer.is_some()
    }

    /// Cuts a regular file back to its first `len` bytes (where its last
    /// whole block ends, after a write that failed part way) and writes on
    /// from there. Standard output cannot be cut back: false.
    pub fn cut_back(&mut self, len: u64) -> io::Result<bool> {
        if !self.regular {
            return Ok(false);
        }
        self.file.set_len(len)?;
        self.file.seek(SeekFrom::Start(len))?;
        Ok(true)
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.regular {
            // Not a full disk to make room for: the blocks are written
            // (a write is not tried again after it).
            self.file
                .sync_data()
                .map_err(|e| io::Error::other(format!("syncing: {e}")))?;
        }
        Ok(())
    }
}

/// What the writer is asked to write.
pub enum Msg {
    Cpu(EncodedBlock),
    Meta(Meta),
    Stats(StatsRecord),
    Note(NoteRecord),
}

pub type Sender = SyncSender<Msg>;

/// Blocks queued between the compressors and the writer, per CPU. Bounds
/// the encoded blocks held in flight to about this many (≤ 1 MiB each) per
/// CPU; raw batches waiting for a compressor add up to
/// `compressor::BATCHES_IN_FLIGHT` + 1 more (1 MiB each, made when a burst
/// needs them, kept until the end).
pub const QUEUE_BLOCKS_PER_CPU: usize = 4;

/// Starts the writer thread. It ends when every sender is gone, returning
/// the writer for the END block, or at the first write error (after which
/// senders see a closed channel), the log ended at its last whole block. `on_exit` runs as it ends, either way.
/// The thread adds its task id to `tids` (to keep it out of the trace).
pub fn spawn(
    mut w: Output,
    rx: Receiver<Msg>,
    counters: Arc<Counters>,
    tids: Arc<Mutex<Vec<i32>>>,
    on_exit: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<io::Result<Output>>> {
    std::thread::Builder::new()
        .name("kmt-writer".into())
        .spawn(move || {
            if let Ok(mut t) = tids.lock() {
                t.push(crate::sys::gettid());
            }
            let res = (|| {
                for msg in rx.iter() {
                    match msg {
                        Msg::Cpu(b) => w.write_encoded(&b)?,
                        Msg::Meta(m) => w.write_meta(&m)?,
                        Msg::Stats(s) => w.write_stats(&s)?,
                        Msg::Note(n) => w.write_note(&n)?,
                    }
                    counters.written.store(w.bytes_written(), Relaxed);
                }
                Ok(())
            })();
            let res = match res {
                Ok(()) => Ok(w),
                Err(e) => {
                    let how = w.end_after_failure(&e);
                    Err(io::Error::new(e.kind(), format!("{e}; {how}")))
                }
            };
            on_exit();
            res
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_synced_in_the_background_pipes_never() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("x.kmt")).unwrap();
        let tids = Arc::new(Mutex::new(Vec::new()));
        let mut o = LogFile::new(f, tids.clone());
        assert!(o.regular && o.has_sync_thread());
        o.write_all(b"block").unwrap();
        o.flush().unwrap();
        drop(o); // stops the sync thread without waiting a whole interval
        assert_eq!(tids.lock().unwrap().len(), 1, "the sync thread's task id");
        let (r, w) = crate::sys::pipe().unwrap();
        let o = LogFile::new(File::from(w), tids.clone());
        assert!(!o.regular && o.syncer.is_none());
        drop(r);
    }
}
