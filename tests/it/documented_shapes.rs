//! Each door against the shapes AWS documents, in events written from the pages (cited in
//! `events/README.md`), through the real handler:
//!
//! - AgentCore Gateway interceptors, *Types of interceptors*
//!   (<https://docs.aws.amazon.com/bedrock-agentcore/latest/devguide/gateway-interceptors-types.html>):
//!   HTTP targets' `http` payloads, a streamed RESPONSE (one invocation per event), an input
//!   version this version does not know, a RESPONSE's headers;
//! - AgentCore Gateway Lambda targets, *AWS Lambda function targets*
//!   (<https://docs.aws.amazon.com/bedrock-agentcore/latest/devguide/gateway-add-target-lambda.html>):
//!   the six documented client-context keys, none a session;
//! - Bedrock Agents action groups, *Configure Lambda functions ...*
//!   (<https://docs.aws.amazon.com/bedrock/latest/userguide/agents-lambda.html>): an OpenAPI answer
//!   carries `httpStatusCode` and no `responseState`, and echoes `httpMethod` and `apiPath`.

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::store::{ManualClock, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::{Scripted, client_context, demo, event, handler};
use crate::servers::{self, Backend};

fn interceptor(name: &str) -> Value {
    event(&format!("agentcore-interceptor/{name}"))
}

async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle_with_context(ev, &Invocation::default(), None)
        .await
}

fn answer(h: &Handled) -> Value {
    serde_json::from_str(
        h.response
            .as_ref()
            .expect("an answer, not a Lambda error")
            .get(),
    )
    .unwrap()
}

fn interceptor_handler<S: Store>(store: S) -> Handler<S, impl Dispatcher> {
    handler(store, Scripted::new(vec![]), &Config::default())
        .with_settings(|s| s.wait = Default::default())
}

/// HTTP targets (AgentCore Runtime, passthrough, inference) reach the interceptor with an `http`
/// payload: passed on with the documented no-op at REQUEST and RESPONSE, without a store request.
/// An input version this version does not know passes on too, never a Lambda error.
#[tokio::test]
async fn http_targets_and_unknown_versions_pass_through_as_documented() {
    let h = interceptor_handler(servers::memory_store(ManualClock::starting_now()));
    for name in ["http-runtime.request.json", "http-runtime.response.json"] {
        let passed = send(&h, &interceptor(name)).await;
        assert_eq!(passed.outcome, Outcome::PassedUnread, "{name}");
        assert_eq!(
            answer(&passed),
            json!({"interceptorOutputVersion": "1.0", "http": {}}),
            "{name}"
        );
    }
    let future = interceptor("future-version.request.json");
    let passed = send(&h, &future).await;
    assert_eq!(passed.outcome, Outcome::PassedUnread);
    assert_eq!(
        answer(&passed)["mcp"]["transformedGatewayRequest"]["body"],
        future["mcp"]["gatewayRequest"]["body"],
        "passed on untouched"
    );
    assert_eq!(h.store().requests().total(), 0);
}

/// With response streaming on, the RESPONSE interceptor runs once per event: the first may be a
/// server request (`elicitation/create`) with the status and headers, later ones carry only a
/// body. Each passes on unchanged; only the answer to the request's id settles the call (here
/// a destructive, so at-most-once, tool), and its retry replays that final result.
async fn a_streamed_response_settles_on_the_answer_to_the_request<S: Store>(store: S) {
    let h = interceptor_handler(store);
    send(&h, &interceptor("transfer_funds-tools_list.response.json")).await;
    let claimed = send(&h, &interceptor("transfer_funds.request.json")).await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.clone().unwrap();

    let elicit = interceptor("transfer_funds-stream-elicit.response.json");
    let passed = send(&h, &elicit).await;
    assert_eq!(
        passed.outcome,
        Outcome::PassedOn,
        "a server request settles nothing"
    );
    let out = answer(&passed)["mcp"]["transformedGatewayResponse"].clone();
    assert_eq!(out["body"], elicit["mcp"]["gatewayResponse"]["body"]);
    assert_eq!(out["headers"], elicit["mcp"]["gatewayResponse"]["headers"]);
    let record = h.store().get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress, "still the target's");

    let result = interceptor("transfer_funds-stream-result.response.json");
    let settled = send(&h, &result).await;
    assert_eq!(settled.outcome, Outcome::Executed, "the answer settles it");
    let out = answer(&settled)["mcp"]["transformedGatewayResponse"].clone();
    assert_eq!(out["body"], result["mcp"]["gatewayResponse"]["body"]);
    assert!(
        out.get("statusCode").is_none(),
        "a later event's status was sent with the first: {out}"
    );
    let record = h.store().get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Completed);
    assert!(!record.outcome_unknown);

    let retry = send(&h, &interceptor("transfer_funds-retry.request.json")).await;
    assert_eq!(retry.outcome, Outcome::Replayed);
    let body = answer(&retry)["mcp"]["transformedGatewayResponse"]["body"].clone();
    assert_eq!(body["id"], 22);
    // The stored result, its `_meta` marking the replay: MCP schema/2025-11-25/schema.ts
    // `Result._meta` (metadata, not the tool's answer), under a key of the form
    // docs/specification/2025-11-25/basic/index.mdx gives (`prefix/name`, the prefix a label).
    let mut replayed = body["result"].clone();
    let marker = replayed["_meta"]
        .as_object_mut()
        .and_then(|m| m.remove("toolcall-dedup/dedup"));
    assert_eq!(marker.unwrap()["outcome"], "replayed");
    replayed.as_object_mut().unwrap().remove("_meta");
    assert_eq!(replayed, result["mcp"]["gatewayResponse"]["body"]["result"]);
}

