//! Amazon Bedrock AgentCore Gateway adapter: the executor as the Gateway's **REQUEST and RESPONSE
//! interceptor**, which reaches every tool behind the Gateway (OpenAPI, Smithy, MCP servers,
//! Runtime, Lambda), with no change to any tool.
//!
//! The Gateway invokes an interceptor Lambda with `interceptorInputVersion` and the MCP request
//! (see the AgentCore developer guide, "Types of interceptors"):
//!
//! ```text
//! REQUEST:  {"interceptorInputVersion": "1.0", "mcp": {"gatewayRequest": {"headers": {...},
//!            "body": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
//!                     "params": {"name": "payments___charge_card", "arguments": {...}}}}}}
//! RESPONSE: the same, plus "gatewayResponse": {"statusCode": 200, "body": {"jsonrpc": ..., "result": ...}}
//! ```
//!
//! Only `tools/call` is keyed; everything else (`initialize`, `tools/list`, notifications) passes
//! through untouched. A `tools/call` is keyed as:
//!
//! - **namespace** `interceptor:<gateway>/<target>`: the gateway is the client context's
//!   `GATEWAY_ARN` when the Gateway sends one, else `-`; the target is the tool name's prefix;
//! - **tool** the name without the target prefix; **arguments** `params.arguments`;
//! - **run** the `Mcp-Session-Id` header (the interceptor needs `passRequestHeaders: true`);
//!   without one the call is sessionless and gets what `DEDUP_SESSIONLESS` says;
//! - **step** `params._meta.<DEDUP_STEP_ATTRIBUTE>`, else none (the session is the scope).
//!
//! **REQUEST**: claimed → the request passes through unchanged (only its body is returned, never
//! its headers: an `Authorization` header returned would override the target's credential
//! provider); completed → `transformedGatewayResponse`, the stored result under the *new*
//! request's JSON-RPC `id`; in flight, store down → a JSON-RPC error whose `data.dedup` says so
//! (the Gateway answers with it and does not call the target).
//!
//! **RESPONSE**: the claim's token is never handed through the Gateway. The claim is taken under a
//! token whose prefix names the request (a hash of the key and the JSON-RPC `id`,
//! [`Interception::owner`]); the RESPONSE invocation derives the same name from the request it
//! sees, reads the record, and settles it (fenced by the token it read) only when that request
//! holds it. The response is classified as the other doors do: `result` (also with `isError`) is
//! stored; a JSON-RPC error for a request the target refused (`-32700`, `-32600`, `-32601`,
//! `-32602`, HTTP 4xx but 409/429) releases; any other error keeps the claim until its lease ends.
//! Our own answers carry `data.dedup` (errors) or meet a completed record (replays), and are
//! passed through without a write.

use std::collections::{BTreeMap, HashMap};

pub(crate) mod flow;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::agentcore::TOOL_NAME_DELIMITER;
use crate::key::CallerKeyScope;
use crate::seam::{
    Answers, DedupInfo, Notice, NoticeKind, ReplyClass, Sessionless, ToolCall, json_type, refusal,
    scoped_namespace, step_value,
};

/// This entry point's name in every key (see [`scoped_namespace`]).
pub const ENTRY_POINT: &str = "interceptor";
/// The member that marks an interceptor invocation.
pub const INPUT_VERSION: &str = "interceptorInputVersion";
/// The header that names the MCP session: the call's run.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The client-context key some Gateways send with the gateway's ARN.
pub const GATEWAY_ARN_CONTEXT: &str = "GATEWAY_ARN";
/// The JSON-RPC error code of the executor's own answers (server-defined range).
pub const DEDUP_ERROR_CODE: i64 = -32000;
/// JSON-RPC errors that say the request was refused before anything ran.
const REFUSED_CODES: [i64; 4] = [-32700, -32600, -32601, -32602];

/// True when `event` is a Gateway interceptor invocation.
pub fn is_interception(event: &Value) -> bool {
    event.get(INPUT_VERSION).is_some()
}

/// Why an interceptor invocation cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterceptorError {
    /// Not an interceptor payload this adapter can answer (a Lambda error: there is no format to
    /// answer in).
    #[error("invalid AgentCore Gateway interceptor event: {0}")]
    Event(String),
}

