//! The `kpack` target: `kmemtrace_fuzz::targets::kpack`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::kpack::run(data));
