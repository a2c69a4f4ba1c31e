//! toolcall-dedup: keys AI tool calls by meaning and claims each key once.
//!
//! - [`key`]: the pure key core (canonical JSON, normalization, scoping, hashing).
//! - [`store`]: the idempotency store port, with DynamoDB and in-memory implementations.
//! - [`seam`]: what every entry point hands the executor and writes back (the [`seam::EntryPoint`]
//!   trait, calls, replies, notices); it imports only the key core.
//! - [`bedrock`]: the Bedrock Agents action-group event and response adapter.
//! - [`agentcore`]: the Bedrock AgentCore Gateway Lambda-target adapter.
//! - [`envelope`]: the harness-neutral invoke envelope adapter.
//! - [`decide`]: the executor's pure decision (claim outcome, mode, time left → next action).
//! - [`dispatch`]: the port to the real tool (`Dispatcher`, `LambdaDispatcher`).
//! - [`executor`]: the state machine of one keyed call: claim, run once, complete, wait, replay.
//! - [`handler`]: the Lambda handler: flavour detection, routing, keying, the executor, answers.
//! - [`guard`]: the library guard: `Dedup::new(store, keyer).run(&call, || side_effect())`.
//! - [`demo`]: the demo tool (a ledger of side effects).
//! - [`config`], [`telemetry`]: environment and observability.
//! - [`audit`]: retries and deliberate repeats found in tool-call logs, scored per keyer.
//! - [`cost`]: the token-waste versus store-cost model.
//! - [`chaos`]: the randomized fault soak with the ledger oracle (`dedup chaos`).
//! - [`cli`]: the `dedup` command line.
pub mod agentcore;
pub mod aws;
pub mod bedrock;
pub mod config;
pub mod decide;
pub mod dispatch;
pub mod envelope;
pub mod executor;
pub mod guard;
pub mod handler;
pub mod key;
pub mod seam;
pub mod store;
pub mod telemetry;
