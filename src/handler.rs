//! The action-group executor: claim, dispatch once, replay.
//!
//! For each call the handler derives the typed key (namespace, tool, session, step, normalized
//! arguments) and claims it in the store:
//!
//! - **Claimed** (first sight): invoke the tool with the original event plus
//!   `sessionAttributes.dedup_key`, check its reply is a Bedrock response, store it, return it.
//! - **Completed**: return the stored reply, byte for byte, and log which normalization rules
//!   made this call meet the stored one.
//! - **In progress**: poll with backoff until the record completes (answer with its reply), is
//!   released or its lease ends (claim again), or the wait bound passes: the smaller of
//!   `DEDUP_WAIT_MS` and the time left before the Lambda deadline. Then answer REPROMPT: the
//!   identical earlier call is still running. (Powertools raises an error here.)
//!
//! Failures are answered, never thrown, whenever a Bedrock response can be addressed:
//!
//! | situation | tool called? | claim | answer |
//! |---|---|---|---|
//! | event not recognisable | no | none | Lambda error (`InvalidEvent`) |
//! | no session / bad parameter type | no | none | FAILURE |
//! | argument does not match its declared type | no | none | REPROMPT |
//! | no route for the tool | no | none | FAILURE |
//! | store unreachable | **no** (fail closed) | none | REPROMPT saying why |
//! | tool error whose type says nothing ran (`DEDUP_RELEASE_ON_ERRORS`) | no | released | REPROMPT |
//! | tool crashed, timed out, ran out of memory, or any other `FunctionError` | maybe | kept until its lease ends | REPROMPT |
//! | no answer in time, or the connection broke mid-invoke (outcome unknown) | maybe | kept until its lease ends | REPROMPT |
//! | invoke never sent (connection refused, DNS failure) or refused by Lambda (4xx) | no | released | REPROMPT |
//! | tool reply not a Bedrock response | yes | released | REPROMPT |
//! | tool reply too large to store | yes | completed without it | the reply; repeats are told it ran |
//! | tool FAILURE (declined card) | yes | completed (`DEDUP_CACHE_FAILURES=true`) or released | the tool's reply |
//! | tool REPROMPT (invalid input) | yes | released (nothing happened) | the tool's reply |
//!
//! The lease runs to the later of the Lambda deadline and the end of the tool's own timeout
//! ([`Dispatcher::max_run_time`]), plus a margin, so nobody takes a key over while its tool may
//! still be running, and a killed invocation blocks its key only until then. A record never
//! expires before its lease ends, and a completed one lives `DEDUP_TTL_SECONDS` from completion.
//! Completion and release are fenced by the lease token, so a late invocation can neither
//! overwrite nor delete a record someone else took over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::bedrock::{self, Envelope, EventError, ReplyClass, ReplyTo, ResponseState};
use crate::config::{Config, ErrorTypes, LEASE_MARGIN, Mode, Scope};
use crate::dispatch::{DispatchError, Dispatcher};
use crate::key::{Call, Keyer, Schema, Strategy};
use crate::store::{
    ClaimOutcome, ClaimRequest, Completion, LeaseToken, Record, Status, Store, StoreError,
};
use crate::telemetry::{InvocationReport, Outcome, Telemetry};

/// Timing and behaviour knobs, from [`Config`] plus fixed margins.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    pub scope: Scope,
    pub step_attribute: String,
    pub ttl: Duration,
    pub wait: Duration,
    pub cache_failures: bool,
    pub local_cache_items: usize,
    /// Tool error types that prove nothing ran: only these release the claim.
    pub release_on_errors: ErrorTypes,
    /// The lease ends this long after the later of the Lambda deadline and the tool's own
    /// timeout (clock skew between containers).
    pub lease_margin: Duration,
    /// Time kept back before the deadline to store the result and answer.
    pub answer_margin: Duration,
    /// The budget of an invocation without a deadline (`dedup replay`, tests).
    pub default_budget: Duration,
}

