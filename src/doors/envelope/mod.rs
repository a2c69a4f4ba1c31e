//! The harness-neutral invoke envelope, for any caller that invokes the executor directly
//! (Strands Agents, LangGraph, the OpenAI Agents SDK, Step Functions, a script):
//!
//! ```text
//! request: {"tool": "charge_card",
//!           "input": {"customer_id": "cus_1", "amount": 4200}   // or "args": "<JSON object text>"
//!           "run_id": "run-42", "step": 7,                      // step optional
//!           "namespace": "payments",                            // optional, default "envelope"
//!           "idempotency_key": "order-7781/charge",             // optional: the caller's own key
//!           "schema": {...}}                                    // optional JSON Schema or tool definition
//! answer:  {"result": <the tool's reply>, "dedup": {"outcome": "executed" | "replayed", "key": "<32 hex>"}}
//! error:   {"error": {"type": "in_progress" | "tool_error" | "dedup_unavailable" | "invalid_arguments"
//!                             | "invalid_event" | "no_route", "message": "…"[, "retry_after_ms": n]},
//!           "dedup": {"outcome": …, "key": "<32 hex>" | null}}
//! ```
//!
//! An answer has `result` and never `error`; an error has `error` and never `result`. The tool
//! (routed by `DEDUP_ROUTES` as `"<namespace>/<tool>"`) receives the arguments object, exactly
//! what a harness would have sent it, and its reply is stored and replayed byte for byte inside
//! `result`. The run id is required, unless the caller sends its own idempotency key (the member
//! `DEDUP_IDEMPOTENCY_KEY_NAME` names, `idempotency_key` by default): without either, identical calls
//! of different runs would be one. With a caller key, the key is the caller's, scoped by namespace;
//! a repeat with other arguments is refused as `idempotency_key_reused`.

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::decide::ReplyClass;
use crate::doors::port::{
    Answers, DEDUP_KEY_CONTEXT, DedupInfo, EntryPoint, Forward, MalformedReply, Notice, NoticeKind,
    Scoping, ToolCall, Unforwardable, Unkeyed, classify_json_reply, json_type_phrase, refusal,
    scoped_namespace, step_value,
};

/// This entry point's name in every key (see [`scoped_namespace`]).
pub(crate) const ENTRY_POINT: &str = "envelope";
use crate::key::{CallerKeyScope, Schema};

/// The client-context key through which the executor names the tool (beside
/// [`DEDUP_KEY_CONTEXT`], the key): the tool receives only its arguments.
pub(crate) const DEDUP_TOOL_CONTEXT: &str = "dedupTool";

/// The namespace of an envelope without one.
pub(crate) const DEFAULT_NAMESPACE: &str = "envelope";

/// True when `event` looks like an envelope: an object with a `tool` member.
pub(crate) fn is_envelope(event: &Value) -> bool {
    event.as_object().is_some_and(|o| o.contains_key("tool"))
}

/// Why an envelope was refused; answered as a [`Notice`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvelopeError {
    /// A missing or ill-typed member: only the caller can fix it.
    #[error("invalid invoke envelope: {0}")]
    Event(String),
    /// Arguments that are not a JSON object: the model (or harness) can correct them.
    #[error("invalid arguments: {0}")]
    Arguments(String),
}

#[derive(Debug, Deserialize)]
struct RawEnvelope {
    tool: Value,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    run_id: Option<Value>,
    #[serde(default)]
    step: Option<Value>,
    #[serde(default)]
    namespace: Option<Value>,
    #[serde(default)]
    schema: Option<Value>,
    /// The caller's own idempotency key, under whatever name the deployment gives it.
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// A checked envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The tool's name.
    pub(crate) tool: String,
    /// Who owns the tool; part of the key, so equal names in two namespaces stay apart.
    pub(crate) namespace: String,
    run_id: Option<String>,
    step: Option<String>,
    /// The arguments as JSON object text: `args` as sent, or `input` serialized.
    args: Result<String, EnvelopeError>,
    schema: Option<Value>,
    /// Members beyond the fixed ones; only the caller-key member is allowed among them.
    rest: serde_json::Map<String, Value>,
}

