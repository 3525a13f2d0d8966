//! Parquet files written on all cores.
//!
//! The rows come in work items (runs of one CPU's records); threads take
//! the items in turn, gather each item's rows per table, and encode a row
//! group (dictionary, pages, zstd: most of the export's work) whenever
//! [`ROW_GROUP`] rows are in, spilling the encoded column chunks to a
//! scratch file of their own. Then each table's file is put together from
//! the chunks, item by item in order, so the files are the same whatever
//! the number of threads. A thread holds one row group per table at a time:
//! the rows in memory are bounded by the row-group size, not by the log's
//! length (the chunks' metadata is kept until the end).

use bytes::Bytes;
use kmemtrace_analysis::intern::{fast_map, FastMap};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::writer::{get_column_writer, ColumnCloseResult, ColumnWriter};
use parquet::data_type::ByteArray;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesPtr};
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnDescPtr, ColumnPath, SchemaDescriptor, TypePtr};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Rows per row group (fewer in an item's last one).
pub const ROW_GROUP: usize = 1 << 17;

/// A value for [`Rows::push`].
pub enum V<'a> {
    I64(i64),
    I32(i32),
    Bool(bool),
    Str(&'a str),
    /// A string the caller already knows by a number that determines it
    /// within its column (an event's kind, a task's pid where a pid has one
    /// name, a call site's address): looked up by that number instead of
    /// hashing the text.
    Known(u64, &'a str),
    Null,
}

/// A column's type in a table's schema.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    I64,
    I32,
    Bool,
    /// UTF-8.
    Str,
}

/// How a column's values are encoded, by what they hold.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Enc {
    /// Few distinct values (names, CPUs, sizes, flags, call sites): a
    /// dictionary.
    Few,
    /// Mostly distinct values (addresses): plain, zstd.
    Many,
    /// Ascending values (time stamps in the log's order): deltas, which
    /// zstd then has almost nothing left to do with.
    Ascending,
}

/// One column of a table's schema.
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    pub optional: bool,
    pub enc: Enc,
}

/// A table: its file, its Parquet message name and its columns.
pub struct TableSpec {
    pub file: &'static str,
    pub name: &'static str,
    /// The columns, in parts (those several tables share, then their
    /// own), as [`Rows::push`] takes a row.
    pub fields: &'static [&'static [Field]],
}

impl TableSpec {
    fn fields(&self) -> impl Iterator<Item = &'static Field> {
        self.fields.iter().flat_map(|part| part.iter())
    }
}

/// A table's schema and writer properties, made once.
struct Schema {
    root: TypePtr,
    descr: SchemaDescriptor,
    props: WriterPropertiesPtr,
}

impl Schema {
    fn new(t: &TableSpec) -> io::Result<Schema> {
        let mut text = format!("message {} {{\n", t.name);
        for f in t.fields() {
            let rep = if f.optional { "optional" } else { "required" };
            let ty = match f.ty {
                Ty::I64 => "int64",
                Ty::I32 => "int32",
                Ty::Bool => "boolean",
                Ty::Str => "binary",
            };
            let logical = if f.ty == Ty::Str { " (UTF8)" } else { "" };
            text += &format!("  {rep} {ty} {}{logical};\n", f.name);
        }
        text += "}";
        let root = Arc::new(parse_message_type(&text).map_err(pq)?);
        Ok(Schema {
            descr: SchemaDescriptor::new(root.clone()),
            root,
            props: properties(t.fields())?,
        })
    }
}

/// An encoded column chunk in a thread's scratch file.
struct Spilled {
    thread: usize,
    offset: u64,
    len: usize,
    close: ColumnCloseResult,
}

/// A row group's chunks, column by column.
type Group = Vec<Spilled>;

/// One thread's rows of the item it is on, per table.
pub struct Rows<'a> {
    schemas: &'a [Schema],
    thread: usize,
    columns: Vec<Vec<Column>>,
    rows: Vec<usize>,
    /// The item's row groups so far, per table.
    groups: Vec<Vec<Group>>,
    scratch: File,
    scratch_len: u64,
}

