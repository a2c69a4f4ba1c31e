//! The library guard (`Dedup::run`) on the memory store and on moto: the same claim, complete,
//! release and wait semantics as the Lambda handler, because it runs the same executor, and the
//! guard's own contract (errors keep the claim, a long side effect renews its lease, a dropped
//! future still stores its result), each on a manual clock.

use crate::servers;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use servers::{Backend, Faulty};
use toolcall_dedup::guard::{Dedup, DedupBuilder, GuardError, GuardSettingsError};
use toolcall_dedup::key::{Call, CallerKeyError, Keyer};
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
        ..Call::default()
    }
}

/// A side effect that counts its runs and returns the run number.
async fn charge(runs: &AtomicU32, pause: Duration) -> Result<u32, std::io::Error> {
    tokio::time::sleep(pause).await;
    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

async fn a_retry_runs_once_and_the_next_step_runs_again<S: Store>(
    guard: DedupBuilder<S>,
    clock: ManualClock,
) {
    let dedup = guard.build().unwrap();
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
    // A replay says when the call first ran (issue 51); a fresh run has nothing to say.
    assert_eq!(first.first_ran_ms, None);
    let first_ran = retry
        .first_ran_ms
        .expect("a replay says when the call first ran");
    assert!(
        (first_ran - toolcall_dedup::store::Clock::now_ms(&clock)).abs() < 60_000,
        "{first_ran}"
    );
    assert_eq!((next.outcome, next.value), (Outcome::Executed, 2));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A caller's own idempotency key is the call: a repeat under it replays whatever its run and
/// step say, the same key with other arguments is refused naming what differs (nothing runs),
/// and another key, or no key, is another call.
async fn a_callers_key_replays_its_call_and_refuses_other_arguments<S: Store>(
    guard: DedupBuilder<S>,
    _clock: ManualClock,
) {
    let dedup = guard.build().unwrap();
    let runs = AtomicU32::new(0);
    let first = dedup
        .run_keyed(&call(ORIGINAL, "7"), "order-1001", || {
            charge(&runs, Duration::ZERO)
        })
        .await
        .unwrap();
    let retry = dedup
        .run_keyed(&call(RETRY, "8"), "order-1001", || {
            charge(&runs, Duration::ZERO)
        })
        .await
        .unwrap();
    assert_eq!((first.outcome, first.value), (Outcome::Executed, 1));
    assert_eq!((retry.outcome, retry.value), (Outcome::Replayed, 1));
    assert_eq!(retry.key, first.key);

    let other = r#"{"customer_id": "cus_4f9a2c", "amount": 4300, "currency": "EUR"}"#;
    let reused = dedup
        .run_keyed(&call(other, "7"), "order-1001", || {
            charge(&runs, Duration::ZERO)
        })
        .await;
    match reused {
        Err(error @ GuardError::KeyReused { .. }) => {
            let GuardError::KeyReused { paths } = &error else {
                unreachable!()
            };
            assert_eq!(
                paths.as_deref(),
                Some(&["/amount".to_string(), "/currency".to_string()][..])
            );
            assert!(
                error.to_string().ends_with(": /amount, /currency"),
                "{error}"
            );
        }
        other => panic!("expected KeyReused, got {other:?}"),
    }

    let another_key = dedup
        .run_keyed(&call(ORIGINAL, "7"), "order-1002", || {
            charge(&runs, Duration::ZERO)
        })
        .await
        .unwrap();
    let by_arguments = dedup
        .run(&call(ORIGINAL, "7"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        (another_key.value, by_arguments.value),
        (2, 3),
        "another key, or none, is another call"
    );

    let blank = dedup
        .run_keyed(&call(ORIGINAL, "7"), "  ", || charge(&runs, Duration::ZERO))
        .await;
    assert!(
        matches!(blank, Err(GuardError::CallerKey(CallerKeyError::Empty))),
        "{blank:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// The guard's default lease (60 s), with its margin (5 s).
const LEASE: Duration = Duration::from_secs(65);

async fn an_error_keeps_the_claim_until_its_lease_ends<S: Store>(
    guard: DedupBuilder<S>,
    clock: ManualClock,
) {
    let dedup = guard.wait(Duration::ZERO).build().unwrap();
    let runs = AtomicU32::new(0);
    let failed = dedup
        .run(&call(ORIGINAL, "1"), || async {
            // The card was charged, then the receipt write failed: an error after the effect.
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(std::io::Error::other("receipt table rejected the write"))
        })
        .await;
    assert!(
        matches!(
            failed,
            Err(GuardError::SideEffect {
                released: false,
                ..
            })
        ),
        "{failed:?}"
    );
    let retried = dedup
        .run(&call(RETRY, "1"), || charge(&runs, Duration::ZERO))
        .await;
    assert!(
        matches!(retried, Err(GuardError::InProgress { .. })),
        "within the lease a retry must not run again: {retried:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    clock.advance(LEASE + Duration::from_secs(1));
    let after_lease = dedup
        .run(&call(RETRY, "1"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(after_lease.outcome, Outcome::Executed);
}

async fn an_error_that_says_nothing_ran_releases_the_claim<S: Store>(
    guard: DedupBuilder<S>,
    _clock: ManualClock,
) {
    let dedup = guard.build().unwrap();
    let failed = dedup
        .run_with(
            &call(ORIGINAL, "2"),
            |e: &std::io::Error| e.kind() == std::io::ErrorKind::InvalidInput,
            || async {
                Err::<u32, _>(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "amount must be positive",
                ))
            },
        )
        .await;
    assert!(
        matches!(failed, Err(GuardError::SideEffect { released: true, .. })),
        "{failed:?}"
    );
    let runs = AtomicU32::new(0);
    let retried = dedup
        .run(&call(RETRY, "2"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(retried.outcome, Outcome::Executed, "nothing was stored");
}

async fn a_value_that_cannot_be_stored_keeps_the_claim<S: Store>(
    guard: DedupBuilder<S>,
    clock: ManualClock,
) {
    let dedup = guard.wait(Duration::ZERO).build().unwrap();
    let runs = AtomicU32::new(0);
    // JSON object keys are strings: a map keyed by pairs does not serialize.
    let unstorable = dedup
        .run(&call(ORIGINAL, "5"), || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(BTreeMap::from([((1u8, 2u8), 3u8)]))
        })
        .await;
    assert!(
        matches!(unstorable, Err(GuardError::Unstorable(_))),
        "{unstorable:?}"
    );
    let retried = dedup
        .run(&call(RETRY, "5"), || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(BTreeMap::<String, u8>::new())
        })
        .await;
    assert!(
        matches!(retried, Err(GuardError::InProgress { .. })),
        "{retried:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the side effect ran once");
    clock.advance(LEASE + Duration::from_secs(1));
    assert!(
        dedup
            .run(&call(RETRY, "5"), || charge(&runs, Duration::ZERO))
            .await
            .is_ok()
    );
}

async fn a_side_effect_longer_than_its_lease_keeps_its_key<S: Store>(
    guard: DedupBuilder<S>,
    clock: ManualClock,
) {
    // A 300 ms lease without margin, renewed every 100 ms; the side effect runs 1.5 s of
    // (manual) time, five leases.
    let dedup = guard
        .lease(Duration::from_millis(300))
        .lease_margin(Duration::ZERO)
        .store_reserve(Duration::ZERO)
        .wait(Duration::ZERO)
        .build()
        .unwrap();
    let runs = AtomicU32::new(0);
    let started = tokio::time::Instant::now();
    let long = async {
        dedup
            .run(&call(ORIGINAL, "6"), || async {
                runs.fetch_add(1, Ordering::SeqCst);
                for _ in 0..15 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    clock.advance_ms(100);
                }
                Ok::<_, std::io::Error>(1u32)
            })
            .await
    };
    // Retries after two leases and after four: each finds the key held only if the lease was
    // renewed at least once a lease (a renewal every third would do; every three leases would not).
    let retries = async {
        let mut answers = Vec::new();
        for at_ms in [650, 1250] {
            tokio::time::sleep_until(started + Duration::from_millis(at_ms)).await;
            let retry = dedup
                .run(&call(RETRY, "6"), || charge(&runs, Duration::ZERO))
                .await;
            answers.push((at_ms, retry));
        }
        answers
    };
    let (long, retries) = tokio::join!(long, retries);
    assert_eq!(long.unwrap().outcome, Outcome::Executed);
    for (at_ms, retry) in retries {
        assert!(
            matches!(retry, Err(GuardError::InProgress { .. })),
            "a retry at {at_ms} ms took the key over from a side effect still running: {retry:?}"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn a_dropped_future_still_stores_its_result<S: Store>(
    guard: DedupBuilder<S>,
    clock: ManualClock,
) {
    let dedup = guard.build().unwrap();
    let runs = AtomicU32::new(0);
    // Completion is held for 300 ms: the caller gives up after 100 ms, after the side effect.
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        dedup.run(&call(ORIGINAL, "7"), || charge(&runs, Duration::ZERO)),
    )
    .await;
    assert!(dropped.is_err(), "the caller gave up during the completion");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Even after the lease, the stored result answers: nothing runs again.
    clock.advance(LEASE + Duration::from_secs(1));
    let retried = dedup
        .run(&call(RETRY, "7"), || charge(&runs, Duration::ZERO))
        .await
        .unwrap();
    assert_eq!((retried.outcome, retried.value), (Outcome::Replayed, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

async fn a_concurrent_retry_waits_for_the_original<S: Store>(
    guard: DedupBuilder<S>,
    _clock: ManualClock,
) {
    let dedup = guard.build().unwrap();
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

async fn a_repeat_that_cannot_wait_long_enough_is_in_progress<S: Store>(
    guard: DedupBuilder<S>,
    _clock: ManualClock,
) {
    let dedup = guard.wait(Duration::from_millis(100)).build().unwrap();
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

/// Each case on the memory store and on moto, both on a manual clock, behind a completion that
/// takes 300 ms (only `a_dropped_future_still_stores_its_result` gives up before it ends).
macro_rules! on_backends {
    ($($name:ident),+ $(,)?) => {
        mod memory {
            use super::*;
            $(#[tokio::test] async fn $name() {
                let clock = ManualClock::starting_now();
                let mut store = Faulty::new(servers::memory_store(clock.clone()));
                store.complete_delay = SLOW;
                super::$name(Dedup::builder(store, Keyer::new()), clock).await
            })+
        }
        mod moto {
            use super::*;
            $(#[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
            #[tokio::test] async fn $name() {
                let clock = ManualClock::starting_now();
                let inner = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
                let mut store = Faulty::new(inner);
                store.complete_delay = SLOW;
                super::$name(Dedup::builder(store, Keyer::new()), clock).await
            })+
        }
    };
}

const SLOW: Duration = Duration::from_millis(300);

on_backends!(
    a_retry_runs_once_and_the_next_step_runs_again,
    a_callers_key_replays_its_call_and_refuses_other_arguments,
    an_error_keeps_the_claim_until_its_lease_ends,
    an_error_that_says_nothing_ran_releases_the_claim,
    a_value_that_cannot_be_stored_keeps_the_claim,
    a_side_effect_longer_than_its_lease_keeps_its_key,
    a_dropped_future_still_stores_its_result,
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
    let dedup = Dedup::new(
        servers::memory_store(ManualClock::starting_now()),
        Keyer::new(),
    );
    let runs = AtomicU32::new(0);
    let result = dedup
        .run(&call("[1, 2]", "1"), || charge(&runs, Duration::ZERO))
        .await;
    assert!(matches!(result, Err(GuardError::Key(_))), "{result:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A lease no longer than what each call keeps back to store its result could never run a side
/// effect: the builder refuses it, instead of a guard that answers every call `NoTime`.
#[test]
fn a_lease_too_short_for_the_store_reserve_is_refused_at_build_time() {
    let builder = || Dedup::builder(MemoryStore::new(), Keyer::new());
    let refused = builder().lease(Duration::from_secs(2)).build();
    assert!(
        matches!(refused, Err(GuardSettingsError::LeaseTooShort { .. })),
        "{:?}",
        refused.err()
    );
    assert!(
        builder()
            .lease(Duration::from_millis(500))
            .store_reserve(Duration::from_millis(500))
            .build()
            .is_err()
    );
    assert!(
        builder()
            .lease(Duration::from_millis(501))
            .store_reserve(Duration::from_millis(500))
            .build()
            .is_ok()
    );
}
