//! The Lambda handler: the state machine of one invocation, whatever door it came in by.
//!
//! 1. **Detect** the entry point ([`Door::detect`]: AgentCore Gateway, Bedrock Agents action
//!    group, invoke envelope, first match wins) and **route** the call. An event no entry point
//!    recognises is a Lambda error naming the three expected.
//! 2. **Key** it: the adapter's [`crate::seam::ToolCall`] (tool, arguments, namespace, run,
//!    step, declared schema) overlaid with the policy file's schema, through the typed keyer.
//! 3. **Run** it through the [`Executor`]: claim; on first sight invoke the routed tool with the
//!    payload it would have received directly (plus the key), check the reply, store it; replay a
//!    completed call byte for byte; wait for an identical call in flight, bounded by the smaller
//!    of `DEDUP_WAIT_MS` and the time left before the Lambda deadline.
//! 4. **Answer** in the caller's format ([`EntryPoint::result`], [`EntryPoint::notice`]) and report.
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
//! | tool failed while acting (FAILURE, HTTP 5xx, MCP `isError`) | yes | completed | the tool's reply, replayed to repeats |
//! | tool refused its input (REPROMPT, HTTP 4xx but 409/429) | yes | released (nothing happened) | the tool's reply |
//! | tool said "not now" (HTTP 409, 429) | yes | kept until its lease ends | the tool's reply |
//!
//! The lease runs to the later of the Lambda deadline and the end of the tool's own timeout plus
//! its start allowance ([`Dispatcher::max_run_time`]), plus a margin for clock skew, so nobody
//! takes a key over while its tool may still be running, and a killed invocation blocks its key
//! only until then. A claim the store was slow to answer moves the lease just before the tool is
//! invoked. The tool's timeout ends early enough for the completion to be stored before the
//! deadline. Completion and release are fenced by the lease token (see [`crate::executor`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::agentcore::{self, GatewayCall};
use crate::bedrock::{ActionGroupCall, EventError};
use crate::catalog::Catalogs;
use crate::config::{Config, ErrorTypes, Mode, Scope, Sessionless};
use crate::decide::RunEnd;
use crate::dispatch::{DispatchError, Dispatcher};
use crate::envelope;
use crate::executor::{
    CallerKey, Executor, Finished, FinishedElsewhere, Keyed, Lease, Opened, Outcome, Settled,
    ToolRun, remaining,
};
use crate::interceptor::{Interception, InterceptorError, Phase};
use crate::key::{Call, CallerKeyError, Delivery, Keyer};
use crate::seam::{
    Answers, DedupInfo, EntryPoint, Notice, NoticeKind, Scoping, ToolCall, Unkeyed, json_type,
    refusal,
};
use crate::store::{Store, StoreError};
use crate::telemetry::{InvocationReport, Telemetry};

pub use crate::executor::Settings;

/// Errors returned to the Lambda runtime: only for invocations no answer in the caller's format
/// can reach.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The event is not one any entry point can answer in its own format.
    #[error(transparent)]
    InvalidEvent(Unanswerable),
    /// A reply could not be written (a bug, never the caller's input).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<HandlerError> for Diagnostic {
    fn from(e: HandlerError) -> Diagnostic {
        let error_type = match &e {
            HandlerError::InvalidEvent(_) => "InvalidEvent",
            HandlerError::Internal(_) => "Internal",
        };
        Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// An event that no entry point can answer in its own format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswerable {
    /// Recognised as an action-group event, but without what a Bedrock response needs.
    #[error(transparent)]
    Bedrock(EventError),
    /// Marked as a Gateway interceptor invocation, but not one this door can answer.
    #[error(transparent)]
    Interceptor(InterceptorError),
    /// No entry point recognises it.
    #[error(
        "not a Bedrock Agents action-group event, an AgentCore Gateway call or an invoke envelope: {0}. \
         Expected, in this order: a Lambda client context with custom.bedrockAgentCoreToolName \
         (AgentCore Gateway), an object with \"actionGroup\" (Bedrock Agents), an object with \"tool\" \
         (invoke envelope)"
    )]
    NoEntryPoint(String),
}

