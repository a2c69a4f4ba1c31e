//! Bedrock Agents action-group adapter: the input event (both flavours), the run id and step a
//! call is scoped by, and the responses.
//!
//! `aws_lambda_events`' `AgentEvent` models only the OpenAPI flavour (it requires `apiPath`), so
//! the types here are our own.
//!
//! # Scope: what counts as "the same call"
//!
//! A key is `namespace` (agent id + action group), tool, run id, step and the normalized
//! arguments. The run id is always `sessionId`. The step is, in order:
//!
//! 1. **The caller's step** (the article's strategy D): the session attribute named by
//!    `DEDUP_STEP_ATTRIBUTE` (default `dedup_step`), set by the application on every
//!    `InvokeAgent` call: `sessionState = {"sessionAttributes": {"dedup_step": "7"}}`. A retry of
//!    the same step resends the same value; the next step increments it. This is the only mode
//!    that tells a retry from a deliberate repeat of identical arguments in the same turn.
//! 2. **`DEDUP_SCOPE=turn`** (the default): a hash of `inputText`. A caller that retries a failed
//!    turn resends the same text, so the retry replays; a later turn usually has different text,
//!    so a deliberate repeat there executes. It cannot tell apart two identical calls inside one
//!    turn (both replay one result), nor two turns with identical text (the second replays).
//! 3. **`DEDUP_SCOPE=session`**: no step. Identical calls anywhere in the session are one call,
//!    so a deliberate repeat in a later turn is replayed too.
//!
//! Whatever the mode, the article's hard ceiling holds: from the arguments alone nobody can tell
//! a retry from a deliberate repeat with identical arguments; only a step the caller supplies can.

pub(crate) mod event;
pub(crate) mod response;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use event::ActionGroupEvent;
pub(crate) use event::{CheckedCall, EventError};
pub use response::{ReplyTo, ResponseState, notice, operator_reply, validate_reply};

use crate::doors::port::{
    self, Answers, DedupInfo, EntryPoint, Forward, MalformedReply, Notice, NoticeKind, Scope,
    Scoping, Unforwardable, Unkeyed, refusal as refused,
};
use crate::key::{CallerKeyScope, Schema};

/// This entry point's name in every key (see [`port::scoped_namespace`]).
pub(crate) const ENTRY_POINT: &str = "bedrock";

/// The session attribute through which the executor hands the derived key to the tool.
pub(crate) const DEDUP_KEY_ATTRIBUTE: &str = "dedup_key";

/// The step of `call`: the caller's step attribute when present, else what `scope` says.
pub fn step(call: &CheckedCall, step_attribute: &str, scope: Scope) -> Option<String> {
    let supplied = match call.reply_to.session_attributes.get(step_attribute) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    supplied.or_else(|| match scope {
        Scope::Turn => Some(turn_step(call.input_text)),
        Scope::Session => None,
    })
}

/// `"turn:"` + 16 hex digits of SHA-256 of the turn's input text.
pub(crate) fn turn_step(input_text: &str) -> String {
    let digest = Sha256::digest(input_text.as_bytes());
    format!("turn:{}", hex::encode(&digest[..8]))
}

/// The format-free call of an action-group event: the declared parameter types become its
/// schema, the session its run, [`step`] its step.
pub fn call(
    envelope: &ActionGroupEvent,
    step_attribute: &str,
    caller_key_name: &str,
    scope: Scope,
) -> Result<port::ToolCall, EventError> {
    let call = envelope.tool_call()?;
    let schema = Schema::from_declared_types(call.declared_types()).map_err(|e| {
        EventError::ActionGroupEvent {
            reply_to: Box::new(call.reply_to.clone()),
            message: e.to_string(),
        }
    })?;
    let caller_key = call
        .reply_to
        .session_attributes
        .get(caller_key_name)
        .and_then(port::step_value);
    Ok(port::ToolCall {
        caller_key,
        step: step(&call, step_attribute, scope),
        namespace: port::scoped_namespace(ENTRY_POINT, &call.namespace()),
        tool: call.tool().to_string(),
        run_id: Some(call.session_id.to_string()),
        args: call.args,
        schema: Some(schema),
        caller_key_scope: CallerKeyScope::Run,
        policy_name: None,
    })
}

/// One action-group invocation: the event as it came (forwarded as it came) and its envelope.
#[derive(Debug)]
pub struct ActionGroupCall<'a> {
    event: &'a Value,
    envelope: ActionGroupEvent<'a>,
}

