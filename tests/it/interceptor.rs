//! The Gateway interceptor door through the real handler, on memory and on moto: a `tools/call`
//! claimed at REQUEST and completed at RESPONSE is answered from the store for its retry (so the
//! Gateway never calls the target again), under the retry's own JSON-RPC id; an identical call in
//! flight gets a marked JSON-RPC error; a refused call is released and an unknown outcome kept;
//! other messages pass through without a store request. Events: `events/agentcore-interceptor/`.

use crate::fixture::{Scripted, events_dir, handler, logged};
use crate::servers;

use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use toolcall_dedup::config::{Config, Mode, Sessionless};
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{ManualClock, MemoryStore, Status, Store};
use toolcall_dedup::telemetry::Outcome;

fn event(name: &str) -> Value {
    let path = events_dir().join("agentcore-interceptor").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle_with_context(ev, &Invocation::default(), None)
        .await
}

fn answer(h: &Handled) -> Value {
    serde_json::from_str(h.response.as_ref().expect("an answer").get()).unwrap()
}

/// The Gateway's RESPONSE invocation after a REQUEST answered for the target: the request, and
/// our answer as the response.
fn seen_at_response(request: &Value, answered: &Handled) -> Value {
    let mut ev = request.clone();
    ev["mcp"]["gatewayResponse"] = answer(answered)["mcp"]["transformedGatewayResponse"].clone();
    ev
}

fn interceptor_handler<S: Store>(store: S) -> Handler<S, impl Dispatcher> {
    configured_handler(store, Config::default())
}

/// The interceptor handler on `config`, with the example policy file.
fn configured_handler<S: Store>(store: S, config: Config) -> Handler<S, impl Dispatcher> {
    let policy = std::fs::read_to_string(events_dir().join("agentcore/policy.json")).unwrap();
    let config = Config {
        policies: PolicySet::parse(&policy, false).unwrap(),
        ..config
    };
    // No waiting: an identical call in flight is answered at once.
    handler(store, Scripted::new(vec![]), &config).with_settings(|s| s.wait = Default::default())
}

