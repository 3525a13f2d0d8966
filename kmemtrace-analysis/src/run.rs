//! Runs the sharded stream and the passes over a log, combines the shards
//! and builds the [`Report`].

use crate::build::{build, Built, Found};
use crate::combine::{summarise, Combiner};
use crate::filter::Filter;
use crate::intern::SiteTable;
use crate::model::{Report, Severity, SortKey};
use crate::passes::objects::Objects;
use crate::passes::{leaks, PassSetup, Passes};
use crate::stream::timings::{Timings, STREAM};
use crate::stream::tracepoints::Tracepoints;
use crate::stream::{run, Progress, StreamSetup};
use crate::symbols::Symbols;
use kmemtrace_import::log::Log;

/// What to analyse and how to present it.
pub struct Options {
    pub filter: Filter,
    pub comm: Option<String>,
    /// The traced tasks of a pid-filtered recording, when they select.
    pub traced: Option<kmemtrace_import::tasks::TracedTasks>,
    pub per_pointer: bool,
    /// Freed pointers remembered per generation (double-free horizon).
    pub remember_frees: usize,
    pub min_age: u64,
    pub sort: Vec<SortKey>,
    /// Rows kept per table (`None`: all).
    pub lines: Option<usize>,
    /// Threads: decoders ([`decoders_for`]) and shards ([`shards_for`])
    /// (`None`: one per core, at most 16). The report is the same whatever
    /// the number.
    pub threads: Option<usize>,
    /// Keep page allocations by page frame (`--alloc` with `--page`).
    pub pages_by_pfn: bool,
    /// The page tables' sort keys.
    pub page_sort: Vec<crate::model::PageSortKey>,
    /// What live pages are grouped by.
    pub page_cull: Vec<crate::model::CullKey>,
    /// Whole stacks in the page tables.
    pub page_stacks: bool,
    /// Keep the series of [`crate::model::Timelines`] (for pictures).
    pub timelines: bool,
    /// Keep every stall episode ([`crate::model::Stalls::all`]: the
    /// exports' slices and rows, the HTML page's list). Without it only
    /// the longest are made, so that the model does not grow with the
    /// count of episodes.
    pub episodes: bool,
}

impl Default for Options {
    /// Everything selected, perf kmem's sort orders, live pages by stack.
    fn default() -> Self {
        use crate::model::{CullKey, PageSortKey, SortKey};
        Options {
            filter: Filter::default(),
            comm: None,
            traced: None,
            per_pointer: false,
            remember_frees: 32768,
            min_age: 0,
            sort: vec![SortKey::Frag, SortKey::Hit, SortKey::Bytes],
            lines: None,
            threads: None,
            pages_by_pfn: false,
            page_sort: vec![PageSortKey::Bytes, PageSortKey::Hit],
            page_cull: vec![CullKey::Stack],
            page_stacks: false,
            timelines: false,
            episodes: false,
        }
    }
}

impl Options {
    /// The options of `kmemtrace-report LOG` with no options
    /// ([`Options::select_as_recorded`]).
    pub fn as_recorded(log: &Log) -> Options {
        let mut opts = Options::default();
        opts.select_as_recorded(log, true);
        opts
    }

    /// What the log itself says to select: the recorder's own threads left
    /// out (META `kmemtraced/own_tids`: their events are not the
    /// workload's), and with `traced_tree`, a pid-filtered recording's
    /// traced tasks and their descendants (the kernel's pid filter lets
    /// neighbours' events through). `kmemtrace-report LOG` with no
    /// options, and `kmemtrace-diff` on a log, analyse this way.
    pub fn select_as_recorded(&mut self, log: &Log, traced_tree: bool) {
        use kmemtrace_import::tasks::traced_tasks;
        self.filter.leave_out_recorder(log);
        if traced_tree {
            if let Some(t) = traced_tasks(log) {
                self.filter.pids = Some(t.tree.iter().copied().collect());
                self.traced = Some(t);
            }
        }
    }
}

/// Shards for `threads` threads (`-j`): one for two threads or fewer
/// (each shard keeps its own tables); as many as threads beyond, because
/// each shard is a serial stage of the stream and the busiest one bounds
/// the run on many cores (`--timings` shows it), while more shards cost no
/// more CPU in all.
pub fn shards_for(threads: usize) -> usize {
    if threads <= 2 {
        1
    } else {
        threads
    }
}

/// Decoder threads for `threads` threads (`-j`), beside the shards: up to
/// two, one thread fewer, so that the shard and the decoders together are
/// as many threads as cores (the shard decodes blocks itself while it
/// waits, and alone decodes them all); beyond, as many as threads, the
/// decoding being the larger half of the work.
pub fn decoders_for(threads: usize) -> usize {
    if threads <= 2 {
        threads.saturating_sub(1)
    } else {
        threads
    }
}

