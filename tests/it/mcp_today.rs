//! MCP as the Gateway speaks it today (issue 49), through the real handler with the events in
//! `events/agentcore-interceptor/`, each shape from the spec file or AWS page it cites:
//!
//! - stateless MCP 2026-07-28: no `initialize`, no `Mcp-Session-Id`; `_meta` carries the protocol
//!   version, client info and capabilities, the headers `MCP-Protocol-Version`, `Mcp-Method`,
//!   `Mcp-Name` (modelcontextprotocol `docs/specification/2026-07-28/changelog.mdx`,
//!   `docs/specification/2026-07-28/basic/transports/streamable-http.mdx`); the run comes from the
//!   AgentCore policy-session header (developer guide, *Policy sessions and identity propagation*)
//!   or, under `DEDUP_SESSIONLESS=principal`, from the authenticated principal;
//! - multi-round-trip requests: `resultType: "input_required"`, then a retry of the original
//!   request with a new id and `inputResponses` / `requestState`
//!   (`schema/2026-07-28/schema.ts` `InputRequiredResult`, `docs/specification/2026-07-28/basic/patterns/mrtr.mdx`);
//! - task-augmented calls: `params.task`, a `CreateTaskResult` nested under `task`
//!   (`schema/2025-11-25/schema.ts`, `docs/specification/2025-11-25/basic/utilities/tasks.mdx`);
//! - errors where nothing ran: `-32042` `URL_ELICITATION_REQUIRED` (`schema/2025-11-25/schema.ts`,
//!   `docs/specification/2025-11-25/client/elicitation.mdx`), `-32020` `HEADER_MISMATCH`, `-32021`
//!   `MISSING_REQUIRED_CLIENT_CAPABILITY`, `-32022` `UNSUPPORTED_PROTOCOL_VERSION`
//!   (`schema/2026-07-28/schema.ts`), and a target's own code named by
//!   `DEDUP_RELEASE_ON_RPC_ERRORS`.

use serde_json::{Value, json};
use toolcall_dedup::config::{Config, Sessionless};
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::store::{ManualClock, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::{Scripted, event, handler};
use crate::servers::{self, Backend};

fn interceptor(name: &str) -> Value {
    event(&format!("agentcore-interceptor/{name}"))
}

fn container<S: Store>(store: S, config: &Config) -> Handler<S, impl Dispatcher + use<S>> {
    handler(store, Scripted::new(vec![]), config).with_settings(|s| s.wait = Default::default())
}

async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, name: &str) -> Handled {
    h.handle_with_context(&interceptor(name), &Invocation::default(), None)
        .await
}

fn answer(h: &Handled) -> Value {
    serde_json::from_str(h.response.as_ref().expect("an answer").get()).unwrap()
}

/// The result a replayed REQUEST answers with, without the replay marker.
fn replayed_result(h: &Handled) -> Value {
    let mut result = answer(h)["mcp"]["transformedGatewayResponse"]["body"]["result"].clone();
    result["_meta"]
        .as_object_mut()
        .expect("a replay is marked")
        .remove("toolcall-dedup/dedup")
        .expect("the marker");
    if result["_meta"].as_object().is_some_and(|m| m.is_empty()) {
        result.as_object_mut().unwrap().remove("_meta");
    }
    result
}

/// A 2026-07-28 `tools/call` and its retry (new id, the model's rewrite, no session): the
/// AgentCore policy-session header names the run, so the retry replays and the target runs once.
async fn a_stateless_retry_pair_runs_once<S: Store + Clone>(store: S) {
    let h = container(store.clone(), &Config::default());
    let first = send(&h, "stateless-charge_card.request.json").await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    let settled = send(&h, "stateless-charge_card.response.json").await;
    assert_eq!(settled.outcome, Outcome::Executed);
    let retry = send(&h, "stateless-charge_card-retry.request.json").await;
    assert_eq!(retry.outcome, Outcome::Replayed, "{retry:?}");
    assert_eq!(retry.key, first.key);
    let stored = interceptor("stateless-charge_card.response.json");
    assert_eq!(
        replayed_result(&retry),
        stored["mcp"]["gatewayResponse"]["body"]["result"]
    );
    let record = store.get(first.key.as_deref().unwrap()).await.unwrap();
    assert_eq!(
        record.unwrap().about.run.as_deref(),
        Some("policy-session:0f8a1c52-6d3e-4b7a-9e21-5c4d3b2a1908")
    );
}