async fn a_retry_pair_runs_the_target_once<S: Store>(store: S) {
    let h = interceptor_handler(store);
    let first_request = event("charge_card.request.json");
    let first = send(&h, &first_request).await;
    assert_eq!(first.outcome, Outcome::Executed);
    let passed = answer(&first);
    assert_eq!(passed["interceptorOutputVersion"], "1.0");
    assert_eq!(
        passed["mcp"]["transformedGatewayRequest"]["body"],
        first_request["mcp"]["gatewayRequest"]["body"],
        "a claimed call goes to the target unchanged"
    );
    assert!(passed["mcp"].get("transformedGatewayResponse").is_none());
    let key = first.key.clone().unwrap();

    // The identical call while the first is with the target: a marked JSON-RPC error, no target.
    let busy_request = event("charge_card-in-flight.request.json");
    let busy = send(&h, &busy_request).await;
    assert_eq!(busy.outcome, Outcome::InProgress);
    let busy_body = answer(&busy)["mcp"]["transformedGatewayResponse"]["body"].clone();
    assert_eq!(
        busy_body["id"], 13,
        "the answer carries the new request's id"
    );
    assert_eq!(busy_body["error"]["data"]["dedup"]["status"], "in_progress");
    let busy_seen = send(&h, &seen_at_response(&busy_request, &busy)).await;
    assert_eq!(
        busy_seen.outcome,
        Outcome::PassedOn,
        "our own answer settles nothing"
    );
    assert_eq!(
        h.store().get(&key).await.unwrap().unwrap().status,
        Status::InProgress,
        "the first call's claim survived its twin's answer"
    );

    // The target's answer to the first call is stored.
    let done = send(&h, &event("charge_card.response.json")).await;
    assert_eq!(done.outcome, Outcome::Executed);
    let target_body = event("charge_card.response.json")["mcp"]["gatewayResponse"]["body"].clone();
    assert_eq!(
        answer(&done)["mcp"]["transformedGatewayResponse"]["body"],
        target_body,
        "the response goes on unchanged"
    );
    assert_eq!(
        h.store().get(&key).await.unwrap().unwrap().status,
        Status::Completed
    );

    // The retry, rewritten by the model (`"usd"`, `4200.0`, keys reordered), is answered from the
    // store under its own id: the Gateway does not call the target.
    let retry_request = event("charge_card-retry.request.json");
    let retry = send(&h, &retry_request).await;
    assert_eq!(retry.outcome, Outcome::Replayed);
    assert_eq!(retry.key.as_deref(), Some(key.as_str()));
    let replayed = answer(&retry)["mcp"]["transformedGatewayResponse"].clone();
    assert_eq!(replayed["statusCode"], 200);
    assert_eq!(replayed["body"]["id"], 12);
    // The stored result, marked as a replay in its `_meta` (what its RESPONSE knows it by).
    // With when the call first ran (issue 51), as RFC 3339.
    let mut marker = replayed["body"]["result"]["_meta"]["toolcall-dedup/dedup"].clone();
    let first_ran = marker.as_object_mut().unwrap().remove("first_ran").unwrap();
    assert!(
        toolcall_dedup::key::rfc3339_epoch_ms(first_ran.as_str().unwrap()).is_some(),
        "{first_ran}"
    );
    assert_eq!(marker, json!({"outcome": "replayed", "key": key}));
    assert_eq!(
        without_marker(&replayed["body"]["result"]),
        target_body["result"]
    );
    assert!(
        answer(&retry)["mcp"]
            .get("transformedGatewayRequest")
            .is_none()
    );
    let retry_seen = send(&h, &seen_at_response(&retry_request, &retry)).await;
    assert_eq!(retry_seen.outcome, Outcome::PassedOn);
}

async fn a_refusal_releases_and_an_unknown_outcome_keeps_the_claim<S: Store>(store: S) {
    let h = interceptor_handler(store);
    let request = event("refund.request.json");
    assert_eq!(send(&h, &request).await.outcome, Outcome::Executed);
    let refused = send(&h, &event("refund-refused.response.json")).await;
    assert_eq!(refused.outcome, Outcome::Executed);
    let key = refused.key.clone().unwrap();
    assert!(
        h.store().get(&key).await.unwrap().is_none(),
        "released: nothing ran"
    );
    // The retry runs, and this time the target's outcome is unknown: the claim is kept.
    assert_eq!(send(&h, &request).await.outcome, Outcome::Executed);
    send(&h, &event("refund-internal-error.response.json")).await;
    assert_eq!(
        h.store().get(&key).await.unwrap().unwrap().status,
        Status::InProgress
    );
    // The client's next retry is a new request (MCP never reuses an id within a session).
    let mut retry = request.clone();
    retry["mcp"]["gatewayRequest"]["body"]["id"] = serde_json::json!(99);
    assert_eq!(send(&h, &retry).await.outcome, Outcome::InProgress);
}

async fn other_messages_and_sessionless_calls_pass_without_a_store_request<S: Store>(store: S) {
    let h = interceptor_handler(store);
    for name in [
        "initialize.request.json",
        "tools_list.request.json",
        "refund-sessionless.request.json",
    ] {
        let ev = event(name);
        let handled = send(&h, &ev).await;
        let expected = if name.starts_with("refund") {
            Outcome::Sessionless
        } else {
            Outcome::PassedOn
        };
        assert_eq!(handled.outcome, expected, "{name}");
        let out = answer(&handled);
        let passed = if name.ends_with(".response.json") {
            &out["mcp"]["transformedGatewayResponse"]["body"]
        } else {
            &out["mcp"]["transformedGatewayRequest"]["body"]
        };
        let original = if name.ends_with(".response.json") {
            &ev["mcp"]["gatewayResponse"]["body"]
        } else {
            &ev["mcp"]["gatewayRequest"]["body"]
        };
        assert_eq!(passed, original, "{name} passes unchanged");
    }
    assert_eq!(h.store().requests().total(), 0);
    // A payload marked as an interceptor's of the version this reads, but none, is a Lambda
    // error, not a guess.
    let bad = serde_json::json!({"interceptorInputVersion": "1.0"});
    assert!(send(&h, &bad).await.response.is_err());
}

