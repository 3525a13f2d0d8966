//! The `metadata` target: `kmemtrace_fuzz::targets::metadata`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::metadata::run(data));
