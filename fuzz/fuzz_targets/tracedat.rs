//! The `tracedat` target: `kmemtrace_fuzz::targets::tracedat`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::tracedat::run(data));
