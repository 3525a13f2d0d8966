//! Runs the stream and the passes over a log and builds the [`Report`].

use crate::build::{build, Built};
use crate::filter::Filter;
use crate::intern::SiteTable;
use crate::model::{Report, Severity, SortKey};
use crate::passes::objects::Objects;
use crate::passes::{cross_cpu, leaks, misuse, page, slab, Passes};
use crate::stream::{for_each_event, Progress, StreamSetup};
use crate::symbols::Symbols;
use kmemtrace_format::log::Log;

/// What to analyse and how to present it.
pub struct Options {
    pub filter: Filter,
    pub comm: Option<String>,
    /// The traced tasks of a pid-filtered recording, when they select.
    pub traced: Option<kmemtrace_format::tasks::TracedTasks>,
    pub per_pointer: bool,
    /// Freed pointers remembered per generation (double-free horizon).
    pub remember_frees: usize,
    pub min_age: u64,
    pub sort: Vec<SortKey>,
    /// Rows kept per table (`None`: all).
    pub lines: Option<usize>,
    /// Decoder threads (`None`: one per core, at most 16).
    pub threads: Option<usize>,
}

/// The result of a run.
pub struct Outcome {
    pub report: Report,
    /// The worst severity among certain findings.
    pub worst: Option<Severity>,
}

/// Analyses `log`; `progress` is called now and then while the stream runs.
pub fn analyse(
    log: &Log,
    syms: &Symbols,
    opts: Options,
    progress: &mut dyn FnMut(Progress),
) -> Outcome {
    let kmem = log.kmem_decoder();
    let sites = SiteTable::default();
    let page_size = u64::from(log.arch.page_size.unwrap_or(4096));
    let filter = &opts.filter;
    let mut passes = Passes {
        objects: Objects::new(
            filter,
            opts.remember_frees,
            &sites,
            Box::new(|addr| syms.name(addr)),
        ),
        slab: slab::SlabPass::new(&log.cpu_nodes, opts.per_pointer),
        misuse: misuse::MisusePass::default(),
        cross_cpu: cross_cpu::CrossCpuPass::default(),
        page: page::PagePass::new(filter, page_size),
        first_ts: None,
        last_ts: 0,
    };
    let workers = opts.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, 16)
    });
    let setup = StreamSetup {
        kmem: &kmem,
        filter,
        sites: &sites,
        workers,
    };
    let end = for_each_event(log, &setup, |ev, w| passes.event(ev, w), progress);
    passes.finish();
    let leaks = leaks::leaks(&passes.objects, &end.windows, passes.last_ts, opts.min_age);
    let Built { report, worst } = build(log, syms, &opts, &kmem, &passes, end, leaks);
    Outcome { report, worst }
}
