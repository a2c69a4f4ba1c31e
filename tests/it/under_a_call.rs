//! What can change while a call is in flight, and must never run it twice or lose its result
//! (issue 48): a lost claim's release in one container while the REQUEST, re-sent, goes on in
//! another; a config or listing change between a REQUEST and its RESPONSE; a handler rebuilt by a
//! config refresh. Each runs through the real handler, on memory and on moto.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use toolcall_dedup::config::document;
use toolcall_dedup::config::source::{ConfigSource, Loaded, Loader};
use toolcall_dedup::config::{Config, ConfigError, StoreKind};
use toolcall_dedup::handler::Handler;
use toolcall_dedup::internals::reload::{Refreshed, Reloading};
use toolcall_dedup::stand_ins::demo::DemoTool;
use toolcall_dedup::store::{ManualClock, MemoryStore, Status, Store};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

use crate::fixture::{self, Scripted, demo, handler, policies};
use crate::gateway::{self, container, response, send, send_as};
use crate::servers::{self, Backend, Faulty};

const TOOL: &str = "payments___charge_card";

/// A `tools/call` REQUEST of the charge tool in MCP session `session`.
fn request(session: &str, id: u64, arguments: Value) -> Value {
    gateway::request(TOOL, Some(session), id, arguments)
}

fn charge(amount: Value) -> Value {
    json!({"customer_id": "cus_1", "amount": amount, "currency": "USD"})
}

/// Container 1's claim applies but every answer to it is lost, so it remembers the claim's token
/// to release at its next call. The Gateway sends the same REQUEST again, to container 2, which
/// finds the request's own claim and goes on under it: the target runs. Container 1's next call
/// (another key) releases what it remembered. The claim must survive that release, carry a lease
/// counted from the re-sent REQUEST, be settled by the RESPONSE, and a client retry replays.
async fn a_resent_request_survives_the_release_of_its_lost_claim<S: Store + Clone>(
    store: S,
    clock: ManualClock,
) {
    let config = Config::default();
    let lossy = Faulty::new(store.clone());
    lossy.lose_claim_answers.store(1, Ordering::SeqCst);
    let (one, two) = (container(lossy, &config), container(store.clone(), &config));

    let first = request("s-1", 7, charge(json!(4200)));
    let lost = send_as(&one, &first, "req-7").await;
    assert_eq!(lost.outcome, Outcome::StoreError, "fails closed: {lost:?}");
    let key = lost.key.clone().expect("keyed");
    let written = store.get(&key).await.unwrap().expect("the claim applied");

    // Time passes before the Gateway sends the REQUEST again: the lease must count from now.
    clock.advance_ms(20_000);
    let resent = send_as(&two, &first, "req-7").await;
    assert_eq!(
        resent.outcome,
        Outcome::Executed,
        "goes on as its own claim's owner"
    );
    let resumed = store.get(&key).await.unwrap().expect("claimed");
    assert_ne!(
        resumed.token, written.token,
        "the claim is handed to a fresh token, never the one a lost answer left behind"
    );
    assert!(
        resumed.lease_until_ms >= written.lease_until_ms + 20_000,
        "the lease covers the target run the re-sent REQUEST starts: {} < {} + 20000",
        resumed.lease_until_ms,
        written.lease_until_ms
    );

    // Container 1's next call, of another key, releases the claim it remembered: fenced out.
    let other = send(&one, &request("s-9", 1, charge(json!(1)))).await;
    assert_eq!(other.outcome, Outcome::Executed);
    let still = store
        .get(&key)
        .await
        .unwrap()
        .expect("the live claim is not released");
    assert_eq!(still.status, Status::InProgress);

    let settled = send_as(&two, &response(&first, "charged"), "req-7").await;
    assert_eq!(settled.outcome, Outcome::Executed, "settled: {settled:?}");
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed)
    );
    let retry = send(&one, &request("s-1", 8, charge(json!(4200.0)))).await;
    assert_eq!(retry.outcome, Outcome::Replayed, "the target ran once");
}

