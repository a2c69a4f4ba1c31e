//! Action-group responses: the ones the executor writes itself (REPROMPT/FAILURE notices), and the
//! check that a tool's reply is a Bedrock response before it is stored and replayed verbatim.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

/// Function details or OpenAPI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// A function-details action group: the answer goes in `functionResponse`.
    Function {
        /// The function name (`function` in the event).
        function: String,
    },
    /// An OpenAPI action group: the answer carries an HTTP status code and an `application/json`
    /// body.
    Api {
        /// The operation's path (`apiPath` in the event), echoed as received.
        api_path: String,
        /// The operation's method (`httpMethod` in the event), echoed as received; the tool's
        /// name spells it in upper case.
        http_method: String,
    },
}

/// What a response must echo to reach the call it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyTo {
    /// `actionGroup`: echoed in every response, and checked in the tool's reply.
    pub(crate) action_group: String,
    /// Which response shape the call needs.
    pub(crate) flavour: Flavour,
    /// The function name, or `"METHOD /apiPath"`.
    tool: String,
    /// `sessionAttributes`, echoed unchanged in every response the executor writes.
    pub(crate) session_attributes: Map<String, Value>,
    /// `promptSessionAttributes`, echoed unchanged in every response the executor writes.
    pub(crate) prompt_session_attributes: Map<String, Value>,
}

impl ReplyTo {
    /// Addresses a response; the tool name is derived from `flavour`.
    pub(crate) fn new(
        action_group: impl Into<String>,
        flavour: Flavour,
        session_attributes: Map<String, Value>,
        prompt_session_attributes: Map<String, Value>,
    ) -> ReplyTo {
        let tool = match &flavour {
            Flavour::Function { function } => function.clone(),
            Flavour::Api {
                api_path,
                http_method,
            } => format!("{} {api_path}", http_method.to_ascii_uppercase()),
        };
        ReplyTo {
            action_group: action_group.into(),
            flavour,
            tool,
            session_attributes,
            // The replay marker's attributes are ours (see `with_marker`): never echoed back.
            prompt_session_attributes: prompt_session_attributes
                .into_iter()
                .filter(|(attribute, _)| !attribute.starts_with(MARKER_PREFIX))
                .collect(),
        }
    }

    /// The function name, or `"METHOD /apiPath"`.
    pub(crate) fn tool(&self) -> &str {
        &self.tool
    }
}

impl Flavour {
    /// An OpenAPI flavour, as the event names it.
    pub(crate) fn api(api_path: &str, http_method: &str) -> Flavour {
        Flavour::Api {
            api_path: api_path.to_string(),
            http_method: http_method.to_string(),
        }
    }
}

/// `responseState` values. Success has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseState {
    /// The agent ends the turn with `DependencyFailedException`.
    Failure,
    /// The body goes back to the model, which may correct its call.
    Reprompt,
}

impl ResponseState {
    /// The wire value: `FAILURE` or `REPROMPT`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ResponseState::Failure => "FAILURE",
            ResponseState::Reprompt => "REPROMPT",
        }
    }
}

/// A response written by the executor itself: `body` is a short JSON object for the model.
pub fn notice(reply_to: &ReplyTo, state: ResponseState, http_status: u16, body: &Value) -> Value {
    finish(reply_to, Some(state), http_status, body)
}

/// The response a tool `tool` (a function's name, or an operation's `METHOD /apiPath`) of
/// `action_group` gives with `body_text` as its body: what an operator stores for a call whose
/// side effect they found done (`dedup settle --completed FILE --bedrock-body`). Its session maps
/// are empty: a replay answers with the caller's own.
pub fn operator_reply(action_group: &str, tool: &str, body_text: String) -> String {
    let flavour = match tool.split_once(' ') {
        Some((method, path))
            if !method.is_empty()
                && method.bytes().all(|b| b.is_ascii_uppercase())
                && path.starts_with('/') =>
        {
            Flavour::api(path, method)
        }
        _ => Flavour::Function {
            function: tool.to_string(),
        },
    };
    let reply_to = ReplyTo::new(action_group, flavour, Map::new(), Map::new());
    finish_text(&reply_to, None, 200, body_text).to_string()
}