/// One invocation as seen by the entry point it came in by.
// One per invocation, on the stack and never in a collection: boxing the large variant would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Door<'a> {
    /// A Bedrock Agents action-group event.
    Bedrock(ActionGroupCall<'a>),
    /// An AgentCore Gateway Lambda-target call.
    AgentCore(GatewayCall<'a>),
    /// The harness-neutral invoke envelope.
    Envelope(envelope::Envelope),
}

/// An invocation refused before it had a call: already written in the caller's format.
#[derive(Debug)]
pub struct Refusal {
    /// The answer to send.
    pub response: Result<Box<RawValue>, HandlerError>,
    /// Why the invocation was refused, for the telemetry line.
    pub reason: String,
    /// The tool, when the refusal got that far.
    pub tool: Option<String>,
}

impl<'a> Door<'a> {
    /// Flavour detection: the first match wins, in this order (each test is a map lookup):
    /// 1. the client context names an AgentCore Gateway tool (`bedrockAgentCoreToolName`);
    /// 2. the event is an object with `actionGroup` (Bedrock Agents);
    /// 3. the event is an object with `tool` (the invoke envelope).
    ///
    /// A recognised event that is malformed is refused in its own format where it can be.
    pub fn detect(
        event: &'a Value,
        client_context: Option<&'a HashMap<String, String>>,
    ) -> Result<Door<'a>, Refusal> {
        if let Some(custom) = client_context.filter(|c| agentcore::is_gateway_call(Some(c))) {
            return GatewayCall::parse(event, custom)
                .map(Door::AgentCore)
                .map_err(|e| {
                    let notice = agentcore::gateway_refusal(&e);
                    Refusal {
                        response: raw(notice.body_json()),
                        reason: e.to_string(),
                        tool: None,
                    }
                });
        }
        let object = event.as_object();
        if object.is_some_and(|o| o.contains_key("actionGroup")) {
            return ActionGroupCall::parse(event)
                .map(Door::Bedrock)
                .map_err(|e| Refusal {
                    reason: "unrecognised event".into(),
                    response: Err(HandlerError::InvalidEvent(Unanswerable::Bedrock(e))),
                    tool: None,
                });
        }
        if envelope::is_envelope(event) {
            return envelope::Envelope::parse(event)
                .map(Door::Envelope)
                .map_err(|e| {
                    let notice = envelope::envelope_refusal(&e);
                    let dedup = dedup(Outcome::BadRequest, None);
                    Refusal {
                        response: raw(envelope::error(&notice, &dedup)),
                        reason: e.to_string(),
                        tool: None,
                    }
                });
        }
        let what = match event {
            Value::Object(_) => "an object with none of those members".to_string(),
            other => format!("the event is a JSON {}", json_type(other)),
        };
        Err(Refusal {
            reason: "unrecognised event".into(),
            response: Err(HandlerError::InvalidEvent(Unanswerable::NoEntryPoint(what))),
            tool: None,
        })
    }

    /// The parsed call behind the door (for callers that inspect one without running it).
    pub fn entry_point(&self) -> &dyn EntryPoint {
        match self {
            Door::Bedrock(call) => call,
            Door::AgentCore(call) => call,
            Door::Envelope(call) => call,
        }
    }
}

/// What the Lambda runtime tells one invocation.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// The Lambda request id.
    pub request_id: String,
    /// The Lambda deadline, epoch milliseconds; `None` without one.
    pub deadline_ms: Option<i64>,
}

/// The `custom` map of a Lambda client context (an AgentCore Gateway names the tool there).
pub type ClientContext = HashMap<String, String>;

impl Invocation {
    /// A deadline that has already passed cannot be real (the function would be frozen); some
    /// emulators (`cargo lambda watch`) send the timeout in milliseconds instead of an epoch
    /// time. Such a deadline counts as absent, so the default budget applies.
    pub fn from_context(ctx: &Context) -> Invocation {
        let deadline_ms = i64::try_from(ctx.deadline)
            .ok()
            .filter(|d| *d > wall_now_ms());
        if deadline_ms.is_none() {
            tracing::debug!(
                deadline = ctx.deadline,
                "deadline is not a future epoch time; using the default budget"
            );
        }
        Invocation {
            request_id: ctx.request_id.clone(),
            deadline_ms,
        }
    }
}

/// The answer to one invocation, with what happened.
#[derive(Debug)]
pub struct Handled {
    /// What happened to the call.
    pub outcome: Outcome,
    /// The answer to send.
    pub response: Result<Box<RawValue>, HandlerError>,
    /// The derived key (32 hex digits), when the call got that far.
    pub key: Option<String>,
    /// For replays: the normalization rules that made this call meet the stored one (empty when
    /// the strict fingerprints are equal).
    pub rules: Vec<&'static str>,
}