impl Settings {
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            mode: config.mode,
            scope: config.scope,
            step_attribute: config.step_attribute.clone(),
            ttl: config.ttl,
            wait: config.wait,
            cache_failures: config.cache_failures,
            local_cache_items: config.local_cache_items,
            release_on_errors: config.release_on_errors.clone(),
            lease_margin: LEASE_MARGIN,
            answer_margin: Duration::from_millis(1500),
            default_budget: Duration::from_secs(60),
        }
    }
}

/// What the Lambda runtime tells one invocation.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    pub request_id: String,
    /// The Lambda deadline, epoch milliseconds; `None` without one.
    pub deadline_ms: Option<i64>,
}

impl Invocation {
    /// A deadline that has already passed cannot be real (the function would be frozen); some
    /// emulators (`cargo lambda watch`) send the timeout in milliseconds instead of an epoch
    /// time. Such a deadline counts as absent, so the default budget applies.
    pub fn from_context(ctx: &Context) -> Invocation {
        let deadline_ms = i64::try_from(ctx.deadline)
            .ok()
            .filter(|d| *d > wall_now_ms());
        if deadline_ms.is_none() && ctx.deadline > 0 {
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
    pub outcome: Outcome,
    pub response: Result<Box<RawValue>, HandlerError>,
    /// The derived key (32 hex digits), when the call got that far.
    pub key: Option<String>,
    /// For replays: the normalization rules that made this call meet the stored one (empty when
    /// the strict fingerprints are equal).
    pub rules: Vec<&'static str>,
}

/// Errors returned to the Lambda runtime: only for events no Bedrock response can answer.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    InvalidEvent(EventError),
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

/// The executor, generic over its store and dispatcher (static dispatch).
pub struct Handler<S, D> {
    store: S,
    dispatcher: D,
    keyer: Keyer,
    settings: Settings,
    telemetry: Telemetry,
    cache: Option<RecordCache>,
}

/// Per-invocation state.
struct Run<'a> {
    event: &'a Value,
    /// The deadline on the monotonic clock.
    end: Instant,
    tool: Option<String>,
    key: Option<String>,
    /// The strict fingerprint of the arguments, stored with the result.
    fingerprint: Option<String>,
    rules: Vec<&'static str>,
    reason: Option<String>,
}

type Answer = (Outcome, Result<Box<RawValue>, HandlerError>);

/// What waiting for an in-flight call ended with.
enum Waited {
    Completed(Record),
    /// Released, expired or lease ended: claim again.
    Claimable,
    StillRunning(Record),
    Failed(StoreError),
}

/// Rounds of claim → wait → claim again before answering "in progress".
const MAX_CLAIM_ROUNDS: u32 = 3;
const FIRST_POLL: Duration = Duration::from_millis(25);
const MAX_POLL: Duration = Duration::from_millis(500);

impl<S: Store, D: Dispatcher> Handler<S, D> {
    pub fn new(store: S, dispatcher: D, config: &Config, telemetry: Telemetry) -> Handler<S, D> {
        let settings = Settings::from_config(config);
        let cache =
            (settings.local_cache_items > 0).then(|| RecordCache::new(settings.local_cache_items));
        Handler {
            store,
            dispatcher,
            keyer: Keyer::new().with_policies(config.policies.clone()),
            settings,
            telemetry,
            cache,
        }
    }

