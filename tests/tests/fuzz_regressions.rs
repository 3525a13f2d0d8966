//! Every input a fuzzing campaign found failing (`fuzz/regressions/TARGET/`,
//! copied from `fuzz/artifacts/` once mended) runs through its target again,
//! on the stable compiler: none may fail again.
//!
//! The targets' code is the fuzz crate's own (`fuzz/src/targets`), compiled
//! here without libFuzzer, so the replay is exactly what the fuzzer ran.

#[path = "../../fuzz/src/targets/mod.rs"]
#[allow(dead_code)]
mod targets;

use std::path::Path;

type Run = fn(&[u8]);

const TARGETS: &[(&str, Run)] = &[
    ("log_reader", targets::log_reader::run),
    ("kpack", targets::kpack::run),
    ("subbuf", targets::subbuf::run),
    ("event_format", targets::event_format::run),
    ("metadata", targets::metadata::run),
    ("check", targets::check::run),
    ("report", targets::report::run),
    ("tracedat", targets::tracedat::run),
    ("dump", targets::dump::run),
    ("diff", targets::diff::run),
];

fn fuzz_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

#[test]
fn inputs_that_once_failed_pass() {
    let mut ran = 0;
    for entry in std::fs::read_dir(fuzz_dir().join("regressions")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(&(_, run)) = TARGETS.iter().find(|(t, _)| *t == name) else {
            panic!("{}: no such target", dir.display());
        };
        for input in std::fs::read_dir(&dir).unwrap() {
            let input = input.unwrap().path();
            let data = std::fs::read(&input).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{} fails again", input.display());
            ran += 1;
        }
    }
    assert!(ran > 0, "no inputs under fuzz/regressions");
}

/// The list above names every target the fuzz crate builds.
#[test]
fn every_target_is_listed() {
    let dir = fuzz_dir().join("fuzz_targets");
    let mut built: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            p.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    built.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(t, _)| t.to_string()).collect();
    listed.sort();
    assert_eq!(built, listed);
}
