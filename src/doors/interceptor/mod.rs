//! Amazon Bedrock AgentCore Gateway adapter: the executor as the Gateway's **REQUEST and RESPONSE
//! interceptor**, which reaches every MCP tool behind the Gateway (OpenAPI, Smithy, MCP server and
//! Lambda targets), with no change to any tool.
//!
//! The contract is the AgentCore developer guide's *Types of interceptors*
//! (<https://docs.aws.amazon.com/bedrock-agentcore/latest/devguide/gateway-interceptors-types.html>):
//!
//! ```text
//! REQUEST:  {"interceptorInputVersion": "1.0", "mcp": {"gatewayRequest": {"headers": {...},
//!            "body": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
//!                     "params": {"name": "payments___charge_card", "arguments": {...}}}}}}
//! RESPONSE: the same, plus "gatewayResponse": {"statusCode": 200, "headers": {...},
//!            "body": {"jsonrpc": ..., "result": ...}} (with streaming on: one invocation per
//!            streamed event, "isStreamingResponse": true, later events carrying only "body")
//! ```
//!
//! Only `tools/call` is keyed; everything else (`initialize`, `tools/list`, notifications) passes
//! through untouched, and so do HTTP targets' invocations (an `http` payload: AgentCore Runtime,
//! passthrough and inference targets, answered with the documented `{"http": {}}`) and input
//! versions this adapter does not know (answered with version 1.0's pass-through, counted and
//! warned). A `tools/call` is keyed as:
//!
//! - **namespace** `interceptor:<gateway id>/<target>`: the gateway id from the client context's
//!   `GATEWAY_ARN`, else from the `Host` header (`<id>.gateway.bedrock-agentcore.<region>...`),
//!   else `DEDUP_GATEWAY_ID`, else `-` (warned: gateways sharing the function then share keys);
//!   the target is the tool name's prefix;
//! - **tool** the name without the target prefix; **arguments** `params.arguments`;
//! - **run** the `Mcp-Session-Id` header (the interceptor needs `passRequestHeaders: true`);
//!   without one the call is sessionless and gets what `DEDUP_SESSIONLESS` says;
//! - **step** `params._meta.<DEDUP_STEP_ATTRIBUTE>`, else none (the session is the scope).
//!
//! **REQUEST**: claimed → the request passes through unchanged (only its body is returned, never
//! its headers: an `Authorization` header returned would override the target's credential
//! provider); completed → `transformedGatewayResponse`, the stored result under the *new*
//! request's JSON-RPC `id`; in flight, store down → a JSON-RPC error whose `data.dedup` says so
//! (the Gateway answers with it and does not call the target). A batch holding a `tools/call` is
//! refused with a JSON-RPC error per request (MCP no longer has batches), never passed on
//! unprotected.
//!
//! **RESPONSE**: the claim's token is never handed through the Gateway. The claim is taken under a
//! token whose prefix names the request (a hash of the key, the JSON-RPC `id` and the client
//! context's `REQUEST_ID` when there is one, [`Interception::owner`]); the RESPONSE invocation
//! derives the same name from the request it sees, reads the record, and settles it (fenced by the
//! token it read) only when that request holds it. Only a JSON-RPC response to the request's own
//! `id` settles: a server request (`elicitation/create`) or a notification on a stream passes on.
//! The response is classified as the other doors do: `result` (also with `isError`) is stored; a
//! JSON-RPC error for a request the target refused (`-32700`, `-32600`, `-32601`, `-32602`, HTTP
//! 4xx but 409/429) releases; any other error keeps the claim until its lease ends. Our own
//! answers carry `data.dedup` (errors) or meet a completed record (replays), and are passed
//! through without a write.
//!
//! The Gateway may invoke an interceptor again for one request (after a failure or a timeout):
//! a REQUEST that finds the claim its own request holds (same owner, and the owner names one
//! request: a `REQUEST_ID`, or an MCP session, in which a JSON-RPC id is never reused) goes on as
//! its owner instead of waiting for itself.

