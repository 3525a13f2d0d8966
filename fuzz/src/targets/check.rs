//! The whole checker (`kmemtrace_check::check_bytes`) over arbitrary
//! bytes: no panic, no hang, bounded memory, and a report consistent with
//! its verdict.
//!
//! The first byte chooses how the rest is used: odd, as a raw log file;
//! even, as a framed input (`kmemtrace_testkit::fuzz::framed_log`): blocks
//! with correct CRCs behind a valid file header and ARCH block, which is
//! what reaches the checks behind the framing (metadata, CPU data,
//! sub-buffers, losses).

use kmemtrace_check::{check_bytes, Verdict};

/// One run.
pub fn run(data: &[u8]) {
    let Some(bytes) = kmemtrace_testkit::fuzz::log_of_input(data) else {
        return;
    };
    let r = check_bytes("fuzz", &bytes);
    assert_eq!(r.exit_code, r.verdict.exit_code());
    match r.verdict {
        Verdict::Damaged => assert!(r.problems_total > 0),
        Verdict::Unusable => assert!(r.error.is_some()),
        _ => assert_eq!(r.problems_total, 0),
    }
    assert!(r.problems.len() <= 10_000);
    // The printers cope with whatever the report holds.
    let _ = kmemtrace_check::human::render(&r, &Default::default());
    let _ = kmemtrace_check::json::document(std::slice::from_ref(&r), r.exit_code);
}
