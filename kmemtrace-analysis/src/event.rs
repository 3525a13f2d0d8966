//! The compact, owned event that travels from the per-CPU decoders through
//! the merge to the passes: slab and page-allocator events alike, and the
//! events of other tracepoints a pass asked for.

/// What an event is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// `kmalloc`, `kmalloc_node`.
    Kmalloc,
    /// `kmem_cache_alloc`, `kmem_cache_alloc_node`.
    CacheAlloc,
    Kfree,
    CacheFree,
    /// `mm_page_alloc`.
    PageAlloc,
    /// `mm_page_free`.
    PageFree,
    /// `mm_page_free_batched`.
    PageFreeBatched,
    /// `mm_page_alloc_zone_locked`.
    PageAllocZoneLocked,
    /// `mm_page_pcpu_drain`.
    PagePcpuDrain,
    /// `mm_page_alloc_extfrag`.
    PageAllocExtfrag,
    /// Any other tracepoint a pass asked for ([`Tracepoint`]).
    Tracepoint,
}

impl Kind {
    #[inline]
    pub fn is_slab(self) -> bool {
        matches!(
            self,
            Kind::Kmalloc | Kind::CacheAlloc | Kind::Kfree | Kind::CacheFree
        )
    }
    #[inline]
    pub fn is_alloc(self) -> bool {
        matches!(self, Kind::Kmalloc | Kind::CacheAlloc)
    }
}

/// No NUMA node in the event (the format has no `node` field).
pub const NO_NODE: i32 = i32::MIN;
/// No cache name (the format has no `name` field).
pub const NO_CACHE: u32 = 0;
/// No page frame (`mm_page_alloc` that failed, or no `pfn` field).
pub const NO_PFN: u64 = u64::MAX;

/// The fields of a slab event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slab {
    pub ptr: u64,
    pub bytes_req: u64,
    pub bytes_alloc: u64,
    pub gfp: u64,
    /// Interned call site ([`crate::intern::SiteTable`]).
    pub site: u32,
    /// Interned cache name, [`NO_CACHE`] if none.
    pub cache: u32,
    /// Requested node (-1 any), [`NO_NODE`] if the format has none.
    pub node: i32,
}

/// The fields of a page-allocator event; which ones mean something
/// depends on the kind, as in `include/trace/events/kmem.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// [`NO_PFN`] if none.
    pub pfn: u64,
    pub gfp: u64,
    pub order: u32,
    /// -1 where the format has none.
    pub migratetype: i32,
    /// `mm_page_free_batched`, `mm_page_alloc_zone_locked`: `percpu_refill`
    /// (-1 if none).
    pub percpu_refill: i32,
    /// `mm_page_alloc_extfrag` only (its `alloc_order` is `order`).
    pub extfrag: Extfrag,
    /// `mm_page_alloc`: the kernel stack taken with it, interned
    /// ([`crate::intern::StackTable`]); [`crate::intern::NO_STACK`] if none.
    pub stack: u32,
}

/// `mm_page_alloc_extfrag`'s other fields: orders and migratetypes are
/// small (below 16), so a byte each; -1 where absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extfrag {
    pub fallback_order: i8,
    pub alloc_migratetype: i8,
    pub fallback_migratetype: i8,
    /// Kernels since 3.17; -1 before.
    pub change_ownership: i8,
}

impl Extfrag {
    pub const NONE: Extfrag = Extfrag {
        fallback_order: -1,
        alloc_migratetype: -1,
        fallback_migratetype: -1,
        change_ownership: -1,
    };
}

/// Fields a [`Tracepoint`] body carries at most.
pub const TP_FIELDS: usize = 5;

/// What places a requested tracepoint's events in a shard, so that a pass
/// sees every event it relates to in one shard and in time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ShardKey {
    /// The request's first field, a pointer (the slab events' shard).
    Pointer,
    /// The request's first field, a page frame (the page events' shard).
    Pfn,
    /// The task (`common_pid`): a task's begin and end events meet.
    Task,
    /// All in one shard.
    None,
}

