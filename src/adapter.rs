//! The seam between the entry points and the executor.
//!
//! An entry point (an *adapter*: [`crate::bedrock`], [`crate::agentcore`], [`crate::envelope`])
//! turns one event into
//!
//! - a [`ToolCall`]: tool, arguments, namespace, run id, step and schema, which is all the key
//!   core reads;
//! - a route (`group`, `tool`) for [`crate::dispatch::Dispatcher::route`];
//! - a [`Forward`]: the payload (and client context) the tool would have received directly;
//!
//! and writes every answer the executor can give in the caller's format: the tool's reply
//! (executed or replayed), or a [`Notice`] (in progress, tool error, store down, bad input, no
//! route). The executor never sees an event format; adapters never see the store.

use std::collections::HashMap;
use std::fmt::Write as _;

use lambda_runtime::Diagnostic;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::agentcore::{self, GatewayCall, GatewayError, ScopeArguments};
use crate::bedrock::{self, EventError};
use crate::config::Scope;
use crate::envelope::{self, EnvelopeError};
use crate::key::{Call, Schema};
use crate::telemetry::Outcome;

/// One tool call, format-free.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub tool: String,
    /// The arguments as JSON object text, as the key core reads them.
    pub args: String,
    /// Who owns the tool, behind the entry point's name ([`scoped_namespace`]): agent + action
    /// group, gateway + target, the envelope's namespace.
    pub namespace: String,
    /// The run (session) the call belongs to.
    pub run_id: Option<String>,
    /// The step within the run, when the caller or the adapter can tell it.
    pub step: Option<String>,
    /// A schema the event itself declares (Bedrock's parameter types, the envelope's `schema`).
    /// The policy file's schema for the tool is overlaid on it.
    pub schema: Option<Schema>,
}

impl ToolCall {
    /// The key core's view of this call, under `schema` (the merged schema, see
    /// [`ToolCall::schema`]).
    pub fn key_call<'a>(&'a self, schema: Option<&'a Schema>) -> Call<'a> {
        Call {
            tool: &self.tool,
            args: &self.args,
            namespace: Some(&self.namespace),
            run_id: self.run_id.as_deref(),
            step: self.step.as_deref(),
            schema,
        }
    }
}

/// `<entry point>:<namespace>`: the entry point is part of every key (domain separation), so no
/// caller of one door can name a scope of another (an envelope that copies a Bedrock call's
/// agent, action group, session, step and arguments is still its own call).
pub fn scoped_namespace(entry_point: &str, namespace: &str) -> String {
    let mut scoped = String::with_capacity(entry_point.len() + 1 + namespace.len());
    scoped.push_str(entry_point);
    scoped.push(':');
    scoped.push_str(namespace);
    scoped
}

/// What goes to the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    pub payload: Vec<u8>,
    /// The Lambda client context (JSON text, not yet base64), for tools that read one.
    pub client_context: Option<String>,
}

/// What a tool's reply says it did: the part of the tool's contract that decides whether the
/// call is stored, released or kept (see [`crate::decide::after_run`]). The rule is the payment
/// APIs': a call is saved once the tool started acting, and only a refusal of the input before
/// acting lets an identical retry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyClass {
    Success,
    /// The tool failed while acting (Bedrock FAILURE, HTTP 5xx, MCP `isError`): stored and
    /// replayed, never re-run.
    Failure,
    /// The tool refused its input before acting (Bedrock REPROMPT, HTTP 4xx other than 409 and
    /// 429): nothing happened, so the claim is released and a retry runs.
    Rejected,
    /// "Not now" (HTTP 409 conflict, 429 too many requests): the tool may have acted first, so
    /// the claim is kept until its lease ends, as for an unknown outcome.
    NotNow,
}

impl ReplyClass {
    /// The class of a bare HTTP status (an OpenAPI action group's reply without a
    /// `responseState`).
    pub fn from_http_status(status: u64) -> ReplyClass {
        match status {
            409 | 429 => ReplyClass::NotNow,
            400..=499 => ReplyClass::Rejected,
            500.. => ReplyClass::Failure,
            _ => ReplyClass::Success,
        }
    }
}

