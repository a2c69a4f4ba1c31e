//! The executor end to end in-process: every event file, retries and deliberate repeats, modes,
//! the call log, faults (tool errors, hangs, timeouts, a store that stops, a killed handler), and
//! `dedup replay` (also at 50-way concurrency on the local DynamoDB servers).
//!
//! Store-server tests need `scripts/dynamodb-servers.sh` (see `tests/common/servers.rs`); they
//! fail, saying how to start them, when the servers are not running.

#[path = "common/servers.rs"]
mod servers;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use servers::Backend;
use tokio::sync::Notify;
use toolcall_dedup::bedrock::Envelope;
use toolcall_dedup::config::{Config, ErrorTypes, LogCalls, Mode, Scope};
use toolcall_dedup::demo::{DemoTool, Ledger};
use toolcall_dedup::dispatch::{DispatchError, Dispatcher};
use toolcall_dedup::handler::{Handled, Handler, HandlerError, Invocation};
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{
    ClaimOutcome, ClaimRequest, Completion, DynamoDbConfig, DynamoDbStore, LeaseToken, ManualClock,
    MemoryStore, Record, RequestCounts, RetryPolicy, Status, Store, StoreError,
};
use toolcall_dedup::telemetry::{Outcome, Sink, Telemetry};

// ---------------------------------------------------------------------------------------------
// helpers

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

fn event(name: &str) -> Value {
    let path = events_dir().join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn event_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(events_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "events/ has too few files: {names:?}");
    names
}

fn handler<S: Store, D: Dispatcher>(store: S, dispatcher: D, config: &Config) -> Handler<S, D> {
    Handler::new(store, dispatcher, config, Telemetry::quiet())
}

fn demo() -> DemoTool {
    DemoTool::new(Ledger::memory())
}

async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle(ev, &Invocation::default()).await
}

fn response(h: &Handled) -> Value {
    match &h.response {
        Ok(raw) => serde_json::from_str(raw.get()).unwrap(),
        Err(e) => panic!("expected a Bedrock response, got a Lambda error: {e}"),
    }
}

/// `responseState` of a response of either flavour (None on success).
fn state(h: &Handled) -> Option<String> {
    let r = response(h);
    let holder = r["response"]
        .get("functionResponse")
        .unwrap_or(&r["response"]);
    holder
        .get("responseState")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The body of a response of either flavour, parsed.
fn body(h: &Handled) -> Value {
    let r = response(h);
    let text = r
        .pointer("/response/functionResponse/responseBody/TEXT/body")
        .or_else(|| r.pointer("/response/responseBody/application~1json/body"))
        .and_then(Value::as_str)
        .expect("a response body");
    serde_json::from_str(text).unwrap()
}

fn ledger(tool: &DemoTool) -> Vec<Value> {
    tool.ledger().entries().unwrap()
}

fn charges(tool: &DemoTool) -> usize {
    ledger(tool)
        .iter()
        .filter(|e| e["kind"] == "charge")
        .count()
}

fn with_attrs(mut ev: Value, attrs: Value) -> Value {
    ev["sessionAttributes"] = attrs;
    ev
}

/// What a scripted dispatcher does on its next invoke.
#[derive(Default)]
enum Act {
    #[default]
    Run,
    /// Runs the tool (the side effect happens), then fails with a `FunctionError` of this type.
    RunThenFail(&'static str),
    /// Fails with a `FunctionError` of this type without running the tool.
    Fail(&'static str),
    /// Runs the tool and answers with its reply grown past what one DynamoDB item can hold.
    RunHuge,
    HangBefore(Arc<Notify>),
    HangAfter(Arc<Notify>),
    Malformed,
    Stall,
}

/// The demo tool behind a script of faults; counts invokes.
struct Scripted {
    demo: DemoTool,
    plan: Mutex<VecDeque<Act>>,
    invokes: AtomicU32,
    /// What `max_run_time` reports: a tool Lambda's own timeout.
    max_run_time: Duration,
}

impl Scripted {
    fn new(plan: Vec<Act>) -> Scripted {
        Scripted {
            demo: demo(),
            plan: Mutex::new(plan.into()),
            invokes: AtomicU32::new(0),
            max_run_time: Duration::ZERO,
        }
    }

    fn with_max_run_time(self, max_run_time: Duration) -> Scripted {
        Scripted {
            max_run_time,
            ..self
        }
    }

    fn invokes(&self) -> u32 {
        self.invokes.load(Ordering::SeqCst)
    }
}

impl Dispatcher for Scripted {
    fn route(&self, _group: &str, _tool: &str) -> Result<String, DispatchError> {
        Ok("scripted".into())
    }

    fn max_run_time(&self, _target: &str) -> Duration {
        self.max_run_time
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.invokes.fetch_add(1, Ordering::SeqCst);
        let act = self.plan.lock().unwrap().pop_front().unwrap_or_default();
        match act {
            Act::Run => self.demo.invoke(target, payload, timeout).await,
            Act::RunThenFail(kind) => {
                self.demo.invoke(target, payload, timeout).await?;
                Err(function_error(target, kind))
            }
            Act::Fail(kind) => Err(function_error(target, kind)),
            Act::RunHuge => {
                let reply = self.demo.invoke(target, payload, timeout).await?;
                let mut reply: Value = serde_json::from_slice(&reply).unwrap();
                reply["response"]["functionResponse"]["responseBody"]["TEXT"]["body"] =
                    json!(huge_text());
                Ok(serde_json::to_vec(&reply).unwrap())
            }
            Act::HangBefore(gate) => {
                gate.notified().await;
                self.demo.invoke(target, payload, timeout).await
            }
            Act::HangAfter(gate) => {
                let reply = self.demo.invoke(target, payload, timeout).await;
                gate.notified().await;
                reply
            }
            Act::Malformed => Ok(br#"{"statusCode": 200, "body": "ok"}"#.to_vec()),
            Act::Stall => {
                tokio::time::sleep(timeout).await;
                Err(DispatchError::Timeout {
                    target: target.into(),
                    after: timeout,
                })
            }
        }
    }
}

fn function_error(target: &str, kind: &str) -> DispatchError {
    DispatchError::FunctionError {
        target: target.into(),
        kind: kind.into(),
        message: "card network unreachable".into(),
    }
}

/// Text that even gzip cannot fit in one DynamoDB item: 1 MB of random hex.
fn huge_text() -> String {
    let mut rng = fastrand::Rng::with_seed(11);
    (0..1_000_000)
        .map(|_| char::from_digit(rng.u32(0..16), 16).unwrap())
        .collect()
}

/// A memory store that can be switched off: every operation then fails as unreachable.
#[derive(Clone, Default)]
struct Switchable {
    inner: MemoryStore,
    down: Arc<AtomicBool>,
}

impl Switchable {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("store stopped by the test".into()))
        } else {
            Ok(())
        }
    }
}

impl Store for Switchable {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.check()?;
        self.inner.claim(req).await
    }
    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        self.check()?;
        self.inner.complete(key, token, result, expires_at_s).await
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.check()?;
        self.inner.release(key, token).await
    }
    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.check()?;
        self.inner.get(key).await
    }
    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }
    fn requests(&self) -> RequestCounts {
        self.inner.requests()
    }
}

