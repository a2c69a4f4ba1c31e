//! What an on-call engineer sees: the stage spans reaching an X-Ray daemon as subsegments, and
//! the alarms of both stacks watching metrics the function really emits.

use crate::fixture::*;

use std::net::UdpSocket;
use std::time::Duration;

use serde_json::Value;
use toolcall_dedup::internals::xray::XrayLayer;
use toolcall_dedup::telemetry::Telemetry;
use tracing_subscriber::layer::SubscriberExt;

const ROOT: &str = "1-6752c0de-0123456789abcdef01234567";
const PARENT: &str = "53995c3f42cd8ad8";

fn sampled() -> Option<String> {
    Some(format!("Root={ROOT};Parent={PARENT};Sampled=1"))
}

fn unsampled() -> Option<String> {
    Some(format!("Root={ROOT};Parent={PARENT};Sampled=0"))
}

/// The subsegments the daemon got, by name, in arrival order.
fn received(daemon: &UdpSocket) -> Vec<Value> {
    let mut docs = Vec::new();
    let mut buf = [0u8; 65_536];
    while let Ok(n) = daemon.recv(&mut buf) {
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        let (header, body) = text.split_once('\n').expect("header line");
        assert_eq!(header, r#"{"format":"json","version":1}"#);
        docs.push(serde_json::from_str(body).unwrap());
    }
    docs
}

fn names(docs: &[Value]) -> Vec<&str> {
    docs.iter().map(|d| d["name"].as_str().unwrap()).collect()
}

/// A local X-Ray daemon (its socket waits `wait` for each read) and, while the guard lives, this
/// thread's subscriber sending stage spans to it under the trace header `header` gives.
fn traced(
    header: fn() -> Option<String>,
    wait: Duration,
) -> (UdpSocket, tracing::subscriber::DefaultGuard) {
    let daemon = UdpSocket::bind("127.0.0.1:0").unwrap();
    daemon.set_read_timeout(Some(wait)).unwrap();
    let layer = XrayLayer::new(daemon.local_addr().unwrap(), header).unwrap();
    let guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    // Another test's thread may have registered a stage's callsite while this subscriber was
    // being set: recompute every callsite's interest with it in place.
    tracing::callsite::rebuild_interest_cache();
    (daemon, guard)
}

#[tokio::test]
async fn a_sampled_invocation_sends_its_stages_to_the_xray_daemon() {
    let (daemon, _traced) = traced(sampled, Duration::from_millis(200));
    let h = demo_handler(Telemetry::quiet());

    send(&h, &event("fd-charge_card.json")).await;
    let first = received(&daemon);
    assert_eq!(names(&first), ["key", "claim", "invoke", "complete"]);
    for doc in &first {
        assert_eq!(doc["trace_id"], ROOT);
        assert_eq!(doc["parent_id"], PARENT);
        assert_eq!(doc["type"], "subsegment");
        assert_eq!(doc["id"].as_str().unwrap().len(), 16);
        let (start, end) = (
            doc["start_time"].as_f64().unwrap(),
            doc["end_time"].as_f64().unwrap(),
        );
        assert!(start > 1.7e9 && start <= end, "{doc}");
    }
    // The stages follow one another.
    for pair in first.windows(2) {
        assert!(
            pair[0]["end_time"].as_f64() <= pair[1]["start_time"].as_f64(),
            "{pair:?}"
        );
    }

    // A repeat is keyed and replayed from its claim: nothing invoked, nothing completed.
    send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(names(&received(&daemon)), ["key", "claim"]);
}

#[tokio::test]
async fn an_unsampled_invocation_sends_nothing() {
    let (daemon, _traced) = traced(unsampled, Duration::from_millis(100));
    let h = demo_handler(Telemetry::quiet());
    send(&h, &event("fd-charge_card.json")).await;
    assert!(received(&daemon).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Alarms against the metrics the function emits

use std::collections::BTreeSet;

use serde_yaml_ng::Value as Yaml;
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::handler::Handler;
use toolcall_dedup::handler::Invocation;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{
    CallAbout, ClaimOutcome, ClaimRequest, ManualClock, MemoryStore, Records, Store,
};
use toolcall_dedup::telemetry::{Outcome, Sink};

use crate::servers::Faulty;

/// `!Ref NAME` in the template, or `None` for anything else.
fn reference(value: &Yaml) -> Option<&str> {
    match value {
        Yaml::Tagged(tagged) if tagged.tag == "!Ref" => tagged.value.as_str(),
        _ => None,
    }
}

/// A plain string in the template (not an intrinsic function).
fn literal(value: &Yaml) -> Option<String> {
    match value {
        Yaml::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// A metric an alarm watches: its namespace (as written), name, and dimensions (name → value).
#[derive(Debug)]
struct Watched {
    alarm: String,
    namespace: Yaml,
    metric: String,
    dimensions: Vec<(String, Yaml)>,
}

fn watched(alarm: &str, metric: &Yaml) -> Watched {
    let dimensions = metric["Dimensions"]
        .as_sequence()
        .map(|dims| {
            dims.iter()
                .map(|d| (d["Name"].as_str().unwrap().to_string(), d["Value"].clone()))
                .collect()
        })
        .unwrap_or_default();
    Watched {
        alarm: alarm.to_string(),
        namespace: metric["Namespace"].clone(),
        metric: metric["MetricName"].as_str().unwrap().to_string(),
        dimensions,
    }
}

/// Every metric every alarm of the SAM template watches (metric math included).
fn alarm_metrics(template: &Yaml) -> Vec<Watched> {
    let mut out = Vec::new();
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::CloudWatch::Alarm") {
            continue;
        }
        let id = id.as_str().unwrap();
        let props = &resource["Properties"];
        if props.get("MetricName").is_some() {
            out.push(watched(id, props));
        }
        for query in props["Metrics"].as_sequence().into_iter().flatten() {
            if let Some(metric) = query.get("MetricStat") {
                out.push(watched(id, &metric["Metric"]));
            }
        }
    }
    out
}

/// The EMF lines of invocations that end in every outcome an alarm of ours counts.
async fn emf_of_a_bad_day(service: &str, namespace: &str) -> Vec<Value> {
    let lookup = |var: &str| match var {
        "AWS_LAMBDA_FUNCTION_NAME" => Some(service.to_string()),
        "DEDUP_METRICS_NAMESPACE" => Some(namespace.to_string()),
        _ => None,
    };
    let config = charge_card_at_most_once(Config::from_lookup(lookup, StoreKind::Memory).unwrap());
    let (sink, lines) = Sink::memory();
    let store = Faulty::new(MemoryStore::new());
    let down = store.down.clone();
    let telemetry = Telemetry::quiet()
        .with_sink(sink)
        .with_metrics(&config.metrics);
    let rejecting = telemetry.clone();
    let h = Handler::new(
        store,
        Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout")]),
        &config,
        telemetry.clone(),
    );
    // The Gateway target door calls the demo tool as a Gateway target.
    let gateway_target = Handler::new(MemoryStore::new(), demo(), &config, telemetry);
    // An at-most-once tool crashes after its side effect: the retry finds the outcome unknown.
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::ToolError
    );
    let retried = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(retried.outcome, Outcome::Unknown);
    let sessionless = gateway_target
        .handle_with_context(
            &event("agentcore/sessionless-refund.json"),
            &Default::default(),
            client_context("agentcore/sessionless-refund.json").as_ref(),
        )
        .await;
    assert_eq!(
        sessionless.outcome,
        Outcome::Sessionless,
        "{:?}",
        sessionless.response
    );
    down.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        send(&h, &event("fd-refund.json")).await.outcome,
        Outcome::StoreError
    );
    // A config document refused: the line the reload writes (`Reloading::refresh_reported`).
    rejecting.config_rejected();
    let lines = lines.lock().unwrap();
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn every_alarm_watches_a_metric_the_function_emits() {
    let text = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    let template: Yaml = serde_yaml_ng::from_str(&text).unwrap();
    let function = &template["Resources"]["DedupFunction"]["Properties"];
    // The function's namespace, as the stack sets it (the alarms name the same one).
    let stack_namespace = literal(&function["Environment"]["Variables"]["DEDUP_METRICS_NAMESPACE"])
        .expect("the stack sets DEDUP_METRICS_NAMESPACE");
    let (service, namespace) = ("toolcall-dedup-DedupFunction-x1", stack_namespace.as_str());
    let emitted = emf_of_a_bad_day(service, namespace).await;
    let watched = alarm_metrics(&template);
    let ours: Vec<&Watched> = watched
        .iter()
        .filter(|w| literal(&w.namespace).as_deref() == Some(namespace))
        .collect();
    let names: BTreeSet<&str> = ours.iter().map(|w| w.metric.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "config_rejected",
            "outcome_unknown",
            "sessionless",
            "settled_unknown",
            "store_error",
            "tool_error"
        ]),
        "the alarms on the function's own metrics"
    );
    for w in ours {
        // The Service dimension is the function, as the function names itself.
        let dims: BTreeSet<&str> = w.dimensions.iter().map(|(n, _)| n.as_str()).collect();
        for (name, value) in &w.dimensions {
            assert_eq!(name, "Service", "{}", w.alarm);
            assert_eq!(reference(value), Some("DedupFunction"), "{}", w.alarm);
        }
        let firing: Vec<&Value> = emitted.iter().filter(|line| line[&w.metric] == 1).collect();
        assert!(
            !firing.is_empty(),
            "{}: no line counts {}",
            w.alarm,
            w.metric
        );
        for line in firing {
            let directive = &line["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], namespace);
            assert!(
                directive["Metrics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["Name"] == w.metric.as_str()),
                "{}: {} is not a metric of {line}",
                w.alarm,
                w.metric
            );
            let published = directive["Dimensions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|set| {
                    set.as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_str().unwrap())
                        .collect::<BTreeSet<_>>()
                        == dims
                });
            assert!(
                published,
                "{}: no dimension set {dims:?} in {line}",
                w.alarm
            );
            assert_eq!(line["Service"], service, "{}", w.alarm);
        }
    }
    // The AWS metrics: the executor's own function and table.
    for w in watched
        .iter()
        .filter(|w| literal(&w.namespace).is_some_and(|ns| ns.starts_with("AWS/")))
    {
        let expected = match literal(&w.namespace).unwrap().as_str() {
            "AWS/Lambda" => ("FunctionName", "DedupFunction"),
            "AWS/DynamoDB" => ("TableName", "IdempotencyTable"),
            other => panic!("{}: unexpected namespace {other}", w.alarm),
        };
        let (name, value) = &w.dimensions[0];
        assert_eq!(
            (name.as_str(), reference(value)),
            (expected.0, Some(expected.1)),
            "{}",
            w.alarm
        );
    }
}

