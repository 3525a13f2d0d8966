//! Page call sites from kernel stacks.
//!
//! `mm_page_alloc` carries no call site: the recorder has the kernel take a
//! stack with it ([`kmemtrace_import::stacks`]). Its innermost frames are
//! the tracing machinery (`trace_event_raw_event_mm_page_alloc`) and the
//! page allocator's own functions; the **call site** is the first frame
//! after them, as perf kmem takes it.
//!
//! perf's rule for the allocator (`^_?_?(alloc|get_free|get_zeroed)_pages?`)
//! misses the entry points of current kernels. The rule here, applied to a
//! symbol's name after taking off the compiler's suffixes (`.constprop.0`,
//! `.isra.0`, `.part.0`, `.cold`) and the allocation-profiling wrapper's
//! `_noprof` (6.10+), and then any leading underscores:
//!
//! - names starting with `alloc_page` (`alloc_pages`, `alloc_pages_mpol`,
//!   `alloc_pages_bulk`, `alloc_pages_exact`, `__alloc_pages_slowpath`,
//!   `alloc_page_interleave`), `alloc_frozen_page`
//!   (`__alloc_frozen_pages_noprof`, 6.14+), `get_free_page`,
//!   `get_zeroed_page`, `folio_alloc` (`__folio_alloc`, `folio_alloc_mpol`)
//!   and `vma_alloc_folio`;
//! - the allocator's internals, which appear where the kernel traced from
//!   deeper (`get_page_from_freelist`, `rmqueue*`, `prep_new_page`,
//!   `post_alloc_hook`).
//!
//! Which functions of the recorded kernel the rule matches is listed in the
//! report ([`allocator_functions`]), from the log's kallsyms.

use kmemtrace_kernel::Kallsyms;

/// Prefixes of the page allocator's entry points (see the module text).
const ENTRY_PREFIXES: [&str; 7] = [
    "alloc_page",
    "alloc_frozen_page",
    "get_free_page",
    "get_zeroed_page",
    "folio_alloc",
    "vma_alloc_folio",
    "alloc_pages",
];

/// The allocator's internals, by name.
const INTERNALS: [&str; 6] = [
    "get_page_from_freelist",
    "rmqueue",
    "rmqueue_bulk",
    "rmqueue_pcplist",
    "prep_new_page",
    "post_alloc_hook",
];

/// Prefixes of the tracing machinery's functions, innermost in a stack
/// taken by an event trigger.
const TRACING_PREFIXES: [&str; 8] = [
    "trace_event_raw_event_",
    "perf_trace_",
    "trace_event_buffer_",
    "event_trigger",
    "__traceiter_",
    "__trace_stack",
    "stacktrace_",
    "trace_buffer_unlock_commit",
];

/// `name` without compiler suffixes and `_noprof`.
pub fn base_name(name: &str) -> &str {
    // A byte loop, not `split('.')`: the report asks this of every text
    // symbol of the kernel (`allocator_functions`), and a char searcher's
    // set-up cost more than the short names.
    let end = name.bytes().position(|b| b == b'.').unwrap_or(name.len());
    let n = &name[..end];
    n.strip_suffix("_noprof").unwrap_or(n)
}

/// Whether `name` is one of the page allocator's own functions.
pub fn is_allocator(name: &str) -> bool {
    let b = base_name(name).trim_start_matches('_');
    ENTRY_PREFIXES.iter().any(|p| b.starts_with(p)) || INTERNALS.contains(&b)
}

/// Whether `name` belongs to the tracing machinery.
pub fn is_tracing(name: &str) -> bool {
    TRACING_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The index of the call site in `frames` (innermost first): the first
/// frame after the leading tracing and allocator frames; `None` if every
/// frame is one of those or none resolves. Frames that do not resolve
/// (no kallsyms) end the search there: the first of them is the site.
pub fn call_site_index(frames: &[u64], syms: Option<&Kallsyms>) -> Option<usize> {
    let Some(k) = syms else {
        return (!frames.is_empty()).then_some(0);
    };
    frames.iter().position(|&a| match k.resolve(a) {
        Some(s) => !(is_tracing(s.name) || is_allocator(s.name)),
        None => true,
    })
}

/// The text symbols of the recorded kernel the allocator rule matches,
/// sorted and without duplicates.
pub fn allocator_functions(k: &Kallsyms) -> Vec<String> {
    let mut v: Vec<String> = k
        .text_names()
        .filter(|n| is_allocator(n))
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule() {
        for n in [
            "__alloc_frozen_pages_noprof",
            "alloc_pages_mpol",
            "alloc_pages_noprof",
            "__alloc_pages",
            "__alloc_pages_nodemask",
            "__alloc_pages_slowpath.constprop.0",
            "__get_free_pages",
            "get_zeroed_page_noprof",
            "__folio_alloc_noprof",
            "folio_alloc_mpol_noprof",
            "vma_alloc_folio_noprof",
            "alloc_pages_bulk_noprof",
            "alloc_pages_exact_noprof",
            "get_page_from_freelist",
            "rmqueue_bulk",
        ] {
            assert!(is_allocator(n), "{n}");
        }
        for n in [
            "pgd_alloc",
            "__pud_alloc",
            "allocate_slab",
            "alloc_slab_page",
            "filemap_alloc_folio_noprof",
            "alloc_anon_folio",
            "copy_process",
            "__kmalloc_large_node_noprof",
        ] {
            assert!(!is_allocator(n), "{n}");
        }
        assert!(is_tracing("trace_event_raw_event_mm_page_alloc"));
        assert!(!is_tracing("copy_process"));
        assert_eq!(base_name("foo_noprof.isra.0"), "foo");
    }

    #[test]
    fn call_site_of_a_stack() {
        let text = "ffffffff81000000 T trace_event_raw_event_mm_page_alloc\n\
                    ffffffff81000100 T __alloc_frozen_pages_noprof\n\
                    ffffffff81000200 T alloc_pages_mpol\n\
                    ffffffff81000300 T alloc_pages_noprof\n\
                    ffffffff81000400 T pgd_alloc\n\
                    ffffffff81000500 T mm_init\n\
                    ffffffff81000600 T zzz_end\n";
        let k = Kallsyms::parse(text).unwrap();
        let frames = [
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0110,
            0xffff_ffff_8100_0210,
            0xffff_ffff_8100_0310,
            0xffff_ffff_8100_0410,
            0xffff_ffff_8100_0510,
        ];
        assert_eq!(call_site_index(&frames, Some(&k)), Some(4));
        assert_eq!(call_site_index(&frames[..4], Some(&k)), None);
        assert_eq!(call_site_index(&frames, None), Some(0));
        assert_eq!(
            allocator_functions(&k),
            [
                "__alloc_frozen_pages_noprof",
                "alloc_pages_mpol",
                "alloc_pages_noprof"
            ]
        );
    }
}
