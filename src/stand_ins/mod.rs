//! Stand-ins for the world around the function, behind the `stand-ins` feature: what `dedup
//! replay`, the demo tool Lambda and the chaos soaks run on, and what the tests build on too. The
//! Lambda never enables it.
//!
//! - [`demo`]: the demo tool (a ledger of side effects) as an in-process `Dispatcher` and a
//!   Lambda; `dedup replay`'s embedded default.
//! - [`events`]: event files (with the client context beside an AgentCore event), and the
//!   Gateway's RESPONSE to an interceptor REQUEST.
//! - [`Faulty`]: a store that fails on cue.
#![allow(missing_docs)]

pub mod demo;
pub mod events;
mod faulty;

pub use faulty::Faulty;
