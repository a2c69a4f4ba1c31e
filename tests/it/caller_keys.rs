//! Caller keys through the real handler, on memory and moto: a key reused with other arguments is
//! refused without running the tool, naming the paths that differ (never their values); a repeat
//! that differs only in ways the typed keyer makes equal replays; a call without a caller key is
//! keyed as before.

use serde_json::{Value, json};
use toolcall_dedup::config::{CallerKeyScope, Config};
use toolcall_dedup::handler::{Handled, Invocation};
use toolcall_dedup::store::{ManualClock, MemoryStore, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::*;
use crate::servers::{self, Backend};

fn parsed(h: &Handled) -> Value {
    serde_json::from_str(h.response.as_ref().unwrap().get()).unwrap()
}

async fn a_reused_key_is_refused_with_its_paths_and_runs_nothing<S: Store>(store: S) {
    let h = handler(store, demo(), &Config::default());
    let first = send(&h, &event("envelope/charge_card-key-7782.json")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    let reused = send(&h, &event("envelope/charge_card-key-7782-reused.json")).await;
    assert_eq!(reused.outcome, Outcome::KeyReused);
    assert_eq!(reused.key, first.key, "one key: the caller's");
    let body = parsed(&reused);
    assert!(body.get("result").is_none(), "{body}");
    assert_eq!(body["error"]["type"], "idempotency_key_reused", "{body}");
    assert_eq!(body["dedup"]["outcome"], "idempotency_key_reused");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("Paths that differ: /amount, /currency, /line_items/0/qty."),
        "{message}"
    );
    for value in ["2400", "EUR", "1800"] {
        assert!(!message.contains(value), "a value leaked: {message}");
    }
    assert_eq!(charges(h.dispatcher()), 1, "the reused key ran nothing");
    // The original arguments still get the original answer.
    let again = send(&h, &event("envelope/charge_card-key-7782.json")).await;
    assert_eq!(again.outcome, Outcome::Replayed);
    assert_eq!(parsed(&again)["result"], parsed(&first)["result"]);

    // Typed-equal (reordered, 4200.0, "usd"): a replay, with no run id at all.
    let keyed = send(&h, &event("envelope/charge_card-key.json")).await;
    let retry = send(&h, &event("envelope/charge_card-key-retry.json")).await;
    assert_eq!(
        (keyed.outcome, retry.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );

    // The same key through the Gateway door is that door's own call (domain separation), and
    // another tool under a Gateway key is named as such.
    let custom = client_context("agentcore/charge_card.json");
    let mut args = event("agentcore/charge_card.json");
    args["idempotency_key"] = json!("order-7782/charge");
    let gateway = h
        .handle_with_context(&args, &Invocation::default(), custom.as_ref())
        .await;
    assert_eq!(gateway.outcome, Outcome::Executed);
    assert_ne!(gateway.key, first.key);
    args["amount"] = json!(4201);
    let gateway_reused = h
        .handle_with_context(&args, &Invocation::default(), custom.as_ref())
        .await;
    assert_eq!(gateway_reused.outcome, Outcome::KeyReused);
    let body = parsed(&gateway_reused);
    assert_eq!(body["status"], "idempotency_key_reused", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("/amount."),
        "{body}"
    );
    assert_eq!(charges(h.dispatcher()), 3);

    // An empty key is the caller's mistake, answered in its format; nothing is claimed.
    let before = h.store().requests();
    let mut blank = event("envelope/charge_card-key.json");
    blank["idempotency_key"] = json!("");
    let refused = send(&h, &blank).await;
    assert_eq!(refused.outcome, Outcome::BadRequest);
    assert_eq!(parsed(&refused)["error"]["type"], "invalid_event");
    assert_eq!((h.store().requests() - before).total(), 0);
}

#[tokio::test]
async fn a_reused_key_is_refused_with_its_paths_and_runs_nothing_on_memory() {
    a_reused_key_is_refused_with_its_paths_and_runs_nothing(servers::memory_store(
        ManualClock::starting_now(),
    ))
    .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_reused_key_is_refused_with_its_paths_and_runs_nothing_on_moto() {
    a_reused_key_is_refused_with_its_paths_and_runs_nothing(
        servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await,
    )
    .await;
}

/// In flight, through the Bedrock door (the key as a session attribute): a reused key with other
/// arguments is refused at once, not made to wait for the first call.
#[tokio::test]
async fn a_reused_key_is_refused_while_the_first_call_still_runs() {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let keyed = |amount: &str, turn: &str| {
        let mut ev = with_attrs(
            event("fd-charge_card.json"),
            json!({"idempotency_key": "cart-55/charge"}),
        );
        ev["parameters"][1]["value"] = json!(amount);
        ev["inputText"] = json!(turn); // another turn: only the caller's key makes them one call
        ev
    };
    let (h, task) = hung_in_tool(
        servers::memory_store(ManualClock::starting_now()),
        Scripted::new(vec![Act::HangBefore(gate.clone()), Act::Run]),
        &Config::default(),
        &keyed("42.50", "charge it"),
    )
    .await;
    let reused = send(&h, &keyed("45.00", "charge it again")).await;
    assert_eq!(reused.outcome, Outcome::KeyReused);
    assert_eq!(state(&reused).as_deref(), Some("FAILURE"));
    assert!(
        body(&reused)["message"]
            .as_str()
            .unwrap()
            .contains("Paths that differ: /amount."),
        "{}",
        body(&reused)
    );
    gate.notify_one();
    let first = task.await.unwrap();
    assert_eq!(first.outcome, Outcome::Executed);
    let typed_equal = send(&h, &keyed("42.5", "a third turn")).await;
    assert_eq!(typed_equal.outcome, Outcome::Replayed);
    assert_eq!(typed_equal.key, first.key);
    assert_eq!(h.dispatcher().invokes(), 1);
}

/// A caller key stays inside its caller: one Bedrock session's key (a session attribute, which
/// lasts the whole session) never refuses that session's next tool; another session (another
/// tenant) with the same key and arguments runs its own call, answered with its own session's
/// attributes; a retry within a session gets its own attributes plus what the tool changed.
async fn caller_keys_stay_inside_their_session<S: Store>(store: S) {
    let h = handler(
        store,
        Scripted::new(vec![
            Act::Run,
            Act::Run,
            Act::RunSetting("last_receipt", "rcpt-a"),
            Act::Run,
        ]),
        &Config::default(),
    );
    let charge = send(&h, &event("fd-charge_card-key.json")).await;
    let refund = send(&h, &event("fd-refund-key.json")).await;
    assert_eq!(
        (charge.outcome, refund.outcome),
        (Outcome::Executed, Outcome::Executed),
        "the session's key does not refuse its next tool: {}",
        parsed(&refund)
    );
    assert_ne!(charge.key, refund.key);

    let tenant_a = event("fd-charge_card-key-tenant-a.json");
    let tenant_b = event("fd-charge_card-key-tenant-b.json");
    let a = send(&h, &tenant_a).await;
    assert_eq!(a.outcome, Outcome::Executed);
    assert_eq!(
        parsed(&a)["sessionAttributes"],
        json!({"idempotency_key": "order-7781", "tenant": "acme-eu",
               "user_email": "ana@acme.example", "last_receipt": "rcpt-a"}),
        "the first caller gets the tool's session"
    );
    let b = send(&h, &tenant_b).await;
    assert_eq!(
        b.outcome,
        Outcome::Executed,
        "another session with the same key and arguments is its own call"
    );
    assert_ne!(a.key, b.key);
    let answer_b = parsed(&b).to_string();
    for leaked in ["acme-eu", "ana@acme.example", "rcpt-a"] {
        assert!(
            !answer_b.contains(leaked),
            "{leaked} reached tenant b: {answer_b}"
        );
    }

    // A retry in tenant a's session, whose attributes moved on meanwhile: its own attributes,
    // plus the tool's change, from the stored reply.
    let retry = with_attrs(
        tenant_a,
        json!({"idempotency_key": "order-7781", "tenant": "acme-eu", "cart": "2"}),
    );
    let replayed = send(&h, &retry).await;
    assert_eq!(replayed.outcome, Outcome::Replayed);
    assert_eq!(
        parsed(&replayed)["sessionAttributes"],
        json!({"idempotency_key": "order-7781", "tenant": "acme-eu", "cart": "2",
               "last_receipt": "rcpt-a"})
    );
    assert_eq!(h.dispatcher().invokes(), 4);
    let record = stored(&h, &a).await.unwrap();
    let stored_text = String::from_utf8(record.result.unwrap()).unwrap();
    assert!(
        !stored_text.contains("ana@acme.example"),
        "a session's attributes are never stored: {stored_text}"
    );
}

#[tokio::test]
async fn caller_keys_stay_inside_their_session_on_memory() {
    caller_keys_stay_inside_their_session(servers::memory_store(ManualClock::starting_now())).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn caller_keys_stay_inside_their_session_on_moto() {
    caller_keys_stay_inside_their_session(
        servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await,
    )
    .await;
}

/// Through the Gateway interceptor, where the key is an argument the model writes: another MCP
/// session with the same key and arguments is not answered from the first.
#[tokio::test]
async fn an_interceptor_caller_key_stays_inside_its_mcp_session() {
    let h = handler(
        servers::memory_store(ManualClock::starting_now()),
        demo(),
        &Config::default(),
    );
    let in_session = |session: &str, id: u64| {
        let mut ev = event("agentcore-interceptor/charge_card.request.json");
        ev["mcp"]["gatewayRequest"]["headers"]["mcp-session-id"] = json!(session);
        let body = &mut ev["mcp"]["gatewayRequest"]["body"];
        body["id"] = json!(id);
        body["params"]["arguments"]["idempotency_key"] = json!("order-7781");
        ev
    };
    let answered = |request: &Value, result: Value| {
        let mut ev = request.clone();
        ev["mcp"]["gatewayResponse"] = json!({"statusCode": 200, "body": {
            "jsonrpc": "2.0", "id": request["mcp"]["gatewayRequest"]["body"]["id"],
            "result": result}});
        ev
    };
    let first = in_session("mcp-session-tenant-a", 11);
    assert_eq!(send(&h, &first).await.outcome, Outcome::Executed);
    let receipt = json!({"content": [{"type": "text", "text": "charged for tenant a"}]});
    assert_eq!(
        send(&h, &answered(&first, receipt)).await.outcome,
        Outcome::Executed
    );
    let same_session = send(&h, &in_session("mcp-session-tenant-a", 12)).await;
    assert_eq!(same_session.outcome, Outcome::Replayed);
    let other = send(&h, &in_session("mcp-session-tenant-b", 11)).await;
    assert_eq!(
        other.outcome,
        Outcome::Executed,
        "another session's call goes to the target: {}",
        parsed(&other)
    );
    assert!(!parsed(&other).to_string().contains("tenant a"));
}

/// `DEDUP_ENVELOPE_CALLER_KEY_SCOPE=namespace`: a harness whose keys are unique across its runs
/// widens them to the namespace; by default another run is another call.
#[tokio::test]
async fn an_envelope_key_reaches_across_runs_only_when_the_deployment_widens_it() {
    let in_run = |run: Option<&str>| {
        let mut ev = event("envelope/charge_card-key.json");
        match run {
            Some(run) => ev["run_id"] = json!(run),
            None => {
                ev.as_object_mut().unwrap().remove("run_id");
            }
        }
        ev
    };
    let by_run = handler(MemoryStore::new(), demo(), &Config::default());
    assert_eq!(
        send(&by_run, &in_run(Some("r1"))).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&by_run, &in_run(Some("r2"))).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&by_run, &in_run(None)).await.outcome,
        Outcome::BadRequest
    );

    let widened = Config {
        envelope_caller_key_scope: CallerKeyScope::Namespace,
        ..Config::default()
    };
    let by_namespace = handler(MemoryStore::new(), demo(), &widened);
    assert_eq!(
        send(&by_namespace, &in_run(Some("r1"))).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&by_namespace, &in_run(Some("r2"))).await.outcome,
        Outcome::Replayed
    );
    assert_eq!(
        send(&by_namespace, &in_run(None)).await.outcome,
        Outcome::Replayed
    );
    assert_eq!(charges(by_namespace.dispatcher()), 1);
}