// ---------------------------------------------------------------------------------------------
// the unknown-outcome event

use toolcall_dedup::internals::announce::{EventBus, OUTCOME_UNKNOWN, SOURCE};

/// An SDK configuration for moto, with dummy credentials.
async fn moto_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(crate::servers::Backend::Moto.endpoint())
        .region(aws_config::Region::from_static("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "moto",
        ))
        .load()
        .await
}

/// On moto: a rule on the default bus that sends `service`'s announcements to a new queue. The
/// EventBridge client to announce with, and the queue to read them from.
async fn announced_to_a_queue(
    service: &str,
) -> (aws_sdk_eventbridge::Client, aws_sdk_sqs::Client, String) {
    let aws = moto_config().await;
    let (events, sqs) = (
        aws_sdk_eventbridge::Client::new(&aws),
        aws_sdk_sqs::Client::new(&aws),
    );
    let queue = sqs
        .create_queue()
        .queue_name(service)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let pattern = serde_json::json!({"source": [SOURCE], "detail": {"service": [service]}});
    events
        .put_rule()
        .name(service)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule(service)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(&queue_arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    (events, sqs, queue)
}

/// Every message on `queue` now, as JSON.
async fn queued(sqs: &aws_sdk_sqs::Client, queue: &str) -> Vec<Value> {
    let received = sqs
        .receive_message()
        .queue_url(queue)
        .max_number_of_messages(10)
        .wait_time_seconds(1)
        .send()
        .await
        .unwrap();
    received
        .messages()
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
        .collect()
}

/// With an event bus, each call an invocation leaves with its outcome unknown is announced, with
/// the key an operator settles; a call that ends otherwise is not. On moto: a rule on the
/// default bus sends the events of this test's function to a queue the test reads.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_call_left_with_its_outcome_unknown_is_announced_on_the_event_bus() {
    let service = format!("dedup-{}", uuid::Uuid::new_v4().simple());
    let (events, sqs, queue) = announced_to_a_queue(&service).await;

    let config = charge_card_at_most_once(Config::default());
    let h = Handler::new(
        MemoryStore::new(),
        Scripted::new(vec![Act::Run, Act::RunThenFail("Sandbox.Timedout")]),
        &config,
        Telemetry::quiet(),
    )
    .with_event_bus(EventBus::new(events, "default", &service));
    // A refund that runs, then a charge whose tool crashes after its side effect.
    assert_eq!(
        send(&h, &event("fd-refund.json")).await.outcome,
        Outcome::Executed
    );
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(crashed.outcome, Outcome::ToolError);
    let key = crashed.key.expect("the crashed call was keyed");

    let bodies = queued(&sqs, &queue).await;
    assert_eq!(
        bodies.len(),
        1,
        "one event, for the unknown outcome only: {bodies:?}"
    );
    let announced = &bodies[0];
    assert_eq!(announced["detail-type"], OUTCOME_UNKNOWN);
    assert_eq!(announced["detail"]["key"], key.as_str());
    assert_eq!(announced["detail"]["tool"], "charge_card");
    assert_eq!(announced["detail"]["door"], "bedrock");
    assert!(
        announced["detail"]["settle"]
            .as_str()
            .unwrap()
            .starts_with(&format!("dedup settle {key}")),
        "{announced}"
    );
}

