//! The analysis's one use of `unsafe`: asking the CPU to fetch a cache line
//! before it is read or written. The merge reads each CPU's decoded events
//! in order, but with many CPUs a few of one, then of the others, long after
//! the decoder wrote them, and the hardware prefetchers do not follow; the
//! object tracker's lookups land anywhere in a table bigger than the caches;
//! a decoder's first store to each line of its output waits for the line.
//! A hint for what comes a little later overlaps those misses with work.
//! A hint never faults and changes nothing but the cache.
#![allow(unsafe_code)]

/// Hints that `items[i]` will be used soon; nothing if `i` is past the end.
#[inline(always)]
pub fn prefetch<T>(items: &[T], i: usize) {
    if let Some(item) = items.get(i) {
        prefetch_ptr(item as *const T as *const u8);
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
#[inline(always)]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::{_mm_prefetch, _MM_HINT_T0};
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: PREFETCHT0 takes any address and never faults; `p` points
    // into a live slice besides.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
}

#[cfg(target_arch = "aarch64")]
#[inline(always)]
fn prefetch_ptr(p: *const u8) {
    // SAFETY: PRFM is a hint: it reads no register but its address, writes
    // nothing and never faults.
    unsafe {
        std::arch::asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) p,
            options(nostack, readonly, preserves_flags)
        )
    }
}

#[cfg(target_arch = "arm")]
#[inline(always)]
fn prefetch_ptr(p: *const u8) {
    // SAFETY: PLD (ARMv7) is a hint: it never faults and writes nothing.
    unsafe {
        std::arch::asm!(
            "pld [{0}]",
            in(reg) p,
            options(nostack, readonly, preserves_flags)
        )
    }
}

#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "aarch64",
    target_arch = "arm"
)))]
#[inline(always)]
fn prefetch_ptr(_p: *const u8) {}
