//! The keyer never panics, is deterministic, and its typed canonical form keys to itself
//! (`fuzz/checks.rs`).
#![no_main]

use toolcall_dedup::test_util::fuzz_checks as checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::keyer(data));
