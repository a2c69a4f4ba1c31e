//! The interceptor door's promises across containers, requests and deployments (issue 39), on
//! memory and moto: one key for one call whichever container keys its REQUEST and its RESPONSE,
//! no learned listing lost when two containers learn at once, a forged listing that cannot loosen
//! a key, a request invoked again that goes on as its own claim's owner while another request
//! cannot settle it, batches refused, the lease covering the target's start, Gateway tools'
//! policies by their listed names, and doors a deployment does not serve refused.

use std::collections::HashMap;

use serde_json::{Value, json};
use toolcall_dedup::config::{Config, Doors, Sessionless, TOOL_START_ALLOWANCE};
use toolcall_dedup::handler::{ClientContext, Handled, HandlerError, Invocation};
use toolcall_dedup::internals::catalog_key;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{ManualClock, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::{event as event_file, handler};
use crate::gateway::{self, container, response, send, send_with};
use crate::servers::{self, Backend};

const TOOL: &str = "inventory___reserve_stock";

/// A `tools/call` REQUEST of the inventory tool.
fn request(session: Option<&str>, id: u64, arguments: Value) -> Value {
    gateway::request(TOOL, session, id, arguments)
}

/// A `tools/list` RESPONSE listing `reserve_stock` with `properties` (and any more tools).
fn listing(properties: Value, more: &[Value]) -> Value {
    let mut tools = vec![json!({"name": TOOL, "inputSchema": {"type": "object",
        "properties": properties, "required": ["sku", "quantity"]}})];
    tools.extend(more.iter().cloned());
    json!({"interceptorInputVersion": "1.0", "mcp": {
        "gatewayRequest": {"path": "/mcp", "httpMethod": "POST", "headers": {},
                           "body": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}},
        "gatewayResponse": {"statusCode": 200, "headers": {},
                            "body": {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}}}})
}

fn quantity_as(kind: &str) -> Value {
    json!({"sku": {"type": "string"}, "quantity": {"type": kind}})
}

fn answer(h: &Handled) -> Value {
    serde_json::from_str(h.response.as_ref().expect("an answer").get()).unwrap()
}

/// A listing that changes between a call's REQUEST (keyed in one container) and its RESPONSE
/// (keyed in another, whose catalog is newer): the RESPONSE still settles the claim, and the
/// target runs once. Then the documented window: a retry keyed after a change that alters how its
/// arguments normalize is a new call; one that does not, meets its original.
async fn one_call_has_one_key_in_every_container<S: Store + Clone>(store: S) {
    let config = Config::default();
    let (a, b) = (
        container(store.clone(), &config),
        container(store.clone(), &config),
    );
    // `quantity` as text, learned and cached in container a; then as an integer in container b.
    assert_eq!(
        send(&a, &listing(quantity_as("string"), &[])).await.outcome,
        Outcome::PassedOn
    );
    send(&b, &listing(quantity_as("integer"), &[])).await;
    let args = json!({"sku": "SKU-88", "quantity": "5"});
    let first = request(Some("s-1"), 7, args.clone());
    let claimed = send(&a, &first).await;
    assert_eq!(claimed.outcome, Outcome::Executed, "the target is called");
    let settled = send(&b, &response(&first, "reserved 5")).await;
    assert_eq!(
        settled.outcome,
        Outcome::Executed,
        "the RESPONSE settles the claim its REQUEST took: {:?}",
        settled
    );
    let record = store.get(claimed.key.as_deref().unwrap()).await.unwrap();
    assert_eq!(record.map(|r| r.status), Some(Status::Completed));
    let retry = send(&a, &request(Some("s-1"), 8, args.clone())).await;
    assert_eq!(retry.outcome, Outcome::Replayed, "and its retry replays");

    // The window: container b keys `"5"` as the integer 5 now, so a retry keyed there is a new
    // call, while a listing change that leaves the arguments' form alone keeps the key.
    let across = send(&b, &request(Some("s-1"), 9, args.clone())).await;
    assert_eq!(across.outcome, Outcome::Executed);
    assert_ne!(across.key, claimed.key);
    let with_note = json!({"sku": {"type": "string"}, "quantity": {"type": "integer"},
                           "note": {"type": "string"}});
    send(&b, &listing(with_note, &[])).await;
    let c = container(store.clone(), &config);
    let unchanged = send(&c, &request(Some("s-1"), 10, args)).await;
    assert_eq!(unchanged.key, across.key, "a new member keeps the key");
}