impl<'a> Rows<'a> {
    fn new(schemas: &'a [Schema], specs: &[TableSpec], thread: usize, scratch: File) -> Self {
        let columns = specs
            .iter()
            .map(|t| t.fields().map(|f| Column::new(f.ty, f.optional)).collect())
            .collect();
        Rows {
            schemas,
            thread,
            columns,
            rows: vec![0; specs.len()],
            groups: specs.iter().map(|_| Vec::new()).collect(),
            scratch,
            scratch_len: 0,
        }
    }

    /// Appends one row to table `table` (its index in the specs): the
    /// values of `parts`, one after the other, in the schema's order.
    pub fn push(&mut self, table: usize, parts: &[&[V<'_>]]) -> io::Result<()> {
        let columns = &mut self.columns[table];
        if parts.iter().map(|p| p.len()).sum::<usize>() != columns.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a row with the wrong number of values",
            ));
        }
        let mut columns = columns.iter_mut();
        for part in parts {
            // The part first: zip then stops without taking a column.
            for (v, c) in part.iter().zip(columns.by_ref()) {
                c.push(v)?;
            }
        }
        self.rows[table] += 1;
        if self.rows[table] >= ROW_GROUP {
            self.seal(table)?;
        }
        Ok(())
    }

    /// Encodes `table`'s gathered rows as a row group into the scratch file.
    fn seal(&mut self, table: usize) -> io::Result<()> {
        if self.rows[table] == 0 {
            return Ok(());
        }
        let schema = &self.schemas[table];
        let mut group = Vec::new();
        for (i, c) in self.columns[table].iter_mut().enumerate() {
            let (values, defs) = c.take();
            let descr = schema.descr.column(i);
            let (bytes, close) = encode(descr, schema.props.clone(), values, defs).map_err(pq)?;
            self.scratch.write_all(&bytes)?;
            group.push(Spilled {
                thread: self.thread,
                offset: self.scratch_len,
                len: bytes.len(),
                close,
            });
            self.scratch_len += bytes.len() as u64;
        }
        self.groups[table].push(group);
        self.rows[table] = 0;
        Ok(())
    }

    /// Seals the item's last row groups: its groups per table.
    fn end_item(&mut self) -> io::Result<Vec<Vec<Group>>> {
        for table in 0..self.rows.len() {
            self.seal(table)?;
        }
        let none = self.groups.iter().map(|_| Vec::new()).collect();
        Ok(std::mem::replace(&mut self.groups, none))
    }
}

/// Sets the next item past the last when dropped: a thread that ends
/// early (an error, a panic) makes the others stop.
struct StopOthers<'a> {
    next: &'a AtomicUsize,
    items: usize,
}

impl Drop for StopOthers<'_> {
    fn drop(&mut self) {
        self.next.store(self.items, Ordering::Relaxed);
    }
}

