//! An input: a `kmemtrace-report --json` document, or a log analysed here
//! as `kmemtrace-report LOG --json` analyses it (the same selection: the
//! recorder's own threads out, a pid-filtered recording's traced tree), so
//! a stored baseline and its log give the same figures.

use crate::compare::{Capture, Partial};
use crate::figures;
use kmemtrace_analysis::Symbols;
use serde_json::Value;
use std::io::Read;
use std::path::Path;

/// The report schema whose meanings this version knows.
pub const REPORT_SCHEMA: &str = "kmemtrace-report/1";

/// Reads `path`: a JSON document if its first character (after a BOM and
/// white space) is `{`, else a kmemtrace log.
pub fn capture(path: &Path) -> Result<Capture, String> {
    let name = path.display().to_string();
    let (report, incomplete) = report(path).map_err(|e| format!("{name}: {e}"))?;
    let mut c = of_report(name, &report);
    // A log says itself what it lacks, per CPU, as every tool says it.
    if let Some(inc) = incomplete {
        c.partial = Some(Partial::Damaged(inc.lines("it").join("; ")));
    }
    Ok(c)
}

/// A capture from a report document.
pub fn of_report(name: String, report: &Value) -> Capture {
    let k = &report["kernel"];
    let kernel = format!(
        "{} {}",
        k["release"].as_str().unwrap_or("?"),
        k["machine"].as_str().unwrap_or("?")
    );
    Capture {
        name,
        seconds: seconds(report),
        kernel,
        figures: figures::read(report),
        filters: report["filters"].clone(),
        partial: partial(report),
    }
}

/// Why a report's figures are not a whole capture's, if they are not.
fn partial(report: &Value) -> Option<Partial> {
    let problems = report["problems"].as_array().map_or(0, Vec::len);
    if report["input"]["complete"] == false {
        Some(Partial::Damaged(
            "cut short (no END block): the recording did not finish".into(),
        ))
    } else if problems > 0 {
        let first = report["problems"][0]["message"]
            .as_str()
            .or_else(|| report["problems"][0].as_str())
            .unwrap_or("?");
        Some(Partial::Damaged(format!(
            "damaged ({problems} problems; first: {first})"
        )))
    } else if report["capture"]["kmem_events"].as_u64() == Some(0) {
        Some(Partial::NoKmemEvents)
    } else {
        None
    }
}

/// Seconds the figures cover: the capture's span, cut to the `--time`
/// window the document was made with; at least a microsecond, so rates
/// stay finite.
fn seconds(report: &Value) -> f64 {
    let c = &report["capture"];
    let f = &report["filters"];
    let first = c["first_ts_ns"].as_u64().unwrap_or(0);
    let last = c["last_ts_ns"].as_u64().unwrap_or(first);
    let start = f["time_start_ns"].as_u64().map_or(first, |t| t.max(first));
    let end = f["time_end_ns"].as_u64().map_or(last, |t| t.min(last));
    let ns = match (f["time_start_ns"].is_null(), f["time_end_ns"].is_null()) {
        (true, true) => c["duration_ns"].as_u64().unwrap_or(0),
        _ => end.saturating_sub(start),
    };
    (ns as f64 / 1e9).max(1e-6)
}

/// Whether the file starts like JSON: `{` after an optional BOM and white
/// space, read from its first bytes only.
fn looks_like_json(path: &Path) -> std::io::Result<bool> {
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)?
        .take(4096)
        .read_to_end(&mut head)?;
    let text = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&head);
    Ok(text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'))
}

/// A report document from its text.
fn document(text: &str) -> Result<Value, String> {
    let v: Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| format!("not a report document: {e}"))?;
    check_document(&v)?;
    Ok(v)
}

/// The report document of `path`, and what its log lacks (for a log).
fn report(
    path: &Path,
) -> Result<(Value, Option<kmemtrace_format::completeness::Incomplete>), String> {
    let mut log = if path.as_os_str() == "-" {
        // Standard input, read once: a document or a log.
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
        if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
            return Ok((document(&String::from_utf8_lossy(text))?, None));
        }
        kmemtrace_format::log::Log::from_bytes("<stdin>", &bytes).map_err(|e| e.to_string())?
    } else if looks_like_json(path).map_err(|e| e.to_string())? {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        return Ok((document(&text)?, None));
    } else {
        kmemtrace_import::open_log(path).map_err(|e| e.to_string())?
    };
    if log.kmem_decoder().ids().next().is_none() {
        return Err("the log has no readable kmem event formats: nothing to compare".into());
    }
    let syms = Symbols::of_log(&mut log);
    let report = kmemtrace_analysis::analyse_as_recorded(&log, &syms);
    let value = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    Ok((value, log.incomplete()))
}

/// A document this version can compare: schema `/1`, the objects the
/// figures come from, and complete row arrays.
fn check_document(v: &Value) -> Result<(), String> {
    match v["schema"].as_str() {
        Some(REPORT_SCHEMA) => {}
        Some(s) if s.starts_with("kmemtrace-report/") => {
            return Err(format!(
                "schema {s}: this kmemtrace-diff reads {REPORT_SCHEMA}"
            ))
        }
        _ => return Err("JSON without a kmemtrace-report schema".into()),
    }
    for key in ["capture", "summary", "leaks", "pages", "filters"] {
        if !v[key].is_object() {
            return Err(format!("a report document without `{key}`"));
        }
    }
    for key in ["callsites", "caches", "size_classes", "misuse"] {
        if !v[key].is_array() {
            return Err(format!("a report document without `{key}[]`"));
        }
    }
    for key in ["alloc_events", "bytes_allocated", "live_bytes"] {
        if !v["summary"][key].is_u64() {
            return Err(format!("`summary.{key}` is not a count"));
        }
    }
    let cut = v["lines"].as_u64().or_else(|| {
        // Documents from before `lines`: a cut shows in the leak groups.
        let total = v["leaks"]["groups_total"].as_u64()?;
        let listed = v["leaks"]["groups"].as_array()?.len() as u64;
        (listed < total).then_some(listed)
    });
    if let Some(n) = cut {
        return Err(format!(
            "made with -l {n}: its rows are cut, and the rest would look vanished; \
             store baselines with `kmemtrace-report LOG --json` without -l"
        ));
    }
    Ok(())
}