    /// Adjusts the settings (tests shorten margins and budgets).
    pub fn with_settings(mut self, adjust: impl FnOnce(&mut Settings)) -> Handler<S, D> {
        adjust(&mut self.settings);
        self.cache = (self.settings.local_cache_items > 0)
            .then(|| RecordCache::new(self.settings.local_cache_items));
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn dispatcher(&self) -> &D {
        &self.dispatcher
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The Lambda entry point.
    pub async fn lambda(&self, event: LambdaEvent<Value>) -> Result<Box<RawValue>, HandlerError> {
        let invocation = Invocation::from_context(&event.context);
        self.handle(&event.payload, &invocation).await.response
    }

    /// Handles one event and reports it.
    pub async fn handle(&self, event: &Value, invocation: &Invocation) -> Handled {
        let started = Instant::now();
        let requests_before = self.store.requests();
        let mut run = Run {
            event,
            end: deadline_instant(invocation.deadline_ms, self.settings.default_budget),
            tool: None,
            key: None,
            fingerprint: None,
            rules: Vec::new(),
            reason: None,
        };
        let (outcome, response) = self.run(&mut run).await;
        let store_requests = (self.store.requests() - requests_before).total();
        self.telemetry.invocation(&InvocationReport {
            request_id: &invocation.request_id,
            mode: self.settings.mode,
            outcome,
            tool: run.tool.as_deref(),
            key: run.key.as_deref(),
            latency: started.elapsed(),
            store_requests,
            rules: &run.rules,
            reason: run.reason.as_deref(),
        });
        Handled {
            outcome,
            response,
            key: run.key,
            rules: run.rules,
        }
    }

    async fn run(&self, run: &mut Run<'_>) -> Answer {
        let envelope = match Envelope::parse(run.event) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::debug!(error = %e, "unrecognised event");
                run.reason = Some("unrecognised event".into());
                return (Outcome::BadRequest, Err(HandlerError::InvalidEvent(e)));
            }
        };
        let reply_to = &envelope.reply_to;
        run.tool = Some(reply_to.tool().to_string());
        let target = match self
            .dispatcher
            .route(&reply_to.action_group, reply_to.tool())
        {
            Ok(target) => target,
            Err(e) => {
                run.reason = Some(e.to_string());
                let body = json!({"status": "no_route", "message": format!(
                    "{}. The call was not executed; this is a configuration problem, not the arguments.",
                    e.short_reason())});
                return (
                    Outcome::ToolError,
                    notice(reply_to, ResponseState::Failure, 500, &body),
                );
            }
        };
        if self.settings.mode == Mode::Off {
            return self.pass_through(run, reply_to, &target).await;
        }
        let call = match envelope.tool_call() {
            Ok(call) => call,
            Err(e) if self.settings.mode == Mode::Shadow => {
                tracing::warn!(error = %e, "shadow mode: invalid event passed through unkeyed");
                return self.pass_through(run, reply_to, &target).await;
            }
            Err(e) => return bad_event(run, e),
        };
        let step = bedrock::step(&call, &self.settings.step_attribute, self.settings.scope);
        let namespace = call.namespace();
        let schema = match self.schema_for(&call) {
            Ok(schema) => schema,
            Err(message) => {
                let e = EventError::Envelope {
                    reply_to: Box::new(call.reply_to.clone()),
                    message,
                };
                return bad_event(run, e);
            }
        };
        let key_call = Call {
            tool: call.tool(),
            args: &call.args,
            namespace: Some(&namespace),
            run_id: Some(&call.session_id),
            step: step.as_deref(),
            schema: Some(&schema),
        };
        let keyed = self
            .keyer
            .key(Strategy::Typed, &key_call)
            .and_then(|key| Ok((key, self.keyer.fingerprint(&key_call)?)));
        let (key, fingerprint) = match keyed {
            Ok((key, fingerprint)) => (key.to_string(), fingerprint.to_string()),
            Err(e) if self.settings.mode == Mode::Shadow => {
                tracing::warn!(error = %e, "shadow mode: unkeyable arguments passed through");
                return self.pass_through(run, reply_to, &target).await;
            }
            Err(e) => {
                let e = EventError::Arguments {
                    reply_to: Box::new(call.reply_to.clone()),
                    message: e.to_string(),
                };
                return bad_event(run, e);
            }
        };
        run.key = Some(key.clone());
        run.fingerprint = Some(fingerprint.clone());
        let answer = self
            .dedup(run, &call.reply_to, &key_call, &key, &fingerprint, &target)
            .await;
        self.telemetry.call(&self.keyer, &key_call, answer.0);
        answer
    }