/// Classifies a reply that only has to be JSON: an object with `"isError": true` (the MCP
/// `CallToolResult` convention) is a [`ReplyClass::Failure`], anything else a success.
pub fn classify_json_reply(bytes: &[u8]) -> Result<ReplyClass, String> {
    #[derive(serde::Deserialize)]
    struct Flags {
        #[serde(default, rename = "isError")]
        is_error: Option<bool>,
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let failed = value.is_object()
        && serde_json::from_value::<Flags>(value)
            .ok()
            .and_then(|f| f.is_error)
            .unwrap_or(false);
    Ok(if failed {
        ReplyClass::Failure
    } else {
        ReplyClass::Success
    })
}

/// Why the executor answers in its own words instead of with the tool's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// An identical call is still running (or identical calls keep racing for the key).
    InProgress,
    /// An identical call already ran, but its result was too large to store.
    AlreadyExecuted,
    /// The tool raised, could not be invoked, or answered with something that is not a reply:
    /// it did not complete, and a retry may run.
    ToolFailed,
    /// The tool may have run (timeout, lost response): do not retry now.
    OutcomeUnknown,
    /// Too little time was left to call the tool; it was not called.
    NoTime,
    /// The idempotency store could not be reached; the tool was not called (fail closed).
    StoreUnavailable,
    /// The arguments do not match their declared types: the model can correct them.
    InvalidArguments,
    /// The event lacks something only the caller's configuration can fix.
    InvalidEvent,
    /// No tool is configured for the call.
    NoRoute,
}

impl NoticeKind {
    /// The `status` (or error `type`) word the caller reads.
    pub fn status(self) -> &'static str {
        match self {
            NoticeKind::InProgress => "in_progress",
            NoticeKind::AlreadyExecuted => "already_executed",
            NoticeKind::ToolFailed | NoticeKind::OutcomeUnknown | NoticeKind::NoTime => {
                "tool_error"
            }
            NoticeKind::StoreUnavailable => "dedup_unavailable",
            NoticeKind::InvalidArguments => "invalid_arguments",
            NoticeKind::InvalidEvent => "invalid_event",
            NoticeKind::NoRoute => "no_route",
        }
    }

    /// The HTTP status an HTTP-shaped answer carries (Bedrock OpenAPI responses).
    pub fn http_status(self) -> u16 {
        match self {
            NoticeKind::InProgress | NoticeKind::AlreadyExecuted => 409,
            NoticeKind::ToolFailed => 502,
            NoticeKind::OutcomeUnknown => 504,
            NoticeKind::NoTime | NoticeKind::StoreUnavailable => 503,
            NoticeKind::InvalidArguments | NoticeKind::InvalidEvent => 400,
            NoticeKind::NoRoute => 500,
        }
    }

    /// True when the model may correct the call or try again later (Bedrock REPROMPT); false
    /// when only the configuration can fix it (Bedrock FAILURE).
    pub fn model_can_act(self) -> bool {
        !matches!(self, NoticeKind::InvalidEvent | NoticeKind::NoRoute)
    }
}

/// An answer the executor writes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    /// One or two sentences for the model: no argument values, no stack traces.
    pub message: String,
    /// For [`NoticeKind::InProgress`]: when the running call's lease ends.
    pub retry_after_ms: Option<i64>,
}

impl Notice {
    pub fn new(kind: NoticeKind, message: impl Into<String>) -> Notice {
        Notice {
            kind,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// `{"status":…,"message":…[,"retry_after_ms":…]}`, written without building a `Value`.
    pub fn body_json(&self) -> String {
        let mut out = String::with_capacity(self.message.len() + 64);
        out.push_str("{\"status\":");
        push_json_str(&mut out, self.kind.status());
        out.push_str(",\"message\":");
        push_json_str(&mut out, &self.message);
        if let Some(ms) = self.retry_after_ms {
            let _ = write!(out, ",\"retry_after_ms\":{ms}");
        }
        out.push('}');
        out
    }
}

/// What the caller is told about deduplication, beside the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupInfo<'a> {
    pub outcome: Outcome,
    /// The derived key (32 hex digits), when the call got that far.
    pub key: Option<&'a str>,
}

impl DedupInfo<'_> {
    /// `{"outcome":…,"key":…|null}`: `executed` for a call that ran (shadow repeats included),
    /// `replayed` for one answered from the store (waited-for calls included), else the outcome's
    /// own name.
    pub fn json(&self) -> String {
        let outcome = match self.outcome {
            Outcome::Executed | Outcome::ShadowReplay => "executed",
            Outcome::Replayed | Outcome::Waited => "replayed",
            other => other.name(),
        };
        let mut out = String::with_capacity(64);
        out.push_str("{\"outcome\":");
        push_json_str(&mut out, outcome);
        out.push_str(",\"key\":");
        match self.key {
            Some(key) => push_json_str(&mut out, key),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }
}

/// Appends `s` as a JSON string literal.
pub fn push_json_str(out: &mut String, s: &str) {
    // serde_json's escaper; writing into a String cannot fail.
    let mut buf = std::mem::take(out).into_bytes();
    let _ = serde_json::to_writer(&mut buf, s);
    *out = String::from_utf8(buf).unwrap_or_default();
}

/// The step named by a caller-supplied value: a non-blank string (trimmed) or a number.
pub fn step_value(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Errors returned to the Lambda runtime: only for invocations no answer in the caller's format
/// can reach.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error(transparent)]
    InvalidEvent(Unanswerable),
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
    /// No entry point recognises it.
    #[error(
        "not a Bedrock Agents action-group event, an AgentCore Gateway call or an invoke envelope: {0}. \
         Expected, in this order: a Lambda client context with custom.bedrockAgentCoreToolName \
         (AgentCore Gateway), an object with \"actionGroup\" (Bedrock Agents), an object with \"tool\" \
         (invoke envelope)"
    )]
    NoEntryPoint(String),
}

