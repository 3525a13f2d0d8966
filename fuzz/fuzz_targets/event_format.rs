//! The `event_format` target: `kmemtrace_fuzz::targets::event_format`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::event_format::run(data));
