//! Test support, behind the `test-util` feature (which brings [`crate::stand_ins`] along): the
//! fixtures and servers this crate's tests, benches and examples, and the `dedup` CLI's tests,
//! share instead of copies of them. No normal build enables it.
//!
//! - [`harness`]: events, handlers, scripted tools (the demo tool behind a script of faults) and
//!   the assertions on answers.
//! - [`servers`]: the store backends and the local DynamoDB-compatible servers (`moto`,
//!   `dynalite`, started by `scripts/dynamodb-servers.sh`).
//! - [`shapes`]: the real-shape cases and the three ways a schema reaches the keyer.
//! - [`fuzz_checks`]: the properties the fuzz targets check, replayed by the tests on the inputs
//!   the fuzzers kept.
//! - [`cpu`]: this thread's CPU time, for the benches and the peer comparison.
//!
//! Tests that need the local servers are ignored unless the `local-servers` feature is on
//! (`scripts/test` turns it on).
#![allow(missing_docs)]

pub mod cpu;
pub mod fuzz_checks;
pub mod harness;
pub mod servers;
pub mod shapes;
