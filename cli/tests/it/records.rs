//! `dedup list`, `dedup show` and `dedup evict` on moto and dynalite: a call replayed into a
//! table is listed with its tool and run, shown readably, evicted, and then runs again; an
//! unknown outcome is found under `--state unknown` through the attention index.

use std::process::Output;

use serde_json::Value;
use toolcall_dedup::store::{Clock, ManualClock, Store};

use crate::fixture::events_dir;
use crate::servers::{self, Backend};

fn dedup(backend: Backend, table: &str, args: &[&str]) -> Output {
    crate::dedup()
        .args(args)
        .args(["--endpoint", &backend.endpoint(), "--table", table])
        .output()
        .expect("dedup runs")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn json_lines(out: &Output) -> Vec<Value> {
    ok(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Replays the demo's `charge_card` call into `table`; the summary line.
fn replay_charge(backend: Backend, table: &str) -> Value {
    let event = events_dir().join("fd-charge_card.json");
    let out = dedup(
        backend,
        table,
        &[
            "replay",
            "--store",
            "dynamodb",
            "--create-table",
            event.to_str().unwrap(),
        ],
    );
    let stdout = ok(&out);
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

async fn a_replayed_call_is_listed_shown_evicted_and_runs_again(backend: Backend) {
    let table = servers::unique_table();
    assert_eq!(replay_charge(backend, &table)["executed"], 1);
    assert_eq!(replay_charge(backend, &table)["executed"], 0, "replayed");

    let listed = json_lines(&dedup(backend, &table, &["list", "--json"]));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let row = &listed[0];
    assert_eq!(row["tool"], "charge_card");
    assert_eq!(row["state"], "completed");
    assert_eq!(row["door"], "bedrock");
    assert_eq!(row["run"], "sess-7f3c2a91-4b6e-4d1a-9c0e-2f5b8d1a6e34");
    let key = row["key"].as_str().unwrap();
    let table_view = ok(&dedup(backend, &table, &["list", "--tool", "charge_card"]));
    assert!(
        table_view.contains(key) && table_view.contains("completed"),
        "{table_view}"
    );
    assert!(
        json_lines(&dedup(
            backend,
            &table,
            &["list", "--json", "--state", "unknown"]
        ))
        .is_empty()
    );
    assert!(
        json_lines(&dedup(
            backend,
            &table,
            &["list", "--json", "--tool", "refund"]
        ))
        .is_empty()
    );

    let shown: Value = serde_json::from_str(&ok(&dedup(backend, &table, &["show", key]))).unwrap();
    assert_eq!(shown["tool"], "charge_card");
    assert_eq!(shown["keyer"], "typed/v2");
    let created = shown["created_at"].as_str().unwrap();
    assert!(
        created.ends_with('Z') && created.contains('T'),
        "ISO 8601: {created}"
    );
    assert!(
        shown["reply"].is_object(),
        "the reply pretty-printed as JSON: {shown}"
    );
    let version = shown["version"].as_str().unwrap();

    // Unconfirmed, or fenced on a version that is not the record's: nothing goes.
    let unconfirmed = dedup(backend, &table, &["evict", key]);
    assert_eq!(unconfirmed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"));
    let stale = dedup(
        backend,
        &table,
        &["evict", key, "--yes", "--version", "stale"],
    );
    assert_eq!(stale.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stale.stderr).contains("changed since it was read"));

    let logged = json_lines(&dedup(
        backend,
        &table,
        &["evict", key, "--yes", "--version", version],
    ));
    assert_eq!(logged[0]["dedup_evict"], 1);
    assert_eq!(logged[0]["key"], key);
    assert_eq!(logged[0]["tool"], "charge_card");
    let gone = dedup(backend, &table, &["show", key]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no live record"));

    assert_eq!(
        replay_charge(backend, &table)["executed"],
        1,
        "the same call runs again"
    );
}

async fn an_unknown_outcome_is_listed_through_the_index_and_cannot_be_evicted(backend: Backend) {
    let clock = ManualClock::starting_now();
    let (store, token) = crate::at_most_once_claim(backend, &clock).await;
    let table = store.config().table.clone();
    let key = crate::CLAIMED_KEY;
    let now = clock.now_ms();
    store
        .settle_unknown(key, &token, now / 1000 + 3_600)
        .await
        .unwrap();

    let unknown = json_lines(&dedup(
        backend,
        &table,
        &["list", "--json", "--state", "unknown"],
    ));
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    assert_eq!(unknown[0]["key"], key);
    assert_eq!(unknown[0]["state"], "unknown");
    let since_now = json_lines(&dedup(
        backend,
        &table,
        &["list", "--json", "--state", "unknown", "--since", "1h"],
    ));
    assert_eq!(since_now.len(), 1);
    // One spelling for states (issue 53): what `list` prints is what `--state` takes.
    for spelling in ["in_progress", "in-progress"] {
        let listed = dedup(backend, &table, &["list", "--json", "--state", spelling]);
        assert!(listed.status.success(), "{spelling}: {listed:?}");
    }

    let refused = dedup(backend, &table, &["evict", key, "--yes"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("dedup settle"));
    assert!(store.get(key).await.unwrap().is_some());
}

#[test]
fn operator_commands_say_what_is_wrong() {
    let malformed = crate::dedup()
        .args(["show", "not-a-key", "--table", "t"])
        .output()
        .unwrap();
    assert_eq!(malformed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&malformed.stderr).contains("32 lowercase hex digits"));

    let since = crate::dedup()
        .args(["list", "--since", "yesterday", "--table", "t"])
        .output()
        .unwrap();
    assert_eq!(since.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&since.stderr).contains("ISO 8601"));

    // Nothing listens on port 9 of loopback: the error names the refused connection.
    let unreachable = crate::dedup()
        .args([
            "list",
            "--endpoint",
            "http://127.0.0.1:9",
            "--table",
            "dedup-nowhere",
        ])
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("store unavailable"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("connect"),
        "names the cause: {stderr}"
    );
}

macro_rules! on_both_servers {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                use super::*;
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn moto() {
                    super::$case(Backend::Moto).await;
                }
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn dynalite() {
                    super::$case(Backend::Dynalite).await;
                }
            }
        )*
    };
}

on_both_servers!(
    a_replayed_call_is_listed_shown_evicted_and_runs_again,
    an_unknown_outcome_is_listed_through_the_index_and_cannot_be_evicted,
);