/// An event of a tracepoint some pass asked for
/// ([`crate::stream::tracepoints::Request`]): the fields it asked for,
/// read through accessors resolved once for the event's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    /// Which request (index into the requests the stream was given).
    pub request: u16,
    pub shard: ShardKey,
    /// Bit `i`: `values[i]` was read (the format has the field).
    pub present: u8,
    /// The kernel stack taken with it, interned
    /// ([`crate::intern::StackTable`]); [`crate::intern::NO_STACK`] if none.
    pub stack: u32,
    /// The requested fields in the request's order, signed ones
    /// sign-extended; a string field's interned id (the stream's names,
    /// as cache names).
    pub values: [u64; TP_FIELDS],
}

impl Tracepoint {
    /// The request's field `i`, as an unsigned integer; `None` where the
    /// event's format lacks it.
    #[inline]
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < TP_FIELDS && self.present & (1 << i) != 0).then(|| self.values[i])
    }

    /// The request's field `i`, for a signed field.
    #[inline]
    pub fn get_i64(&self, i: usize) -> Option<i64> {
        self.get(i).map(|v| v as i64)
    }

    /// The key that places the event in a shard ([`ShardKey`]).
    #[inline]
    pub fn key(&self, pid: i32) -> u64 {
        match self.shard {
            ShardKey::Pointer => self.values[0],
            ShardKey::Pfn => pfn_key(self.values[0]),
            ShardKey::Task => pid as u32 as u64,
            ShardKey::None => 0,
        }
    }
}

/// The kind-specific half of an [`Event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    Slab(Slab),
    Page(Page),
    Tracepoint(Tracepoint),
}

/// One event, decoded and owned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// Trace clock, ns.
    pub ts: u64,
    pub pid: i32,
    pub cpu: u16,
    pub kind: Kind,
    /// Recorded in interrupt context: the work of whatever task `pid` was
    /// current, not the task's own.
    pub in_interrupt: bool,
    /// Position among the events its decoder kept from the block.
    pub pos: u32,
    /// How far the time stamp lies behind the latest one before it in the
    /// block (0 unless time went backwards): `ts + lag` orders the events.
    pub lag: u32,
    pub body: Body,
}

/// Buckets that pointers and page frames are hashed into. Fixed, whatever
/// the number of threads: a shard takes whole buckets, and state kept per
/// bucket (an object table and its double-free horizon) is the same for
/// every shard count.
pub const BUCKETS: usize = 64;

/// Page frames are placed by aligned groups of `1 << PFN_GROUP_SHIFT`
/// frames, so that a shard sees every event of a buddy block and of the
/// frames inside it (the page-misuse pass follows frames freed inside a
/// larger block): 13 is the largest `MAX_PAGE_ORDER` of the architectures'
/// configurations (arm64 with 64K pages).
pub const PFN_GROUP_SHIFT: u32 = 13;

/// The bucket of a pointer or page frame: the top bits of a multiplicative
/// hash (aligned pointers differ in their middle bits).
#[inline]
pub fn bucket(key: u64) -> usize {
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize
}

/// The key that places a page frame's events: its group.
#[inline]
pub fn pfn_key(pfn: u64) -> u64 {
    pfn >> PFN_GROUP_SHIFT
}

impl Event {
    /// The key that places the event in a shard: the pointer of a slab
    /// event, the group of the page frame of a page event.
    #[inline]
    pub fn key(&self) -> u64 {
        match &self.body {
            Body::Slab(s) => s.ptr,
            Body::Page(p) => pfn_key(p.pfn),
            Body::Tracepoint(t) => t.key(self.pid),
        }
    }

    /// The slab fields, for a slab event.
    #[inline]
    pub fn slab(&self) -> Option<&Slab> {
        match &self.body {
            Body::Slab(s) => Some(s),
            _ => None,
        }
    }
    /// The page fields, for a page-allocator event.
    #[inline]
    pub fn page(&self) -> Option<&Page> {
        match &self.body {
            Body::Page(p) => Some(p),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_is_compact() {
        assert!(
            std::mem::size_of::<Event>() <= 80,
            "{}",
            std::mem::size_of::<Event>()
        );
    }
}
