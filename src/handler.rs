//! The Lambda handler: the state machine of one invocation, whatever door it came in by.
//!
//! 1. **Open** the door once (`Door::open`: named by a cheap look at the event and its client
//!    context, gated by `DEDUP_DOORS` and the interceptor's alias, parsed) and **route** the call
//!    (target, namespace and run time together). An event no door recognises is a Lambda error
//!    naming the four markers looked for.
//! 2. **Key** it: the adapter's `crate::doors::port::ToolCall` (tool, arguments, namespace, run,
//!    step, declared schema) overlaid with the policy file's schema, through the typed keyer.
//! 3. **Run** it through the `crate::executor::Executor`: claim; on first sight invoke the
//!    routed tool with the payload it would have received directly (plus the key), check the
//!    reply, store it; replay a completed call; wait for an identical call in flight, bounded by
//!    the smaller of `DEDUP_WAIT_MS` and the time left before the Lambda deadline.
//! 4. **Answer** in the caller's format (`crate::doors::port::Answers`) and report.
//!
//! Steps 2 to 4 are each door's flow: `invoking.rs` for the doors that invoke the tool themselves,
//! `doors/interceptor/flow.rs` for the Gateway interceptor; this module only opens the door.
//!
//! Failures are answered, never thrown, whenever the caller's format can carry them:
//!
//! | situation | tool called? | claim | answer |
//! |---|---|---|---|
//! | event no entry point recognises | no | none | Lambda error (`InvalidEvent`) |
//! | missing session / run id, bad parameter type, envelope namespace not allowed | no | none | `invalid_event` notice (Bedrock FAILURE) |
//! | AgentCore call naming no run, `DEDUP_SESSIONLESS=pass_through` (the default) | yes, unkeyed | none | the tool's reply; a `sessionless` metric and a warning |
//! | argument does not match its declared type | no | none | `invalid_arguments` notice (REPROMPT) |
//! | no route for the tool | no | none | `no_route` notice (FAILURE) |
//! | store unreachable | **no** (fail closed) | none (a claim whose answers were lost is released at the next call) | `dedup_unavailable` notice saying why |
//! | tool error `DedupNothingRan`, or a type in `DEDUP_RELEASE_ON_ERRORS` | no | released | `tool_error` notice |
//! | any other tool error (`Unhandled`, `Sandbox.Timedout`, `ValidationException`, ...) | maybe | kept until its lease ends | `tool_error` notice |
//! | no answer in time, the connection broke mid-invoke, a 4xx Lambda can raise mid-run | maybe | kept until its lease ends | `tool_error` notice |
//! | invoke never sent (connection refused, DNS failure) or refused before start (throttled, not found, ...) | no | released | `tool_error` notice |
//! | tool reply not a reply of the caller's format | yes | kept until its lease ends | `tool_error` notice |
//! | tool reply too large to store | yes | completed without it | the reply; repeats are told it ran |
//! | tool failed while acting (FAILURE, HTTP 5xx, MCP `isError`) | yes | completed for the claim's failure retention (60 s by default; `at_most_once`: the whole retention), or released (`failures = "retry"`, a result flagged retryable) | the tool's reply, replayed to repeats within it |
//! | tool refused its input (REPROMPT, HTTP 4xx but 409/429) | yes | released (nothing happened) | the tool's reply |
//! | tool said "not now" (HTTP 409, 429) | yes | kept until its lease ends | the tool's reply |
//!
//! The lease runs to the later of the Lambda deadline and the end of the tool's own timeout plus
//! its start allowance (`Dispatcher::max_run_time`), plus a margin for clock skew, so nobody
//! takes a key over while its tool may still be running, and a killed invocation blocks its key
//! only until then. A claim the store was slow to answer moves the lease just before the tool is
//! invoked. The tool's timeout ends early enough for the completion to be stored before the
//! deadline. Completion and release are fenced by the lease token (see `crate::executor`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::announce::{EventBus, UnknownOutcome};
pub use crate::answer::Handled;
use crate::catalog::Catalogs;
use crate::config::Config;
use crate::dispatch::Dispatcher;
use crate::doors::{Gate, Interception, RefusalKind};
use crate::engine::Engine;
use crate::executor::Executor;
use crate::key::Keyer;
use crate::store::{Record, Records, Store};
use crate::telemetry::{InvocationReport, Outcome, Telemetry};

pub use crate::doors::{ClientContext, Door, DoorName, HandlerError, Refusal, Unanswerable};

pub use crate::engine::DoorSettings;
pub use crate::executor::Settings;
pub use crate::runtime::RuntimeError;

