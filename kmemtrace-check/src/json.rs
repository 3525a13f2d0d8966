//! The `--json` document (schema `kmemtrace-check/1`, documented in
//! `JSON.md`).

use crate::findings::{Report, SCHEMA};
use serde::Serialize;

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    exit_code: u8,
    files: &'a [Report],
}

/// The whole document, for every file checked; `exit_code` is the
/// process's (the worst file's).
pub fn document(reports: &[Report], exit_code: u8) -> String {
    let mut s = serde_json::to_string_pretty(&Document {
        schema: SCHEMA,
        exit_code,
        files: reports,
    })
    .unwrap_or_else(|e| format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}