impl Envelope {
    /// Reads the members a route and an answer need. Argument problems surface in
    /// [`Envelope::tool_call`], so that they are answered after the route is known.
    pub(crate) fn parse(event: &Value) -> Result<Envelope, EnvelopeError> {
        let raw =
            RawEnvelope::deserialize(event).map_err(|e| EnvelopeError::Event(e.to_string()))?;
        let tool = match &raw.tool {
            Value::String(t) if !t.trim().is_empty() => t.trim().to_string(),
            _ => {
                return Err(EnvelopeError::Event(
                    "\"tool\" must be a non-empty string".into(),
                ));
            }
        };
        let namespace = match &raw.namespace {
            None | Some(Value::Null) => DEFAULT_NAMESPACE.to_string(),
            Some(Value::String(n)) if !n.trim().is_empty() => n.trim().to_string(),
            Some(_) => {
                return Err(EnvelopeError::Event(
                    "\"namespace\" must be a non-empty string".into(),
                ));
            }
        };
        let run_id = match &raw.run_id {
            None | Some(Value::Null) => None,
            Some(v) => Some(step_value(v).ok_or_else(|| {
                EnvelopeError::Event("\"run_id\" must be a non-empty string or a number".into())
            })?),
        };
        let step = match &raw.step {
            None | Some(Value::Null) => None,
            Some(v) => Some(step_value(v).ok_or_else(|| {
                EnvelopeError::Event("\"step\" must be a non-empty string or a number".into())
            })?),
        };
        let args = match (&raw.input, &raw.args) {
            (Some(_), Some(_)) => Err(EnvelopeError::Event(
                "send the arguments once: \"input\" (an object) or \"args\" (JSON text), not both"
                    .into(),
            )),
            (None, None) => Err(EnvelopeError::Event(
                "no arguments: send \"input\" (an object) or \"args\" (JSON object text)".into(),
            )),
            (Some(Value::Object(input)), None) => {
                Ok(serde_json::to_string(input).unwrap_or_default())
            }
            (Some(other), None) => Err(EnvelopeError::Arguments(format!(
                "\"input\" must be a JSON object, got {}",
                json_type_phrase(other)
            ))),
            (None, Some(Value::String(text))) => match serde_json::from_str::<&RawValue>(text) {
                Ok(raw) if raw.get().trim_start().starts_with('{') => Ok(text.clone()),
                Ok(_) => Err(EnvelopeError::Arguments(
                    "\"args\" must be the text of a JSON object".into(),
                )),
                Err(e) => Err(EnvelopeError::Arguments(format!(
                    "\"args\" is not JSON: {e}"
                ))),
            },
            (None, Some(other)) => Err(EnvelopeError::Event(format!(
                "\"args\" must be a string of JSON text, got {}; send an object as \"input\"",
                json_type_phrase(other)
            ))),
        };
        let schema = match raw.schema {
            None | Some(Value::Null) => None,
            Some(s @ Value::Object(_)) => Some(s),
            Some(_) => return Err(EnvelopeError::Event("\"schema\" must be an object".into())),
        };
        Ok(Envelope {
            tool,
            namespace,
            run_id,
            step,
            args,
            schema,
            rest: raw.rest,
        })
    }

    /// The route: (namespace, tool), as `DEDUP_ROUTES` names it (`"<namespace>/<tool>"`).
    pub(crate) fn route(&self) -> (&str, &str) {
        (&self.namespace, &self.tool)
    }

