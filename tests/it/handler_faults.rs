//! The handler under faults: tool errors, hangs and timeouts, a store that stops, a killed or late
//! handler, the warm cache, and the paths that could run a side effect twice (issue 11), on the
//! memory store and on moto.
//!
//! Store-server tests need `scripts/dynamodb-servers.sh` (see `tests/it/servers.rs`); they
//! fail, saying how to start them, when the servers are not running.

use crate::fixture;
use crate::servers;

use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fixture::*;
use serde_json::Value;
use servers::Backend;
use tokio::sync::Notify;
use toolcall_dedup::config::{Config, ErrorTypes, Mode};
use toolcall_dedup::store::{
    DynamoDbConfig, DynamoDbStore, ManualClock, MemoryStore, RequestCounts, RetryPolicy, Status,
    Store,
};
use toolcall_dedup::telemetry::Outcome;

// ---------------------------------------------------------------------------------------------
// faults

/// Lambda's `FunctionError` types for an invocation that was cut off or crashed after it may have
/// done its side effect, and a tool's own unclassified raise.
const CRASH_KINDS: [&str; 5] = [
    "Sandbox.Timedout",
    "Runtime.ExitError",
    "Runtime.OutOfMemory",
    "Unhandled",
    "CardNetworkError",
];

#[tokio::test]
async fn a_tool_that_crashes_after_its_side_effect_keeps_the_claim_until_its_lease_ends() {
    // The store's clock is frozen, so the retry can only wait and then answer "in progress": a
    // short wait asks the same question as the default one without sleeping it out five times.
    let config = Config {
        wait: Duration::from_millis(50),
        ..Config::default()
    };
    for kind in CRASH_KINDS {
        let clock = ManualClock::starting_now();
        let h = handler(
            MemoryStore::new().with_clock(clock.clone()),
            Scripted::new(vec![Act::RunThenFail(kind), Act::Run]),
            &config,
        );
        let ev = event("fd-charge_card.json");
        let crashed = send(&h, &ev).await;
        let message = tool_error_message(&crashed);
        assert!(
            message.contains(kind) && message.contains("unknown"),
            "{kind}: {message}"
        );
        let record = stored(&h, &crashed).await.expect("claim kept");
        assert_eq!(record.status, Status::InProgress, "{kind}");
        assert_eq!(
            send(&h, &event("fd-charge_card-retry.json")).await.outcome,
            Outcome::InProgress,
            "{kind}: an immediate retry must not charge again"
        );
        assert_eq!(charges(&h.dispatcher().demo), 1, "{kind}");
        // Once the lease has ended, the key can be claimed again.
        clock.set_ms(record.lease_until_ms + 1);
        assert_eq!(send(&h, &ev).await.outcome, Outcome::Executed, "{kind}");
        assert_eq!(h.dispatcher().invokes(), 2, "{kind}");
    }
}

#[tokio::test]
async fn a_tool_error_that_says_nothing_ran_releases_the_claim_and_succeeds_on_retry() {
    let custom = Config {
        release_on_errors: ErrorTypes::parse("CardDetailsRejected").unwrap(),
        ..Config::default()
    };
    for (kind, config) in [
        ("DedupNothingRan", Config::default()),
        ("com.example.payments.DedupNothingRan", Config::default()),
        ("CardDetailsRejected", custom),
    ] {
        let h = handler(
            MemoryStore::new(),
            Scripted::new(vec![Act::Fail(kind), Act::Run]),
            &config,
        );
        let ev = event("fd-charge_card.json");
        let failed = send(&h, &ev).await;
        let message = tool_error_message(&failed);
        assert!(
            message.contains("raised an error") && message.contains("You may retry"),
            "{kind}: {message}"
        );
        assert!(
            stored(&h, &failed).await.is_none(),
            "{kind}: claim released"
        );
        let retried = send(&h, &ev).await;
        assert_eq!(retried.outcome, Outcome::Executed, "{kind}");
        assert_eq!(send(&h, &ev).await.outcome, Outcome::Replayed, "{kind}");
        assert_eq!(charges(&h.dispatcher().demo), 1, "{kind}");
        assert_eq!(h.dispatcher().invokes(), 2, "{kind}");
    }
    // The default list is not a catch-all: a crash type keeps the claim under it.
    let h = handler(
        MemoryStore::new(),
        Scripted::new(vec![Act::Fail("Sandbox.Timedout")]),
        &Config::default(),
    );
    let ev = event("fd-charge_card.json");
    send(&h, &ev).await;
    assert_eq!(send(&h, &ev).await.outcome, Outcome::InProgress);
}

