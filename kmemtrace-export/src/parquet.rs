//! A log written as Parquet files for DuckDB, Spark and the like, into a
//! directory of its own (one capture; a dataset is many such directories,
//! e.g. `dataset/capture=<name>/`):
//!
//! - `slab_events.parquet`: every kmalloc/kfree/kmem_cache_* event;
//! - `page_events.parquet`: page allocations and frees (`mm_page_alloc`,
//!   `mm_page_free`, `mm_page_free_batched`, `mm_page_alloc_extfrag`);
//! - `pcp_events.parquet`: the per-CPU lists' refills and drains
//!   (`mm_page_alloc_zone_locked`, `mm_page_pcpu_drain`);
//! - `callsites.parquet`: `kmemtrace-report`'s call-site table;
//! - `manifest.json`: which capture (kernel, machine, host, start).
//!
//! Types both engines read: time stamps as INT64 nanoseconds of the trace
//! clock, addresses as INT64 (the 64-bit pattern: `call_site & 0xffff...`
//! gives it back), counts as INT64, names as UTF-8 strings; no unsigned
//! 64-bit columns. Every row has the capture's name, so that many captures
//! can be read as one table. `by_recorder` marks the events of kmemtraced's
//! own threads, which the report leaves out.
//!
//! Rows are written in row groups of [`ROW_GROUP`] (128 Ki rows, about 30 MB
//! gathered per table at most): memory is bounded by
//! that, not by the log's length.

use kmemtrace_analysis::in_order::for_each_record;
use kmemtrace_analysis::model::CallsiteRow;
use kmemtrace_analysis::Symbols;
use kmemtrace_format::kmem::{KmemEvent, KmemKind};
use kmemtrace_format::log::Log;
use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Rows per row group.
pub const ROW_GROUP: usize = 1 << 17;

/// One column's values being gathered (with definition levels when it is
/// optional: 1 present, 0 null).
enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
    Str(Vec<ByteArray>),
}

struct Column {
    values: Values,
    /// `Some` for an optional column.
    defs: Option<Vec<i16>>,
    /// A string column's distinct values, each one shared buffer: the
    /// columns hold few distinct strings (event and task names, symbols),
    /// and a copy per row was most of the export's time and memory.
    strings: HashMap<Box<str>, ByteArray>,
}

/// Distinct strings kept per column at most (then the cache starts over).
const MAX_STRINGS: usize = 1 << 16;

/// A value for [`Table::push`].
pub enum V<'a> {
    I64(i64),
    I32(i32),
    Bool(bool),
    Str(&'a str),
    Null,
}

/// One Parquet file being written, row group by row group.
struct Table {
    writer: SerializedFileWriter<File>,
    columns: Vec<Column>,
    rows: usize,
    total: u64,
}