/// A tool's successful response for `reply_to` with a JSON `body` (used by the demo tool).
#[cfg(any(test, feature = "stand-ins"))]
pub(crate) fn success(reply_to: &ReplyTo, body: &Value) -> Value {
    finish(reply_to, None, 200, body)
}

/// A response of either flavour, as the Bedrock user guide's "Lambda response" section writes it
/// (<https://docs.aws.amazon.com/bedrock/latest/userguide/agents-lambda.html>): a function-details
/// answer carries `functionResponse.responseState` (FAILURE or REPROMPT; none on success), an
/// OpenAPI answer its `httpStatusCode` and no `responseState`, which that flavour does not have.
pub(crate) fn finish(
    reply_to: &ReplyTo,
    state: Option<ResponseState>,
    http_status: u16,
    body: &Value,
) -> Value {
    finish_text(reply_to, state, http_status, body.to_string())
}

/// [`finish`] with the body already written as JSON text.
pub(crate) fn finish_text(
    reply_to: &ReplyTo,
    state: Option<ResponseState>,
    http_status: u16,
    body_text: String,
) -> Value {
    let mut response = match &reply_to.flavour {
        Flavour::Function { function } => json!({
            "actionGroup": reply_to.action_group,
            "function": function,
            "functionResponse": {"responseBody": {"TEXT": {"body": body_text}}},
        }),
        Flavour::Api {
            api_path,
            http_method,
        } => json!({
            "actionGroup": reply_to.action_group,
            "apiPath": api_path,
            "httpMethod": http_method,
            "httpStatusCode": http_status,
            "responseBody": {"application/json": {"body": body_text}},
        }),
    };
    if let (Some(state), Flavour::Function { .. }) = (state, &reply_to.flavour) {
        response["functionResponse"]["responseState"] = json!(state.as_str());
    }
    json!({
        "messageVersion": "1.0",
        "response": response,
        "sessionAttributes": reply_to.session_attributes,
        "promptSessionAttributes": reply_to.prompt_session_attributes,
    })
}

pub(crate) use crate::decide::ReplyClass;

/// The member of a stored reply that holds what the tool changed in each session map, in place of
/// the maps themselves: `{"sessionAttributes": {"set": {...}, "removed": [...]}, ...}`.
const SESSION_CHANGES: &str = "dedupSessionChanges";
/// The session maps a reply carries, each with the event's map it changes.
const SESSION_MAPS: [&str; 2] = ["sessionAttributes", "promptSessionAttributes"];

fn own_map<'a>(reply_to: &'a ReplyTo, name: &str) -> &'a Map<String, Value> {
    if name == SESSION_MAPS[0] {
        &reply_to.session_attributes
    } else {
        &reply_to.prompt_session_attributes
    }
}