    /// The call to key. `allowed`: the namespaces the deployment lets an envelope name
    /// (`DEDUP_ENVELOPE_NAMESPACES`; any when `None`); `caller_key_name`: the member that carries
    /// the caller's own idempotency key.
    pub(crate) fn tool_call(
        &self,
        allowed: Option<&[String]>,
        caller_key_name: &str,
        caller_key_scope: CallerKeyScope,
    ) -> Result<ToolCall, EnvelopeError> {
        if let Some(unknown) = self.rest.keys().find(|k| k.as_str() != caller_key_name) {
            return Err(EnvelopeError::Event(format!(
                "unknown member {unknown:?}: an envelope has tool, input or args, run_id, step, \
                 namespace, schema and {caller_key_name}"
            )));
        }
        let caller_key = match self.rest.get(caller_key_name) {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) if !k.trim().is_empty() => Some(k.clone()),
            Some(_) => {
                return Err(EnvelopeError::Event(format!(
                    "{caller_key_name:?} must be a non-empty string"
                )));
            }
        };
        if let Some(allowed) = allowed.filter(|a| !a.contains(&self.namespace)) {
            return Err(EnvelopeError::Event(format!(
                "namespace {:?} is not one this deployment allows (DEDUP_ENVELOPE_NAMESPACES: {})",
                self.namespace,
                allowed.join(", ")
            )));
        }
        let args = self.args.clone()?;
        // A caller key reaches past its run only where the deployment says so.
        let widened = caller_key.is_some() && caller_key_scope == CallerKeyScope::Namespace;
        if self.run_id.is_none() && !widened {
            return Err(EnvelopeError::Event(format!(
                "\"run_id\" is required: without it, identical calls of different runs would be \
                 one call (a caller key in {caller_key_name:?} is scoped by its run unless \
                 DEDUP_ENVELOPE_CALLER_KEY_SCOPE=namespace)"
            )));
        }
        let schema = match &self.schema {
            Some(s) => Some(Schema::for_tool(s, &self.tool).map_err(|e| {
                EnvelopeError::Event(format!("\"schema\" of tool {:?}: {e}", self.tool))
            })?),
            None => None,
        };
        Ok(ToolCall {
            tool: self.tool.clone(),
            args,
            namespace: scoped_namespace(ENTRY_POINT, &self.namespace),
            run_id: self.run_id.clone(),
            step: self.step.clone(),
            schema,
            caller_key,
            caller_key_scope,
            policy_name: None,
        })
    }

    /// The tool receives the arguments object, and a client context naming the tool and the key
    /// (`{"custom": {"dedupTool": …, "dedupKey": …}}`), which a single-tool Lambda can ignore.
    pub(crate) fn forward(&self, key: Option<&str>) -> Result<Forward, EnvelopeError> {
        let mut custom = serde_json::Map::new();
        custom.insert(DEDUP_TOOL_CONTEXT.into(), Value::String(self.tool.clone()));
        if let Some(key) = key {
            custom.insert(DEDUP_KEY_CONTEXT.into(), Value::String(key.into()));
        }
        Ok(Forward {
            payload: self.args.clone()?.into_bytes(),
            client_context: Some(serde_json::json!({ "custom": custom }).to_string()),
        })
    }
}

impl EntryPoint for Envelope {
    fn route(&self) -> (&str, &str) {
        Envelope::route(self)
    }

    fn call(&self, scoping: Scoping<'_>) -> Result<ToolCall, Unkeyed> {
        self.tool_call(
            scoping.envelope_namespaces,
            scoping.caller_key_name,
            scoping.envelope_caller_key_scope,
        )
        .map_err(|e| envelope_refusal(&e).into())
    }

    fn forward(&self, key: Option<&str>, _: Scoping<'_>) -> Result<Forward, Unforwardable> {
        Envelope::forward(self, key).map_err(|e| Unforwardable(e.to_string()))
    }

    fn classify(&self, reply: &[u8]) -> Result<ReplyClass, MalformedReply> {
        classify_json_reply(reply)
    }
}

impl Answers for Envelope {
    fn tool(&self) -> &str {
        &self.tool
    }

    fn result(&self, reply: &str, dedup: DedupInfo<'_>) -> String {
        result(reply, &dedup)
    }

    fn notice(&self, notice: &Notice, dedup: DedupInfo<'_>) -> String {
        error(notice, &dedup)
    }
}

/// The notice that refuses an envelope: the caller's problem, or the arguments'.
pub(crate) fn envelope_refusal(e: &EnvelopeError) -> Notice {
    match e {
        EnvelopeError::Event(m) => refusal(NoticeKind::InvalidEvent, m),
        EnvelopeError::Arguments(m) => refusal(NoticeKind::InvalidArguments, m),
    }
}