use std::collections::{BTreeMap, HashMap};

pub(crate) mod flow;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::decide::ReplyClass;
use crate::doors::agentcore::{
    TOOL_NAME_DELIMITER, gateway_id, gateway_id_of_arn, gateway_id_of_host,
};
use crate::doors::port::{
    Answers, DedupInfo, Notice, NoticeKind, Sessionless, ToolCall, classify_result, json_type,
    refusal, scoped_namespace, step_value,
};
use crate::key::CallerKeyScope;

/// This entry point's name in every key (see [`scoped_namespace`]).
pub(crate) const ENTRY_POINT: &str = "interceptor";
/// The member that marks a Gateway interceptor invocation.
pub(crate) const INPUT_VERSION: &str = "interceptorInputVersion";

/// True when `event` is shaped as a Gateway interceptor invocation.
pub(crate) fn is_interception(event: &Value) -> bool {
    event.get(INPUT_VERSION).is_some()
}
/// The input version this adapter reads, and the output version it writes.
pub(crate) const VERSION: &str = "1.0";
/// The `_meta` member of a `tools/call` result the REQUEST answered from the store: says so (and
/// the key), and tells the RESPONSE it passes through that nothing ran.
pub(crate) const REPLAY_META: &str = "toolcall-dedup/dedup";
/// The header of an AgentCore policy session: a client-supplied id (1 to 128 of `[A-Za-z0-9-]`)
/// the Gateway binds to the caller's authenticated identity (AgentCore developer guide, *Policy
/// sessions and identity propagation*,
/// <https://docs.aws.amazon.com/bedrock-agentcore/latest/devguide/policy-session-based-temporal.html>).
pub(crate) const POLICY_SESSION_HEADER: &str = "x-amzn-bedrock-agentcore-policy-session-id";
/// The `params._meta` member a client names its run by, when it has no session.
pub(crate) const RUN_META: &str = "toolcall-dedup/run";
/// The header that names the MCP session: the call's run.
pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
/// The client-context key with the gateway's ARN (documented for HTTP targets).
pub(crate) const GATEWAY_ARN_CONTEXT: &str = "GATEWAY_ARN";
/// The client-context key with the Gateway's id of the request (documented for HTTP targets).
pub(crate) const REQUEST_ID_CONTEXT: &str = "REQUEST_ID";
/// The JSON-RPC error code of the executor's own answers (server-defined range).
pub(crate) const DEDUP_ERROR_CODE: i64 = -32000;
/// The JSON-RPC error code of a refused batch (an invalid request for this server).
const BATCH_ERROR_CODE: i64 = -32600;
/// JSON-RPC errors that say the request was refused before anything ran: the four of JSON-RPC
/// (schema/2025-11-25/schema.ts `PARSE_ERROR`..`INVALID_PARAMS`); MCP 2025-11-25's
/// `URL_ELICITATION_REQUIRED` (-32042: the user completes a URL, then the client retries the
/// original call; schema/2025-11-25/schema.ts); MCP 2026-07-28's `HEADER_MISMATCH` (-32020),
/// `MISSING_REQUIRED_CLIENT_CAPABILITY` (-32021) and `UNSUPPORTED_PROTOCOL_VERSION` (-32022)
/// (schema/2026-07-28/schema.ts), each an HTTP 400 before the tool acts.
const REFUSED_CODES: [i64; 8] = [
    -32700, -32600, -32601, -32602, -32042, -32020, -32021, -32022,
];
/// When the task a stored `tools/call` result hands out stops living, in epoch milliseconds: its
/// `createdAt` plus its TTL. MCP 2025-11-25's task-augmented call answers a `CreateTaskResult`
/// (`{"task": {"taskId", "createdAt", "ttl": ms | null}}`, schema/2025-11-25/schema.ts); the
/// 2026-07-28 tasks extension a flat `{"resultType": "task", "taskId", "createdAt", "ttlMs"}`
/// (ext-tasks schema.ts `CreateTaskResult`). `None`: not a task handle, or a task without a TTL.
pub(crate) fn task_ends_ms(result: &Value) -> Option<i64> {
    let (task, ttl) = match result.get("task") {
        Some(task) if task.get("taskId").is_some() => (task, task.get("ttl")),
        _ if result.get("resultType").and_then(Value::as_str) == Some("task") => {
            (result, result.get("ttlMs"))
        }
        _ => return None,
    };
    let ttl = ttl.and_then(Value::as_i64)?;
    let created = task
        .get("createdAt")
        .and_then(Value::as_str)
        .and_then(crate::key::rfc3339_epoch_ms)?;
    Some(created.saturating_add(ttl))
}

