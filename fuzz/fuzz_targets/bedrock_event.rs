//! The Bedrock event parser and the handler behind it never panic on any event bytes, answer in
//! the caller's format, and leave nothing behind for a refused call (`fuzz/checks.rs`).
#![no_main]

use toolcall_dedup::test_util::fuzz_checks as checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bedrock_event(data));