    /// The declared types, overlaid with the policy file's schema for this tool.
    fn schema_for(&self, call: &bedrock::ToolCall) -> Result<Schema, String> {
        let declared =
            Schema::from_declared_types(call.declared_types()).map_err(|e| e.to_string())?;
        Ok(
            match self
                .keyer
                .policies()
                .get(call.tool())
                .and_then(|p| p.schema.as_ref())
            {
                Some(extra) => declared.overlay(extra),
                None => declared,
            },
        )
    }

    async fn dedup(
        &self,
        run: &mut Run<'_>,
        reply_to: &ReplyTo,
        call: &Call<'_>,
        key: &str,
        fingerprint: &str,
        target: &str,
    ) -> Answer {
        let shadow = self.settings.mode == Mode::Shadow;
        if !shadow {
            if let Some(hit) = self
                .cache
                .as_ref()
                .and_then(|c| c.get(key, self.store.now_ms()))
            {
                run.rules = self.meeting_rules(&hit.fingerprint, fingerprint, call);
                tracing::debug!("replayed from the warm-container cache");
                return (Outcome::Replayed, raw(hit.result.to_vec()));
            }
        }
        let wait_until = Instant::now() + self.wait_bound(run.end);
        for _round in 0..MAX_CLAIM_ROUNDS {
            let now = self.store.now_ms();
            // Until the later of our deadline and the tool's own timeout: a tool that outlives us
            // may still be running after our deadline.
            let lease = remaining(run.end).max(self.dispatcher.max_run_time(target))
                + self.settings.lease_margin;
            let request = ClaimRequest {
                key,
                fingerprint,
                tool: call.tool,
                lease_until_ms: now.saturating_add(millis(lease)),
                expires_at_s: self.expiry_from(now),
            };
            let record = match self.store.claim(request).await {
                Ok(ClaimOutcome::Claimed { token }) => {
                    return self
                        .execute(run, reply_to, key, Some(token), target, Outcome::Executed)
                        .await;
                }
                Err(e) if shadow => {
                    tracing::warn!(error = %e, "shadow mode: store unavailable, executing anyway");
                    return self
                        .execute(run, reply_to, key, None, target, Outcome::Executed)
                        .await;
                }
                Err(e) => return store_unavailable(run, reply_to, &e),
                Ok(ClaimOutcome::Completed(record)) if shadow => {
                    run.rules = self.meeting_rules(&record.fingerprint, fingerprint, call);
                    tracing::info!(rules = %run.rules.join(","), "shadow mode: would have replayed");
                    return self
                        .execute(run, reply_to, key, None, target, Outcome::ShadowReplay)
                        .await;
                }
                Ok(ClaimOutcome::InProgress(record)) if shadow => {
                    run.rules = self.meeting_rules(&record.fingerprint, fingerprint, call);
                    tracing::info!(rules = %run.rules.join(","), "shadow mode: would have waited for an in-flight call");
                    return self
                        .execute(run, reply_to, key, None, target, Outcome::ShadowReplay)
                        .await;
                }
                Ok(ClaimOutcome::Completed(record)) => {
                    return self.replay(
                        run,
                        reply_to,
                        record,
                        fingerprint,
                        call,
                        Outcome::Replayed,
                    );
                }
                Ok(ClaimOutcome::InProgress(record)) => record,
            };
            match self.wait(key, record, wait_until).await {
                Waited::Completed(record) => {
                    return self.replay(run, reply_to, record, fingerprint, call, Outcome::Waited);
                }
                Waited::Claimable => continue,
                Waited::StillRunning(record) => return self.in_progress(run, reply_to, &record),
                Waited::Failed(e) => return store_unavailable(run, reply_to, &e),
            }
        }
        match self.store.get(key).await {
            Ok(Some(record)) if record.status == Status::Completed => {
                self.replay(run, reply_to, record, fingerprint, call, Outcome::Waited)
            }
            Ok(Some(record)) => self.in_progress(run, reply_to, &record),
            Ok(None) => {
                run.reason = Some("claim kept racing with identical calls".into());
                let body = json!({"status": "in_progress", "message": "Identical calls are racing for this action; \
                    it was not executed by this request. Wait a moment, then check whether it happened before retrying."});
                (
                    Outcome::InProgress,
                    notice(reply_to, ResponseState::Reprompt, 409, &body),
                )
            }
            Err(e) => store_unavailable(run, reply_to, &e),
        }
    }