/// The record of `handled`'s key.
async fn stored<S: Store, D: Dispatcher>(h: &Handler<S, D>, handled: &Handled) -> Option<Record> {
    h.store()
        .get(handled.key.as_deref().unwrap())
        .await
        .unwrap()
}

/// Asserts a tool-error REPROMPT and returns its message.
#[track_caller]
fn tool_error_message(h: &Handled) -> String {
    assert_eq!(
        (h.outcome, state(h).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    body(h)["message"].as_str().unwrap().to_string()
}

/// Sends `ev` through a handler on `store` and `tool` in the background; returns once the call
/// has claimed its key and reached the tool (which hangs until its gate opens).
async fn hung_in_tool<S: Store + 'static>(
    store: S,
    tool: Scripted,
    config: &Config,
    ev: &Value,
) -> (Arc<Handler<S, Scripted>>, tokio::task::JoinHandle<Handled>) {
    let h = Arc::new(handler(store, tool, config));
    let task = spawn_send(&h, ev);
    wait_for("the call to reach the tool", || {
        h.dispatcher().invokes() == 1
    })
    .await;
    (h, task)
}

/// Sends `ev` through `h` in the background.
fn spawn_send<S, D>(h: &Arc<Handler<S, D>>, ev: &Value) -> tokio::task::JoinHandle<Handled>
where
    S: Store + 'static,
    D: Dispatcher + 'static,
{
    let (h, ev) = (h.clone(), ev.clone());
    tokio::spawn(async move { send(&h, &ev).await })
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------------------------------------
// events

#[tokio::test]
async fn every_valid_event_file_parses_and_every_bad_one_is_rejected_with_a_clear_error() {
    for name in event_files() {
        let ev = event(&name);
        let parsed = Envelope::parse(&ev).and_then(|e| e.tool_call());
        if name.starts_with("bad-") {
            let err = parsed.expect_err(&name);
            assert!(err.to_string().len() > 15, "{name}: unclear error {err}");
        } else {
            let call = parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!call.args.is_empty() && !call.tool().is_empty(), "{name}");
        }
    }
}

#[tokio::test]
async fn bad_events_claim_nothing_call_no_tool_and_answer_in_the_callers_format() {
    for name in event_files().into_iter().filter(|n| n.starts_with("bad-")) {
        let h = handler(
            MemoryStore::new(),
            Scripted::new(vec![]),
            &Config::default(),
        );
        let handled = send(&h, &event(&name)).await;
        assert_eq!(handled.outcome, Outcome::BadRequest, "{name}");
        assert_eq!(
            h.store().requests().total(),
            0,
            "{name}: the store was touched"
        );
        assert!(h.store().is_empty(), "{name}: something was claimed");
        assert_eq!(h.dispatcher().invokes(), 0, "{name}: the tool was called");
        match &handled.response {
            Ok(_) => {
                let s = state(&handled).unwrap_or_default();
                assert!(s == "REPROMPT" || s == "FAILURE", "{name}: {s}");
                assert!(
                    body(&handled)["message"]
                        .as_str()
                        .unwrap()
                        .contains("not executed"),
                    "{name}"
                );
            }
            Err(HandlerError::InvalidEvent(e)) => {
                let d = lambda_runtime::Diagnostic::from(HandlerError::InvalidEvent(e.clone()));
                assert_eq!(d.error_type, "InvalidEvent", "{name}");
                assert!(
                    d.error_message
                        .contains("not a Bedrock Agents action-group event"),
                    "{name}"
                );
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    // Which file gets which answer: the model can fix a bad value, not a missing session.
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let number = send(&h, &event("bad-number-not-numeric.json")).await;
    assert_eq!(state(&number).as_deref(), Some("REPROMPT"));
    assert!(
        body(&number)["message"]
            .as_str()
            .unwrap()
            .contains("\"amount\" must be a number")
    );
    let array = send(&h, &event("bad-array-not-json.json")).await;
    assert_eq!(state(&array).as_deref(), Some("REPROMPT"));
    assert_eq!(
        state(&send(&h, &event("bad-missing-session.json")).await).as_deref(),
        Some("FAILURE")
    );
    for lambda_error in [
        "bad-not-object.json",
        "bad-empty-function.json",
        "bad-no-function-or-apipath.json",
    ] {
        assert!(
            send(&h, &event(lambda_error)).await.response.is_err(),
            "{lambda_error}"
        );
    }
}

#[tokio::test]
async fn every_valid_event_executes_once_then_replays_its_stored_response_verbatim() {
    for name in event_files().into_iter().filter(|n| !n.starts_with("bad-")) {
        let h = handler(MemoryStore::new(), demo(), &Config::default());
        let ev = event(&name);
        let first = send(&h, &ev).await;
        assert_eq!(first.outcome, Outcome::Executed, "{name}");
        assert_eq!(state(&first), None, "{name}: {:?}", response(&first));
        let second = send(&h, &ev).await;
        assert_eq!(second.outcome, Outcome::Replayed, "{name}");
        assert_eq!(
            first.response.as_ref().unwrap().get(),
            second.response.as_ref().unwrap().get(),
            "{name}: the replay is not byte-identical"
        );
        assert_eq!(
            second.rules,
            Vec::<&str>::new(),
            "{name}: identical calls meet without rules"
        );
        let entries = ledger(h.dispatcher());
        assert_eq!(entries.len(), 1, "{name}");
        assert_eq!(
            entries[0]["dedup_key"].as_str(),
            first.key.as_deref(),
            "{name}: dedup_key not forwarded"
        );
    }
}

#[tokio::test]
async fn the_events_readme_table_holds_in_file_order() {
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let expected = [
        ("fd-charge_card.json", Outcome::Executed),
        ("fd-charge_card-retry.json", Outcome::Replayed),
        ("fd-charge_card-step3.json", Outcome::Executed),
        ("fd-charge_card-step4.json", Outcome::Executed),
        ("fd-charge_card-drift.json", Outcome::Executed),
        ("fd-charge_card-drift-retry.json", Outcome::Replayed),
        ("fd-refund.json", Outcome::Executed),
        ("fd-create_ticket.json", Outcome::Executed),
        ("openapi-charge_card.json", Outcome::Executed),
        ("openapi-refund.json", Outcome::Executed),
        ("openapi-create_ticket.json", Outcome::Executed),
    ];
    for (name, outcome) in expected {
        assert_eq!(send(&h, &event(name)).await.outcome, outcome, "{name}");
    }
    for (name, _) in expected {
        assert_eq!(
            send(&h, &event(name)).await.outcome,
            Outcome::Replayed,
            "{name} (second pass)"
        );
    }
    assert_eq!(
        charges(h.dispatcher()),
        5,
        "charge, step3, step4, drift, openapi charge"
    );
}

#[tokio::test]
async fn a_retry_pair_executes_once_and_the_replay_names_the_rules_that_made_it_meet() {
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let first = send(&h, &event("fd-charge_card.json")).await;
    let retry = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(
        (first.outcome, retry.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );
    assert_eq!(first.key, retry.key);
    assert_eq!(first.response.unwrap().get(), retry.response.unwrap().get());
    assert_eq!(charges(h.dispatcher()), 1);
    assert!(retry.rules.contains(&"key-order"), "{:?}", retry.rules);
    assert!(
        retry.rules.contains(&"schema-coercion"),
        "{:?}",
        retry.rules
    );
    // One conditional put each; the replay costs a single request.
    assert_eq!(h.store().requests().put_item, 2);
    assert_eq!(
        h.store().requests().total(),
        3,
        "claim + complete, then one claim"
    );
}

#[tokio::test]
async fn a_deliberate_repeat_at_a_new_step_executes_twice() {
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let step3 = send(&h, &event("fd-charge_card-step3.json")).await;
    let step4 = send(&h, &event("fd-charge_card-step4.json")).await;
    assert_eq!(
        (step3.outcome, step4.outcome),
        (Outcome::Executed, Outcome::Executed)
    );
    assert_ne!(step3.key, step4.key);
    assert_eq!(charges(h.dispatcher()), 2);
}

#[tokio::test]
async fn scope_turn_tells_turns_apart_and_scope_session_does_not() {
    let first = event("fd-charge_card.json");
    let mut later_turn = first.clone();
    later_turn["inputText"] = json!("Same again please.");
    let turn = handler(MemoryStore::new(), demo(), &Config::default());
    assert_eq!(send(&turn, &first).await.outcome, Outcome::Executed);
    assert_eq!(send(&turn, &later_turn).await.outcome, Outcome::Executed);
    let session_config = Config {
        scope: Scope::Session,
        ..Config::default()
    };
    let session = handler(MemoryStore::new(), demo(), &session_config);
    assert_eq!(send(&session, &first).await.outcome, Outcome::Executed);
    assert_eq!(send(&session, &later_turn).await.outcome, Outcome::Replayed);
    // A caller-supplied step beats both, under a configurable attribute name.
    let step_config = Config {
        scope: Scope::Session,
        step_attribute: "my_step".into(),
        ..Config::default()
    };
    let stepped = handler(MemoryStore::new(), demo(), &step_config);
    let at = |step: &str| with_attrs(event("fd-charge_card.json"), json!({"my_step": step}));
    assert_eq!(send(&stepped, &at("1")).await.outcome, Outcome::Executed);
    assert_eq!(send(&stepped, &at("1")).await.outcome, Outcome::Replayed);
    assert_eq!(send(&stepped, &at("2")).await.outcome, Outcome::Executed);
}

#[tokio::test]
async fn a_policy_schema_overlays_the_declared_types() {
    let policies = PolicySet::parse(
        r#"{"tools": {"charge_card": {"schema": {"properties": {"currency": {"enum": ["USD", "EUR"]}}},
                                         "fields": {"line_items": "ignore"}}}}"#,
        false,
    )
    .unwrap();
    let config = Config {
        policies,
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), demo(), &config);
    let first = event("fd-charge_card.json");
    let mut variant = first.clone();
    variant["parameters"][2]["value"] = json!("usd");
    variant["parameters"][4]["value"] = json!("[\"SKU-9\"]");
    assert_eq!(send(&h, &first).await.outcome, Outcome::Executed);
    let replay = send(&h, &variant).await;
    assert_eq!(replay.outcome, Outcome::Replayed);
    assert!(
        replay.rules.contains(&"enum-case") && replay.rules.contains(&"field-ignored"),
        "{:?}",
        replay.rules
    );
}

#[tokio::test]
async fn declined_cards_are_cached_unless_configured_otherwise() {
    let declined = |ev: Value| {
        let mut ev = ev;
        ev["parameters"][0]["value"] = json!("cus_declined_1");
        ev
    };
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let first = send(&h, &declined(event("fd-charge_card.json"))).await;
    assert_eq!(state(&first).as_deref(), Some("FAILURE"));
    assert_eq!(first.outcome, Outcome::Executed);
    let again = send(&h, &declined(event("fd-charge_card.json"))).await;
    assert_eq!(again.outcome, Outcome::Replayed);
    assert_eq!(charges(h.dispatcher()), 1);

    let no_cache = Config {
        cache_failures: false,
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), demo(), &no_cache);
    for _ in 0..2 {
        let r = send(&h, &declined(event("fd-charge_card.json"))).await;
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::Executed, Some("FAILURE"))
        );
    }
    assert_eq!(charges(h.dispatcher()), 2);
    assert!(
        h.store()
            .get(&send(&h, &event("fd-refund.json")).await.key.unwrap())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_tool_reprompt_is_passed_back_and_never_cached() {
    // The demo tool answers REPROMPT for arguments it cannot read; reach it through shadow-free
    // enforce mode with a value the executor accepts but the tool does not (none exist by
    // design), so script the tool's reply instead.
    struct Reprompting(AtomicU32);
    impl Dispatcher for Reprompting {
        fn route(&self, _: &str, _: &str) -> Result<String, DispatchError> {
            Ok("r".into())
        }
        fn max_run_time(&self, _: &str) -> Duration {
            Duration::ZERO
        }
        async fn invoke(
            &self,
            _: &str,
            payload: Vec<u8>,
            _: Duration,
        ) -> Result<Vec<u8>, DispatchError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let ev: Value = serde_json::from_slice(&payload).unwrap();
            let reply_to = Envelope::parse(&ev).unwrap().reply_to;
            let reply = toolcall_dedup::bedrock::notice(
                &reply_to,
                toolcall_dedup::bedrock::ResponseState::Reprompt,
                400,
                &json!({"error": "amount over the limit"}),
            );
            Ok(serde_json::to_vec(&reply).unwrap())
        }
    }
    let h = handler(
        MemoryStore::new(),
        Reprompting(AtomicU32::new(0)),
        &Config::default(),
    );
    for _ in 0..2 {
        let r = send(&h, &event("fd-refund.json")).await;
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::Executed, Some("REPROMPT"))
        );
    }
    assert_eq!(h.dispatcher().0.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn no_route_is_a_failure_and_claims_nothing() {
    struct Nowhere;
    impl Dispatcher for Nowhere {
        fn route(&self, group: &str, tool: &str) -> Result<String, DispatchError> {
            Err(DispatchError::NoRoute {
                action_group: group.into(),
                tool: tool.into(),
            })
        }
        fn max_run_time(&self, _: &str) -> Duration {
            Duration::ZERO
        }
        async fn invoke(&self, _: &str, _: Vec<u8>, _: Duration) -> Result<Vec<u8>, DispatchError> {
            unreachable!("never routed")
        }
    }
    let h = handler(MemoryStore::new(), Nowhere, &Config::default());
    let r = send(&h, &event("openapi-refund.json")).await;
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, Some("FAILURE"))
    );
    assert_eq!(response(&r)["response"]["httpStatusCode"], 500);
    assert!(h.store().is_empty());
}

