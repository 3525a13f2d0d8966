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

use super::chunk::{encode, Zstd};
use super::table::{pq, Column, Schema, TableSpec, ROW_GROUP, V};
use bytes::Bytes;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::writer::SerializedFileWriter;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
    zstd: Zstd,
}

impl<'a> Rows<'a> {
    fn new(
        schemas: &'a [Schema],
        specs: &[TableSpec],
        thread: usize,
        scratch: File,
    ) -> io::Result<Self> {
        let columns = specs
            .iter()
            .map(|t| t.fields().map(|f| Column::new(f.ty, f.optional)).collect())
            .collect();
        Ok(Rows {
            schemas,
            thread,
            columns,
            rows: vec![0; specs.len()],
            groups: specs.iter().map(|_| Vec::new()).collect(),
            scratch,
            scratch_len: 0,
            zstd: Zstd::new()?,
        })
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
            let enc = schema.encs[i];
            let (bytes, close) = encode(descr, enc, values, defs, &mut self.zstd)?;
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
                    let mut rows = Rows::new(schemas, specs, t, scratch_file(dir, t)?)?;
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
    let done = done
        .into_inner()
        .map_err(|_| io::Error::other("poisoned"))?;
    assemble(dir, specs, &schemas, done, &files)
}

/// Puts each table's file together from the items' row groups, item by
/// item, reading the chunks back from the threads' scratch files: the rows
/// written per table.
fn assemble(
    dir: &Path,
    specs: &[TableSpec],
    schemas: &[Schema],
    mut done: Vec<Option<Vec<Vec<Group>>>>,
    scratch: &[File],
) -> io::Result<Vec<u64>> {
    let mut written = Vec::new();
    for (t, spec) in specs.iter().enumerate() {
        let schema = &schemas[t];
        let out = crate::private_file(&dir.join(spec.file))?;
        let mut w = SerializedFileWriter::new(out, schema.root.clone(), schema.props.clone())
            .map_err(pq)?;
        let mut rows = 0;
        for item in done.iter_mut().flatten() {
            for group in std::mem::take(&mut item[t]) {
                let mut rg = w.next_row_group().map_err(pq)?;
                for chunk in group {
                    let mut bytes = vec![0; chunk.len];
                    scratch[chunk.thread].read_exact_at(&mut bytes, chunk.offset)?;
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