    fn wait_bound(&self, end: Instant) -> Duration {
        self.settings
            .wait
            .min(remaining(end).saturating_sub(self.settings.answer_margin))
    }

    /// Polls an in-flight record with backoff until it completes, becomes claimable, or `until`.
    async fn wait(&self, key: &str, mut record: Record, until: Instant) -> Waited {
        let mut delay = FIRST_POLL;
        loop {
            if record.is_claimable(self.store.now_ms()) {
                return Waited::Claimable;
            }
            let now = Instant::now();
            if now >= until {
                return Waited::StillRunning(record);
            }
            let jittered =
                delay / 2 + Duration::from_micros(fastrand::u64(0..=delay.as_micros() as u64 / 2));
            tokio::time::sleep(jittered.min(until - now)).await;
            delay = (delay * 2).min(MAX_POLL);
            match self.store.get(key).await {
                Err(e) => return Waited::Failed(e),
                Ok(None) => return Waited::Claimable,
                Ok(Some(r)) if r.status == Status::Completed => return Waited::Completed(r),
                Ok(Some(r)) => record = r,
            }
        }
    }

    /// Invokes the tool. With a `token` the claim is completed or released afterwards; without
    /// one (shadow repeats, a store that failed in shadow mode) nothing is written.
    async fn execute(
        &self,
        run: &mut Run<'_>,
        reply_to: &ReplyTo,
        key: &str,
        token: Option<LeaseToken>,
        target: &str,
        outcome: Outcome,
    ) -> Answer {
        let forwarded = bedrock::forward_event(run.event, Some(key));
        let payload = match serde_json::to_vec(&forwarded) {
            Ok(p) => p,
            Err(e) => {
                return (
                    Outcome::ToolError,
                    Err(HandlerError::Internal(e.to_string())),
                );
            }
        };
        let timeout = remaining(run.end).saturating_sub(self.settings.answer_margin);
        if timeout.is_zero() {
            self.release(key, token.as_ref()).await;
            run.reason = Some("no time left before the Lambda deadline".into());
            let body = json!({"status": "tool_error", "message":
                "There was not enough time left to call the tool, so it was NOT called. You may retry the call."});
            return (
                Outcome::ToolError,
                notice(reply_to, ResponseState::Reprompt, 503, &body),
            );
        }
        let reply = match self.dispatcher.invoke(target, payload, timeout).await {
            Ok(reply) => reply,
            Err(e) => {
                let unknown = e.outcome_unknown(&self.settings.release_on_errors);
                if unknown {
                    tracing::warn!(error = %e, "tool outcome unknown: the claim is kept until its lease ends");
                } else {
                    self.release(key, token.as_ref()).await;
                }
                return tool_error(run, reply_to, &e, unknown);
            }
        };
        let class = match bedrock::validate_reply(&reply, reply_to) {
            Ok(class) => class,
            Err(reason) => {
                self.release(key, token.as_ref()).await;
                run.reason = Some(format!("tool reply is not a Bedrock response: {reason}"));
                let body = json!({"status": "tool_error", "message":
                    "The tool answered with a malformed response; nothing was recorded. You may retry once."});
                return (
                    Outcome::ToolError,
                    notice(reply_to, ResponseState::Reprompt, 502, &body),
                );
            }
        };
        if let Some(token) = token {
            let keep = match class {
                ReplyClass::Success => true,
                ReplyClass::Failure => self.settings.cache_failures,
                ReplyClass::Reprompt => false,
            };
            if keep {
                self.complete(run, key, &token, &reply).await;
            } else {
                self.release(key, Some(&token)).await;
            }
        }
        (outcome, raw(reply))
    }

