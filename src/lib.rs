//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
//!
//! - [`key`]: the pure key core (canonical JSON, normalization, scoping, hashing).
//! - [`store`]: the idempotency store port, with DynamoDB and in-memory implementations.
//! - [`bedrock`]: the Bedrock Agents action-group event and response adapter.
//! - [`dispatch`]: the port to the real tool (`Dispatcher`, `LambdaDispatcher`).
//! - [`handler`]: the executor: claim, dispatch once, replay.
//! - [`demo`]: the demo tool (a ledger of side effects).
//! - [`config`], [`telemetry`]: environment and observability.
//! - [`audit`]: retries and deliberate repeats found in tool-call logs, scored per keyer.
//! - [`cost`]: the token-waste versus store-cost model.
//! - [`chaos`]: the randomized fault soak with the ledger oracle (`dedup chaos`).
//! - [`cli`]: the `dedup` command line.
pub mod audit;
pub mod aws;
pub mod bedrock;
pub mod chaos;
pub mod cli;
pub mod config;
pub mod corpus;
pub mod cost;
pub mod demo;
pub mod dispatch;
pub mod handler;
pub mod key;
pub mod store;
pub mod telemetry;
