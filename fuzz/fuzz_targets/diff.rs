//! The `diff` target: `kmemtrace_fuzz::targets::diff`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::diff::run(data));
