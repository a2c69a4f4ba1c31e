//! Issue 7's loop, end to end through the binaries: `dedup replay` with `DEDUP_LOG_CALLS=hashes` writes
//! the call log, and `dedup audit` finds every injected retry and deliberate repeat in it. Shadow mode
//! executes every call and counts exactly the retries as would-be replays.

use std::path::Path;

use serde_json::{Value, json};

const RUNS: usize = 6;

/// Writes, per run: an original, a retry the model rewrote (same step), and a deliberate repeat with
/// identical arguments at the next step. Returns the files in send order.
fn write_events(dir: &Path) -> Vec<String> {
    let original: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::fixture::events_dir().join("fd-charge_card.json")).unwrap(),
    )
    .unwrap();
    let retry: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::fixture::events_dir().join("fd-charge_card-retry.json"))
            .unwrap(),
    )
    .unwrap();
    let mut files = Vec::new();
    for run in 0..RUNS {
        for (name, base, step) in [
            ("a", &original, "1"),
            ("b-retry", &retry, "1"),
            ("c-repeat", &original, "2"),
        ] {
            let mut event = base.clone();
            event["sessionId"] = json!(format!("audit-run-{run}"));
            event["sessionAttributes"] = json!({"dedup_step": step});
            let path = dir.join(format!("run{run}-{name}.json"));
            std::fs::write(&path, event.to_string()).unwrap();
            files.push(path.to_string_lossy().into_owned());
        }
    }
    files
}

fn replay(files: &[String], envs: &[(&str, &str)]) -> (String, Value) {
    let out = crate::dedup()
        .arg("replay")
        .args(files)
        .env_remove("DEDUP_STORE")
        .env_remove("DEDUP_MODE")
        .env_remove("DEDUP_LOG_CALLS")
        .envs(envs.iter().copied())
        .output()
        .expect("dedup replay runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    (stdout, summary)
}

#[test]
fn audit_finds_every_retry_injected_into_a_replay_log() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_events(dir.path());
    let (log, summary) = replay(&files, &[("DEDUP_LOG_CALLS", "hashes")]);
    assert_eq!(summary["executed"], 2 * RUNS, "{summary}");
    assert_eq!(summary["replayed"], RUNS, "{summary}");
    let log_path = dir.path().join("calls.log");
    std::fs::write(&log_path, &log).unwrap();

    let out = crate::dedup()
        .args(["audit", "--json"])
        .arg(&log_path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Value> = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let row = |s: &str| {
        rows.iter()
            .find(|r| r["strategy"] == s)
            .unwrap_or_else(|| panic!("{s} in {stdout}"))
            .clone()
    };
    for r in &rows {
        assert_eq!(
            r["retries_total"], RUNS,
            "every injected retry is found: {r}"
        );
        assert_eq!(
            r["repeats_total"], RUNS,
            "every deliberate repeat is found: {r}"
        );
    }
    assert_eq!(row("typed")["retries_caught"], RUNS);
    assert_eq!(row("typed")["repeats_merged"], 0);
    assert_eq!(row("scoped")["repeats_merged"], 0);
    // The retry reorders parameters and rewrites 42.50 as 42.5: raw bytes miss it, and the unscoped
    // keyers merge every deliberate repeat.
    assert_eq!(row("raw")["retries_caught"], 0);
    assert_eq!(row("raw")["repeats_merged"], RUNS);
    assert!(
        stdout.contains("key-order"),
        "names the rules that made retries meet: {stdout}"
    );
}

#[test]
fn shadow_mode_executes_every_call_and_counts_the_retries_as_would_be_replays() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_events(dir.path());
    let ledger = dir.path().join("ledger.jsonl");
    let (_, summary) = replay(
        &files,
        &[
            ("DEDUP_MODE", "shadow"),
            ("DEMO_LEDGER", ledger.to_str().unwrap()),
        ],
    );
    // A would-be replay is reported as such, but the tool ran for it too.
    assert_eq!(summary["shadow_replays"], RUNS, "{summary}");
    assert_eq!(summary["executed"], 2 * RUNS, "{summary}");
    assert_eq!(summary["replayed"], 0, "{summary}");
    let side_effects = std::fs::read_to_string(&ledger).unwrap().lines().count();
    assert_eq!(side_effects, 3 * RUNS, "every call executes in shadow mode");
}

/// Issue 53: `dedup replay` reads the config document `DEDUP_CONFIG` names, as the function does:
/// under a document whose policy keys `charge_card` by its customer and currency only, a retry with
/// another amount is the same call; without it, two calls. A document that cannot be read is a
/// clear error, and nothing runs.
#[test]
fn replay_keys_under_the_config_document_as_the_function_does() {
    let dir = tempfile::tempdir().unwrap();
    let base: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::fixture::events_dir().join("fd-charge_card.json")).unwrap(),
    )
    .unwrap();
    let mut other_amount = base.clone();
    for p in other_amount["parameters"].as_array_mut().unwrap() {
        if p["name"] == "amount" {
            p["value"] = json!("5000");
        }
    }
    let files: Vec<String> = [("first.json", &base), ("second.json", &other_amount)]
        .iter()
        .map(|(name, event)| {
            let path = dir.path().join(name);
            std::fs::write(&path, event.to_string()).unwrap();
            path.to_string_lossy().into_owned()
        })
        .collect();
    let (_, plain) = replay(&files, &[]);
    assert_eq!(
        (plain["executed"].as_u64(), plain["replayed"].as_u64()),
        (Some(2), Some(0)),
        "{plain}"
    );

    let document = dir.path().join("dedup.yaml");
    std::fs::write(
        &document,
        "tools:\n  charge_card:\n    key_fields: [customer_id, currency]\n",
    )
    .unwrap();
    let document_path = document.to_string_lossy().into_owned();
    let (_, keyed) = replay(&files, &[("DEDUP_CONFIG", &document_path)]);
    assert_eq!(
        (keyed["executed"].as_u64(), keyed["replayed"].as_u64()),
        (Some(1), Some(1)),
        "{keyed}"
    );

    let missing = crate::dedup()
        .arg("replay")
        .args(&files)
        .env("DEDUP_CONFIG", dir.path().join("missing.yaml"))
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("missing.yaml"), "{stderr}");
}
