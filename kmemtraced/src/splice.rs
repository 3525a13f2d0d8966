//! Whole sub-buffers moved out of the ring buffer with splice(2) into a
//! pipe, and copied out of the pipe a batch at a time.
//!
//! Why not read(2) alone: a read of a full sub-buffer swaps the page out of
//! the ring and puts the reader's spare page in its place, and that spare
//! holds the sub-buffer read before. The kernel writes records over it
//! without clearing the bytes no field covers (alignment holes, the rest
//! of a string's last word), so many records carry stale bytes of other
//! events, which zstd can only store as literals.
//! splice(2) hands the page itself to the pipe and gives the ring a page
//! from `ring_buffer_alloc_read_page`: a zeroed new one, or the one page
//! the kernel keeps from the last it got back (`free_page`), which still
//! holds its old sub-buffer. So the pages stay in the pipe until a batch is
//! whole and are then released together: of those, the first is kept for
//! the next splice and the rest are freed, and the ring gets one stale page
//! per batch instead of one per sub-buffer (one splice and one copy per
//! sub-buffer made every new ring page a recycled one). trace-cmd splices
//! too, and its files have the holes zeroed.
//!
//! The kernel's rules (kernel/trace/trace.c `tracing_buffers_splice_read`,
//! fs/splice.c): only whole sub-buffers the writer has left are moved (a
//! half-read one once the writer has left it); a file may splice only as
//! many bytes as the pipe has free slots times the page size, and none of a
//! sub-buffer bigger than that (EINVAL), though each sub-buffer then takes
//! a single slot.

use crate::sys;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A pipe for the sub-buffers of one CPU.
pub struct SplicePipe {
    r: File,
    w: OwnedFd,
    /// Size of a sub-buffer.
    unit: usize,
    /// Slots of the pipe, and the slots free that splicing one sub-buffer
    /// needs (its size in pages; it then takes one).
    slots: usize,
    need: usize,
    /// Bytes spliced in and not yet taken out. Not whole sub-buffers only
    /// if the kernel moved part of one (it never has): then nothing more
    /// goes in until that is taken out, padded to a whole one.
    pending: usize,
}

/// What [`SplicePipe::fill`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Bytes moved in.
    Moved(usize),
    /// No whole sub-buffer is there.
    NoneWhole,
    /// The pipe holds all it can: take it out.
    Full,
    /// This time splice could not (no memory for a new ring page): read(2),
    /// which needs none, can.
    Failed,
    /// The kernel refuses splice on this file (or the CPU is gone).
    Refused,
}

impl SplicePipe {
    /// A pipe for `bytes` of `unit`-sized sub-buffers if the system allows
    /// (`/proc/sys/fs/pipe-max-size`), else what it has: a smaller pipe
    /// only means smaller rounds. Sized in bytes, not in slots, for the
    /// kernel's free-slots-times-page-size rule (module comment).
    pub fn new(bytes: usize, unit: usize) -> io::Result<SplicePipe> {
        let (r, w) = sys::pipe()?;
        let page = sys::page_size().unwrap_or(4096) as usize;
        let size = sys::set_pipe_size(w.as_fd(), bytes.max(16 * page)).unwrap_or(16 * page);
        Ok(SplicePipe {
            r: File::from(r),
            w,
            unit: unit.max(1),
            slots: size / page,
            need: unit.div_ceil(page).max(1),
            pending: 0,
        })
    }

    /// Bytes waiting in the pipe, in whole sub-buffers.
    pub fn pending(&self) -> usize {
        self.pending.div_ceil(self.unit) * self.unit
    }

    /// Splices whole sub-buffers of `from` (a `trace_pipe_raw`) into the
    /// pipe, up to `max` bytes and what the pipe takes, without blocking.
    pub fn fill(&mut self, from: BorrowedFd<'_>, max: usize) -> Fill {
        use nix::libc::{EAGAIN, EINTR, EINVAL, ENOMEM};
        if !self.pending.is_multiple_of(self.unit) {
            return Fill::Full;
        }
        let mut moved = 0;
        while moved < max {
            // A full pipe answers EAGAIN, as an empty ring does: so it is
            // never asked for more than it has room for.
            let free = self
                .slots
                .saturating_sub((self.pending + moved) / self.unit);
            if free < self.need {
                if moved > 0 {
                    break;
                }
                // Too small a pipe for even one sub-buffer: read(2).
                return if self.pending == 0 {
                    Fill::Refused
                } else {
                    Fill::Full
                };
            }
            let fits = (free - self.need + 1) * self.unit;
            match sys::splice_into_pipe(from, self.w.as_fd(), (max - moved).min(fits)) {
                Ok(0) => break,
                Ok(k) => {
                    moved += k;
                    if k % self.unit != 0 {
                        break;
                    }
                }
                Err(e) => {
                    let outcome = match e.raw_os_error() {
                        Some(EAGAIN | EINTR) => Fill::NoneWhole,
                        Some(EINVAL) if moved + self.pending > 0 => Fill::Full,
                        Some(ENOMEM) => Fill::Failed,
                        _ => Fill::Refused,
                    };
                    if moved == 0 {
                        return outcome;
                    }
                    break;
                }
            }
        }
        self.pending += moved;
        if moved == 0 {
            Fill::NoneWhole
        } else {
            Fill::Moved(moved)
        }
    }

    /// Copies all that waits in the pipe to the start of `out`, zero-padded
    /// to whole sub-buffers; returns the bytes written (`pending()`).
    pub fn take(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.pending;
        let whole = self.pending();
        if out.len() < whole {
            return Err(io::Error::other("no room for the spliced sub-buffers"));
        }
        self.r.read_exact(&mut out[..n])?;
        out[n..whole].fill(0);
        self.pending = 0;
        Ok(whole)
    }
}