/// What the Lambda runtime tells one invocation.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// The Lambda request id.
    pub request_id: String,
    /// The Lambda deadline, epoch milliseconds; `None` without one.
    pub deadline_ms: Option<i64>,
    /// The alias or version the function was invoked through (the invoked ARN's eighth
    /// field); `None` for the unqualified function.
    pub qualifier: Option<String>,
}

impl Invocation {
    /// A deadline that has already passed cannot be real (the function would be frozen); some
    /// emulators (`cargo lambda watch`) send the timeout in milliseconds instead of an epoch
    /// time. Such a deadline counts as absent, so the default budget applies.
    pub fn from_context(ctx: &Context) -> Invocation {
        Invocation::from_runtime(
            &ctx.request_id,
            i64::try_from(ctx.deadline).ok(),
            &ctx.invoked_function_arn,
        )
    }

    /// What the Runtime API's headers say: the request id, the deadline (epoch ms) and the
    /// invoked function's ARN.
    pub(crate) fn from_runtime(
        request_id: &str,
        deadline_ms: Option<i64>,
        invoked_function_arn: &str,
    ) -> Invocation {
        let deadline = deadline_ms.filter(|d| *d > wall_now_ms());
        if deadline.is_none() {
            tracing::debug!(
                deadline = deadline_ms,
                "deadline is not a future epoch time; using the default budget"
            );
        }
        Invocation {
            request_id: request_id.to_string(),
            deadline_ms: deadline,
            qualifier: invoked_function_arn
                .split(':')
                .nth(7)
                .filter(|q| !q.is_empty())
                .map(str::to_string),
        }
    }
}

/// The handler, generic over its store and dispatcher (static dispatch).
pub struct Handler<S, D> {
    engine: Engine<S>,
    dispatcher: D,
    /// Where calls left with their outcome unknown are announced, if anywhere.
    events: Option<EventBus>,
}

impl<S: Store, D: Dispatcher> Handler<S, D> {
    /// A handler over `store` and `dispatcher`, with the keyer, executor and door settings
    /// `config` gives.
    pub fn new(store: S, dispatcher: D, config: &Config, telemetry: Telemetry) -> Handler<S, D> {
        let keyer = Keyer::new()
            .with_policies(config.policies.clone())
            .with_version(config.keyer);
        Handler {
            engine: Engine {
                executor: Executor::new(store, keyer, executor_settings(config)),
                doors: door_settings(config),
                catalogs: Catalogs::new(config.catalog_ttl),
                routes: config.routes.clone(),
                telemetry,
                warned_gateway_unnamed: Default::default(),
            },
            dispatcher,
            events: None,
        }
    }

    /// This handler, carrying on what the container's `earlier` handler holds that outlives a
    /// configuration (a config refresh builds a new handler): the claims whose answers were lost,
    /// so that each is still released at the next call, whatever the new configuration says.
    pub fn carrying_on(mut self, earlier: &Handler<S, D>) -> Handler<S, D> {
        self.engine.executor = self
            .engine
            .executor
            .sharing_lost_claims(&earlier.engine.executor);
        self
    }

    /// Announces each call an invocation leaves with its outcome unknown on `events`.
    pub fn with_event_bus(mut self, events: EventBus) -> Handler<S, D> {
        self.events = Some(events);
        self
    }

    /// Adjusts the settings (tests shorten margins and budgets).
    pub fn with_settings(mut self, adjust: impl FnOnce(&mut Settings)) -> Handler<S, D> {
        self.engine.executor = self.engine.executor.with_settings(adjust);
        self
    }

    /// The store claims are made in.
    pub fn store(&self) -> &S {
        self.engine.store()
    }

    /// The dispatcher tools are invoked through.
    pub fn dispatcher(&self) -> &D {
        &self.dispatcher
    }

    /// The executor's settings.
    pub fn settings(&self) -> &Settings {
        self.engine.settings()
    }

    /// One invocation as `lambda_runtime` hands it over (a caller running its own
    /// `lambda_runtime` loop): the payload and the context (deadline, invoked ARN, client
    /// context). The function itself serves through [`serve`], which reads the same fields from
    /// the Runtime API through the same `Invocation` code.
    pub async fn lambda(&self, event: LambdaEvent<Value>) -> Result<Box<RawValue>, HandlerError> {
        let invocation = Invocation::from_context(&event.context);
        let client_context = event.context.client_context.as_ref().map(|c| &c.custom);
        self.handle_with_context(&event.payload, &invocation, client_context)
            .await
            .response
    }

    /// Handles one event without a client context and reports it.
    pub async fn handle(&self, event: &Value, invocation: &Invocation) -> Handled {
        self.handle_with_context(event, invocation, None).await
    }