/// A thread's scratch file in `dir`, already unlinked: nothing is left
/// behind however the export ends.
fn scratch_file(dir: &Path, thread: usize) -> io::Result<File> {
    let path = dir.join(format!(
        ".kmemtrace-export.{}.{thread}.scratch",
        std::process::id()
    ));
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Writes the tables `specs` into `dir`, their rows gathered by `gather`
/// for each of `items` work items on up to `threads` threads: the rows
/// written per table.
pub fn write_tables(
    dir: &Path,
    specs: &[TableSpec],
    items: usize,
    threads: usize,
    gather: impl Fn(usize, &mut Rows<'_>) -> io::Result<()> + Sync,
) -> io::Result<Vec<u64>> {
    let schemas = specs
        .iter()
        .map(Schema::new)
        .collect::<io::Result<Vec<_>>>()?;
    let threads = threads.clamp(1, items.max(1));
    let done: Mutex<Vec<Option<Vec<Vec<Group>>>>> = Mutex::new((0..items).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    let files = std::thread::scope(|s| {
        let workers: io::Result<Vec<_>> = (0..threads)
            .map(|t| {
                let (schemas, done, next, gather) = (&schemas, &done, &next, &gather);
                let worker = move || -> io::Result<File> {
                    // On an error or a panic, the others stop at their
                    // next item.
                    let stop = StopOthers { next, items };
                    let mut rows = Rows::new(schemas, specs, t, scratch_file(dir, t)?);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= items {
                            break;
                        }
                        gather(i, &mut rows)?;
                        let groups = rows.end_item()?;
                        done.lock().map_err(|_| io::Error::other("poisoned"))?[i] = Some(groups);
                    }
                    std::mem::forget(stop);
                    Ok(rows.scratch)
                };
                std::thread::Builder::new()
                    .name(format!("parquet-{t}"))
                    .spawn_scoped(s, worker)
            })
            .collect();
        let workers = workers.inspect_err(|_| next.store(items, Ordering::Relaxed))?;
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<io::Result<Vec<File>>>()
    })?;
    let mut done = done
        .into_inner()
        .map_err(|_| io::Error::other("poisoned"))?;
    let mut written = Vec::new();
    for (t, spec) in specs.iter().enumerate() {
        let schema = &schemas[t];
        let out = File::create(dir.join(spec.file))?;
        let mut w = SerializedFileWriter::new(out, schema.root.clone(), schema.props.clone())
            .map_err(pq)?;
        let mut rows = 0;
        for item in done.iter_mut().flatten() {
            for group in std::mem::take(&mut item[t]) {
                let mut rg = w.next_row_group().map_err(pq)?;
                for chunk in group {
                    let mut bytes = vec![0; chunk.len];
                    files[chunk.thread].read_exact_at(&mut bytes, chunk.offset)?;
                    rg.append_column(&Bytes::from(bytes), chunk.close)
                        .map_err(pq)?;
                }
                rows += rg.close().map_err(pq)?.num_rows() as u64;
            }
        }
        w.close().map_err(pq)?;
        written.push(rows);
    }
    Ok(written)
}

/// One column's values in a row group. Strings are kept as indices into
/// the row group's own list of distinct strings: the columns hold few
/// (event, task, symbol names) and a copy per row was most of the memory.
enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
    Str(Vec<u32>, Vec<ByteArray>),
}

struct Column {
    values: Values,
    /// Definition levels of an optional column (1 present, 0 null).
    defs: Option<Vec<i16>>,
    /// A string column's distinct strings in this row group, by text and
    /// by the caller's number ([`V::Known`]).
    strings: FastMap<Box<str>, u32>,
    known: FastMap<u64, u32>,
    /// The last [`V::Known`] number and its index: runs of the same task,
    /// and the capture's name in every row, skip the map.
    last_known: Option<(u64, u32)>,
}

impl Column {
    fn new(ty: Ty, optional: bool) -> Column {
        let values = match ty {
            Ty::I64 => Values::I64(Vec::new()),
            Ty::I32 => Values::I32(Vec::new()),
            Ty::Bool => Values::Bool(Vec::new()),
            Ty::Str => Values::Str(Vec::new(), Vec::new()),
        };
        Column {
            values,
            defs: optional.then(Vec::new),
            strings: fast_map(),
            known: fast_map(),
            last_known: None,
        }
    }

    #[inline]
    fn push(&mut self, v: &V<'_>) -> io::Result<()> {
        let present = !matches!(v, V::Null);
        if let Some(d) = &mut self.defs {
            d.push(i16::from(present));
        }
        match (&mut self.values, v) {
            (Values::I64(x), V::I64(v)) => x.push(*v),
            (Values::I32(x), V::I32(v)) => x.push(*v),
            (Values::Bool(x), V::Bool(v)) => x.push(*v),
            (Values::Str(ids, distinct), V::Str(s)) => {
                let id = match self.strings.get(*s) {
                    Some(id) => *id,
                    None => {
                        let id = add(distinct, s);
                        self.strings.insert((*s).into(), id);
                        id
                    }
                };
                ids.push(id)
            }
            (Values::Str(ids, distinct), V::Known(key, s)) => {
                let id = match self.last_known {
                    Some((k, id)) if k == *key => id,
                    _ => *self.known.entry(*key).or_insert_with(|| add(distinct, s)),
                };
                self.last_known = Some((*key, id));
                ids.push(id)
            }
            (_, V::Null) if self.defs.is_some() => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a value of the wrong type for its column",
                ))
            }
        }
        Ok(())
    }

    /// This row group's values and levels, leaving the column empty (with
    /// room for as many as it held).
    fn take(&mut self) -> (Values, Option<Vec<i16>>) {
        fn take<T>(v: &mut Vec<T>) -> Vec<T> {
            std::mem::replace(v, Vec::with_capacity(v.len()))
        }
        let values = match &mut self.values {
            Values::I64(v) => Values::I64(take(v)),
            Values::I32(v) => Values::I32(take(v)),
            Values::Bool(v) => Values::Bool(take(v)),
            Values::Str(ids, distinct) => {
                self.strings.clear();
                self.known.clear();
                self.last_known = None;
                Values::Str(take(ids), std::mem::take(distinct))
            }
        };
        (values, self.defs.as_mut().map(take))
    }
}

