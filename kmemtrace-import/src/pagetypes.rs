//! A log's migratetype names and memory reserve: the recorder saves
//! `/proc/pagetypeinfo` and `vm.min_free_kbytes` as META `other` blocks
//! named [`PAGETYPEINFO_META`] and [`MIN_FREE_KBYTES_META`]; a log without
//! the first falls back to the kernel crate's table by version, and says so.

use crate::log::Log;
use kmemtrace_format::records::MetaKind;
use kmemtrace_kernel::pagetypes::{fallback, pageblock_order_in_print_fmt, parse, PageTypes};

/// The META `other` name of `/proc/pagetypeinfo`.
pub const PAGETYPEINFO_META: &str = "proc/pagetypeinfo";

/// The META `other` name of `/proc/sys/vm/min_free_kbytes`: the reserve
/// the fragmentation advice of events-kmem.rst raises.
pub const MIN_FREE_KBYTES_META: &str = "proc/sys/vm/min_free_kbytes";

/// The recorded kernel's `vm.min_free_kbytes`, if the log has it.
pub fn min_free_kbytes(log: &Log) -> Option<u64> {
    log.meta(MetaKind::Other, MIN_FREE_KBYTES_META)
        .and_then(|m| String::from_utf8_lossy(&m.content).trim().parse().ok())
}

/// The log's migratetype names.
pub fn of_log(log: &Log) -> PageTypes {
    let mut t = log
        .meta(MetaKind::Other, PAGETYPEINFO_META)
        .and_then(|m| parse(&String::from_utf8_lossy(&m.content)))
        .unwrap_or_else(|| fallback(log.arch.release.as_deref()));
    if t.pageblock_order.is_none() {
        t.pageblock_order = log
            .formats
            .iter()
            .find(|f| f.name == "mm_page_alloc_extfrag")
            .and_then(|f| pageblock_order_in_print_fmt(&f.print_fmt));
    }
    t
}