/// The handler, generic over its store and dispatcher (static dispatch).
pub struct Handler<S, D> {
    executor: Executor<S>,
    doors: DoorSettings,
    catalogs: Catalogs,
    dispatcher: D,
    telemetry: Telemetry,
}

/// The handler's own knobs: how the doors scope a call, and which tool errors prove nothing ran.
#[derive(Debug, Clone)]
pub struct DoorSettings {
    /// `DEDUP_SCOPE`: a Bedrock call's step is its turn, or none.
    pub scope: Scope,
    /// `DEDUP_STEP_ATTRIBUTE`: the session attribute or argument that names the step.
    pub step_attribute: String,
    /// `DEDUP_RUN_ARGUMENT`: the argument an AgentCore call names its run by when the Gateway
    /// sends no session.
    pub run_argument: String,
    /// `DEDUP_ENVELOPE_NAMESPACES`: the namespaces an envelope may name (`None`: any).
    pub envelope_namespaces: Option<Vec<String>>,
    /// `DEDUP_RELEASE_ON_ERRORS`: tool error types that prove nothing ran; only these release
    /// the claim.
    pub release_on_errors: ErrorTypes,
    /// `DEDUP_SESSIONLESS`: what a Gateway call that names no run gets.
    pub sessionless: Sessionless,
    /// `DEDUP_TRUSTED_ANNOTATIONS`: the gateways whose MCP tool annotations are acted on.
    pub trusted_annotations: Vec<String>,
    /// `DEDUP_INTERCEPTOR_TIMEOUT_SECONDS`: the longest a Gateway target may take.
    pub interceptor_timeout: Duration,
    /// `DEDUP_IDEMPOTENCY_KEY_NAME`: where a caller's own idempotency key travels.
    pub idempotency_key_name: String,
}

impl DoorSettings {
    /// The settings `config` gives.
    pub fn from_config(config: &Config) -> DoorSettings {
        DoorSettings {
            scope: config.scope,
            step_attribute: config.step_attribute.clone(),
            run_argument: config.run_argument.clone(),
            envelope_namespaces: config.envelope_namespaces.clone(),
            release_on_errors: config.release_on_errors.clone(),
            sessionless: config.sessionless,
            trusted_annotations: config.trusted_annotations.clone(),
            interceptor_timeout: config.interceptor_timeout,
            idempotency_key_name: config.idempotency_key_name.clone(),
        }
    }

    /// Whether the annotations that `gateway`'s tools are listed with are acted on.
    pub fn trusts_annotations(&self, gateway: &str) -> bool {
        self.trusted_annotations
            .iter()
            .any(|g| g == "*" || g == gateway)
    }

    fn scoping(&self) -> Scoping<'_> {
        Scoping {
            step_attribute: &self.step_attribute,
            run_argument: &self.run_argument,
            scope: self.scope,
            envelope_namespaces: self.envelope_namespaces.as_deref(),
            sessionless: self.sessionless,
            caller_key_name: &self.idempotency_key_name,
        }
    }
}

/// A call's store key and fingerprint: the caller's own key when it sent one (its arguments'
/// typed form as the fingerprint, and their leaf digests), else the typed key.
struct CallKey {
    key: String,
    fingerprint: String,
    /// For a caller-keyed call: its leaf digests (`None` inside: too many to store).
    caller: Option<Option<String>>,
}

impl CallKey {
    /// Keys `call` (`key_call` is its key-core view); the notice refuses what cannot be keyed.
    fn derive(keyer: &Keyer, call: &ToolCall, key_call: &Call<'_>) -> Result<CallKey, Notice> {
        let invalid_arguments =
            |e: &dyn std::fmt::Display| refusal(NoticeKind::InvalidArguments, &e.to_string());
        match &call.caller_key {
            Some(caller_key) => match keyer.caller_keyed(key_call, caller_key) {
                Ok(keyed) => Ok(CallKey {
                    key: keyed.key.to_string(),
                    fingerprint: keyed.fingerprint.to_string(),
                    caller: Some(keyed.path_digests),
                }),
                Err(CallerKeyError::Arguments(e)) => Err(invalid_arguments(&e)),
                Err(e) => Err(refusal(NoticeKind::InvalidEvent, &e.to_string())),
            },
            None => {
                let (key, fingerprint) = keyer
                    .key_and_fingerprint(key_call)
                    .map_err(|e| invalid_arguments(&e))?;
                Ok(CallKey {
                    key: key.to_string(),
                    fingerprint: fingerprint.to_string(),
                    caller: None,
                })
            }
        }
    }