#[tokio::test]
async fn a_validation_error_raised_after_the_side_effect_keeps_the_claim_by_default() {
    // A Node tool charges the card, then its DynamoDB write is rejected (`ValidationException`
    // from AWS SDK v3); a Python tool's pydantic model fails after the call (`ValidationError`).
    for kind in [
        "ValidationException",
        "ValidationError",
        "InvalidInput",
        "BadRequest",
    ] {
        let clock = ManualClock::starting_now();
        let h = handler(
            MemoryStore::new().with_clock(clock.clone()),
            Scripted::new(vec![Act::RunThenFail(kind), Act::Run]),
            &Config::default(),
        )
        .with_settings(|s| s.wait = Duration::ZERO);
        let ev = event("fd-charge_card.json");
        let failed = send(&h, &ev).await;
        assert_eq!(failed.outcome, Outcome::ToolError, "{kind}");
        assert!(
            body(&failed)["message"]
                .as_str()
                .unwrap()
                .contains("unknown"),
            "{kind}"
        );
        let retried = send(&h, &event("fd-charge_card-retry.json")).await;
        assert_eq!(
            retried.outcome,
            Outcome::InProgress,
            "{kind}: the card must not be charged again"
        );
        assert_eq!(charges(&h.dispatcher().demo), 1, "{kind}");
        assert_eq!(h.dispatcher().invokes(), 1, "{kind}");
    }
}

#[tokio::test]
async fn a_malformed_tool_reply_keeps_the_claim_because_the_tool_ran() {
    let h = handler(
        MemoryStore::new(),
        Scripted::new(vec![Act::Malformed]),
        &Config {
            wait: Duration::from_millis(100),
            ..Config::default()
        },
    );
    let ev = event("openapi-charge_card.json");
    let r = send(&h, &ev).await;
    // An OpenAPI answer says it by its status, with no responseState.
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, None)
    );
    assert_eq!(response(&r)["response"]["httpStatusCode"], 502);
    assert!(tool_error_message(&r).contains("ran but answered with a malformed response"));
    // The tool ran: a retry within the lease is not run again.
    let retry = send(&h, &ev).await;
    assert_eq!(retry.outcome, Outcome::InProgress);
    assert_eq!(h.dispatcher().invokes(), 1);
}

