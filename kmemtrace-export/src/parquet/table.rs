//! A table's columns: their schema and Parquet settings, the values of a
//! row group being gathered.

use kmemtrace_analysis::intern::{fast_map, FastMap};
use parquet::file::properties::{WriterProperties, WriterPropertiesPtr};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{SchemaDescriptor, TypePtr};
use std::io;
use std::sync::Arc;

/// Rows per row group (fewer in an item's last one).
pub const ROW_GROUP: usize = 1 << 17;

/// A value for `Rows::push`.
pub enum V<'a> {
    I64(i64),
    I32(i32),
    F64(f64),
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
    /// A double (figures that are not whole numbers: medians, ratios).
    F64,
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
    /// own), as `Rows::push` takes a row.
    pub fields: &'static [&'static [Field]],
}

impl TableSpec {
    pub(super) fn fields(&self) -> impl Iterator<Item = &'static Field> {
        self.fields.iter().flat_map(|part| part.iter())
    }
}

/// A table's schema and writer properties, made once.
pub(super) struct Schema {
    pub(super) root: TypePtr,
    pub(super) descr: SchemaDescriptor,
    pub(super) props: WriterPropertiesPtr,
    /// Each column's encoding.
    pub(super) encs: Vec<Enc>,
}

impl Schema {
    pub(super) fn new(t: &TableSpec) -> io::Result<Schema> {
        let mut text = format!("message {} {{\n", t.name);
        for f in t.fields() {
            let rep = if f.optional { "optional" } else { "required" };
            let ty = match f.ty {
                Ty::I64 => "int64",
                Ty::I32 => "int32",
                Ty::F64 => "double",
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
            props: properties()?,
            encs: t.fields().map(|f| f.enc).collect(),
        })
    }
}

/// One column's values in a row group. Strings are kept as indices into
/// the row group's own list of distinct strings: the columns hold few
/// (event, task, symbol names) and a copy per row was most of the memory.
pub(super) enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    Str(Vec<u32>, Vec<String>),
}

impl Values {
    /// The values held (not the nulls).
    pub(super) fn len(&self) -> usize {
        match self {
            Values::I64(v) => v.len(),
            Values::I32(v) => v.len(),
            Values::F64(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::Str(ids, _) => ids.len(),
        }
    }
}

pub(super) struct Column {
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
    pub(super) fn new(ty: Ty, optional: bool) -> Column {
        let values = match ty {
            Ty::I64 => Values::I64(Vec::new()),
            Ty::I32 => Values::I32(Vec::new()),
            Ty::F64 => Values::F64(Vec::new()),
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
    pub(super) fn push(&mut self, v: &V<'_>) -> io::Result<()> {
        let present = !matches!(v, V::Null);
        // The level after the value: a value of the wrong type leaves the
        // column as it was.
        let result = self.push_value(v);
        if let (Some(d), Ok(())) = (&mut self.defs, &result) {
            d.push(i16::from(present));
        }
        result
    }

    #[inline]
    fn push_value(&mut self, v: &V<'_>) -> io::Result<()> {
        match (&mut self.values, v) {
            (Values::I64(x), V::I64(v)) => x.push(*v),
            (Values::I32(x), V::I32(v)) => x.push(*v),
            (Values::F64(x), V::F64(v)) => x.push(*v),
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
    pub(super) fn take(&mut self) -> (Values, Option<Vec<i16>>) {
        fn take<T>(v: &mut Vec<T>) -> Vec<T> {
            std::mem::replace(v, Vec::with_capacity(v.len()))
        }
        let values = match &mut self.values {
            Values::I64(v) => Values::I64(take(v)),
            Values::I32(v) => Values::I32(take(v)),
            Values::F64(v) => Values::F64(take(v)),
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
fn add(distinct: &mut Vec<String>, s: &str) -> u32 {
    distinct.push(s.to_owned());
    distinct.len() as u32 - 1
}

/// The file's writer properties: what the file writer itself uses of
/// them (its row groups' size, the compression it records); the column
/// chunks come encoded ([`super::chunk`]).
fn properties() -> io::Result<WriterPropertiesPtr> {
    Ok(Arc::new(
        WriterProperties::builder()
            .set_compression(super::chunk::compression()?)
            .set_max_row_group_size(ROW_GROUP)
            .build(),
    ))
}

pub fn pq(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("parquet: {e}"))
}