impl<'a> ActionGroupCall<'a> {
    /// Reads what a route and a response need; the arguments are checked by
    /// [`EntryPoint::call`].
    pub(crate) fn parse(event: &'a Value) -> Result<ActionGroupCall<'a>, EventError> {
        ActionGroupEvent::parse(event).map(|envelope| ActionGroupCall { event, envelope })
    }
}

impl EntryPoint for ActionGroupCall<'_> {
    fn route(&self) -> (&str, &str) {
        (&self.envelope.reply_to.action_group, self.tool())
    }

    fn call(&self, scoping: Scoping<'_>) -> Result<port::ToolCall, Unkeyed> {
        call(
            &self.envelope,
            scoping.step_attribute,
            scoping.caller_key_name,
            scoping.scope,
        )
        .map_err(|e| {
            refusal(&e)
                .unwrap_or_else(|| refused(NoticeKind::InvalidEvent, &e.to_string()))
                .into()
        })
    }

    fn forward(&self, key: Option<&str>, _: Scoping<'_>) -> Result<Forward, Unforwardable> {
        forward_bytes(self.event, key)
            .map(|payload| Forward {
                payload,
                client_context: None,
            })
            .map_err(|e| Unforwardable(e.to_string()))
    }

    fn classify(&self, reply: &[u8]) -> Result<crate::decide::ReplyClass, MalformedReply> {
        validate_reply(reply, &self.envelope.reply_to).map_err(|reason| MalformedReply {
            expected: "a Bedrock response",
            reason,
        })
    }

    fn stored_form(&self, reply: Vec<u8>) -> Vec<u8> {
        response::session_changes_only(&reply, &self.envelope.reply_to).unwrap_or(reply)
    }
}

impl Answers for ActionGroupCall<'_> {
    fn tool(&self) -> &str {
        self.envelope.reply_to.tool()
    }

    /// The stored reply with this caller's own session attributes, and the tool's changes to them.
    fn result(&self, reply: &str, dedup: DedupInfo<'_>) -> String {
        let answer = response::with_own_session(reply, &self.envelope.reply_to);
        let marker = match (dedup.marks_replay(), dedup.first_ran()) {
            (true, Some(first_ran)) => Some([
                ("toolcall-dedup.outcome", dedup.outcome.to_string()),
                (
                    "toolcall-dedup.key",
                    dedup.key.unwrap_or_default().to_string(),
                ),
                ("toolcall-dedup.first_ran", first_ran),
            ]),
            _ => None,
        };
        response::with_marker(answer, &self.envelope.reply_to, marker)
    }

    fn notice(&self, notice: &Notice, _: DedupInfo<'_>) -> String {
        notice_response(&self.envelope.reply_to, notice)
    }
}

/// The notice for an event error a Bedrock response can carry (`None` for
/// [`EventError::Unrecognised`]): arguments the model can fix, or an event only the
/// configuration can.
pub(crate) fn refusal(e: &EventError) -> Option<Notice> {
    let (kind, message) = match e {
        EventError::Arguments { message, .. } => (NoticeKind::InvalidArguments, message),
        EventError::ActionGroupEvent { message, .. } => (NoticeKind::InvalidEvent, message),
        EventError::Unrecognised(_) => return None,
    };
    Some(refused(kind, message))
}

/// A notice as a Bedrock response: REPROMPT when the model can act on it, else FAILURE.
pub(crate) fn notice_response(reply_to: &ReplyTo, notice: &Notice) -> String {
    let state = if notice.kind.model_can_act() {
        ResponseState::Reprompt
    } else {
        ResponseState::Failure
    };
    response::finish_text(
        reply_to,
        Some(state),
        notice.kind.http_status(),
        notice.body_json(),
    )
    .to_string()
}

