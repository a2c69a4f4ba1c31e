//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
//!
//! For a tool written in Rust, the guard is all you need:
//!
//! ```
//! use toolcall_dedup::{Call, Dedup, Keyer, MemoryStore};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
//! let call = Call { tool: "charge_card", args: r#"{"amount": 4200}"#, ..Call::default() };
//! let receipt = dedup.run(&call, || async { Ok::<_, std::io::Error>("ch_1".to_string()) }).await.unwrap();
//! assert_eq!(receipt.value, "ch_1");
//! # });
//! ```
//!
//! The modules, in the order one call meets them:
//! - [`handler`]: the Lambda handler: detects the entry point, routes, keys, runs the executor,
//!   answers in the caller's format.
//! - [`bedrock`], `agentcore`, `envelope`: the entry points (Bedrock Agents action groups, the
//!   AgentCore Gateway Lambda target, the harness-neutral envelope). Each implements
//!   [`port::EntryPoint`].
//! - [`seam`]: what every entry point hands the executor and writes back (calls, replies,
//!   notices); it imports only the key core.
//! - [`key`]: the pure key core (canonical JSON, normalization, scoping, hashing).
//! - [`executor`]: one keyed call: claim, run once, complete, wait, replay; [`decide`] is its
//!   state table as pure functions.
//! - [`store`]: the idempotency store port, with DynamoDB and in-memory implementations.
//! - [`dispatch`]: the port to the real tool (`Dispatcher`, `LambdaDispatcher`).
//! - [`guard`]: the same executor in-process ([`Dedup`]).
//! - [`config`], [`telemetry`], [`xray`], `aws`: environment, observability (logs, metrics,
//!   traces), the shared SDK configuration.
//!
//! The `dedup` CLI, the replay corpus, the chaos soak, the audit and cost models and the demo tool
//! live in the workspace's `cli` package, outside the Lambda's build.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod announce;
mod answer;
mod aws;
mod backoff;
pub mod catalog;
pub mod config;
pub mod decide;
mod invoking;
pub mod dispatch;
pub mod doors;
pub mod executor;
pub mod guard;
pub mod handler;
pub mod key;
pub mod reload;
mod engine;
pub mod store;
#[cfg(feature = "stand-ins")]
pub mod stand_ins;
pub mod telemetry;
mod text_list;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod xray;

pub use guard::{Dedup, DedupBuilder, GuardError, GuardSettingsError, Guarded};
pub use key::{Call, Keyer, Strategy};
pub use store::{DynamoDbConfig, DynamoDbStore, MemoryStore, Store};
