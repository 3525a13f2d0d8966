//! `figures.parquet`: the capture's figures as `kmemtrace-diff` compares
//! them (`kmemtrace_diff::figures`), one row each, with what the
//! comparison needs of the capture (its length, kernel, whether it is
//! whole), so that a fleet of exports is compared by a query
//! (`kmemtrace-diff/fleet/`) with the numbers `kmemtrace-diff` gives.

use super::f;
use super::table::{Enc, Field, TableSpec, Ty, V};
use super::writer::Rows;
use kmemtrace_diff::compare::Capture;
use kmemtrace_diff::figures;
use std::io;

pub const FIGURE_FIELDS: &[Field] = &[
    f("capture", Ty::Str, false, Enc::Few),
    f("seconds", Ty::F64, false, Enc::Few),
    f("kernel", Ty::Str, false, Enc::Few),
    f("partial", Ty::Str, true, Enc::Few),
    f("scope", Ty::Str, false, Enc::Few),
    f("name", Ty::Str, false, Enc::Few),
    f("metric", Ty::Str, false, Enc::Few),
    f("kind", Ty::Str, false, Enc::Few),
    f("value", Ty::F64, false, Enc::Few),
];

pub const FIGURES: TableSpec = TableSpec {
    file: "figures.parquet",
    name: "figures",
    fields: &[FIGURE_FIELDS],
};

/// Every figure of `c`, in the comparison's key order.
pub fn rows(rows: &mut Rows<'_>, c: &Capture) -> io::Result<()> {
    let partial = c.partial.as_ref().map(|p| p.to_string());
    for (key, &value) in &c.figures {
        // Every key was read from the metric table or the misuse kinds.
        let kind = figures::lookup(&key.metric).map_or(figures::Kind::Count, |(k, _)| k);
        let row = [
            V::Str(&c.name),
            V::F64(c.seconds),
            V::Str(&c.kernel),
            partial.as_deref().map_or(V::Null, V::Str),
            V::Str(key.scope.id()),
            V::Str(&key.name),
            V::Str(&key.metric),
            V::Str(kind.id()),
            V::F64(value),
        ];
        rows.push(0, &[&row])?;
    }
    Ok(())
}
