//! Amazon Bedrock AgentCore Gateway adapter: the executor as a Gateway **Lambda target**.
//!
//! The Gateway invokes a Lambda target with the tool's **arguments object as the event** and
//! names the tool in the Lambda **client context** (`context.client_context.custom`), beside the
//! gateway id, the target id, the message version and the session id (see `events/README.md`
//! for the AgentCore developer guide pages this relies on):
//!
//! ```text
//! event:  {"customer_id": "cus_1", "amount": 4200, "currency": "USD"}
//! custom: {"bedrockAgentCoreToolName": "payments___charge_card",
//!          "bedrockAgentCoreGatewayId": "gw-1", "bedrockAgentCoreTargetId": "TGT1",
//!          "bedrockAgentCoreMessageVersion": "1.0", "bedrockAgentCoreSessionId": "s-1"}
//! ```
//!
//! The tool name is `<target name>___<tool name>` (three underscores). The call is keyed as:
//!
//! - **namespace** `<gateway id>/<target id>` (the target name stands in for a missing id);
//! - **tool** the name without the target prefix;
//! - **run** `bedrockAgentCoreSessionId`, else the argument named by `DEDUP_RUN_ARGUMENT`
//!   (default `dedup_run_id`). A call with neither is *sessionless*, and gets what
//!   `DEDUP_SESSIONLESS` says ([`Sessionless`]): by default it runs without dedup, counted and
//!   logged, since without a run identical calls of different sessions would be one call;
//! - **step** the argument named by `DEDUP_STEP_ATTRIBUTE` (default `dedup_step`), else none;
//! - **schema** the tool's entry in the policy file (`tool_definitions`: the same inline tool
//!   definitions the Gateway target is created with).
//!
//! Every client-context name is also read in the lower-case spelling an older AWS tutorial
//! documents (`bedrockagentcoreToolName`, ...): see [`context_value`].
//!
//! The run and step arguments are removed before the arguments are keyed and forwarded. The
//! routed tool Lambda receives the event and client context it would have received from the
//! Gateway directly, plus `custom.dedupKey`; its reply is the answer, unchanged, and a replay
//! returns it byte for byte. The executor's own answers (in progress, store down, …) are
//! [`Notice`] bodies: `{"status": …, "message": …}`, JSON the Gateway hands to the model.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::decide::ReplyClass;
use crate::doors::port::{
    Answers, DedupInfo, EntryPoint, Forward, MalformedReply, Notice, NoticeKind, ScopeArguments,
    Scoping, Sessionless, ToolCall, Unforwardable, Unkeyed, classify_json_reply, json_type,
    refusal, scoped_namespace, step_value,
};
use crate::key::CallerKeyScope;

/// This entry point's name in every key (see [`scoped_namespace`]).
pub(crate) const ENTRY_POINT: &str = "agentcore";

/// Client-context key naming the tool as `<target name>___<tool name>`; its presence marks a
/// Gateway call.
pub(crate) const TOOL_NAME: &str = "bedrockAgentCoreToolName";
/// Client-context key of the gateway id, the first half of the namespace (`-` when missing).
pub(crate) const GATEWAY_ID: &str = "bedrockAgentCoreGatewayId";
/// Client-context key of the target id, the second half of the namespace (the target name when
/// missing).
pub(crate) const TARGET_ID: &str = "bedrockAgentCoreTargetId";
/// Client-context key of the Gateway's message version: only `1.0` is accepted (a missing version
/// passes).
pub(crate) const MESSAGE_VERSION: &str = "bedrockAgentCoreMessageVersion";
/// Client-context key of the session id, which is the call's run; when it is empty, the run comes
/// from the `DEDUP_RUN_ARGUMENT` argument.
pub(crate) const SESSION_ID: &str = "bedrockAgentCoreSessionId";
/// Between the target name and the tool name in [`TOOL_NAME`].
pub(crate) const TOOL_NAME_DELIMITER: &str = "___";
pub(crate) use crate::doors::port::DEDUP_KEY_CONTEXT;
/// The message versions this adapter reads.
const SUPPORTED_VERSIONS: [&str; 1] = ["1.0"];

