//! An input: a `kmemtrace-report --json` document, or a log analysed here
//! with the report's defaults (what `kmemtrace-report --json` would print).

use crate::compare::Capture;
use crate::figures;
use kmemtrace_analysis::Symbols;
use kmemtrace_format::log::Log;
use serde_json::Value;
use std::path::Path;

/// Reads `path`: JSON if it starts with `{`, else a kmemtrace log.
pub fn capture(path: &Path) -> Result<Capture, String> {
    let name = path.display().to_string();
    let report = report(path).map_err(|e| format!("{name}: {e}"))?;
    Ok(of_report(name, &report))
}

/// A capture from a report document.
pub fn of_report(name: String, report: &Value) -> Capture {
    let ns = report["capture"]["duration_ns"].as_u64().unwrap_or(0);
    let k = &report["kernel"];
    let kernel = format!(
        "{} {}",
        k["release"].as_str().unwrap_or("?"),
        k["machine"].as_str().unwrap_or("?")
    );
    Capture {
        name,
        // At least a microsecond, so rates stay finite.
        seconds: (ns as f64 / 1e9).max(1e-6),
        kernel,
        figures: figures::read(report),
    }
}

fn report(path: &Path) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        let v: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("not a report document: {e}"))?;
        if !v["schema"]
            .as_str()
            .is_some_and(|s| s.starts_with("kmemtrace-report/"))
        {
            return Err("JSON without a kmemtrace-report schema".into());
        }
        return Ok(v);
    }
    drop(bytes);
    let mut log = Log::open(path).map_err(|e| e.to_string())?;
    let table = log.kallsyms.take().filter(|k| !k.is_empty());
    let syms = Symbols {
        source: if table.is_some() {
            "the log's kallsyms".into()
        } else {
            "none".into()
        },
        table,
        raw: false,
    };
    let out = kmemtrace_analysis::analyse(&log, &syms, Default::default(), &mut |_| {});
    serde_json::to_value(&out.report).map_err(|e| e.to_string())
}
