//! Caller keys through the real handler, on memory and moto: a key reused with other arguments is
//! refused without running the tool, naming the paths that differ (never their values); a repeat
//! that differs only in ways the typed keyer makes equal replays; a call without a caller key is
//! keyed as before.

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Handled, Invocation};
use toolcall_dedup::store::{ManualClock, Store};
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