/// `resultType` of an interim answer (MCP 2026-07-28, multi-round-trip requests:
/// schema/2026-07-28/schema.ts `InputRequiredResult`): the tool asks the client for input and
/// finishes on a retry of the original request carrying `inputResponses`; nothing is final yet.
const INPUT_REQUIRED: &str = "input_required";

/// Why an interceptor invocation cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InterceptorError {
    /// Not an interceptor payload this adapter can answer (a Lambda error: there is no format to
    /// answer in).
    #[error("invalid AgentCore Gateway interceptor event: {0}")]
    Event(String),
}

impl InterceptorError {
    /// What is wrong with the event.
    pub(crate) fn reason(&self) -> &str {
        match self {
            InterceptorError::Event(reason) => reason,
        }
    }
}

/// Which interception point invoked us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Before the Gateway calls the target.
    Request,
    /// After the target answered (also after a REQUEST interceptor answered for the target).
    Response,
}

/// An interceptor invocation, read.
#[derive(Debug)]
pub(crate) enum Intercepted<'a> {
    /// An MCP invocation of the version this adapter reads.
    Mcp(Interception<'a>),
    /// One this adapter passes on unread: the answer that passes it, and why.
    Unread {
        /// The pass-through answer.
        answer: String,
        /// Why it is not read (an HTTP target's, an unknown version), for the log.
        why: String,
        /// Whether it is worth a warning (an unknown version is; an HTTP target's is expected).
        warn: bool,
    },
}

/// One MCP interceptor invocation.
#[derive(Debug, Clone)]
pub(crate) struct Interception<'a> {
    /// REQUEST or RESPONSE.
    pub(crate) phase: Phase,
    body: &'a Value,
    headers: Option<&'a Map<String, Value>>,
    response: Option<&'a Map<String, Value>>,
    /// The gateway's id; `None` when nothing names it.
    gateway: Option<String>,
    /// The client context's `REQUEST_ID`.
    request_id: Option<&'a str>,
}

/// A `tools/call` inside an interception.
#[derive(Debug, Clone)]
pub(crate) struct ToolsCall<'a> {
    /// The target name (the prefix of the tool name).
    pub(crate) target: &'a str,
    /// The tool name without the target prefix.
    pub(crate) tool: &'a str,
    /// The full name, as the Gateway lists it (`target___tool`): policy entries are looked up by it.
    pub(crate) listed_name: &'a str,
    arguments: &'a Map<String, Value>,
    meta: Option<&'a Map<String, Value>>,
    /// The request's JSON-RPC id, which every answer carries.
    id: &'a Value,
}

/// The case-insensitive header `name`, as text.
fn header<'a>(headers: Option<&'a Map<String, Value>>, name: &str) -> Option<&'a str> {
    headers?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