/// The result of a run.
pub struct Outcome {
    pub report: Report,
    /// The worst severity among certain findings.
    pub worst: Option<Severity>,
    /// Where the time went: the stream and what came after it.
    pub timings: crate::stream::timings::Timings,
}

/// Analyses `log` as `kmemtrace-report LOG` does with no options (the
/// selection the log itself says: [`Options::select_as_recorded`]), with
/// `syms` (usually [`Symbols::of_log`]): what the diff and the exports
/// derive their figures from, so that they equal the report's.
pub fn analyse_as_recorded(log: &Log, syms: &Symbols) -> Report {
    analyse(log, syms, Options::as_recorded(log), &mut |_| {}).report
}

/// The most threads an analysis takes unless told: one per core up to
/// this many.
pub const MAX_DEFAULT_THREADS: usize = 16;

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
    let threads = opts.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, MAX_DEFAULT_THREADS)
    });
    let nshards = shards_for(threads);
    let tracepoints = Tracepoints::resolve(&log.formats, Passes::requests());
    let setup = StreamSetup {
        kmem: &kmem,
        filter,
        sites: &sites,
        tracepoints: &tracepoints,
        workers: decoders_for(threads),
        shards: nshards,
    };
    let namer = |addr: u64| syms.name(addr);
    let pass_setup = PassSetup {
        log,
        opts: &opts,
        page_size,
        sharded: nshards > 1,
    };
    let new_objects = || Objects::new(filter, opts.remember_frees, &sites, Box::new(namer));
    let make = |_shard: usize| Passes::new(&pass_setup, new_objects());
    let mut combiner = Combiner::default();
    std::thread::scope(|scope| {
        // Which kernel functions are the page allocator's (the report
        // lists them where page stacks were recorded): a walk over every
        // symbol, made beside the stream rather than in the serial phase
        // after it.
        let allocator_functions = scope.spawn(|| {
            syms.table
                .as_ref()
                .filter(|_| kmemtrace_import::stacks::page_stacks_recorded(log))
                .map(crate::page_callers::allocator_functions)
                .unwrap_or_default()
        });
        let started = std::time::Instant::now();
        let (shards, mut end) = run(
            log,
            &setup,
            make,
            summarise,
            &mut |s, a| combiner.fold(s, a),
            progress,
        );
        let stream_wall = started.elapsed();
        let finished = std::time::Instant::now();
        let mut timings = Timings {
            phases: vec![(STREAM, stream_wall)],
            threads: std::mem::take(&mut end.threads),
            events: end.events,
        };
        combiner.finish(&end.windows);

        // Add the shards up (each keeps its objects); the combiner has what
        // does not add. What is left of a shard is dropped on a thread of its
        // own while the model is built: its tables are megabytes, and this
        // phase is serial.
        let mut all = make(0);
        let mut live_pages = crate::passes::pages::LivePages::default();
        let mut spent = Vec::with_capacity(shards.len());
        let objects: Vec<Objects> = shards
            .into_iter()
            .map(|mut s| {
                all.absorb(&mut s);
                live_pages.add(&s.pages);
                let objects = std::mem::replace(&mut s.objects, new_objects());
                spent.push(s);
                objects
            })
            .collect();
        scope.spawn(move || drop(spent));
        if nshards > 1 {
            all.slab.set_peaks(&combiner.peaks);
        }
        all.slab.cut_gfp();
        all.slab.finish(
            objects
                .iter()
                .flat_map(|o| o.live_selected().map(|(_, o)| o)),
        );
        let addrs = sites.addrs_from(0);
        let addr = |id: u32| addrs.get(id as usize).copied().unwrap_or(0);
        let untraced = |o: &crate::passes::objects::Obj| leaks::freed_untraced(&all, o);
        let leaks = leaks::leaks(
            &objects,
            addr,
            untraced,
            &end.windows,
            all.last_ts,
            opts.min_age,
        );
        let found = Found {
            passes: &all,
            sites: &addrs,
            tracked: objects.iter().map(Objects::tracked).sum(),
            judge: &combiner.judge,
            live_pages: &live_pages,
            allocator_functions: allocator_functions
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
        };
        let Built { report, worst } = build(log, syms, &opts, &kmem, found, end, leaks);
        timings
            .phases
            .push(("build (shards added up)", finished.elapsed()));
        Outcome {
            report,
            worst,
            timings,
        }
    })
}