#[tokio::test]
async fn a_resent_request_survives_the_release_of_its_lost_claim_on_memory() {
    let clock = ManualClock::starting_now();
    a_resent_request_survives_the_release_of_its_lost_claim(
        servers::memory_store(clock.clone()),
        clock,
    )
    .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_resent_request_survives_the_release_of_its_lost_claim_on_moto() {
    let clock = ManualClock::starting_now();
    let store = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
    a_resent_request_survives_the_release_of_its_lost_claim(store, clock).await;
}

/// A policy that re-keys the tool comes into force between a call's REQUEST (container a, the
/// old configuration) and its RESPONSE (container b, the new one): the RESPONSE settles the
/// claim the REQUEST made, and a retry keyed under the old configuration replays.
async fn a_policy_change_between_request_and_response_settles_the_claim_made<S: Store + Clone>(
    store: S,
) {
    let before = Config::default();
    // `amount` alone keys the call now: every other argument's key changes.
    let after = policies(json!({"tools": {TOOL: {"key_fields": ["amount"]}}}));
    let (a, b) = (
        container(store.clone(), &before),
        container(store.clone(), &after),
    );

    let first = request("s-1", 7, charge(json!(4200)));
    let claimed = send(&a, &first).await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let settled = send(&b, &response(&first, "charged")).await;
    assert_eq!(settled.outcome, Outcome::Executed, "settled: {settled:?}");
    assert_eq!(
        settled.key, claimed.key,
        "the RESPONSE names the key its REQUEST claimed, not one derived again"
    );
    let key = claimed.key.expect("keyed");
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed),
        "the result is stored, not lost"
    );
    let retry = send(&a, &request("s-1", 8, charge(json!(4200)))).await;
    assert_eq!(retry.outcome, Outcome::Replayed);
}

#[tokio::test]
async fn a_policy_change_between_request_and_response_settles_the_claim_made_on_memory() {
    a_policy_change_between_request_and_response_settles_the_claim_made(servers::memory_store(
        ManualClock::starting_now(),
    ))
    .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_policy_change_between_request_and_response_settles_the_claim_made_on_moto() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    a_policy_change_between_request_and_response_settles_the_claim_made(store).await;
}

/// A document that keeps its action group's schema in S3 (as `dedup config from-agent` writes
/// it), with `amount` typed by `amount`.
async fn schema_in_s3(bucket: &str, object: &str, amount: &str) -> std::path::PathBuf {
    let openapi = format!(
        "openapi: 3.0.0\npaths:\n  /charges:\n    post:\n      operationId: charge_card\n      \
         requestBody:\n        content:\n          application/json:\n            schema:\n              \
         type: object\n              properties:\n                customer_id: {{type: string}}\n                \
         amount: {amount}\n                currency: {{type: string}}\n"
    );
    servers::s3_put(bucket, object, openapi.into_bytes()).await;
    let document = format!(
        "settings: {{mode: enforce}}\ntool_definitions:\n  - actionGroupName: payments\n    apiSchema:\n      \
         s3: {{s3BucketName: {bucket}, s3ObjectKey: {object}}}\n"
    );
    let path = std::env::temp_dir().join(format!("dedup-{}.yaml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, document).unwrap();
    path
}

fn build_on(
    store: MemoryStore,
) -> impl Fn(&document::Document) -> Result<Handler<MemoryStore, DemoTool>, ConfigError> {
    move |document: &document::Document| {
        let config = Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory)?;
        Ok(Handler::new(
            store.clone(),
            demo(),
            &config,
            Telemetry::quiet(),
        ))
    }
}

/// The S3 object behind a document's schema changes while the document's text does not: a
/// refresh sees it (the version covers every schema the document keeps in S3), so every warm
/// container keys with the schema new containers key with.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_schema_changed_in_s3_is_seen_by_a_refresh_of_an_unchanged_document() {
    let bucket = servers::result_bucket().await;
    let object = format!("schemas/{}.yaml", uuid::Uuid::new_v4().simple());
    let path = schema_in_s3(bucket.bucket(), &object, "{type: number}").await;
    let endpoint = Backend::Moto.endpoint();
    let loader = Loader::new(ConfigSource::File(path.clone()), None, Some(&endpoint)).await;
    let store = MemoryStore::new();
    let charge = fixture::event("fd-charge_card.json");
    let key_with = |loaded: &Loaded| {
        let handler = build_on(store.clone())(&loaded.document).unwrap();
        let charge = charge.clone();
        async move { send(&handler, &charge).await.key.expect("keyed") }
    };

    let first = loader.load().await.unwrap();
    let reloading = Reloading::start(
        loader.clone(),
        first.clone(),
        build_on(store.clone()),
        Duration::from_secs(60),
        Telemetry::quiet(),
    )
    .unwrap();
    assert_eq!(reloading.refresh().await.unwrap(), Refreshed::Unchanged);
    let version = reloading.version();

    // The same document text; the schema object now types `amount` as text ("42.50", not 42.5).
    schema_in_s3(bucket.bucket(), &object, "{type: string}").await;
    let second = loader.load().await.unwrap();
    assert_eq!(second.text, first.text, "the document itself is unchanged");
    assert_ne!(
        key_with(&first).await,
        key_with(&second).await,
        "the schema change re-keys the call (the case this test needs)"
    );
    assert_eq!(reloading.refresh().await.unwrap(), Refreshed::Replaced);
    assert_ne!(reloading.version(), version);
    let warm = send(&reloading.current(), &charge).await;
    assert_eq!(
        warm.key.unwrap(),
        key_with(&second).await,
        "keys as a new container does"
    );
    std::fs::remove_file(path).ok();
}