    /// Stores the reply. A failure here does not change the answer: the tool already ran, and
    /// its reply is the truth the caller needs.
    async fn complete(&self, run: &Run<'_>, key: &str, token: &LeaseToken, reply: &[u8]) {
        let expires_at_s = self.expiry_from(self.store.now_ms());
        match self.store.complete(key, token, reply, expires_at_s).await {
            Ok(Completion::Stored) => {
                // Warm the cache from what is in hand: no read after the write.
                if let (Some(cache), Some(fingerprint)) = (&self.cache, &run.fingerprint) {
                    cache.insert(key, reply, fingerprint, expires_at_s);
                }
            }
            Ok(Completion::ResultOmitted { bytes }) => tracing::warn!(
                bytes,
                "the tool's reply is too large to store; the call is settled and repeats are told \
                 it already ran, without its result"
            ),
            Err(StoreError::LeaseLost) => tracing::warn!(
                "completion refused: the lease ended and another invocation took the key over; \
                 returning this invocation's result without storing it"
            ),
            Err(e) => tracing::error!(
                error = %e,
                "completion write failed after the tool ran; a repeat may run the tool again once the lease ends"
            ),
        }
    }

    /// The expiry of a record written at `now_ms`: `DEDUP_TTL_SECONDS` later.
    fn expiry_from(&self, now_ms: i64) -> i64 {
        now_ms
            .div_euclid(1000)
            .saturating_add(i64::try_from(self.settings.ttl.as_secs()).unwrap_or(i64::MAX))
    }

    async fn release(&self, key: &str, token: Option<&LeaseToken>) {
        let Some(token) = token else { return };
        match self.store.release(key, token).await {
            Ok(()) | Err(StoreError::LeaseLost) => {}
            Err(e) => {
                tracing::warn!(error = %e, "release failed; the key stays blocked until its lease ends")
            }
        }
    }

    fn replay(
        &self,
        run: &mut Run<'_>,
        reply_to: &ReplyTo,
        record: Record,
        fingerprint: &str,
        call: &Call<'_>,
        outcome: Outcome,
    ) -> Answer {
        run.rules = self.meeting_rules(&record.fingerprint, fingerprint, call);
        if let Some(cache) = &self.cache {
            cache.put(&record.key, &record, self.store.now_ms());
        }
        match (record.result, record.omitted_result_bytes) {
            (Some(result), _) => (outcome, raw(result)),
            (None, Some(bytes)) => {
                run.reason = Some(format!("result of {bytes} bytes was too large to store"));
                let body = json!({
                    "status": "already_executed",
                    "message": format!(
                        "An identical {} call made earlier in this session already ran, so this one was not \
                         executed. Its result was too large to store and cannot be shown again. Do not call it \
                         again with the same arguments; tell the user the action was already performed.",
                        reply_to.tool()),
                });
                (
                    outcome,
                    notice(reply_to, ResponseState::Reprompt, 409, &body),
                )
            }
            (None, None) => {
                let e = StoreError::Corrupt("completed record without a result".into());
                store_unavailable(run, reply_to, &e)
            }
        }
    }

