//! The machinery around toolcall-dedup: none of it is part of the Lambda.
//!
//! - [`commands`]: the `dedup` command line (key, score, corpus, replay, audit, cost, table, chaos).
//! - [`corpus`]: the replay corpus, its generators and the keyer scoring.
//! - [`audit`]: retries and deliberate repeats found in tool-call logs, scored per keyer.
//! - [`cost`]: the token-waste versus store-cost model.
//! - [`chaos`]: the randomized fault soak with the ledger oracle (`dedup chaos`).
//! - [`operator`]: the operator's workflows over the store (inspect, settle).
//! - [`demo`]: the demo tool (a ledger of side effects), a `Dispatcher` and a Lambda.
// What the binary and the tests reach is `pub`; everything else is `pub(crate)` by default.
#![warn(unreachable_pub)]

pub(crate) mod audit;
pub mod chaos;
pub mod commands;
pub mod corpus;
pub(crate) mod cost;
pub mod operator;
pub(crate) mod progress;
/// The demo tool, from the product's stand-ins.
pub use toolcall_dedup::stand_ins::demo;

pub use commands::main;
