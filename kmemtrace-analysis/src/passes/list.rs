//! The passes, listed once. Everything that names every pass is generated
//! from this list: the [`super::Passes`] struct, its dispatch of each event,
//! the adding up of shards, the tracepoints asked for. A pass's place in the
//! list is the order it sees each event in.

/// Invokes `$m! { 'a; field: Type, ... }` with every pass: `field` is its
/// name in [`super::Passes`], `Type` implements [`super::Pass`]; `'a` is
/// the lifetime of what the passes borrow ([`super::PassSetup`]). Other
/// crates may generate their own per-pass code from it.
#[macro_export]
macro_rules! for_each_pass {
    ($m:ident) => {
        $m! {
            'a;
            slab: $crate::passes::slab::SlabPass,
            misuse: $crate::passes::misuse::MisusePass,
            cross_cpu: $crate::passes::cross_cpu::CrossCpuPass,
            untraced: $crate::passes::untraced::UntracedPass,
            pages: $crate::passes::pages::PagesPass<'a>,
        }
    };
}

/// Invokes `$m! { field: Type, ... }` with every section of
/// [`crate::model::Report`] a printer prints, in the report's order:
/// `field` is the report's field, `Type` its type (checked below). A
/// printer generates its per-section dispatch from it, so that a new
/// section is one printer function per output.
#[macro_export]
macro_rules! for_each_section {
    ($m:ident) => {
        $m! {
            callsites: Vec<$crate::model::CallsiteRow>,
            caches: Vec<$crate::model::CacheRow>,
            size_classes: Vec<$crate::model::CacheRow>,
            cross_cpu: $crate::model::CrossCpu,
            misuse: Vec<$crate::model::Finding>,
            trace_completeness: $crate::model::TraceCompleteness,
            leaks: $crate::model::Leaks,
            allocs: Option<Vec<$crate::model::AllocRow>>,
            page_allocator: $crate::model::PageStats,
            pages: $crate::model::PageReport,
        }
    };
}

/// Each listed section is a field of the report, of the listed type (an
/// error when the crate is compiled).
macro_rules! sections_are_fields {
    ($($field:ident: $ty:ty,)*) => {
        #[allow(dead_code)]
        fn sections_are_fields(r: &$crate::model::Report) {
            $(let _: &$ty = &r.$field;)*
        }
    };
}
for_each_section!(sections_are_fields);
