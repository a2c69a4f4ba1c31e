//! The seam between the entry points and the executor: what every door hands the executor and
//! what it writes back, format-free. It imports only the key core, so every module can use it and
//! it uses none of them.
//!
//! An entry point (an *adapter*: [`crate::doors::bedrock`], `agentcore`, `envelope`)
//! implements [`EntryPoint`] on its parsed call:
//!
//! - a [`ToolCall`]: tool, arguments, namespace, run id, step and schema, which is all the key
//!   core reads;
//! - a route (`group`, `tool`) for [`crate::dispatch::Dispatcher::route`];
//! - a [`Forward`]: the payload (and client context) the tool would have received directly;
//! - the [`ReplyClass`] of the tool's reply;
//!
//! and writes every answer the executor can give in the caller's format: the tool's reply
//! (executed or replayed), or a [`Notice`] (in progress, tool error, store down, bad input, no
//! route). The executor never sees an event format; adapters never see the store. Which door an
//! event came in by is the handler's business ([`crate::handler`]), the only module that knows
//! them all.

use std::fmt::Write as _;

use serde_json::Value;

use crate::decide::ReplyClass;
use crate::key::{Call, CallerKeyScope, Schema, push_json_str};

/// The client-context key through which the executor hands the derived key to a tool that takes
/// a client context (AgentCore Gateway targets, the envelope's tools).
pub(crate) const DEDUP_KEY_CONTEXT: &str = "dedupKey";

