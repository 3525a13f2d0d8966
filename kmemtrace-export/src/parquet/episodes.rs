//! `episodes.parquet`: the allocation stall episodes of the report
//! (`kmemtrace-report --stalls`), one row each, by start; written only
//! where the log has episodes.

use super::f;
use super::table::{Enc, Field, TableSpec, Ty, V};
use super::writer::Rows;
use kmemtrace_analysis::model::stalls::Episode;
use std::io;

pub const EPISODE_FIELDS: &[Field] = &[
    f("capture", Ty::Str, false, Enc::Few),
    f("pid", Ty::I32, false, Enc::Few),
    f("comm", Ty::Str, true, Enc::Few),
    f("cpu", Ty::I32, false, Enc::Few),
    f("start_ns", Ty::I64, false, Enc::Ascending),
    f("span_ns", Ty::I64, false, Enc::Many),
    f("stall_ns", Ty::I64, false, Enc::Many),
    f("kind", Ty::Str, false, Enc::Few),
    f("callsite", Ty::Str, true, Enc::Few),
    f("order", Ty::I32, true, Enc::Few),
    f("gfp", Ty::I64, true, Enc::Few),
    f("reclaims", Ty::I64, false, Enc::Few),
    f("reclaim_ns", Ty::I64, false, Enc::Many),
    f("pages_reclaimed", Ty::I64, false, Enc::Few),
    f("compactions", Ty::I64, false, Enc::Few),
    f("compaction_ns", Ty::I64, false, Enc::Many),
    f("throttles", Ty::I64, false, Enc::Few),
    f("throttle_ns", Ty::I64, false, Enc::Many),
    f("retries", Ty::I64, false, Enc::Few),
    f("oom_victim", Ty::I32, true, Enc::Few),
    f("ended_by", Ty::Str, false, Enc::Few),
    f("uncertain", Ty::Bool, false, Enc::Few),
];

pub const EPISODES: TableSpec = TableSpec {
    file: "episodes.parquet",
    name: "episodes",
    fields: &[EPISODE_FIELDS],
};

/// The flags of a model GFP value (`0x140cca`).
fn gfp_value(g: &kmemtrace_analysis::model::Gfp) -> Option<i64> {
    let hex = g.value.strip_prefix("0x")?;
    u64::from_str_radix(hex, 16).ok().map(|v| v as i64)
}

pub fn row(rows: &mut Rows<'_>, capture: &str, e: &Episode) -> io::Result<()> {
    let n = |v: u64| V::I64(v as i64);
    let row = [
        V::Str(capture),
        V::I32(e.pid),
        e.comm.as_deref().map_or(V::Null, V::Str),
        V::I32(e.cpu as i32),
        n(e.start_ns),
        n(e.span_ns),
        n(e.stall_ns),
        V::Str(&e.kind),
        e.callsite.as_deref().map_or(V::Null, V::Str),
        e.order.map_or(V::Null, |o| V::I32(o as i32)),
        e.gfp.as_ref().and_then(gfp_value).map_or(V::Null, V::I64),
        n(e.reclaims),
        n(e.reclaim_ns),
        n(e.pages_reclaimed),
        n(e.compactions),
        n(e.compaction_ns),
        n(e.throttles),
        n(e.throttle_ns),
        n(u64::from(e.retries)),
        e.oom_victim.map_or(V::Null, V::I32),
        V::Str(&e.ended_by),
        V::Bool(e.uncertain),
    ];
    rows.push(0, &[&row])
}