// ---------------------------------------------------------------------------------------------
// modes and observability

#[tokio::test]
async fn shadow_mode_executes_everything_and_counts_would_be_replays() {
    let (sink, lines) = Sink::memory();
    let config = Config {
        mode: Mode::Shadow,
        ..Config::default()
    };
    let h = Handler::new(
        MemoryStore::new(),
        demo(),
        &config,
        Telemetry::quiet()
            .with_sink(sink)
            .with_log_calls(LogCalls::Hashes),
    );
    let sequence = [
        "fd-charge_card.json",
        "fd-charge_card-retry.json",
        "fd-charge_card.json",
        "fd-charge_card-step3.json",
        "fd-charge_card-step4.json",
        "fd-charge_card-step4.json",
    ];
    let mut outcomes = Vec::new();
    for name in sequence {
        let r = send(&h, &event(name)).await;
        assert_eq!(
            state(&r),
            None,
            "{name}: shadow mode answers with the tool's reply"
        );
        outcomes.push(r.outcome);
    }
    let shadow = outcomes
        .iter()
        .filter(|o| **o == Outcome::ShadowReplay)
        .count();
    assert_eq!(shadow, 3, "the three retries: {outcomes:?}");
    assert_eq!(
        charges(h.dispatcher()),
        sequence.len(),
        "every call executed"
    );
    assert_eq!(
        h.store().len(),
        3,
        "claims are still recorded, one per distinct call"
    );
    let logged: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        logged
            .iter()
            .filter(|l| l["outcome"] == "shadow_replay")
            .count(),
        3
    );
}