/// Adds `s` to a row group's distinct strings: its index.
fn add(distinct: &mut Vec<ByteArray>, s: &str) -> u32 {
    distinct.push(ByteArray::from(s.as_bytes().to_vec()));
    distinct.len() as u32 - 1
}

/// A table's writer properties: zstd, row groups of [`ROW_GROUP`], each
/// column's encoding by what it holds, and minimum and maximum only where a
/// query can skip row groups with them (not names: `capture` is the same in
/// every row, and keeping them cost a string comparison per value).
fn properties<'a>(fields: impl Iterator<Item = &'a Field>) -> io::Result<WriterPropertiesPtr> {
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).map_err(pq)?))
        .set_max_row_group_size(ROW_GROUP)
        // Pages cut by size (1 MB) only, not every 20,000 rows: the crate
        // makes a zstd context per page, which cost more than the pages'
        // compression.
        .set_data_page_row_count_limit(ROW_GROUP)
        .set_statistics_enabled(EnabledStatistics::Chunk);
    for f in fields {
        let path = ColumnPath::from(f.name);
        if f.ty == Ty::Str {
            b = b.set_column_statistics_enabled(path.clone(), EnabledStatistics::None);
        }
        b = match f.enc {
            Enc::Few => b,
            Enc::Many => b.set_column_dictionary_enabled(path, false),
            Enc::Ascending => b
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
        };
    }
    Ok(Arc::new(b.build()))
}

/// Encodes one column chunk into memory: its bytes (offsets from 0) and
/// its metadata.
fn encode(
    descr: ColumnDescPtr,
    props: WriterPropertiesPtr,
    values: Values,
    defs: Option<Vec<i16>>,
) -> parquet::errors::Result<(Vec<u8>, ColumnCloseResult)> {
    let mut sink = TrackedWrite::new(Vec::new());
    let close = {
        let defs = defs.as_deref();
        let pages = Box::new(SerializedPageWriter::new(&mut sink));
        match (get_column_writer(descr, props, pages), values) {
            (ColumnWriter::Int64ColumnWriter(mut w), Values::I64(v)) => {
                w.write_batch(&v, defs, None)?;
                w.close()?
            }
            (ColumnWriter::Int32ColumnWriter(mut w), Values::I32(v)) => {
                w.write_batch(&v, defs, None)?;
                w.close()?
            }
            (ColumnWriter::BoolColumnWriter(mut w), Values::Bool(v)) => {
                w.write_batch(&v, defs, None)?;
                w.close()?
            }
            (ColumnWriter::ByteArrayColumnWriter(mut w), Values::Str(ids, distinct)) => {
                let v: Vec<ByteArray> = ids.iter().map(|&i| distinct[i as usize].clone()).collect();
                w.write_batch(&v, defs, None)?;
                w.close()?
            }
            _ => return Err(parquet::errors::ParquetError::General("column type".into())),
        }
    };
    Ok((sink.into_inner()?, close))
}

pub fn pq(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("parquet: {e}"))
}