impl Table {
    /// `fields`: (name, parquet type, optional).
    fn create(path: &Path, name: &str, fields: &[(&str, &str, bool)]) -> io::Result<Table> {
        let mut schema = format!("message {name} {{\n");
        let mut columns = Vec::new();
        for (field, ty, optional) in fields {
            let rep = if *optional { "optional" } else { "required" };
            let (decl, values) = match *ty {
                "int64" => ("int64".to_string(), Values::I64(Vec::new())),
                "int32" => ("int32".to_string(), Values::I32(Vec::new())),
                "bool" => ("boolean".to_string(), Values::Bool(Vec::new())),
                _ => ("binary".to_string(), Values::Str(Vec::new())),
            };
            let logical = if *ty == "string" { " (UTF8)" } else { "" };
            schema += &format!("  {rep} {decl} {field}{logical};\n");
            columns.push(Column {
                values,
                defs: optional.then(Vec::new),
                strings: HashMap::new(),
            });
        }
        schema += "}";
        let schema = Arc::new(parse_message_type(&schema).map_err(pq)?);
        let props = Arc::new(
            WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).map_err(pq)?))
                .set_max_row_group_size(ROW_GROUP)
                .build(),
        );
        Ok(Table {
            writer: SerializedFileWriter::new(File::create(path)?, schema, props).map_err(pq)?,
            columns,
            rows: 0,
            total: 0,
        })
    }

    /// Appends one row (values in the schema's order).
    fn push(&mut self, row: &[V<'_>]) -> io::Result<()> {
        for (c, v) in self.columns.iter_mut().zip(row) {
            let present = !matches!(v, V::Null);
            if let Some(d) = &mut c.defs {
                d.push(i16::from(present));
            }
            match (&mut c.values, v) {
                (Values::I64(x), V::I64(v)) => x.push(*v),
                (Values::I32(x), V::I32(v)) => x.push(*v),
                (Values::Bool(x), V::Bool(v)) => x.push(*v),
                (Values::Str(x), V::Str(v)) => {
                    let b = match c.strings.get(*v) {
                        Some(b) => b.clone(),
                        None => {
                            if c.strings.len() >= MAX_STRINGS {
                                c.strings.clear();
                            }
                            let b = ByteArray::from(v.as_bytes().to_vec());
                            c.strings.insert((*v).into(), b.clone());
                            b
                        }
                    };
                    x.push(b)
                }
                (_, V::Null) if c.defs.is_some() => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a value of the wrong type for its column",
                    ))
                }
            }
        }
        self.rows += 1;
        if self.rows >= ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the gathered rows as a row group.
    fn flush(&mut self) -> io::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut rg = self.writer.next_row_group().map_err(pq)?;
        let mut i = 0;
        while let Some(mut col) = rg.next_column().map_err(pq)? {
            let c = &mut self.columns[i];
            let defs = c.defs.as_deref();
            match &mut c.values {
                Values::I64(v) => col.typed::<Int64Type>().write_batch(v, defs, None),
                Values::I32(v) => col.typed::<Int32Type>().write_batch(v, defs, None),
                Values::Bool(v) => col.typed::<BoolType>().write_batch(v, defs, None),
                Values::Str(v) => col.typed::<ByteArrayType>().write_batch(v, defs, None),
            }
            .map_err(pq)?;
            col.close().map_err(pq)?;
            match &mut c.values {
                Values::I64(v) => v.clear(),
                Values::I32(v) => v.clear(),
                Values::Bool(v) => v.clear(),
                Values::Str(v) => v.clear(),
            }
            if let Some(d) = &mut c.defs {
                d.clear();
            }
            i += 1;
        }
        rg.close().map_err(pq)?;
        self.total += self.rows as u64;
        self.rows = 0;
        Ok(())
    }

    fn finish(mut self) -> io::Result<u64> {
        self.flush()?;
        self.writer.close().map_err(pq)?;
        Ok(self.total)
    }
}

fn pq(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("parquet: {e}"))
}

/// Rows written per file.
#[derive(Debug, Default)]
pub struct Written {
    pub slab_events: u64,
    pub page_events: u64,
    pub pcp_events: u64,
    pub callsites: u64,
}

const SLAB_FIELDS: &[(&str, &str, bool)] = &[
    ("capture", "string", false),
    ("ts_ns", "int64", false),
    ("cpu", "int32", false),
    ("pid", "int32", false),
    ("comm", "string", true),
    ("by_recorder", "bool", false),
    ("in_interrupt", "bool", false),
    ("event", "string", false),
    ("call_site", "int64", false),
    ("call_site_sym", "string", false),
    ("ptr", "int64", false),
    ("bytes_req", "int64", true),
    ("bytes_alloc", "int64", true),
    ("gfp_flags", "int64", true),
    ("node", "int32", true),
    ("cache", "string", true),
];

const PAGE_FIELDS: &[(&str, &str, bool)] = &[
    ("capture", "string", false),
    ("ts_ns", "int64", false),
    ("cpu", "int32", false),
    ("pid", "int32", false),
    ("comm", "string", true),
    ("by_recorder", "bool", false),
    ("in_interrupt", "bool", false),
    ("event", "string", false),
    ("pfn", "int64", true),
    ("order", "int32", false),
    ("migratetype", "int32", true),
    ("gfp_flags", "int64", true),
];

const CALLSITE_FIELDS: &[(&str, &str, bool)] = &[
    ("capture", "string", false),
    ("callsite", "string", false),
    ("addr", "int64", false),
    ("hits", "int64", false),
    ("failed", "int64", false),
    ("bytes_req", "int64", false),
    ("bytes_alloc", "int64", false),
    ("frees", "int64", false),
    ("cross_cpu_frees", "int64", false),
    ("free_calls", "int64", false),
    ("live_objects", "int64", false),
    ("live_bytes", "int64", false),
    ("peak_live_bytes", "int64", false),
    ("cache", "string", true),
];