#[tokio::test]
async fn a_tool_that_hangs_past_the_wait_bound_gets_an_in_progress_reprompt_then_the_result() {
    let gate = Arc::new(Notify::new());
    let config = Config {
        wait: Duration::from_millis(200),
        ..Config::default()
    };
    let ev = event("fd-charge_card.json");
    let (h, first) = hung_in_tool(
        MemoryStore::new(),
        Scripted::new(vec![Act::HangBefore(gate.clone())]),
        &config,
        &ev,
    )
    .await;

    let started = tokio::time::Instant::now();
    let waiting = send(&h, &event("fd-charge_card-retry.json")).await;
    let waited = started.elapsed();
    assert_eq!(
        (waiting.outcome, state(&waiting).as_deref()),
        (Outcome::InProgress, Some("REPROMPT"))
    );
    assert!(
        waited >= Duration::from_millis(190) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    let b = body(&waiting);
    assert_eq!(b["status"], "in_progress");
    assert!(b["message"].as_str().unwrap().contains("still running"));
    assert!(b["retry_after_ms"].as_i64().unwrap() > 0);

    // A caller still waiting when the tool finishes gets the result as `waited`.
    let patient = Arc::new(handler(h.store().clone(), demo(), &Config::default()));
    let third = spawn_send(&patient, &ev);
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.notify_one();
    let first = first.await.unwrap();
    let third = third.await.unwrap();
    assert_eq!(
        (first.outcome, third.outcome),
        (Outcome::Executed, Outcome::Waited)
    );
    assert_eq!(first.response.unwrap().get(), third.response.unwrap().get());
    assert_eq!(send(&h, &ev).await.outcome, Outcome::Replayed);
    assert_eq!(h.dispatcher().invokes(), 1);
    assert_eq!(
        ledger(patient.dispatcher()).len(),
        0,
        "the waiter never ran its own tool"
    );
}

#[tokio::test]
async fn a_tool_timeout_keeps_the_claim_because_the_outcome_is_unknown() {
    let h = handler(
        MemoryStore::new(),
        Scripted::new(vec![Act::Stall]),
        &Config::default(),
    )
    .with_settings(|s| {
        s.default_budget = Duration::from_millis(1800);
        s.completion_reserve = Duration::from_millis(1300);
        s.wait = Duration::from_millis(50);
    });
    let ev = event("fd-charge_card.json");
    let r = send(&h, &ev).await;
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    assert!(body(&r)["message"].as_str().unwrap().contains("unknown"));
    let record = stored(&h, &r).await.expect("claim kept");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(
        send(&h, &ev).await.outcome,
        Outcome::InProgress,
        "no second execution during the lease"
    );
    assert_eq!(h.dispatcher().invokes(), 1);
}

#[tokio::test]
async fn a_store_that_stops_mid_run_fails_closed_without_calling_the_tool() {
    let store = servers::Faulty::new(MemoryStore::new());
    let down = store.down.clone();
    let h = handler(store, Scripted::new(vec![]), &Config::default());
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::Executed
    );
    down.store(true, Ordering::SeqCst);
    for name in [
        "fd-charge_card-retry.json",
        "fd-refund.json",
        "openapi-create_ticket.json",
    ] {
        let r = send(&h, &event(name)).await;
        let openapi = name.starts_with("openapi");
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::StoreError, (!openapi).then_some("REPROMPT")),
            "{name}"
        );
        if openapi {
            assert_eq!(response(&r)["response"]["httpStatusCode"], 503, "{name}");
        }
        assert!(
            body(&r)["message"]
                .as_str()
                .unwrap()
                .contains("NOT executed"),
            "{name}"
        );
    }
    assert_eq!(
        h.dispatcher().invokes(),
        1,
        "no tool call while the store is down"
    );
    down.store(false, Ordering::SeqCst);
    assert_eq!(
        send(&h, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Replayed
    );
}

/// A TCP proxy in front of a DynamoDB server that the test can stop: a real outage for the real
/// DynamoDB store (connections refused and cut, not a mocked error).
struct Proxy {
    url: String,
    task: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        return;
                    };
                    let upstream = upstream.clone();
                    let conn = tokio::spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    connections.lock().unwrap().push(conn);
                }
            }
        });
        Proxy {
            url,
            task,
            connections,
        }
    }

    fn stop(&self) {
        self.task.abort();
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn the_dynamodb_store_stopping_mid_run_means_no_tool_call() {
    let proxy = Proxy::start(&Backend::Moto.endpoint()).await;
    let client = servers::client(&proxy.url, Vec::new());
    let cfg = DynamoDbConfig {
        retry: RetryPolicy {
            // Generous per attempt (a loaded single-threaded moto), short overall: after the
            // outage every attempt is refused at once and retried until this deadline.
            deadline: Duration::from_millis(1500),
            attempt_timeout: Duration::from_millis(1000),
            ..RetryPolicy::default()
        },
        ..servers::config()
    };
    servers::create_table(&client, &cfg, Backend::Moto).await;
    let store = DynamoDbStore::new(&client, cfg).unwrap();
    let h = handler(store, Scripted::new(vec![]), &Config::default());
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&h, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Replayed
    );
    proxy.stop();
    tokio::time::sleep(Duration::from_millis(50)).await;
    for name in ["fd-charge_card-step3.json"] {
        let r = send(&h, &event(name)).await;
        let openapi = name.starts_with("openapi");
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::StoreError, (!openapi).then_some("REPROMPT")),
            "{name}"
        );
        if openapi {
            assert_eq!(response(&r)["response"]["httpStatusCode"], 503, "{name}");
        }
    }
    assert_eq!(
        h.dispatcher().invokes(),
        1,
        "the tool ran only for the first call"
    );
}