#[tokio::test]
async fn shadow_mode_fails_open_when_the_store_is_down() {
    let store = Switchable::default();
    store.down.store(true, Ordering::SeqCst);
    let config = Config {
        mode: Mode::Shadow,
        ..Config::default()
    };
    let h = handler(store, demo(), &config);
    let r = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!((r.outcome, state(&r)), (Outcome::Executed, None));
    assert_eq!(charges(h.dispatcher()), 1);
}

#[tokio::test]
async fn off_mode_passes_the_event_through_untouched() {
    struct Echo(Mutex<Vec<Value>>);
    impl Dispatcher for Echo {
        fn route(&self, _: &str, _: &str) -> Result<String, DispatchError> {
            Ok("echo".into())
        }
        fn max_run_time(&self, _: &str) -> Duration {
            Duration::ZERO
        }
        async fn invoke(
            &self,
            t: &str,
            payload: Vec<u8>,
            timeout: Duration,
        ) -> Result<Vec<u8>, DispatchError> {
            self.0
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&payload).unwrap());
            demo().invoke(t, payload, timeout).await
        }
    }
    let config = Config {
        mode: Mode::Off,
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), Echo(Mutex::new(Vec::new())), &config);
    let ev = event("fd-charge_card.json");
    for _ in 0..2 {
        assert_eq!(send(&h, &ev).await.outcome, Outcome::Executed);
    }
    // Even arguments the executor would refuse reach the tool (which answers for itself).
    assert_eq!(
        send(&h, &event("bad-number-not-numeric.json"))
            .await
            .outcome,
        Outcome::Executed
    );
    assert_eq!(h.store().requests().total(), 0);
    let seen = h.dispatcher().0.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], ev, "forwarded unchanged, no dedup_key");
}