/// The Gateway's RESPONSE invocation after the target answered `request` with `result`.
fn target_answered(request: &Value, result: Value) -> Value {
    let mut ev = request.clone();
    let id = request["mcp"]["gatewayRequest"]["body"]["id"].clone();
    ev["mcp"]["gatewayResponse"] = serde_json::json!({
        "statusCode": 200,
        "body": {"jsonrpc": "2.0", "id": id, "result": result},
    });
    ev
}

/// No policy file names the inventory tools: only the listing says what their arguments are.
fn listening_handler<S: Store>(store: S, trusted: &[&str]) -> Handler<S, impl Dispatcher> {
    let config = Config {
        trusted_annotations: trusted.iter().map(|g| g.to_string()).collect(),
        ..Config::default()
    };
    handler(store, Scripted::new(vec![]), &config).with_settings(|s| s.wait = Default::default())
}

async fn a_listing_teaches_the_schema_and_a_trusted_read_only_tool_costs_no_request<S: Store>(
    store: S,
) {
    let h = listening_handler(store, &["-"]);
    let first = event("reserve_stock.request.json");
    let retry = event("reserve_stock-retry.request.json");
    // Before any listing nothing says `warehouse` defaults to `"main"`: the retry that spells the
    // default out (and writes `5.0`) keys apart.
    let unlisted = listening_handler(MemoryStore::new(), &["-"]);
    let (a, b) = (send(&unlisted, &first).await, send(&unlisted, &retry).await);
    assert_eq!(
        (a.outcome, b.outcome),
        (Outcome::Executed, Outcome::Executed)
    );
    assert_ne!(a.key, b.key);

    let listing = event("inventory-tools_list.response.json");
    let listed = send(&h, &listing).await;
    assert_eq!(listed.outcome, Outcome::PassedOn);
    assert_eq!(
        answer(&listed)["mcp"]["transformedGatewayResponse"]["body"],
        listing["mcp"]["gatewayResponse"]["body"],
        "the listing reaches the client unchanged"
    );

    // Now the pair meets: the REQUEST claims, the RESPONSE stores, the retry replays.
    let claimed = send(&h, &first).await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    assert_ne!(claimed.key, a.key, "keyed by the learned schema");
    let result = serde_json::json!({"content": [{"type": "text", "text": "reserved 5 of SKU-88"}]});
    let settled = send(&h, &target_answered(&first, result.clone())).await;
    assert_eq!(settled.outcome, Outcome::Executed);
    let replay = send(&h, &retry).await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert_eq!(replay.key, claimed.key);
    let body = answer(&replay)["mcp"]["transformedGatewayResponse"]["body"].clone();
    assert_eq!(
        (body["id"].clone(), without_marker(&body["result"])),
        (6.into(), result)
    );

    // The listing marked get_stock read-only, and this gateway's annotations are trusted.
    let before = h.store().requests();
    let read = send(&h, &event("get_stock.request.json")).await;
    assert_eq!(read.outcome, Outcome::DedupOff);
    assert_eq!(
        h.store().requests() - before,
        Default::default(),
        "no store request"
    );
}

