//! The action-group input event, both flavours, read leniently and then checked strictly.
//!
//! Reading happens in two steps so that each failure gets the right answer:
//! 1. [`ActionGroupEvent::parse`] finds what a reply needs (action group, function or method + path,
//!    session attributes). Without it no Bedrock response can be built, so the error becomes a
//!    Lambda error. The pass-through mode (`DEDUP_MODE=off`) needs nothing more.
//! 2. [`ActionGroupEvent::tool_call`] checks the session and every parameter against its declared type and
//!    builds the arguments the key core reads. Its errors are answered as Bedrock responses.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::{Map, Value};

use super::response::{Flavour, ReplyTo};
use crate::doors::port::json_type;

/// Declared parameter types (`ParameterDetail.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeclaredType {
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
    pub(crate) fn name(self) -> &'static str {
        match self {
            DeclaredType::String => "string",
            DeclaredType::Number => "number",
            DeclaredType::Integer => "integer",
            DeclaredType::Boolean => "boolean",
            DeclaredType::Array => "array",
        }
    }
}

/// The event's fields, borrowed from it: every one optional, so that the checks can say what is
/// wrong. A field of the wrong JSON type makes the event unreadable.
#[derive(Debug, Clone, Default)]
struct RawEvent<'a> {
    message_version: Option<&'a str>,
    agent_id: Option<&'a str>,
    input_text: Option<&'a str>,
    session_id: Option<&'a str>,
    action_group: Option<&'a str>,
    function: Option<&'a str>,
    api_path: Option<&'a str>,
    http_method: Option<&'a str>,
    parameters: Vec<RawParameter<'a>>,
    /// `requestBody.content`: media type → `{"properties": [parameter, ...]}`.
    body_content: Option<&'a Map<String, Value>>,
    session_attributes: Option<&'a Map<String, Value>>,
    prompt_session_attributes: Option<&'a Map<String, Value>>,
}

impl<'a> RawEvent<'a> {
    fn read(event: &'a Map<String, Value>) -> Result<RawEvent<'a>, String> {
        let mut raw = RawEvent::default();
        // One pass over the members: a lookup per field would walk the map a dozen times.
        for (name, value) in event {
            let value = Some(value);
            match name.as_str() {
                "messageVersion" => raw.message_version = text(value, || name)?,
                "inputText" => raw.input_text = text(value, || name)?,
                "sessionId" => raw.session_id = text(value, || name)?,
                "actionGroup" => raw.action_group = text(value, || name)?,
                "function" => raw.function = text(value, || name)?,
                "apiPath" => raw.api_path = text(value, || name)?,
                "httpMethod" => raw.http_method = text(value, || name)?,
                "parameters" => raw.parameters = parameters(value, name)?,
                "sessionAttributes" => raw.session_attributes = object(value, || name)?,
                "promptSessionAttributes" => {
                    raw.prompt_session_attributes = object(value, || name)?
                }
                "agent" => {
                    raw.agent_id = match object(value, || name)? {
                        Some(agent) => text(agent.get("id"), || "agent.id")?,
                        None => None,
                    }
                }
                "requestBody" => {
                    raw.body_content = match object(value, || name)? {
                        Some(body) => object(body.get("content"), || "requestBody.content")?,
                        None => None,
                    }
                }
                _ => {}
            }
        }
        Ok(raw)
    }
}

/// One entry of `parameters` or of a request body's `properties`.
#[derive(Debug, Clone, Copy)]
struct RawParameter<'a> {
    name: &'a str,
    declared: Option<&'a str>,
    value: &'a Value,
}

/// A list of parameters (absent or `null`: none), each `{"name", "type"?, "value"?}`.
fn parameters<'a>(list: Option<&'a Value>, path: &str) -> Result<Vec<RawParameter<'a>>, String> {
    let list = match list {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(wrong_type(path, "an array", other)),
    };
    let mut read = Vec::with_capacity(list.len());
    for (i, p) in list.iter().enumerate() {
        // The path is written only for an error message.
        let at = |member: &str| format!("{path}[{i}]{member}");
        let p = p
            .as_object()
            .ok_or_else(|| wrong_type(&at(""), "an object", p))?;
        let member = |name: &str| text(p.get(name), || at(&format!(".{name}")));
        read.push(RawParameter {
            name: member("name")?.ok_or_else(|| format!("{} is missing", at(".name")))?,
            declared: member("type")?,
            value: p.get("value").unwrap_or(&Value::Null),
        });
    }
    Ok(read)
}

/// A member as text; absent or `null` is `None`. `path` names it in an error.
fn text<P: AsRef<str>>(
    value: Option<&Value>,
    path: impl FnOnce() -> P,
) -> Result<Option<&str>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(wrong_type(path().as_ref(), "a string", other)),
    }
}

/// A member as an object; absent or `null` is `None`. `path` names it in an error.
fn object<P: AsRef<str>>(
    value: Option<&Value>,
    path: impl FnOnce() -> P,
) -> Result<Option<&Map<String, Value>>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(wrong_type(path().as_ref(), "an object", other)),
    }
}

