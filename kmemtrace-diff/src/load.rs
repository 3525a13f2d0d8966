//! An input: a `kmemtrace-report --json` document, or a log analysed here
//! with the report's defaults.

use crate::Side;
use kmemtrace_analysis::Symbols;
use kmemtrace_format::log::Log;
use std::path::Path;

/// Reads `path`: JSON if it starts with `{`, else a kmemtrace log.
pub fn side(path: &Path) -> Result<Side, String> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
    let report = if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{name}: not a report document: {e}"))?;
        if !v["schema"]
            .as_str()
            .is_some_and(|s| s.starts_with("kmemtrace-report"))
        {
            return Err(format!("{name}: JSON without a kmemtrace-report schema"));
        }
        v
    } else {
        drop(bytes);
        let mut log = Log::open(path).map_err(|e| format!("{name}: {e}"))?;
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
        serde_json::to_value(&out.report).map_err(|e| format!("{name}: {e}"))?
    };
    Ok(Side { name, report })
}
