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

/// Invokes `$m! { field: Pass => Section, ... }` with every pass that
/// makes its own section of the model ([`super::MakesSection`]), in list
/// order: `field` is its name in [`super::Passes`] and in
/// [`crate::model::PassSections`] (the report's JSON key), `Section` the
/// type it makes. The model's [`crate::model::PassSections`], the building
/// of it, and the printers' dispatch over it are generated from this list.
#[macro_export]
macro_rules! for_each_pass_section {
    ($m:ident) => {
        $m! {
            cross_cpu: $crate::passes::cross_cpu::CrossCpuPass => $crate::model::CrossCpu,
        }
    };
}