    /// Handles one event with the client context it came with, and reports it.
    pub async fn handle_with_context(
        &self,
        event: &Value,
        invocation: &Invocation,
        client_context: Option<&ClientContext>,
    ) -> Handled {
        let started = Instant::now();
        let store = self.store();
        let requests_before = store.requests();
        let end = deadline_instant(invocation.deadline_ms, self.settings().default_budget);
        let ((door, mut answered), settled_unknown) = crate::executor::unknown::counted(Box::pin(
            self.answer(event, client_context, invocation.qualifier.as_deref(), end),
        ))
        .await;
        answered.settled_unknown = settled_unknown.iter().map(|c| c.key.clone()).collect();
        let door = door.map(DoorName::as_str);
        let store_requests = (store.requests() - requests_before).total();
        self.engine.telemetry.invocation(&InvocationReport {
            request_id: &invocation.request_id,
            mode: self.settings().mode,
            outcome: answered.outcome,
            door,
            tool: answered.tool.as_deref(),
            key: answered.key.as_deref(),
            latency: started.elapsed(),
            store_requests,
            settled_unknown: settled_unknown.len() as u64,
            rules: &answered.rules,
            reason: answered.reason.as_deref(),
        });
        // Each call this invocation settled as outcome unknown (an interceptor RESPONSE can
        // settle several, one per claim its request noted).
        let announcer = self.announcer(invocation, end);
        for settled in &settled_unknown {
            announcer.announce(&settled.key, &settled.tool, door).await;
        }
        answered
    }

    /// Who announces what `invocation` (due at `end`) settles as outcome unknown.
    fn announcer<'a>(&'a self, invocation: &'a Invocation, end: Instant) -> Announcer<'a> {
        Announcer {
            events: self.events.as_ref(),
            request_id: &invocation.request_id,
            end,
            reply_margin: self.settings().reply_margin,
        }
    }

    /// Opens the door the event came in by (once) and hands the call to that door's flow.
    async fn answer(
        &self,
        event: &Value,
        client_context: Option<&ClientContext>,
        qualifier: Option<&str>,
        end: Instant,
    ) -> (Option<DoorName>, Handled) {
        let engine = &self.engine;
        let door = match Door::open(event, client_context, qualifier, &engine.doors.gate) {
            Ok(door) => door,
            Err(refusal) => {
                tracing::debug!(reason = %refusal.reason, "refused event");
                let outcome = match refusal.kind {
                    RefusalKind::BadEvent => Outcome::BadRequest,
                    RefusalKind::DoorRefused => Outcome::DoorRefused,
                };
                let answered = Handled::new(outcome, refusal.response).because(refusal.reason);
                return (refusal.door, answered);
            }
        };
        let name = Some(door.name());
        let dispatcher = &self.dispatcher;
        let answered = match door {
            Door::Interceptor(Interception(read)) => {
                crate::doors::interceptor::flow::intercept(engine, read, end).await
            }
            Door::Bedrock(call) => crate::invoking::answer(engine, dispatcher, &call, end).await,
            Door::AgentCore(call) => crate::invoking::answer(engine, dispatcher, &call, end).await,
            Door::Envelope(call) => crate::invoking::answer(engine, dispatcher, &call, end).await,
        };
        (name, answered)
    }
}

/// The executor's settings: the configured mode, TTL, wait and cache, with its built-in margins.
/// This module and `main` are the only readers of [`Config`]: each component gets its own
/// settings from here.
fn executor_settings(config: &Config) -> Settings {
    Settings {
        mode: config.mode,
        ttl: config.ttl,
        wait: config.wait,
        local_cache_items: config.local_cache_items,
        // A release is a write, as a claim's first part is: the same budget.
        orphan_release_within: config.claim.write_within,
        ..Settings::default()
    }
}