/// The other spellings of a client-context name: an older AWS tutorial ("Transform Lambda into
/// MCP tools", "Understanding the Lambda context object") writes them in lower case, and names the
/// gateway `bedrockagentcoreEndpointId`.
fn other_spellings(name: &str) -> &'static [&'static str] {
    match name {
        TOOL_NAME => &["bedrockagentcoreToolName"],
        GATEWAY_ID => &["bedrockagentcoreEndpointId", "bedrockagentcoreGatewayId"],
        TARGET_ID => &["bedrockagentcoreTargetId"],
        MESSAGE_VERSION => &["bedrockagentcoreMessageVersion"],
        SESSION_ID => &["bedrockagentcoreSessionId"],
        _ => &[],
    }
}

/// The client-context value of `name`, in any of its spellings (the documented camel case first).
pub(crate) fn context_value<'a>(
    custom: &'a HashMap<String, String>,
    name: &str,
) -> Option<&'a String> {
    custom.get(name).or_else(|| {
        other_spellings(name)
            .iter()
            .find_map(|other| custom.get(*other))
    })
}

/// Why a Gateway call was refused (answered as a [`Notice`]) or runs unkeyed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum GatewayError {
    /// Something only the Gateway's or the executor's configuration can fix.
    #[error("invalid AgentCore Gateway call: {0}")]
    Event(String),
    /// The arguments are not an object: the model can correct them.
    #[error("invalid arguments: {0}")]
    Arguments(String),
}

/// The Gateway's host names: `<gateway id>.gateway.bedrock-agentcore.<region>.amazonaws.com`.
const GATEWAY_HOST_INFIX: &str = ".gateway.bedrock-agentcore.";

/// The gateway id in a gateway ARN (`arn:aws:bedrock-agentcore:<region>:<account>:gateway/<id>`).
pub(crate) fn gateway_id_of_arn(arn: &str) -> Option<&str> {
    arn.rsplit_once(":gateway/")
        .map(|(_, id)| id.trim())
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

/// The gateway id in a Gateway host name (`<id>.gateway.bedrock-agentcore.<region>...`).
pub(crate) fn gateway_id_of_host(host: &str) -> Option<&str> {
    host.split_once(GATEWAY_HOST_INFIX)
        .map(|(id, _)| id.trim())
        .filter(|id| !id.is_empty() && !id.contains('.'))
}

/// One name for a gateway whichever way it is given (its id, its ARN or its host name), so that a
/// key does not change with the source the Gateway happens to send.
pub(crate) fn gateway_id(named: &str) -> &str {
    gateway_id_of_arn(named)
        .or_else(|| gateway_id_of_host(named))
        .unwrap_or(named.trim())
}

/// True when `custom` (the client context's custom map) comes from an AgentCore Gateway.
pub(crate) fn is_gateway_call(custom: Option<&HashMap<String, String>>) -> bool {
    custom.is_some_and(|c| context_value(c, TOOL_NAME).is_some())
}

/// One Gateway invocation: the event (the arguments) and what the client context says.
#[derive(Debug, Clone)]
pub struct GatewayCall<'a> {
    event: &'a Value,
    custom: &'a HashMap<String, String>,
    /// The target name (the prefix of the tool name), `""` without one.
    pub(crate) target: &'a str,
    /// The tool name without the target prefix.
    pub(crate) tool: &'a str,
    /// The tool name as the Gateway lists it (`target___tool`).
    pub(crate) listed_name: &'a str,
}