#[tokio::test]
async fn one_call_has_one_key_in_every_container_on_memory() {
    one_call_has_one_key_in_every_container(servers::memory_store(ManualClock::starting_now()))
        .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn one_call_has_one_key_in_every_container_on_moto() {
    one_call_has_one_key_in_every_container(
        servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await,
    )
    .await;
}

/// Two containers that read one catalog learn a listing each: the second write finds the record
/// changed, reads it again and merges, so neither listing is lost.
async fn two_listings_learned_at_once_are_both_kept<S: Store + Clone>(store: S) {
    let config = Config::default();
    let (a, b) = (
        container(store.clone(), &config),
        container(store.clone(), &config),
    );
    let base = quantity_as("integer");
    send(&a, &listing(base.clone(), &[])).await;
    // Container b reads (and caches) the same version, by keying a call.
    send(
        &b,
        &request(Some("s"), 1, json!({"sku": "x", "quantity": 1})),
    )
    .await;
    let cancel = json!({"name": "inventory___cancel_reservation", "inputSchema": {"type": "object"},
                        "annotations": {"destructiveHint": true}});
    let release = json!({"name": "inventory___release_stock", "inputSchema": {"type": "object"}});
    send(&a, &listing(base.clone(), &[cancel])).await;
    send(&b, &listing(base, &[release])).await;
    let record = store
        .get(&catalog_key("interceptor:-/inventory"))
        .await
        .unwrap()
        .expect("the catalog");
    let stored: Value = serde_json::from_slice(record.result.as_deref().unwrap()).unwrap();
    let tools = stored["tools"].as_object().unwrap();
    for tool in ["reserve_stock", "cancel_reservation", "release_stock"] {
        assert!(tools.contains_key(tool), "{tool} lost: {stored}");
    }
    assert_eq!(
        tools["cancel_reservation"]["annotations"]["destructiveHint"],
        true
    );
}

#[tokio::test]
async fn two_listings_learned_at_once_are_both_kept_on_memory() {
    two_listings_learned_at_once_are_both_kept(servers::memory_store(ManualClock::starting_now()))
        .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn two_listings_learned_at_once_are_both_kept_on_moto() {
    two_listings_learned_at_once_are_both_kept(
        servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await,
    )
    .await;
}

/// A listing from a gateway that is not trusted types its tools but cannot loosen a key: its
/// `x-dedup: "ignore"` on `quantity` does not make a reservation of 500 replay the receipt of 5.
/// Trusted, the same listing does what it says.
#[tokio::test]
async fn a_forged_listing_cannot_make_another_amount_replay_a_stored_receipt() {
    let forged = json!({"sku": {"type": "string"},
                        "quantity": {"type": "integer", "x-dedup": "ignore"}});
    for (trusted, expect) in [
        (vec![], Outcome::Executed),
        (vec!["-".to_string()], Outcome::Replayed),
    ] {
        let config = Config {
            trusted_annotations: trusted.clone(),
            ..Config::default()
        };
        let h = container(servers::memory_store(ManualClock::starting_now()), &config);
        send(&h, &listing(forged.clone(), &[])).await;
        let five = request(Some("s"), 1, json!({"sku": "SKU-88", "quantity": 5}));
        assert_eq!(send(&h, &five).await.outcome, Outcome::Executed);
        send(&h, &response(&five, "reserved 5")).await;
        let five_hundred = request(Some("s"), 2, json!({"sku": "SKU-88", "quantity": 500}));
        let answered = send(&h, &five_hundred).await;
        assert_eq!(answered.outcome, expect, "trusted: {trusted:?}");
    }
}

/// The Gateway invokes an interceptor again after a failure or a timeout. A REQUEST that finds
/// the claim its own request holds goes on as the owner (not waiting out the lease for itself);
/// another request with the same JSON-RPC id and arguments does not, and its late RESPONSE cannot
/// settle the claim of the request that took the key over.
#[tokio::test]
async fn a_request_invoked_again_goes_on_and_another_request_cannot_settle_its_claim() {
    let clock = ManualClock::starting_now();
    let store = servers::memory_store(clock.clone());
    let h = container(store.clone(), &Config::default());
    let in_session = request(Some("s-1"), 3, json!({"sku": "SKU-1", "quantity": 1}));
    let named = HashMap::from([("REQUEST_ID".to_string(), "req-3".to_string())]);
    assert_eq!(
        send_with(&h, &in_session, &named).await.outcome,
        Outcome::Executed
    );
    let again = send_with(&h, &in_session, &named).await;
    assert_eq!(
        again.outcome,
        Outcome::Executed,
        "the same request, invoked again, goes to the target"
    );
    // A session alone names no one request: a client's HTTP layer may send the same message
    // again while the target runs, and it must not run the target twice.
    assert_eq!(send(&h, &in_session).await.outcome, Outcome::InProgress);

    // Sessionless (keyed by gateway and target): JSON-RPC ids repeat across clients, so only the
    // Gateway's REQUEST_ID names one request.
    let config = Config {
        sessionless: Sessionless::GatewayScope,
        ..Config::default()
    };
    let h = container(store.clone(), &config);
    let context = |request_id: &str| -> ClientContext {
        HashMap::from([("REQUEST_ID".to_string(), request_id.to_string())])
    };
    let shared = request(None, 1, json!({"sku": "SKU-2", "quantity": 2}));
    let first = send_with(&h, &shared, &context("req-a")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    assert_eq!(
        send_with(&h, &shared, &context("req-a")).await.outcome,
        Outcome::Executed,
        "its REQUEST_ID names it"
    );
    assert_eq!(
        send_with(&h, &shared, &context("req-b")).await.outcome,
        Outcome::InProgress,
        "another request with the same id waits for it"
    );
    assert_eq!(
        send(&h, &shared).await.outcome,
        Outcome::InProgress,
        "without a REQUEST_ID an id names no one request"
    );
    // Request a's RESPONSE never comes; its lease ends, and request b takes the key over.
    let record = store
        .get(first.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    clock.set_ms(record.lease_until_ms + 1);
    assert_eq!(
        send_with(&h, &shared, &context("req-b")).await.outcome,
        Outcome::Executed
    );
    let late = send_with(&h, &response(&shared, "a's late answer"), &context("req-a")).await;
    assert_eq!(
        late.outcome,
        Outcome::PassedOn,
        "request a's late answer settles nothing"
    );
    let own = send_with(&h, &response(&shared, "b's answer"), &context("req-b")).await;
    assert_eq!(own.outcome, Outcome::Executed);
    let stored = store
        .get(first.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        String::from_utf8(stored.result.unwrap())
            .unwrap()
            .contains("b's answer")
    );
}

/// A JSON-RPC batch holding a `tools/call` is refused with an error per request, never passed on
/// unprotected; its RESPONSE (our own answer) settles nothing.
#[tokio::test]
async fn a_batch_holding_a_tools_call_is_refused_not_passed_on() {
    let h = container(
        servers::memory_store(ManualClock::starting_now()),
        &Config::default(),
    );
    let one = request(Some("s"), 1, json!({"sku": "a", "quantity": 1}));
    let mut batch = one.clone();
    let body = one["mcp"]["gatewayRequest"]["body"].clone();
    let mut second = body.clone();
    second["id"] = json!(2);
    batch["mcp"]["gatewayRequest"]["body"] =
        json!([body, second, {"jsonrpc": "2.0", "method": "notifications/progress"}]);
    let refused = send(&h, &batch).await;
    assert_eq!(refused.outcome, Outcome::BadRequest);
    let out = answer(&refused)["mcp"]["transformedGatewayResponse"].clone();
    let errors = out["body"].as_array().expect("an answer per request");
    assert_eq!(errors.len(), 2, "{out}");
    assert_eq!(errors[1]["id"], 2);
    assert_eq!(errors[0]["error"]["code"], -32600);
    assert!(
        answer(&refused)["mcp"]
            .get("transformedGatewayRequest")
            .is_none(),
        "never passed on to the target"
    );
    assert_eq!(h.store().requests().total(), 0);
    let mut seen = batch.clone();
    seen["mcp"]["gatewayResponse"] = out;
    assert_eq!(send(&h, &seen).await.outcome, Outcome::PassedOn);
}

/// The interceptor's lease covers the target's start allowance as the other doors' do.
#[tokio::test]
async fn the_interceptor_lease_covers_the_gateways_limit_and_the_start_allowance() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let claimed = send(
        &h,
        &request(Some("s"), 1, json!({"sku": "a", "quantity": 1})),
    )
    .await;
    let record = store
        .get(claimed.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    let covered = Config::default().interceptor_timeout + TOOL_START_ALLOWANCE;
    assert!(
        record.lease_until_ms - store.now_ms() >= covered.as_millis() as i64,
        "lease {} ms, covering {covered:?}",
        record.lease_until_ms - store.now_ms()
    );
}

/// Policy entries name a Gateway tool as the Gateway lists it: one target's `refund` policy
/// (dedup off) never applies to another target's `refund`, at either Gateway door.
#[tokio::test]
async fn a_targets_policy_never_applies_to_another_targets_tool() {
    let policy = r#"{"tools": {"payments___refund": {"dedup": "off"}}}"#;
    let config = Config {
        policies: PolicySet::parse(policy, false).unwrap(),
        ..Config::default()
    };
    let h = container(servers::memory_store(ManualClock::starting_now()), &config);
    let call = |name: &str| {
        let mut ev = request(Some("s"), 1, json!({"charge_id": "ch_1"}));
        ev["mcp"]["gatewayRequest"]["body"]["params"]["name"] = json!(name);
        ev
    };
    assert_eq!(
        send(&h, &call("payments___refund")).await.outcome,
        Outcome::DedupOff
    );
    assert_eq!(
        send(&h, &call("support___refund")).await.outcome,
        Outcome::Executed
    );
    // The Lambda-target door: its tool named in the client context.
    let lambda = handler(
        servers::memory_store(ManualClock::starting_now()),
        crate::fixture::demo(),
        &config,
    );
    let args = event_file("agentcore/refund.json");
    let mut context = crate::fixture::client_context("agentcore/refund.json").unwrap();
    let runs = |h: &Handled| h.outcome;
    let first = lambda
        .handle_with_context(&args, &Invocation::default(), Some(&context))
        .await;
    assert_eq!(runs(&first), Outcome::DedupOff);
    context.insert("bedrockAgentCoreToolName".into(), "support___refund".into());
    let other = lambda
        .handle_with_context(&args, &Invocation::default(), Some(&context))
        .await;
    assert_ne!(runs(&other), Outcome::DedupOff);
}

/// `DEDUP_DOORS`: an event shaped for a door the deployment does not serve is refused with a
/// Lambda error naming the doors it serves, counted, and touches nothing.
#[tokio::test]
async fn an_event_of_a_door_the_deployment_does_not_serve_is_refused() {
    let config = Config {
        doors: Doors::parse("envelope").unwrap(),
        ..Config::default()
    };
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        crate::fixture::demo(),
        &config,
    );
    for ev in [
        request(Some("s"), 1, json!({"sku": "a", "quantity": 1})),
        event_file("fd-charge_card.json"),
    ] {
        let refused = send(&h, &ev).await;
        assert_eq!(refused.outcome, Outcome::DoorRefused);
        match &refused.response {
            Err(e @ HandlerError::InvalidEvent(_)) => {
                assert!(e.to_string().contains("serves the envelope door"), "{e}")
            }
            other => panic!("expected a Lambda error, got {other:?}"),
        }
    }
    let gateway = crate::fixture::client_context("agentcore/charge_card.json");
    let refused = h
        .handle_with_context(
            &event_file("agentcore/charge_card.json"),
            &Invocation::default(),
            gateway.as_ref(),
        )
        .await;
    assert_eq!(refused.outcome, Outcome::DoorRefused);
    assert_eq!(h.store().requests().total(), 0);
    let served = send(&h, &event_file("envelope/charge_card.json")).await;
    assert_eq!(served.outcome, Outcome::Executed);
    assert!(Doors::parse("bedrock,smtp").is_err());
}

/// `DEDUP_INTERCEPTOR_ALIAS` (issue 48, one door per trust domain): the interceptor door is served
/// through its alias alone and that alias serves nothing else, so a harness allowed to invoke the
/// function's `live` alias cannot write a catalog with a forged `tools/list` RESPONSE.
#[tokio::test]
async fn a_forged_listing_through_the_harness_alias_never_reaches_a_catalog() {
    let config = Config {
        interceptor_alias: Some("interceptor".into()),
        ..Config::default()
    };
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        crate::fixture::demo(),
        &config,
    );
    let through = |qualifier: Option<&str>| Invocation {
        qualifier: qualifier.map(str::to_string),
        ..Invocation::default()
    };
    let forged = event_file("agentcore-interceptor/forged-tools_list.response.json");
    for qualifier in [Some("live"), Some("1"), None] {
        let refused = h
            .handle_with_context(&forged, &through(qualifier), None)
            .await;
        assert_eq!(refused.outcome, Outcome::DoorRefused, "{qualifier:?}");
        match &refused.response {
            Err(e @ HandlerError::InvalidEvent(_)) => {
                assert!(e.to_string().contains("interceptor alias"), "{e}")
            }
            other => panic!("expected a Lambda error, got {other:?}"),
        }
    }
    assert_eq!(h.store().requests().total(), 0, "nothing read or written");
    // The envelope's own event through the interceptor's alias is refused too.
    let envelope = event_file("envelope/charge_card.json");
    let refused = h
        .handle_with_context(&envelope, &through(Some("interceptor")), None)
        .await;
    assert_eq!(refused.outcome, Outcome::DoorRefused);
    assert_eq!(h.store().requests().total(), 0);
    // Each door through its own alias is served.
    let listed = h
        .handle_with_context(&forged, &through(Some("interceptor")), None)
        .await;
    assert_ne!(listed.outcome, Outcome::DoorRefused);
    let served = h
        .handle_with_context(&envelope, &through(Some("live")), None)
        .await;
    assert_eq!(served.outcome, Outcome::Executed);
}

/// Sessionless, with no `REQUEST_ID`: a JSON-RPC id names no one request (every client counts
/// from 1), so an identical request with the same id waits for the first, never goes on as its
/// owner.
#[tokio::test]
async fn without_a_session_or_a_request_id_the_same_id_waits() {
    let config = Config {
        sessionless: Sessionless::GatewayScope,
        ..Config::default()
    };
    let h = container(servers::memory_store(ManualClock::starting_now()), &config);
    let shared = request(None, 1, json!({"sku": "SKU-3", "quantity": 3}));
    assert_eq!(send(&h, &shared).await.outcome, Outcome::Executed);
    assert_eq!(send(&h, &shared).await.outcome, Outcome::InProgress);
}

/// A Gateway that names itself nowhere is warned about once per container, and only then.
#[tokio::test]
async fn an_unnamed_gateway_is_warned_about_once_per_container() {
    const WARNING: &str = "no gateway id in the invocation";
    let h = container(
        servers::memory_store(ManualClock::starting_now()),
        &Config::default(),
    );
    let call = |id| request(Some("s"), id, json!({"sku": "a", "quantity": 1}));
    let (_, first) = crate::fixture::logged(send(&h, &call(1))).await;
    let (_, second) = crate::fixture::logged(send(&h, &call(2))).await;
    assert!(first.contains(WARNING), "{first}");
    assert!(!second.contains(WARNING), "{second}");
    let named = container(
        servers::memory_store(ManualClock::starting_now()),
        &Config::default(),
    );
    let mut hosted = call(3);
    hosted["mcp"]["gatewayRequest"]["headers"]["Host"] =
        json!("gw-x.gateway.bedrock-agentcore.us-east-1.amazonaws.com");
    let (_, log) = crate::fixture::logged(send(&named, &hosted)).await;
    assert!(!log.contains(WARNING), "{log}");
}
