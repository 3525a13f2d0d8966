//! What `kmemtrace-diff` reads from others: a gates file and a report
//! document (`kmemtrace-report --json`), then the comparison and its
//! gates over them. No panic, no hang.
//!
//! Input: the gates file's text, a NUL, then the document (compared with
//! itself, as base and as new capture).

use super::scratch;
use kmemtrace_diff::compare::Group;
use kmemtrace_diff::{diff, gate, load};

/// One run.
pub fn run(data: &[u8]) {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let gates_text = String::from_utf8_lossy(&data[..split]);
    let gates = gate::parse("gates.toml", &gates_text).unwrap_or_default();
    for g in &gates {
        let _ = g.describe();
        if let Some(p) = &g.pattern {
            let _ = gate::glob(p, "kmalloc_trace+0x1c");
        }
    }
    let doc = data.get(split + 1..).unwrap_or_default();
    if doc.first() != Some(&b'{') {
        return;
    }
    let path = scratch(doc);
    let (Ok(base), Ok(new)) = (load::capture(path), load::capture(path)) else {
        return;
    };
    let base = Group {
        captures: vec![base],
    };
    let new = Group {
        captures: vec![new],
    };
    let _ = diff(&base, &[new], &gates, &[]);
}
