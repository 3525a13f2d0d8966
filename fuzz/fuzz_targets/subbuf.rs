//! The `subbuf` target: `kmemtrace_fuzz::targets::subbuf`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kmemtrace_fuzz::targets::subbuf::run(data));
