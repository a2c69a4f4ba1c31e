//! Every event file under `events/` (hand-written and the generated corpus, of every entry point:
//! Bedrock action groups, `agentcore/` with their client contexts, `envelope/`) goes through the
//! real `dedup replay` binary with the in-memory store, one pair per run so that each pair meets a
//! fresh store; the hand-written ones also run on moto:
//!
//! - a retry pair (`events/corpus/retry/*-a.json` + `-b.json`, `fd-charge_card.json` +
//!   `fd-charge_card-retry.json`, `agentcore/charge_card{,-retry}.json`,
//!   `envelope/charge_card{,-retry}.json`) executes once and replays once;
//! - a deliberate repeat (`events/corpus/deliberate_repeat/*`, `fd-charge_card-step3/4.json`,
//!   `agentcore/charge_card-step2/3.json`, `envelope/charge_card-step8/9.json`) executes twice;
//! - every other valid hand-written event, sent twice, executes once and replays once;
//! - every `bad-*` file is rejected: no execution, nothing in the demo tool's ledger.
//!
//! The demo tool writes a ledger file (`DEMO_LEDGER`), so "executed" is also counted on the tool's
//! side. The corpus events run with their key policy (`events/corpus/policy.json`) and again without
//! one (Bedrock's declared types alone must catch every retry, issue 12); the hand-written
//! pair `fd-charge_card-drift*.json` runs without a policy (one execution) and again with
//! `events/policies/charge_card-currency-strict.json` (two). The generated files must be exactly what
//! `dedup corpus` builds.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use dedup_cli::commands::replay::{CLIENT_CONTEXT_SUFFIX, EventFile};
use dedup_cli::corpus;
use serde_json::Value;
use toolcall_dedup::config::{CallerKeyScope, Scope};
use toolcall_dedup::handler::Door;
use toolcall_dedup::internals::port::{Scoping, Sessionless, Unkeyed};
use toolcall_dedup::key::Keyer;

fn root() -> PathBuf {
    crate::fixture::root()
}

fn events_dir() -> PathBuf {
    root().join("events")
}

fn corpus_dir() -> PathBuf {
    events_dir().join("corpus")
}

/// Key policies among the events (not events): every `policy.json` (the corpus's, the AgentCore
/// Gateway target's tool definitions) and `events/policies/`.
fn is_policy(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "policy.json")
        || path.starts_with(events_dir().join("policies"))
}

/// Every event under `events/`: every `*.json` except key policies and AgentCore client contexts
/// (read with their event), sorted.
fn event_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&events_dir(), &mut files);
    // Interceptor events come in REQUEST/RESPONSE pairs: the handler's interceptor suite runs them.
    let interceptor = events_dir().join("agentcore-interceptor");
    files.retain(|f| {
        !is_policy(f)
            && !f.to_string_lossy().ends_with(CLIENT_CONTEXT_SUFFIX)
            && !f.starts_with(&interceptor)
    });
    files.sort();
    files
}

fn name(path: &Path) -> String {
    path.strip_prefix(events_dir())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// One execution, then a replay.
    Once,
    /// Two executions.
    Twice,
    /// No execution: the event is refused.
    Rejected,
    /// Every invocation executes: a sessionless Gateway call passes through without dedup.
    Unprotected,
    /// One execution, then every other invocation refused: a caller key reused with other
    /// arguments.
    KeyReused,
}

#[derive(Debug)]
struct Case {
    files: Vec<PathBuf>,
    repeat: u32,
    expect: Expect,
    /// `DEDUP_POLICY_FILE`, relative to `events/`.
    policy: Option<&'static str>,
}

impl Case {
    fn corpus(&self) -> bool {
        self.policy == Some("corpus/policy.json")
    }
}

/// The key policy a hand-written event of `dir` runs with: AgentCore events with their Gateway
/// target's tool definitions.
fn hand_policy(dir: &str) -> Option<&'static str> {
    (dir == "agentcore").then_some("agentcore/policy.json")
}

