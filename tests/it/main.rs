//! The product's integration tests, built as one binary so the AWS SDK is linked once. The
//! support they share is the crate's `test-util` feature (`toolcall_dedup::test_util`): `fixture`
//! (events, handlers, scripted tools, assertions), `servers` (the store backends and the local
//! DynamoDB-compatible servers) and `shapes`.
//!
//! Where a new test goes: a door's contract as AWS documents it in `documented_shapes`; a
//! handler behaviour in `handler_events` (answers) or `handler_faults` (store and tool faults);
//! the interceptor in `interceptor` (one container) or `interceptor_containers` (several), what
//! changes under a call in `under_a_call` (and its attack in `under_a_call_attacks`), MCP's newer
//! shapes in `mcp_today`, the interceptor's protocol model in `interceptor_model`;
//! caller keys in `caller_keys`; the store port in `store_conformance` (every backend); the key
//! core in `key_golden` (vectors) or `key_properties` (properties). A test that needs the local
//! servers carries `#[cfg_attr(not(feature = "local-servers"), ignore = ...)]`: a plain `cargo
//! test` runs everything else, and `scripts/test` starts the servers and runs it all. Tests that
//! need the `dedup` binary, the corpus or the chaos machinery live in `cli/tests/it`.

use toolcall_dedup::test_util::{harness as fixture, servers, shapes};

mod alias_attacks;
mod announce_attacks;
mod bad_input;
mod caller_keys;
mod config_document;
mod documented_shapes;
mod doors_attacks;
mod drift;
mod e2e_lambda;
mod fake_lambda;
mod fence_attacks;
mod fuzz_regressions;
mod gateway;
mod guard;
mod handler_dispatch;
mod handler_events;
mod handler_faults;
mod harness_recipes;
mod house_rules;
mod interceptor;
mod interceptor_containers;
mod interceptor_model;
mod key_golden;
mod key_properties;
mod keyer_attacks;
mod keyer_upgrade;
mod mcp_today;
mod offload;
mod operations;
mod ops_attacks;
mod peer_powertools;
mod protocol_model;
mod real_shapes;
mod store_conformance;
mod under_a_call;
mod under_a_call_attacks;
