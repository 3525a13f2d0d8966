//! The `report` target: `kmemtrace_fuzz::targets::report`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::report::run(data));