/// How the doors scope a call, as configured.
fn door_settings(config: &Config) -> DoorSettings {
    DoorSettings {
        scope: config.scope,
        step_attribute: config.step_attribute.clone(),
        run_argument: config.run_argument.clone(),
        envelope_namespaces: config.envelope_namespaces.clone(),
        release_on_errors: config.release_on_errors.clone(),
        release_on_rpc_errors: config.release_on_rpc_errors.clone(),
        target_key_header: config.target_key_header.clone(),
        sessionless: config.sessionless,
        trusted_annotations: config
            .trusted_annotations
            .iter()
            .map(|g| crate::doors::agentcore::gateway_id(g).to_string())
            .collect(),
        gate: Gate {
            served: config.doors,
            interceptor_alias: config.interceptor_alias.clone(),
            gateway_id: config.gateway_id.clone(),
        },
        interceptor_timeout: config.interceptor_timeout,
        replay_marker: config.replay_marker,
        idempotency_key_name: config.idempotency_key_name.clone(),
        envelope_caller_key_scope: config.envelope_caller_key_scope,
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn wall_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// The Lambda deadline (wall clock) as a monotonic instant; `default_budget` from now without one.
fn deadline_instant(deadline_ms: Option<i64>, default_budget: Duration) -> Instant {
    let now = Instant::now();
    match deadline_ms {
        Some(deadline) => {
            let wall_now = wall_now_ms();
            now + Duration::from_millis(u64::try_from(deadline - wall_now).unwrap_or(0))
        }
        None => now + default_budget,
    }
}

impl<S: Records, D: Dispatcher> Handler<S, D> {
    /// Runs a sweep (a scheduled invocation: the crate's `sweep` module), reports it and announces each
    /// call it settled as outcome unknown. A store that cannot be read fails the invocation, so the
    /// schedule's failures show in the function's errors.
    pub async fn sweep(&self, invocation: &Invocation) -> Result<Box<RawValue>, HandlerError> {
        let end = deadline_instant(invocation.deadline_ms, self.settings().default_budget);
        let reply_margin = self.settings().reply_margin;
        let has_time =
            || crate::executor::remaining(end) > reply_margin + crate::sweep::RECORD_WITHIN;
        let swept = crate::sweep::sweep(self.store(), &self.announcer(invocation, end), has_time)
            .await
            .map_err(|e| HandlerError::Internal(format!("the sweep cannot read the store: {e}")))?;
        self.engine
            .telemetry
            .swept(&invocation.request_id, swept.found, swept.settled.len());
        let answer = serde_json::json!({
            "swept": swept.found,
            "settled": swept.settled.len(),
            "settled_keys": swept.settled,
            "left_for_next": swept.left_for_next,
        });
        serde_json::value::to_raw_value(&answer).map_err(|e| HandlerError::Internal(e.to_string()))
    }

    /// One invocation: a sweep, or a call through its door.
    pub(crate) async fn invoked(
        &self,
        event: &Value,
        invocation: &Invocation,
        client_context: Option<&ClientContext>,
    ) -> Result<Box<RawValue>, HandlerError> {
        if crate::sweep::is_sweep(event) {
            return self.sweep(invocation).await;
        }
        self.handle_with_context(event, invocation, client_context)
            .await
            .response
    }
}

/// Announces the calls an invocation (or a sweep) settled as outcome unknown on the event bus, if
/// there is one, each within what is left before the invocation's answer is due.
struct Announcer<'a> {
    events: Option<&'a EventBus>,
    request_id: &'a str,
    end: Instant,
    reply_margin: std::time::Duration,
}

impl Announcer<'_> {
    async fn announce(&self, key: &str, tool: &str, door: Option<&str>) {
        if let Some(events) = self.events {
            let call = UnknownOutcome {
                key,
                tool: Some(tool),
                door,
                request_id: self.request_id,
            };
            let within = crate::executor::remaining(self.end).saturating_sub(self.reply_margin);
            events.outcome_unknown(&call, within).await;
        }
    }
}

impl crate::sweep::Announce for Announcer<'_> {
    async fn announce(&self, record: &Record) {
        Announcer::announce(self, &record.key, &record.tool, record.about.door()).await;
    }
}

/// Runs `handler` on the Lambda Runtime API (the crate's own `runtime` loop: every invocation is answered).
pub async fn serve<S, D>(handler: Handler<S, D>) -> Result<(), RuntimeError>
where
    S: Records + 'static,
    D: Dispatcher + 'static,
{
    crate::runtime::serve(|event, invocation, client_context| {
        let handler = &handler;
        async move {
            handler
                .invoked(&event, &invocation, client_context.as_ref())
                .await
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(deadline: u64) -> Context {
        let mut ctx = Context::default();
        ctx.request_id = "r".into();
        ctx.deadline = deadline;
        ctx
    }

    #[test]
    fn only_a_future_epoch_deadline_counts() {
        let future = (wall_now_ms() + 30_000) as u64;
        assert_eq!(
            Invocation::from_context(&context(future)).deadline_ms,
            Some(future as i64)
        );
        // `cargo lambda watch` sends its timeout (600000 ms), not an epoch time.
        assert_eq!(
            Invocation::from_context(&context(600_000)).deadline_ms,
            None
        );
        assert_eq!(Invocation::from_context(&context(0)).deadline_ms, None);
    }

    #[test]
    fn the_qualifier_is_the_invoked_arns_eighth_field() {
        let through = |arn: &str| {
            let mut ctx = context(0);
            ctx.invoked_function_arn = arn.into();
            Invocation::from_context(&ctx).qualifier
        };
        let function = "arn:aws:lambda:us-east-1:123456789012:function:dedup";
        assert_eq!(
            through(&format!("{function}:interceptor")).as_deref(),
            Some("interceptor")
        );
        assert_eq!(through(&format!("{function}:7")).as_deref(), Some("7"));
        assert_eq!(through(function), None);
        assert_eq!(through(""), None);
    }
}