/// Which names carry the caller's run and step, the Bedrock turn scope, and the namespaces an
/// envelope may name.
#[derive(Debug, Clone, Copy)]
pub struct Scoping<'a> {
    pub step_attribute: &'a str,
    pub run_argument: &'a str,
    pub scope: Scope,
    /// `DEDUP_ENVELOPE_NAMESPACES`: when set, an envelope naming another namespace is refused.
    pub envelope_namespaces: Option<&'a [String]>,
}

impl Scoping<'_> {
    fn arguments(&self) -> ScopeArguments<'_> {
        ScopeArguments {
            run: self.run_argument,
            step: self.step_attribute,
        }
    }
}

/// One invocation as seen by the entry point it came in by.
// One per invocation, on the stack and never in a collection: boxing the large variant would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Door<'a> {
    Bedrock {
        event: &'a Value,
        envelope: bedrock::Envelope,
    },
    AgentCore(GatewayCall<'a>),
    Envelope(envelope::Envelope),
}

/// An invocation refused before it had a call: already written in the caller's format.
#[derive(Debug)]
pub struct Refusal {
    pub response: Result<Box<RawValue>, HandlerError>,
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
                    let notice = gateway_refusal(&e);
                    Refusal {
                        response: raw(notice.body_json()),
                        reason: e.to_string(),
                        tool: None,
                    }
                });
        }
        let object = event.as_object();
        if object.is_some_and(|o| o.contains_key("actionGroup")) {
            return bedrock::Envelope::parse(event)
                .map(|envelope| Door::Bedrock { event, envelope })
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
                    let notice = envelope_refusal(&e);
                    let dedup = DedupInfo {
                        outcome: Outcome::BadRequest,
                        key: None,
                    };
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

    /// The tool's name, as keyed and reported.
    pub fn tool(&self) -> &str {
        match self {
            Door::Bedrock { envelope, .. } => envelope.reply_to.tool(),
            Door::AgentCore(call) => call.tool,
            Door::Envelope(envelope) => &envelope.tool,
        }
    }

    /// `(group, tool)` for [`crate::dispatch::Dispatcher::route`].
    pub fn route(&self) -> (&str, &str) {
        match self {
            Door::Bedrock { envelope, .. } => {
                (&envelope.reply_to.action_group, envelope.reply_to.tool())
            }
            Door::AgentCore(call) => call.route(),
            Door::Envelope(envelope) => envelope.route(),
        }
    }

    /// The call to key, or the notice that refuses it.
    pub fn call(&self, scoping: Scoping<'_>) -> Result<ToolCall, Notice> {
        match self {
            Door::Bedrock { envelope, .. } => {
                bedrock::call(envelope, scoping.step_attribute, scoping.scope).map_err(|e| {
                    bedrock::refusal(&e)
                        .unwrap_or_else(|| refusal(NoticeKind::InvalidEvent, &e.to_string()))
                })
            }
            Door::AgentCore(call) => call
                .tool_call(scoping.arguments())
                .map_err(|e| gateway_refusal(&e)),
            Door::Envelope(envelope) => envelope
                .tool_call(scoping.envelope_namespaces)
                .map_err(|e| envelope_refusal(&e)),
        }
    }

    /// What the tool receives: what it would have received directly, plus `key` when one was
    /// derived (`None`: pass-through, unchanged).
    pub fn forward(&self, key: Option<&str>, scoping: Scoping<'_>) -> Result<Forward, String> {
        match self {
            Door::Bedrock { event, .. } => bedrock::forward_bytes(event, key)
                .map(|payload| Forward {
                    payload,
                    client_context: None,
                })
                .map_err(|e| e.to_string()),
            Door::AgentCore(call) => call
                .forward(key, scoping.arguments())
                .map_err(|e| e.to_string()),
            Door::Envelope(envelope) => envelope.forward(key).map_err(|e| e.to_string()),
        }
    }

    /// Checks the tool's reply before it is stored and returned; `Err` says why it is refused.
    pub fn classify(&self, reply: &[u8]) -> Result<ReplyClass, String> {
        match self {
            Door::Bedrock { envelope, .. } => bedrock::validate_reply(reply, &envelope.reply_to)
                .map_err(|r| format!("tool reply is not a Bedrock response: {r}")),
            Door::AgentCore(_) => {
                agentcore::classify_reply(reply).map_err(|r| format!("tool reply is not JSON: {r}"))
            }
            Door::Envelope(_) => {
                envelope::classify_reply(reply).map_err(|r| format!("tool reply is not JSON: {r}"))
            }
        }
    }

    /// The answer carrying the tool's reply (executed or replayed).
    pub fn result(
        &self,
        reply: &[u8],
        dedup: DedupInfo<'_>,
    ) -> Result<Box<RawValue>, HandlerError> {
        let text = std::str::from_utf8(reply)
            .map_err(|e| HandlerError::Internal(format!("reply is not UTF-8: {e}")))?;
        match self {
            Door::Bedrock { .. } | Door::AgentCore(_) => raw(text.to_string()),
            Door::Envelope(_) => raw(envelope::result(text, &dedup)),
        }
    }

    /// The executor's own answer.
    pub fn notice(
        &self,
        notice: &Notice,
        dedup: DedupInfo<'_>,
    ) -> Result<Box<RawValue>, HandlerError> {
        raw(match self {
            Door::Bedrock { envelope, .. } => bedrock::notice_response(&envelope.reply_to, notice),
            Door::AgentCore(_) => agentcore::notice(notice),
            Door::Envelope(_) => envelope::error(notice, &dedup),
        })
    }
}