/// A claim whose answers were lost just before a config refresh is still released at the next
/// call: the handler the refresh builds carries on the container's list of lost claims.
#[tokio::test]
async fn a_config_refresh_keeps_the_lost_claims_to_release() {
    let path = std::env::temp_dir().join(format!("dedup-{}.yaml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, "settings: {mode: enforce, wait_ms: 0}\n").unwrap();
    let loader = Loader::new(ConfigSource::File(path.clone()), None, None).await;
    let store = servers::memory_store(ManualClock::starting_now());
    let lossy = std::sync::atomic::AtomicBool::new(true);
    let build = move |document: &document::Document| {
        let config = Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory)?;
        // Only the first container's first claim loses its answers.
        let faulty = Faulty::new(store.clone());
        if lossy.swap(false, Ordering::SeqCst) {
            faulty.lose_claim_answers.store(1, Ordering::SeqCst);
        }
        Ok(Handler::new(faulty, demo(), &config, Telemetry::quiet()))
    };
    let reloading = Reloading::start(
        loader.clone(),
        loader.load().await.unwrap(),
        build,
        Duration::from_secs(60),
        Telemetry::quiet(),
    )
    .unwrap();
    let charge = fixture::event("fd-charge_card.json");
    let lost = send(&reloading.current(), &charge).await;
    assert_eq!(lost.outcome, Outcome::StoreError, "fails closed: {lost:?}");

    std::fs::write(&path, "settings: {mode: enforce, wait_ms: 1}\n").unwrap();
    assert_eq!(reloading.refresh().await.unwrap(), Refreshed::Replaced);
    let retried = send(&reloading.current(), &charge).await;
    assert_eq!(
        retried.outcome,
        Outcome::Executed,
        "the lost claim was released, so the retry runs instead of waiting out a lease: {retried:?}"
    );
    std::fs::remove_file(path).ok();
}

/// One pointer syntax wherever a policy names fields: `key_fields: ["/amount"]` keys by the
/// `amount` member (a charge of 99 never replays a charge of 1), and `/meta.trace_id` names the
/// one member `meta.trace_id`, never `meta` → `trace_id`.
#[tokio::test]
async fn policy_pointers_name_the_members_they_point_at() {
    let config = policies(json!({"tools": {TOOL: {
        "key_fields": ["/amount", "/meta.trace_id"],
        "fields": {"/meta.trace_id": "ignore"}
    }}}));
    let h = container(servers::memory_store(ManualClock::starting_now()), &config);
    let call = |id, amount: u64, trace: &str, nested: Value| {
        let mut args = charge(json!(amount));
        args["meta.trace_id"] = json!(trace);
        args["meta"] = nested;
        request("s-1", id, args)
    };
    let one = send(&h, &call(1, 1, "t-1", json!({"trace_id": "a"}))).await;
    assert_eq!(one.outcome, Outcome::Executed);
    let ninety_nine = send(&h, &call(2, 99, "t-1", json!({"trace_id": "a"}))).await;
    assert_eq!(
        ninety_nine.outcome,
        Outcome::Executed,
        "another amount is another call"
    );
    assert_ne!(ninety_nine.key, one.key);
    // `meta.trace_id` is ignored, and `meta` is outside `key_fields`: the same call.
    let traced = send(&h, &call(3, 1, "t-2", json!({"trace_id": "b"}))).await;
    assert_eq!(traced.key, one.key);
}

/// A policy written under an OpenAPI `operationId` reaches the operation as Bedrock calls it
/// (`POST /charges/{chargeId}/refunds`): a destructive refund that crashed after acting is
/// settled as outcome unknown, and its retry is told so instead of running it again.
#[tokio::test]
async fn a_policy_under_an_operation_id_reaches_the_call_bedrock_makes() {
    let document = document::parse(
        r#"
tools:
  issue_refund: {destructive: true}
tool_definitions:
  - actionGroupName: payments-api
    apiSchema:
      payload: |
        openapi: 3.0.0
        paths:
          /charges/{chargeId}/refunds:
            post:
              operationId: issue_refund
              parameters: [{name: chargeId, in: path, schema: {type: string}}]
              requestBody:
                content:
                  application/json:
                    schema: {type: object, properties: {amount: {type: number}, reason: {type: string}}}
"#,
    )
    .unwrap();
    let config =
        Config::from_lookup_and_document(|_| None, Some(&document), StoreKind::Memory).unwrap();
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        Scripted::new(vec![
            fixture::Act::RunThenFail("Sandbox.Timedout"),
            fixture::Act::Run,
        ]),
        &config,
    )
    .with_settings(|s| s.wait = Default::default());
    let refund = fixture::event("openapi-refund.json");
    let crashed = send(&h, &refund).await;
    assert_eq!(crashed.outcome, Outcome::ToolError);
    let retry = send(&h, &refund).await;
    assert_eq!(
        retry.outcome,
        Outcome::Unknown,
        "the refund is at_most_once under its operationId's policy: {retry:?}"
    );
}