impl<'a> GatewayCall<'a> {
    /// Reads the client context. The arguments are checked by [`GatewayCall::tool_call`].
    pub(crate) fn parse(
        event: &'a Value,
        custom: &'a HashMap<String, String>,
    ) -> Result<GatewayCall<'a>, GatewayError> {
        let qualified = context_value(custom, TOOL_NAME)
            .map(|t| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| GatewayError::Event(format!("{TOOL_NAME} is empty")))?;
        if let Some(version) = context_value(custom, MESSAGE_VERSION)
            .filter(|v| !SUPPORTED_VERSIONS.contains(&v.as_str()))
        {
            return Err(GatewayError::Event(format!(
                "{MESSAGE_VERSION} {version:?} is not supported (only \"1.0\")"
            )));
        }
        let (target, tool) = match qualified.split_once(TOOL_NAME_DELIMITER) {
            Some((target, tool)) => (target, tool),
            None => ("", qualified),
        };
        if tool.is_empty() {
            return Err(GatewayError::Event(format!(
                "{TOOL_NAME} {qualified:?} names no tool after the target prefix"
            )));
        }
        Ok(GatewayCall {
            event,
            custom,
            target,
            tool,
            listed_name: qualified,
        })
    }

    /// The route: (target name, tool), as `DEDUP_ROUTES` names it (`"<target>/<tool>"`).
    pub(crate) fn route(&self) -> (&str, &str) {
        (self.target, self.tool)
    }

    fn context(&self, name: &str) -> Option<&'a str> {
        context_value(self.custom, name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn arguments(&self) -> Result<&'a Map<String, Value>, GatewayError> {
        self.event.as_object().ok_or_else(|| {
            GatewayError::Arguments(format!(
                "the arguments of {} must be a JSON object, got a JSON {}",
                self.tool,
                json_type(self.event)
            ))
        })
    }

    /// The call to key: see the module docs. `sessionless` says what a call that names no run
    /// gets.
    pub(crate) fn tool_call(
        &self,
        scope: ScopeArguments<'_>,
        sessionless: Sessionless,
    ) -> Result<ToolCall, Unkeyed> {
        let args = self.arguments().map_err(|e| gateway_refusal(&e))?;
        let run_id = match self.context(SESSION_ID) {
            Some(session) => Some(session.to_string()),
            None => args.get(scope.run).and_then(step_value),
        };
        let caller_key = args.get(scope.caller_key).and_then(step_value);
        // A caller's key is scoped by its run like any other key: it never stands in for one.
        if run_id.is_none() {
            let missing = format!(
                "the Gateway sent no {SESSION_ID} and the arguments have no {:?}",
                scope.run
            );
            sessionless.unkeyed(missing)?;
        }
        // With no run to stay inside (`gateway_scope`), a model-written key would be shared by
        // every client of the gateway: another client's different call that reuses a common key
        // ("charge-1") would be refused and told which of the first client's paths differ. Such
        // a call is keyed by its arguments instead.
        let caller_key = caller_key.filter(|_| run_id.is_some());
        let step = args.get(scope.step).and_then(step_value);
        let namespace = scoped_namespace(
            ENTRY_POINT,
            &format!(
                "{}/{}",
                self.context(GATEWAY_ID).unwrap_or("-"),
                self.context(TARGET_ID).unwrap_or(self.target)
            ),
        );
        Ok(ToolCall {
            tool: self.tool.to_string(),
            args: object_text(args, scope),
            namespace,
            run_id,
            step,
            schema: None,
            caller_key,
            caller_key_scope: CallerKeyScope::Run,
            // Policy entries name a Gateway tool as the Gateway lists it (`target___tool`).
            policy_name: (!self.target.is_empty()).then(|| self.listed_name.to_string()),
        })
    }

    /// What the routed tool receives: the arguments (without the scope arguments) and the same
    /// client context, plus [`DEDUP_KEY_CONTEXT`] when a key was derived.
    pub(crate) fn forward(
        &self,
        key: Option<&str>,
        scope: ScopeArguments<'_>,
    ) -> Result<Forward, GatewayError> {
        let payload = match self.event.as_object() {
            Some(args) => object_text(args, scope).into_bytes(),
            None => self.event.to_string().into_bytes(),
        };
        // Our own key is never passed on from the incoming context: only this call's key reaches
        // the tool.
        let mut custom: Map<String, Value> = self
            .custom
            .iter()
            .filter(|(k, _)| k.as_str() != DEDUP_KEY_CONTEXT)
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        if let Some(key) = key {
            custom.insert(DEDUP_KEY_CONTEXT.into(), Value::String(key.into()));
        }
        let mut context = Map::new();
        context.insert("custom".into(), Value::Object(custom));
        Ok(Forward {
            payload,
            client_context: Some(Value::Object(context).to_string()),
        })
    }
}