/// Hand-written pairs (events/README.md), with the policy each runs under; every other valid
/// hand-written file is a single call.
const HAND_PAIRS: [(&str, &str, Expect, Option<&str>); 13] = [
    (
        "fd-charge_card.json",
        "fd-charge_card-retry.json",
        Expect::Once,
        None,
    ),
    (
        "fd-charge_card-step3.json",
        "fd-charge_card-step4.json",
        Expect::Twice,
        None,
    ),
    (
        "fd-charge_card-drift.json",
        "fd-charge_card-drift-retry.json",
        Expect::Once,
        None,
    ),
    (
        "fd-charge_card-drift.json",
        "fd-charge_card-drift-retry.json",
        Expect::Twice,
        Some("policies/charge_card-currency-strict.json"),
    ),
    (
        "agentcore/charge_card.json",
        "agentcore/charge_card-retry.json",
        Expect::Once,
        Some("agentcore/policy.json"),
    ),
    (
        "agentcore/charge_card-step2.json",
        "agentcore/charge_card-step3.json",
        Expect::Twice,
        Some("agentcore/policy.json"),
    ),
    (
        "envelope/charge_card.json",
        "envelope/charge_card-retry.json",
        Expect::Once,
        None,
    ),
    (
        "envelope/charge_card-step8.json",
        "envelope/charge_card-step9.json",
        Expect::Twice,
        None,
    ),
    (
        "envelope/charge_card-key.json",
        "envelope/charge_card-key-retry.json",
        Expect::Once,
        None,
    ),
    (
        "envelope/charge_card-key-7782.json",
        "envelope/charge_card-key-7782-reused.json",
        Expect::KeyReused,
        None,
    ),
    // A caller key stays inside its caller: a session's key never refuses that session's next
    // tool, and another session (another tenant) with the same key and arguments runs its own.
    (
        "fd-charge_card-key.json",
        "fd-refund-key.json",
        Expect::Twice,
        None,
    ),
    (
        "fd-charge_card-key-tenant-a.json",
        "fd-charge_card-key-tenant-b.json",
        Expect::Twice,
        None,
    ),
    (
        "agentcore/charge_card-key-run-a.json",
        "agentcore/charge_card-key-run-b.json",
        Expect::Twice,
        Some("agentcore/policy.json"),
    ),
];

/// Sorts every event file into exactly one case; panics on a file no rule covers.
fn cases() -> Vec<Case> {
    let files = event_files();
    let mut cases = Vec::new();
    let mut covered: Vec<PathBuf> = Vec::new();
    for (a, b, expect, policy) in HAND_PAIRS {
        let pair = vec![events_dir().join(a), events_dir().join(b)];
        assert!(pair.iter().all(|f| f.exists()), "{a} / {b} missing");
        covered.extend(pair.iter().cloned());
        cases.push(Case {
            files: pair,
            repeat: 1,
            expect,
            policy,
        });
    }
    for file in &files {
        if covered.contains(file) {
            continue;
        }
        let relative = file.strip_prefix(events_dir()).unwrap();
        let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
        let parent = relative
            .parent()
            .map(|p| p.to_string_lossy().replace('\\', "/"));
        match parent.as_deref() {
            Some(dir @ ("" | "agentcore" | "envelope")) if file_name.starts_with("bad-") => cases
                .push(Case {
                    files: vec![file.clone()],
                    repeat: 1,
                    expect: Expect::Rejected,
                    policy: hand_policy(dir),
                }),
            Some(dir @ "agentcore") if file_name.starts_with("sessionless-") => cases.push(Case {
                files: vec![file.clone()],
                repeat: 2,
                expect: Expect::Unprotected,
                policy: hand_policy(dir),
            }),
            Some(dir @ ("" | "agentcore" | "envelope")) => cases.push(Case {
                files: vec![file.clone()],
                repeat: 2,
                expect: Expect::Once,
                policy: hand_policy(dir),
            }),
            Some(dir @ ("corpus/retry" | "corpus/deliberate_repeat")) => {
                let Some(stem) = file_name.strip_suffix("-a.json") else {
                    assert!(
                        file_name.ends_with("-b.json"),
                        "{}: corpus events end in -a.json or -b.json",
                        name(file)
                    );
                    continue;
                };
                let b = file.with_file_name(format!("{stem}-b.json"));
                assert!(b.exists(), "{} has no -b side", name(file));
                covered.push(b.clone());
                let expect = if dir == "corpus/retry" {
                    Expect::Once
                } else {
                    Expect::Twice
                };
                // With the tools' schemas, and with Bedrock's declared types alone.
                for policy in [Some("corpus/policy.json"), None] {
                    cases.push(Case {
                        files: vec![file.clone(), b.clone()],
                        repeat: 1,
                        expect,
                        policy,
                    });
                }
            }
            _ => panic!("{}: no rule says what this event must do", name(file)),
        }
        covered.push(file.clone());
    }
    let mut sent: Vec<&PathBuf> = cases.iter().flat_map(|c| &c.files).collect();
    sent.sort();
    sent.dedup();
    assert_eq!(
        sent,
        files.iter().collect::<Vec<_>>(),
        "every event file is sent exactly once"
    );
    cases
}