/// A tool's reply as it is stored: each session map it carries is replaced by what the tool
/// changed in it (members set to a new value, members removed), relative to the event it got.
/// The session's own attributes (a tenant, an e-mail, the caller's key) are never stored, so a
/// replay to another session cannot carry them; [`with_own_session`] lays the changes over the
/// replayed call's own maps. `dedup_key`, which the executor itself puts in the forwarded event,
/// is not a change. `None` when the reply is not a JSON object (it was validated before, so never).
pub(crate) fn session_changes_only(reply: &[u8], reply_to: &ReplyTo) -> Option<Vec<u8>> {
    let mut value: Map<String, Value> = serde_json::from_slice(reply).ok()?;
    let mut changes = Map::new();
    for name in SESSION_MAPS {
        let Some(Value::Object(replied)) = value.remove(name) else {
            continue;
        };
        let before = own_map(reply_to, name);
        let is_ours = |k: &String| k == super::DEDUP_KEY_ATTRIBUTE;
        let set: Map<String, Value> = replied
            .iter()
            .filter(|(k, v)| !is_ours(k) && before.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let removed: Vec<&String> = before
            .keys()
            .filter(|k| !is_ours(k) && !replied.contains_key(*k))
            .collect();
        changes.insert(name.into(), json!({"set": set, "removed": removed}));
    }
    value.insert(SESSION_CHANGES.into(), Value::Object(changes));
    serde_json::to_vec(&value).ok()
}

/// The answer to `reply_to` from a stored reply: each session map the tool answered with is the
/// call's own map with the tool's changes laid over it. A reply stored before changes were kept
/// (it holds the first session's whole maps) answers with the call's own maps unchanged.
pub(crate) fn with_own_session(stored: &str, reply_to: &ReplyTo) -> String {
    let Ok(mut value) = serde_json::from_str::<Map<String, Value>>(stored) else {
        return stored.to_string();
    };
    match value.remove(SESSION_CHANGES) {
        Some(Value::Object(changes)) => {
            for (name, change) in changes {
                let Some(name) = SESSION_MAPS.into_iter().find(|m| *m == name) else {
                    continue;
                };
                let mut own = own_map(reply_to, name).clone();
                if let Some(removed) = change.get("removed").and_then(Value::as_array) {
                    for k in removed.iter().filter_map(Value::as_str) {
                        own.remove(k);
                    }
                }
                if let Some(Value::Object(set)) = change.get("set") {
                    own.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                value.insert(name.into(), Value::Object(own));
            }
        }
        _ => {
            for name in SESSION_MAPS {
                if value.get(name).is_some_and(Value::is_object) {
                    value.insert(name.into(), Value::Object(own_map(reply_to, name).clone()));
                }
            }
        }
    }
    Value::Object(value).to_string()
}

/// The prefix of the replay marker's prompt session attributes: ours, never a caller's.
pub(crate) const MARKER_PREFIX: &str = "toolcall-dedup.";

/// The Bedrock door's replay marker (`DEDUP_REPLAY_MARKER`): `marker`'s three prompt session
/// attributes on a replayed answer, beside the retry's own. Any attribute of ours already in the
/// answer is removed first, marker or not: prompt attributes last the whole turn, so a marker a
/// replay gave an earlier call of the turn comes back in the next call's event (and in a tool's
/// echo of it), and must never tell a fresh run it was a replay.
pub(crate) fn with_marker(
    answer: String,
    reply_to: &ReplyTo,
    marker: Option<[(&str, String); 3]>,
) -> String {
    if marker.is_none() && !answer.contains(MARKER_PREFIX) {
        return answer;
    }
    let Ok(mut value) = serde_json::from_str::<Map<String, Value>>(&answer) else {
        return answer;
    };
    let name = SESSION_MAPS[1];
    let mut prompt = match (value.remove(name), &marker) {
        (Some(Value::Object(prompt)), _) => prompt,
        (_, Some(_)) => own_map(reply_to, name).clone(),
        (other, None) => {
            if let Some(other) = other {
                value.insert(name.into(), other);
            }
            return Value::Object(value).to_string();
        }
    };
    prompt.retain(|attribute, _| !attribute.starts_with(MARKER_PREFIX));
    for (attribute, text) in marker.into_iter().flatten() {
        prompt.insert(attribute.to_string(), Value::String(text));
    }
    value.insert(name.into(), Value::Object(prompt));
    Value::Object(value).to_string()
}

/// Checks that `bytes` is a Bedrock action-group response for `reply_to`, and classifies it.
///
/// Every reply a tool gives passes here, so it is read without building a `serde_json::Value`: the
/// members checked are borrowed as raw JSON and read one by one, and the rest is only skipped.
pub fn validate_reply(bytes: &[u8], reply_to: &ReplyTo) -> Result<ReplyClass, String> {
    let reply = std::str::from_utf8(bytes)
        .ok()
        .and_then(object::<ReplyView<'_>>);
    let Some(response) = reply
        .and_then(|r| r.response)
        .and_then(|r| object::<ResponseView<'_>>(r.get()))
    else {
        serde_json::from_slice::<IgnoredAny>(bytes).map_err(|e| format!("not JSON: {e}"))?;
        return Err("no \"response\" object".into());
    };
    if let Some(group) = response.action_group
        && json_text(group).as_deref() != Some(reply_to.action_group.as_str())
    {
        return Err(format!(
            "response.actionGroup is {group}, the call was to {:?}",
            reply_to.action_group
        ));
    }
    let state_of = |state: Option<&RawValue>| -> Result<Option<ResponseState>, String> {
        match state.map(|s| (s, json_text(s))) {
            None => Ok(None),
            Some((s, _)) if s.get() == "null" => Ok(None),
            Some((_, Some(text))) if text == "FAILURE" => Ok(Some(ResponseState::Failure)),
            Some((_, Some(text))) if text == "REPROMPT" => Ok(Some(ResponseState::Reprompt)),
            Some((other, _)) => Err(format!(
                "responseState is {other}, expected FAILURE or REPROMPT"
            )),
        }
    };
    let class = |state: Option<ResponseState>| match state {
        None => ReplyClass::Success,
        Some(ResponseState::Failure) => ReplyClass::Failure,
        Some(ResponseState::Reprompt) => ReplyClass::Rejected,
    };
    match &reply_to.flavour {
        Flavour::Function { function } => {
            if let Some(f) = response.function
                && json_text(f).as_deref() != Some(function.as_str())
            {
                return Err(format!(
                    "response.function is {f}, the call was to {function:?}"
                ));
            }
            let fr = response
                .function_response
                .and_then(|fr| object::<ResponseView<'_>>(fr.get()))
                .ok_or("no response.functionResponse object")?;
            check_body(fr.response_body)?;
            Ok(class(state_of(fr.response_state)?))
        }
        Flavour::Api { api_path, .. } => {
            if let Some(p) = response.api_path
                && json_text(p).as_deref() != Some(api_path.as_str())
            {
                return Err(format!(
                    "response.apiPath is {p}, the call was to {api_path:?}"
                ));
            }
            let status = response
                .http_status_code
                .and_then(|s| serde_json::from_str::<u64>(s.get()).ok())
                .ok_or("no numeric response.httpStatusCode")?;
            if let Some(body) = response.response_body {
                check_body(Some(body))?;
            }
            Ok(match state_of(response.response_state)? {
                Some(state) => class(Some(state)),
                None => ReplyClass::from_http_status(status),
            })
        }
    }
}

/// A tool's reply, as far as [`validate_reply`] reads it.
#[derive(Deserialize)]
struct ReplyView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    response: Option<&'a RawValue>,
}

/// `response` (and `response.functionResponse`, which carries two of its members): each member as written (`null` included), so that each check can say what is wrong.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    action_group: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    function: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    function_response: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    api_path: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    http_status_code: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    response_body: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    response_state: Option<&'a RawValue>,
}

/// One content type's entry of a `responseBody`.
#[derive(Deserialize)]
struct ContentView<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    body: Option<&'a RawValue>,
}

/// `json` read as `T` when it is a JSON object (a derived struct would also take an array, by
/// position).
fn object<'a, T: Deserialize<'a>>(json: &'a str) -> Option<T> {
    if json.trim_start().starts_with('{') {
        serde_json::from_str(json).ok()
    } else {
        None
    }
}

/// A member that is present, `null` included (serde's `Option` would read `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The string `raw` holds, if it is one.
fn json_text(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(text) => Some(Cow::Borrowed(text)),
        // A string with escapes cannot be borrowed.
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

fn check_body(body: Option<&RawValue>) -> Result<(), String> {
    let body: BTreeMap<String, &RawValue> = body
        .and_then(|b| serde_json::from_str(b.get()).ok())
        .ok_or("no responseBody object")?;
    for (content_type, content) in body {
        let is_text = object::<ContentView<'_>>(content.get())
            .and_then(|c| c.body)
            .is_some_and(|b| b.get().starts_with('"'));
        if !is_text {
            return Err(format!(
                "responseBody[{content_type:?}].body is not a string"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_to(flavour: Flavour) -> ReplyTo {
        let attrs = json!({"a": "1"}).as_object().unwrap().clone();
        ReplyTo::new("group", flavour, attrs, Map::new())
    }

    #[test]
    fn responses_of_both_flavours_validate_and_classify() {
        let f = reply_to(Flavour::Function {
            function: "charge".into(),
        });
        let a = reply_to(Flavour::api("/charges", "post"));
        assert_eq!(a.tool(), "POST /charges");
        let body = json!({"ok": true});
        for rt in [&f, &a] {
            let ok = serde_json::to_vec(&success(rt, &body)).unwrap();
            assert_eq!(validate_reply(&ok, rt), Ok(ReplyClass::Success));
            // A function-details answer says FAILURE; an OpenAPI one says it by its status.
            let failure =
                serde_json::to_vec(&notice(rt, ResponseState::Failure, 502, &body)).unwrap();
            assert_eq!(validate_reply(&failure, rt), Ok(ReplyClass::Failure));
            let reprompt =
                serde_json::to_vec(&notice(rt, ResponseState::Reprompt, 400, &body)).unwrap();
            assert_eq!(validate_reply(&reprompt, rt), Ok(ReplyClass::Rejected));
        }
        // A tool's own OpenAPI reply may still carry a responseState: it is read.
        let mut stated = success(&a, &body);
        stated["response"]["responseState"] = json!("FAILURE");
        assert_eq!(
            validate_reply(&serde_json::to_vec(&stated).unwrap(), &a),
            Ok(ReplyClass::Failure)
        );
        let v = notice(&f, ResponseState::Reprompt, 409, &body);
        assert_eq!(
            v["response"]["functionResponse"]["responseState"],
            "REPROMPT"
        );
        assert_eq!(
            v["response"]["functionResponse"]["responseBody"]["TEXT"]["body"],
            r#"{"ok":true}"#
        );
        assert_eq!(v["sessionAttributes"], json!({"a": "1"}));
        let v = notice(&a, ResponseState::Failure, 503, &body);
        assert_eq!(
            (
                v["response"]["httpStatusCode"].as_u64(),
                v["response"].get("responseState")
            ),
            (Some(503), None),
            "an OpenAPI answer has a status and no responseState"
        );
        assert_eq!(v["response"]["httpMethod"], "post", "echoed as received");
        // A bare status from an OpenAPI tool: 5xx failed while acting (stored; 503 too: a status is
        // no word that nothing ran), 4xx refused the
        // input (released), 409 and 429 say "not now" and may follow an action (kept).
        for (status, class) in [
            (500, ReplyClass::Failure),
            (503, ReplyClass::Failure),
            (400, ReplyClass::Rejected),
            (404, ReplyClass::Rejected),
            (422, ReplyClass::Rejected),
            (409, ReplyClass::NotNow),
            (429, ReplyClass::NotNow),
            (201, ReplyClass::Success),
        ] {
            let mut reply = success(&a, &body);
            reply["response"]["httpStatusCode"] = json!(status);
            assert_eq!(
                validate_reply(&serde_json::to_vec(&reply).unwrap(), &a),
                Ok(class),
                "{status}"
            );
        }
    }

    /// Members are compared as the strings they hold, whatever escapes spell them; a `null`
    /// state is no state.
    #[test]
    fn replies_are_read_by_value_not_by_spelling() {
        let f = reply_to(Flavour::Function {
            function: "charge".into(),
        });
        let escaped = r#"{"response": {"actionGroup": "gr\u006fup", "function": "ch\u0061rge",
            "functionResponse": {"responseState": null, "responseBody": {"TEXT": {"body": "\"x\""}}}}}"#;
        assert_eq!(
            validate_reply(escaped.as_bytes(), &f),
            Ok(ReplyClass::Success)
        );
        let failure = r#"{"response": {"functionResponse": {"responseState": "FAIL\u0055RE",
            "responseBody": {"TEXT": {"body": "x"}}}}}"#;
        assert_eq!(
            validate_reply(failure.as_bytes(), &f),
            Ok(ReplyClass::Failure)
        );
        for (reply, error) in [
            ("[1, 2]", "no \"response\" object"),
            (r#"{"response": null}"#, "no \"response\" object"),
            (
                r#"{"response": {"actionGroup": null, "functionResponse": {}}}"#,
                "response.actionGroup is null, the call was to \"group\"",
            ),
            (
                r#"{"response": {"functionResponse": {"responseBody": {"TEXT": {"body": "x"}, "JSON": {}}}}}"#,
                "responseBody[\"JSON\"].body is not a string",
            ),
            (
                r#"{"response": {"functionResponse": {"responseState": 1, "responseBody": {}}}}"#,
                "responseState is 1, expected FAILURE or REPROMPT",
            ),
        ] {
            assert_eq!(
                validate_reply(reply.as_bytes(), &f),
                Err(error.to_string()),
                "{reply}"
            );
        }
        assert!(
            validate_reply(b"{\"response\": ", &f)
                .unwrap_err()
                .starts_with("not JSON")
        );
    }

    fn with_attrs(attrs: Value, prompt: Value) -> ReplyTo {
        let map = |v: Value| v.as_object().unwrap().clone();
        ReplyTo::new(
            "group",
            Flavour::Function {
                function: "charge".into(),
            },
            map(attrs),
            map(prompt),
        )
    }

    /// A replay carries the replayed call's own session, plus only what the tool changed in the
    /// first call's: never the first session's attributes.
    #[test]
    fn a_stored_reply_keeps_the_tools_session_changes_and_never_the_session() {
        let first = with_attrs(
            json!({"tenant": "acme", "email": "ana@acme.example", "cart": "3", "dedup_key": "old"}),
            json!({"turn": "a"}),
        );
        let mut reply = success(&first, &json!({"receipt": "ch_1"}));
        reply["sessionAttributes"] = json!({"tenant": "acme", "email": "ana@acme.example",
            "last_charge": "ch_1", "dedup_key": "k1"});
        let stored = session_changes_only(&serde_json::to_vec(&reply).unwrap(), &first).unwrap();
        let text = String::from_utf8(stored).unwrap();
        for private in ["acme", "ana@", "\"turn\"", "k1"] {
            assert!(!text.contains(private), "{private} stored: {text}");
        }

        let answered: Value = serde_json::from_str(&with_own_session(&text, &first)).unwrap();
        assert_eq!(
            answered["sessionAttributes"],
            json!({"tenant": "acme", "email": "ana@acme.example", "last_charge": "ch_1",
                   "dedup_key": "old"}),
            "the first caller gets the tool's map: its own, with the tool's change"
        );
        assert_eq!(answered["promptSessionAttributes"], json!({"turn": "a"}));
        assert_eq!(answered["response"], reply["response"]);

        let other = with_attrs(json!({"tenant": "globex", "cart": "9"}), json!({}));
        let answered: Value = serde_json::from_str(&with_own_session(&text, &other)).unwrap();
        assert_eq!(
            answered["sessionAttributes"],
            json!({"tenant": "globex", "last_charge": "ch_1"}),
            "another session: its own attributes, the tool's change, and the removal of cart"
        );
        assert_eq!(answered["promptSessionAttributes"], json!({}));

        // A reply without session maps answers without them; a reply stored before changes were
        // kept answers with the caller's own maps.
        let mut bare = success(&first, &json!({}));
        bare.as_object_mut().unwrap().remove("sessionAttributes");
        let stored = session_changes_only(&serde_json::to_vec(&bare).unwrap(), &first).unwrap();
        let answered: Value = serde_json::from_str(&with_own_session(
            std::str::from_utf8(&stored).unwrap(),
            &other,
        ))
        .unwrap();
        assert!(answered.get("sessionAttributes").is_none(), "{answered}");
        let legacy = reply.to_string();
        let answered: Value = serde_json::from_str(&with_own_session(&legacy, &other)).unwrap();
        assert_eq!(
            answered["sessionAttributes"],
            json!({"tenant": "globex", "cart": "9"})
        );
    }

    #[test]
    fn replies_that_are_not_bedrock_responses_are_refused() {
        let f = reply_to(Flavour::Function {
            function: "charge".into(),
        });
        for bad in [
            "not json",
            r#"{"statusCode": 200}"#,
            r#"{"response": {"functionResponse": {}}}"#,
            r#"{"response": {"function": "refund", "functionResponse": {"responseBody": {"TEXT": {"body": "x"}}}}}"#,
            r#"{"response": {"functionResponse": {"responseState": "SUCCESS", "responseBody": {"TEXT": {"body": "x"}}}}}"#,
            r#"{"response": {"functionResponse": {"responseBody": {"TEXT": {"body": {"not": "a string"}}}}}}"#,
        ] {
            assert!(validate_reply(bad.as_bytes(), &f).is_err(), "{bad}");
        }
    }
}