/// How a door writes the executor's answers in its caller's format.
pub trait Answers {
    /// The tool's name, as keyed and reported.
    fn tool(&self) -> &str;
    /// The answer carrying the tool's reply (JSON text, executed or replayed).
    fn result(&self, reply: &str, dedup: DedupInfo<'_>) -> String;
    /// The executor's own answer.
    fn notice(&self, notice: &Notice, dedup: DedupInfo<'_>) -> String;
}

/// One parsed call as its entry point sees it: everything the handler needs from a door that
/// invokes the tool itself.
pub trait EntryPoint: Answers {
    /// `(group, tool)` for [`crate::dispatch::Dispatcher::route`].
    fn route(&self) -> (&str, &str);
    /// The call to key, or why there is none: the notice that refuses it (the adapter's own
    /// error-to-notice map), or a sessionless call to pass through.
    fn call(&self, scoping: Scoping<'_>) -> Result<ToolCall, Unkeyed>;
    /// What the tool receives: what it would have received directly, plus `key` when one was
    /// derived (`None`: pass-through). A key from an earlier call never goes through.
    fn forward(&self, key: Option<&str>, scoping: Scoping<'_>) -> Result<Forward, Unforwardable>;
    /// Checks the tool's reply before it is stored and returned; `Err` says why it is refused.
    fn classify(&self, reply: &[u8]) -> Result<ReplyClass, MalformedReply>;
    /// The reply as it is stored and replayed, once [`EntryPoint::classify`] accepted it: what in
    /// it belongs to this caller alone (a Bedrock session's attributes) is left out, so that a
    /// replay to another caller never carries it. [`Answers::result`] puts the caller's own back.
    fn stored_form(&self, reply: Vec<u8>) -> Vec<u8> {
        reply
    }
}

/// The event cannot be forwarded to the tool: the tool did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot forward the event: {0}")]
pub struct Unforwardable(pub String);

/// The tool's reply is not one of the caller's format: the tool ran, and what it did is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool reply is not {expected}: {reason}")]
pub struct MalformedReply {
    /// What the caller's format needs (`"JSON"`, `"a Bedrock response"`).
    pub(crate) expected: &'static str,
    /// What is wrong with it.
    pub(crate) reason: String,
}

/// One tool call, format-free.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool's name, as keyed and reported (a Bedrock function or `"METHOD /path"`, a Gateway
    /// tool without its target prefix, the envelope's `tool`).
    pub(crate) tool: String,
    /// The arguments as JSON object text, as the key core reads them.
    pub args: String,
    /// Who owns the tool, behind the entry point's name ([`scoped_namespace`]): agent + action
    /// group, gateway + target, the envelope's namespace.
    pub(crate) namespace: String,
    /// The run (session) the call belongs to.
    pub run_id: Option<String>,
    /// The step within the run, when the caller or the adapter can tell it.
    pub step: Option<String>,
    /// A schema the event itself declares (Bedrock's parameter types, the envelope's `schema`).
    /// The policy file's schema for the tool is overlaid on it.
    pub schema: Option<Schema>,
    /// The caller's own idempotency key (`DEDUP_IDEMPOTENCY_KEY_NAME`): when set, the call is
    /// keyed by it, and a repeat with other arguments is refused ([`crate::key::CallerKeyed`]).
    pub(crate) caller_key: Option<String>,
    /// How far `caller_key` reaches: its run unless the door's deployment widens it
    /// ([`crate::key::CallerKeyScope`]).
    pub(crate) caller_key_scope: CallerKeyScope,
    /// The name the policy file knows the tool by, when it is not `tool`: an AgentCore Gateway
    /// tool's `target___tool` ([`crate::key::Call::policy`]).
    pub(crate) policy_name: Option<String>,
}

impl ToolCall {
    /// Keys the call in `namespace` (one a route states), still behind its entry point's name.
    pub(crate) fn rename_namespace(&mut self, namespace: &str) {
        let entry_point = self
            .namespace
            .split_once(':')
            .map_or("", |(entry_point, _)| entry_point);
        self.namespace = scoped_namespace(entry_point, namespace);
    }

    /// The key core's view of this call (the keyer lays the policy file's schema over the
    /// declared one).
    pub fn key_call(&self) -> Call<'_> {
        Call {
            tool: &self.tool,
            args: &self.args,
            namespace: Some(&self.namespace),
            run_id: self.run_id.as_deref(),
            step: self.step.as_deref(),
            schema: self.schema.as_ref(),
            policy: self.policy_name.as_deref(),
        }
    }

    /// The name this call's policy entry is looked up by.
    pub(crate) fn policy_key(&self) -> &str {
        self.policy_name.as_deref().unwrap_or(&self.tool)
    }
}

/// `<entry point>:<namespace>`: the entry point is part of every key (domain separation), so no
/// caller of one door can name a scope of another (an envelope that copies a Bedrock call's
/// agent, action group, session, step and arguments is still its own call).
pub(crate) fn scoped_namespace(entry_point: &str, namespace: &str) -> String {
    let mut scoped = String::with_capacity(entry_point.len() + 1 + namespace.len());
    scoped.push_str(entry_point);
    scoped.push(':');
    scoped.push_str(namespace);
    scoped
}

/// What goes to the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The event the tool Lambda is invoked with, as it would have received it directly.
    pub payload: Vec<u8>,
    /// The Lambda client context (JSON text, not yet base64), for tools that read one.
    pub client_context: Option<String>,
}

/// The `_meta` member by which a tool says its failure may be cured by a retry (issue 51): such
/// a failure is never pinned, whatever the tool's `failures` policy.
pub(crate) const RETRYABLE_META: &str = "toolcall-dedup/retryable";

/// The class of an MCP `CallToolResult` (or any JSON object): `"isError": true` is a
/// [`ReplyClass::Failure`], or [`ReplyClass::Retryable`] when its `_meta` carries
/// [`RETRYABLE_META`]` = true`; anything else a success.
pub(crate) fn classify_result(result: &serde_json::Value) -> ReplyClass {
    use serde_json::Value;
    if result.get("isError").and_then(Value::as_bool) != Some(true) {
        return ReplyClass::Success;
    }
    let retryable = result
        .get("_meta")
        .and_then(|meta| meta.get(RETRYABLE_META))
        .and_then(Value::as_bool);
    if retryable == Some(true) {
        ReplyClass::Retryable
    } else {
        ReplyClass::Failure
    }
}

/// Classifies a reply that only has to be JSON, as [`classify_result`] says.
pub(crate) fn classify_json_reply(bytes: &[u8]) -> Result<ReplyClass, MalformedReply> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| MalformedReply {
        expected: "JSON",
        reason: e.to_string(),
    })?;
    Ok(classify_result(&value))
}