#[tokio::test]
async fn a_killed_handlers_lease_is_taken_over_once_it_ends() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let gate = Arc::new(Notify::new());
    let config = Config {
        wait: Duration::from_millis(50),
        ..Config::default()
    };
    let ev = event("fd-charge_card.json");
    let (killed, task) = hung_in_tool(
        store.clone(),
        Scripted::new(vec![Act::HangBefore(gate)]),
        &config,
        &ev,
    )
    .await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());

    let next = handler(store.clone(), demo(), &config);
    assert_eq!(
        send(&next, &ev).await.outcome,
        Outcome::InProgress,
        "the lease still holds"
    );
    let lease = killed.settings().default_budget + killed.settings().lease_margin;
    clock.advance(lease + Duration::from_secs(1));
    let taken_over = send(&next, &ev).await;
    assert_eq!(taken_over.outcome, Outcome::Executed);
    assert_eq!(send(&next, &ev).await.outcome, Outcome::Replayed);
    assert_eq!(charges(next.dispatcher()), 1);
    assert_eq!(charges(&killed.dispatcher().demo), 0);
}

#[tokio::test]
async fn a_late_handler_cannot_overwrite_the_record_of_the_one_that_took_over() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let gate = Arc::new(Notify::new());
    let late = Arc::new(handler(
        store.clone(),
        Scripted::new(vec![Act::HangAfter(gate.clone())]),
        &Config::default(),
    ));
    let ev = event("fd-charge_card.json");
    let task = spawn_send(&late, &ev);
    wait_for("the slow call's side effect", || {
        charges(&late.dispatcher().demo) == 1
    })
    .await;
    clock.advance(
        late.settings().default_budget + late.settings().lease_margin + Duration::from_secs(1),
    );
    let winner = handler(store.clone(), demo(), &Config::default());
    let taken_over = send(&winner, &ev).await;
    assert_eq!(taken_over.outcome, Outcome::Executed);
    gate.notify_one();
    let late_result = task.await.unwrap();
    assert_eq!(
        late_result.outcome,
        Outcome::Executed,
        "the late call still answers with its own result"
    );
    let stored = store
        .get(taken_over.key.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        answered_from_stored(&ev, stored.result.as_deref().unwrap()),
        taken_over.response.as_ref().unwrap().get(),
        "the record holds the winner's reply"
    );
    // Both executions carried the same dedup_key: a tool that passes it to its payment provider
    // as the idempotency key charges once even here.
    let keys: Vec<Value> = [ledger(&late.dispatcher().demo), ledger(winner.dispatcher())]
        .concat()
        .into_iter()
        .map(|e| e["dedup_key"].clone())
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test]
async fn the_warm_container_cache_replays_without_a_store_request() {
    let config = Config {
        local_cache_items: 2,
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), demo(), &config);
    let ev = event("fd-charge_card.json");
    let first = send(&h, &ev).await;
    let before = h.store().requests().total();
    let cached = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(cached.outcome, Outcome::Replayed);
    assert_eq!(
        h.store().requests().total(),
        before,
        "served from the cache"
    );
    assert_eq!(
        first.response.unwrap().get(),
        cached.response.unwrap().get()
    );
    for name in [
        "fd-refund.json",
        "fd-create_ticket.json",
        "openapi-refund.json",
    ] {
        send(&h, &event(name)).await;
    }
    assert_eq!(
        send(&h, &ev).await.outcome,
        Outcome::Replayed,
        "evicted, then replayed from the store"
    );
}

// ---------------------------------------------------------------------------------------------
// paths that could run a side effect twice (issue 11), on the memory store and on moto

