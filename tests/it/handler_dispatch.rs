//! The `aws-sdk-lambda` dispatcher against a fake Lambda invoke endpoint: routing, forwarding the
//! key, function errors, unreachable tools, broken connections, leases sized by tool timeouts.

use crate::fake_lambda::{FakeLambda, FakeReply};
use crate::fixture;

use std::sync::atomic::Ordering;
use std::time::Duration;

use fixture::*;
use serde_json::json;
use toolcall_dedup::config::{Config, TOOL_START_ALLOWANCE};
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::store::{ManualClock, MemoryStore, Status, Store};
use toolcall_dedup::telemetry::Outcome;

// ---------------------------------------------------------------------------------------------
// the aws-sdk-lambda dispatcher against a fake Lambda invoke endpoint

async fn lambda_dispatcher(url: &str) -> toolcall_dedup::dispatch::LambdaDispatcher {
    let client = toolcall_dedup::dispatch::build_client(Some(url)).await;
    toolcall_dedup::dispatch::LambdaDispatcher::new(&client)
}

/// The configuration whose `DEDUP_ROUTES` is `routes`.
fn routed(routes: &str) -> Config {
    Config {
        routes: toolcall_dedup::config::Routes::parse(routes).unwrap(),
        ..Config::default()
    }
}

#[tokio::test]
async fn the_lambda_dispatcher_routes_forwards_the_key_and_maps_function_errors() {
    let tool_reply = serde_json::to_vec(&demo().handle(&event("fd-refund.json")).unwrap()).unwrap();
    let fake = FakeLambda::start(vec![
        (
            200,
            vec![("x-amz-function-error", "Unhandled")],
            br#"{"errorType":"DedupNothingRan","errorMessage":"amount must be positive"}"#.to_vec(),
        ),
        (
            429,
            vec![("x-amzn-errortype", "TooManyRequestsException")],
            br#"{"message":"Rate exceeded"}"#.to_vec(),
        ),
        (200, vec![], tool_reply.clone()),
    ])
    .await;
    let dispatcher = lambda_dispatcher(&fake.url).await;
    let config = routed(r#"{"payments/refund":"refund-fn","*":"other-fn"}"#);
    let h = handler(MemoryStore::new(), dispatcher, &config);
    let ev = event("fd-refund.json");
    let failed = send(&h, &ev).await;
    assert_eq!(
        (failed.outcome, state(&failed).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    assert!(
        body(&failed)["message"]
            .as_str()
            .unwrap()
            .contains("DedupNothingRan"),
        "the error payload's type, which says nothing ran, so the claim was released"
    );
    let ok = send(&h, &ev).await;
    assert_eq!(
        ok.outcome,
        Outcome::Executed,
        "throttling is retried: {:?}",
        ok.response
    );
    assert_eq!(
        ok.response.unwrap().get().as_bytes(),
        tool_reply.as_slice(),
        "stored and returned verbatim"
    );
    assert_eq!(send(&h, &ev).await.outcome, Outcome::Replayed);
    let seen = fake.seen.lock().unwrap();
    assert_eq!(
        seen.len(),
        3,
        "failed, throttled, ran; the replay sent nothing"
    );
    assert!(seen.iter().all(|(f, _)| f == "refund-fn"), "{seen:?}");
    let mut expected = ev.clone();
    expected["sessionAttributes"]["dedup_key"] = json!(failed.key.unwrap());
    assert_eq!(
        seen[2].1, expected,
        "the original event plus dedup_key, nothing else"
    );
}

#[tokio::test]
async fn an_unreachable_tool_lambda_releases_the_claim() {
    // Port 1 (tcpmux) has no listener; a port freed by another test could be reused concurrently.
    let closed = "http://127.0.0.1:1";
    let h = handler(
        MemoryStore::new(),
        lambda_dispatcher(closed).await,
        &routed(r#"{"*":"fn"}"#),
    );
    let r = send(&h, &event("fd-refund.json")).await;
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    assert!(
        stored(&h, &r).await.is_none(),
        "connection refused: the invoke never left"
    );
    assert!(
        body(&r)["message"]
            .as_str()
            .unwrap()
            .contains("did not complete")
    );
}

#[tokio::test]
async fn a_connection_that_breaks_mid_invoke_keeps_the_claim() {
    // Lambda read the whole invoke, then the connection broke before any response: the tool may
    // be running.
    let fake = FakeLambda::start(vec![(0, vec![], Vec::new())]).await;
    let h = handler(
        MemoryStore::new(),
        lambda_dispatcher(&fake.url).await,
        &routed(r#"{"*":"fn"}"#),
    )
    .with_settings(|s| s.wait = Duration::from_millis(50));
    let ev = event("fd-refund.json");
    let r = send(&h, &ev).await;
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    assert!(
        body(&r)["message"].as_str().unwrap().contains("unknown"),
        "{}",
        body(&r)
    );
    let record = stored(&h, &r).await.expect("claim kept");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(send(&h, &ev).await.outcome, Outcome::InProgress);
    assert_eq!(fake.seen.lock().unwrap().len(), 1, "invoked once");
}

#[tokio::test]
async fn the_lambda_dispatcher_sizes_each_lease_to_its_tools_own_timeout() {
    // The tool timed out on Lambda's side after 120 s; this function's own budget is 60 s.
    let timed_out: FakeReply = (
        200,
        vec![("x-amz-function-error", "Unhandled")],
        br#"{"errorType":"Sandbox.Timedout","errorMessage":"Task timed out after 120.00 seconds"}"#
            .to_vec(),
    );
    let fake = FakeLambda::with_configurations(
        vec![timed_out],
        vec![(
            "refund-fn",
            json!({"FunctionName": "refund-fn", "Timeout": 120, "MemorySize": 128}),
        )],
    )
    .await;
    let routes = r#"{"payments/refund":"refund-fn",
                     "payments/*":{"function":"stated-fn","timeout_seconds":30},
                     "*":"unknown-fn"}"#;
    let (dispatcher, routes) = (lambda_dispatcher(&fake.url).await, routed(routes).routes);
    // Each tool's own timeout, plus how late it may start (its init phase, throttled invokes).
    let start = TOOL_START_ALLOWANCE;
    let run_time = |group, tool| dispatcher.route(&routes, group, tool).unwrap().max_run_time;
    assert_eq!(
        run_time("payments", "refund"),
        Duration::from_secs(900) + start,
        "until it is looked up"
    );
    dispatcher.clone().look_up_timeouts(&routes).await;
    assert_eq!(
        run_time("payments", "refund"),
        Duration::from_secs(120) + start
    );
    assert_eq!(
        run_time("payments", "charge"),
        Duration::from_secs(30) + start
    );
    assert_eq!(
        run_time("support", "create_ticket"),
        Duration::from_secs(900) + start,
        "a failed lookup assumes Lambda's maximum"
    );
    assert_eq!(
        fake.configurations_read.load(Ordering::SeqCst),
        2,
        "looked up once each, and not for the route that states its timeout"
    );

    let clock = ManualClock::starting_now();
    let config = Config {
        routes,
        ..Config::default()
    };
    let h = handler(
        MemoryStore::new().with_clock(clock.clone()),
        dispatcher,
        &config,
    )
    .with_settings(|s| s.wait = Duration::from_millis(50));
    let claimed_at = h.store().now_ms();
    let ev = event("fd-refund.json");
    let r = send(&h, &ev).await;
    assert!(
        body(&r)["message"]
            .as_str()
            .unwrap()
            .contains("Sandbox.Timedout")
    );
    let record = stored(&h, &r)
        .await
        .expect("a timed-out tool keeps its claim");
    assert!(
        record.lease_until_ms - claimed_at >= 125_000,
        "lease of {} ms does not cover the tool's 120 s plus the margin",
        record.lease_until_ms - claimed_at
    );
    clock.advance(Duration::from_secs(100));
    assert_eq!(
        send(&h, &ev).await.outcome,
        Outcome::InProgress,
        "past this function's budget, inside the tool's timeout"
    );
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn only_an_invoke_error_lambda_raises_before_starting_releases_the_claim() {
    // 410 EFSIOException can come while the function runs (its file system failed mid-run): the
    // side effect may have happened. 404 ResourceNotFoundException and 413 RequestTooLarge are
    // answered before any function starts.
    for (status, error_type, released) in [
        (410, "EFSIOException", false),
        (408, "EFSMountTimeoutException", false),
        (404, "ResourceNotFoundException", true),
        (413, "RequestTooLargeException", true),
    ] {
        let fake = FakeLambda::start(vec![(
            status,
            vec![("x-amzn-errortype", error_type)],
            format!(r#"{{"message":"{error_type}"}}"#).into_bytes(),
        )])
        .await;
        let h = handler(
            MemoryStore::new(),
            lambda_dispatcher(&fake.url).await,
            &routed(r#"{"*":"fn"}"#),
        )
        .with_settings(|s| s.wait = Duration::ZERO);
        let ev = event("fd-refund.json");
        let r = send(&h, &ev).await;
        assert_eq!(r.outcome, Outcome::ToolError, "{error_type}");
        let record = stored(&h, &r).await;
        assert_eq!(record.is_none(), released, "{error_type}: {record:?}");
        if !released {
            assert_eq!(
                send(&h, &ev).await.outcome,
                Outcome::InProgress,
                "{error_type}: a retry must not invoke again"
            );
            assert_eq!(fake.seen.lock().unwrap().len(), 1, "{error_type}");
        }
    }
}
