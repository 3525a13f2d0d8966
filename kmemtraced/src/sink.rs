//! The writer thread: the only owner of the output. Readers send it CPU
//! data blocks they encoded themselves; the main thread sends metadata and
//! statistics. Each block reaches the file in one `write_all` on an
//! unbuffered descriptor, so a SIGKILL or power loss leaves only whole
//! blocks (plus at most one partial one, which readers skip).

use crate::status::Counters;
use kmemtrace_format::records::{Meta, NoteRecord, StatsRecord};
use kmemtrace_format::writer::{EncodedBlock, LogWriter};
use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The output file. Each block reaches it in one `write_all` (no user-space
/// buffering); a regular file is also synced to the disk at most once a
/// second, so a power loss costs at most the last second's blocks.
pub struct Output {
    file: File,
    sync: bool,
    last_sync: Instant,
}

/// How often a regular output file is synced.
const SYNC_INTERVAL: Duration = Duration::from_secs(1);

impl Output {
    pub fn new(file: File) -> Output {
        let sync = file.metadata().map(|m| m.is_file()).unwrap_or(false);
        Output {
            file,
            sync,
            last_sync: Instant::now(),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        if self.sync && self.last_sync.elapsed() >= SYNC_INTERVAL {
            self.file.sync_data()?;
            self.last_sync = Instant::now();
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.sync {
            self.file.sync_data()?;
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

/// Blocks queued between the readers and the writer, per CPU. Bounds the
/// memory held in flight to about this many blocks (≤ 1 MiB each) per CPU.
pub const QUEUE_BLOCKS_PER_CPU: usize = 4;

/// Starts the writer thread. It ends when every sender is gone, returning
/// the writer for the END block, or at the first write error (after which
/// senders see a closed channel). `on_exit` runs as it ends, either way.
/// The thread adds its task id to `tids` (to keep it out of the trace).
pub fn spawn(
    mut w: LogWriter<Output>,
    rx: Receiver<Msg>,
    counters: Arc<Counters>,
    tids: Arc<Mutex<Vec<i32>>>,
    on_exit: impl FnOnce() + Send + 'static,
) -> io::Result<JoinHandle<io::Result<LogWriter<Output>>>> {
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
            on_exit();
            res.map(|()| w)
        })
}
