//! An input: a `kmemtrace-report --json` document, or a log analysed here
//! as `kmemtrace-report LOG --json` analyses it (the same selection: the
//! recorder's own threads out, a pid-filtered recording's traced tree), so
//! a stored baseline and its log give the same figures. Either way the
//! comparison reads the typed model ([`Report`]): a document is
//! deserialized into it, a log's report is used as the analysis made it.

use crate::compare::{Capture, Partial};
use crate::figures;
use kmemtrace_analysis::model::Report;
use kmemtrace_analysis::Symbols;
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

/// The report schema whose meanings this version knows: the model's.
pub use kmemtrace_analysis::model::SCHEMA as REPORT_SCHEMA;

/// Reads `path`: a JSON document if its first character (after a BOM and
/// white space) is `{`, else a kmemtrace log.
pub fn capture(path: &Path) -> Result<Capture, String> {
    let name = path.display().to_string();
    let (report, incomplete) = report(path).map_err(|e| format!("{name}: {e}"))?;
    Ok(of_log_report(name, &report, incomplete.as_ref()))
}

/// A capture from a log's report and what the log lacks (`Log::incomplete`).
pub fn of_log_report(
    name: String,
    report: &Report,
    incomplete: Option<&kmemtrace_import::completeness::Incomplete>,
) -> Capture {
    let mut c = of_report(name, report);
    // A log says itself what it lacks, per CPU, as every tool says it.
    if let Some(inc) = incomplete {
        c.partial = Some(Partial::Damaged(inc.lines("it").join("; ")));
    }
    c
}

/// A capture from a report.
pub fn of_report(name: String, report: &Report) -> Capture {
    let k = &report.kernel;
    let kernel = format!(
        "{} {}",
        k.release.as_deref().unwrap_or("?"),
        k.machine.as_deref().unwrap_or("?")
    );
    Capture {
        name,
        seconds: seconds(report),
        kernel,
        figures: figures::read(report),
        filters: report.filters.clone(),
        partial: partial(report),
    }
}

/// Why a report's figures are not a whole capture's, if they are not.
fn partial(report: &Report) -> Option<Partial> {
    if !report.input.complete {
        Some(Partial::Damaged(
            "cut short (no END block): the recording did not finish".into(),
        ))
    } else if let Some(first) = report.problems.first() {
        Some(Partial::Damaged(format!(
            "damaged ({} problems; first: {first})",
            report.problems.len()
        )))
    } else if report.capture.kmem_events == 0 {
        Some(Partial::NoKmemEvents)
    } else {
        None
    }
}

/// Seconds the figures cover: the capture's span, cut to the `--time`
/// window the document was made with; at least a microsecond, so rates
/// stay finite.
fn seconds(report: &Report) -> f64 {
    let c = &report.capture;
    let f = &report.filters;
    let first = c.first_ts_ns.unwrap_or(0);
    let last = c.last_ts_ns.unwrap_or(first);
    let ns = match (f.time_start_ns, f.time_end_ns) {
        (None, None) => c.duration_ns,
        (start, end) => {
            let start = start.map_or(first, |t| t.max(first));
            let end = end.map_or(last, |t| t.min(last));
            end.saturating_sub(start)
        }
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
    Ok(starts_like_json(&head))
}

/// `{` after an optional BOM and white space.
fn starts_like_json(bytes: &[u8]) -> bool {
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A report document from its bytes (a BOM allowed before it); keys this
/// version does not know are passed over.
fn document(bytes: &[u8]) -> Result<Report, String> {
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let report = serde_json::from_slice::<Report>(text).map_err(|e| {
        // Not JSON: where it breaks. Another schema's document need not
        // have this one's keys: its schema rather than the first it lacks.
        match schema_of(text) {
            Err(syntax) => format!("not a report document: {syntax}"),
            Ok(Some(s)) if s == REPORT_SCHEMA => format!("not a report document: {e}"),
            Ok(s) => wrong_schema(s.as_deref()),
        }
    })?;
    if report.schema != REPORT_SCHEMA {
        return Err(wrong_schema(Some(&report.schema)));
    }
    check_rows_whole(&report)?;
    Ok(report)
}

/// The `schema` of a JSON object, if it has a string there.
fn schema_of(text: &[u8]) -> serde_json::Result<Option<String>> {
    #[derive(Deserialize)]
    struct Head {
        schema: Option<serde_json::Value>,
    }
    let head: Head = serde_json::from_slice(text)?;
    Ok(head.schema.and_then(|s| s.as_str().map(str::to_string)))
}

/// Why a document of `schema` (none: not a report's) is not compared.
fn wrong_schema(schema: Option<&str>) -> String {
    match schema {
        Some(s) if s.starts_with("kmemtrace-report/") => {
            format!("schema {s}: this kmemtrace-diff reads {REPORT_SCHEMA}")
        }
        _ => "JSON without a kmemtrace-report schema".into(),
    }
}

/// The report of `path`, and what its log lacks (for a log).
fn report(
    path: &Path,
) -> Result<(Report, Option<kmemtrace_import::completeness::Incomplete>), String> {
    let mut log = if path.as_os_str() == "-" {
        // Standard input, read once: a document or a log.
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        if starts_like_json(&bytes) {
            return Ok((document(&bytes)?, None));
        }
        kmemtrace_import::log::Log::from_bytes("<stdin>", &bytes).map_err(|e| e.to_string())?
    } else if !path.exists() {
        // The name a rotated capture was recorded under.
        kmemtrace_import::open_capture(&[path.to_path_buf()]).map_err(|e| e.to_string())?
    } else if looks_like_json(path).map_err(|e| e.to_string())? {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        return Ok((document(&bytes)?, None));
    } else {
        kmemtrace_import::open_log(path).map_err(|e| e.to_string())?
    };
    if log.kmem_decoder().ids().next().is_none() {
        return Err("the log has no readable kmem event formats: nothing to compare".into());
    }
    let syms = Symbols::of_log(&mut log);
    let report = kmemtrace_analysis::analyse_as_recorded(&log, &syms);
    Ok((report, log.incomplete()))
}

/// A document made with `-l` has cut row arrays: the rest would look
/// vanished.
fn check_rows_whole(r: &Report) -> Result<(), String> {
    let cut = r.lines.map(|n| n as u64).or_else(|| {
        // Documents from before `lines`: a cut shows in the leak groups.
        let listed = r.leaks.groups.len() as u64;
        (listed < r.leaks.groups_total as u64).then_some(listed)
    });
    if let Some(n) = cut {
        return Err(format!(
            "made with -l {n}: its rows are cut, and the rest would look vanished; \
             store baselines with `kmemtrace-report LOG --json` without -l"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_refused_for_its_schema_before_its_keys() {
        let err = |text: &str| document(text.as_bytes()).unwrap_err();
        assert_eq!(
            err(r#"{"not": "a report"}"#),
            "JSON without a kmemtrace-report schema"
        );
        assert_eq!(
            err(r#"{"schema": "kmemtrace-report/2", "summary": 1}"#),
            format!("schema kmemtrace-report/2: this kmemtrace-diff reads {REPORT_SCHEMA}")
        );
        let e = err(r#"{"schema": "kmemtrace-report/1", "generator": "x"}"#);
        assert!(e.starts_with("not a report document: missing field"), "{e}");
        let e = err("\u{feff}{\"schema\": ");
        assert!(e.starts_with("not a report document: EOF"), "{e}");
    }
}