impl<'a> Intercepted<'a> {
    /// Reads the interceptor payload; `custom` is the client context's custom map, if any;
    /// `configured_gateway` the deployment's `DEDUP_GATEWAY_ID`.
    pub(crate) fn parse(
        event: &'a Value,
        custom: Option<&'a HashMap<String, String>>,
        configured_gateway: Option<&str>,
    ) -> Result<Intercepted<'a>, InterceptorError> {
        let version = event.get(INPUT_VERSION);
        let known = version.and_then(Value::as_str) == Some(VERSION);
        let Some(mcp) = event.get("mcp").and_then(Value::as_object) else {
            let why = if event.get("http").is_some() && known {
                "an HTTP target's invocation (only MCP tools/call is keyed)".to_string()
            } else if known {
                return Err(InterceptorError::Event(
                    "neither an \"mcp\" nor an \"http\" object".into(),
                ));
            } else {
                format!(
                    "{INPUT_VERSION} {} is not one this version reads ({VERSION})",
                    show(version)
                )
            };
            return Ok(Intercepted::Unread {
                answer: json!({"interceptorOutputVersion": VERSION, "http": {}}).to_string(),
                why,
                warn: !known,
            });
        };
        let read = Interception::read(mcp, custom, configured_gateway);
        match (read, known) {
            (Ok(interception), true) => Ok(Intercepted::Mcp(interception)),
            (Err(e), true) => Err(e),
            (read, false) => Ok(Intercepted::Unread {
                answer: match &read {
                    Ok(interception) => interception.pass(),
                    Err(_) => json!({"interceptorOutputVersion": VERSION, "mcp": {}}).to_string(),
                },
                why: format!(
                    "{INPUT_VERSION} {} is not one this version reads ({VERSION})",
                    show(version)
                ),
                warn: true,
            }),
        }
    }
}

fn show(version: Option<&Value>) -> String {
    version.map_or_else(|| "null".into(), Value::to_string)
}

impl<'a> Interception<'a> {
    fn read(
        mcp: &'a Map<String, Value>,
        custom: Option<&'a HashMap<String, String>>,
        configured_gateway: Option<&str>,
    ) -> Result<Interception<'a>, InterceptorError> {
        let request = mcp
            .get("gatewayRequest")
            .and_then(Value::as_object)
            .ok_or_else(|| InterceptorError::Event("no mcp.gatewayRequest object".into()))?;
        let body = request.get("body").unwrap_or(&Value::Null);
        let response = mcp.get("gatewayResponse").and_then(Value::as_object);
        let headers = request.get("headers").and_then(Value::as_object);
        let context = |name: &str| {
            custom
                .and_then(|c| c.get(name))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let gateway = context(GATEWAY_ARN_CONTEXT)
            .and_then(gateway_id_of_arn)
            .or_else(|| header(headers, "host").and_then(gateway_id_of_host))
            .or(configured_gateway.map(gateway_id))
            .map(str::to_string);
        Ok(Interception {
            phase: if response.is_some() {
                Phase::Response
            } else {
                Phase::Request
            },
            body,
            headers,
            response,
            gateway,
            request_id: context(REQUEST_ID_CONTEXT),
        })
    }

