//! `at_most_once` tools through the real handler, on memory and moto: an unknown outcome is
//! settled as such and never re-run; every repeat answers `outcome_unknown` naming the key, until
//! an operator settles the call (`dedup_cli::operator::settle`, what `dedup settle` runs).

use std::time::Duration;

use dedup_cli::operator::settle::{Action, SettleError, settle};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::Handled;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{ManualClock, Records, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::*;
use crate::servers::{self, Backend};

const DAY: Duration = Duration::from_secs(86_400);

/// A destructive tool is `at_most_once` by default; `delivery` says so outright.
const DESTRUCTIVE: &str = r#"{"tools": {"charge_card": {"destructive": true}}}"#;
const AT_MOST_ONCE: &str = r#"{"tools": {"charge_card": {"delivery": "at_most_once"}}}"#;

fn config(policy: &str) -> Config {
    Config {
        policies: PolicySet::parse(policy, false).unwrap(),
        ..Config::default()
    }
}

#[track_caller]
fn assert_outcome_unknown(h: &Handled, key: &str) {
    assert_eq!(h.outcome, Outcome::Unknown);
    assert_eq!(state(h).as_deref(), Some("REPROMPT"));
    let body = body(h);
    assert_eq!(body["status"], "outcome_unknown", "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("dedup settle {key}")),
        "{message}"
    );
}

/// A crash after the side effect: settled unknown, never re-run (not even once the lease would
/// have ended), until the operator stores the reply they found, which repeats then replay.
async fn crash_then_operator_completes<S: Store + Records>(
    store: S,
    clock: ManualClock,
    policy: &str,
) {
    let h = handler(
        store,
        Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout"), Act::Run]),
        &config(policy),
    );
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    let key = crashed.key.clone().unwrap();
    assert!(tool_error_message(&crashed).contains("unknown"));
    let record = stored(&h, &crashed).await.expect("settled, not released");
    assert!(
        record.outcome_unknown && record.status == Status::Completed,
        "{record:?}"
    );
    for advance_ms in [0, 3_600_000] {
        clock.advance_ms(advance_ms);
        let retry = send(&h, &event("fd-charge_card-retry.json")).await;
        assert_eq!(retry.key.as_deref(), Some(key.as_str()));
        assert_outcome_unknown(&retry, &key);
    }
    assert_eq!(h.dispatcher().invokes(), 1, "{policy}");
    assert_eq!(charges(&h.dispatcher().demo), 1, "{policy}");

    let reply = br#"{"messageVersion":"1.0","response":{"actionGroup":"payments","function":"charge_card","functionResponse":{"responseBody":{"TEXT":{"body":"{\"charge_id\":\"ch_found_by_ops\"}"}}}}}"#;
    let done = settle(h.store(), &key, Action::Complete(reply), DAY)
        .await
        .unwrap();
    assert!(done.before.outcome_unknown);
    assert_eq!(done.log_line(0)["action"], "completed");
    let replayed = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(replayed.outcome, Outcome::Replayed);
    assert_eq!(body(&replayed)["charge_id"], "ch_found_by_ops");
    assert!(matches!(
        settle(h.store(), &key, Action::Release, DAY).await,
        Err(SettleError::AlreadyCompleted)
    ));
    assert_eq!(h.dispatcher().invokes(), 1, "{policy}");
}

/// An owner killed mid-call writes nothing: once its lease ends the call is outcome unknown (an
/// at-least-once tool would run again). The operator releases it, and a retry runs once.
async fn killed_owner_then_operator_releases<S: Store + Records + 'static>(
    store: S,
    clock: ManualClock,
) {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let (h, task) = hung_in_tool(
        store,
        Scripted::new(vec![Act::HangBefore(gate), Act::Run]),
        &config(AT_MOST_ONCE),
        &event("fd-charge_card.json"),
    )
    .await;
    task.abort(); // the invocation is killed: nothing settles the claim
    let key = {
        let retry = send(&h, &event("fd-charge_card-retry.json")).await;
        assert_eq!(retry.outcome, Outcome::InProgress, "the lease still runs");
        retry.key.unwrap()
    };
    assert!(matches!(
        settle(h.store(), &key, Action::Release, DAY).await,
        Err(SettleError::Running { .. })
    ));
    let record = h.store().get(&key).await.unwrap().unwrap();
    clock.set_ms(record.lease_until_ms + 1);
    assert_outcome_unknown(&send(&h, &event("fd-charge_card-retry.json")).await, &key);
    assert_eq!(h.dispatcher().invokes(), 1);
    // Within the clock margin after the lease ended, the operator is still refused (issue 51: a
    // clock running ahead must not release a claim whose owner may still run).
    assert!(matches!(
        settle(h.store(), &key, Action::Release, DAY).await,
        Err(SettleError::Running { .. })
    ));
    clock.set_ms(record.lease_until_ms + toolcall_dedup::store::SETTLE_MARGIN_MS + 1);

    let done = settle(h.store(), &key, Action::Release, DAY).await.unwrap();
    assert!(done.before.at_most_once && done.before.status == Status::InProgress);
    let rerun = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(rerun.outcome, Outcome::Executed);
    assert_eq!(h.dispatcher().invokes(), 2);
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::Replayed
    );
}

/// Without the policy, the same crash keeps the claim until its lease ends, then runs again.
async fn at_least_once_is_unchanged<S: Store>(store: S, clock: ManualClock) {
    let h = handler(
        store,
        Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout"), Act::Run]),
        &config(
            r#"{"tools": {"charge_card": {"destructive": true, "delivery": "at_least_once"}}}"#,
        ),
    );
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    let record = stored(&h, &crashed).await.unwrap();
    assert_eq!(record.status, Status::InProgress);
    assert!(!record.at_most_once);
    clock.set_ms(record.lease_until_ms + 1);
    assert_eq!(
        send(&h, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Executed
    );
}

macro_rules! on_memory_and_moto {
    ($($name:ident => |$store:ident, $clock:ident| $body:expr;)*) => {
        $(
            mod $name {
                use super::*;
                #[tokio::test]
                async fn on_memory() {
                    let $clock = ManualClock::starting_now();
                    let $store = servers::memory_store($clock.clone());
                    $body.await;
                }
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test]
                async fn on_moto() {
                    let $clock = ManualClock::starting_now();
                    let $store = servers::dynamodb_store(Backend::Moto, $clock.clone()).await;
                    $body.await;
                }
            }
        )*
    };
}

on_memory_and_moto! {
    destructive_crash_then_operator_completes =>
        |store, clock| crash_then_operator_completes(store, clock, DESTRUCTIVE);
    at_most_once_crash_then_operator_completes =>
        |store, clock| crash_then_operator_completes(store, clock, AT_MOST_ONCE);
    killed_owner_then_operator_releases =>
        |store, clock| killed_owner_then_operator_releases(store, clock);
    at_least_once_is_unchanged =>
        |store, clock| at_least_once_is_unchanged(store, clock);
}
