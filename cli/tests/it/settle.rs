//! `dedup settle` against moto: shows a record, refuses what an owner still holds or what already
//! completed, stores an operator's reply for an outcome-unknown call, and logs the action.

use std::process::Output;

use serde_json::Value;
use toolcall_dedup::store::{Clock, ManualClock, Store};

use crate::servers::Backend;

fn settle(table: &str, args: &[&str]) -> Output {
    crate::dedup()
        .arg("settle")
        .args(args)
        .args(["--endpoint", &Backend::Moto.endpoint(), "--table", table])
        .output()
        .expect("dedup runs")
}

fn stdout_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[track_caller]
fn assert_refused(out: &Output, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(says), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_settle_completes_only_an_outcome_unknown_call_and_logs_it() {
    let clock = ManualClock::starting_now();
    let (store, token) = crate::at_most_once_claim(Backend::Moto, &clock).await;
    let table = store.config().table.clone();
    let key = crate::CLAIMED_KEY;
    let now = clock.now_ms();

    // A running owner is never overwritten.
    let reply = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(reply.path(), br#"{"charge_id": "ch_ops"}"#).unwrap();
    let reply_path = reply.path().to_str().unwrap();
    assert_refused(
        &settle(&table, &[key, "--completed", reply_path]),
        "may still be held by a running owner",
    );
    let shown = stdout_json(&settle(&table, &[key, "--show"]));
    assert_eq!(shown["state"], "in_progress");
    assert_eq!(shown["at_most_once"], true);
    assert!(shown.get("why_unknown").is_none(), "{shown}");

    // The owner settles it as outcome unknown; the operator stores what they found.
    store
        .settle_unknown(key, &token, now / 1000 + 3_600)
        .await
        .unwrap();
    let shown = stdout_json(&settle(&table, &[key, "--show"]));
    assert_eq!(shown["state"], "unknown");
    assert!(
        shown["why_unknown"]
            .as_str()
            .is_some_and(|why| why.starts_with("settled as outcome unknown")),
        "{shown}"
    );
    let logged = stdout_json(&settle(&table, &[key, "--completed", reply_path]));
    assert_eq!(logged["dedup_settle"], 1);
    assert_eq!(logged["action"], "completed");
    assert_eq!(logged["key"], key);
    assert_eq!(logged["tool"], "charge_card");
    assert_eq!(logged["before"]["outcome_unknown"], true);
    let record = store.get(key).await.unwrap().unwrap();
    assert!(!record.outcome_unknown);
    assert_eq!(
        record.result.as_deref(),
        Some(&br#"{"charge_id": "ch_ops"}"#[..])
    );

    // Done: a second settlement is refused, and so are a missing key and a reply that is not JSON.
    assert_refused(&settle(&table, &[key, "--release"]), "already completed");
    assert_refused(
        &settle(&table, &["ffffffffffffffffffffffffffffffff", "--release"]),
        "no live record",
    );
    std::fs::write(reply.path(), b"not json").unwrap();
    let bad = settle(&table, &[key, "--completed", reply_path]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be JSON"));
    // Exactly one action is required.
    assert_eq!(settle(&table, &[key]).status.code(), Some(2));
    assert_eq!(
        settle(&table, &[key, "--show", "--release"]).status.code(),
        Some(2)
    );
}

/// `--bedrock-body`: the operator gives what the tool would have said, and the record stores the
/// Bedrock response its tool gives (issue 53: a tool's body stored verbatim became the whole
/// Lambda response, which Bedrock refuses).
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_settle_wraps_a_tools_body_in_the_bedrock_response_it_would_have_given() {
    let clock = ManualClock::starting_now();
    let (store, token) = crate::at_most_once_claim(Backend::Moto, &clock).await;
    let table = store.config().table.clone();
    let key = crate::CLAIMED_KEY;
    store
        .settle_unknown(key, &token, clock.now_ms() / 1000 + 3_600)
        .await
        .unwrap();
    let body = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(body.path(), "Charged cus_8842 42.50 USD (ch_ops).").unwrap();
    let body_path = body.path().to_str().unwrap();

    // The claim states no namespace: the action group must be named.
    let unnamed = settle(&table, &[key, "--completed", body_path, "--bedrock-body"]);
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unnamed.stderr).contains("pass --action-group"));
    let args = [
        key,
        "--completed",
        body_path,
        "--bedrock-body",
        "--action-group",
        "payments",
    ];
    assert_eq!(stdout_json(&settle(&table, &args))["action"], "completed");
    let record = store.get(key).await.unwrap().unwrap();
    let stored: Value = serde_json::from_slice(record.result.as_deref().unwrap()).unwrap();
    assert_eq!(stored["messageVersion"], "1.0");
    assert_eq!(stored["response"]["actionGroup"], "payments");
    assert_eq!(stored["response"]["function"], "charge_card");
    assert_eq!(
        stored["response"]["functionResponse"]["responseBody"]["TEXT"]["body"],
        "Charged cus_8842 42.50 USD (ch_ops)."
    );
    // The body need not be JSON; a reply in the caller's format still must be.
    let plain = settle(&table, &[key, "--completed", body_path]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("--bedrock-body"));
}
