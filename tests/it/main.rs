//! The product's integration tests, built as one binary so the AWS SDK is linked once.
//! `fixture` and `servers` are the shared support (events, handlers, scripted tools and stores;
//! the local DynamoDB-compatible servers); the rest are the suites.

mod fixture;
mod servers;
mod shapes;

mod at_most_once;
mod bad_input;
mod bedrock_declared;
mod caller_keys;
mod documented_shapes;
mod e2e_lambda;
mod fuzz_regressions;
mod guard;
mod handler_dispatch;
mod handler_events;
mod handler_faults;
mod handler_runs_once;
mod interceptor;
mod interceptor_containers;
mod key_golden;
mod key_properties;
mod offload;
mod peer_powertools;
mod protocol_model;
mod real_shapes;
mod store_conformance;