/// Why the executor answers in its own words instead of with the tool's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoticeKind {
    /// An identical call is still running (or identical calls keep racing for the key).
    InProgress,
    /// An identical call already ran, but its result was too large to store.
    AlreadyExecuted,
    /// The tool raised, could not be invoked, or answered with something that is not a reply:
    /// it did not complete, and a retry may run.
    ToolFailed,
    /// The tool may have run (timeout, lost response): do not retry now.
    OutcomeUnknown,
    /// An identical call of an `at_most_once` tool may or may not have run, and the tool is never
    /// re-run automatically: an operator settles it.
    SettledUnknown,
    /// The caller's idempotency key was first used for other arguments.
    KeyReused,
    /// An identical call ran, but its stored result (in the results bucket) is missing or altered.
    ResultUnavailable,
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
    pub(crate) fn status(self) -> &'static str {
        match self {
            NoticeKind::InProgress => "in_progress",
            NoticeKind::AlreadyExecuted => "already_executed",
            NoticeKind::ToolFailed | NoticeKind::OutcomeUnknown | NoticeKind::NoTime => {
                "tool_error"
            }
            NoticeKind::SettledUnknown => "outcome_unknown",
            NoticeKind::KeyReused => "idempotency_key_reused",
            NoticeKind::ResultUnavailable => "result_unavailable",
            NoticeKind::StoreUnavailable => "dedup_unavailable",
            NoticeKind::InvalidArguments => "invalid_arguments",
            NoticeKind::InvalidEvent => "invalid_event",
            NoticeKind::NoRoute => "no_route",
        }
    }

    /// The HTTP status an HTTP-shaped answer carries (Bedrock OpenAPI responses).
    pub(crate) fn http_status(self) -> u16 {
        match self {
            NoticeKind::InProgress
            | NoticeKind::AlreadyExecuted
            | NoticeKind::SettledUnknown
            | NoticeKind::ResultUnavailable => 409,
            NoticeKind::ToolFailed => 502,
            NoticeKind::OutcomeUnknown => 504,
            NoticeKind::NoTime | NoticeKind::StoreUnavailable => 503,
            NoticeKind::InvalidArguments | NoticeKind::InvalidEvent => 400,
            NoticeKind::KeyReused => 422,
            NoticeKind::NoRoute => 500,
        }
    }

    /// True when the model may correct the call or try again later (Bedrock REPROMPT); false
    /// when only the configuration can fix it (Bedrock FAILURE).
    pub(crate) fn model_can_act(self) -> bool {
        !matches!(
            self,
            NoticeKind::InvalidEvent | NoticeKind::NoRoute | NoticeKind::KeyReused
        )
    }
}

/// An answer the executor writes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// What happened; sets the `status` word, the HTTP status and the Bedrock response state.
    pub(crate) kind: NoticeKind,
    /// One or two sentences for the model: no argument values, no stack traces.
    pub message: String,
    /// For [`NoticeKind::InProgress`]: when the running call's lease ends.
    pub(crate) retry_after_ms: Option<i64>,
}

impl Notice {
    /// A notice of `kind` with `message` and no retry hint.
    pub(crate) fn new(kind: NoticeKind, message: impl Into<String>) -> Notice {
        Notice {
            kind,
            message: message.into(),
            retry_after_ms: None,
        }
    }

