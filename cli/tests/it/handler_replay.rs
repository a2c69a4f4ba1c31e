//! `dedup replay` through the real handler: every event file with zero configuration, the call log
//! and ledger, and 50-way concurrency on the local DynamoDB servers.

use crate::fixture;
use crate::servers;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use fixture::*;
use serde_json::{Value, json};
use servers::Backend;
use toolcall_dedup::config::Config;
use toolcall_dedup::store::MemoryStore;
use toolcall_dedup::telemetry::Outcome;

// ---------------------------------------------------------------------------------------------
// dedup replay

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
    let (s, _, stderr) = run_replay(crate::dedup().arg("replay").args(&files));
    assert_eq!(
        s,
        json!({"events": 23, "invocations": 23, "executed": 14, "replayed": 3, "waited": 0,
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
    let (s, _, _) = run_replay(crate::dedup().arg("replay").args(&pair));
    assert_eq!(
        (s["executed"].as_u64(), s["replayed"].as_u64()),
        (Some(1), Some(1))
    );
    let repeat = [
        events_dir().join("fd-charge_card-step3.json"),
        events_dir().join("fd-charge_card-step4.json"),
    ];
    let (s, _, _) = run_replay(
        crate::dedup()
            .args(["replay", "--repeat", "3"])
            .args(&repeat),
    );
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
        crate::dedup()
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
    assert_eq!(dedup_cli::demo::read_ledger(&ledger_path).unwrap().len(), 1);
    // Shadow mode through the environment, exactly as the Lambda reads it.
    let (s, _, _) = run_replay(
        crate::dedup()
            .env("DEDUP_MODE", "shadow")
            .args(["replay", "--repeat", "2"])
            .args(&pair),
    );
    assert_eq!(
        (s["executed"].as_u64(), s["shadow_replays"].as_u64()),
        (Some(1), Some(3))
    );
    // A bad variable is a loud usage error naming it.
    let out = crate::dedup()
        .env("DEDUP_SCOPE", "turns")
        .arg("replay")
        .args(&pair)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("DEDUP_SCOPE"));
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[test]
fn dedup_replay_at_50_way_concurrency_executes_once_on_each_dynamodb_server() {
    for backend in [Backend::Moto, Backend::Dynalite] {
        let table = servers::unique_table();
        let (s, _, stderr) = run_replay(crate::dedup().args([
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
// `dedup replay --responses`

#[test]
fn dedup_replay_responses_prints_what_the_agent_gets_one_line_per_invocation() {
    let events = fixture::events_dir();
    let files = [
        events.join("fd-charge_card-drift.json"),
        events.join("fd-charge_card-drift-retry.json"),
        events.join("bad-not-object.json"),
    ];
    let run = |responses: bool| {
        let mut cmd = crate::dedup();
        cmd.arg("replay");
        if responses {
            cmd.arg("--responses");
        }
        let out = cmd.args(&files).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(false).len(), 1, "without the flag, only the summary");
    let lines = run(true);
    assert_eq!(lines.len(), 4, "{lines:?}");
    let (first, retry, bad, summary) = (&lines[0], &lines[1], &lines[2], &lines[3]);
    assert_eq!(summary["executed"], 1);
    assert_eq!(
        (first["outcome"].as_str(), retry["outcome"].as_str()),
        (Some("executed"), Some("replayed"))
    );
    assert!(
        first["event"]
            .as_str()
            .unwrap()
            .ends_with("fd-charge_card-drift.json")
    );
    assert_eq!(first["key"], retry["key"]);
    // The agent gets the stored response again, byte for byte.
    assert_eq!(first["response"], retry["response"]);
    assert_eq!(
        first.pointer("/response/response/function"),
        Some(&json!("charge_card"))
    );
    // An event no Bedrock response can answer: the Lambda error the runtime reports.
    assert_eq!(bad["outcome"], "bad_request");
    assert_eq!(bad["error"]["errorType"], "InvalidEvent");
    assert!(bad.get("response").is_none());
}

/// Through `dedup replay` (the interceptor events, one store): a listing from an untrusted
/// gateway whose schema would make every quantity one key cannot make a reservation of 500 replay
/// the receipt of 5; a batch holding `tools/call` is refused, never passed on to the target.
#[test]
fn dedup_replay_keeps_a_forged_listing_and_a_batch_from_reaching_past_the_keys() {
    let dir = events_dir().join("agentcore-interceptor");
    let files = [
        "forged-tools_list.response.json",
        "reserve_stock.request.json",
        "reserve_stock.response.json",
        "reserve_stock-500.request.json",
    ]
    .map(|f| dir.join(f));
    let (s, _, stderr) = run_replay(crate::dedup().arg("replay").args(&files));
    assert_eq!(
        (s["replayed"].as_u64(), s["executed"].as_u64()),
        (Some(0), Some(3)),
        "two REQUESTs pass to the target, one RESPONSE settles: {s} {stderr}"
    );
    let (s, _, stderr) = run_replay(
        crate::dedup()
            .arg("replay")
            .arg(dir.join("batch-tools_call.request.json")),
    );
    assert_eq!(
        (s["executed"].as_u64(), s["errors"].as_u64()),
        (Some(0), Some(1)),
        "{s} {stderr}"
    );
}
