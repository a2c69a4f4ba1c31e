//! The library guard (`Dedup::run`) on the memory store and on moto: the same claim, complete,
//! release and wait semantics as the Lambda handler, because it runs the same executor.

#[path = "common/servers.rs"]
mod servers;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use servers::Backend;
use toolcall_dedup::guard::{Dedup, GuardError};
use toolcall_dedup::key::{Call, Keyer};
use toolcall_dedup::store::{
    DynamoDbConfig, DynamoDbStore, ManualClock, MemoryStore, RetryPolicy, Store,
};
use toolcall_dedup::telemetry::Outcome;

const ORIGINAL: &str = r#"{"customer_id": "cus_4f9a2c", "amount": 4200, "currency": "USD"}"#;
const RETRY: &str = r#"{"currency": "usd", "customer_id": "cus_4f9a2c", "amount": 4200.0}"#;

fn call<'a>(args: &'a str, step: &'a str) -> Call<'a> {
    Call {
        tool: "charge_card",
        args,
        namespace: Some("payments"),
        run_id: Some("run-42"),
        step: Some(step),
        schema: None,
    }
}

/// A side effect that counts its runs and returns the run number.
async fn charge(runs: &AtomicU32, pause: Duration) -> Result<u32, std::io::Error> {
    tokio::time::sleep(pause).await;
    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn a_retry_runs_once_and_the_next_step_runs_again<S: Store>(dedup: Dedup<S>) {
    let runs = AtomicU32::new(0);
    let first = dedup
        .run(&call(ORIGINAL, "7"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    let retry = dedup
        .run(&call(RETRY, "7"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    let next = dedup
        .run(&call(ORIGINAL, "8"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!((first.outcome, first.value), (Outcome::Executed, 1));
    assert_eq!((retry.outcome, retry.value), (Outcome::Replayed, 1));
    assert_eq!(retry.key, first.key);
    assert_eq!((next.outcome, next.value), (Outcome::Executed, 2));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

async fn a_failed_side_effect_releases_the_key<S: Store>(dedup: Dedup<S>) {
    let failed = dedup
        .run(&call(ORIGINAL, "1"), || async {
            Err::<u32, _>(std::io::Error::other("card network down"))
        })
        .await;
    assert!(
        matches!(failed, Err(GuardError::SideEffect(_))),
        "{failed:?}"
    );
    let runs = AtomicU32::new(0);
    let retried = dedup
        .run(&call(RETRY, "1"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        retried.outcome,
        Outcome::Executed,
        "the failure stored nothing"
    );
}

async fn a_concurrent_retry_waits_for_the_original<S: Store>(dedup: Dedup<S>) {
    let runs = AtomicU32::new(0);
    let (original, retry) = (call(ORIGINAL, "3"), call(RETRY, "3"));
    let (a, b) = tokio::join!(
        dedup.run(&original, || charge(&runs, Duration::from_millis(300))),
        dedup.run(&retry, || charge(&runs, Duration::from_millis(300))),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!((a.value, b.value), (1, 1));
    let mut outcomes = [a.outcome, b.outcome];
    outcomes.sort_by_key(|o| o.name());
    assert_eq!(outcomes, [Outcome::Executed, Outcome::Waited]);
}

async fn a_repeat_that_cannot_wait_long_enough_is_in_progress<S: Store>(dedup: Dedup<S>) {
    let dedup = dedup.with_settings(|s| s.wait = Duration::from_millis(100));
    let runs = AtomicU32::new(0);
    let (original, retry) = (call(ORIGINAL, "4"), call(RETRY, "4"));
    let (a, b) = tokio::join!(
        dedup.run(&original, || charge(&runs, Duration::from_millis(800))),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            dedup.run(&retry, || charge(&runs, Duration::ZERO)).await
        },
    );
    assert_eq!(a.unwrap().value, 1);
    assert!(
        matches!(b, Err(GuardError::InProgress { retry_after_ms: Some(ms) }) if ms > 0),
        "{b:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the repeat did not run");
}

macro_rules! on_backends {
    ($($name:ident),+ $(,)?) => {
        mod memory {
            use super::*;
            $(#[tokio::test] async fn $name() {
                super::$name(Dedup::new(MemoryStore::new(), Keyer::new())).await
            })+
        }
        mod moto {
            use super::*;
            $(#[tokio::test] async fn $name() {
                let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
                super::$name(Dedup::new(store, Keyer::new())).await
            })+
        }
    };
}

on_backends!(
    a_retry_runs_once_and_the_next_step_runs_again,
    a_failed_side_effect_releases_the_key,
    a_concurrent_retry_waits_for_the_original,
    a_repeat_that_cannot_wait_long_enough_is_in_progress,
);

#[tokio::test]
async fn an_unreachable_store_runs_nothing() {
    // A port nothing listens on: every request is refused until the retry deadline.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let cfg = DynamoDbConfig {
        retry: RetryPolicy {
            deadline: Duration::from_millis(300),
            ..RetryPolicy::default()
        },
        ..DynamoDbConfig::new("nowhere")
    };
    let store = DynamoDbStore::new(&servers::client(&url, Vec::new()), cfg).unwrap();
    let dedup = Dedup::new(store, Keyer::new());
    let runs = AtomicU32::new(0);
    let result = dedup
        .run(&call(ORIGINAL, "5"), || charge(&runs, Duration::ZERO))
        .await;
    assert!(matches!(result, Err(GuardError::Store(_))), "{result:?}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "fail closed: the side effect did not run"
    );
}

#[tokio::test]
async fn arguments_that_cannot_be_keyed_run_nothing() {
    let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
    let runs = AtomicU32::new(0);
    let result = dedup
        .run(&call("[1, 2]", "1"), || charge(&runs, Duration::ZERO))
        .await;
    assert!(matches!(result, Err(GuardError::Key(_))), "{result:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