/// `{"result": <reply>, "dedup": {...}}`; `reply` must be JSON text (it was checked, or stored
/// after being checked).
pub(crate) fn result(reply: &str, dedup: &DedupInfo<'_>) -> String {
    let dedup = dedup.json();
    let mut out = String::with_capacity(reply.len() + dedup.len() + 24);
    out.push_str("{\"result\":");
    out.push_str(reply.trim());
    out.push_str(",\"dedup\":");
    out.push_str(&dedup);
    out.push('}');
    out
}

/// `{"error": {"type": …, "message": …}, "dedup": {...}}`.
pub(crate) fn error(notice: &Notice, dedup: &DedupInfo<'_>) -> String {
    let mut out = String::with_capacity(notice.message.len() + 128);
    out.push_str("{\"error\":{\"type\":");
    crate::key::push_json_str(&mut out, notice.kind.status());
    out.push_str(",\"message\":");
    crate::key::push_json_str(&mut out, &notice.message);
    if let Some(ms) = notice.retry_after_ms {
        out.push_str(",\"retry_after_ms\":");
        out.push_str(&ms.to_string());
    }
    out.push_str("},\"dedup\":");
    out.push_str(&dedup.json());
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn input_and_args_text_are_the_same_call() {
        let a = Envelope::parse(&json!({"tool": "charge_card", "input": {"b": 1, "a": "x"},
                                         "run_id": "r", "step": 7}))
        .unwrap();
        let b = Envelope::parse(
            &json!({"tool": "charge_card", "args": "{\"a\":\"x\",\"b\":1}",
                                         "run_id": "r", "step": "7"}),
        )
        .unwrap();
        let (ca, cb) = (
            a.tool_call(None, "idempotency_key", CallerKeyScope::Run)
                .unwrap(),
            b.tool_call(None, "idempotency_key", CallerKeyScope::Run)
                .unwrap(),
        );
        assert_eq!(ca.namespace, format!("{ENTRY_POINT}:{DEFAULT_NAMESPACE}"));
        let allowed = ["payments".to_string()];
        let refused = a
            .tool_call(Some(&allowed), "idempotency_key", CallerKeyScope::Run)
            .unwrap_err();
        assert!(
            matches!(&refused, EnvelopeError::Event(m) if m.contains("DEDUP_ENVELOPE_NAMESPACES")),
            "{refused}"
        );
        let payments = Envelope::parse(
            &json!({"tool": "charge_card", "input": {}, "run_id": "r", "namespace": "payments"}),
        )
        .unwrap();
        assert_eq!(
            payments
                .tool_call(Some(&allowed), "idempotency_key", CallerKeyScope::Run)
                .unwrap()
                .namespace,
            "envelope:payments"
        );
        assert_eq!(
            (ca.step.as_deref(), cb.step.as_deref()),
            (Some("7"), Some("7"))
        );
        assert_eq!(a.route(), ("envelope", "charge_card"));
        assert_eq!(a.forward(None).unwrap().payload, br#"{"a":"x","b":1}"#);
        let forward = b.forward(Some("k")).unwrap();
        assert_eq!(forward.payload, br#"{"a":"x","b":1}"#);
        assert_eq!(
            forward.client_context.as_deref(),
            Some(r#"{"custom":{"dedupKey":"k","dedupTool":"charge_card"}}"#)
        );
    }

    #[test]
    fn every_problem_is_named() {
        let cases = [
            (json!({"tool": "", "input": {}, "run_id": "r"}), "tool"),
            (json!({"tool": "t", "run_id": "r"}), "no arguments"),
            (
                json!({"tool": "t", "input": {}, "args": "{}", "run_id": "r"}),
                "not both",
            ),
            (
                json!({"tool": "t", "input": {}, "run_id": "r", "stpe": 1}),
                "unknown member \"stpe\"",
            ),
            (
                json!({"tool": "t", "input": {}, "idempotency_key": 7}),
                "must be a non-empty string",
            ),
            (
                json!({"tool": "t", "input": {}, "run_id": "r", "step": [1]}),
                "step",
            ),
            (
                json!({"tool": "t", "input": {}, "run_id": "r", "schema": 3}),
                "schema",
            ),
        ];
        for (event, needle) in cases {
            let err = Envelope::parse(&event)
                .and_then(|e| e.tool_call(None, "idempotency_key", CallerKeyScope::Run))
                .unwrap_err();
            assert!(err.to_string().contains(needle), "{event}: {err}");
        }
        let keyed_without_run =
            Envelope::parse(&json!({"tool": "t", "input": {}, "idempotency_key": "k"})).unwrap();
        assert!(
            keyed_without_run
                .tool_call(None, "idempotency_key", CallerKeyScope::Run)
                .unwrap_err()
                .to_string()
                .contains("DEDUP_ENVELOPE_CALLER_KEY_SCOPE=namespace"),
            "a caller key is scoped by its run: it does not stand in for one"
        );
        let keyed = keyed_without_run
            .tool_call(None, "idempotency_key", CallerKeyScope::Namespace)
            .unwrap();
        assert_eq!(
            (
                keyed.caller_key.as_deref(),
                keyed.run_id,
                keyed.caller_key_scope
            ),
            (Some("k"), None, CallerKeyScope::Namespace),
            "a widened caller key stands in for the run"
        );
        assert!(
            Envelope::parse(&json!({"tool": "t", "input": {}}))
                .unwrap()
                .tool_call(None, "idempotency_key", CallerKeyScope::Namespace)
                .is_err(),
            "widening a caller key's scope does not make a run optional without one"
        );
        let no_run = Envelope::parse(&json!({"tool": "t", "input": {}})).unwrap();
        assert!(
            no_run
                .tool_call(None, "idempotency_key", CallerKeyScope::Run)
                .unwrap_err()
                .to_string()
                .contains("run_id")
        );
        for (event, needle) in [
            (
                json!({"tool": "t", "input": [1], "run_id": "r"}),
                "must be a JSON object",
            ),
            (
                json!({"tool": "t", "args": "[1]", "run_id": "r"}),
                "JSON object",
            ),
            (
                json!({"tool": "t", "args": "{oops", "run_id": "r"}),
                "not JSON",
            ),
        ] {
            let err = Envelope::parse(&event)
                .unwrap()
                .tool_call(None, "idempotency_key", CallerKeyScope::Run)
                .unwrap_err();
            assert!(matches!(err, EnvelopeError::Arguments(_)), "{event}: {err}");
            assert!(err.to_string().contains(needle), "{event}: {err}");
        }
    }

    #[test]
    fn a_schema_may_be_a_json_schema_or_a_tool_definition() {
        for schema in [
            json!({"type": "object", "properties": {"amount": {"type": "integer"}}}),
            json!({"name": "t", "inputSchema": {"type": "object", "properties": {"amount": {"type": "integer"}}}}),
        ] {
            let e = Envelope::parse(
                &json!({"tool": "t", "input": {"amount": 1}, "run_id": "r", "schema": schema}),
            )
            .unwrap();
            assert!(
                e.tool_call(None, "idempotency_key", CallerKeyScope::Run)
                    .unwrap()
                    .schema
                    .is_some()
            );
        }
    }

    #[test]
    fn answers_and_errors_cannot_be_confused() {
        let dedup = DedupInfo {
            outcome: "replayed",
            key: Some("0123"),
            first_ran_ms: None,
            mark: false,
        };
        let answer: Value = serde_json::from_str(&result(" {\"ok\":true}\n", &dedup)).unwrap();
        assert_eq!(
            answer,
            json!({"result": {"ok": true}, "dedup": {"outcome": "replayed", "key": "0123"}})
        );
        let mut notice = Notice::new(NoticeKind::InProgress, "still running");
        notice.retry_after_ms = Some(900);
        let dedup = DedupInfo {
            outcome: "in_progress",
            key: Some("0123"),
            first_ran_ms: None,
            mark: false,
        };
        let err: Value = serde_json::from_str(&error(&notice, &dedup)).unwrap();
        assert_eq!(
            err,
            json!({"error": {"type": "in_progress", "message": "still running", "retry_after_ms": 900},
                   "dedup": {"outcome": "in_progress", "key": "0123"}})
        );
        assert!(is_envelope(&json!({"tool": "x"})));
        assert!(!is_envelope(&json!({"actionGroup": "x"})));
        assert!(!is_envelope(&json!([1])));
    }
}