impl EntryPoint for GatewayCall<'_> {
    fn route(&self) -> (&str, &str) {
        GatewayCall::route(self)
    }

    fn call(&self, scoping: Scoping<'_>) -> Result<ToolCall, Unkeyed> {
        self.tool_call(scoping.arguments(), scoping.sessionless)
    }

    fn forward(&self, key: Option<&str>, scoping: Scoping<'_>) -> Result<Forward, Unforwardable> {
        GatewayCall::forward(self, key, scoping.arguments())
            .map_err(|e| Unforwardable(e.to_string()))
    }

    fn classify(&self, reply: &[u8]) -> Result<ReplyClass, MalformedReply> {
        classify_json_reply(reply)
    }
}

/// The member a replayed Lambda-target reply carries under `DEDUP_REPLAY_MARKER`.
pub(crate) const REPLAY_MEMBER: &str = "toolcall-dedup";

/// `reply` with `"toolcall-dedup": marker` spliced in before its closing brace, every byte of the
/// reply's own kept; unchanged when it is not an object or has a member of that name.
fn with_replay_member(reply: &str, marker: &str) -> String {
    let members = serde_json::from_str::<
        std::collections::HashMap<String, &serde_json::value::RawValue>,
    >(reply)
    .ok();
    let Some(members) = members.filter(|m| !m.contains_key(REPLAY_MEMBER)) else {
        return reply.to_string();
    };
    let trimmed = reply.trim_end();
    let body = &trimmed[..trimmed.len() - 1];
    let separator = if members.is_empty() { "" } else { "," };
    format!("{body}{separator}\"{REPLAY_MEMBER}\":{marker}}}")
}

impl Answers for GatewayCall<'_> {
    fn tool(&self) -> &str {
        self.tool
    }

    /// The tool's reply as it gave it; under `DEDUP_REPLAY_MARKER`, a replayed object reply
    /// also carries `"toolcall-dedup": {"outcome", "key", "first_ran"}`, spliced in before its
    /// closing brace so that every byte of the tool's own is kept (key order, number spelling).
    /// A reply that is not an object, or that has a member of that name itself, is never changed.
    fn result(&self, reply: &str, dedup: DedupInfo<'_>) -> String {
        if !dedup.marks_replay() {
            return reply.to_string();
        }
        with_replay_member(reply, &dedup.json())
    }

    fn notice(&self, notice: &Notice, _: DedupInfo<'_>) -> String {
        notice.body_json()
    }
}

/// The notice that refuses a Gateway call: the configuration's problem, or the model's.
pub(crate) fn gateway_refusal(e: &GatewayError) -> Notice {
    match e {
        GatewayError::Event(m) => refusal(NoticeKind::InvalidEvent, m),
        GatewayError::Arguments(m) => refusal(NoticeKind::InvalidArguments, m),
    }
}

