//! The interceptor adapter's unit tests: reading events, owners, answers and their classes.

use super::*;

/// An MCP interception of the version this adapter reads.
fn read<'a>(event: &'a Value, custom: Option<&'a HashMap<String, String>>) -> Interception<'a> {
    match Intercepted::parse(event, custom, None).unwrap() {
        Intercepted::Mcp(interception) => interception,
        other => panic!("not read: {other:?}"),
    }
}

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
fn only_a_tools_list_answer_is_a_listing() {
    // A tools/call whose result happens to carry a `tools` array settles its claim; it
    // teaches the catalog nothing.
    let mut event = request(7, Some("s"));
    event["mcp"]["gatewayResponse"] = json!({"statusCode": 200, "body": {"jsonrpc": "2.0",
        "id": 7, "result": {"content": [], "tools": [{"name": "payments___charge_card"}]}}});
    assert!(read(&event, None).listed_tools().is_none());
}

#[test]
fn a_tools_call_is_keyed_by_gateway_target_tool_and_session() {
    let event = request(7, Some("sess-1"));
    let i = read(&event, None);
    assert_eq!(i.phase, Phase::Request);
    let call = i.tools_call().unwrap().unwrap();
    assert_eq!((call.target, call.tool), ("payments", "charge_card"));
    let tc = i
        .tool_call(&call, "dedup_step", "idempotency_key", Sessionless::Refuse)
        .unwrap();
    assert_eq!(tc.namespace, "interceptor:-/payments");
    assert_eq!(tc.run_id.as_deref(), Some("sess-1"));
    assert_eq!(tc.args, r#"{"amount":5}"#);
    let out: Value = serde_json::from_str(&i.pass()).unwrap();
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
    let (a, b) = (read(&a, None), read(&b, None));
    assert_ne!(a.owner("k"), b.owner("k"));
    assert_eq!(a.owner("k"), a.owner("k"));
    assert!(!a.owner("k").contains('.'));
    let call = b.tools_call().unwrap().unwrap();
    let dedup = DedupInfo {
        outcome: "replayed",
        key: Some("k"),
        first_ran_ms: None,
        mark: false,
    };
    let out: Value = serde_json::from_str(&call.result(r#"{"content":[]}"#, dedup)).unwrap();
    assert_eq!(out["mcp"]["transformedGatewayResponse"]["body"]["id"], 8);
    assert_eq!(
        out["mcp"]["transformedGatewayResponse"]["body"]["result"],
        json!({"content": [], "_meta": {REPLAY_META: {"outcome": "replayed", "key": "k"}}}),
        "the stored result, marked a replay in its _meta"
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
        read(&event, None).target_reply(&[])
    };
    let ok = class(
        json!({"statusCode": 200, "body": {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}}),
    );
    assert!(matches!(ok, Some(Ok((_, ReplyClass::Success)))));
    let failed = class(json!({"statusCode": 200, "body": {"id": 7, "result": {"isError": true}}}));
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
    assert!(read(&event, None).tools_call().is_none());
    let event = json!({"interceptorInputVersion": "1.0"});
    assert!(Intercepted::parse(&event, None, None).is_err());
    let mut event = request(1, None);
    event["mcp"]["gatewayRequest"]["body"]["params"]["arguments"] = json!([1]);
    let i = read(&event, None);
    assert!(i.tools_call().unwrap().is_err());
    let event = request(1, None);
    let i = read(&event, None);
    let call = i.tools_call().unwrap().unwrap();
    assert!(matches!(
        i.tool_call(
            &call,
            "dedup_step",
            "idempotency_key",
            Sessionless::PassThrough
        ),
        Err(crate::doors::port::Unkeyed::Sessionless(_))
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

/// What each kind of RESPONSE settles, by its status and body: an answer with a result but a
/// failing status keeps or releases as the status says; a body that answers nothing is
/// judged by its status alone; a streamed event that answers nothing settles nothing.
#[test]
fn a_response_settles_by_its_status_as_well_as_its_body() {
    let with = |response: Value| {
        let mut event = request(7, Some("s"));
        event["mcp"]["gatewayResponse"] = response;
        event
    };
    let class = |response: Value| read(&with(response), None).target_reply(&[]);
    let result = json!({"jsonrpc": "2.0", "id": 7, "result": {"content": []}});
    assert_eq!(
        class(json!({"statusCode": 409, "body": result})),
        Some(Err(true))
    );
    assert_eq!(
        class(json!({"statusCode": 429, "body": result})),
        Some(Err(true))
    );
    assert_eq!(
        class(json!({"statusCode": 404, "body": result})),
        Some(Err(false))
    );
    assert_eq!(
        class(json!({"statusCode": 502, "body": result})),
        Some(Err(true))
    );
    let nothing = json!({"jsonrpc": "2.0", "id": 99, "result": {}});
    assert_eq!(
        class(json!({"statusCode": 409, "body": nothing})),
        Some(Err(true))
    );
    assert_eq!(
        class(json!({"statusCode": 429, "body": {}})),
        Some(Err(true))
    );
    assert_eq!(class(json!({"statusCode": 200, "body": nothing})), None);
    assert_eq!(
        class(json!({"statusCode": 500, "isStreamingResponse": true, "body": nothing})),
        None,
        "a streamed event answering another id settles nothing"
    );
    for code in REFUSED_CODES {
        let refused = json!({"statusCode": 200, "body": {"jsonrpc": "2.0", "id": 7,
            "error": {"code": code, "message": "refused"}}});
        assert_eq!(class(refused), Some(Err(false)), "{code}");
    }
    assert_eq!(
        REFUSED_CODES,
        [
            -32700, -32600, -32601, -32602, -32042, -32020, -32021, -32022
        ]
    );
    // -32603 (internal error) and the implementation-defined range say nothing of what ran.
    for kept in [-32603, -32000, -32001] {
        let error = json!({"statusCode": 200, "body": {"jsonrpc": "2.0", "id": 7,
            "error": {"code": kept, "message": "failed"}}});
        assert_eq!(class(error), Some(Err(true)), "{kept}");
    }
    assert_eq!(DEDUP_ERROR_CODE, -32000);
}

#[test]
fn a_buffered_response_passes_on_with_a_status_and_a_batch_is_told_by_its_calls() {
    let mut event = request(7, Some("s"));
    event["mcp"]["gatewayResponse"] = json!({"body": {"jsonrpc": "2.0", "id": 7, "result": {}}});
    let out: Value = serde_json::from_str(&read(&event, None).pass()).unwrap();
    assert_eq!(
        out["mcp"]["transformedGatewayResponse"]["statusCode"], 200,
        "a buffered response always has a status"
    );
    let mut batch = request(1, Some("s"));
    let body = batch["mcp"]["gatewayRequest"]["body"].clone();
    let notice = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    batch["mcp"]["gatewayRequest"]["body"] = json!([notice.clone(), notice.clone()]);
    assert!(!read(&batch, None).is_batch_with_tools_call());
    batch["mcp"]["gatewayRequest"]["body"] = json!([notice, body]);
    assert!(read(&batch, None).is_batch_with_tools_call());
    // A tools/list seen at REQUEST is no listing.
    let mut list = request(1, Some("s"));
    list["mcp"]["gatewayRequest"]["body"] =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert!(read(&list, None).listed_tools().is_none());
}

#[test]
fn the_gateway_is_named_by_its_arn_its_host_or_the_deployment() {
    let event = request(1, Some("s"));
    assert!(!read(&event, None).gateway_is_named());
    let arn: HashMap<String, String> = [(
        GATEWAY_ARN_CONTEXT.to_string(),
        "arn:aws:bedrock-agentcore:us-east-1:123456789012:gateway/gw-1".to_string(),
    )]
    .into();
    let by_arn = read(&event, Some(&arn));
    assert!(by_arn.gateway_is_named());
    assert_eq!(by_arn.gateway(), "gw-1");
    let configured = match Intercepted::parse(&event, None, Some("gw-2")).unwrap() {
        Intercepted::Mcp(i) => i,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (configured.gateway(), configured.gateway_is_named()),
        ("gw-2", true)
    );
    assert!(!read(&request(1, None), None).owner_is_one_request());
    // A session alone names no one request (a client may send a message again within it).
    assert!(!read(&request(1, Some("s")), None).owner_is_one_request());
    let named = HashMap::from([(REQUEST_ID_CONTEXT.to_string(), "req-1".to_string())]);
    assert!(read(&request(1, Some("s")), Some(&named)).owner_is_one_request());
    let err = InterceptorError::Event("why".into());
    assert_eq!(
        (err.reason(), err.to_string().ends_with(": why")),
        ("why", true)
    );
}

#[test]
fn an_unread_invocation_says_why_and_warns_only_for_an_unknown_version() {
    let http = json!({"interceptorInputVersion": "1.0", "http": {"gatewayRequest": {}}});
    match Intercepted::parse(&http, None, None).unwrap() {
        Intercepted::Unread { warn, why, .. } => {
            assert!(!warn, "an HTTP target's invocation is expected");
            assert!(why.contains("HTTP target"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let future = json!({"interceptorInputVersion": "1.1", "http": {}});
    match Intercepted::parse(&future, None, None).unwrap() {
        Intercepted::Unread { warn, why, .. } => {
            assert!(warn);
            assert!(why.contains("\"1.1\""), "the version is named: {why}");
        }
        other => panic!("{other:?}"),
    }
    let event = request(1, Some("s"));
    let call = read(&event, None);
    let tools = call.tools_call().unwrap().unwrap();
    assert_eq!(Answers::tool(&tools), "charge_card");
}