/// Under `DEDUP_SESSIONLESS=gateway_scope` a model-written idempotency key has no session to stay
/// inside: another client's different call that reuses a common key is its own call, never
/// refused with the first client's differing paths; an identical call still meets the first.
#[tokio::test]
async fn a_caller_key_without_a_session_never_reaches_another_clients_call() {
    let config = Config {
        sessionless: toolcall_dedup::config::Sessionless::GatewayScope,
        ..Config::default()
    };
    let h = container(servers::memory_store(ManualClock::starting_now()), &config);
    let sessionless = |id, amount: u64| {
        let mut ev = request("-", id, charge(json!(amount)));
        ev["mcp"]["gatewayRequest"]["headers"]
            .as_object_mut()
            .unwrap()
            .remove("Mcp-Session-Id");
        ev["mcp"]["gatewayRequest"]["body"]["params"]["arguments"]["idempotency_key"] =
            json!("charge-1");
        ev
    };
    let first = send(&h, &sessionless(1, 4200)).await;
    assert_eq!(first.outcome, Outcome::Executed);
    let other_client = send(&h, &sessionless(1, 99)).await;
    assert_eq!(
        other_client.outcome,
        Outcome::Executed,
        "another client's call is its own: {other_client:?}"
    );
    let same = send(&h, &sessionless(2, 4200)).await;
    assert_eq!(
        same.key, first.key,
        "gateway scope: identical calls are one"
    );
}

/// A caller-keyed retry made after the tool's schema changed (a listing or policy typed `amount`
/// as text, now as a number) is the same call: replayed, never refused as "other arguments"
/// (which would tell the model to send a new key, and run the call twice). A call with other
/// arguments under the key is still refused.
#[tokio::test]
async fn a_caller_keyed_retry_across_a_schema_change_replays() {
    let typed = |amount: &str| {
        policies(
            json!({"tools": {TOOL: {"schema": {"type": "object", "properties": {
            "customer_id": {"type": "string"}, "amount": {"type": amount},
            "currency": {"type": "string"}, "idempotency_key": {"type": "string"}}}}}}),
        )
    };
    let store = servers::memory_store(ManualClock::starting_now());
    let (a, b) = (
        container(store.clone(), &typed("string")),
        container(store.clone(), &typed("number")),
    );
    let keyed = |id, amount: &str| {
        let mut args = charge(json!(amount));
        args["idempotency_key"] = json!("order-1");
        request("s-1", id, args)
    };
    let first = keyed(1, "42.50");
    assert_eq!(send(&a, &first).await.outcome, Outcome::Executed);
    let settled = send(&a, &response(&first, "charged")).await;
    assert_eq!(settled.outcome, Outcome::Executed);
    let retry = send(&b, &keyed(2, "42.50")).await;
    assert_eq!(
        retry.outcome,
        Outcome::Replayed,
        "the same arguments under the new schema: {retry:?}"
    );
    let other = send(&b, &keyed(3, "43.00")).await;
    assert_eq!(other.outcome, Outcome::KeyReused, "other arguments");
}