/// The arguments object as JSON text, without the run and step arguments.
fn object_text(args: &Map<String, Value>, scope: ScopeArguments<'_>) -> String {
    if !args.contains_key(scope.run) && !args.contains_key(scope.step) {
        return serde_json::to_string(args).unwrap_or_default();
    }
    let kept: Map<String, Value> = args
        .iter()
        .filter(|(k, _)| k.as_str() != scope.run && k.as_str() != scope.step)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_string(&kept).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The marker is spliced in: the tool's bytes (key order, a long integer, escapes) are kept,
    /// and a reply that is no object, or has the member itself, is never changed.
    #[test]
    fn the_replay_member_keeps_every_byte_of_the_reply() {
        let marker = r#"{"outcome":"replayed"}"#;
        let reply = r#"{"z":1,"id":123456789012345678901234567890,"a":"\u00e9"}  "#;
        assert_eq!(
            with_replay_member(reply, marker),
            r#"{"z":1,"id":123456789012345678901234567890,"a":"\u00e9","toolcall-dedup":{"outcome":"replayed"}}"#
        );
        assert_eq!(
            with_replay_member("{ }", marker),
            r#"{ "toolcall-dedup":{"outcome":"replayed"}}"#
        );
        for unchanged in [r#"[1]"#, r#""text""#, r#"{"toolcall-dedup":0}"#, "not json"] {
            assert_eq!(with_replay_member(unchanged, marker), unchanged);
        }
    }

    const SCOPE: ScopeArguments<'static> = ScopeArguments {
        run: "dedup_run_id",
        step: "dedup_step",
        caller_key: "idempotency_key",
    };

    fn custom(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn gateway() -> HashMap<String, String> {
        custom(&[
            (TOOL_NAME, "payments___charge_card"),
            (GATEWAY_ID, "gw-1"),
            (TARGET_ID, "TGT1"),
            (MESSAGE_VERSION, "1.0"),
            (SESSION_ID, "s-1"),
        ])
    }

    #[test]
    fn the_tool_name_loses_its_target_prefix_and_the_ids_make_the_namespace() {
        let event = json!({"customer_id": "cus_1", "amount": 4200, "dedup_step": 3});
        let ctx = gateway();
        let call = GatewayCall::parse(&event, &ctx).unwrap();
        assert_eq!(call.route(), ("payments", "charge_card"));
        let tc = call.tool_call(SCOPE, Sessionless::Refuse).unwrap();
        assert_eq!(tc.tool, "charge_card");
        assert_eq!(tc.namespace, "agentcore:gw-1/TGT1");
        assert_eq!(tc.run_id.as_deref(), Some("s-1"));
        assert_eq!(tc.step.as_deref(), Some("3"));
        assert_eq!(tc.args, r#"{"amount":4200,"customer_id":"cus_1"}"#);
    }

    /// The older tutorial's lower-case names, the gateway as `bedrockagentcoreEndpointId`, key
    /// the call as the documented names do; the policy is looked up by the listed name.
    #[test]
    fn the_tutorials_lower_case_names_read_as_the_documented_ones() {
        let event = json!({"amount": 1});
        let lower = custom(&[
            ("bedrockagentcoreToolName", "payments___charge_card"),
            ("bedrockagentcoreEndpointId", "gw-1"),
            ("bedrockagentcoreTargetId", "TGT1"),
            ("bedrockagentcoreMessageVersion", "1.0"),
            ("bedrockagentcoreSessionId", "s-1"),
        ]);
        let documented = gateway();
        let key = |ctx| {
            GatewayCall::parse(&event, ctx)
                .unwrap()
                .tool_call(SCOPE, Sessionless::Refuse)
                .unwrap()
        };
        let (a, b) = (key(&lower), key(&documented));
        assert_eq!((a.namespace, a.run_id), (b.namespace, b.run_id));
        assert_eq!(a.policy_name.as_deref(), Some("payments___charge_card"));
    }

    #[test]
    fn the_run_comes_from_the_session_or_an_argument_or_the_call_is_refused() {
        let mut ctx = gateway();
        ctx.insert(SESSION_ID.into(), "".into());
        let event = json!({"a": 1, "dedup_run_id": "run-9"});
        let tc = GatewayCall::parse(&event, &ctx)
            .unwrap()
            .tool_call(SCOPE, Sessionless::Refuse)
            .unwrap();
        assert_eq!(tc.run_id.as_deref(), Some("run-9"));
        assert_eq!(tc.args, r#"{"a":1}"#);
        let event = json!({"a": 1});
        let err = GatewayCall::parse(&event, &ctx)
            .unwrap()
            .tool_call(SCOPE, Sessionless::Refuse)
            .unwrap_err();
        assert!(
            matches!(&err, Unkeyed::Refused(n) if n.kind == NoticeKind::InvalidEvent && n.message.contains("no run id")),
            "{err:?}"
        );
    }

    #[test]
    fn a_sessionless_call_passes_through_or_is_scoped_by_gateway_and_target() {
        let mut ctx = gateway();
        ctx.remove(SESSION_ID);
        let event = json!({"a": 1});
        let call = GatewayCall::parse(&event, &ctx).unwrap();
        let err = call.tool_call(SCOPE, Sessionless::PassThrough).unwrap_err();
        assert!(matches!(&err, Unkeyed::Sessionless(m) if m.contains(SESSION_ID)));
        let scoped = call.tool_call(SCOPE, Sessionless::GatewayScope).unwrap();
        assert_eq!(scoped.run_id, None);
        assert_eq!(scoped.namespace, "agentcore:gw-1/TGT1");
        // A session wins over every setting.
        ctx.insert(SESSION_ID.into(), "s-2".into());
        let call = GatewayCall::parse(&event, &ctx).unwrap();
        let tc = call.tool_call(SCOPE, Sessionless::PassThrough).unwrap();
        assert_eq!(tc.run_id.as_deref(), Some("s-2"));
    }

    #[test]
    fn the_lower_case_client_context_names_are_read() {
        let ctx = custom(&[
            ("bedrockagentcoreToolName", "payments___charge_card"),
            ("bedrockagentcoreGatewayId", "gw-9"),
            ("bedrockagentcoreTargetId", "TGT9"),
            ("bedrockagentcoreSessionId", "s-9"),
        ]);
        assert!(is_gateway_call(Some(&ctx)));
        let event = json!({"a": 1});
        let tc = GatewayCall::parse(&event, &ctx)
            .unwrap()
            .tool_call(SCOPE, Sessionless::Refuse)
            .unwrap();
        assert_eq!(
            (
                tc.tool.as_str(),
                tc.namespace.as_str(),
                tc.run_id.as_deref()
            ),
            ("charge_card", "agentcore:gw-9/TGT9", Some("s-9"))
        );
        let ctx = custom(&[
            ("bedrockagentcoreToolName", "t___x"),
            ("bedrockagentcoreMessageVersion", "2.0"),
        ]);
        assert!(
            GatewayCall::parse(&event, &ctx).is_err(),
            "the version is read in either spelling"
        );
    }

    #[test]
    fn bad_contexts_and_arguments_are_named() {
        let event = json!({"a": 1});
        let ctx = custom(&[(TOOL_NAME, "payments___")]);
        assert!(matches!(
            GatewayCall::parse(&event, &ctx),
            Err(GatewayError::Event(_))
        ));
        let ctx = custom(&[(TOOL_NAME, "t___x"), (MESSAGE_VERSION, "2.0")]);
        assert!(GatewayCall::parse(&event, &ctx).is_err());
        let ctx = gateway();
        let not_object = json!([1, 2]);
        let err = GatewayCall::parse(&not_object, &ctx)
            .unwrap()
            .tool_call(SCOPE, Sessionless::Refuse)
            .unwrap_err();
        assert!(
            matches!(&err, Unkeyed::Refused(n) if n.kind == NoticeKind::InvalidArguments),
            "{err:?}"
        );
        // A bare tool name (no target prefix) is accepted; the target id names the namespace.
        let ctx = custom(&[(TOOL_NAME, "charge_card"), (SESSION_ID, "s")]);
        let call = GatewayCall::parse(&event, &ctx).unwrap();
        assert_eq!(call.route(), ("", "charge_card"));
        assert_eq!(
            call.tool_call(SCOPE, Sessionless::Refuse)
                .unwrap()
                .namespace,
            "agentcore:-/"
        );
    }

    #[test]
    fn the_tool_gets_the_arguments_and_the_client_context_plus_the_key() {
        let event = json!({"amount": 5, "dedup_step": "2"});
        let ctx = gateway();
        let call = GatewayCall::parse(&event, &ctx).unwrap();
        let forward = call.forward(Some("k1"), SCOPE).unwrap();
        assert_eq!(forward.payload, br#"{"amount":5}"#);
        let context: Value =
            serde_json::from_str(forward.client_context.as_deref().unwrap()).unwrap();
        assert_eq!(context["custom"][TOOL_NAME], "payments___charge_card");
        assert_eq!(context["custom"][SESSION_ID], "s-1");
        assert_eq!(context["custom"][DEDUP_KEY_CONTEXT], "k1");
        assert!(is_gateway_call(Some(&ctx)));
        assert!(!is_gateway_call(Some(&HashMap::new())));
        assert!(!is_gateway_call(None));
    }
}