#[tokio::test]
async fn a_streamed_response_settles_on_the_answer_to_the_request_on_memory() {
    a_streamed_response_settles_on_the_answer_to_the_request(servers::memory_store(
        ManualClock::starting_now(),
    ))
    .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_streamed_response_settles_on_the_answer_to_the_request_on_moto() {
    a_streamed_response_settles_on_the_answer_to_the_request(
        servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await,
    )
    .await;
}

/// `initialize`'s RESPONSE carries `Mcp-Session-Id` in its headers, which the client needs for
/// every later request: the pass-through echoes the target's headers.
#[tokio::test]
async fn a_response_passes_on_with_its_headers() {
    let h = interceptor_handler(servers::memory_store(ManualClock::starting_now()));
    let init = interceptor("initialize.response.json");
    let passed = send(&h, &init).await;
    assert_eq!(passed.outcome, Outcome::PassedOn);
    let out = answer(&passed)["mcp"]["transformedGatewayResponse"].clone();
    assert_eq!(out["headers"]["Mcp-Session-Id"], "mcp-session-9a41f0");
    assert_eq!(out["statusCode"], 200);
    assert_eq!(out["body"], init["mcp"]["gatewayResponse"]["body"]);
}

/// The gateway's id names the namespace whichever source gives it (the `Host` header here, an
/// ARN in `GATEWAY_ARN`): two gateways never share a key; the same gateway named both ways does.
#[tokio::test]
async fn two_gateways_never_share_a_key_and_one_gateway_keeps_its_key_across_sources() {
    let h = interceptor_handler(servers::memory_store(ManualClock::starting_now()));
    let through = |host: &str| {
        let mut ev = interceptor("charge_card.request.json");
        ev["mcp"]["gatewayRequest"]["headers"]["Host"] = json!(host);
        ev
    };
    let a = send(
        &h,
        &through("gw-alpha-0a1b2c3d4e.gateway.bedrock-agentcore.us-east-1.amazonaws.com"),
    )
    .await;
    let b = send(
        &h,
        &through("gw-beta-9f8e7d6c5b.gateway.bedrock-agentcore.us-east-1.amazonaws.com"),
    )
    .await;
    assert_eq!(
        (a.outcome, b.outcome),
        (Outcome::Executed, Outcome::Executed)
    );
    assert_ne!(a.key, b.key);
    let by_arn: toolcall_dedup::handler::ClientContext = [(
        "GATEWAY_ARN".to_string(),
        "arn:aws:bedrock-agentcore:us-east-1:123456789012:gateway/gw-alpha-0a1b2c3d4e".to_string(),
    )]
    .into();
    let mut retry = interceptor("charge_card.request.json");
    retry["mcp"]["gatewayRequest"]["body"]["id"] = json!(99);
    let again = h
        .handle_with_context(&retry, &Invocation::default(), Some(&by_arn))
        .await;
    assert_eq!(again.key, a.key, "the ARN names the same gateway");
}

/// The Lambda-target door with the client context as documented: six keys, none a session. A call
/// that names its run in `dedup_run_id` is deduplicated; one that names none is sessionless and,
/// by default, runs without dedup.
#[tokio::test]
async fn the_lambda_target_door_reads_the_documented_client_context() {
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        &Config::default(),
    );
    let name = "agentcore/charge_card-documented-context.json";
    let context = client_context(name).expect("its client context");
    assert_eq!(context.len(), 6, "{context:?}");
    let args = event(name);
    let send_ctx = |ev: Value| {
        let h = &h;
        let context = context.clone();
        async move {
            h.handle_with_context(&ev, &Invocation::default(), Some(&context))
                .await
        }
    };
    let first = send_ctx(args.clone()).await;
    let retry = send_ctx(args.clone()).await;
    assert_eq!(
        (first.outcome, retry.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );
    let mut no_run = args;
    no_run.as_object_mut().unwrap().remove("dedup_run_id");
    assert_eq!(send_ctx(no_run.clone()).await.outcome, Outcome::Sessionless);
    assert_eq!(send_ctx(no_run).await.outcome, Outcome::Sessionless);
}

/// An OpenAPI action group's answer written by the executor carries the status and no
/// `responseState` (documented for function details only), and echoes `httpMethod` and `apiPath`
/// as the event gave them.
#[tokio::test]
async fn an_openapi_notice_has_a_status_and_echoes_the_method_as_received() {
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        &Config::default(),
    );
    let mut ev = event("openapi-charge_card.json");
    ev["httpMethod"] = json!("post");
    ev.as_object_mut().unwrap().remove("sessionId");
    let refused = send(&h, &ev).await;
    assert_eq!(refused.outcome, Outcome::BadRequest);
    let response = answer(&refused)["response"].clone();
    assert_eq!(response["httpMethod"], "post", "{response}");
    assert_eq!(response["apiPath"], ev["apiPath"]);
    assert_eq!(response["httpStatusCode"], 400);
    assert!(response.get("responseState").is_none(), "{response}");
}