    /// Which normalization rules made this call meet the stored one: none when the strict
    /// fingerprints are equal, else the typed rules that fired on this call.
    fn meeting_rules(&self, stored: &str, this: &str, call: &Call<'_>) -> Vec<&'static str> {
        if stored == this {
            return Vec::new();
        }
        self.keyer
            .explain(Strategy::Typed, call)
            .map(|e| e.rules.names().collect())
            .unwrap_or_default()
    }

    fn in_progress(&self, run: &mut Run<'_>, reply_to: &ReplyTo, record: &Record) -> Answer {
        let retry_after_ms = (record.lease_until_ms - self.store.now_ms()).clamp(0, 60_000);
        run.reason = Some("identical call still running".into());
        let body = json!({
            "status": "in_progress",
            "message": format!(
                "An identical {} call made earlier in this session is still running, so this one was not executed. \
                 Do not call it again with the same arguments now; tell the user the action is in progress.",
                reply_to.tool()),
            "retry_after_ms": retry_after_ms,
        });
        (
            Outcome::InProgress,
            notice(reply_to, ResponseState::Reprompt, 409, &body),
        )
    }

    /// `DEDUP_MODE=off` (and shadow mode's unkeyable calls): the original event goes to the tool
    /// unchanged and its reply comes back unchanged.
    async fn pass_through(&self, run: &mut Run<'_>, reply_to: &ReplyTo, target: &str) -> Answer {
        let payload = match serde_json::to_vec(run.event) {
            Ok(p) => p,
            Err(e) => {
                return (
                    Outcome::ToolError,
                    Err(HandlerError::Internal(e.to_string())),
                );
            }
        };
        let timeout = remaining(run.end).saturating_sub(self.settings.answer_margin);
        match self.dispatcher.invoke(target, payload, timeout).await {
            Ok(reply) if serde_json::from_slice::<serde::de::IgnoredAny>(&reply).is_ok() => {
                (Outcome::Executed, raw(reply))
            }
            Ok(_) => {
                run.reason = Some("tool reply is not JSON".into());
                let body = json!({"status": "tool_error", "message": "The tool answered with a malformed response."});
                (
                    Outcome::ToolError,
                    notice(reply_to, ResponseState::Reprompt, 502, &body),
                )
            }
            Err(e) => {
                let unknown = e.outcome_unknown(&self.settings.release_on_errors);
                tool_error(run, reply_to, &e, unknown)
            }
        }
    }
}

fn bad_event(run: &mut Run<'_>, e: EventError) -> Answer {
    tracing::debug!(error = %e, "invalid event");
    let (state, status) = match &e {
        EventError::Arguments { .. } => (ResponseState::Reprompt, 400),
        _ => (ResponseState::Failure, 400),
    };
    run.reason = Some(
        match &e {
            EventError::Arguments { .. } => "invalid arguments",
            _ => "invalid event",
        }
        .into(),
    );
    match e.reply_to() {
        Some(reply_to) => {
            let (status_name, message) = match &e {
                EventError::Arguments { message, .. } => ("invalid_arguments", message.clone()),
                EventError::Envelope { message, .. } => ("invalid_event", message.clone()),
                EventError::Unrecognised(m) => ("invalid_event", m.clone()),
            };
            let body = json!({"status": status_name, "message": format!("{message}. The call was not executed.")});
            (Outcome::BadRequest, notice(reply_to, state, status, &body))
        }
        None => (Outcome::BadRequest, Err(HandlerError::InvalidEvent(e))),
    }
}

fn store_unavailable(run: &mut Run<'_>, reply_to: &ReplyTo, e: &StoreError) -> Answer {
    run.reason = Some(format!("store: {e}"));
    tracing::error!(error = ?e, "idempotency store unavailable; failing closed");
    let body = json!({
        "status": "dedup_unavailable",
        "message": format!(
            "The duplicate-call guard could not be reached, so {} was NOT executed (running it unguarded could \
             repeat a side effect). Tell the user the action could not be performed right now.",
            reply_to.tool()),
    });
    (
        Outcome::StoreError,
        notice(reply_to, ResponseState::Reprompt, 503, &body),
    )
}

fn tool_error(
    run: &mut Run<'_>,
    reply_to: &ReplyTo,
    e: &DispatchError,
    outcome_unknown: bool,
) -> Answer {
    // The tool's own error message may quote its arguments: only at DEBUG.
    tracing::debug!(error = %e, "tool error");
    run.reason = Some(e.short_reason());
    let (status, message) = if outcome_unknown {
        (
            504,
            format!(
                "{}; whether it completed is unknown. Do not call it again with the same arguments now; \
                 tell the user the outcome is being checked.",
                e.short_reason()
            ),
        )
    } else {
        (
            502,
            format!(
                "{}; it did not complete and nothing was recorded. You may retry the call.",
                e.short_reason()
            ),
        )
    };
    let body = json!({"status": "tool_error", "message": message});
    (
        Outcome::ToolError,
        notice(reply_to, ResponseState::Reprompt, status, &body),
    )
}

fn notice(
    reply_to: &ReplyTo,
    state: ResponseState,
    status: u16,
    body: &Value,
) -> Result<Box<RawValue>, HandlerError> {
    let text = bedrock::notice(reply_to, state, status, body).to_string();
    RawValue::from_string(text).map_err(|e| HandlerError::Internal(e.to_string()))
}

fn raw(bytes: Vec<u8>) -> Result<Box<RawValue>, HandlerError> {
    let text = String::from_utf8(bytes)
        .map_err(|e| HandlerError::Internal(format!("reply is not UTF-8: {e}")))?;
    RawValue::from_string(text)
        .map_err(|e| HandlerError::Internal(format!("reply is not JSON: {e}")))
}

fn remaining(end: Instant) -> Duration {
    end.saturating_duration_since(Instant::now())
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

/// Warm-container LRU of completed records (`DEDUP_LOCAL_CACHE_ITEMS`). Only completed records
/// are cached: they never change until they expire, and expiry is checked on every hit.
#[derive(Debug)]
struct RecordCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    tick: u64,
    entries: HashMap<String, CacheEntry>,
}

#[derive(Debug, Clone)]
struct CacheEntry {
    result: Arc<[u8]>,
    fingerprint: String,
    expires_at_s: i64,
    used: u64,
}

impl RecordCache {
    fn new(capacity: usize) -> RecordCache {
        RecordCache {
            capacity,
            inner: Mutex::new(CacheInner::default()),
        }
    }

