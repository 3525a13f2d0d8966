//! A log written as Parquet files for DuckDB, Spark and the like, into a
//! directory of its own (one capture; a dataset is many such directories,
//! e.g. `dataset/<name>/`; columns and types: `kmemtrace-export/PARQUET.md`):
//!
//! - `slab_events.parquet`: every kmalloc/kfree/kmem_cache_* event;
//! - `page_events.parquet`: page allocations and frees (`mm_page_alloc`,
//!   `mm_page_free`, `mm_page_free_batched`, `mm_page_alloc_extfrag`),
//!   allocations with the call site and the stack taken with them;
//! - `pcp_events.parquet`: the per-CPU lists' refills and drains
//!   (`mm_page_alloc_zone_locked`, `mm_page_pcpu_drain`);
//! - `callsites.parquet`: `kmemtrace-report`'s call-site table;
//! - `figures.parquet`: the figures `kmemtrace-diff` compares, for fleet
//!   comparisons by query (the `figures` module);
//! - `episodes.parquet`: its allocation stall episodes, where the log has
//!   them (the `episodes` module);
//! - `manifest.json`: which capture (kernel, machine, host, start).
//!
//! Types both engines read: time stamps as INT64 nanoseconds of the trace
//! clock, addresses as INT64 (the 64-bit pattern: `call_site & 0xffff...`
//! gives it back), counts as INT64, names as UTF-8 strings; no unsigned
//! 64-bit columns. Every row has the capture's name, so that many captures
//! can be read as one table. `by_recorder` marks the events of kmemtraced's
//! own threads (not the interrupt work run while one was current), which
//! the report leaves out.
//!
//! Rows come CPU by CPU, each CPU's in the order its ring buffer holds
//! them (by time): `order by ts_ns, cpu` gives the trace's order across
//! CPUs. The log is read in runs of one CPU's chunks on every core at
//! once, row groups of up to [`ROW_GROUP`] rows (128 Ki rows, about 12 MB
//! of gathered slab rows) per run, so a run's last row group of a table is
//! smaller. Each core holds one row group per table: the rows in memory are
//! bounded by that, not by the log's length (what grows with it is the
//! files' metadata, a few hundred bytes per column chunk). The files are the
//! same whatever the number of cores.

mod bits;
mod chunk;
mod episodes;
mod events;
mod figures;
mod stacks;
mod table;
mod writer;

use kmemtrace_analysis::model::CallsiteRow;
use kmemtrace_analysis::{SourceFrame, Symbols};
use kmemtrace_import::log::Log;
use kmemtrace_import::walk::chunk_runs;
use std::io;
use std::path::Path;
pub use table::ROW_GROUP;
use table::{Enc, Field, TableSpec, Ty, V};
use writer::{write_tables, Rows};

/// Rows written per file.
#[derive(Debug, Default)]
pub struct Written {
    pub slab_events: u64,
    pub page_events: u64,
    pub pcp_events: u64,
    pub callsites: u64,
    /// The figures `kmemtrace-diff` compares (`figures.parquet`).
    pub figures: u64,
    /// Allocation stall episodes; `None`: the log has none, and no file.
    pub episodes: Option<u64>,
}

const fn f(name: &'static str, ty: Ty, optional: bool, enc: Enc) -> Field {
    Field {
        name,
        ty,
        optional,
        enc,
    }
}

/// The columns every event table starts with (`events::Common`).
const EVENT_FIELDS: &[Field] = &[
    f("capture", Ty::Str, false, Enc::Few),
    f("ts_ns", Ty::I64, false, Enc::Ascending),
    f("cpu", Ty::I32, false, Enc::Few),
    f("pid", Ty::I32, false, Enc::Few),
    f("comm", Ty::Str, true, Enc::Few),
    f("by_recorder", Ty::Bool, false, Enc::Few),
    f("in_interrupt", Ty::Bool, false, Enc::Few),
    f("event", Ty::Str, false, Enc::Few),
];

