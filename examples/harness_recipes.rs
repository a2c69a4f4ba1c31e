//! Recipes for harnesses that run tools themselves (docs/harnesses.md): each keys the call by the
//! identifier its harness already gives it, so a step that ran but was not recorded is answered
//! from the store when the harness runs it again.
//!
//! ```bash
//! cargo run --example harness_recipes
//! ```
//!
//! The store is the in-memory one; a service passes a `DynamoDbStore` instead. The integration
//! tests (`tests/it/harness_recipes.rs`) run these same functions.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use toolcall_dedup::guard::{Dedup, GuardError, Guarded};
use toolcall_dedup::key::{Call, Keyer};
use toolcall_dedup::store::{MemoryStore, Store};

/// The side effect every recipe guards: a charge, counted.
async fn charge(ledger: &AtomicU32, args: &Value) -> Result<Value, std::io::Error> {
    let n = ledger.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(json!({"charge_id": format!("ch_{n:04}"), "amount": args["amount"]}))
}

/// Bedrock Agents' RETURN_CONTROL: the agent hands the application `invocationInputs` (one to
/// five) under one `invocationId`, and the application runs each and sends the results back in
/// the next `InvokeAgent`. An application that crashes in between runs the same inputs again: the
/// caller key is the `invocationId` and the input's place in the list, scoped by the agent and, in
/// supervisor mode, the collaborator that asked (`collaboratorName`).
pub async fn return_control<S: Store>(
    dedup: &Dedup<S>,
    session_id: &str,
    return_control: &Value,
    ledger: &AtomicU32,
) -> Vec<Result<Guarded<Value>, GuardError<std::io::Error>>> {
    let invocation_id = return_control["invocationId"].as_str().unwrap_or_default();
    let mut results = Vec::new();
    let inputs = return_control["invocationInputs"].as_array().cloned();
    for (place, input) in inputs.unwrap_or_default().iter().enumerate() {
        let input = &input["functionInvocationInput"];
        let args: serde_json::Map<String, Value> = input["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p["name"].as_str()?.to_string(), p["value"].clone())))
            .collect();
        let args = Value::Object(args);
        let namespace = format!(
            "return-control:{}:{}",
            input["agentId"].as_str().unwrap_or("-"),
            input["collaboratorName"].as_str().unwrap_or("-")
        );
        let args_text = args.to_string();
        let call = Call {
            tool: input["function"].as_str().unwrap_or_default(),
            args: &args_text,
            namespace: Some(&namespace),
            run_id: Some(session_id),
            ..Call::default()
        };
        let key = format!("{invocation_id}/{place}");
        results.push(dedup.run_keyed(&call, &key, || charge(ledger, &args)).await);
    }
    results
}

/// A Lambda durable function's step, or a Temporal activity, or a Restate `ctx.run`: the
/// harness re-runs a step whose result it did not record (the function was replayed from its
/// last checkpoint, the worker died before the activity's completion was reported). The caller
/// key is what the harness names the step by across attempts: the durable execution's name and
/// the step's; the workflow id and the activity id (never the attempt); the invocation id and the
/// step's name.
pub async fn workflow_step<S: Store>(
    dedup: &Dedup<S>,
    harness: &str,
    execution: &str,
    step: &str,
    args: &Value,
    ledger: &AtomicU32,
) -> Result<Guarded<Value>, GuardError<std::io::Error>> {
    let args_text = args.to_string();
    let call = Call {
        tool: "charge_card",
        args: &args_text,
        namespace: Some(harness),
        run_id: Some(execution),
        ..Call::default()
    };
    dedup
        .run_keyed(&call, &format!("{execution}/{step}"), || {
            charge(ledger, args)
        })
        .await
}

#[tokio::main]
async fn main() {
    let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
    let ledger = AtomicU32::new(0);
    // The shape of a RETURN_CONTROL payload (InvokeAgent's `returnControl`), as the Bedrock
    // API reference describes it.
    let payload = json!({
        "invocationId": "3f0c5f2e-7e4b-4d0a-9d55-0f4f1c2a8b61",
        "invocationInputs": [{"functionInvocationInput": {
            "actionGroup": "payments", "function": "charge_card", "agentId": "AGENT12345",
            "parameters": [{"name": "amount", "type": "number", "value": "4200"},
                           {"name": "currency", "type": "string", "value": "USD"}]}}]
    });
    for attempt in ["first", "after a crash"] {
        let results = return_control(&dedup, "session-1", &payload, &ledger).await;
        for result in results {
            let guarded = result.expect("charged or replayed");
            println!(
                "RETURN_CONTROL, {attempt}: {:?} {}",
                guarded.outcome, guarded.value
            );
        }
    }
    for attempt in [1, 2] {
        let args = json!({"amount": 4200, "currency": "USD"});
        let guarded = workflow_step(&dedup, "temporal", "order-7781", "charge", &args, &ledger)
            .await
            .expect("charged or replayed");
        println!(
            "Temporal activity, attempt {attempt}: {:?} {}",
            guarded.outcome, guarded.value
        );
    }
    println!("charges made: {}", ledger.load(Ordering::SeqCst));
}