    fn keyed<'a>(&'a self, call: &'a Call<'a>, delivery: Delivery) -> Keyed<'a> {
        Keyed {
            key: &self.key,
            fingerprint: &self.fingerprint,
            call,
            delivery,
            caller: self.caller.as_ref().map(|digests| CallerKey {
                path_digests: digests.as_deref(),
            }),
        }
    }
}

/// How one invocation ended: the answer and what the report says about it.
#[derive(Debug)]
struct Answered {
    outcome: Outcome,
    response: Result<Box<RawValue>, HandlerError>,
    tool: Option<String>,
    key: Option<String>,
    rules: Vec<&'static str>,
    /// A short reason for error outcomes (never argument values).
    reason: Option<String>,
}

impl Answered {
    fn new(outcome: Outcome, response: Result<Box<RawValue>, HandlerError>) -> Answered {
        Answered {
            outcome,
            response,
            tool: None,
            key: None,
            rules: Vec::new(),
            reason: None,
        }
    }

    fn because(mut self, reason: impl Into<String>) -> Answered {
        self.reason = Some(reason.into());
        self
    }

    fn tool(mut self, tool: &str) -> Answered {
        self.tool = Some(tool.to_string());
        self
    }
}

/// Why the tool gave no usable reply.
#[derive(Debug)]
enum ToolFailure {
    Dispatch(DispatchError),
    /// The event could not be forwarded: the tool did not run.
    Unforwardable(String),
    /// The tool ran, but its reply is not one of the caller's format; the reason says why.
    MalformedReply(String),
}

impl<S: Store, D: Dispatcher> Handler<S, D> {
    /// A handler over `store` and `dispatcher`, with the keyer, executor and door settings
    /// `config` gives.
    pub fn new(store: S, dispatcher: D, config: &Config, telemetry: Telemetry) -> Handler<S, D> {
        let keyer = Keyer::new().with_policies(config.policies.clone());
        Handler {
            executor: Executor::new(store, keyer, Settings::from_config(config)),
            doors: DoorSettings::from_config(config),
            catalogs: Catalogs::new(config.catalog_ttl),
            dispatcher,
            telemetry,
        }
    }

    /// Adjusts the settings (tests shorten margins and budgets).
    pub fn with_settings(mut self, adjust: impl FnOnce(&mut Settings)) -> Handler<S, D> {
        self.executor = self.executor.with_settings(adjust);
        self
    }

    /// The store claims are made in.
    pub fn store(&self) -> &S {
        self.executor.store()
    }

    /// The dispatcher tools are invoked through.
    pub fn dispatcher(&self) -> &D {
        &self.dispatcher
    }

    /// The executor's settings.
    pub fn settings(&self) -> &Settings {
        self.executor.settings()
    }