/// Where a case runs: the in-memory store, or a fresh table on moto.
#[derive(Debug, Clone, Copy)]
enum Store<'a> {
    Memory,
    Moto(&'a str),
}

/// Runs one case; the error says what went wrong.
fn run(case: &Case, store: Store<'_>) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ledger = dir.path().join("ledger.jsonl");
    let mut cmd = crate::dedup();
    cmd.env("DEMO_LEDGER", &ledger).arg("replay");
    match store {
        Store::Memory => cmd.args(["--store", "memory"]),
        Store::Moto(endpoint) => cmd
            .args([
                "--store",
                "dynamodb",
                "--create-table",
                "--endpoint",
                endpoint,
                "--table",
            ])
            .arg(format!("dedup-events-{}", uuid::Uuid::new_v4().simple()))
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1"),
    };
    cmd.arg("--repeat")
        .arg(case.repeat.to_string())
        .args(&case.files);
    if let Some(policy) = case.policy {
        cmd.env("DEDUP_POLICY_FILE", events_dir().join(policy));
    }
    let out = cmd.output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("dedup replay exited {}: {stderr}", out.status));
    }
    let summary: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("no summary line in {stdout:?}"))?;
    let count = |k: &str| summary[k].as_u64().unwrap_or(u64::MAX);
    let invocations = case.files.len() as u64 * u64::from(case.repeat);
    let (executed, replayed, errors) = match case.expect {
        Expect::Once => (1, invocations - 1, 0),
        Expect::Twice => (2, invocations - 2, 0),
        Expect::Rejected => (0, 0, invocations),
        Expect::Unprotected => (invocations, 0, 0),
        Expect::KeyReused => (1, 0, invocations - 1),
    };
    let got = (
        count("invocations"),
        count("executed"),
        count("replayed"),
        count("errors"),
    );
    if got != (invocations, executed, replayed, errors) {
        return Err(format!(
            "expected {invocations} invocations, {executed} executed, {replayed} replayed, {errors} errors; got {summary}\n{stderr}"
        ));
    }
    let entries = dedup_cli::demo::read_ledger(&ledger).map_err(|e| e.to_string())?;
    if entries.len() as u64 != executed {
        return Err(format!(
            "the demo tool ran {} times, the summary says {executed}",
            entries.len()
        ));
    }
    Ok(())
}

