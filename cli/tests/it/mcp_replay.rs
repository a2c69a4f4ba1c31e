//! Issue 49's sequences through `dedup replay --responses` (the binary a user runs), with the
//! events in `events/agentcore-interceptor/`: a stateless MCP 2026-07-28 retry pair, two users'
//! identical stateless calls under `DEDUP_SESSIONLESS=principal`, a multi-round-trip call, a
//! task-augmented call, and each error that says nothing ran. Each line `--responses` prints is
//! one invocation, in the order sent.

use serde_json::Value;

/// The outcome of each invocation of `events` (names under `events/agentcore-interceptor/`).
fn outcomes(events: &[&str], envs: &[(&str, &str)]) -> Vec<String> {
    let out = crate::dedup()
        .args(["replay", "--responses"])
        .args(
            events
                .iter()
                .map(|e| format!("events/agentcore-interceptor/{e}")),
        )
        .envs(envs.iter().copied())
        .output()
        .expect("dedup replay runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l.get("outcome").and_then(Value::as_str).map(str::to_string))
        .collect()
}

#[test]
fn a_stateless_retry_pair_executes_once_through_dedup_replay() {
    let seen = outcomes(
        &[
            "stateless-charge_card.request.json",
            "stateless-charge_card.response.json",
            "stateless-charge_card-retry.request.json",
        ],
        &[],
    );
    assert_eq!(seen, ["executed", "executed", "replayed"]);
}

#[test]
fn two_principals_identical_stateless_calls_execute_twice_through_dedup_replay() {
    let pair = [
        "stateless-subscribe-alice.request.json",
        "stateless-subscribe-bob.request.json",
    ];
    let seen = outcomes(&pair, &[("DEDUP_SESSIONLESS", "principal")]);
    assert_eq!(seen, ["executed", "executed"]);
    // One gateway-wide scope makes them one call: the second is answered "in progress".
    let shared = outcomes(&pair, &[("DEDUP_SESSIONLESS", "gateway_scope")]);
    assert_eq!(shared, ["executed", "in_progress"]);
}

#[test]
fn an_input_required_leg_then_the_continuation_then_a_retry_runs_the_tool_once() {
    let seen = outcomes(
        &[
            "mrtr-transfer_funds.request.json",
            "mrtr-transfer_funds-input-required.response.json",
            "mrtr-transfer_funds-continuation.request.json",
            "mrtr-transfer_funds-continuation.response.json",
            "mrtr-transfer_funds-retry.request.json",
        ],
        &[],
    );
    // The interim answer settles the claim by releasing it (reported as the RESPONSE that
    // settled); the final result is the one the retry replays.
    assert_eq!(
        seen,
        ["executed", "executed", "executed", "executed", "replayed"]
    );
}

#[test]
fn a_task_augmented_call_retried_returns_the_same_task_through_dedup_replay() {
    // The replay runs on the wall clock: the task's createdAt is in the past, so its TTL (an
    // hour) has passed and the retry is told the outcome is unknown, never handed a second task.
    let seen = outcomes(
        &[
            "task-export_ledger.request.json",
            "task-export_ledger.response.json",
            "task-export_ledger-retry.request.json",
        ],
        &[],
    );
    assert_eq!(seen, ["executed", "executed", "outcome_unknown"]);
}

#[test]
fn each_nothing_ran_error_lets_the_retry_run_through_dedup_replay() {
    for name in [
        "refund-url-elicitation",
        "refund-header-mismatch",
        "refund-missing-capability",
        "refund-unsupported-version",
    ] {
        let request = format!("{name}.request.json");
        let response = format!("{name}.response.json");
        let seen = outcomes(&[&request, &response, &request], &[]);
        assert_eq!(seen, ["executed", "executed", "executed"], "{name}");
    }
}
