//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
//!
//! - [`key`]: the pure key core (canonical JSON, normalization, scoping, hashing).
//! - [`store`]: the idempotency store port, with DynamoDB and in-memory implementations.
//! - [`audit`]: retries and deliberate repeats found in tool-call logs, scored per keyer.
//! - [`cost`]: the token-waste versus store-cost model.
//! - [`cli`]: the `dedup` command line.
pub mod audit;
pub mod cli;
pub mod corpus;
pub mod cost;
pub mod key;
pub mod store;