/// Runs `cases` on `store`, a few at a time; panics listing every failure.
fn run_all(cases: &[&Case], store: Store<'_>) {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) = run(case, store) {
                        let names: Vec<String> = case.files.iter().map(|f| name(f)).collect();
                        failures.lock().unwrap().push(format!(
                            "{} ({:?}, policy {:?}): {e}",
                            names.join(" + "),
                            case.expect,
                            case.policy
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{store:?}: {} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn every_event_file_runs_through_dedup_replay() {
    let cases = cases();
    let corpus_pairs = cases.iter().filter(|c| c.corpus()).count();
    assert_eq!(
        corpus_pairs,
        96 + 12,
        "96 retry pairs and 12 deliberate repeats"
    );
    for dir in ["agentcore", "envelope"] {
        let of_dir = |c: &&Case| c.files[0].starts_with(events_dir().join(dir));
        assert!(
            cases
                .iter()
                .filter(of_dir)
                .any(|c| c.expect == Expect::Once && c.files.len() == 2)
                && cases
                    .iter()
                    .filter(of_dir)
                    .any(|c| c.expect == Expect::Twice)
                && cases
                    .iter()
                    .filter(of_dir)
                    .any(|c| c.expect == Expect::Rejected),
            "{dir}: a retry pair, a deliberate repeat and a bad event"
        );
    }
    run_all(&cases.iter().collect::<Vec<_>>(), Store::Memory);
}

/// The hand-written events of every entry point on a real DynamoDB-compatible server.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[test]
fn every_hand_written_event_runs_through_dedup_replay_on_moto() {
    let endpoint = std::env::var("DEDUP_TEST_MOTO_ENDPOINT")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| {
            panic!(
                "DEDUP_TEST_MOTO_ENDPOINT is not set: start the local DynamoDB servers first: \
                 `scripts/dynamodb-servers.sh install && eval \"$(scripts/dynamodb-servers.sh start)\"`"
            )
        });
    let cases = cases();
    let hand: Vec<&Case> = cases
        .iter()
        .filter(|c| !c.files[0].starts_with(corpus_dir()))
        .collect();
    assert!(hand.len() >= 20, "{} hand-written cases", hand.len());
    run_all(&hand, Store::Moto(&endpoint));
}

#[test]
fn the_adapters_read_every_valid_event_and_refuse_every_bad_one() {
    let scoping = Scoping {
        step_attribute: "dedup_step",
        run_argument: "dedup_run_id",
        scope: Scope::Turn,
        envelope_namespaces: None,
        sessionless: Sessionless::Refuse,
        caller_key_name: "idempotency_key",
        envelope_caller_key_scope: CallerKeyScope::Run,
    };
    for file in event_files() {
        let read = EventFile::read(file.clone()).unwrap();
        let event = read
            .event
            .unwrap_or_else(|e| panic!("{}: {e}", name(&file)));
        let call = Door::detect(&event, read.client_context.as_ref())
            .map_err(|refusal| refusal.reason)
            .and_then(|door| {
                let expected = match name(&file).split_once('/').map(|(dir, _)| dir) {
                    Some("agentcore") => matches!(door, Door::AgentCore(_)),
                    Some("envelope") => matches!(door, Door::Envelope(_)),
                    _ => matches!(door, Door::Bedrock { .. }),
                };
                assert!(expected, "{}: detected as {door:?}", name(&file));
                let call = door
                    .entry_point()
                    .expect("a door that invokes the tool")
                    .call(scoping)
                    .map_err(|unkeyed| match unkeyed {
                        Unkeyed::Refused(notice) => notice.message,
                        Unkeyed::Sessionless(missing) => missing,
                    })?;
                // What the adapter reads must also key (an over-long tool name does not).
                Keyer::new()
                    .key_and_fingerprint(&call.key_call())
                    .map_err(|e| e.to_string())?;
                Ok(call)
            });
        // The scoping refuses sessionless calls, so those events are refused here too.
        let bad = file.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            n.starts_with("bad-") || n.starts_with("sessionless-")
        });
        match (bad, call) {
            (false, Ok(call)) => assert!(call.args.len() > 2, "{}: no arguments", name(&file)),
            (false, Err(e)) => panic!("{}: {e}", name(&file)),
            (true, Ok(_)) => panic!("{}: a bad event was accepted", name(&file)),
            (true, Err(_)) => {}
        }
    }
}

#[test]
fn the_corpus_events_are_what_the_generator_builds() {
    let stale = corpus::events::stale(&corpus_dir());
    assert!(
        stale.is_empty(),
        "run `cargo run --bin dedup -- corpus`; stale: {stale:?}"
    );
    let generated = corpus::events::generate();
    assert_eq!(generated.len(), 1 + 2 * (96 + 12));
    // A fresh directory gets exactly these bytes, and an extra file there is reported.
    let dir = tempfile::tempdir().unwrap();
    let written = corpus::events::write(dir.path()).unwrap();
    assert_eq!(written.len(), generated.len());
    assert!(corpus::events::stale(dir.path()).is_empty());
    std::fs::write(dir.path().join("retry/extra-a.json"), "{}").unwrap();
    assert_eq!(
        corpus::events::stale(dir.path()),
        vec!["retry/extra-a.json (not generated)".to_string()]
    );
    corpus::events::write(dir.path()).unwrap();
    assert!(
        corpus::events::stale(dir.path()).is_empty(),
        "write removes it"
    );
}