    fn get(&self, key: &str, now_ms: i64) -> Option<CacheEntry> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        let live = match inner.entries.get_mut(key) {
            Some(entry) if entry.expires_at_s >= now_ms.div_euclid(1000) => {
                entry.used = tick;
                Some(entry.clone())
            }
            Some(_) => None,
            None => return None,
        };
        if live.is_none() {
            inner.entries.remove(key);
        }
        live
    }

    fn put(&self, key: &str, record: &Record, now_ms: i64) {
        let (Status::Completed, Some(result)) = (record.status, &record.result) else {
            return;
        };
        if record.is_expired(now_ms) {
            return;
        }
        self.insert(key, result, &record.fingerprint, record.expires_at_s);
    }

    /// Caches a completed result.
    fn insert(&self, key: &str, result: &[u8], fingerprint: &str, expires_at_s: i64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.tick += 1;
        let tick = inner.tick;
        if inner.entries.len() >= self.capacity && !inner.entries.contains_key(key) {
            if let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            {
                inner.entries.remove(&oldest);
            }
        }
        inner.entries.insert(
            key.to_string(),
            CacheEntry {
                result: Arc::from(result),
                fingerprint: fingerprint.to_string(),
                expires_at_s,
                used: tick,
            },
        );
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

    fn completed(key: &str, expires_at_s: i64) -> Record {
        Record {
            key: key.into(),
            status: Status::Completed,
            expires_at_s,
            lease_until_ms: 0,
            token: LeaseToken::new("t"),
            fingerprint: "f".into(),
            tool: "tool".into(),
            created_at_ms: 0,
            result: Some(key.as_bytes().to_vec()),
            omitted_result_bytes: None,
        }
    }

    #[test]
    fn the_record_cache_evicts_the_least_recently_used_and_honours_expiry() {
        let cache = RecordCache::new(2);
        cache.put("a", &completed("a", 100), 0);
        cache.put("b", &completed("b", 100), 0);
        assert!(cache.get("a", 0).is_some());
        cache.put("c", &completed("c", 100), 0);
        assert!(cache.get("b", 0).is_none(), "b was least recently used");
        assert!(cache.get("a", 0).is_some() && cache.get("c", 0).is_some());
        assert!(cache.get("a", 101_000).is_none(), "expired");
        let mut in_progress = completed("d", 100);
        in_progress.status = Status::InProgress;
        cache.put("d", &in_progress, 0);
        assert!(
            cache.get("d", 0).is_none(),
            "in-progress records are never cached"
        );
    }
}