/// The event to forward to the tool, serialized without cloning it: unchanged except
/// `sessionAttributes.dedup_key`, which is `key`, or absent without one (a pass-through), so that
/// a key an earlier call left in the session never reaches the tool as this call's idempotency key.
pub fn forward_bytes(event: &Value, key: Option<&str>) -> serde_json::Result<Vec<u8>> {
    use serde::ser::{Serialize, SerializeMap, Serializer};

    struct WithKey<'a> {
        event: &'a serde_json::Map<String, Value>,
        key: Option<&'a str>,
    }
    struct Attributes<'a> {
        attributes: Option<&'a serde_json::Map<String, Value>>,
        key: Option<&'a str>,
    }
    impl Serialize for Attributes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(None)?;
            for (k, v) in self.attributes.into_iter().flatten() {
                if k != DEDUP_KEY_ATTRIBUTE {
                    map.serialize_entry(k, v)?;
                }
            }
            if let Some(key) = self.key {
                map.serialize_entry(DEDUP_KEY_ATTRIBUTE, key)?;
            }
            map.end()
        }
    }
    impl Serialize for WithKey<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(None)?;
            let mut wrote_attributes = false;
            for (k, v) in self.event {
                if k == "sessionAttributes" && (v.is_object() || self.key.is_some()) {
                    wrote_attributes = true;
                    let attributes = Attributes {
                        attributes: v.as_object(),
                        key: self.key,
                    };
                    map.serialize_entry(k, &attributes)?;
                } else {
                    map.serialize_entry(k, v)?;
                }
            }
            if !wrote_attributes && self.key.is_some() {
                let attributes = Attributes {
                    attributes: None,
                    key: self.key,
                };
                map.serialize_entry("sessionAttributes", &attributes)?;
            }
            map.end()
        }
    }
    // Room for a typical event (about 1 KB) from the start, rather than growing from 128 bytes.
    let mut bytes = Vec::with_capacity(2048);
    match event.as_object() {
        Some(event) => serde_json::to_writer(&mut bytes, &WithKey { event, key })?,
        None => serde_json::to_writer(&mut bytes, event)?,
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The step of a call with these session attributes and this turn.
    fn step_of(attrs: Value, input: &str, scope: Scope) -> Option<String> {
        let event = json!({"agent": {"id": "A"}, "sessionId": "s", "actionGroup": "g", "function": "f",
                           "inputText": input, "sessionAttributes": attrs});
        let envelope = ActionGroupEvent::parse(&event).unwrap();
        step(&envelope.tool_call().unwrap(), "dedup_step", scope)
    }

    #[test]
    fn the_callers_step_wins_over_the_scope() {
        let three = json!({"dedup_step": "3"});
        assert_eq!(
            step_of(three.clone(), "hello", Scope::Turn).as_deref(),
            Some("3")
        );
        assert_eq!(
            step_of(three, "hello", Scope::Session).as_deref(),
            Some("3")
        );
        let four = json!({"dedup_step": 4});
        assert_eq!(step_of(four, "hello", Scope::Session).as_deref(), Some("4"));
        assert_eq!(
            step_of(json!({}), "hello", Scope::Turn),
            Some(turn_step("hello"))
        );
        assert_ne!(turn_step("hello"), turn_step("hello again"));
        assert_eq!(step_of(json!({}), "hello", Scope::Session), None);
    }

    #[test]
    fn forwarding_only_adds_the_key() {
        let forward_event = |event: &Value, key: Option<&str>| -> Value {
            serde_json::from_slice(&forward_bytes(event, key).unwrap()).unwrap()
        };
        let event = json!({"a": 1, "sessionAttributes": {"x": "y"}});
        let f = forward_event(&event, Some("k1"));
        assert_eq!(
            f,
            json!({"a": 1, "sessionAttributes": {"x": "y", "dedup_key": "k1"}})
        );
        assert_eq!(
            forward_event(&json!({"a": 1}), Some("k")),
            json!({"a": 1, "sessionAttributes": {"dedup_key": "k"}})
        );
        assert_eq!(forward_event(&event, None), event);
        let stale = json!({"a": 1, "sessionAttributes": {"x": "y", "dedup_key": "old"}});
        assert_eq!(
            forward_event(&stale, None),
            json!({"a": 1, "sessionAttributes": {"x": "y"}}),
            "a key left by an earlier call never reaches the tool"
        );
    }

    #[test]
    fn a_session_attributes_value_that_is_not_an_object_gives_way_only_to_a_key() {
        let odd = json!({"a": 1, "sessionAttributes": "not an object"});
        for (event, key, expected) in [
            (
                &odd,
                Some("k1"),
                json!({"a": 1, "sessionAttributes": {"dedup_key": "k1"}}),
            ),
            (&odd, None, odd.clone()),
            (&json!([1, 2]), Some("k1"), json!([1, 2])),
        ] {
            let bytes = forward_bytes(event, key).unwrap();
            let parsed: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(parsed, expected, "{event} {key:?}");
        }
    }
}
