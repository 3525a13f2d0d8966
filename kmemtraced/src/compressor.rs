//! One compressor thread per CPU, behind that CPU's reader: the reader only
//! moves sub-buffers out of the kernel into batches and hands each full
//! batch over; the compressor encodes it (zstd or kpack, CRC) as the CPU's
//! next block, queues it for the writer and gives the batch's memory back.
//!
//! Why two threads: compressing a batch takes milliseconds, and a reader
//! that compresses cannot drain its CPU's buffer meanwhile. A process
//! exiting frees its memory in a burst of page and slab frees that can
//! fill a 1 MiB per-CPU buffer within milliseconds (stress-ng's exit is
//! one). Now the reader drains at the speed of splice and a copy, and up
//! to [`BATCHES_IN_FLIGHT`] batches wait in user memory while the
//! compressor catches up after the burst (docs/benchmarks.md, "Why the
//! defaults", has it beside the reader that compressed itself).
//!
//! Blocks of one CPU still reach the writer in order: one compressor per
//! CPU, fed in order over one channel.

use crate::cpu_reader::Shared;
use crate::sink::{Msg, Sender};
use crate::status::CpuCounters;
use crate::sys;
use kmemtrace_format::records::CPU_DATA_HEADER_LEN;
use kmemtrace_format::writer::{CpuBlockEncoder, EncodedBlock};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Full batches a reader may have handed over and not yet got back: with
/// the one it fills, at most this many plus one batch buffers per CPU
/// (1 MiB each, allocated only when a burst needs them).
pub const BATCHES_IN_FLIGHT: usize = 4;

/// A batch: room for the CPU_DATA header, then `filled` bytes of whole
/// sub-buffers.
pub struct Batch {
    pub buf: Vec<u8>,
    pub filled: usize,
}

/// The reader's end: hands full batches over and gets empty ones back.
pub struct BatchPool {
    full: SyncSender<Batch>,
    empty: Receiver<Vec<u8>>,
    /// Batch buffers made so far (bounded by `BATCHES_IN_FLIGHT` + 1).
    made: usize,
    batch_len: usize,
    compressor: Option<JoinHandle<Result<(), String>>>,
}

impl BatchPool {
    /// Starts CPU `cpu`'s compressor thread (named `kmt-zN`, its tid added
    /// to `tids` so the report can leave the recorder's own events out).
    /// `nice`: its nice value (`None`: the reader's, which it inherits).
    /// It raises `alarm` if it fails, so that the main thread stops the
    /// recording then rather than when its reader next hands it a batch.
    pub fn start(
        cpu: u32,
        encoder: CpuBlockEncoder,
        batch_len: usize,
        writer: Sender,
        counters: Arc<crate::status::Counters>,
        shared: &Shared,
        nice: Option<i32>,
    ) -> std::io::Result<BatchPool> {
        let tids = shared.tids.clone();
        let alarm = shared.alarm.clone();
        let (full, full_rx) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
        let (empty_tx, empty) = sync_channel::<Vec<u8>>(BATCHES_IN_FLIGHT + 1);
        let compressor = std::thread::Builder::new()
            .name(format!("kmt-z{cpu}"))
            .spawn(move || {
                if let Ok(mut t) = tids.lock() {
                    t.push(sys::gettid());
                }
                if let Some(n) = nice {
                    let _ = sys::set_thread_nice(n);
                }
                let res = match counters.cpu(cpu) {
                    Some(c) => compress_batches(encoder, &full_rx, &empty_tx, &writer, c),
                    None => Err(format!("no counters for CPU {cpu}")),
                };
                if res.is_err() {
                    alarm.raise();
                }
                res
            })?;
        Ok(BatchPool {
            full,
            empty,
            made: 0,
            batch_len,
            compressor: Some(compressor),
        })
    }

    /// An empty batch: one given back, a new one while fewer than the
    /// limit exist, else the next one given back (the reader waits:
    /// counted in `compressor_waits`).
    pub fn take_empty(&mut self, counters: &CpuCounters) -> Result<Vec<u8>, String> {
        match self.empty.try_recv() {
            Ok(b) => return Ok(b),
            Err(TryRecvError::Disconnected) => return Err(self.compressor_failure()),
            Err(TryRecvError::Empty) => {}
        }
        if self.made <= BATCHES_IN_FLIGHT {
            self.made += 1;
            return Ok(vec![0u8; CPU_DATA_HEADER_LEN + self.batch_len]);
        }
        counters.compressor_waits.fetch_add(1, Relaxed);
        self.empty.recv().map_err(|_| self.compressor_failure())
    }

    /// Hands a full batch to the compressor.
    pub fn hand_over(&mut self, batch: Batch) -> Result<(), String> {
        self.full.send(batch).map_err(|_| self.compressor_failure())
    }