/// A tool listed as destructive (and not idempotent) is `at_most_once` with no policy file: the
/// target's unknown outcome is settled as such, and every retry REQUEST is answered
/// `outcome_unknown` (naming the key) without reaching the target. Acting on the hint needs no
/// trust: it only ever makes a call run fewer times.
async fn a_destructive_listing_makes_an_unknown_outcome_final<S: Store>(store: S) {
    let h = listening_handler(store, &[]);
    let mut listing = event("inventory-tools_list.response.json");
    listing["mcp"]["gatewayResponse"]["body"]["result"]["tools"][0]["annotations"] =
        serde_json::json!({"destructiveHint": true});
    send(&h, &listing).await;
    let request = event("reserve_stock.request.json");
    let claimed = send(&h, &request).await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.clone().unwrap();
    send(&h, &crate::gateway::failed_response(&request)).await;
    let record = h.store().get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown && record.at_most_once, "{record:?}");
    for retry in [
        "reserve_stock.request.json",
        "reserve_stock-retry.request.json",
    ] {
        let answered = send(&h, &event(retry)).await;
        assert_eq!(answered.outcome, Outcome::Unknown, "{retry}");
        let out = answer(&answered);
        assert!(
            out["mcp"].get("transformedGatewayRequest").is_none(),
            "{retry}: the target is not called"
        );
        let error = &out["mcp"]["transformedGatewayResponse"]["body"]["error"];
        assert_eq!(
            error["data"]["dedup"]["status"], "outcome_unknown",
            "{error}"
        );
        assert_eq!(error["data"]["dedup"]["key"], key.as_str());
    }
}