/// Which interception point invoked us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the Gateway calls the target.
    Request,
    /// After the target answered (also after a REQUEST interceptor answered for the target).
    Response,
}

/// One interceptor invocation.
#[derive(Debug, Clone)]
pub struct Interception<'a> {
    /// REQUEST or RESPONSE.
    pub phase: Phase,
    body: &'a Value,
    headers: Option<&'a Map<String, Value>>,
    response: Option<&'a Map<String, Value>>,
    gateway: &'a str,
}

/// A `tools/call` inside an interception.
#[derive(Debug, Clone)]
pub struct ToolsCall<'a> {
    /// The target name (the prefix of the tool name).
    pub target: &'a str,
    /// The tool name without the target prefix.
    pub tool: &'a str,
    arguments: &'a Map<String, Value>,
    meta: Option<&'a Map<String, Value>>,
    /// The request's JSON-RPC id, which every answer carries.
    id: &'a Value,
}

impl<'a> Interception<'a> {
    /// Reads the interceptor payload; `custom` is the client context's custom map, if any.
    pub fn parse(
        event: &'a Value,
        custom: Option<&'a HashMap<String, String>>,
    ) -> Result<Interception<'a>, InterceptorError> {
        let bad = |m: String| InterceptorError::Event(m);
        match event.get(INPUT_VERSION).and_then(Value::as_str) {
            Some("1.0") => {}
            other => {
                return Err(bad(format!(
                    "{INPUT_VERSION} {other:?} is not supported (only \"1.0\")"
                )));
            }
        }
        let mcp = event
            .get("mcp")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("no \"mcp\" object (only MCP targets are intercepted)".into()))?;
        let request = mcp
            .get("gatewayRequest")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("no mcp.gatewayRequest object".into()))?;
        let body = request.get("body").unwrap_or(&Value::Null);
        let response = mcp.get("gatewayResponse").and_then(Value::as_object);
        Ok(Interception {
            phase: if response.is_some() {
                Phase::Response
            } else {
                Phase::Request
            },
            body,
            headers: request.get("headers").and_then(Value::as_object),
            response,
            gateway: custom
                .and_then(|c| c.get(GATEWAY_ARN_CONTEXT))
                .map(|g| g.trim())
                .filter(|g| !g.is_empty())
                .unwrap_or("-"),
        })
    }

    /// The request's `tools/call`, or `None` for every other message (passed through).
    pub fn tools_call(&self) -> Option<Result<ToolsCall<'a>, Notice>> {
        if self.body.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        Some(self.read_tools_call())
    }

    fn read_tools_call(&self) -> Result<ToolsCall<'a>, Notice> {
        let invalid = |m: String| refusal(NoticeKind::InvalidArguments, &m);
        let params = self
            .body
            .get("params")
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("tools/call without a params object".into()))?;
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid("tools/call without a tool name".into()))?;
        let (target, tool) = name.split_once(TOOL_NAME_DELIMITER).unwrap_or(("", name));
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => EMPTY.get_or_init(Map::new),
            Some(Value::Object(args)) => args,
            Some(other) => {
                return Err(invalid(format!(
                    "the arguments of {tool} must be a JSON object, got a JSON {}",
                    json_type(other)
                )));
            }
        };
        Ok(ToolsCall {
            target,
            tool,
            arguments,
            meta: params.get("_meta").and_then(Value::as_object),
            id: self.id(),
        })
    }

    /// The gateway this invocation came through, as named in every key (`-` when unknown).
    pub fn gateway(&self) -> &'a str {
        self.gateway
    }

    /// The namespace of `target`'s calls (and of its learned catalog).
    pub fn namespace(&self, target: &str) -> String {
        scoped_namespace(ENTRY_POINT, &format!("{}/{target}", self.gateway))
    }

    /// At RESPONSE, the tools a `tools/list` answer lists, grouped by target (the tool name's
    /// prefix) and then by tool name without it: `{"inputSchema", "annotations"}` of each. `None`
    /// for any other message, or a listing without tools.
    pub fn listed_tools(&self) -> Option<BTreeMap<&'a str, Map<String, Value>>> {
        if self.phase != Phase::Response
            || self.body.get("method").and_then(Value::as_str) != Some("tools/list")
        {
            return None;
        }
        let tools = self
            .response?
            .get("body")?
            .pointer("/result/tools")?
            .as_array()?;
        let mut by_target: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let (target, name) = name.split_once(TOOL_NAME_DELIMITER).unwrap_or(("", name));
            let mut entry = Map::new();
            for member in ["inputSchema", "annotations"] {
                if let Some(value) = tool.get(member) {
                    entry.insert(member.into(), value.clone());
                }
            }
            by_target
                .entry(target)
                .or_default()
                .insert(name.to_string(), Value::Object(entry));
        }
        (!by_target.is_empty()).then_some(by_target)
    }

    /// The `Mcp-Session-Id` header (header names are matched case-insensitively).
    pub fn session(&self) -> Option<&'a str> {
        self.headers?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(SESSION_HEADER))
            .and_then(|(_, v)| v.as_str())
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }

    /// The call to key, or why there is none (see the module docs). The caller's own idempotency
    /// key is the `_meta` member `caller_key_name` names, else that argument.
    pub fn tool_call(
        &self,
        call: &ToolsCall<'_>,
        step_attribute: &str,
        caller_key_name: &str,
        sessionless: Sessionless,
    ) -> Result<ToolCall, crate::seam::Unkeyed> {
        let run_id = self.session().map(str::to_string);
        let caller_key = call
            .meta
            .and_then(|m| m.get(caller_key_name))
            .or_else(|| call.arguments.get(caller_key_name))
            .and_then(step_value);
        // A caller's key (here written by the model) is scoped by its session like any other
        // key: it never stands in for one.
        if run_id.is_none() {
            let missing = format!(
                "the request has no {SESSION_HEADER} header (set passRequestHeaders on the interceptor)"
            );
            sessionless.unkeyed(missing)?;
        }
        Ok(ToolCall {
            tool: call.tool.to_string(),
            args: serde_json::to_string(call.arguments).unwrap_or_default(),
            namespace: self.namespace(call.target),
            run_id,
            step: call
                .meta
                .and_then(|m| m.get(step_attribute))
                .and_then(step_value),
            schema: None,
            caller_key,
            caller_key_scope: CallerKeyScope::Run,
        })
    }

    /// The JSON-RPC id of the request (`null` when it has none).
    pub fn id(&self) -> &'a Value {
        self.body.get("id").unwrap_or(&Value::Null)
    }

    /// The name the claim's token carries: a hash of the key and this request's JSON-RPC id, so
    /// that the RESPONSE invocation of this request, and only it, recognises the claim.
    pub fn owner(&self, key: &str) -> String {
        let digest = Sha256::new()
            .chain_update(key.as_bytes())
            .chain_update([0])
            .chain_update(self.id().to_string().as_bytes())
            .finalize();
        crate::key::hex(&digest[..12])
    }

    /// The REQUEST answer that lets the request through unchanged (its body only).
    pub fn pass_request(&self) -> String {
        output("transformedGatewayRequest", json!({ "body": self.body }))
    }

    /// The refusal of a `tools/call` that cannot be read (no tool name, arguments not an object).
    pub fn refusal(&self, notice: &Notice) -> String {
        let dedup = DedupInfo {
            outcome: "bad_request",
            key: None,
        };
        error_answer(self.id(), notice, dedup)
    }

    /// The RESPONSE answer that passes the target's response on unchanged.
    pub fn pass_response(&self) -> String {
        let member = |name| self.response.and_then(|r| r.get(name));
        let transformed = json!({
            "statusCode": member("statusCode").unwrap_or(&json!(200)),
            "body": member("body").unwrap_or(&Value::Null),
        });
        output("transformedGatewayResponse", transformed)
    }

    /// The target's response as the executor settles it: `None` when it is one of our own
    /// answers or there is none (nothing to settle); else the reply to store (the `result` text)
    /// and its class, or `Err(outcome_unknown)` for an error that stores nothing.
    pub fn target_reply(&self) -> Option<Result<(String, ReplyClass), bool>> {
        let response = self.response?;
        let status = response
            .get("statusCode")
            .and_then(Value::as_u64)
            .unwrap_or(200);
        let body = response.get("body").filter(|b| !b.is_null())?;
        if let Some(error) = body.get("error") {
            if error.pointer("/data/dedup").is_some() {
                return None;
            }
            let code = error.get("code").and_then(Value::as_i64);
            let refused = code.is_some_and(|c| REFUSED_CODES.contains(&c));
            return Some(Err(!refused));
        }
        match body.get("result") {
            Some(result) if status < 400 => {
                let class = if result.get("isError").and_then(Value::as_bool) == Some(true) {
                    ReplyClass::Failure
                } else {
                    ReplyClass::Success
                };
                Some(Ok((result.to_string(), class)))
            }
            _ => Some(match status {
                409 | 429 => Err(true),
                400..=499 => Err(false),
                _ => Err(true),
            }),
        }
    }
}

