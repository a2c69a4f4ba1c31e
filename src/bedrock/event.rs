//! The action-group input event, both flavours, read leniently and then checked strictly.
//!
//! Reading happens in two steps so that each failure gets the right answer:
//! 1. [`Envelope::parse`] finds what a reply needs (action group, function or method + path,
//!    session attributes). Without it no Bedrock response can be built, so the error becomes a
//!    Lambda error. The pass-through mode (`DEDUP_MODE=off`) needs nothing more.
//! 2. [`Envelope::tool_call`] checks the session and every parameter against its declared type and
//!    builds the arguments the key core reads. Its errors are answered as Bedrock responses.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::response::{Flavour, ReplyTo};
use crate::seam::json_type;

/// Declared parameter types (`ParameterDetail.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredType {
    /// `string` (also when no type is declared): any value.
    String,
    /// `number`: a decimal numeral, with optional sign, fraction and exponent.
    Number,
    /// `integer`: a whole number; a zero fraction (`"3.0"`) is accepted, an exponent is not.
    Integer,
    /// `boolean`: `true` or `false`, in any case.
    Boolean,
    /// `array`: a JSON array, or the bracketed `toString()` form Bedrock sends for arrays of
    /// objects.
    Array,
}

impl DeclaredType {
    fn parse(s: &str) -> Option<DeclaredType> {
        Some(match s {
            "string" => DeclaredType::String,
            "number" => DeclaredType::Number,
            "integer" => DeclaredType::Integer,
            "boolean" => DeclaredType::Boolean,
            "array" => DeclaredType::Array,
            _ => return None,
        })
    }

    /// The JSON Schema type name, as [`crate::key::Schema::from_declared_types`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            DeclaredType::String => "string",
            DeclaredType::Number => "number",
            DeclaredType::Integer => "integer",
            DeclaredType::Boolean => "boolean",
            DeclaredType::Array => "array",
        }
    }
}

/// The event exactly as deserialized: every field optional, so that checks can say what is wrong.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    message_version: Option<String>,
    agent: Option<RawAgent>,
    input_text: Option<String>,
    session_id: Option<String>,
    action_group: Option<String>,
    function: Option<String>,
    api_path: Option<String>,
    http_method: Option<String>,
    parameters: Option<Vec<RawParameter>>,
    request_body: Option<RawRequestBody>,
    session_attributes: Option<Map<String, Value>>,
    prompt_session_attributes: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RawAgent {
    id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct RawParameter {
    name: String,
    #[serde(rename = "type")]
    declared: Option<String>,
    #[serde(default)]
    value: Value,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RawRequestBody {
    #[serde(default)]
    content: Map<String, Value>,
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not an action-group event, or one no reply can be addressed to: answered with a Lambda error.
    #[error("not a Bedrock Agents action-group event: {0}")]
    Unrecognised(String),
    /// A usable envelope with a problem only the caller or the agent's configuration can fix
    /// (no session, an unknown parameter type): answered with a Bedrock FAILURE response.
    #[error("invalid action-group event: {message}")]
    Envelope {
        /// Where the FAILURE response is addressed.
        reply_to: Box<ReplyTo>,
        /// What is wrong, for the response body.
        message: String,
    },
    /// Arguments that do not match their declared types: answered with a REPROMPT, so that the
    /// model can correct them.
    #[error("invalid arguments: {message}")]
    Arguments {
        /// Where the REPROMPT response is addressed.
        reply_to: Box<ReplyTo>,
        /// Which parameter is wrong and what it must be; read by the model.
        message: String,
    },
}

impl EventError {
    /// Where a Bedrock response can be addressed, if anywhere.
    pub fn reply_to(&self) -> Option<&ReplyTo> {
        match self {
            EventError::Unrecognised(_) => None,
            EventError::Envelope { reply_to, .. } | EventError::Arguments { reply_to, .. } => {
                Some(reply_to)
            }
        }
    }
}

/// The part of an event that routing and replies need.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// What every response to this event must echo: action group, function or API path, session
    /// attributes.
    pub reply_to: ReplyTo,
    raw: RawEvent,
}

/// One parameter, checked against its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// The parameter's name, unique within the call.
    pub name: String,
    /// Its declared type (`string` when the event declares none).
    pub declared: DeclaredType,
    /// The value as text: a string as sent, any other JSON value written as JSON.
    pub value: String,
}