    /// The request's `tools/call`, or `None` for every other message (passed through).
    pub(crate) fn tools_call(&self) -> Option<Result<ToolsCall<'a>, Notice>> {
        if self.body.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        Some(self.read_tools_call())
    }

    /// A JSON-RPC batch (an array body) that holds a `tools/call`: it cannot be keyed call by call
    /// and passed on as one request, so it is refused.
    pub(crate) fn is_batch_with_tools_call(&self) -> bool {
        self.body.as_array().is_some_and(|messages| {
            messages
                .iter()
                .any(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        })
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
            listed_name: name,
            arguments,
            meta: params.get("_meta").and_then(Value::as_object),
            id: self.id(),
        })
    }

    /// The gateway this invocation came through, as named in every key (`-` when unknown).
    pub(crate) fn gateway(&self) -> &str {
        self.gateway.as_deref().unwrap_or("-")
    }

    /// Whether anything named the gateway (see the module docs).
    pub(crate) fn gateway_is_named(&self) -> bool {
        self.gateway.is_some()
    }

    /// The namespace of `target`'s calls (and of its learned catalog).
    pub(crate) fn namespace(&self, target: &str) -> String {
        scoped_namespace(ENTRY_POINT, &format!("{}/{target}", self.gateway()))
    }

    /// At RESPONSE, the tools a `tools/list` answer lists, grouped by target (the tool name's
    /// prefix) and then by tool name without it: `{"inputSchema", "annotations"}` of each. `None`
    /// for any other message, or a listing without tools.
    pub(crate) fn listed_tools(&self) -> Option<BTreeMap<&'a str, Map<String, Value>>> {
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
    pub(crate) fn session(&self) -> Option<&'a str> {
        header(self.headers, SESSION_HEADER)
    }

    /// The call to key, or why there is none (see the module docs). The caller's own idempotency
    /// key is the `_meta` member `caller_key_name` names, else that argument.
    pub(crate) fn tool_call(
        &self,
        call: &ToolsCall<'_>,
        step_attribute: &str,
        caller_key_name: &str,
        sessionless: Sessionless,
    ) -> Result<ToolCall, crate::doors::port::Unkeyed> {
        let run_id = self.run(call, sessionless);
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
        // With no session to stay inside (`gateway_scope`), a model-written key would be shared
        // by every client of the gateway: another client's different call that reuses a common
        // key ("charge-1") would be refused and told which of the first client's paths differ.
        // Such a call is keyed by its arguments instead.
        let caller_key = caller_key.filter(|_| run_id.is_some());
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
            policy_name: None,
        })
    }

    /// The call's run, from the first source that names one: the MCP session (`Mcp-Session-Id`,
    /// as before); the AgentCore policy session the client passed
    /// ([`POLICY_SESSION_HEADER`], which the Gateway binds to the caller's identity); a run the
    /// client names in the request's `_meta` ([`RUN_META`]); else, under
    /// [`Sessionless::Principal`], the authenticated principal. Stateless MCP (2026-07-28) has no
    /// session, so its calls take one of the others. Each source's ids are prefixed, so that one
    /// source's id never meets another's.
    fn run(&self, call: &ToolsCall<'_>, sessionless: Sessionless) -> Option<String> {
        if let Some(session) = self.session() {
            return Some(session.to_string());
        }
        if let Some(policy_session) = header(self.headers, POLICY_SESSION_HEADER) {
            return Some(format!("policy-session:{policy_session}"));
        }
        let named = call
            .meta
            .and_then(|m| m.get(RUN_META))
            .and_then(crate::doors::port::step_value);
        if let Some(run) = named {
            return Some(format!("meta:{run}"));
        }
        match sessionless {
            Sessionless::Principal => self.principal().map(|p| format!("principal:{p}")),
            _ => None,
        }
    }

    /// The authenticated principal of a request the Gateway let in with a bearer JWT it verified:
    /// a digest of the token's `iss` and `sub` (never the token, nor the subject in the clear).
    /// `None` without one (an IAM-authorized gateway's `Authorization` is a SigV4 signature).
    fn principal(&self) -> Option<String> {
        use base64::Engine;
        let token = header(self.headers, "authorization")?;
        let (scheme, jwt) = token.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let payload = jwt.trim().split('.').nth(1)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let claims: Value = serde_json::from_slice(&bytes).ok()?;
        let subject = claims.get("sub").and_then(Value::as_str)?;
        let issuer = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let digest = Sha256::new()
            .chain_update(issuer.as_bytes())
            .chain_update([0])
            .chain_update(subject.as_bytes())
            .finalize();
        Some(hex::encode(&digest[..16]))
    }

    /// The JSON-RPC id of the request (`null` when it has none).
    pub(crate) fn id(&self) -> &'a Value {
        self.body.get("id").unwrap_or(&Value::Null)
    }

    /// The name the claim's token carries: a hash of the key, this request's JSON-RPC id and the
    /// Gateway's `REQUEST_ID` when it sends one, so that the RESPONSE invocation of this request,
    /// and only it, recognises the claim.
    pub(crate) fn owner(&self, key: &str) -> String {
        let digest = Sha256::new()
            .chain_update(key.as_bytes())
            .chain_update([0])
            .chain_update(self.id().to_string().as_bytes())
            .chain_update([0])
            .chain_update(self.request_id.unwrap_or_default().as_bytes())
            .finalize();
        hex::encode(&digest[..12])
    }

    /// The record a REQUEST's claim is noted under (which key it claimed, under which owner), so
    /// that its RESPONSE settles that claim, never one derived again from a configuration or a
    /// listing that changed in between. Named by everything that makes the request this one:
    /// the gateway, the Gateway's `REQUEST_ID`, the session, the caller's credential and the whole
    /// JSON-RPC body (its id included); the RESPONSE invocation carries the same request.
    pub(crate) fn request_record(&self) -> String {
        let mut digest = Sha256::new();
        let body = self.body.to_string();
        for part in [
            Some(self.gateway()),
            self.request_id,
            self.session(),
            header(self.headers, "authorization"),
            Some(body.as_str()),
        ] {
            // Each part length-prefixed (and an absent one told from an empty one), so that no
            // two sets of parts hash alike.
            match part {
                Some(part) => {
                    digest.update([1]);
                    digest.update((part.len() as u64).to_be_bytes());
                    digest.update(part.as_bytes());
                }
                None => digest.update([0]),
            }
        }
        format!(
            "request:{}",
            crate::key::Key::from_digest(&digest.finalize())
        )
    }

    /// Whether [`Interception::owner`] names one request and no other: the Gateway's `REQUEST_ID`
    /// is there. A claim this owner holds is then this very request's, invoked again by the
    /// Gateway, whose target never ran (the Gateway calls it only once an invocation answers). A
    /// session is not enough: a client's HTTP layer that sends the same message again (same
    /// JSON-RPC id, same session) while the target runs would otherwise run it twice.
    pub(crate) fn owner_is_one_request(&self) -> bool {
        self.request_id.is_some()
    }

    /// The answer that lets the message through unchanged: at REQUEST its body only; at RESPONSE
    /// the target's status, headers and body as they came.
    pub(crate) fn pass(&self) -> String {
        match self.phase {
            Phase::Request => output("transformedGatewayRequest", json!({ "body": self.body })),
            Phase::Response => self.pass_response(),
        }
    }

    /// The REQUEST's pass-through with one header for the target: the call's key under
    /// `header` (`DEDUP_TARGET_KEY_HEADER`), which the Gateway forwards to a target whose
    /// `metadataConfiguration.allowedRequestHeaders` names it (AgentCore developer guide, *Header
    /// propagation*: headers an interceptor returns are merged with the target's allow-list). Only
    /// that header is returned: the client's own (an `Authorization` among them) never are.
    pub(crate) fn pass_with_key(&self, header: &str, key: &str) -> String {
        output(
            "transformedGatewayRequest",
            json!({ "headers": { header: key }, "body": self.body }),
        )
    }

    fn pass_response(&self) -> String {
        let member = |name| {
            self.response
                .and_then(|r| r.get(name))
                .filter(|v| !v.is_null())
        };
        let mut transformed = Map::new();
        // A later event of a stream carries only its body: status and headers were sent.
        match member("statusCode") {
            Some(status) => {
                transformed.insert("statusCode".into(), status.clone());
            }
            None if !self.is_streamed() => {
                transformed.insert("statusCode".into(), json!(200));
            }
            None => {}
        }
        if let Some(headers) = member("headers") {
            transformed.insert("headers".into(), headers.clone());
        }
        transformed.insert(
            "body".into(),
            member("body").cloned().unwrap_or(Value::Null),
        );
        output("transformedGatewayResponse", Value::Object(transformed))
    }

    /// Whether this RESPONSE invocation is one event of a streamed response.
    pub(crate) fn is_streamed(&self) -> bool {
        self.response
            .and_then(|r| r.get("isStreamingResponse"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// The refusal of a `tools/call` that cannot be read (no tool name, arguments not an object).
    pub(crate) fn refusal(&self, notice: &Notice) -> String {
        let dedup = DedupInfo {
            outcome: "bad_request",
            key: None,
            first_ran_ms: None,
            mark: false,
        };
        error_answer(self.id(), notice, dedup)
    }

    /// The refusal of a batch holding a `tools/call`: an error for each request in it.
    pub(crate) fn batch_refusal(&self) -> String {
        let message = "a JSON-RPC batch holding tools/call cannot be deduplicated call by call; \
                       send each call as its own request";
        let errors: Vec<Value> = self
            .body
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("id").filter(|id| !id.is_null()))
            .map(|id| {
                rpc(
                    "error",
                    id,
                    json!({"code": BATCH_ERROR_CODE, "message": message,
                           "data": {"dedup": {"outcome": "bad_request", "status": "invalid_event"}}}),
                )
            })
            .collect();
        output(
            "transformedGatewayResponse",
            json!({"statusCode": 200, "body": errors}),
        )
    }

    /// The target's response as the executor settles it: `None` when there is nothing to settle
    /// (our own answers, a message that is not the response to this request: a server request or a
    /// notification on a stream); else the reply to store (the `result` text) and its class, or
    /// `Err(outcome_unknown)` for an error that stores nothing.
    pub(crate) fn target_reply(
        &self,
        released_codes: &[i64],
    ) -> Option<Result<(String, ReplyClass), bool>> {
        let response = self.response?;
        let body = response.get("body").filter(|b| !b.is_null());
        let answers_request = body.is_some_and(|b| {
            (b.get("result").is_some() || b.get("error").is_some())
                && b.get("id").is_none_or(|id| id == self.id())
        });
        if !answers_request {
            // A stream's other messages settle nothing; a buffered response that is no JSON-RPC
            // answer is judged by its status.
            if self.is_streamed() || body.is_some_and(|b| b.get("method").is_some()) {
                return None;
            }
            let status = response.get("statusCode").and_then(Value::as_u64)?;
            return match status {
                409 | 429 => Some(Err(true)),
                400..=499 => Some(Err(false)),
                200..=399 => None,
                _ => Some(Err(true)),
            };
        }
        let body = body?;
        let status = response
            .get("statusCode")
            .and_then(Value::as_u64)
            .unwrap_or(200);
        if let Some(error) = body.get("error") {
            if error.pointer("/data/dedup").is_some() {
                return None;
            }
            let code = error.get("code").and_then(Value::as_i64);
            let refused =
                code.is_some_and(|c| REFUSED_CODES.contains(&c) || released_codes.contains(&c));
            return Some(Err(!refused));
        }
        let result = body.get("result")?;
        if result
            .get("_meta")
            .and_then(|m| m.get(REPLAY_META))
            .is_some()
        {
            // Our own answer from the store, passing by: there is nothing to settle.
            return None;
        }
        if result.get("resultType").and_then(Value::as_str) == Some(INPUT_REQUIRED) {
            // An interim answer: never the call's outcome. The claim is released (the tool waits
            // for input before acting), so the client's retry with `inputResponses` claims the
            // call again and its final result is the one stored; an abandoned leg holds nothing.
            return Some(Err(false));
        }
        Some(match status {
            409 | 429 => Err(true),
            400..=499 => Err(false),
            500.. => Err(true),
            _ => Ok((result.to_string(), classify_result(result))),
        })
    }
}

impl Answers for ToolsCall<'_> {
    fn tool(&self) -> &str {
        self.tool
    }

    /// The stored `result` (JSON text) under this request's id.
    fn result(&self, result: &str, dedup: DedupInfo<'_>) -> String {
        let mut result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        // Marked in the result's `_meta` (metadata a client does not parse as the tool's answer),
        // so that the RESPONSE invocation this answer passes through knows it for ours.
        if let Some(result) = result.as_object_mut() {
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                let marker = serde_json::from_str(&dedup.json()).unwrap_or(Value::Null);
                meta.insert(REPLAY_META.into(), marker);
            }
        }
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
    json!({ "interceptorOutputVersion": VERSION, "mcp": mcp }).to_string()
}

#[cfg(test)]
mod tests;
