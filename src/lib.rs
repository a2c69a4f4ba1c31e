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
//! - `reload`: the handler rebuilt when the config document changes (`main.rs` wires it).
//! - [`handler`]: one invocation: opens its door once, hands the call to that door's flow,
//!   reports it.
//! - `doors`: the door question (named, gated, parsed) and the doors themselves: Bedrock Agents
//!   action groups (`doors::bedrock`), the AgentCore Gateway Lambda target and interceptor, the
//!   harness-neutral envelope; `doors::port` is what each hands the executor.
//! - `invoking` and `engine`: the flow of the doors that invoke the tool (route, key, run,
//!   answer) and what every flow shares; the interceptor's flow lives with it, with
//!   `catalog` (what `tools/list` teaches).
//! - [`dispatch`]: the route (target, namespace, run time) and the [`dispatch::Dispatcher`] port to
//!   the real tool.
//! - [`key`]: the pure key core (canonical JSON, normalization, scoping, hashing).
//! - `executor`: one keyed call: claim, run once, complete, wait, replay; `decide` is its
//!   state table as pure functions.
//! - [`store`]: the idempotency store port, with DynamoDB and in-memory implementations.
//! - `answer`: the answer in the caller's format, whatever happened.
//! - [`telemetry`], `announce`, `xray`: the log line and metrics, the event for an unknown
//!   outcome, traces.
//!
//! Beside the call path: [`guard`] (the same executor in-process, [`Dedup`]), [`config`] (the
//! environment and the config document, parsed once), `aws` (the shared SDK configuration),
//! `backoff` and `text_list`. Two features no Lambda build enables: `stand-ins` (`stand_ins`: the
//! demo tool, event files and a store that fails on cue, which the `dedup` CLI runs on) and
//! `test-util` (`test_util`: fixtures and the local servers).
//!
//! The documented API is [`guard`], [`key`], [`store`], [`handler`] (with the [`dispatch`] port and
//! the [`telemetry`] it is given) and [`config`]; the rest is private. What the workspace's own CLI,
//! benches and tests reach beyond it is re-exported from one hidden module, `internals`, with no
//! stability promise.
//!
//! The `dedup` CLI, the replay corpus, the chaos soaks, the operator's commands, the audit and
//! cost models live in the workspace's `cli` package, outside the Lambda's build.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod announce;
mod answer;
mod aws;
mod backoff;
mod catalog;
pub mod config;
mod decide;
pub mod dispatch;
mod doors;
mod engine;
mod executor;
pub mod guard;
pub mod handler;
mod invoking;
pub mod key;
mod reload;
mod runtime;
#[cfg(feature = "stand-ins")]
pub mod stand_ins;
pub mod store;
mod sweep;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod test_util;
mod text_list;
mod xray;

/// Not API, no stability promise: the pieces beside the documented API that the workspace's own
/// `dedup` CLI, benches, integration tests and `main.rs` reach. One module so the reach is visible
/// in one place; a user of the crate needs none of it.
#[doc(hidden)]
pub mod internals {
    /// The announcement of an unknown outcome on EventBridge.
    pub mod announce {
        pub use crate::announce::{EventBus, OUTCOME_UNKNOWN, SOURCE};
    }
    /// The state table the protocol model checks.
    pub mod decide {
        pub use crate::decide::{AfterRun, NextAction, ReplyClass, RunEnd, after_run, decide};
    }
    /// The Bedrock action-group door, for the corpus and the benches.
    pub mod bedrock {
        pub use crate::doors::bedrock::{
            ActionGroupEvent, ReplyTo, ResponseState, call, forward_bytes, notice, operator_reply,
            step, validate_reply,
        };
    }
    /// What a door hands the executor.
    pub mod port {
        pub use crate::doors::port::{DedupInfo, Forward, Scoping, Sessionless, Unkeyed};
    }
    /// The handler rebuilt when the config document changes.
    pub mod reload {
        pub use crate::reload::{Refreshed, Reloading, document_from_env};
    }
    /// The scheduled sweep's rule, for the protocol model.
    pub mod sweep {
        pub use crate::sweep::is_left_unsettled;
    }
    /// Traces.
    pub mod xray {
        pub use crate::xray::{XrayLayer, init_lambda_subscriber};
    }
    pub use crate::catalog::catalog_key;
}

pub use guard::{Dedup, DedupBuilder, GuardError, GuardSettingsError, Guarded};
pub use key::{Call, Keyer, Strategy};
pub use store::{DynamoDbConfig, DynamoDbStore, MemoryStore, Store};
