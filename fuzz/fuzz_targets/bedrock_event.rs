//! The Bedrock event parser and the handler behind it never panic on any event bytes, answer in
//! the caller's format, and leave nothing behind for a refused call (`fuzz/checks.rs`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::bedrock_event(data));