fn wrong_type(path: &str, expected: &str, found: &Value) -> String {
    format!("{path} is a JSON {}, expected {expected}", json_type(found))
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not an action-group event, or one no reply can be addressed to: answered with a Lambda error.
    #[error("not a Bedrock Agents action-group event: {0}")]
    Unrecognised(String),
    /// A usable event with a problem only the caller or the agent's configuration can fix
    /// (no session, an unknown parameter type): answered with a Bedrock FAILURE response.
    #[error("invalid action-group event: {message}")]
    ActionGroupEvent {
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
            EventError::ActionGroupEvent { reply_to, .. }
            | EventError::Arguments { reply_to, .. } => Some(reply_to),
        }
    }
}

/// The part of an event that routing and replies need, read from the event without copying it.
#[derive(Debug, Clone)]
pub struct ActionGroupEvent<'a> {
    /// What every response to this event must echo: action group, function or API path, session
    /// attributes.
    pub reply_to: ReplyTo,
    raw: RawEvent<'a>,
}

/// One parameter, checked against its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param<'a> {
    /// The parameter's name, unique within the call.
    pub(crate) name: &'a str,
    /// Its declared type (`string` when the event declares none).
    pub(crate) declared: DeclaredType,
    /// The value as text: a string as sent, any other JSON value written as JSON.
    pub(crate) value: Cow<'a, str>,
}

/// A checked tool call, borrowed from its event: what the key core and the dispatcher need.
#[derive(Debug, Clone)]
pub struct CheckedCall<'a> {
    /// Where the response is addressed; it also names the tool (see [`CheckedCall::tool`]).
    pub reply_to: &'a ReplyTo,
    /// `agent.id`: with the action group, the namespace.
    pub(crate) agent_id: &'a str,
    /// `sessionId`: the run the call belongs to.
    pub session_id: &'a str,
    /// `inputText`, the user's turn (empty when absent); hashed into the step under
    /// `DEDUP_SCOPE=turn`.
    pub(crate) input_text: &'a str,
    /// `parameters` then (OpenAPI) `requestBody` properties, in event order.
    pub(crate) params: Vec<Param<'a>>,
    /// The arguments as the key core reads them: a JSON object of name → value string, in event
    /// order. The declared types (see [`CheckedCall::declared_types`]) say how to compare each value.
    pub args: String,
}

