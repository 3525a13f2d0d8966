//! The `dump` target: `kmemtrace_fuzz::targets::dump`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::dump::run(data));
