//! The `log_reader` target: `kmemtrace_fuzz::targets::log_reader`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::log_reader::run(data));