/// Writes `log` into the directory `dir` (created if missing) as capture
/// `capture`.
pub fn write(mut log: Log, capture: &str, dir: &Path) -> io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    // The report's figures, and call sites named as it names them.
    let syms = Symbols::of_log(&mut log);
    let report = kmemtrace_analysis::analyse_as_recorded(&log, &syms);
    let recorder: HashSet<i32> = kmemtrace_format::tasks::recorder_tids(&log)
        .into_iter()
        .collect();

    let mut slab = Table::create(&dir.join("slab_events.parquet"), "slab_events", SLAB_FIELDS)?;
    let mut page = Table::create(&dir.join("page_events.parquet"), "page_events", PAGE_FIELDS)?;
    let mut pcp = Table::create(&dir.join("pcp_events.parquet"), "pcp_events", PAGE_FIELDS)?;
    let dec = log.kmem_decoder();
    let e = log.endian;
    let mut result = Ok(());
    let mut names: std::collections::HashMap<u64, String> = Default::default();
    for_each_record(
        &log,
        |_| true,
        |r| {
            if result.is_err() {
                return;
            }
            let Some(k) = dec.decode(e, r.payload).ok().flatten() else {
                return;
            };
            let comm = log.pids.comm(k.pid);
            let common = [
                V::Str(capture),
                V::I64(r.ts as i64),
                V::I32(r.cpu as i32),
                V::I32(k.pid),
                comm.map_or(V::Null, V::Str),
                V::Bool(recorder.contains(&k.pid)),
                V::Bool(k.in_interrupt),
                V::Str(k.kind.name()),
            ];
            result = if k.kind.is_slab_alloc() || k.kind.is_slab_free() {
                let sym = names
                    .entry(k.call_site)
                    .or_insert_with(|| syms.name(k.call_site));
                slab_row(&mut slab, common, &k, sym)
            } else {
                let table = match k.kind {
                    KmemKind::MmPageAllocZoneLocked | KmemKind::MmPagePcpuDrain => &mut pcp,
                    _ => &mut page,
                };
                page_row(table, common, &k)
            };
        },
    );
    result?;
    let mut sites = Table::create(&dir.join("callsites.parquet"), "callsites", CALLSITE_FIELDS)?;
    for c in &report.callsites {
        callsite_row(&mut sites, capture, c)?;
    }
    let w = Written {
        slab_events: slab.finish()?,
        page_events: page.finish()?,
        pcp_events: pcp.finish()?,
        callsites: sites.finish()?,
    };
    std::fs::write(dir.join("manifest.json"), manifest(&log, capture, &w))?;
    Ok(w)
}

fn slab_row(t: &mut Table, common: [V<'_>; 8], k: &KmemEvent<'_>, sym: &str) -> io::Result<()> {
    let alloc = k.kind.is_slab_alloc();
    let when = |v: i64| if alloc { V::I64(v) } else { V::Null };
    let mut row: Vec<V<'_>> = common.into_iter().collect();
    row.extend([
        V::I64(k.call_site as i64),
        V::Str(sym),
        V::I64(k.ptr as i64),
        when(k.bytes_req as i64),
        when(k.bytes_alloc as i64),
        when(k.gfp_flags as i64),
        k.node.map_or(V::Null, V::I32),
        k.cache_name.map_or(V::Null, V::Str),
    ]);
    t.push(&row)
}

fn page_row(t: &mut Table, common: [V<'_>; 8], k: &KmemEvent<'_>) -> io::Result<()> {
    let gfp = matches!(k.kind, KmemKind::MmPageAlloc);
    let mut row: Vec<V<'_>> = common.into_iter().collect();
    row.extend([
        k.pfn.map_or(V::Null, |p| V::I64(p as i64)),
        V::I32(k.order as i32),
        k.migratetype.map_or(V::Null, V::I32),
        if gfp {
            V::I64(k.gfp_flags as i64)
        } else {
            V::Null
        },
    ]);
    t.push(&row)
}

fn callsite_row(t: &mut Table, capture: &str, c: &CallsiteRow) -> io::Result<()> {
    let n = |v: u64| V::I64(v as i64);
    t.push(&[
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
    ])
}

/// `manifest.json`: the capture and its files.
fn manifest(log: &Log, capture: &str, w: &Written) -> String {
    let a = &log.arch;
    let doc = serde_json::json!({
        "schema": "kmemtrace-parquet/1",
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
        },
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}