    /// The Lambda entry point: the payload and the context (deadline, client context).
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
        let store = self.executor.store();
        let requests_before = store.requests();
        let end = deadline_instant(invocation.deadline_ms, self.settings().default_budget);
        let answered = self.answer(event, client_context, end).await;
        let store_requests = (store.requests() - requests_before).total();
        self.telemetry.invocation(&InvocationReport {
            request_id: &invocation.request_id,
            mode: self.settings().mode,
            outcome: answered.outcome,
            tool: answered.tool.as_deref(),
            key: answered.key.as_deref(),
            latency: started.elapsed(),
            store_requests,
            rules: &answered.rules,
            reason: answered.reason.as_deref(),
        });
        Handled {
            outcome: answered.outcome,
            response: answered.response,
            key: answered.key,
            rules: answered.rules,
        }
    }

    async fn answer(
        &self,
        event: &Value,
        client_context: Option<&ClientContext>,
        end: Instant,
    ) -> Answered {
        if crate::interceptor::is_interception(event) {
            return self.intercept(event, client_context, end).await;
        }
        match Door::detect(event, client_context) {
            Ok(Door::Bedrock(call)) => self.answer_at(&call, end).await,
            Ok(Door::AgentCore(call)) => self.answer_at(&call, end).await,
            Ok(Door::Envelope(call)) => self.answer_at(&call, end).await,
            Err(refusal) => {
                tracing::debug!(reason = %refusal.reason, "refused event");
                let mut answered =
                    Answered::new(Outcome::BadRequest, refusal.response).because(refusal.reason);
                answered.tool = refusal.tool;
                answered
            }
        }
    }

    /// A Gateway interceptor invocation (see [`crate::interceptor`]): a `tools/call` is claimed
    /// at REQUEST and settled at RESPONSE; every other message passes through.
    async fn intercept(
        &self,
        event: &Value,
        client_context: Option<&ClientContext>,
        end: Instant,
    ) -> Answered {
        let interception = match Interception::parse(event, client_context) {
            Ok(interception) => interception,
            Err(e) => {
                let reason = e.to_string();
                return Answered::new(
                    Outcome::BadRequest,
                    Err(HandlerError::InvalidEvent(Unanswerable::Interceptor(e))),
                )
                .because(reason);
            }
        };
        let request = interception.phase == Phase::Request;
        let pass = |outcome: Outcome| {
            let text = if request {
                interception.pass_request()
            } else {
                interception.pass_response()
            };
            Answered::new(outcome, raw(text))
        };
        let settings = self.settings();
        if let Some(listed) = interception.listed_tools() {
            if settings.mode != Mode::Off {
                self.learn(&interception, listed).await;
            }
            return pass(Outcome::PassedOn).because("tools/list learned");
        }
        let call = match interception.tools_call() {
            Some(Ok(call)) if settings.mode != Mode::Off => call,
            Some(Err(notice)) if request && settings.mode != Mode::Off => {
                return Answered::new(Outcome::BadRequest, raw(interception.refusal(&notice)))
                    .because("invalid tools/call");
            }
            _ => return pass(Outcome::PassedOn),
        };
        let mut tool_call = match interception.tool_call(
            &call,
            &self.doors.step_attribute,
            &self.doors.idempotency_key_name,
            self.doors.sessionless,
        ) {
            Ok(tool_call) => tool_call,
            Err(Unkeyed::Sessionless(missing)) => {
                if request {
                    warn_sessionless(call.tool, &missing);
                }
                return pass(Outcome::Sessionless)
                    .tool(call.tool)
                    .because("sessionless");
            }
            Err(Unkeyed::Refused(notice)) if request => return self.refuse(&call, notice),
            Err(Unkeyed::Refused(_)) => return pass(Outcome::PassedOn),
        };
        let keyer = self.executor.keyer();
        let mut delivery = keyer.delivery(&tool_call.tool);
        // A policy file entry always wins over what a listing taught.
        if keyer.policies().get(&tool_call.tool).is_none() {
            match self
                .catalogs
                .lookup(self.store(), &tool_call.namespace)
                .await
            {
                Ok(catalog) => {
                    let learned = catalog.as_deref().and_then(|c| c.tool(call.tool));
                    if let Some(learned) = learned {
                        if learned.read_only == Some(true)
                            && self.doors.trusts_annotations(interception.gateway())
                        {
                            return pass(Outcome::DedupOff)
                                .tool(call.tool)
                                .because("read-only (trusted annotations)");
                        }
                        tool_call.schema = learned.schema.clone();
                        delivery = learned.delivery();
                    }
                }
                // Keying without the schema could give a retry another key: fail closed.
                Err(e) if settings.mode != Mode::Shadow => {
                    tracing::error!(error = %e, "could not read the tool catalog");
                    return if request {
                        self.notice(
                            &call,
                            Outcome::StoreError,
                            Notice::store_unavailable(call.tool),
                            None,
                        )
                    } else {
                        pass(Outcome::StoreError)
                    }
                    .because(e.to_string());
                }
                Err(_) => {}
            }
        }
        if !keyer.dedups(&tool_call.tool) {
            return pass(Outcome::DedupOff).tool(call.tool);
        }
        let key_call = tool_call.key_call();
        let call_key = match CallKey::derive(keyer, &tool_call, &key_call) {
            Ok(call_key) => call_key,
            Err(notice) if request && settings.mode != Mode::Shadow => {
                return self.refuse(&call, notice);
            }
            Err(_) => return pass(Outcome::PassedOn).tool(call.tool),
        };
        let keyed = call_key.keyed(&key_call, delivery);
        let key = call_key.key.clone();
        let owner = interception.owner(&key);
        let mut answered = if request {
            // The target runs after we answer, within the Gateway's own limit on a call.
            let lease = Lease::Covering {
                max_run_time: self.doors.interceptor_timeout,
            };
            match self
                .executor
                .open::<ToolFailure>(keyed, end, lease, &owner)
                .await
            {
                Opened::Claimed => {
                    pass(Outcome::Executed).because("claimed; the Gateway calls the target")
                }
                Opened::Unclaimed(outcome) => pass(outcome),
                Opened::Answered(finished) => {
                    self.telemetry.call(keyer, &key_call, finished.outcome);
                    self.settle(&call, finished, &key)
                }
            }
        } else {
            let Some(reply) = interception.target_reply() else {
                return pass(Outcome::PassedOn).tool(call.tool);
            };
            let (run_end, stored) = match &reply {
                Ok((result, class)) => (RunEnd::Replied(*class), result.as_bytes()),
                Err(outcome_unknown) => (
                    RunEnd::Failed {
                        outcome_unknown: *outcome_unknown,
                    },
                    &[][..],
                ),
            };
            match self
                .executor
                .finish_claimed(keyed, &owner, end, run_end, stored)
                .await
            {
                Ok(FinishedElsewhere::Settled(after)) => {
                    pass(Outcome::Executed).because(format!("settled: {after:?}"))
                }
                Ok(FinishedElsewhere::AlreadyCompleted) => pass(Outcome::PassedOn),
                Ok(FinishedElsewhere::NoClaim) => {
                    tracing::warn!(
                        "the target answered a call this request holds no claim on: passed on, not stored"
                    );
                    pass(Outcome::PassedOn).because("no claim of this request")
                }
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        "could not settle the call after the target ran; it stays claimed until its lease ends"
                    );
                    pass(Outcome::StoreError).because(format!("store: {e}"))
                }
            }
        };
        answered.key = Some(key);
        answered.tool = Some(call.tool.to_string());
        answered
    }

    /// Learns each target's tools from a `tools/list` answer (see [`crate::catalog`]). A catalog
    /// that cannot be written is only logged: the listing still reaches the client, and calls are
    /// keyed as before.
    async fn learn(
        &self,
        interception: &Interception<'_>,
        listed: std::collections::BTreeMap<&str, serde_json::Map<String, Value>>,
    ) {
        for (target, tools) in listed {
            let namespace = interception.namespace(target);
            match self.catalogs.learn(self.store(), &namespace, &tools).await {
                Ok(wrote) => {
                    tracing::debug!(target, tools = tools.len(), wrote, "learned tools/list")
                }
                Err(e) => {
                    tracing::warn!(target, error = %e, "could not store the learned tool catalog")
                }
            }
        }
    }

    /// Routes, keys and runs one call that came in by `door`.
    async fn answer_at<E: EntryPoint>(&self, door: &E, end: Instant) -> Answered {
        let tool = door.tool().to_string();
        let (group, tool_name) = door.route();
        let target = match self.dispatcher.route(group, tool_name) {
            Ok(target) => target,
            Err(e) => {
                return self
                    .notice(
                        door,
                        Outcome::ToolError,
                        Notice::no_route(&e.short_reason()),
                        None,
                    )
                    .because(e.to_string());
            }
        };
        let settings = self.settings();
        let scoping = self.doors.scoping();
        if settings.mode == Mode::Off {
            return self
                .pass_through(door, &target, scoping, end, Outcome::Executed)
                .await;
        }
        let call = match door.call(scoping) {
            Ok(call) => call,
            Err(_) if settings.mode == Mode::Shadow => {
                tracing::warn!("shadow mode: invalid event passed through unkeyed");
                return self
                    .pass_through(door, &target, scoping, end, Outcome::Executed)
                    .await;
            }
            Err(Unkeyed::Sessionless(missing)) => {
                warn_sessionless(&tool, &missing);
                return self
                    .pass_through(door, &target, scoping, end, Outcome::Sessionless)
                    .await
                    .because("sessionless");
            }
            Err(Unkeyed::Refused(notice)) => return self.refuse(door, notice),
        };
        let keyer = self.executor.keyer();
        if !keyer.dedups(&call.tool) {
            return self
                .pass_through(door, &target, scoping, end, Outcome::DedupOff)
                .await;
        }
        let key_call = call.key_call();
        let call_key = match CallKey::derive(keyer, &call, &key_call) {
            Ok(call_key) => call_key,
            Err(notice) if settings.mode == Mode::Shadow => {
                tracing::warn!(message = %notice.message, "shadow mode: unkeyable call passed through");
                return self
                    .pass_through(door, &target, scoping, end, Outcome::Executed)
                    .await;
            }
            Err(notice) => return self.refuse(door, notice),
        };
        let keyed = call_key.keyed(&key_call, keyer.delivery(&call.tool));
        let key = call_key.key.clone();
        let lease = Lease::Covering {
            max_run_time: self.dispatcher.max_run_time(&target),
        };
        let finished = self
            .executor
            .run(keyed, end, lease, |timeout| {
                self.invoke(door, &target, Some(&key), scoping, timeout)
            })
            .await;
        self.telemetry.call(keyer, &key_call, finished.outcome);
        let mut answered = self.settle(door, finished, &key);
        answered.key = Some(key);
        answered.tool = Some(tool);
        answered
    }

    /// Invokes the routed tool and checks its reply in the caller's format.
    async fn invoke(
        &self,
        door: &impl EntryPoint,
        target: &str,
        key: Option<&str>,
        scoping: Scoping<'_>,
        timeout: Duration,
    ) -> ToolRun<ToolFailure> {
        let forward = match door.forward(key, scoping) {
            Ok(forward) => forward,
            Err(reason) => {
                return ToolRun::Failed {
                    error: ToolFailure::Unforwardable(format!(
                        "cannot forward the event: {reason}"
                    )),
                    outcome_unknown: false,
                };
            }
        };
        match self
            .dispatcher
            .invoke_forward(target, forward, timeout)
            .await
        {
            Ok(reply) => match door.classify(&reply) {
                Ok(class) => ToolRun::Replied { reply, class },
                // The tool answered, so it ran: its side effect may have happened even though
                // its reply is unusable. Keep the claim until the lease ends, as for a timeout.
                Err(reason) => ToolRun::Failed {
                    error: ToolFailure::MalformedReply(reason),
                    outcome_unknown: true,
                },
            },
            Err(e) => ToolRun::Failed {
                outcome_unknown: e.outcome_unknown(&self.doors.release_on_errors),
                error: ToolFailure::Dispatch(e),
            },
        }
    }

    /// Turns how the executor settled the call into the caller's answer.
    fn settle(&self, door: &impl Answers, finished: Finished<ToolFailure>, key: &str) -> Answered {
        let Finished {
            settled,
            outcome,
            rules,
        } = finished;
        let tool = door.tool();
        let mut answered = match settled {
            Settled::Executed { reply } => Answered::new(
                outcome,
                reply_answer(door, &reply, dedup(outcome, Some(key))),
            ),
            Settled::Replayed { reply } => Answered::new(
                outcome,
                reply_answer(door, &reply, dedup(outcome, Some(key))),
            ),
            Settled::KeyReused { paths } => self
                .notice(
                    door,
                    outcome,
                    Notice::key_reused(tool, paths.as_deref()),
                    Some(key),
                )
                .because("idempotency key reused with other arguments"),
            Settled::OutcomeUnknown => self
                .notice(door, outcome, Notice::outcome_unknown(tool, key), Some(key))
                .because("outcome unknown (at_most_once); waits for an operator"),
            Settled::AlreadyRan { bytes } => self
                .notice(door, outcome, Notice::already_executed(tool), Some(key))
                .because(format!("result of {bytes} bytes was too large to store")),
            Settled::InProgress { retry_after_ms } => {
                let reason = match retry_after_ms {
                    Some(_) => "identical call still running",
                    None => "claim kept racing with identical calls",
                };
                self.notice(
                    door,
                    outcome,
                    Notice::in_progress(tool, retry_after_ms),
                    Some(key),
                )
                .because(reason)
            }
            Settled::StoreDown(e @ StoreError::ResultUnavailable { .. }) => {
                tracing::error!(error = %e, "the stored result is unavailable; the call is not run again");
                self.notice(door, outcome, Notice::result_unavailable(tool), Some(key))
                    .because(e.to_string())
            }
            Settled::StoreDown(e) => {
                tracing::error!(error = ?e, "idempotency store unavailable; failing closed");
                self.notice(
                    door,
                    Outcome::StoreError,
                    Notice::store_unavailable(tool),
                    Some(key),
                )
                .because(format!("store: {e}"))
            }
            Settled::ToolFailed {
                error,
                outcome_unknown,
            } => self.tool_failed(door, &error, outcome_unknown, Some(key)),
            Settled::NoTime => self
                .notice(door, Outcome::ToolError, Notice::no_time(), Some(key))
                .because("no time left before the Lambda deadline"),
        };
        answered.rules = rules;
        answered
    }

    fn tool_failed(
        &self,
        door: &impl Answers,
        error: &ToolFailure,
        outcome_unknown: bool,
        key: Option<&str>,
    ) -> Answered {
        let (notice, reason) = match error {
            ToolFailure::MalformedReply(reason) => (Notice::malformed_reply(), reason.clone()),
            ToolFailure::Unforwardable(reason) => (Notice::unforwardable(), reason.clone()),
            ToolFailure::Dispatch(e) => {
                // The tool's own error message may quote its arguments: only at DEBUG.
                tracing::debug!(error = %e, "tool error");
                let reason = e.short_reason();
                (Notice::tool_failed(&reason, outcome_unknown), reason)
            }
        };
        self.notice(door, Outcome::ToolError, notice, key)
            .because(reason)
    }

    fn notice(
        &self,
        door: &impl Answers,
        outcome: Outcome,
        notice: Notice,
        key: Option<&str>,
    ) -> Answered {
        Answered::new(outcome, raw(door.notice(&notice, dedup(outcome, key)))).tool(door.tool())
    }

    fn refuse(&self, door: &impl Answers, notice: Notice) -> Answered {
        tracing::debug!(message = %notice.message, "invalid event");
        let reason = match notice.kind {
            NoticeKind::InvalidArguments => "invalid arguments",
            _ => "invalid event",
        };
        self.notice(door, Outcome::BadRequest, notice, None)
            .because(reason)
    }

    /// `DEDUP_MODE=off`, shadow mode's unkeyable calls, and tools whose policy says
    /// `dedup = "off"`: the event goes to the tool as it came, and its reply comes back unchanged,
    /// reported as `outcome`.
    async fn pass_through(
        &self,
        door: &impl EntryPoint,
        target: &str,
        scoping: Scoping<'_>,
        end: Instant,
        outcome: Outcome,
    ) -> Answered {
        let timeout = remaining(end).saturating_sub(self.settings().reply_margin);
        let run = self.invoke(door, target, None, scoping, timeout).await;
        let answered = match run {
            ToolRun::Replied { reply, .. } => {
                Answered::new(outcome, reply_answer(door, &reply, dedup(outcome, None)))
            }
            ToolRun::Failed {
                error,
                outcome_unknown,
            } => self.tool_failed(door, &error, outcome_unknown, None),
        };
        answered.tool(door.tool())
    }
}