    /// Lets the compressor finish the batches handed over and waits for it.
    pub fn finish(mut self) -> Result<(), String> {
        drop(self.full);
        match self.compressor.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the compressor thread panicked".into()),
            None => Ok(()),
        }
    }

    /// The compressor's own error, once it has stopped.
    fn compressor_failure(&mut self) -> String {
        match self.compressor.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            Some(Err(_)) => "the compressor thread panicked".into(),
            _ => "the compressor stopped".into(),
        }
    }
}

/// The compressor's loop: encode each batch, give its memory back, queue
/// the block for the writer.
fn compress_batches(
    mut encoder: CpuBlockEncoder,
    full: &Receiver<Batch>,
    empty: &SyncSender<Vec<u8>>,
    writer: &Sender,
    counters: &CpuCounters,
) -> Result<(), String> {
    for Batch { mut buf, filled } in full {
        let mut out = EncodedBlock::default();
        encoder
            .encode_in_place(&mut buf[..CPU_DATA_HEADER_LEN + filled], &mut out)
            .map_err(|e| format!("encoding a block: {e}"))?;
        // The reader may have finished and gone: then nobody needs it.
        let _ = empty.try_send(buf);
        match writer.try_send(Msg::Cpu(out)) {
            Ok(()) => {}
            Err(TrySendError::Full(m)) => {
                counters.backpressure.fetch_add(1, Relaxed);
                writer
                    .send(m)
                    .map_err(|_| "the writer stopped".to_string())?;
            }
            Err(TrySendError::Disconnected(_)) => return Err("the writer stopped".into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmemtrace_format::block::{decode_payload, BlockHeader, Compression, BLOCK_HEADER_LEN};
    use kmemtrace_format::records::CpuDataHeader;
    use std::sync::Mutex;

    fn shared() -> Shared {
        Shared {
            drain: Arc::new(crate::cpu_reader::Flag::new().unwrap()),
            alarm: Arc::new(crate::cpu_reader::Flag::new().unwrap()),
            tids: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Batches handed over come out as the CPU's blocks in order, numbered
    /// from 0, each holding its sub-buffers unchanged; the reader never
    /// holds more than the bounded number of batch buffers.
    #[test]
    fn blocks_come_out_in_order_and_buffers_are_reused() {
        const SB: usize = 4096;
        let counters = Arc::new(crate::status::Counters::new(&[3]));
        let (writer, blocks) = sync_channel(64);
        let encoder = CpuBlockEncoder::new(3, SB as u32, Compression::Zstd(1));
        let mut pool = BatchPool::start(
            3,
            encoder,
            2 * SB,
            writer,
            counters.clone(),
            &shared(),
            None,
        )
        .unwrap();
        let c = counters.cpu(3).unwrap();
        for k in 0..20u8 {
            let mut buf = pool.take_empty(c).unwrap();
            let n = 1 + usize::from(k % 2);
            buf[CPU_DATA_HEADER_LEN..CPU_DATA_HEADER_LEN + n * SB].fill(k);
            pool.hand_over(Batch {
                buf,
                filled: n * SB,
            })
            .unwrap();
            assert!(pool.made <= BATCHES_IN_FLIGHT + 1, "{} buffers", pool.made);
        }
        pool.finish().unwrap();
        let mut first_subbuf = 0;
        for k in 0..20u8 {
            let Ok(Msg::Cpu(b)) = blocks.try_recv() else {
                panic!("block {k} missing");
            };
            let hdr = BlockHeader::parse(b.bytes[..BLOCK_HEADER_LEN].try_into().unwrap()).unwrap();
            let payload = decode_payload(&hdr, &b.bytes[BLOCK_HEADER_LEN..]).unwrap();
            let h = CpuDataHeader::parse(&payload, payload.len() as u64, SB as u32).unwrap();
            let n = 1 + u64::from(k % 2);
            assert_eq!((h.cpu, h.block_seq, h.count), (3, u64::from(k), n as u32));
            assert_eq!(h.first_subbuf, first_subbuf);
            first_subbuf += n;
            assert!(payload[CPU_DATA_HEADER_LEN..].iter().all(|&x| x == k));
        }
        assert!(blocks.try_recv().is_err(), "no more blocks");
    }

    /// A compressor that cannot hand blocks on (the writer is gone) stops
    /// the reader with the compressor's own reason, and raises the alarm.
    #[test]
    fn a_stopped_writer_reaches_the_reader() {
        let counters = Arc::new(crate::status::Counters::new(&[0]));
        let (writer, blocks) = sync_channel(1);
        drop(blocks);
        let encoder = CpuBlockEncoder::new(0, 4096, Compression::None);
        let shared = shared();
        let mut pool =
            BatchPool::start(0, encoder, 4096, writer, counters.clone(), &shared, None).unwrap();
        let c = counters.cpu(0).unwrap();
        let err = (0..10)
            .find_map(|_| match pool.take_empty(c) {
                Ok(buf) => pool.hand_over(Batch { buf, filled: 4096 }).err(),
                Err(e) => Some(e),
            })
            .or_else(|| pool.finish().err());
        assert_eq!(err.as_deref(), Some("the writer stopped"));
        assert!(shared.alarm.is_raised());
    }
}