impl<'a> ActionGroupEvent<'a> {
    /// Reads the outer fields of `event`.
    pub fn parse(event: &'a Value) -> Result<ActionGroupEvent<'a>, EventError> {
        let Some(object) = event.as_object() else {
            return Err(EventError::Unrecognised(format!(
                "the event is a JSON {}, not an object",
                json_type(event)
            )));
        };
        let raw = RawEvent::read(object).map_err(EventError::Unrecognised)?;
        let action_group = non_empty(raw.action_group)
            .ok_or_else(|| EventError::Unrecognised("no actionGroup".into()))?;
        let flavour = match (non_empty(raw.function), non_empty(raw.api_path)) {
            (Some(function), None) => Flavour::Function {
                function: function.to_string(),
            },
            (None, Some(api_path)) => {
                let method = non_empty(raw.http_method).ok_or_else(|| {
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
        if let Some(version) = raw.message_version.filter(|v| *v != "1.0") {
            return Err(EventError::Unrecognised(format!(
                "messageVersion {version:?} is not supported (only \"1.0\")"
            )));
        }
        let reply_to = ReplyTo::new(
            action_group,
            flavour,
            raw.session_attributes.cloned().unwrap_or_default(),
            raw.prompt_session_attributes.cloned().unwrap_or_default(),
        );
        Ok(ActionGroupEvent { reply_to, raw })
    }

    /// Checks the session and the parameters and builds the key core's arguments.
    pub fn tool_call(&self) -> Result<CheckedCall<'_>, EventError> {
        let event_error = |message: String| EventError::ActionGroupEvent {
            reply_to: Box::new(self.reply_to.clone()),
            message,
        };
        let session_id =
            non_empty(self.raw.session_id).ok_or_else(|| event_error("no sessionId".into()))?;
        let agent_id =
            non_empty(self.raw.agent_id).ok_or_else(|| event_error("no agent.id".into()))?;

        let mut raw_params = self.raw.parameters.clone();
        for (content_type, content) in self.raw.body_content.into_iter().flatten() {
            let path = format!("requestBody.content[{content_type:?}].properties");
            raw_params.extend(parameters(content.get("properties"), &path).map_err(event_error)?);
        }

        let mut seen = HashSet::with_capacity(raw_params.len());
        let mut params = Vec::with_capacity(raw_params.len());
        for p in &raw_params {
            if p.name.is_empty() {
                return Err(event_error("a parameter has an empty name".into()));
            }
            if !seen.insert(p.name) {
                return Err(event_error(format!(
                    "parameter {:?} appears twice (in parameters and requestBody, or repeated)",
                    p.name
                )));
            }
            let declared_name = p.declared.unwrap_or("string");
            let declared = DeclaredType::parse(declared_name).ok_or_else(|| {
                event_error(format!(
                    "parameter {:?} has type {declared_name:?}; Bedrock types are string|number|integer|boolean|array",
                    p.name
                ))
            })?;
            let value = match p.value {
                Value::String(s) => Cow::Borrowed(s.as_str()),
                Value::Null => continue,
                // Return-of-control payloads have been seen with unquoted values; accept them.
                other => Cow::Owned(other.to_string()),
            };
            check_value(p.name, declared, &value).map_err(|message| EventError::Arguments {
                reply_to: Box::new(self.reply_to.clone()),
                message,
            })?;
            params.push(Param {
                name: p.name,
                declared,
                value,
            });
        }
        let args = args_text(&params);
        Ok(CheckedCall {
            reply_to: &self.reply_to,
            agent_id,
            session_id,
            input_text: self.raw.input_text.unwrap_or_default(),
            params,
            args,
        })
    }
}

impl CheckedCall<'_> {
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
        self.params.iter().map(|p| (p.name, p.declared.name()))
    }
}

/// A JSON object text of name → value string, in the given order.
fn args_text(params: &[Param<'_>]) -> String {
    let mut out = Vec::with_capacity(
        2 + params
            .iter()
            .map(|p| p.name.len() + p.value.len() + 6)
            .sum::<usize>(),
    );
    out.push(b'{');
    for (i, p) in params.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // serde_json's string escaper; writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, p.name);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, &*p.value);
    }
    out.push(b'}');
    String::from_utf8(out).unwrap_or_default()
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
    // Any JSON array (its elements are skipped, not built).
    if serde_json::from_str::<Vec<serde::de::IgnoredAny>>(s).is_ok() {
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
        let envelope = ActionGroupEvent::parse(&event).unwrap();
        let call = envelope.tool_call().unwrap();
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
        let envelope = ActionGroupEvent::parse(&event).unwrap();
        let call = envelope.tool_call().unwrap();
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

    /// Fields are read from the event in place: one of the wrong JSON type makes the event
    /// unreadable and is named; a malformed request-body parameter is the agent's configuration.
    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let unreadable = |event: Value| match ActionGroupEvent::parse(&event) {
            Err(EventError::Unrecognised(message)) => message,
            other => panic!("{event}: {other:?}"),
        };
        let mut event = fd(json!([]));
        event["sessionId"] = json!(42);
        assert_eq!(
            unreadable(event),
            "sessionId is a JSON number, expected a string"
        );
        let mut event = fd(json!([]));
        event["agent"] = json!({"id": ["A"]});
        assert_eq!(
            unreadable(event),
            "agent.id is a JSON array, expected a string"
        );
        assert_eq!(
            unreadable(fd(json!("amount=5"))),
            "parameters is a JSON string, expected an array"
        );
        assert_eq!(
            unreadable(fd(json!([{"type": "number", "value": "5"}]))),
            "parameters[0].name is missing"
        );
        let mut event = fd(json!([]));
        event["sessionAttributes"] = json!("k=v");
        assert_eq!(
            unreadable(event),
            "sessionAttributes is a JSON string, expected an object"
        );

        let mut event = fd(json!([]));
        event["requestBody"] = json!({"content": {"application/json": {"properties": [7]}}});
        let envelope = ActionGroupEvent::parse(&event).unwrap();
        match envelope.tool_call() {
            Err(EventError::ActionGroupEvent { message, .. }) => assert_eq!(
                message,
                r#"requestBody.content["application/json"].properties[0] is a JSON number, expected an object"#
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_are_classified_by_who_can_fix_them() {
        let not_object = ActionGroupEvent::parse(&json!([1])).unwrap_err();
        assert!(matches!(not_object, EventError::Unrecognised(_)));
        let mut no_session = fd(json!([]));
        no_session.as_object_mut().unwrap().remove("sessionId");
        let err = ActionGroupEvent::parse(&no_session)
            .unwrap()
            .tool_call()
            .unwrap_err();
        assert!(matches!(err, EventError::ActionGroupEvent { .. }), "{err}");
        let bad_arg = fd(json!([{"name": "amount", "type": "number", "value": "abc"}]));
        let err = ActionGroupEvent::parse(&bad_arg)
            .unwrap()
            .tool_call()
            .unwrap_err();
        assert!(matches!(err, EventError::Arguments { .. }), "{err}");
        let dup = fd(json!([{"name": "a", "value": "1"}, {"name": "a", "value": "2"}]));
        assert!(ActionGroupEvent::parse(&dup).unwrap().tool_call().is_err());
        let object_type = fd(json!([{"name": "a", "type": "object", "value": "{}"}]));
        assert!(matches!(
            ActionGroupEvent::parse(&object_type)
                .unwrap()
                .tool_call()
                .unwrap_err(),
            EventError::ActionGroupEvent { .. }
        ));
    }
}