fn dedup(outcome: Outcome, key: Option<&str>) -> DedupInfo<'_> {
    DedupInfo {
        outcome: outcome.caller_word(),
        key,
    }
}

/// The answer carrying the tool's reply (checked JSON when it was stored).
fn reply_answer(
    door: &impl Answers,
    reply: &[u8],
    dedup: DedupInfo<'_>,
) -> Result<Box<RawValue>, HandlerError> {
    let text = std::str::from_utf8(reply)
        .map_err(|e| HandlerError::Internal(format!("reply is not UTF-8: {e}")))?;
    raw(door.result(text, dedup))
}

/// Every sessionless call that runs is warned about, so that a deployment never believes it is
/// protected when it is not.
fn warn_sessionless(tool: &str, missing: &str) {
    tracing::warn!(
        tool,
        "sessionless call: {missing}; it runs WITHOUT dedup (DEDUP_SESSIONLESS=pass_through). \
         Send a session id, or choose gateway_scope or refuse"
    );
}

/// JSON text as the Lambda's answer.
fn raw(text: String) -> Result<Box<RawValue>, HandlerError> {
    RawValue::from_string(text)
        .map_err(|e| HandlerError::Internal(format!("reply is not JSON: {e}")))
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

/// Runs `handler` under the Lambda runtime.
pub async fn serve<S, D>(handler: Handler<S, D>) -> Result<(), lambda_runtime::Error>
where
    S: Store + 'static,
    D: Dispatcher + 'static,
{
    let handler = Arc::new(handler);
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: LambdaEvent<Value>| {
            let handler = handler.clone();
            async move { handler.lambda(event).await }
        },
    ))
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
}