async fn a_ttl_shorter_than_the_lease_cannot_free_a_running_call<S: Store + Clone + 'static>(
    store: S,
    clock: ManualClock,
    _backend: Backend,
) {
    let gate = Arc::new(Notify::new());
    let config = Config {
        ttl: Duration::from_secs(1),
        wait: Duration::from_millis(50),
        ..Config::default()
    };
    let ev = event("fd-charge_card.json");
    let (_first, task) = hung_in_tool(
        store.clone(),
        Scripted::new(vec![Act::HangBefore(gate.clone())]),
        &config,
        &ev,
    )
    .await;
    // Past the record's 1 s life, well inside the lease.
    clock.advance(Duration::from_secs(10));
    let second = handler(store.clone(), demo(), &config);
    assert_eq!(
        send(&second, &event("fd-charge_card-retry.json"))
            .await
            .outcome,
        Outcome::InProgress
    );
    gate.notify_one();
    assert_eq!(task.await.unwrap().outcome, Outcome::Executed);
    assert_eq!(charges(second.dispatcher()), 0, "charged twice");
    assert_eq!(
        send(&second, &ev).await.outcome,
        Outcome::Replayed,
        "the first call's result was stored"
    );
}

async fn a_completed_call_replays_for_its_ttl_counted_from_completion<
    S: Store + Clone + 'static,
>(
    store: S,
    clock: ManualClock,
    _backend: Backend,
) {
    let gate = Arc::new(Notify::new());
    let config = Config {
        ttl: Duration::from_secs(1000),
        ..Config::default()
    };
    let h = Arc::new(handler(
        store,
        Scripted::new(vec![Act::HangAfter(gate.clone())]),
        &config,
    ));
    let ev = event("fd-charge_card.json");
    let task = spawn_send(&h, &ev);
    wait_for("the side effect", || charges(&h.dispatcher().demo) == 1).await;
    clock.advance(Duration::from_secs(900)); // a slow tool
    gate.notify_one();
    assert_eq!(task.await.unwrap().outcome, Outcome::Executed);
    clock.advance(Duration::from_secs(200)); // 1100 s after the claim, 200 s after completion
    assert_eq!(send(&h, &ev).await.outcome, Outcome::Replayed);
    clock.advance(Duration::from_secs(801));
    assert_eq!(
        send(&h, &ev).await.outcome,
        Outcome::Executed,
        "expired {} s after completion",
        1000
    );
}

async fn the_lease_covers_a_tool_that_outlives_this_invocation<S: Store + Clone + 'static>(
    store: S,
    clock: ManualClock,
    _backend: Backend,
) {
    let gate = Arc::new(Notify::new());
    let config = Config {
        wait: Duration::from_millis(50),
        ..Config::default()
    };
    let tool_timeout = Duration::from_secs(600);
    let ev = event("fd-charge_card.json");
    let (first, task) = hung_in_tool(
        store.clone(),
        Scripted::new(vec![Act::HangBefore(gate)]).with_max_run_time(tool_timeout),
        &config,
        &ev,
    )
    .await;
    let margin = first.settings().lease_margin;
    // This invocation's own budget and margin are over; the tool's timeout is not.
    clock.advance(first.settings().default_budget + margin + Duration::from_secs(1));
    let next = handler(store.clone(), demo(), &config);
    assert_eq!(
        send(&next, &ev).await.outcome,
        Outcome::InProgress,
        "the tool may still be running"
    );
    clock.advance(tool_timeout);
    assert_eq!(send(&next, &ev).await.outcome, Outcome::Executed);
    task.abort();
}

async fn a_reply_too_large_to_store_settles_the_call<S: Store + Clone + 'static>(
    store: S,
    _clock: ManualClock,
    _backend: Backend,
) {
    let h = handler(store, Scripted::new(vec![Act::RunHuge]), &Config::default());
    let first = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(first.outcome, Outcome::Executed);
    let text = response(&first)
        .pointer("/response/functionResponse/responseBody/TEXT/body")
        .and_then(Value::as_str)
        .map(str::len);
    assert_eq!(text, Some(1_000_000), "the caller gets the whole reply");
    let record = stored(&h, &first).await.expect("settled");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.result, None);
    assert!(record.omitted_result_bytes.unwrap() > 1_000_000);

    let repeat = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(
        (repeat.outcome, state(&repeat).as_deref()),
        (Outcome::Replayed, Some("REPROMPT"))
    );
    let b = body(&repeat);
    assert_eq!(b["status"], "already_executed");
    let message = b["message"].as_str().unwrap();
    assert!(
        message.contains("already ran") && message.contains("too large"),
        "{message}"
    );
    assert_eq!(h.dispatcher().invokes(), 1);
    assert_eq!(charges(&h.dispatcher().demo), 1);
}

