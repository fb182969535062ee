#![no_main]
// The checks are in spillway_proxy::fuzzing::chunked (docs/fuzzing.md).
libfuzzer_sys::fuzz_target!(|data: &[u8]| spillway_proxy::fuzzing::chunked(data));
