//! `--json`: the report document is the model as serde writes it, so it
//! has no printer functions of its own; a new section appears in it by
//! being a field of [`Report`].

use kmemtrace_analysis::model::Report;

/// The document for `r`: pretty-printed, one newline at the end.
pub fn render(r: &Report) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string_pretty(r)?;
    s.push('\n');
    Ok(s)
}