const SLAB_FIELDS: &[Field] = &[
    f("call_site", Ty::I64, false, Enc::Few),
    f("call_site_sym", Ty::Str, false, Enc::Few),
    f("ptr", Ty::I64, false, Enc::Many),
    f("bytes_req", Ty::I64, true, Enc::Few),
    f("bytes_alloc", Ty::I64, true, Enc::Few),
    f("gfp_flags", Ty::I64, true, Enc::Few),
    f("node", Ty::I32, true, Enc::Few),
    f("cache", Ty::Str, true, Enc::Few),
];

/// Page events' own columns (the per-CPU lists' events have them too).
const PAGE_FIELDS: &[Field] = &[
    f("pfn", Ty::I64, true, Enc::Many),
    f("order", Ty::I32, false, Enc::Few),
    f("migratetype", Ty::I32, true, Enc::Few),
    f("gfp_flags", Ty::I64, true, Enc::Few),
];

/// mm_page_alloc's call site, from the stack taken with it
/// (`--page-stacks`, on by default): the first frame outside the
/// allocator, as the report's page call sites; the stack from the
/// outermost frame down to the call site, function names `;`-separated
/// (`select stack, sum(stands_for) ... group by 1` is flamegraph.pl's
/// input); and the allocations the row stands for in the report's
/// call-site table (stacks taken for a sample of page frames: the sample's
/// weight, 0 outside the sample; else 1).
const PAGE_SITE_FIELDS: &[Field] = &[
    f("call_site", Ty::I64, true, Enc::Few),
    f("call_site_sym", Ty::Str, true, Enc::Few),
    f("stack", Ty::Str, true, Enc::Few),
    f("stands_for", Ty::I64, true, Enc::Few),
];

const CALLSITE_FIELDS: &[Field] = &[
    f("capture", Ty::Str, false, Enc::Few),
    f("callsite", Ty::Str, false, Enc::Few),
    f("addr", Ty::I64, false, Enc::Few),
    f("hits", Ty::I64, false, Enc::Few),
    f("failed", Ty::I64, false, Enc::Few),
    f("bytes_req", Ty::I64, false, Enc::Few),
    f("bytes_alloc", Ty::I64, false, Enc::Few),
    f("frees", Ty::I64, false, Enc::Few),
    f("cross_cpu_frees", Ty::I64, false, Enc::Few),
    f("free_calls", Ty::I64, false, Enc::Few),
    f("live_objects", Ty::I64, false, Enc::Few),
    f("live_bytes", Ty::I64, false, Enc::Few),
    f("peak_live_bytes", Ty::I64, false, Enc::Few),
    f("cache", Ty::Str, true, Enc::Few),
    f("source_function", Ty::Str, true, Enc::Few),
    f("source_file", Ty::Str, true, Enc::Few),
    f("source_line", Ty::I32, true, Enc::Few),
    f("source_chain", Ty::Str, true, Enc::Few),
];

/// The event tables, in `Rows::push`'s numbering.
const EVENT_TABLES: &[TableSpec] = &[
    TableSpec {
        file: "slab_events.parquet",
        name: "slab_events",
        fields: &[EVENT_FIELDS, SLAB_FIELDS],
    },
    TableSpec {
        file: "page_events.parquet",
        name: "page_events",
        fields: &[EVENT_FIELDS, PAGE_FIELDS, PAGE_SITE_FIELDS],
    },
    TableSpec {
        file: "pcp_events.parquet",
        name: "pcp_events",
        fields: &[EVENT_FIELDS, PAGE_FIELDS],
    },
];
const SLAB: usize = 0;
const PAGE: usize = 1;
const PCP: usize = 2;

const CALLSITES: TableSpec = TableSpec {
    file: "callsites.parquet",
    name: "callsites",
    fields: &[CALLSITE_FIELDS],
};

/// How to write.
#[derive(Default)]
pub struct Options<'a> {
    /// Threads (`None`: one per core).
    pub threads: Option<usize>,
    /// Sub-buffer bytes per work item, a run of one CPU's chunks (at
    /// least; a chunk is not cut). `None`: [`run_bytes`].
    pub run_bytes: Option<u64>,
    /// The kernel's debug info (`--vmlinux`): the call sites' source lines.
    pub debug: Option<&'a kmemtrace_analysis::DebugInfo>,
}