/// A bus that cannot be reached costs the caller at most the send's bound, and changes nothing
/// in the answer.
#[tokio::test]
async fn an_unreachable_event_bus_changes_no_answer() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let config = charge_card_at_most_once(Config::default());
    let client = EventBus::build_client(Some(&endpoint)).await;
    let h = Handler::new(
        MemoryStore::new(),
        Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout")]),
        &config,
        Telemetry::quiet(),
    )
    .with_event_bus(EventBus::new(client, "default", "dedup-test"));
    let started = std::time::Instant::now();
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(crashed.outcome, Outcome::ToolError);
    assert_eq!(
        send(&h, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Unknown,
        "the record says what it said without the bus"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 51: an `at_most_once` claim whose invocation was killed (no settle, no repeat) is found by
/// the scheduled sweep once its lease ended past the margin, settled as outcome unknown and
/// announced exactly once: the next sweep announces nothing more, and the record tells a repeat
/// the outcome is unknown. A claim inside the margin is left alone. Memory and moto, one event rule to a queue.
async fn a_killed_at_most_once_call_is_swept_and_announced_once<S: Store + Records + Clone>(
    store: S,
    clock: ManualClock,
) {
    let service = format!("dedup-{}", uuid::Uuid::new_v4().simple());
    let (events, sqs, queue) = announced_to_a_queue(&service).await;
    let config = charge_card_at_most_once(Config::default());
    let h = Handler::new(
        store.clone(),
        Scripted::new(vec![]),
        &config,
        Telemetry::quiet(),
    )
    .with_event_bus(EventBus::new(events, "default", &service));
    // What a killed invocation leaves: its claim, taken at most once, never settled.
    let (killed, recent) = ("a".repeat(32), "b".repeat(32));
    for key in [&killed, &recent] {
        let now_ms = store.now_ms();
        let claimed = store
            .claim(ClaimRequest {
                key,
                fingerprint: "f",
                tool: "charge_card",
                lease_until_ms: now_ms + 10_000,
                expires_at_s: now_ms / 1000 + 86_400,
                owner: None,
                at_most_once: true,
                on_failure: Default::default(),
                path_digests: None,
                about: CallAbout {
                    namespace: Some("bedrock:agent"),
                    ..CallAbout::default()
                },
            })
            .await
            .unwrap();
        assert!(
            matches!(claimed, ClaimOutcome::Claimed { .. }),
            "{claimed:?}"
        );
        // The recent one is claimed 30 s after the killed one: its lease ends inside the margin.
        clock.advance(Duration::from_secs(30));
    }
    let invocation = Invocation {
        request_id: "sweep-1".into(),
        ..Invocation::default()
    };
    // Inside the killed claim's lease and margin, nothing is swept.
    let early: Value = serde_json::from_str(h.sweep(&invocation).await.unwrap().get()).unwrap();
    let none =
        serde_json::json!({"swept": 0, "settled": 0, "settled_keys": [], "left_for_next": 0});
    assert_eq!(early, none);
    // 10 s lease + 60 s margin after the killed claim; the recent one is 30 s younger.
    clock.advance(Duration::from_secs(15));
    let first: Value = serde_json::from_str(h.sweep(&invocation).await.unwrap().get()).unwrap();
    assert_eq!(
        first,
        serde_json::json!({"swept": 1, "settled": 1, "settled_keys": [killed], "left_for_next": 0})
    );
    let again: Value = serde_json::from_str(h.sweep(&invocation).await.unwrap().get()).unwrap();
    assert_eq!(again, none, "settled once");
    // What a repeat reads: the outcome is unknown (it is answered so; nothing re-runs).
    let repeat = h.store().get(&killed).await.unwrap().unwrap();
    assert!(repeat.is_outcome_unknown(h.store().now_ms()));
    let record = store.get(&killed).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    let recent_record = store.get(&recent).await.unwrap().unwrap();
    assert!(
        !recent_record.outcome_unknown,
        "inside the margin: {recent_record:?}"
    );

    let bodies = queued(&sqs, &queue).await;
    assert_eq!(bodies.len(), 1, "one announcement: {bodies:?}");
    assert_eq!(bodies[0]["detail-type"], OUTCOME_UNKNOWN);
    assert_eq!(bodies[0]["detail"]["key"], killed.as_str());
    assert_eq!(bodies[0]["detail"]["tool"], "charge_card");
    assert_eq!(bodies[0]["detail"]["door"], "bedrock");
    assert_eq!(bodies[0]["detail"]["request_id"], "sweep-1");
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_killed_at_most_once_call_is_swept_and_announced_once_on_memory() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    a_killed_at_most_once_call_is_swept_and_announced_once(store, clock).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_killed_at_most_once_call_is_swept_and_announced_once_on_moto() {
    let clock = ManualClock::starting_now();
    let store = crate::servers::dynamodb_store(crate::servers::Backend::Moto, clock.clone()).await;
    a_killed_at_most_once_call_is_swept_and_announced_once(store, clock).await;
}

/// `base` with `charge_card` taken at most once: the tool whose unknown outcomes are announced.
fn charge_card_at_most_once(base: Config) -> Config {
    let policy = r#"{"tools": {"charge_card": {"delivery": "at_most_once"}}}"#;
    Config {
        policies: PolicySet::parse(policy, false).unwrap(),
        ..base
    }
}

/// Each call settled as outcome unknown is announced by the invocation whose write settled it,
/// and by no other. A settle whose answer was lost (applied) is read back and announced by its
/// invocation; one that failed without applying is not, and the sweep settles and announces it
/// once its lease ends (before, the invocation announced it whatever the write did, and the sweep
/// announced it again).
#[tokio::test]
async fn an_unknown_outcome_is_announced_by_whichever_write_settled_it() {
    use std::sync::atomic::Ordering;
    for (lost, refused) in [(1, 0), (0, 1), (0, 0)] {
        let clock = ManualClock::starting_now();
        let store = std::sync::Arc::new(crate::servers::Faulty::new(
            MemoryStore::new().with_clock(clock.clone()),
        ));
        store
            .lose_settle_unknown_answers
            .store(lost, Ordering::SeqCst);
        store.refuse_settle_unknown.store(refused, Ordering::SeqCst);
        let h = Handler::new(
            store.clone(),
            Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout")]),
            &charge_card_at_most_once(Config::default()),
            Telemetry::quiet(),
        );
        let crashed = send(&h, &event("fd-charge_card.json")).await;
        assert_eq!(crashed.outcome, Outcome::ToolError);
        let key = crashed.key.clone().expect("keyed");
        let settled_by_the_invocation = refused == 0;
        assert_eq!(
            crashed.settled_unknown == [key.clone()],
            settled_by_the_invocation,
            "lost {lost}, refused {refused}: {:?}",
            crashed.settled_unknown
        );
        clock.advance(Duration::from_secs(3_600));
        let (swept, by_the_sweep) = swept_keys(&h, &Invocation::default()).await;
        assert_eq!(
            by_the_sweep.contains(&key),
            !settled_by_the_invocation,
            "announced once in all: {swept}"
        );
        let record = store.get(&key).await.unwrap().unwrap();
        assert!(record.outcome_unknown, "{record:?}");
    }
}

/// Invocations a handler serves side by side each announce only what they settled: one
/// invocation's settlement as outcome unknown is not credited to another that finished meanwhile
/// (a count per executor did, read as a difference around each invocation).
#[tokio::test]
async fn side_by_side_invocations_announce_only_their_own_unknown_outcomes() {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let h = std::sync::Arc::new(Handler::new(
        MemoryStore::new(),
        Scripted::new(vec![
            Act::HangAfter(gate.clone()),
            Act::RunThenFail("Sandbox.Timedout"),
        ]),
        &charge_card_at_most_once(Config::default()),
        Telemetry::quiet(),
    ));
    // A refund that runs and waits at the gate, while a charge crashes after its side effect.
    let refund = tokio::spawn({
        let h = h.clone();
        async move { send(&h, &event("fd-refund.json")).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    gate.notify_one();
    let refund = refund.await.unwrap();
    assert_eq!(crashed.outcome, Outcome::ToolError);
    assert_eq!(crashed.settled_unknown, [crashed.key.clone().unwrap()]);
    assert_eq!(refund.outcome, Outcome::Executed);
    assert!(
        refund.settled_unknown.is_empty(),
        "the refund settled nothing as unknown, though the charge did while it ran"
    );
}