#[tokio::test]
async fn a_stateless_retry_pair_runs_once_on_memory() {
    a_stateless_retry_pair_runs_once(servers::memory_store(ManualClock::starting_now())).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_stateless_retry_pair_runs_once_on_moto() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    a_stateless_retry_pair_runs_once(store).await;
}

/// Two users' identical stateless calls (no session of any kind, the same JSON-RPC id) under
/// `DEDUP_SESSIONLESS=principal`: each is keyed within its own principal (the bearer JWT the
/// Gateway verified), so both run; one user's repeat is one call. Under `gateway_scope` they
/// would be one call, and under the default they run unkeyed.
#[tokio::test]
async fn two_principals_identical_stateless_calls_run_twice() {
    let store = servers::memory_store(ManualClock::starting_now());
    let principal = Config {
        sessionless: Sessionless::Principal,
        ..Config::default()
    };
    let h = container(store.clone(), &principal);
    let alice = send(&h, "stateless-subscribe-alice.request.json").await;
    let bob = send(&h, "stateless-subscribe-bob.request.json").await;
    assert_eq!(
        (alice.outcome, bob.outcome),
        (Outcome::Executed, Outcome::Executed)
    );
    assert_ne!(alice.key, bob.key);
    let record = store
        .get(alice.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let run = record.about.run.unwrap();
    assert!(
        run.starts_with("principal:") && !run.contains("alice"),
        "the principal is a digest, never the subject: {run}"
    );
    // Alice's repeat (the Gateway, or her client, sends it again) is her own call.
    let again = send(&h, "stateless-subscribe-alice.request.json").await;
    assert_eq!(again.outcome, Outcome::InProgress);
    assert_eq!(again.key, alice.key);

    let default = container(
        servers::memory_store(ManualClock::starting_now()),
        &Config::default(),
    );
    assert_eq!(
        send(&default, "stateless-subscribe-alice.request.json")
            .await
            .outcome,
        Outcome::Sessionless,
        "no run, no principal scope: unkeyed, as DEDUP_SESSIONLESS=pass_through says"
    );
}

/// A multi-round-trip call: the target answers `input_required` (never stored as the outcome,
/// and the claim released), the client retries the original request with its input (a new id,
/// `inputResponses`, `requestState`), the target finishes and that result is stored; a retry of
/// the original request then replays the final result. The target ran to completion once.
async fn an_input_required_leg_is_never_the_outcome<S: Store + Clone>(store: S) {
    let h = container(store.clone(), &Config::default());
    let first = send(&h, "mrtr-transfer_funds.request.json").await;
    assert_eq!(first.outcome, Outcome::Executed);
    let key = first.key.clone().unwrap();
    let interim = send(&h, "mrtr-transfer_funds-input-required.response.json").await;
    let passed = answer(&interim)["mcp"]["transformedGatewayResponse"]["body"]["result"].clone();
    assert_eq!(
        passed["resultType"], "input_required",
        "passed on unchanged"
    );
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "the interim answer released the claim: nothing is held for the abandoned leg"
    );
    let continuation = send(&h, "mrtr-transfer_funds-continuation.request.json").await;
    assert_eq!(continuation.outcome, Outcome::Executed, "{continuation:?}");
    assert_eq!(
        continuation.key.as_deref(),
        Some(key.as_str()),
        "one call, one key"
    );
    let done = send(&h, "mrtr-transfer_funds-continuation.response.json").await;
    assert_eq!(done.outcome, Outcome::Executed);
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed)
    );
    let retry = send(&h, "mrtr-transfer_funds-retry.request.json").await;
    assert_eq!(retry.outcome, Outcome::Replayed);
    let final_result = interceptor("mrtr-transfer_funds-continuation.response.json");
    assert_eq!(
        replayed_result(&retry),
        final_result["mcp"]["gatewayResponse"]["body"]["result"]
    );
}