/// Runs of 8 MiB of sub-buffers (about 150 K events, so that runs fill
/// whole row groups), or larger so that a log makes about 64 runs at most:
/// enough for many cores to share, and each table's small last row group of
/// a run stays one of few. It depends on the log alone, so the files do
/// not depend on the number of threads.
pub fn run_bytes(log: &Log) -> u64 {
    let subbuf = log.layout.subbuf_size as u64;
    let total: u64 = log
        .blocks
        .iter()
        .map(|c| u64::from(c.count) * subbuf)
        .fold(0, u64::saturating_add);
    (8 << 20).max(total / 64)
}

/// The schema the manifest names (PARQUET.md).
pub const SCHEMA: &str = "kmemtrace-parquet/2";

/// Writes `log` into the directory `dir` (created if missing) as capture
/// `capture`.
pub fn write(mut log: Log, capture: &str, dir: &Path, opts: &Options<'_>) -> io::Result<Written> {
    crate::private_dir(dir)?;
    // Call sites named as the report names them.
    let syms = Symbols::of_log(&mut log);
    let (log, syms) = (&log, &syms);
    let threads = opts
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (events, report) = std::thread::scope(|s| {
        // The report's call-site table and stall episodes, worked out
        // meanwhile.
        let analysis = std::thread::Builder::new()
            .name("analysis".into())
            .spawn_scoped(s, || {
                let opts = kmemtrace_analysis::Options {
                    episodes: true,
                    ..kmemtrace_analysis::Options::as_recorded(log)
                };
                kmemtrace_analysis::analyse(log, syms, opts, &mut |_| {}).report
            })?;
        let runs = chunk_runs(log, opts.run_bytes.unwrap_or_else(|| run_bytes(log)));
        let names = events::Names::new(log, syms, capture);
        let events = write_tables(dir, EVENT_TABLES, runs.len(), threads, |i, rows| {
            events::write_run(rows, &runs[i], &names)
        });
        let report = analysis
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Ok::<_, io::Error>((events, report))
    })?;
    let events = events?;
    // Each row's chain, worked out here: the debug info stays on this
    // thread.
    let frames: Vec<Vec<SourceFrame>> = report
        .callsites
        .iter()
        .map(|c| match opts.debug {
            Some(d) if c.addr.0 != 0 => d.frames_of_return_address(c.addr.0),
            _ => Vec::new(),
        })
        .collect();
    let sites = write_tables(dir, &[CALLSITES], 1, 1, |_, rows| {
        report
            .callsites
            .iter()
            .zip(&frames)
            .try_for_each(|(c, f)| callsite_row(rows, capture, c, f))
    })?;
    let all = &report.sections.stalls.all;
    let episodes = if all.is_empty() {
        None
    } else {
        let n = write_tables(dir, &[episodes::EPISODES], 1, 1, |_, rows| {
            all.iter().try_for_each(|e| episodes::row(rows, capture, e))
        })?;
        Some(n[0])
    };
    let compared = kmemtrace_diff::load::of_log_report(
        capture.to_string(),
        &report,
        log.incomplete().as_ref(),
    );
    let figures = write_tables(dir, &[figures::FIGURES], 1, 1, |_, rows| {
        figures::rows(rows, &compared)
    })?;
    let w = Written {
        slab_events: events[SLAB],
        page_events: events[PAGE],
        pcp_events: events[PCP],
        callsites: sites[0],
        figures: figures[0],
        episodes,
    };
    let mut m = crate::private_file(&dir.join(MANIFEST))?;
    std::io::Write::write_all(&mut m, manifest(log, capture, &w).as_bytes())?;
    Ok(w)
}