/// A checked tool call: what the key core and the dispatcher need.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// Where the response is addressed; it also names the tool (see [`ToolCall::tool`]).
    pub reply_to: ReplyTo,
    /// `agent.id`: with the action group, the namespace.
    pub agent_id: String,
    /// `sessionId`: the run the call belongs to.
    pub session_id: String,
    /// `inputText`, the user's turn (empty when absent); hashed into the step under
    /// `DEDUP_SCOPE=turn`.
    pub input_text: String,
    /// `parameters` then (OpenAPI) `requestBody` properties, in event order.
    pub params: Vec<Param>,
    /// The arguments as the key core reads them: a JSON object of name → value string, in event
    /// order. The declared types (see [`ToolCall::declared_types`]) say how to compare each value.
    pub args: String,
}

impl Envelope {
    /// Reads the envelope of `event`.
    pub fn parse(event: &Value) -> Result<Envelope, EventError> {
        if !event.is_object() {
            return Err(EventError::Unrecognised(format!(
                "the event is a JSON {}, not an object",
                json_type(event)
            )));
        }
        let raw =
            RawEvent::deserialize(event).map_err(|e| EventError::Unrecognised(e.to_string()))?;
        let action_group = non_empty(raw.action_group.as_deref())
            .ok_or_else(|| EventError::Unrecognised("no actionGroup".into()))?
            .to_string();
        let flavour = match (
            non_empty(raw.function.as_deref()),
            non_empty(raw.api_path.as_deref()),
        ) {
            (Some(function), None) => Flavour::Function {
                function: function.to_string(),
            },
            (None, Some(api_path)) => {
                let method = non_empty(raw.http_method.as_deref()).ok_or_else(|| {
                    EventError::Unrecognised(format!("apiPath {api_path:?} without httpMethod"))
                })?;
                Flavour::api(api_path, method)
            }
            (Some(_), Some(_)) => {
                return Err(EventError::Unrecognised(
                    "both function and apiPath are set; an event has one or the other".into(),
                ));
            }
            (None, None) => {
                let what = if raw.function.is_some() {
                    "function is empty"
                } else {
                    "neither function nor apiPath is set"
                };
                return Err(EventError::Unrecognised(what.into()));
            }
        };
        if let Some(version) = raw.message_version.as_deref().filter(|v| *v != "1.0") {
            return Err(EventError::Unrecognised(format!(
                "messageVersion {version:?} is not supported (only \"1.0\")"
            )));
        }
        let reply_to = ReplyTo::new(
            action_group,
            flavour,
            raw.session_attributes.clone().unwrap_or_default(),
            raw.prompt_session_attributes.clone().unwrap_or_default(),
        );
        Ok(Envelope { reply_to, raw })
    }

    /// Checks the session and the parameters and builds the key core's arguments.
    pub fn tool_call(&self) -> Result<ToolCall, EventError> {
        let envelope_error = |message: String| EventError::Envelope {
            reply_to: Box::new(self.reply_to.clone()),
            message,
        };
        let session_id = non_empty(self.raw.session_id.as_deref())
            .ok_or_else(|| envelope_error("no sessionId".into()))?
            .to_string();
        let agent_id = non_empty(self.raw.agent.as_ref().and_then(|a| a.id.as_deref()))
            .ok_or_else(|| envelope_error("no agent.id".into()))?
            .to_string();

        let mut raw_params: Vec<&RawParameter> = self.raw.parameters.iter().flatten().collect();
        let mut body_params = Vec::new();
        if let Some(body) = &self.raw.request_body {
            for (content_type, content) in &body.content {
                let properties = content.get("properties").cloned().unwrap_or(Value::Null);
                let props: Vec<RawParameter> = match properties {
                    Value::Null => Vec::new(),
                    other => Vec::deserialize(other).map_err(|e| {
                        envelope_error(format!(
                            "requestBody.content[{content_type:?}].properties: {e}"
                        ))
                    })?,
                };
                body_params.extend(props);
            }
        }
        raw_params.extend(body_params.iter());

        let mut seen = HashSet::new();
        let mut params = Vec::with_capacity(raw_params.len());
        for p in raw_params {
            if p.name.is_empty() {
                return Err(envelope_error("a parameter has an empty name".into()));
            }
            if !seen.insert(p.name.as_str()) {
                return Err(envelope_error(format!(
                    "parameter {:?} appears twice (in parameters and requestBody, or repeated)",
                    p.name
                )));
            }
            let declared_name = p.declared.as_deref().unwrap_or("string");
            let declared = DeclaredType::parse(declared_name).ok_or_else(|| {
                envelope_error(format!(
                    "parameter {:?} has type {declared_name:?}; Bedrock types are string|number|integer|boolean|array",
                    p.name
                ))
            })?;
            let value = match &p.value {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                // Return-of-control payloads have been seen with unquoted values; accept them.
                other => other.to_string(),
            };
            check_value(&p.name, declared, &value).map_err(|message| EventError::Arguments {
                reply_to: Box::new(self.reply_to.clone()),
                message,
            })?;
            params.push(Param {
                name: p.name.clone(),
                declared,
                value,
            });
        }
        let args = args_text(&params);
        Ok(ToolCall {
            reply_to: self.reply_to.clone(),
            agent_id,
            session_id,
            input_text: self.raw.input_text.clone().unwrap_or_default(),
            params,
            args,
        })
    }
}