#[tokio::test]
async fn an_input_required_leg_is_never_the_outcome_on_memory() {
    an_input_required_leg_is_never_the_outcome(servers::memory_store(ManualClock::starting_now()))
        .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn an_input_required_leg_is_never_the_outcome_on_moto() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    an_input_required_leg_is_never_the_outcome(store).await;
}

/// A task-augmented call retried gets the same task (one task created), for as long as the task
/// lives; once its TTL has passed, the retry is told the outcome is unknown, never handed a dead
/// task and never given a second one.
#[tokio::test]
async fn a_task_augmented_call_retried_returns_the_same_task_while_it_lives() {
    let clock = ManualClock::new(1_796_549_400_000); // 2026-12-06T09:30:00Z, the task's createdAt
    let h = container(servers::memory_store(clock.clone()), &Config::default());
    assert_eq!(
        send(&h, "task-export_ledger.request.json").await.outcome,
        Outcome::Executed
    );
    send(&h, "task-export_ledger.response.json").await;
    clock.advance_ms(60_000);
    let retry = send(&h, "task-export_ledger-retry.request.json").await;
    assert_eq!(retry.outcome, Outcome::Replayed);
    assert_eq!(
        replayed_result(&retry)["task"]["taskId"],
        "786512e2-9e0d-44bd-8f29-789f320fe840"
    );
    clock.advance_ms(3_600_000);
    let late = send(&h, "task-export_ledger-retry.request.json").await;
    assert_eq!(late.outcome, Outcome::Unknown, "{late:?}");
    let error = &answer(&late)["mcp"]["transformedGatewayResponse"]["body"]["error"];
    assert_eq!(
        error["data"]["dedup"]["outcome"], "outcome_unknown",
        "{error}"
    );
}

/// Each JSON-RPC error that says nothing ran releases the claim, so the documented retry (after
/// the user completes the URL, or with the header, capability or version fixed) runs at once,
/// never "in progress" until the lease ends. A target's own code does so when the deployment
/// names it; unnamed, it keeps the claim.
#[tokio::test]
async fn each_nothing_ran_error_lets_the_retry_run() {
    let cases = [
        ("refund-url-elicitation", Config::default()),
        ("refund-header-mismatch", Config::default()),
        ("refund-missing-capability", Config::default()),
        ("refund-unsupported-version", Config::default()),
    ];
    for (name, config) in cases {
        let h = container(servers::memory_store(ManualClock::starting_now()), &config);
        let claimed = send(&h, &format!("{name}.request.json")).await;
        assert_eq!(claimed.outcome, Outcome::Executed, "{name}");
        send(&h, &format!("{name}.response.json")).await;
        let retry = send(&h, &format!("{name}.request.json")).await;
        assert_eq!(retry.outcome, Outcome::Executed, "{name}: {retry:?}");
    }

    // A target's own "nothing ran" code (here -32050), named by the deployment.
    let own = |code: i64| {
        let mut ev = interceptor("refund-header-mismatch.response.json");
        ev["mcp"]["gatewayResponse"]["body"]["error"] =
            json!({"code": code, "message": "card network down; nothing charged"});
        ev
    };
    for (released, want) in [
        (vec![-32050], Outcome::Executed),
        (vec![], Outcome::InProgress),
    ] {
        let config = Config {
            release_on_rpc_errors: released.clone(),
            ..Config::default()
        };
        let h = container(servers::memory_store(ManualClock::starting_now()), &config);
        send(&h, "refund-header-mismatch.request.json").await;
        h.handle_with_context(&own(-32050), &Invocation::default(), None)
            .await;
        let retry = send(&h, "refund-header-mismatch.request.json").await;
        assert_eq!(retry.outcome, want, "released codes {released:?}");
    }
}