#[tokio::test]
async fn the_call_log_has_one_line_per_call_with_every_strategy_and_args_only_when_full() {
    for (log_calls, with_args) in [(LogCalls::Hashes, false), (LogCalls::Full, true)] {
        let (sink, lines) = Sink::memory();
        let h = Handler::new(
            MemoryStore::new(),
            demo(),
            &Config::default(),
            Telemetry::quiet().with_sink(sink).with_log_calls(log_calls),
        );
        for name in [
            "fd-charge_card.json",
            "fd-charge_card-retry.json",
            "fd-refund.json",
        ] {
            send(&h, &event(name)).await;
        }
        send(&h, &event("bad-number-not-numeric.json")).await;
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 3, "one line per keyed call: {lines:?}");
        let first: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(first["dedup_call"], 1);
        assert_eq!(first["run_id"], "sess-7f3c2a91-4b6e-4d1a-9c0e-2f5b8d1a6e34");
        assert!(first["step"].as_str().unwrap().starts_with("turn:"));
        assert_eq!(
            (first["tool"].as_str(), first["namespace"].as_str()),
            (Some("charge_card"), Some("K7QZ2M4RTB/payments"))
        );
        for s in ["raw", "canonical", "normalized", "scoped", "typed"] {
            assert_eq!(first["keys"][s].as_str().map(str::len), Some(32), "{s}");
        }
        let retry: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(retry["outcome"], "replayed");
        assert_eq!(retry["keys"]["typed"], first["keys"]["typed"]);
        assert_ne!(retry["keys"]["raw"], first["keys"]["raw"]);
        assert!(
            retry["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r == "key-order")
        );
        assert_eq!(first.get("args").is_some(), with_args, "{log_calls:?}");
        if with_args {
            assert!(first["args"].as_str().unwrap().contains("cus_8842"));
        } else {
            assert!(
                !lines[0].contains("cus_8842"),
                "argument values leaked into a hashes line"
            );
        }
    }
}