impl Answers for ToolsCall<'_> {
    fn tool(&self) -> &str {
        self.tool
    }

    /// The stored `result` (JSON text) under this request's id.
    fn result(&self, result: &str, _: DedupInfo<'_>) -> String {
        let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        answer(rpc("result", self.id, result))
    }

    /// The executor's own answer, as a JSON-RPC error marked `data.dedup`.
    fn notice(&self, notice: &Notice, dedup: DedupInfo<'_>) -> String {
        error_answer(self.id, notice, dedup)
    }
}

/// The executor's own answer to the request `id`: a JSON-RPC error whose `data.dedup` marks it,
/// so that the RESPONSE invocation passes it on instead of settling a claim with it.
fn error_answer(id: &Value, notice: &Notice, dedup: DedupInfo<'_>) -> String {
    let mut mark = json!({ "outcome": dedup.outcome, "status": notice.kind.status() });
    if let Some(key) = dedup.key {
        mark["key"] = key.into();
    }
    if let Some(ms) = notice.retry_after_ms {
        mark["retry_after_ms"] = ms.into();
    }
    let error = json!({
        "code": DEDUP_ERROR_CODE,
        "message": notice.message,
        "data": { "dedup": mark },
    });
    answer(rpc("error", id, error))
}

/// A REQUEST answer the Gateway sends instead of calling the target.
fn answer(body: Value) -> String {
    output(
        "transformedGatewayResponse",
        json!({ "statusCode": 200, "body": body }),
    )
}

