//! The handler end to end in-process, by event: every event file, retries and deliberate repeats,
//! scope, policies, tool replies, routes; the modes (shadow, off) and what is reported (call log, EMF).

use crate::fixture;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::servers;
use fixture::*;
use serde_json::{Value, json};
use toolcall_dedup::config::{Config, LogCalls, Mode, Scope};
use toolcall_dedup::dispatch::{DispatchError, Dispatcher, Route, Routes};
use toolcall_dedup::handler::{Handled, Handler, HandlerError, Invocation};
use toolcall_dedup::internals::bedrock::ActionGroupEvent;
use toolcall_dedup::internals::port::Forward;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::stand_ins::demo::{DemoTool, InProcess, StandIn};
use toolcall_dedup::store::{ManualClock, MemoryStore, Store};
use toolcall_dedup::telemetry::{Outcome, Sink, Telemetry};

// ---------------------------------------------------------------------------------------------
// events

#[tokio::test]
async fn every_valid_event_file_parses_and_every_bad_one_is_rejected_with_a_clear_error() {
    for name in event_files() {
        let ev = event(&name);
        let checked = ActionGroupEvent::parse(&ev).and_then(|e| {
            let call = e.tool_call()?;
            Ok((call.args.clone(), call.tool().to_string()))
        });
        if name.starts_with("bad-") {
            let err = checked.expect_err(&name);
            assert!(err.to_string().len() > 15, "{name}: unclear error {err}");
        } else {
            let (args, tool) = checked.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!args.is_empty() && !tool.is_empty(), "{name}");
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
        ("fd-collaborator-charge_card.json", Outcome::Executed),
        ("fd-collaborator-charge_card-retry.json", Outcome::Replayed),
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
        6,
        "charge, step3, step4, drift, collaborator, openapi charge"
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
async fn a_declined_card_is_stored_and_replayed_never_charged_again() {
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
}

/// An OpenAPI tool that answers every call with `status` and no `responseState`; counts calls.
struct AnswersWith {
    status: u16,
    calls: AtomicU32,
}

impl StandIn for AnswersWith {
    async fn answer(
        &self,
        _: &str,
        forward: Forward,
        _: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let ev: Value = serde_json::from_slice(&forward.payload).unwrap();
        let reply = json!({"messageVersion": "1.0", "response": {
            "actionGroup": ev["actionGroup"], "apiPath": ev["apiPath"], "httpMethod": ev["httpMethod"],
            "httpStatusCode": self.status,
            "responseBody": {"application/json": {"body": "{\"status\": \"answered\"}"}}}});
        Ok(serde_json::to_vec(&reply).unwrap())
    }
}

#[tokio::test]
async fn an_openapi_status_decides_by_what_it_says_the_tool_did() {
    // 5xx: failed while acting, stored and replayed (for the default failure retention; a bare
    // 503 too, issue 51: a status is no word that a retry is safe). 4xx: refused before acting,
    // released, so an identical retry runs. 409 and 429: "not now", kept until the lease ends.
    for (status, retry, calls) in [
        (500, Outcome::Replayed, 1),
        (503, Outcome::Replayed, 1),
        (400, Outcome::Executed, 2),
        (422, Outcome::Executed, 2),
        (404, Outcome::Executed, 2),
        (409, Outcome::InProgress, 1),
        (429, Outcome::InProgress, 1),
    ] {
        let tool = AnswersWith {
            status,
            calls: AtomicU32::new(0),
        };
        let h = handler(MemoryStore::new(), InProcess::new(tool), &Config::default())
            .with_settings(|s| s.wait = Duration::ZERO);
        let ev = event("openapi-charge_card.json");
        let first = send(&h, &ev).await;
        assert_eq!(first.outcome, Outcome::Executed, "{status}");
        let again = send(&h, &ev).await;
        assert_eq!(again.outcome, retry, "{status}");
        assert_eq!(
            h.dispatcher().calls.load(Ordering::SeqCst),
            calls,
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_tool_reprompt_is_passed_back_and_never_cached() {
    // The demo tool answers REPROMPT for arguments it cannot read; reach it through shadow-free
    // enforce mode with a value the executor accepts but the tool does not (none exist by
    // design), so script the tool's reply instead.
    struct Reprompting(AtomicU32);
    impl StandIn for Reprompting {
        async fn answer(
            &self,
            _: &str,
            forward: Forward,
            _: Duration,
        ) -> Result<Vec<u8>, DispatchError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let ev: Value = serde_json::from_slice(&forward.payload).unwrap();
            let reply_to = ActionGroupEvent::parse(&ev).unwrap().reply_to;
            let reply = toolcall_dedup::internals::bedrock::notice(
                &reply_to,
                toolcall_dedup::internals::bedrock::ResponseState::Reprompt,
                400,
                &json!({"error": "amount over the limit"}),
            );
            Ok(serde_json::to_vec(&reply).unwrap())
        }
    }
    let h = handler(
        MemoryStore::new(),
        InProcess::new(Reprompting(AtomicU32::new(0))),
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
        fn route(&self, _: &Routes, group: &str, tool: &str) -> Result<Route, DispatchError> {
            Err(DispatchError::NoRoute {
                action_group: group.into(),
                tool: tool.into(),
            })
        }
        async fn invoke(&self, _: &str, _: Vec<u8>, _: Duration) -> Result<Vec<u8>, DispatchError> {
            unreachable!("never routed")
        }
    }
    let h = handler(MemoryStore::new(), Nowhere, &Config::default());
    let r = send(&h, &event("openapi-refund.json")).await;
    // An OpenAPI answer has no responseState (documented for function details only).
    assert_eq!(
        (r.outcome, state(&r).as_deref()),
        (Outcome::ToolError, None)
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

/// Shadow mode never refuses: an event whose parameters cannot be read and a call whose
/// arguments the keyer refuses (past its 256 KiB limit) both run unkeyed. Enforce mode refuses
/// both without running the tool.
#[tokio::test]
async fn shadow_mode_runs_what_enforce_mode_refuses() {
    let mut too_large = event("fd-charge_card.json");
    too_large["parameters"].as_array_mut().unwrap().push(json!({
        "name": "note", "type": "string", "value": "x".repeat(300 * 1024),
    }));
    let unreadable = event("bad-number-not-numeric.json");
    for mode in [Mode::Enforce, Mode::Shadow] {
        let config = Config {
            mode,
            ..Config::default()
        };
        let h = handler(MemoryStore::new(), Scripted::new(vec![]), &config);
        for (name, ev) in [("unreadable", &unreadable), ("too large", &too_large)] {
            let r = send(&h, ev).await;
            let expected = match mode {
                Mode::Shadow => Outcome::Executed,
                _ => Outcome::BadRequest,
            };
            assert_eq!(r.outcome, expected, "{mode:?}, {name}");
        }
        let runs = if mode == Mode::Shadow { 2 } else { 0 };
        assert_eq!(h.dispatcher().invokes(), runs, "{mode:?}");
        assert!(
            h.store().is_empty(),
            "{mode:?}: unkeyed calls claim nothing"
        );
    }
}

#[tokio::test]
async fn shadow_mode_fails_open_when_the_store_is_down() {
    let store = servers::Faulty::new(MemoryStore::new());
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
    impl StandIn for Echo {
        async fn answer(
            &self,
            t: &str,
            forward: Forward,
            timeout: Duration,
        ) -> Result<Vec<u8>, DispatchError> {
            self.0
                .lock()
                .unwrap()
                .push(serde_json::from_slice(&forward.payload).unwrap());
            demo().answer(t, forward, timeout).await
        }
    }
    let config = Config {
        mode: Mode::Off,
        ..Config::default()
    };
    let h = handler(
        MemoryStore::new(),
        InProcess::new(Echo(Mutex::new(Vec::new()))),
        &config,
    );
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
            (Some("charge_card"), Some("bedrock:K7QZ2M4RTB/payments"))
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
// entry points

/// The answer of a handled AgentCore or envelope call, parsed.
fn answer(h: &Handled) -> Value {
    match &h.response {
        Ok(raw) => serde_json::from_str(raw.get()).unwrap(),
        Err(e) => panic!("expected an answer, got the Lambda error {e}"),
    }
}

#[tokio::test]
async fn an_event_no_entry_point_recognises_is_a_lambda_error_naming_the_three() {
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    for event in [json!({"hello": "world"}), json!([1]), json!("text")] {
        let handled = send(&h, &event).await;
        assert_eq!(handled.outcome, Outcome::BadRequest);
        let message = match &handled.response {
            Err(e @ HandlerError::InvalidEvent(_)) => e.to_string(),
            other => panic!("{event}: {other:?}"),
        };
        for expected in [
            "custom.bedrockAgentCoreToolName",
            "\"actionGroup\"",
            "\"tool\"",
        ] {
            assert!(message.contains(expected), "{message}");
        }
    }
    // An AgentCore client context wins over the event's shape: these arguments have a "tool".
    let custom = client_context("agentcore/charge_card.json").unwrap();
    let handled = h
        .handle_with_context(
            &json!({"tool": "hammer", "qty": 1}),
            &Invocation::default(),
            Some(&custom),
        )
        .await;
    assert_eq!(handled.outcome, Outcome::Executed);
    assert_eq!(
        answer(&handled)["tool"],
        "charge_card",
        "the Gateway's tool ran"
    );
    assert_eq!(h.store().requests().total(), 2, "claimed and completed");
}

#[tokio::test]
async fn agentcore_and_envelope_answers_are_the_tools_reply_and_their_own_notices() {
    let store = servers::Faulty::new(MemoryStore::new());
    let down = store.down.clone();
    let tool = demo();
    let h = handler(store, tool, &Config::default());
    let custom = client_context("agentcore/charge_card.json");
    let args = event("agentcore/charge_card.json");
    let first = h
        .handle_with_context(&args, &Invocation::default(), custom.as_ref())
        .await;
    let retry = h
        .handle_with_context(
            &event("agentcore/charge_card-retry.json"),
            &Invocation::default(),
            custom.as_ref(),
        )
        .await;
    assert_eq!(
        (first.outcome, retry.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );
    assert_eq!(
        first.response.as_ref().unwrap().get(),
        retry.response.as_ref().unwrap().get(),
        "the replay is the tool's reply byte for byte"
    );
    let entry = &ledger(h.dispatcher())[0];
    assert_eq!(
        entry["dedup_key"].as_str(),
        first.key.as_deref(),
        "the tool got the key"
    );
    assert_eq!(
        entry["arguments"], args,
        "and the arguments as the Gateway sent them"
    );

    let envelope = event("envelope/charge_card.json");
    let executed = answer(&send(&h, &envelope).await);
    assert_eq!(executed["dedup"]["outcome"], "executed");
    assert!(
        executed["result"]["receipt_id"]
            .as_str()
            .unwrap()
            .starts_with("ch_")
    );
    down.store(true, Ordering::SeqCst);
    for (handled, kind) in [
        (
            send(&h, &event("envelope/charge_card-step8.json")).await,
            "envelope",
        ),
        (
            h.handle_with_context(
                &event("agentcore/charge_card-step2.json"),
                &Invocation::default(),
                client_context("agentcore/charge_card-step2.json").as_ref(),
            )
            .await,
            "agentcore",
        ),
    ] {
        assert_eq!(handled.outcome, Outcome::StoreError, "{kind}");
        let body = answer(&handled);
        let (status, message) = match kind {
            "envelope" => {
                assert!(body.get("result").is_none());
                assert_eq!(body["dedup"]["outcome"], "store_error");
                (&body["error"]["type"], &body["error"]["message"])
            }
            _ => (&body["status"], &body["message"]),
        };
        assert_eq!(status, "dedup_unavailable", "{body}");
        assert!(message.as_str().unwrap().contains("NOT executed"), "{body}");
    }
    assert_eq!(
        charges(h.dispatcher()),
        2,
        "nothing ran while the store was down"
    );
}

/// A sessionless Gateway call (no session id, no run argument) under each `DEDUP_SESSIONLESS`:
/// the default runs it every time, counted as `sessionless` in EMF and without a store request;
/// `gateway_scope` dedups it by gateway and target; `refuse` answers `invalid_event`.
async fn sessionless_calls_follow_the_setting<S: Store>([first, second, third]: [S; 3]) {
    let args = event("agentcore/sessionless-refund.json");
    let custom = client_context("agentcore/sessionless-refund.json");
    let (sink, lines) = Sink::memory();
    let h = Handler::new(
        first,
        demo(),
        &Config::default(),
        Telemetry::quiet()
            .with_sink(sink)
            .with_emf(Some("NS".into())),
    );
    assert_eq!(twice(&h, &args, &custom).await, [Outcome::Sessionless; 2]);
    assert_eq!(charges_of(&h, "refund"), 2, "pass-through runs every call");
    assert_eq!(h.store().requests().total(), 0, "nothing was claimed");
    let counted: u64 = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sessionless"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(counted, 2, "each sessionless call is a metric");

    let config = |setting: &str| {
        Config::from_lookup(
            |v| (v == "DEDUP_SESSIONLESS").then(|| setting.to_string()),
            toolcall_dedup::config::StoreKind::Memory,
        )
        .unwrap()
    };
    let h = handler(second, demo(), &config("gateway_scope"));
    assert_eq!(
        twice(&h, &args, &custom).await,
        [Outcome::Executed, Outcome::Replayed]
    );
    assert_eq!(charges_of(&h, "refund"), 1);

    let h = handler(third, demo(), &config("refuse"));
    assert_eq!(twice(&h, &args, &custom).await, [Outcome::BadRequest; 2]);
    assert_eq!(charges_of(&h, "refund"), 0);
    assert_eq!(h.store().requests().total(), 0);
}

async fn twice<S: Store>(
    h: &Handler<S, DemoTool>,
    args: &Value,
    custom: &Option<toolcall_dedup::handler::ClientContext>,
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let handled = h
            .handle_with_context(args, &Invocation::default(), custom.as_ref())
            .await;
        outcomes.push(handled.outcome);
    }
    outcomes
}

fn charges_of<S: Store>(h: &Handler<S, DemoTool>, tool: &str) -> usize {
    ledger(h.dispatcher())
        .iter()
        .filter(|e| e["tool"].as_str() == Some(tool))
        .count()
}

#[tokio::test]
async fn sessionless_calls_follow_the_setting_on_memory() {
    sessionless_calls_follow_the_setting([(); 3].map(|()| MemoryStore::new())).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn sessionless_calls_follow_the_setting_on_moto() {
    let clock = toolcall_dedup::store::ManualClock::starting_now;
    let moto = servers::Backend::Moto;
    sessionless_calls_follow_the_setting([
        servers::dynamodb_store(moto, clock()).await,
        servers::dynamodb_store(moto, clock()).await,
        servers::dynamodb_store(moto, clock()).await,
    ])
    .await;
}

/// `ttl_seconds` in a tool's policy sets how long that tool's completed calls replay, on memory
/// and moto; the other tools keep `DEDUP_TTL_SECONDS`.
async fn a_tools_ttl_seconds_sets_its_records_life<S: Store>(store: S) {
    let policy = r#"{"tools": {"charge_card": {"ttl_seconds": 1000}}}"#;
    let config = Config {
        policies: PolicySet::parse(policy, false).unwrap(),
        ..Config::default()
    };
    let h = handler(store, demo(), &config);
    for (name, life_s) in [
        ("fd-charge_card.json", 1_000),
        ("fd-refund.json", config.ttl.as_secs() as i64),
    ] {
        let before_s = h.store().now_ms().div_euclid(1000);
        let handled = send(&h, &event(name)).await;
        assert_eq!(handled.outcome, Outcome::Executed, "{name}");
        let record = h.store().get(&handled.key.unwrap()).await.unwrap().unwrap();
        let after_s = h.store().now_ms().div_euclid(1000);
        assert!(
            (before_s + life_s..=after_s + life_s).contains(&record.expires_at_s),
            "{name}: expires at {} for a life of {life_s} s",
            record.expires_at_s
        );
    }
}

#[tokio::test]
async fn a_tools_ttl_seconds_sets_its_records_life_on_memory() {
    a_tools_ttl_seconds_sets_its_records_life(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_tools_ttl_seconds_sets_its_records_life_on_moto() {
    let clock = toolcall_dedup::store::ManualClock::starting_now();
    a_tools_ttl_seconds_sets_its_records_life(
        servers::dynamodb_store(servers::Backend::Moto, clock).await,
    )
    .await;
}

/// A function-details tool that answers every call with a Bedrock `FAILURE`; counts calls.
struct FailsWhileActing {
    calls: AtomicU32,
}

impl StandIn for FailsWhileActing {
    async fn answer(
        &self,
        _: &str,
        forward: Forward,
        _: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let ev: Value = serde_json::from_slice(&forward.payload).unwrap();
        let reply = json!({"messageVersion": "1.0", "response": {
            "actionGroup": ev["actionGroup"], "function": ev["function"],
            "functionResponse": {"responseState": "FAILURE",
                "responseBody": {"TEXT": {"body": "the payment provider answered 502"}}}}});
        Ok(serde_json::to_vec(&reply).unwrap())
    }
}

/// Issue 51: what a Bedrock `FAILURE` does under each tool policy, on one clock the test moves.
/// `(policy, seconds later, whether the repeat runs the tool again)` for one call and its repeat.
async fn a_failure_replays_as_the_claims_rule_says<S: Store>(stores: [(S, ManualClock); 5]) {
    let default_ttl = Config::default().ttl.as_secs() as i64;
    let cases = [
        // No policy: the default failure retention (60 s) absorbs a burst, then the call runs.
        (r#"{}"#, 59, false),
        (r#"{}"#, 61, true),
        // A destructive tool (at most once) replays its failure for the whole retention.
        (
            r#"{"tools": {"charge_card": {"destructive": true}}}"#,
            default_ttl - 1,
            false,
        ),
        // `failures = "retry"`: nothing is pinned, the repeat runs at once.
        (
            r#"{"tools": {"charge_card": {"failures": "retry"}}}"#,
            0,
            true,
        ),
        // A retention of its own.
        (
            r#"{"tools": {"charge_card": {"failure_ttl_seconds": 5}}}"#,
            6,
            true,
        ),
    ];
    for ((policy, later_s, runs_again), (store, clock)) in cases.into_iter().zip(stores) {
        let config = Config {
            policies: PolicySet::parse(policy, false).unwrap(),
            ..Config::default()
        };
        let tool = FailsWhileActing {
            calls: AtomicU32::new(0),
        };
        let h = handler(store, InProcess::new(tool), &config);
        let ev = event("fd-charge_card.json");
        let first = send(&h, &ev).await;
        assert_eq!(first.outcome, Outcome::Executed, "{policy}");
        let soon = send(&h, &ev).await;
        let expected = if policy.contains("retry") {
            Outcome::Executed
        } else {
            Outcome::Replayed
        };
        assert_eq!(soon.outcome, expected, "{policy}: at once");
        let calls_before = h.dispatcher().calls.load(Ordering::SeqCst);
        clock.advance(Duration::from_secs(later_s as u64));
        let later = send(&h, &ev).await;
        let ran = h.dispatcher().calls.load(Ordering::SeqCst) > calls_before;
        assert_eq!(
            ran, runs_again,
            "{policy}: {later_s} s later ({:?})",
            later.outcome
        );
    }
}

#[tokio::test]
async fn a_failure_replays_as_the_claims_rule_says_on_memory() {
    let clock = ManualClock::starting_now;
    a_failure_replays_as_the_claims_rule_says([(); 5].map(|()| {
        let clock = clock();
        (MemoryStore::new().with_clock(clock.clone()), clock)
    }))
    .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_failure_replays_as_the_claims_rule_says_on_moto() {
    let moto = servers::Backend::Moto;
    let mut stores = Vec::new();
    for _ in 0..5 {
        let clock = ManualClock::starting_now();
        stores.push((servers::dynamodb_store(moto, clock.clone()).await, clock));
    }
    let stores: [_; 5] = stores.try_into().unwrap_or_else(|_| unreachable!());
    a_failure_replays_as_the_claims_rule_says(stores).await;
}

/// Issue 51: a replay says so, with the key and when the call first ran, on every door: the
/// envelope's `dedup` member and (under `DEDUP_REPLAY_MARKER`) Bedrock's prompt session attributes
/// and a Lambda-target object reply's `toolcall-dedup` member. A fresh run carries no marker there;
/// without the setting the Bedrock and Lambda-target answers are the tool's, byte for byte.
#[tokio::test]
async fn a_replay_is_marked_where_the_door_allows_with_when_the_call_first_ran() {
    for marker in [false, true] {
        let config = Config {
            replay_marker: marker,
            ..Config::default()
        };
        let h = handler(MemoryStore::new(), demo(), &config);
        let ev = event("fd-charge_card.json");
        let first = response(&send(&h, &ev).await);
        let again = send(&h, &ev).await;
        assert_eq!(again.outcome, Outcome::Replayed);
        let again = response(&again);
        let prompt = &again["promptSessionAttributes"];
        assert!(
            first["promptSessionAttributes"]
                .get("toolcall-dedup.outcome")
                .is_none()
        );
        if marker {
            assert_eq!(prompt["toolcall-dedup.outcome"], "replayed", "{again}");
            assert_eq!(
                prompt["toolcall-dedup.key"].as_str().map(str::len),
                Some(32)
            );
            let first_ran = prompt["toolcall-dedup.first_ran"].as_str().unwrap();
            assert!(
                toolcall_dedup::key::rfc3339_epoch_ms(first_ran).is_some(),
                "{first_ran}"
            );
        } else {
            assert_eq!(
                again["response"], first["response"],
                "unmarked: the tool's reply"
            );
            assert!(prompt.get("toolcall-dedup.outcome").is_none(), "{again}");
        }

        // The Lambda-target door: a member of the tool's object reply.
        let gateway = event("agentcore/charge_card.json");
        let context = client_context("agentcore/charge_card.json");
        let invocation = Invocation::default();
        let call = || h.handle_with_context(&gateway, &invocation, context.as_ref());
        let first = response(&call().await);
        let again = response(&call().await);
        assert!(first.get("toolcall-dedup").is_none(), "{first}");
        match marker {
            true => {
                assert_eq!(again["toolcall-dedup"]["outcome"], "replayed", "{again}");
                assert!(again["toolcall-dedup"]["first_ran"].is_string(), "{again}");
                let mut unmarked = again.clone();
                unmarked.as_object_mut().unwrap().remove("toolcall-dedup");
                assert_eq!(unmarked, first, "the marker is the only change");
            }
            false => assert_eq!(again, first),
        }
    }
    // The envelope always says what happened; a replay says when the call first ran.
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let ev = event("envelope/charge_card-key.json");
    let first = response(&send(&h, &ev).await);
    let again = response(&send(&h, &ev).await);
    assert_eq!(first["dedup"]["outcome"], "executed", "{first}");
    assert!(first["dedup"].get("first_ran").is_none(), "{first}");
    assert_eq!(again["dedup"]["outcome"], "replayed", "{again}");
    assert!(again["dedup"]["first_ran"].is_string(), "{again}");
}

/// Prompt session attributes last the whole turn, so a marker a replay gave one call comes back in
/// the next call's event: a fresh run must never say it was a replay, and a replay says its own.
#[tokio::test]
async fn a_marker_from_an_earlier_call_of_the_turn_never_tells_a_fresh_run() {
    let config = Config {
        replay_marker: true,
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), demo(), &config);
    let mut ev = event("fd-refund.json");
    ev["promptSessionAttributes"] = json!({
        "toolcall-dedup.outcome": "replayed",
        "toolcall-dedup.key": "0123456789abcdef0123456789abcdef",
        "toolcall-dedup.first_ran": "2026-01-01T00:00:00Z",
        "locale": "en-GB",
    });
    let fresh = send(&h, &ev).await;
    assert_eq!(fresh.outcome, Outcome::Executed);
    let prompt = &response(&fresh)["promptSessionAttributes"];
    assert_eq!(prompt, &json!({"locale": "en-GB"}), "the caller's own only");
    let again = send(&h, &ev).await;
    assert_eq!(again.outcome, Outcome::Replayed);
    let prompt = &response(&again)["promptSessionAttributes"];
    assert_eq!(prompt["toolcall-dedup.key"].as_str(), again.key.as_deref());
    assert_ne!(prompt["toolcall-dedup.first_ran"], "2026-01-01T00:00:00Z");
    assert_eq!(prompt["locale"], "en-GB");
}

/// Multi-agent collaboration (issue 52): a collaborator's `inputText` is written by the supervisor's
/// model, so a re-delegated call rarely repeats it. The turn scope (a hash of `inputText`) then runs
/// it again; the step the supervisor's session attributes carry (Bedrock forwards them to every
/// collaborator: API reference, `SessionState.sessionAttributes`) keys it once.
#[tokio::test]
async fn a_collaborators_re_delegated_call_meets_by_its_forwarded_step_not_its_instruction() {
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let first = send(&h, &event("fd-collaborator-charge_card.json")).await;
    let again = send(&h, &event("fd-collaborator-charge_card-retry.json")).await;
    assert_eq!(
        (first.outcome, again.outcome),
        (Outcome::Executed, Outcome::Replayed)
    );
    assert_eq!(charges(h.dispatcher()), 1);

    // Without the forwarded step, the turn scope tells the two instructions apart: it runs again.
    let h = handler(MemoryStore::new(), demo(), &Config::default());
    for name in [
        "fd-collaborator-charge_card.json",
        "fd-collaborator-charge_card-retry.json",
    ] {
        let mut ev = event(name);
        ev["sessionAttributes"]
            .as_object_mut()
            .unwrap()
            .remove("dedup_step");
        assert_eq!(send(&h, &ev).await.outcome, Outcome::Executed, "{name}");
    }
    assert_eq!(charges(h.dispatcher()), 2);
}