#[tokio::test]
async fn emf_lines_count_each_outcome() {
    let (sink, lines) = Sink::memory();
    let h = Handler::new(
        MemoryStore::new(),
        demo(),
        &Config::default(),
        Telemetry::quiet()
            .with_sink(sink)
            .with_emf(Some("TestNS".into())),
    );
    for name in [
        "fd-charge_card.json",
        "fd-charge_card-retry.json",
        "bad-missing-session.json",
    ] {
        send(&h, &event(name)).await;
    }
    let docs: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 3);
    assert_eq!(
        docs[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "TestNS"
    );
    let totals = |name: &str| docs.iter().map(|d| d[name].as_u64().unwrap()).sum::<u64>();
    assert_eq!(
        (
            totals("executed"),
            totals("replayed"),
            totals("bad_request")
        ),
        (1, 1, 1)
    );
    assert!(
        !lines.lock().unwrap().iter().any(|l| l.contains("cus_8842")),
        "argument values in EMF"
    );
}

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
    for kind in CRASH_KINDS {
        let clock = ManualClock::starting_now();
        let h = handler(
            MemoryStore::new().with_clock(clock.clone()),
            Scripted::new(vec![Act::RunThenFail(kind), Act::Run]),
            &Config::default(),
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
        ("ValidationError", Config::default()),
        ("InvalidInput", Config::default()),
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
async fn a_malformed_tool_reply_is_a_tool_error_and_is_not_stored() {
    let h = handler(
        MemoryStore::new(),
        Scripted::new(vec![Act::Malformed]),
        &Config::default(),
    );
    let ev = event("openapi-charge_card.json");
    let r = send(&h, &ev).await;
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, Some("REPROMPT"))
    );
    assert_eq!(response(&r)["response"]["httpStatusCode"], 502);
    assert_eq!(send(&h, &ev).await.outcome, Outcome::Executed);
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
        s.answer_margin = Duration::from_millis(1500);
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
    let store = Switchable::default();
    let h = handler(store.clone(), Scripted::new(vec![]), &Config::default());
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::Executed
    );
    store.down.store(true, Ordering::SeqCst);
    for name in [
        "fd-charge_card-retry.json",
        "fd-refund.json",
        "openapi-create_ticket.json",
    ] {
        let r = send(&h, &event(name)).await;
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::StoreError, Some("REPROMPT")),
            "{name}"
        );
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
    store.down.store(false, Ordering::SeqCst);
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
        ..DynamoDbConfig::new(servers::unique_table())
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
        assert_eq!(
            (r.outcome, state(&r).as_deref()),
            (Outcome::StoreError, Some("REPROMPT")),
            "{name}"
        );
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
        stored.result.as_deref(),
        Some(taken_over.response.as_ref().unwrap().get().as_bytes())
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

// ---------------------------------------------------------------------------------------------
// dedup replay

fn dedup() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dedup"));
    for (var, _) in std::env::vars() {
        if var.starts_with("DEDUP_") && !var.starts_with("DEDUP_TEST_") || var == "DEMO_LEDGER" {
            cmd.env_remove(var);
        }
    }
    cmd
}

fn summary(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().last().unwrap_or_else(|| panic!("no output"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {text}"))
}

fn run_replay(cmd: &mut Command) -> (Value, String, String) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "dedup replay failed: {stderr}");
    (summary(&out.stdout), stdout, stderr)
}