fn callsite_row(
    rows: &mut Rows<'_>,
    capture: &str,
    c: &CallsiteRow,
    frames: &[SourceFrame],
) -> io::Result<()> {
    let n = |v: u64| V::I64(v as i64);
    let inner = frames.first();
    let chain =
        (!frames.is_empty()).then(|| kmemtrace_analysis::debuginfo::chain_lines(frames).join("; "));
    let row = [
        V::Str(capture),
        V::Str(&c.callsite),
        V::I64(c.addr.0 as i64),
        n(c.hits),
        n(c.failed),
        n(c.bytes_req),
        n(c.bytes_alloc),
        n(c.frees),
        n(c.cross_cpu_frees),
        n(c.free_calls),
        n(c.live_objects),
        n(c.live_bytes),
        n(c.peak_live_bytes),
        c.cache.as_deref().map_or(V::Null, V::Str),
        inner
            .and_then(|f| f.function.as_deref())
            .map_or(V::Null, V::Str),
        inner
            .and_then(|f| f.file.as_deref())
            .map_or(V::Null, V::Str),
        inner
            .and_then(|f| f.line)
            .map_or(V::Null, |l| V::I32(l.min(i32::MAX as u32) as i32)),
        chain.as_deref().map_or(V::Null, V::Str),
    ];
    rows.push(0, &[&row])
}

/// The dataset's manifest file, which also tells an earlier dataset (that
/// an export may replace) from another directory.
pub const MANIFEST: &str = "manifest.json";

/// `manifest.json`: the capture and its files.
fn manifest(log: &Log, capture: &str, w: &Written) -> String {
    let a = &log.arch;
    let mut doc = serde_json::json!({
        "schema": SCHEMA,
        "capture": capture,
        "log": log.name,
        "kernel": {
            "sysname": a.sysname,
            "release": a.release,
            "version": a.version,
            "machine": a.machine,
        },
        "hostname": a.hostname,
        "trace_clock": a.trace_clock,
        "start_wall_ns": a.start_wall_ns,
        "start_trace_ns": a.start_trace_ns,
        "files": {
            "slab_events.parquet": w.slab_events,
            "page_events.parquet": w.page_events,
            "pcp_events.parquet": w.pcp_events,
            "callsites.parquet": w.callsites,
            "figures.parquet": w.figures,
        },
    });
    // Only where written: a dataset without stalls stays as it was.
    if let Some(n) = w.episodes {
        doc["files"][episodes::EPISODES.file] = n.into();
    }
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod doc_tests {
    use super::*;

    /// PARQUET.md's section whose heading starts with `title`: its rows.
    fn section<'a>(doc: &'a str, title: &str) -> &'a str {
        let start = doc
            .find(&format!("## {title}"))
            .unwrap_or_else(|| panic!("PARQUET.md has no section {title}"));
        let rest = &doc[start + 3..];
        &rest[..rest.find("\n## ").unwrap_or(rest.len())]
    }

    fn documents(rows: &str, fields: &[&Field], table: &str) {
        for f in fields {
            let ty = match f.ty {
                Ty::I64 => "INT64",
                Ty::I32 => "INT32",
                Ty::F64 => "DOUBLE",
                Ty::Bool => "BOOLEAN",
                Ty::Str => "STRING",
            };
            let null = if f.optional { "yes" } else { "no" };
            let row = format!("| `{}` | {ty} | {null} |", f.name);
            assert!(rows.contains(&row), "{table}: PARQUET.md lacks {row}");
        }
        let listed = rows.lines().filter(|l| l.starts_with("| `")).count();
        assert_eq!(
            listed,
            fields.len(),
            "{table}: columns listed in PARQUET.md"
        );
    }

    /// The document users read lists every column the files have, with
    /// its type and whether it may be null, and no other.
    #[test]
    fn parquet_md_lists_every_column() {
        let doc = include_str!("../../PARQUET.md");
        let all = |f: &'static [Field]| f.iter().collect::<Vec<_>>();
        documents(
            section(doc, "Every event table"),
            &all(EVENT_FIELDS),
            "events",
        );
        for t in EVENT_TABLES {
            let own: Vec<&Field> = t.fields[1..].iter().flat_map(|f| f.iter()).collect();
            documents(section(doc, t.file), &own, t.name);
        }
        documents(
            section(doc, CALLSITES.file),
            &all(CALLSITE_FIELDS),
            "callsites",
        );
        documents(
            section(doc, figures::FIGURES.file),
            &all(figures::FIGURE_FIELDS),
            "figures",
        );
        documents(
            section(doc, episodes::EPISODES.file),
            &all(episodes::EPISODE_FIELDS),
            "episodes",
        );
    }
}