    /// `{"status":…,"message":…[,"retry_after_ms":…]}`, written without building a `Value`.
    pub(crate) fn body_json(&self) -> String {
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

/// The executor's own answers, in the words the model reads: what happened, and what to do.
impl Notice {
    /// No tool is configured for the call.
    pub(crate) fn no_route(reason: &str) -> Notice {
        Notice::new(
            NoticeKind::NoRoute,
            format!(
                "{reason}. The call was not executed; this is a configuration problem, not the arguments."
            ),
        )
    }

    /// An identical call already ran; its result was too large to store.
    pub(crate) fn already_executed(tool: &str) -> Notice {
        Notice::new(
            NoticeKind::AlreadyExecuted,
            format!(
                "An identical {tool} call made earlier in this session already ran, so this one was not \
                 executed. Its result was too large to store and cannot be shown again. Do not call it \
                 again with the same arguments; tell the user the action was already performed."
            ),
        )
    }

    /// An identical call ran, but its stored result cannot be read back (the object is missing or
    /// is not the one the record describes).
    pub(crate) fn result_unavailable(tool: &str) -> Notice {
        Notice::new(
            NoticeKind::ResultUnavailable,
            format!(
                "An identical {tool} call made earlier already ran, so this one was not executed, but \
                 its stored result is unavailable and cannot be shown. Do not call it again with the \
                 same arguments; tell the user the action was already performed."
            ),
        )
    }

    /// The caller's idempotency key was first used for another call: `paths` are the argument
    /// paths that differ (`None`: not recorded). Never a value.
    pub(crate) fn key_reused(tool: &str, paths: Option<&[String]>) -> Notice {
        let differ = match paths {
            Some([]) | None => "The differing paths were not recorded.".to_string(),
            Some(paths) => format!("Paths that differ: {}.", paths.join(", ")),
        };
        Notice::new(
            NoticeKind::KeyReused,
            format!(
                "This idempotency key was first used for a call with other arguments, so this {tool} \
                 call was not executed. {differ} Send a new key for a new call, or the original \
                 arguments to get the original answer."
            ),
        )
    }

    /// An identical call of an `at_most_once` tool may or may not have taken effect; `key` names
    /// it for the operator who settles it.
    pub(crate) fn outcome_unknown(tool: &str, key: &str) -> Notice {
        Notice::new(
            NoticeKind::SettledUnknown,
            format!(
                "An identical {tool} call made earlier may or may not have taken effect: its outcome is \
                 unknown, and this tool is never run again automatically, so this call was not executed. \
                 Do not call it again with the same arguments; tell the user the outcome is being checked. \
                 An operator settles it with: dedup settle {key}"
            ),
        )
    }

    /// An identical call still holds the key (`retry_after_ms`: when its lease ends), or, without
    /// it, identical calls kept racing for the key.
    pub(crate) fn in_progress(tool: &str, retry_after_ms: Option<i64>) -> Notice {
        let message = match retry_after_ms {
            Some(_) => format!(
                "An identical {tool} call made earlier in this session is still running, so this one \
                 was not executed. Do not call it again with the same arguments now; tell the user \
                 the action is in progress."
            ),
            None => {
                "Identical calls are racing for this action; it was not executed by this request. \
                     Wait a moment, then check whether it happened before retrying."
                    .to_string()
            }
        };
        let mut notice = Notice::new(NoticeKind::InProgress, message);
        notice.retry_after_ms = retry_after_ms;
        notice
    }

    /// The store could not be asked; the tool was not called.
    pub(crate) fn store_unavailable(tool: &str) -> Notice {
        Notice::new(
            NoticeKind::StoreUnavailable,
            format!(
                "The duplicate-call guard could not be reached, so {tool} was NOT executed (running it \
                 unguarded could repeat a side effect). Tell the user the action could not be \
                 performed right now."
            ),
        )
    }

    /// Too little time was left to call the tool.
    pub(crate) fn no_time() -> Notice {
        Notice::new(
            NoticeKind::NoTime,
            "There was not enough time left to call the tool, so it was NOT called. You may retry the call.",
        )
    }

    /// The tool ran but its reply is not one of the caller's format.
    pub(crate) fn malformed_reply() -> Notice {
        Notice::new(
            NoticeKind::ToolFailed,
            "The tool ran but answered with a malformed response, so its result was not recorded. \
             Do not call it again with the same arguments now; tell the user the outcome is being checked.",
        )
    }

    /// The event could not be forwarded: the tool did not run.
    pub(crate) fn unforwardable() -> Notice {
        Notice::new(
            NoticeKind::ToolFailed,
            "The call could not be forwarded to the tool, so it was NOT executed and nothing was recorded. \
             You may retry once.",
        )
    }

    /// The tool failed (`reason`: one line, no payload); `outcome_unknown` when it may have acted.
    pub(crate) fn tool_failed(reason: &str, outcome_unknown: bool) -> Notice {
        if outcome_unknown {
            Notice::new(
                NoticeKind::OutcomeUnknown,
                format!(
                    "{reason}; whether it completed is unknown. Do not call it again with the same arguments \
                     now; tell the user the outcome is being checked."
                ),
            )
        } else {
            Notice::new(
                NoticeKind::ToolFailed,
                format!(
                    "{reason}; it did not complete and nothing was recorded. You may retry the call."
                ),
            )
        }
    }
}

/// What the caller is told about deduplication, beside the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupInfo<'a> {
    /// The word the caller reads: `executed`, `replayed`, or the outcome's own name (see
    /// `crate::telemetry::Outcome::caller_word`).
    pub outcome: &'static str,
    /// The derived key (32 hex digits), when the call got that far.
    pub key: Option<&'a str>,
    /// For a replay: when the call first ran (its claim was taken), epoch ms.
    pub first_ran_ms: Option<i64>,
    /// `DEDUP_REPLAY_MARKER`: the doors where a marker changes what the caller reads (Bedrock,
    /// the Lambda target) mark replays too.
    pub mark: bool,
}

impl DedupInfo<'_> {
    /// `{"outcome":…,"key":…|null}`.
    pub(crate) fn json(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push_str("{\"outcome\":");
        push_json_str(&mut out, self.outcome);
        out.push_str(",\"key\":");
        match self.key {
            Some(key) => push_json_str(&mut out, key),
            None => out.push_str("null"),
        }
        if let Some(first_ran) = self.first_ran() {
            out.push_str(",\"first_ran\":");
            push_json_str(&mut out, &first_ran);
        }
        out.push('}');
        out
    }