#[test]
fn dedup_replay_runs_every_event_file_with_zero_configuration() {
    let mut files: Vec<PathBuf> = event_files().iter().map(|n| events_dir().join(n)).collect();
    files.sort();
    let (s, _, stderr) = run_replay(dedup().arg("replay").args(&files));
    assert_eq!(
        s,
        json!({"events": 17, "invocations": 17, "executed": 9, "replayed": 2, "waited": 0,
               "in_progress": 0, "errors": 6, "shadow_replays": 0}),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad-number-not-numeric.json: bad_request 1"),
        "{stderr}"
    );
    let pair = [
        events_dir().join("fd-charge_card.json"),
        events_dir().join("fd-charge_card-retry.json"),
    ];
    let (s, _, _) = run_replay(dedup().arg("replay").args(&pair));
    assert_eq!(
        (s["executed"].as_u64(), s["replayed"].as_u64()),
        (Some(1), Some(1))
    );
    let repeat = [
        events_dir().join("fd-charge_card-step3.json"),
        events_dir().join("fd-charge_card-step4.json"),
    ];
    let (s, _, _) = run_replay(dedup().args(["replay", "--repeat", "3"]).args(&repeat));
    assert_eq!(
        (s["executed"].as_u64(), s["replayed"].as_u64()),
        (Some(2), Some(4))
    );
}

#[test]
fn dedup_replay_writes_the_call_log_before_the_summary_and_the_ledger_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ledger_path = dir.path().join("ledger.jsonl");
    let pair = [
        events_dir().join("fd-charge_card.json"),
        events_dir().join("fd-charge_card-retry.json"),
    ];
    let (s, stdout, _) = run_replay(
        dedup()
            .env("DEDUP_LOG_CALLS", "hashes")
            .env("DEMO_LEDGER", &ledger_path)
            .args(["replay", "--repeat", "2"])
            .args(&pair),
    );
    assert_eq!(
        (s["executed"].as_u64(), s["replayed"].as_u64()),
        (Some(1), Some(3))
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "4 call lines + the summary");
    assert!(lines[..4].iter().all(|l| l["dedup_call"] == 1));
    assert_eq!(
        toolcall_dedup::demo::read_ledger(&ledger_path)
            .unwrap()
            .len(),
        1
    );
    // Shadow mode through the environment, exactly as the Lambda reads it.
    let (s, _, _) = run_replay(
        dedup()
            .env("DEDUP_MODE", "shadow")
            .args(["replay", "--repeat", "2"])
            .args(&pair),
    );
    assert_eq!(
        (s["executed"].as_u64(), s["shadow_replays"].as_u64()),
        (Some(1), Some(3))
    );
    // A bad variable is a loud usage error naming it.
    let out = dedup()
        .env("DEDUP_SCOPE", "turns")
        .arg("replay")
        .args(&pair)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEDUP_SCOPE"));
}

#[test]
fn dedup_replay_at_50_way_concurrency_executes_once_on_each_dynamodb_server() {
    for backend in [Backend::Moto, Backend::Dynalite] {
        let table = servers::unique_table();
        let (s, _, stderr) = run_replay(dedup().args([
            "replay",
            "--store",
            "dynamodb",
            "--endpoint",
            &backend.endpoint(),
            "--table",
            &table,
            "--create-table",
            "--concurrency",
            "50",
            "--repeat",
            "50",
            events_dir().join("fd-charge_card.json").to_str().unwrap(),
        ]));
        assert_eq!(s["executed"], 1, "{backend:?}: {s} {stderr}");
        assert_eq!(s["invocations"], 50, "{backend:?}");
        assert_eq!(
            s["replayed"].as_u64().unwrap() + s["waited"].as_u64().unwrap(),
            49,
            "{backend:?}: every other invocation replayed or waited: {s}"
        );
        assert!(stderr.contains("created"), "{stderr}");
    }
}

