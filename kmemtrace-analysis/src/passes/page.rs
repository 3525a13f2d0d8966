//! Page-allocator counts over the ordered stream: allocations by order,
//! failures, frees (batched ones marked), zone-locked refills, per-CPU
//! list drains and fragmenting fallbacks.

use crate::event::{Event, Kind, Page, NO_PFN};
use crate::filter::Filter;
use crate::model::PageStats;

/// Orders of 10 and more share the last slot of `allocs_by_order`.
const ORDER_SLOTS: usize = 11;

pub struct PagePass<'a> {
    filter: &'a Filter,
    page_size: u64,
    pub stats: PageStats,
}

impl<'a> PagePass<'a> {
    pub fn new(filter: &'a Filter, page_size: u64) -> Self {
        PagePass {
            filter,
            page_size,
            stats: PageStats {
                allocs_by_order: vec![0; ORDER_SLOTS],
                ..Default::default()
            },
        }
    }

    /// Adds another shard's counts.
    pub fn absorb(&mut self, o: &PagePass<'_>) {
        let (p, q) = (&mut self.stats, &o.stats);
        p.allocs += q.allocs;
        p.alloc_bytes = p.alloc_bytes.saturating_add(q.alloc_bytes);
        p.failed += q.failed;
        p.frees += q.frees;
        p.free_bytes = p.free_bytes.saturating_add(q.free_bytes);
        p.batched_frees += q.batched_frees;
        p.zone_locked += q.zone_locked;
        p.pcpu_drains += q.pcpu_drains;
        p.extfrag += q.extfrag;
        for (a, b) in p.allocs_by_order.iter_mut().zip(&q.allocs_by_order) {
            *a += b;
        }
    }

    /// One page-allocator event, in time order.
    #[inline]
    pub fn page(&mut self, ev: &Event, pg: &Page) {
        if !self.filter.selects(ev) {
            return;
        }
        let p = &mut self.stats;
        let bytes = self.page_size << pg.order.min(40);
        match ev.kind {
            Kind::PageAlloc => {
                p.allocs += 1;
                if pg.pfn != NO_PFN {
                    p.alloc_bytes = p.alloc_bytes.saturating_add(bytes);
                    p.allocs_by_order[(pg.order as usize).min(ORDER_SLOTS - 1)] += 1;
                } else {
                    p.failed += 1;
                }
            }
            Kind::PageFree => {
                p.frees += 1;
                p.free_bytes = p.free_bytes.saturating_add(bytes);
            }
            // A marker, not another free: every page freed in a batch
            // passed free_pages_prepare() first, which emitted its
            // mm_page_free (so on every kernel since 2.6.34).
            Kind::PageFreeBatched => p.batched_frees += 1,
            Kind::PageAllocZoneLocked => p.zone_locked += 1,
            Kind::PagePcpuDrain => p.pcpu_drains += 1,
            Kind::PageAllocExtfrag => p.extfrag += 1,
            Kind::Kmalloc | Kind::CacheAlloc | Kind::Kfree | Kind::CacheFree => {}
        }
    }
}