async fn first_sight_costs_two_store_requests_with_the_cache_on_or_off<
    S: Store + Clone + 'static,
>(
    store: S,
    _clock: ManualClock,
    backend: Backend,
) {
    let repeat_requests = backend.repeat_requests();
    for (cache, name) in [(0, "fd-refund.json"), (16, "fd-create_ticket.json")] {
        let config = Config {
            local_cache_items: cache,
            ..Config::default()
        };
        let h = handler(store.clone(), demo(), &config);
        let before = h.store().requests();
        assert_eq!(send(&h, &event(name)).await.outcome, Outcome::Executed);
        assert_eq!(
            h.store().requests() - before,
            RequestCounts {
                put_item: 1,
                update_item: 1,
                ..RequestCounts::default()
            },
            "cache of {cache}: first sight is one claim and one completion"
        );
        let before = h.store().requests();
        assert_eq!(send(&h, &event(name)).await.outcome, Outcome::Replayed);
        let repeat = (h.store().requests() - before).total();
        let expected = if cache > 0 { 0 } else { repeat_requests };
        assert_eq!(repeat, expected, "cache of {cache}: a repeat");
    }
}

macro_rules! on_memory_and_moto {
    ($($case:ident),* $(,)?) => {
        mod on_memory {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    let clock = ManualClock::starting_now();
                    let store = MemoryStore::new().with_clock(clock.clone());
                    super::$case(store, clock, Backend::Memory).await;
                }
            )*
        }
        mod on_moto {
            use super::*;
            $(
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test]
                async fn $case() {
                    let clock = ManualClock::starting_now();
                    let store = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
                    super::$case(store, clock, Backend::Moto).await;
                }
            )*
        }
    };
}

on_memory_and_moto!(
    a_ttl_shorter_than_the_lease_cannot_free_a_running_call,
    a_completed_call_replays_for_its_ttl_counted_from_completion,
    the_lease_covers_a_tool_that_outlives_this_invocation,
    a_reply_too_large_to_store_settles_the_call,
    first_sight_costs_two_store_requests_with_the_cache_on_or_off,
);