fn rpc(member: &str, id: &Value, value: Value) -> Value {
    let mut body = json!({ "jsonrpc": "2.0", "id": id });
    body[member] = value;
    body
}

fn output(member: &str, value: Value) -> String {
    let mut mcp = json!({});
    mcp[member] = value;
    json!({ "interceptorOutputVersion": "1.0", "mcp": mcp }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: i64, session: Option<&str>) -> Value {
        let mut headers = json!({"Accept": "application/json"});
        if let Some(s) = session {
            headers["Mcp-Session-Id"] = s.into();
        }
        json!({"interceptorInputVersion": "1.0", "mcp": {"gatewayRequest": {
            "path": "/mcp", "httpMethod": "POST", "headers": headers,
            "body": {"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": "payments___charge_card", "arguments": {"amount": 5}}}}}})
    }

    #[test]
    fn a_tools_call_is_keyed_by_gateway_target_tool_and_session() {
        let event = request(7, Some("sess-1"));
        let i = Interception::parse(&event, None).unwrap();
        assert_eq!(i.phase, Phase::Request);
        let call = i.tools_call().unwrap().unwrap();
        assert_eq!((call.target, call.tool), ("payments", "charge_card"));
        let tc = i
            .tool_call(&call, "dedup_step", "idempotency_key", Sessionless::Refuse)
            .unwrap();
        assert_eq!(tc.namespace, "interceptor:-/payments");
        assert_eq!(tc.run_id.as_deref(), Some("sess-1"));
        assert_eq!(tc.args, r#"{"amount":5}"#);
        let out: Value = serde_json::from_str(&i.pass_request()).unwrap();
        assert_eq!(out["interceptorOutputVersion"], "1.0");
        assert_eq!(
            out["mcp"]["transformedGatewayRequest"]["body"],
            event["mcp"]["gatewayRequest"]["body"]
        );
        assert!(
            out["mcp"]["transformedGatewayRequest"]
                .get("headers")
                .is_none(),
            "headers are never returned"
        );
    }

    #[test]
    fn the_owner_differs_by_request_id_and_a_replay_carries_the_new_id() {
        let (a, b) = (request(7, Some("s")), request(8, Some("s")));
        let (a, b) = (
            Interception::parse(&a, None).unwrap(),
            Interception::parse(&b, None).unwrap(),
        );
        assert_ne!(a.owner("k"), b.owner("k"));
        assert_eq!(a.owner("k"), a.owner("k"));
        assert!(!a.owner("k").contains('.'));
        let call = b.tools_call().unwrap().unwrap();
        let dedup = DedupInfo {
            outcome: "replayed",
            key: Some("k"),
        };
        let out: Value = serde_json::from_str(&call.result(r#"{"content":[]}"#, dedup)).unwrap();
        assert_eq!(out["mcp"]["transformedGatewayResponse"]["body"]["id"], 8);
        assert_eq!(
            out["mcp"]["transformedGatewayResponse"]["body"]["result"],
            json!({"content": []})
        );
    }

    #[test]
    fn responses_are_classified_as_the_other_doors_do_and_our_own_answers_are_skipped() {
        let with = |response: Value| {
            let mut event = request(7, Some("s"));
            event["mcp"]["gatewayResponse"] = response;
            event
        };
        let class = |response: Value| {
            let event = with(response);
            Interception::parse(&event, None).unwrap().target_reply()
        };
        let ok = class(
            json!({"statusCode": 200, "body": {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}}),
        );
        assert!(matches!(ok, Some(Ok((_, ReplyClass::Success)))));
        let failed =
            class(json!({"statusCode": 200, "body": {"id": 7, "result": {"isError": true}}}));
        assert!(matches!(failed, Some(Ok((_, ReplyClass::Failure)))));
        let refused = class(
            json!({"statusCode": 200, "body": {"id": 7, "error": {"code": -32602, "message": "bad"}}}),
        );
        assert_eq!(refused, Some(Err(false)));
        let internal = class(
            json!({"statusCode": 200, "body": {"id": 7, "error": {"code": -32603, "message": "x"}}}),
        );
        assert_eq!(internal, Some(Err(true)));
        let ours = class(
            json!({"statusCode": 200, "body": {"id": 7, "error": {"code": -32000, "message": "x", "data": {"dedup": {}}}}}),
        );
        assert_eq!(ours, None);
        assert_eq!(class(json!({"statusCode": 200, "body": null})), None);
        assert_eq!(
            class(json!({"statusCode": 503, "body": {}})),
            Some(Err(true))
        );
        assert_eq!(
            class(json!({"statusCode": 400, "body": {}})),
            Some(Err(false))
        );
    }

    #[test]
    fn other_messages_pass_and_bad_payloads_are_named() {
        let mut event = request(1, None);
        event["mcp"]["gatewayRequest"]["body"] =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert!(
            Interception::parse(&event, None)
                .unwrap()
                .tools_call()
                .is_none()
        );
        let event = json!({"interceptorInputVersion": "2.0", "mcp": {}});
        assert!(Interception::parse(&event, None).is_err());
        let event = json!({"interceptorInputVersion": "1.0"});
        assert!(Interception::parse(&event, None).is_err());
        let mut event = request(1, None);
        event["mcp"]["gatewayRequest"]["body"]["params"]["arguments"] = json!([1]);
        let i = Interception::parse(&event, None).unwrap();
        assert!(i.tools_call().unwrap().is_err());
        let event = request(1, None);
        let i = Interception::parse(&event, None).unwrap();
        let call = i.tools_call().unwrap().unwrap();
        assert!(matches!(
            i.tool_call(
                &call,
                "dedup_step",
                "idempotency_key",
                Sessionless::PassThrough
            ),
            Err(crate::seam::Unkeyed::Sessionless(_))
        ));
        assert_eq!(
            i.tool_call(
                &call,
                "dedup_step",
                "idempotency_key",
                Sessionless::GatewayScope
            )
            .unwrap()
            .run_id,
            None
        );
    }
}