fn gateway_refusal(e: &GatewayError) -> Notice {
    match e {
        GatewayError::Event(m) => refusal(NoticeKind::InvalidEvent, m),
        GatewayError::Arguments(m) => refusal(NoticeKind::InvalidArguments, m),
    }
}

fn envelope_refusal(e: &EnvelopeError) -> Notice {
    match e {
        EnvelopeError::Event(m) => refusal(NoticeKind::InvalidEvent, m),
        EnvelopeError::Arguments(m) => refusal(NoticeKind::InvalidArguments, m),
    }
}

/// A refused call's notice: what is wrong, and that nothing ran.
fn refusal(kind: NoticeKind, message: &str) -> Notice {
    Notice::new(kind, format!("{message}. The call was not executed."))
}

/// JSON text as the Lambda's answer.
pub fn raw(text: String) -> Result<Box<RawValue>, HandlerError> {
    RawValue::from_string(text)
        .map_err(|e| HandlerError::Internal(format!("reply is not JSON: {e}")))
}

/// The JSON type of `v`, for messages.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_and_dedup_info_are_json() {
        let mut notice = Notice::new(NoticeKind::InProgress, "still \"running\"");
        notice.retry_after_ms = Some(1200);
        let body: serde_json::Value = serde_json::from_str(&notice.body_json()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"status": "in_progress", "message": "still \"running\"", "retry_after_ms": 1200})
        );
        let info = DedupInfo {
            outcome: Outcome::Waited,
            key: Some("ab"),
        };
        assert_eq!(info.json(), r#"{"outcome":"replayed","key":"ab"}"#);
        let info = DedupInfo {
            outcome: Outcome::StoreError,
            key: None,
        };
        assert_eq!(info.json(), r#"{"outcome":"store_error","key":null}"#);
    }

    #[test]
    fn json_replies_fail_only_on_is_error() {
        assert_eq!(
            classify_json_reply(br#"{"content":[],"isError":true}"#),
            Ok(ReplyClass::Failure)
        );
        assert_eq!(
            classify_json_reply(br#"{"isError":false}"#),
            Ok(ReplyClass::Success)
        );
        assert_eq!(classify_json_reply(b"[1]"), Ok(ReplyClass::Success));
        assert_eq!(classify_json_reply(b"\"ok\""), Ok(ReplyClass::Success));
        assert!(classify_json_reply(b"{oops").is_err());
    }

    #[test]
    fn steps_are_non_blank_strings_or_numbers() {
        use serde_json::json;
        assert_eq!(step_value(&json!(" 7 ")).as_deref(), Some("7"));
        assert_eq!(step_value(&json!(7)).as_deref(), Some("7"));
        assert_eq!(step_value(&json!("  ")), None);
        assert_eq!(step_value(&json!(true)), None);
    }
}