#[tokio::test]
async fn a_destructive_listing_makes_an_unknown_outcome_final_on_memory() {
    a_destructive_listing_makes_an_unknown_outcome_final(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_destructive_listing_makes_an_unknown_outcome_final_on_moto() {
    let store = servers::dynamodb_store(servers::Backend::Moto, ManualClock::starting_now()).await;
    a_destructive_listing_makes_an_unknown_outcome_final(store).await;
}

#[tokio::test]
async fn a_listing_teaches_the_schema_and_a_trusted_read_only_tool_costs_no_request_on_memory() {
    a_listing_teaches_the_schema_and_a_trusted_read_only_tool_costs_no_request(MemoryStore::new())
        .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_listing_teaches_the_schema_and_a_trusted_read_only_tool_costs_no_request_on_moto() {
    let store = servers::dynamodb_store(servers::Backend::Moto, ManualClock::starting_now()).await;
    a_listing_teaches_the_schema_and_a_trusted_read_only_tool_costs_no_request(store).await;
}

#[tokio::test]
async fn another_container_reads_the_learned_catalog_and_untrusted_annotations_change_nothing() {
    let store = MemoryStore::new();
    let learner = listening_handler(store.clone(), &[]);
    send(&learner, &event("inventory-tools_list.response.json")).await;
    // A fresh container on the same table keys with the listing too, and claims the read-only
    // tool, since nobody said this gateway's annotations can be trusted.
    let other = listening_handler(
        store.clone(),
        &["arn:aws:bedrock-agentcore:us-east-1:1:gateway/other"],
    );
    let first = send(&other, &event("reserve_stock.request.json")).await;
    let retry = send(&learner, &event("reserve_stock-retry.request.json")).await;
    assert_eq!(retry.key, first.key);
    assert_eq!(retry.outcome, Outcome::InProgress);
    let read = send(&other, &event("get_stock.request.json")).await;
    assert_eq!(
        read.outcome,
        Outcome::Executed,
        "claimed: annotations untrusted"
    );
}

#[tokio::test]
async fn a_retry_pair_runs_the_target_once_on_memory() {
    a_retry_pair_runs_the_target_once(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_retry_pair_runs_the_target_once_on_moto() {
    let store = servers::dynamodb_store(servers::Backend::Moto, ManualClock::starting_now()).await;
    a_retry_pair_runs_the_target_once(store).await;
}

#[tokio::test]
async fn a_refusal_releases_and_an_unknown_outcome_keeps_the_claim_on_memory() {
    a_refusal_releases_and_an_unknown_outcome_keeps_the_claim(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_refusal_releases_and_an_unknown_outcome_keeps_the_claim_on_moto() {
    let store = servers::dynamodb_store(servers::Backend::Moto, ManualClock::starting_now()).await;
    a_refusal_releases_and_an_unknown_outcome_keeps_the_claim(store).await;
}

#[tokio::test]
async fn other_messages_and_sessionless_calls_pass_without_a_store_request_on_memory() {
    other_messages_and_sessionless_calls_pass_without_a_store_request(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn other_messages_and_sessionless_calls_pass_without_a_store_request_on_moto() {
    let store = servers::dynamodb_store(servers::Backend::Moto, ManualClock::starting_now()).await;
    other_messages_and_sessionless_calls_pass_without_a_store_request(store).await;
}

/// `request` with its `tools/call` arguments replaced by `arguments`.
fn with_arguments(request: &Value, arguments: Value) -> Value {
    let mut ev = request.clone();
    ev["mcp"]["gatewayRequest"]["body"]["params"]["arguments"] = arguments;
    ev
}

/// The JSON-RPC error our answer puts in place of the target's reply, if any.
fn refusal(answered: &Handled) -> Value {
    answer(answered)["mcp"]["transformedGatewayResponse"]["body"]["error"].clone()
}

/// What cannot be keyed is refused at REQUEST in JSON-RPC, before any store request, and the
/// log line says why; at RESPONSE the target's answer to such a call goes on unchanged; shadow
/// mode lets an unkeyable call run; with dedup off every call passes untouched.
#[tokio::test]
async fn a_call_that_cannot_be_keyed_is_refused_at_request_and_passed_on_at_response() {
    let request = event("charge_card.request.json");
    let not_an_object = with_arguments(&request, json!("4200 USD to cus_8842"));
    // Past the keyer's 256 KiB limit on arguments.
    let too_large = with_arguments(
        &request,
        json!({"customer_id": "cus_8842", "note": "x".repeat(300 * 1024)}),
    );
    let enforce = interceptor_handler(MemoryStore::new());
    let off = configured_handler(
        MemoryStore::new(),
        Config {
            mode: Mode::Off,
            ..Config::default()
        },
    );
    for (name, call, reason) in [
        ("not an object", &not_an_object, "invalid tools/call"),
        ("too large", &too_large, "invalid arguments"),
    ] {
        let (refused, log) = logged(send(&enforce, call)).await;
        assert_eq!(refused.outcome, Outcome::BadRequest, "{name}");
        let error = refusal(&refused);
        assert!(error["message"].is_string(), "{name}: {error}");
        assert!(
            log.contains(&format!("reason=\"{reason}\"")),
            "{name}: {log}"
        );
        let at_response = send(&enforce, &target_answered(call, json!({"content": []}))).await;
        assert_eq!(at_response.outcome, Outcome::PassedOn, "{name}");
        assert_eq!(send(&off, call).await.outcome, Outcome::PassedOn, "{name}");
    }
    // Nothing claimed or written: the RESPONSE only looks for a claim its REQUEST noted.
    assert_eq!(enforce.store().requests().writes(), 0);

    let shadow = configured_handler(
        MemoryStore::new(),
        Config {
            mode: Mode::Shadow,
            ..Config::default()
        },
    );
    let ran = send(&shadow, &too_large).await;
    assert_eq!(ran.outcome, Outcome::PassedOn, "shadow mode refused it");
    assert!(
        answer(&ran)["mcp"]
            .get("transformedGatewayRequest")
            .is_some()
    );

    // A valid call with dedup off: no claim either.
    let passed = send(&off, &request).await;
    assert_eq!(passed.outcome, Outcome::PassedOn);
    assert_eq!(
        answer(&passed)["mcp"]["transformedGatewayRequest"]["body"],
        request["mcp"]["gatewayRequest"]["body"]
    );
    assert_eq!(off.store().requests().total(), 0);
}

/// `DEDUP_SESSIONLESS=refuse`: a call that names no run is refused at REQUEST as an invalid event
/// (the log says so), and the Gateway's RESPONSE for it is passed on. Passed through instead
/// (the default), it runs with a warning in the log.
#[tokio::test]
async fn a_sessionless_call_is_refused_at_request_when_configured_and_warned_about_otherwise() {
    let request = event("refund-sessionless.request.json");
    let h = configured_handler(
        MemoryStore::new(),
        Config {
            sessionless: Sessionless::Refuse,
            ..Config::default()
        },
    );
    let (refused, log) = logged(send(&h, &request)).await;
    assert_eq!(refused.outcome, Outcome::BadRequest);
    let error = refusal(&refused);
    assert!(
        error["message"].as_str().unwrap().contains("no run id"),
        "{error}"
    );
    assert!(log.contains(r#"reason="invalid event""#), "{log}");
    let at_response = send(&h, &target_answered(&request, json!({"content": []}))).await;
    assert_eq!(at_response.outcome, Outcome::PassedOn);
    // Nothing claimed or written: the RESPONSE only looks for a claim its REQUEST noted.
    assert_eq!(h.store().requests().writes(), 0);

    let passing = interceptor_handler(MemoryStore::new());
    let (passed, log) = logged(send(&passing, &request)).await;
    assert_eq!(passed.outcome, Outcome::Sessionless);
    assert!(log.contains("runs WITHOUT dedup"), "{log}");
    // The RESPONSE of the same call is not warned about twice.
    let (_, log) = logged(send(&passing, &target_answered(&request, json!({})))).await;
    assert!(!log.contains("runs WITHOUT dedup"), "{log}");
}

/// The learned tool catalog could not be read: keying without the listed schema could give the
/// retry another key, so the REQUEST fails closed (no claim, no target) and the RESPONSE goes on
/// as the target sent it. Shadow mode keys without the schema and lets the call run.
#[tokio::test]
async fn a_catalog_that_cannot_be_read_fails_the_call_closed_except_in_shadow_mode() {
    let request = event("reserve_stock.request.json");
    for mode in [Mode::Enforce, Mode::Shadow] {
        let store = servers::Faulty::new(MemoryStore::new());
        store.unavailable_gets.store(1, Ordering::SeqCst);
        let config = Config {
            mode,
            ..Config::default()
        };
        let h = handler(store, Scripted::new(vec![]), &config);
        let answered = send(&h, &request).await;
        if mode == Mode::Shadow {
            assert_eq!(answered.outcome, Outcome::Executed);
            assert!(
                answer(&answered)["mcp"]
                    .get("transformedGatewayRequest")
                    .is_some()
            );
            continue;
        }
        assert_eq!(answered.outcome, Outcome::StoreError);
        let error = refusal(&answered);
        assert_eq!(
            error["data"]["dedup"]["status"], "dedup_unavailable",
            "{error}"
        );
        assert!(h.store().inner.is_empty(), "a claim was taken");

        h.store().unavailable_gets.store(1, Ordering::SeqCst);
        let result = json!({"content": [{"type": "text", "text": "reserved"}]});
        let seen = target_answered(&request, result);
        let at_response = send(&h, &seen).await;
        assert_eq!(at_response.outcome, Outcome::StoreError);
        assert_eq!(
            answer(&at_response)["mcp"]["transformedGatewayResponse"]["body"],
            seen["mcp"]["gatewayResponse"]["body"]
        );
    }
}

/// A replayed `tools/call` result without the replay marker in its `_meta` (and without a
/// `_meta` the marker alone made).
fn without_marker(result: &Value) -> Value {
    let mut result = result.clone();
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("toolcall-dedup/dedup");
        if meta.is_empty() {
            result.as_object_mut().unwrap().remove("_meta");
        }
    }
    result
}
