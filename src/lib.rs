//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
//!
//! - [`key`]: the pure key core (strategies, schema, policies).
//! - [`store`]: the idempotency store (`Store`, `MemoryStore`, `DynamoDbStore`).
//! - [`bedrock`]: the Bedrock Agents action-group event and response adapter.
//! - [`dispatch`]: the port to the real tool (`Dispatcher`, `LambdaDispatcher`).
//! - [`handler`]: the executor: claim, dispatch once, replay.
//! - [`demo`]: the demo tool (a ledger of side effects).
//! - [`config`], [`telemetry`]: environment and observability.
pub mod bedrock;
pub mod cli;
pub mod config;
pub mod demo;
pub mod dispatch;
pub mod handler;
pub mod key;
pub mod store;
pub mod telemetry;
