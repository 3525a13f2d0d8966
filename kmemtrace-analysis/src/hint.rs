//! The analysis's one use of `unsafe`: asking the CPU to fetch a cache line
//! before it is read. The merge reads each CPU's decoded events in order,
//! but with many CPUs it reads a few events of one, then of the others, so
//! each line of a stream is read long after the decoder wrote it and the
//! hardware prefetchers do not follow; a hint a few events ahead hides the
//! miss. A hint never faults and changes nothing but the cache.
#![allow(unsafe_code)]

/// Hints that `items[i]` will be read soon; nothing if `i` is past the end.
#[inline(always)]
pub fn prefetch<T>(items: &[T], i: usize) {
    if let Some(item) = items.get(i) {
        prefetch_ptr(item as *const T as *const i8);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ptr(p: *const i8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: PREFETCHT0 takes any address and never faults; `p` points
    // into a live slice besides.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn prefetch_ptr(_p: *const i8) {}