    /// When a replayed call first ran, as RFC 3339 in UTC (`2026-12-07T01:28:22.123Z`).
    pub(crate) fn first_ran(&self) -> Option<String> {
        let ms = self.first_ran_ms?;
        aws_smithy_types::DateTime::from_millis(ms)
            .fmt(aws_smithy_types::date_time::Format::DateTime)
            .ok()
    }

    /// Whether this answer is a replay the door marks: every door that always marks, the others
    /// under `DEDUP_REPLAY_MARKER`.
    pub(crate) fn marks_replay(&self) -> bool {
        self.mark && self.first_ran_ms.is_some()
    }
}

/// A refused call's notice: what is wrong, and that nothing ran.
pub(crate) fn refusal(kind: NoticeKind, message: &str) -> Notice {
    Notice::new(kind, format!("{message}. The call was not executed."))
}

/// The step named by a caller-supplied value: a non-blank string (trimmed) or a number.
pub(crate) fn step_value(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Where the step comes from when the caller sends no step attribute (`DEDUP_SCOPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The step is a hash of `inputText`: one step per user turn.
    Turn,
    /// No step: identical calls anywhere in the session are one call.
    Session,
}

/// Which arguments carry the caller's run id and step (AgentCore Gateway calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScopeArguments<'a> {
    /// The argument that names the run when the Gateway sends no session id (`DEDUP_RUN_ARGUMENT`).
    pub(crate) run: &'a str,
    /// The argument that names the step (`DEDUP_STEP_ATTRIBUTE`).
    pub step: &'a str,
    /// The argument that carries the caller's idempotency key (`DEDUP_IDEMPOTENCY_KEY_NAME`).
    pub(crate) caller_key: &'a str,
}

/// Which names carry the caller's run and step, the Bedrock turn scope, and the namespaces an
/// envelope may name.
#[derive(Debug, Clone, Copy)]
pub struct Scoping<'a> {
    /// `DEDUP_STEP_ATTRIBUTE`: the Bedrock session attribute, or the AgentCore argument, that names
    /// the caller's step.
    pub step_attribute: &'a str,
    /// `DEDUP_RUN_ARGUMENT`: the AgentCore argument that names the run when the Gateway sends no
    /// session id.
    pub run_argument: &'a str,
    /// `DEDUP_SCOPE`: where a Bedrock call's step comes from when the caller sends none.
    pub scope: Scope,
    /// `DEDUP_ENVELOPE_NAMESPACES`: when set, an envelope naming another namespace is refused.
    pub envelope_namespaces: Option<&'a [String]>,
    /// `DEDUP_SESSIONLESS`: what a Gateway call that names no run gets.
    pub sessionless: Sessionless,
    /// `DEDUP_IDEMPOTENCY_KEY_NAME`: the envelope member, AgentCore argument or `_meta` member, or
    /// Bedrock session attribute that carries the caller's own idempotency key.
    pub caller_key_name: &'a str,
    /// `DEDUP_ENVELOPE_CALLER_KEY_SCOPE`: how far an envelope's caller key reaches (every other
    /// door's key stays inside its run).
    pub envelope_caller_key_scope: CallerKeyScope,
}

/// What an AgentCore Gateway call that names no run (no session id, no run argument) gets
/// (`DEDUP_SESSIONLESS`). Gateways often send none: the public samples print an empty
/// `bedrockAgentCoreSessionId`, and newer ones send only per-request ids, which a retry does not
/// share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessionless {
    /// The tool runs without dedup; each such call is a `sessionless` metric and a warning, so a
    /// deployment never believes it is protected when it is not (the default).
    PassThrough,
    /// Keyed by gateway and target only: identical calls of different sessions are one call. For
    /// tools whose repeats across sessions truly are the same call.
    GatewayScope,
    /// Keyed within the authenticated principal the Gateway verified (the inbound JWT's issuer
    /// and subject, read from the `Authorization` header the interceptor is passed): one user's
    /// identical calls are one call, two users' never are. A call whose principal cannot be read
    /// (no bearer JWT: an IAM-authorized gateway, no `passRequestHeaders`) runs unkeyed, as with
    /// `pass_through`. The recommended choice for stateless MCP (2026-07-28), which has no session.
    Principal,
    /// Refused as an `invalid_event` notice; the tool does not run.
    Refuse,
}

/// Why an entry point hands the executor no call to key.
#[derive(Debug, Clone)]
pub enum Unkeyed {
    /// The call is refused with this notice; nothing runs.
    Refused(Notice),
    /// The call names no run and [`Sessionless::PassThrough`] applies: it runs unkeyed. The text
    /// says what was missing, for the warning.
    Sessionless(String),
}

impl Sessionless {
    /// What a call that names no run gets: `Ok` when it is keyed by its namespace alone, else why
    /// it is unkeyed. `missing` says what the call lacked, for the warning or the refusal.
    pub fn unkeyed(self, missing: String) -> Result<(), Unkeyed> {
        match self {
            Sessionless::PassThrough => Err(Unkeyed::Sessionless(missing)),
            Sessionless::Refuse => Err(refusal(
                NoticeKind::InvalidEvent,
                &format!(
                    "no run id: {missing}; without one, identical calls of different sessions \
                     would be one call (DEDUP_SESSIONLESS=refuse)"
                ),
            )
            .into()),
            Sessionless::GatewayScope => Ok(()),
            // Reached only when no principal could be read (the interceptor keys by it first).
            Sessionless::Principal => Err(Unkeyed::Sessionless(format!(
                "{missing}, and no principal (a bearer JWT in the Authorization header)"
            ))),
        }
    }
}

impl From<Notice> for Unkeyed {
    fn from(notice: Notice) -> Unkeyed {
        Unkeyed::Refused(notice)
    }
}

impl Scoping<'_> {
    /// The run and step argument names.
    pub(crate) fn arguments(&self) -> ScopeArguments<'_> {
        ScopeArguments {
            run: self.run_argument,
            step: self.step_attribute,
            caller_key: self.caller_key_name,
        }
    }
}

/// The JSON type of `v`, for messages.
/// A JSON value's type with its article, for a message: `a number`, `an object`, `null`.
pub(crate) fn json_type_phrase(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

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
            outcome: "replayed",
            key: Some("ab"),
            first_ran_ms: None,
            mark: false,
        };
        assert_eq!(info.json(), r#"{"outcome":"replayed","key":"ab"}"#);
        let info = DedupInfo {
            outcome: "store_error",
            key: None,
            first_ran_ms: None,
            mark: false,
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
        // Issue 51: a tool's own word that a retry may cure the failure; only `true` counts.
        assert_eq!(
            classify_json_reply(br#"{"isError":true,"_meta":{"toolcall-dedup/retryable":true}}"#),
            Ok(ReplyClass::Retryable)
        );
        assert_eq!(
            classify_json_reply(br#"{"isError":true,"_meta":{"toolcall-dedup/retryable":"yes"}}"#),
            Ok(ReplyClass::Failure)
        );
        assert_eq!(
            classify_json_reply(br#"{"isError":false,"_meta":{"toolcall-dedup/retryable":true}}"#),
            Ok(ReplyClass::Success)
        );
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