#[tokio::test]
async fn many_concurrent_identical_calls_through_the_handler_execute_once() {
    let h = Arc::new(handler(MemoryStore::new(), demo(), &Config::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let h = h.clone();
        let name = if i % 2 == 0 {
            "fd-charge_card.json"
        } else {
            "fd-charge_card-retry.json"
        };
        let ev = event(name);
        tasks.spawn(async move { send(&h, &ev).await.outcome });
    }
    let mut executed = 0;
    while let Some(outcome) = tasks.join_next().await {
        match outcome.unwrap() {
            Outcome::Executed => executed += 1,
            Outcome::Replayed | Outcome::Waited => {}
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(executed, 1);
    assert_eq!(charges(h.dispatcher()), 1);
}

// ---------------------------------------------------------------------------------------------
// the aws-sdk-lambda dispatcher against a fake Lambda invoke endpoint

/// One scripted reply of the fake Lambda: status, extra headers, body. Status 0 closes the
/// connection instead of answering: the invoke was delivered, its response is lost.
type FakeReply = (u16, Vec<(&'static str, &'static str)>, Vec<u8>);

/// A fake Lambda endpoint. `Invoke` requests get the next scripted reply and are recorded (function
/// name, payload); `GetFunctionConfiguration` requests get the configuration reply of their
/// function (404 for an unknown one) and are counted.
struct FakeLambda {
    url: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    configurations_read: Arc<AtomicU32>,
}

impl FakeLambda {
    async fn start(replies: Vec<FakeReply>) -> FakeLambda {
        FakeLambda::with_configurations(replies, Vec::new()).await
    }

    async fn with_configurations(
        replies: Vec<FakeReply>,
        configurations: Vec<(&'static str, Value)>,
    ) -> FakeLambda {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let configurations_read = Arc::new(AtomicU32::new(0));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let configurations = Arc::new(configurations);
        tokio::spawn({
            let (seen, configurations_read) = (seen.clone(), configurations_read.clone());
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (seen, replies) = (seen.clone(), replies.clone());
                    let (configurations, configurations_read) =
                        (configurations.clone(), configurations_read.clone());
                    tokio::spawn(async move {
                        let mut reader = BufReader::new(stream);
                        loop {
                            let mut request_line = String::new();
                            if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let mut length = 0usize;
                            loop {
                                let mut header = String::new();
                                reader.read_line(&mut header).await.unwrap();
                                if header.trim().is_empty() {
                                    break;
                                }
                                if let Some((name, value)) = header.split_once(':') {
                                    if name.eq_ignore_ascii_case("content-length") {
                                        length = value.trim().parse().unwrap();
                                    }
                                }
                            }
                            let mut body = vec![0; length];
                            reader.read_exact(&mut body).await.unwrap();
                            let function = request_line
                                .split('/')
                                .nth(3)
                                .unwrap_or_default()
                                .to_string();
                            let (status, headers, payload) = if request_line.starts_with("GET ") {
                                configurations_read.fetch_add(1, Ordering::SeqCst);
                                match configurations.iter().find(|(f, _)| *f == function) {
                                    Some((_, conf)) => (200, vec![], conf.to_string().into_bytes()),
                                    None => (
                                        404,
                                        vec![("x-amzn-errortype", "ResourceNotFoundException")],
                                        br#"{"Type":"User","Message":"Function not found"}"#
                                            .to_vec(),
                                    ),
                                }
                            } else {
                                seen.lock().unwrap().push((
                                    function,
                                    serde_json::from_slice(&body).unwrap_or_default(),
                                ));
                                replies.lock().unwrap().pop_front().unwrap_or((
                                    500,
                                    vec![],
                                    b"{}".to_vec(),
                                ))
                            };
                            if status == 0 {
                                return;
                            }
                            let mut response = format!(
                                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n",
                                payload.len()
                            );
                            for (k, v) in headers {
                                response.push_str(&format!("{k}: {v}\r\n"));
                            }
                            response.push_str("content-type: application/json\r\n\r\n");
                            let stream = reader.get_mut();
                            stream.write_all(response.as_bytes()).await.unwrap();
                            stream.write_all(&payload).await.unwrap();
                        }
                    });
                }
            }
        });
        FakeLambda {
            url,
            seen,
            configurations_read,
        }
    }
}

async fn lambda_dispatcher(url: &str, routes: &str) -> toolcall_dedup::dispatch::LambdaDispatcher {
    let client = toolcall_dedup::dispatch::build_client(Some(url)).await;
    toolcall_dedup::dispatch::LambdaDispatcher::new(
        &client,
        toolcall_dedup::config::Routes::parse(routes).unwrap(),
    )
}

#[tokio::test]
async fn the_lambda_dispatcher_routes_forwards_the_key_and_maps_function_errors() {
    let tool_reply = serde_json::to_vec(&demo().handle(&event("fd-refund.json")).unwrap()).unwrap();
    let fake = FakeLambda::start(vec![
        (
            200,
            vec![("x-amz-function-error", "Unhandled")],
            br#"{"errorType":"ValidationError","errorMessage":"amount must be positive"}"#.to_vec(),
        ),
        (
            429,
            vec![("x-amzn-errortype", "TooManyRequestsException")],
            br#"{"message":"Rate exceeded"}"#.to_vec(),
        ),
        (200, vec![], tool_reply.clone()),
    ])
    .await;
    let dispatcher = lambda_dispatcher(
        &fake.url,
        r#"{"payments/refund":"refund-fn","*":"other-fn"}"#,
    )
    .await;
    let h = handler(MemoryStore::new(), dispatcher, &Config::default());
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
            .contains("ValidationError"),
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
        lambda_dispatcher(closed, r#"{"*":"fn"}"#).await,
        &Config::default(),
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
        lambda_dispatcher(&fake.url, r#"{"*":"fn"}"#).await,
        &Config::default(),
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
    let dispatcher = lambda_dispatcher(&fake.url, routes).await;
    assert_eq!(
        dispatcher.max_run_time("refund-fn"),
        Duration::from_secs(900),
        "until it is looked up"
    );
    dispatcher.clone().look_up_timeouts().await;
    assert_eq!(
        dispatcher.max_run_time("refund-fn"),
        Duration::from_secs(120)
    );
    assert_eq!(
        dispatcher.max_run_time("stated-fn"),
        Duration::from_secs(30)
    );
    assert_eq!(
        dispatcher.max_run_time("unknown-fn"),
        Duration::from_secs(900),
        "a failed lookup assumes Lambda's maximum"
    );
    assert_eq!(
        fake.configurations_read.load(Ordering::SeqCst),
        2,
        "looked up once each, and not for the route that states its timeout"
    );

    let clock = ManualClock::starting_now();
    let h = handler(
        MemoryStore::new().with_clock(clock.clone()),
        dispatcher,
        &Config::default(),
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
