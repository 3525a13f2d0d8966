//! The `check` target: `kmemtrace_fuzz::targets::check`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::check::run(data));