/// With `DEDUP_TARGET_KEY_HEADER`, a claimed REQUEST hands the call's key to the target in that
/// header of `transformedGatewayRequest` (the Gateway forwards a header an interceptor returns to
/// a target whose `metadataConfiguration.allowedRequestHeaders` names it: developer guide, *Header
/// propagation*), and only that header: the client's (its `Authorization`) are never returned.
/// A replayed REQUEST reaches no target and carries none. A header the Gateway forbids is refused.
#[tokio::test]
async fn the_key_reaches_the_target_in_the_header_the_deployment_names() {
    let config = Config {
        target_key_header: Some("Idempotency-Key".into()),
        ..Config::default()
    };
    let h = container(servers::memory_store(ManualClock::starting_now()), &config);
    let claimed = send(&h, "stateless-charge_card.request.json").await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let request = &answer(&claimed)["mcp"]["transformedGatewayRequest"];
    assert_eq!(
        request["headers"],
        json!({"Idempotency-Key": claimed.key.clone().unwrap()})
    );
    let sent = interceptor("stateless-charge_card.request.json");
    assert_eq!(request["body"], sent["mcp"]["gatewayRequest"]["body"]);

    let plain = container(
        servers::memory_store(ManualClock::starting_now()),
        &Config::default(),
    );
    let passed = send(&plain, "stateless-charge_card.request.json").await;
    assert!(
        answer(&passed)["mcp"]["transformedGatewayRequest"]
            .get("headers")
            .is_none(),
        "no header unless the deployment names one"
    );

    let lookup = |name: &'static str| {
        move |var: &str| (var == "DEDUP_TARGET_KEY_HEADER").then(|| name.to_string())
    };
    for bad in ["X-Amzn-Idempotency", "Idempotency Key", ""] {
        let err = Config::from_lookup(lookup(bad), toolcall_dedup::config::StoreKind::Memory);
        assert!(
            bad.is_empty() || err.is_err(),
            "{bad:?} must be refused: {err:?}"
        );
    }
}

/// A RESPONSE near the Gateway's limit: Lambda's synchronous invocation takes 6 MB (AgentCore
/// developer guide, *Interceptor configuration*: "a 6 MB limit for the request and response
/// combined"). A 5 MB `tools/call` result is stored once, through S3 (past DynamoDB's 400 KB
/// item), and a retry replays it whole, under its own id, in an answer that still fits.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_five_megabyte_result_is_stored_through_s3_and_replayed_whole() {
    let store =
        servers::dynamodb_store_offloading(Backend::Moto, ManualClock::starting_now()).await;
    let h = container(store.clone(), &Config::default());
    let request = interceptor("stateless-charge_card.request.json");
    let first = h
        .handle_with_context(&request, &Invocation::default(), None)
        .await;
    assert_eq!(first.outcome, Outcome::Executed, "{first:?}");
    // Letters that JSON escapes nowhere, so their size is what travels, and in no pattern that
    // compression would shrink below the item limit (a linear congruential sequence).
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let text: String = (0..5 * 1024 * 1024)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (b'a' + ((state >> 33) % 26) as u8) as char
        })
        .collect();
    let mut response = interceptor("stateless-charge_card.response.json");
    response["mcp"]["gatewayResponse"]["body"]["result"] =
        json!({"content": [{"type": "text", "text": text}], "isError": false});
    let settled = h
        .handle_with_context(&response, &Invocation::default(), None)
        .await;
    assert_eq!(settled.outcome, Outcome::Executed, "{:?}", settled.outcome);
    let passed = settled.response.as_ref().expect("an answer").get().len();
    assert!(
        passed < 6 * 1024 * 1024,
        "the RESPONSE's answer fits: {passed} bytes"
    );
    let record = store
        .get(first.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, Status::Completed);
    assert!(
        record.offloaded.is_some(),
        "stored through S3, not in the item"
    );

    let retry = send(&h, "stateless-charge_card-retry.request.json").await;
    assert_eq!(retry.outcome, Outcome::Replayed, "{:?}", retry.outcome);
    let replayed = answer(&retry);
    let body = &replayed["mcp"]["transformedGatewayResponse"]["body"];
    assert_eq!(
        body["id"],
        interceptor("stateless-charge_card-retry.request.json")["mcp"]["gatewayRequest"]["body"]["id"]
    );
    assert_eq!(
        body["result"]["content"][0]["text"].as_str().map(str::len),
        Some(text.len())
    );
    assert!(body["result"]["content"][0]["text"] == text.as_str());
    assert!(retry.response.as_ref().unwrap().get().len() < 6 * 1024 * 1024);
}