impl ToolCall {
    /// The tool name: the function, or `"METHOD /apiPath"`.
    pub fn tool(&self) -> &str {
        self.reply_to.tool()
    }

    /// Who owns the tool: `agent.id + "/" + actionGroup`.
    pub fn namespace(&self) -> String {
        format!("{}/{}", self.agent_id, self.reply_to.action_group)
    }

    /// `(name, declared type)` pairs for [`crate::key::Schema::from_declared_types`].
    pub fn declared_types(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params
            .iter()
            .map(|p| (p.name.as_str(), p.declared.name()))
    }
}

/// A JSON object text of name → value string, in the given order.
fn args_text(params: &[Param]) -> String {
    let mut out = String::with_capacity(
        2 + params
            .iter()
            .map(|p| p.name.len() + p.value.len() + 6)
            .sum::<usize>(),
    );
    out.push('{');
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(p.name.clone()).to_string());
        out.push(':');
        out.push_str(&Value::String(p.value.clone()).to_string());
    }
    out.push('}');
    out
}

/// Checks a value against its declared type. The message goes back to the model, so it names
/// the parameter and the type; it quotes the value only when it is short.
fn check_value(name: &str, declared: DeclaredType, value: &str) -> Result<(), String> {
    let shown = || {
        if value.chars().count() <= 40 {
            format!("{value:?}")
        } else {
            format!("({} characters)", value.chars().count())
        }
    };
    let trimmed = value.trim();
    match declared {
        DeclaredType::String => Ok(()),
        DeclaredType::Number if is_numeral(trimmed, false) => Ok(()),
        DeclaredType::Integer if is_numeral(trimmed, true) => Ok(()),
        DeclaredType::Boolean
            if trimmed.eq_ignore_ascii_case("true") || trimmed.eq_ignore_ascii_case("false") =>
        {
            Ok(())
        }
        DeclaredType::Array if nesting_depth(trimmed) > MAX_ARRAY_DEPTH => Err(format!(
            "parameter {name:?} nests deeper than {MAX_ARRAY_DEPTH} levels"
        )),
        DeclaredType::Array if is_array_text(trimmed) => Ok(()),
        DeclaredType::Number => Err(format!(
            "parameter {name:?} must be a number, got {}",
            shown()
        )),
        DeclaredType::Integer => Err(format!(
            "parameter {name:?} must be an integer, got {}",
            shown()
        )),
        DeclaredType::Boolean => Err(format!(
            "parameter {name:?} must be true or false, got {}",
            shown()
        )),
        DeclaredType::Array => Err(format!(
            "parameter {name:?} must be a JSON array such as [\"a\",\"b\"], got {}",
            shown()
        )),
    }
}

/// A decimal numeral: optional sign, digits with an optional fraction, optional exponent. An
/// integer may carry a zero fraction (`"3.0"`) but no exponent.
fn is_numeral(s: &str, integer: bool) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) if !integer => (&s[..i], Some(&s[i + 1..])),
        Some(_) => return false,
        None => (s, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok =
        (!int.is_empty() || !frac.is_empty()) && digits(int) && digits(frac) && mantissa != ".";
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    let integral_ok = !integer || frac.bytes().all(|b| b == b'0');
    mantissa_ok && exponent_ok && integral_ok && !int.is_empty()
}

/// A JSON array, or the bracketed `toString()` form Bedrock sends for arrays of objects
/// (`[{sku=A, qty=1}]`, powertools-lambda-typescript #3710) as long as its brackets balance.
/// The latter is kept as an opaque string; the key core compares it byte for byte.
/// The deepest an `array` parameter's JSON may nest: the key core's default depth limit, so that
/// every array the event accepts is one the keyer can read as JSON (deeper text would be keyed as
/// an opaque string, and the tool would be handed it).
const MAX_ARRAY_DEPTH: usize = 64;

/// The deepest nesting of `[` and `{` outside string literals.
fn nesting_depth(s: &str) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for b in s.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

