//! The recipes of docs/harnesses.md, run as the example runs them (issue 51): a harness that runs
//! a tool itself and runs it again after a crash gets the first run's answer.

#[allow(dead_code)]
#[path = "../../examples/harness_recipes.rs"]
mod recipes;

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;
use toolcall_dedup::guard::{Dedup, GuardError};
use toolcall_dedup::key::Keyer;
use toolcall_dedup::store::MemoryStore;
use toolcall_dedup::telemetry::Outcome;

/// Two inputs under one `invocationId` (the API allows up to five): each runs once, and the
/// application's second pass after a crash replays both. Another collaborator's identical
/// `invocationId` is its own call.
#[tokio::test]
async fn return_control_runs_each_input_once_across_a_crash() {
    let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
    let ledger = AtomicU32::new(0);
    let input = |amount: &str, collaborator: &str| {
        json!({"functionInvocationInput": {
            "actionGroup": "payments", "function": "charge_card", "agentId": "AGENT12345",
            "collaboratorName": collaborator,
            "parameters": [{"name": "amount", "type": "number", "value": amount}]}})
    };
    let payload = json!({"invocationId": "inv-1",
        "invocationInputs": [input("4200", "billing"), input("990", "billing")]});
    let first = recipes::return_control(&dedup, "s-1", &payload, &ledger).await;
    let again = recipes::return_control(&dedup, "s-1", &payload, &ledger).await;
    assert_eq!(ledger.load(Ordering::SeqCst), 2, "each input charged once");
    for (first, again) in first.into_iter().zip(again) {
        let (first, again) = (first.unwrap(), again.unwrap());
        assert_eq!(first.outcome, Outcome::Executed);
        assert_eq!(again.outcome, Outcome::Replayed);
        assert_eq!(first.value, again.value);
    }
    let other = json!({"invocationId": "inv-1", "invocationInputs": [input("4200", "refunds")]});
    let other = recipes::return_control(&dedup, "s-1", &other, &ledger).await;
    assert_eq!(other[0].as_ref().unwrap().outcome, Outcome::Executed);
    assert_eq!(ledger.load(Ordering::SeqCst), 3);
}

/// A workflow step re-run by its harness (a durable function replayed from its checkpoint, a
/// Temporal activity retried, a Restate step re-run) replays; the next step runs; the same step
/// with other arguments is refused and runs nothing.
#[tokio::test]
async fn a_workflow_step_runs_once_per_execution_and_step() {
    let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
    let ledger = AtomicU32::new(0);
    let args = json!({"amount": 4200, "currency": "USD"});
    for harness in ["lambda-durable", "temporal", "restate"] {
        let before = ledger.load(Ordering::SeqCst);
        let step = |step: &'static str, args| {
            recipes::workflow_step(&dedup, harness, "order-7781", step, args, &ledger)
        };
        let first = step("charge", &args).await.unwrap();
        let rerun = step("charge", &args).await.unwrap();
        assert_eq!(
            (first.outcome, rerun.outcome),
            (Outcome::Executed, Outcome::Replayed)
        );
        assert_eq!(first.value, rerun.value, "{harness}");
        let next = step("charge-shipping", &args).await.unwrap();
        assert_eq!(next.outcome, Outcome::Executed, "{harness}");
        let other = json!({"amount": 5000, "currency": "USD"});
        let refused = step("charge", &other).await;
        assert!(
            matches!(refused, Err(GuardError::KeyReused { .. })),
            "{harness}: {refused:?}"
        );
        assert_eq!(ledger.load(Ordering::SeqCst), before + 2, "{harness}");
    }
}