/// Runs the Lambda binary outside a Lambda with `vars` and returns its exit status and output.
fn lambda_binary(vars: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolcall-dedup"));
    for (var, _) in std::env::vars() {
        if var.starts_with("DEDUP_") || var.starts_with("AWS_") {
            cmd.env_remove(var);
        }
    }
    // Nothing to reach: refused at once, never a real AWS endpoint.
    cmd.env("DEDUP_LAMBDA_ENDPOINT", "http://127.0.0.1:1")
        .env("DEDUP_ROUTES", r#"{"*":"tool-fn"}"#)
        .envs(vars.iter().copied());
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

#[test]
fn the_lambda_binary_refuses_the_memory_store_unless_allowed_and_a_ttl_shorter_than_a_lease() {
    let (status, out) = lambda_binary(&[("DEDUP_STORE", "memory")]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("DEDUP_STORE=\"memory\" is invalid")
            && out.contains("set DEDUP_ALLOW_MEMORY_STORE=true for local use"),
        "{out}"
    );
    assert!(!out.contains("within this container only"), "{out}");

    // Allowed: it gets past its configuration (and then fails for want of a Lambda runtime API),
    // saying at start-up that it dedups within one container only.
    let (status, out) = lambda_binary(&[
        ("DEDUP_STORE", "memory"),
        ("DEDUP_ALLOW_MEMORY_STORE", "true"),
    ]);
    assert!(!status.success(), "{out}");
    assert!(out.contains("within this container only"), "{out}");
    assert!(!out.contains("is invalid"), "{out}");

    let (status, out) =
        lambda_binary(&[("DEDUP_TABLE_NAME", "dedup"), ("DEDUP_TTL_SECONDS", "60")]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("DEDUP_TTL_SECONDS=\"60\" is invalid") && out.contains("longest lease"),
        "{out}"
    );
}

// Two tests found missing by the mutation run (docs/testing.md, "Mutation score").

#[tokio::test]
async fn an_in_progress_answer_says_how_long_the_running_calls_lease_has_left() {
    let clock = ManualClock::starting_now();
    let gate = Arc::new(Notify::new());
    let config = Config {
        wait: Duration::from_millis(50),
        ..Config::default()
    };
    let ev = event("fd-charge_card.json");
    let (h, first) = hung_in_tool(
        MemoryStore::new().with_clock(clock.clone()),
        Scripted::new(vec![Act::HangBefore(gate.clone())]),
        &config,
        &ev,
    )
    .await;
    // Move the store's clock so the running call's lease has a few seconds left, under the
    // 60 s cap on `retry_after_ms`: the answer must state exactly that time.
    let waiting = send(&h, &event("fd-charge_card-retry.json")).await;
    let key = waiting.key.clone().expect("the retry was keyed");
    let lease_until = h.store().get(&key).await.unwrap().unwrap().lease_until_ms;
    clock.set_ms(lease_until - 7_000);
    let waiting = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(waiting.outcome, Outcome::InProgress);
    assert_eq!(body(&waiting)["retry_after_ms"].as_i64(), Some(7_000));
    gate.notify_one();
    assert_eq!(first.await.unwrap().outcome, Outcome::Executed);
}

#[tokio::test]
async fn shadow_mode_runs_a_call_whose_identical_twin_is_still_running() {
    let gate = Arc::new(Notify::new());
    let ev = event("fd-charge_card.json");
    let (h, first) = hung_in_tool(
        MemoryStore::new(),
        Scripted::new(vec![Act::HangBefore(gate.clone())]),
        &Config::default(),
        &ev,
    )
    .await;
    // Shadow mode never blocks a call: the retry runs at once, counted as a would-be replay,
    // while the first call still holds the key.
    let shadow_config = Config {
        mode: Mode::Shadow,
        ..Config::default()
    };
    let shadow = handler(h.store().clone(), demo(), &shadow_config);
    let retry = send(&shadow, &event("fd-charge_card-retry.json")).await;
    assert_eq!(retry.outcome, Outcome::ShadowReplay);
    assert_eq!(
        charges(shadow.dispatcher()),
        1,
        "the shadow call ran its tool"
    );
    assert_eq!(h.dispatcher().invokes(), 1, "the first call is still hung");
    gate.notify_one();
    assert_eq!(first.await.unwrap().outcome, Outcome::Executed);
}

/// Identical calls that win every claim round and hand the claim back before it can be read
/// (`MAX_CLAIM_ROUNDS` of them): what the record says afterwards is the answer. One that finally
/// completed is replayed; one still running is "in progress". The tool never runs here.
#[tokio::test]
async fn a_call_that_loses_every_claim_round_answers_from_the_record_left_afterwards() {
    let ev = event("fd-charge_card.json");
    let reference = handler(MemoryStore::new(), demo(), &Config::default());
    let ran = send(&reference, &ev).await;
    let result = stored(&reference, &ran).await.unwrap().result.unwrap();

    for last in [Some(result), None] {
        let store = servers::Faulty::new(MemoryStore::new());
        store.rival_claims.store(3, Ordering::SeqCst);
        *store.last_rival.lock().unwrap() = Some(last.clone());
        let h = handler(store, Scripted::new(vec![Act::Run]), &Config::default());
        let raced = send(&h, &ev).await;
        assert_eq!(h.dispatcher().invokes(), 0, "the tool ran while racing");
        assert_eq!(
            h.store().rival_claims.load(Ordering::SeqCst),
            0,
            "fewer claim rounds than rivals"
        );
        if last.is_some() {
            assert_eq!(raced.outcome, Outcome::Waited);
            assert_eq!(response(&raced), response(&ran), "not the rival's result");
        } else {
            assert_eq!(
                (raced.outcome, body(&raced)["status"].as_str()),
                (Outcome::InProgress, Some("in_progress"))
            );
            assert!(body(&raced)["retry_after_ms"].as_i64().unwrap() > 0);
        }
    }
}
