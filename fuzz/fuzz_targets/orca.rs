#![no_main]
// The checks are in spillway_proxy::fuzzing::orca (docs/fuzzing.md).
libfuzzer_sys::fuzz_target!(|data: &[u8]| spillway_proxy::fuzzing::orca(data));