fn is_array_text(s: &str) -> bool {
    if serde_json::from_str::<Value>(s).is_ok_and(|v| v.is_array()) {
        return true;
    }
    if !(s.starts_with('[') && s.ends_with(']')) {
        return false;
    }
    let mut depth: i64 = 0;
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            _ => {}
        }
        if depth < 0 || (depth == 0 && i + 1 < s.len()) {
            return false;
        }
    }
    depth == 0
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fd(params: Value) -> Value {
        json!({
            "messageVersion": "1.0",
            "agent": {"id": "AG1", "name": "n", "alias": "a", "version": "1"},
            "inputText": "hi", "sessionId": "s1", "actionGroup": "payments", "function": "charge_card",
            "parameters": params, "sessionAttributes": {"k": "v"}, "promptSessionAttributes": {}
        })
    }

    #[test]
    fn function_details_become_ordered_string_arguments() {
        let event = fd(json!([
            {"name": "customer_id", "type": "string", "value": "cus_1"},
            {"name": "amount", "type": "number", "value": "42.50"},
            {"name": "capture", "type": "boolean", "value": true}
        ]));
        let call = Envelope::parse(&event).unwrap().tool_call().unwrap();
        assert_eq!(call.tool(), "charge_card");
        assert_eq!(call.namespace(), "AG1/payments");
        assert_eq!(
            call.args,
            r#"{"customer_id":"cus_1","amount":"42.50","capture":"true"}"#
        );
        let declared: Vec<_> = call.declared_types().collect();
        assert_eq!(
            declared,
            [
                ("customer_id", "string"),
                ("amount", "number"),
                ("capture", "boolean")
            ]
        );
    }

    #[test]
    fn openapi_reads_parameters_then_body_properties() {
        let event = json!({
            "agent": {"id": "AG1"}, "sessionId": "s", "actionGroup": "api", "apiPath": "/charges/{id}/refunds",
            "httpMethod": "post", "parameters": [{"name": "id", "type": "string", "value": "ch_1"}],
            "requestBody": {"content": {"application/json": {"properties": [
                {"name": "amount", "type": "number", "value": "5"}]}}}
        });
        let call = Envelope::parse(&event).unwrap().tool_call().unwrap();
        assert_eq!(call.tool(), "POST /charges/{id}/refunds");
        assert_eq!(call.args, r#"{"id":"ch_1","amount":"5"}"#);
    }

    #[test]
    fn values_must_match_their_declared_types() {
        for (declared, good, bad) in [
            ("number", ["42.50", "-1e3", " 7 "], ["abc", "1.2.3", "."]),
            ("integer", ["3", "-0", "3.00"], ["3.5", "1e3", ""]),
            ("boolean", ["true", "FALSE", "True"], ["yes", "1", ""]),
            (
                "array",
                ["[\"a\"]", "[]", "[{sku=A, qty=1}, {sku=B, qty=2}]"],
                ["a,b", "[{sku=A", "[a]]"],
            ),
        ] {
            for v in good {
                assert!(
                    check_value("p", DeclaredType::parse(declared).unwrap(), v).is_ok(),
                    "{declared} {v:?}"
                );
            }
            for v in bad {
                assert!(
                    check_value("p", DeclaredType::parse(declared).unwrap(), v).is_err(),
                    "{declared} {v:?}"
                );
            }
        }
    }

    #[test]
    fn array_text_nests_no_deeper_than_the_keyer_reads() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        let array = DeclaredType::Array;
        assert!(check_value("p", array, &nested(64)).is_ok());
        let err = check_value("p", array, &nested(65)).unwrap_err();
        assert_eq!(err, "parameter \"p\" nests deeper than 64 levels");
        assert!(check_value("p", array, &nested(10_000)).is_err());
        // Brackets inside strings are text.
        let in_string = format!("[\"{}\", \"\\\"[\"]", "[".repeat(100));
        assert!(check_value("p", array, &in_string).is_ok(), "{in_string}");
        assert_eq!(nesting_depth(r#"[{"a": [1]}, "]]]["]"#), 3);
    }

    #[test]
    fn errors_are_classified_by_who_can_fix_them() {
        let not_object = Envelope::parse(&json!([1])).unwrap_err();
        assert!(matches!(not_object, EventError::Unrecognised(_)));
        let mut no_session = fd(json!([]));
        no_session.as_object_mut().unwrap().remove("sessionId");
        let err = Envelope::parse(&no_session)
            .unwrap()
            .tool_call()
            .unwrap_err();
        assert!(matches!(err, EventError::Envelope { .. }), "{err}");
        let bad_arg = fd(json!([{"name": "amount", "type": "number", "value": "abc"}]));
        let err = Envelope::parse(&bad_arg).unwrap().tool_call().unwrap_err();
        assert!(matches!(err, EventError::Arguments { .. }), "{err}");
        let dup = fd(json!([{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]));
        assert!(Envelope::parse(&dup).unwrap().tool_call().is_err());
        let object_type = fd(json!([{"name": "a", "type": "object", "value": "{}"}]));
        assert!(matches!(
            Envelope::parse(&object_type)
                .unwrap()
                .tool_call()
                .unwrap_err(),
            EventError::Envelope { .. }
        ));
    }
}
