//! Test support, behind the `test-util` feature: what this crate's tests, benches and examples,
//! and the `dedup` CLI's, share instead of copies of it.
//!
//! - [`demo`]: the demo tool (a ledger of side effects) as an in-process `Dispatcher` and a
//!   Lambda; `dedup replay`'s embedded default.
//! - [`harness`]: events, handlers, scripted tools (the demo tool behind a script of faults) and
//!   the assertions on answers.
//! - [`servers`]: the store backends, the local DynamoDB-compatible servers (`moto`, `dynalite`,
//!   started by `scripts/dynamodb-servers.sh`) and a fault-injecting store decorator.
//! - [`events`]: event files, with the client context beside an AgentCore event.
//! - [`shapes`]: the real-shape cases and the three ways a schema reaches the keyer.
//! - [`fuzz_checks`]: the properties the fuzz targets check, replayed by the tests on the inputs
//!   the fuzzers kept.
//! - [`cpu`]: this thread's CPU time, for the benches and the peer comparison.
//!
//! Tests that need the local servers are ignored unless the `local-servers` feature is on
//! (`scripts/test` turns it on).
#![allow(missing_docs)]

pub mod cpu;
pub mod demo;
pub mod events;
pub mod fuzz_checks;
pub mod harness;
pub mod servers;
pub mod shapes;
