//! Every event file under `events/` (hand-written and the generated corpus) goes through the real
//! `dedup replay` binary with the in-memory store, one pair per run so that each pair meets a fresh
//! store:
//!
//! - a retry pair (`events/corpus/retry/*-a.json` + `-b.json`, `fd-charge_card.json` +
//!   `fd-charge_card-retry.json`) executes once and replays once;
//! - a deliberate repeat (`events/corpus/deliberate_repeat/*`, `fd-charge_card-step3/4.json`)
//!   executes twice;
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
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use toolcall_dedup::bedrock::Envelope;
use toolcall_dedup::corpus;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn events_dir() -> PathBuf {
    root().join("events")
}

fn corpus_dir() -> PathBuf {
    events_dir().join("corpus")
}

fn policy_file() -> PathBuf {
    corpus_dir().join(corpus::events::POLICY_FILE)
}

/// Key policies among the events (not events): the corpus's and `events/policies/`.
fn is_policy(path: &Path) -> bool {
    path == policy_file() || path.starts_with(events_dir().join("policies"))
}

/// Every `*.json` under `events/` except the key policies, sorted.
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
    files.retain(|f| !is_policy(f));
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
}

#[derive(Debug)]
struct Case {
    files: Vec<PathBuf>,
    repeat: u32,
    expect: Expect,
    /// `DEDUP_POLICY_FILE`, relative to `events/`.
    policy: Option<&'static str>,
}

/// Hand-written pairs (events/README.md), with the policy each runs under; every other valid
/// hand-written file is a single call.
const HAND_PAIRS: [(&str, &str, Expect, Option<&str>); 4] = [
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
            Some("") if file_name.starts_with("bad-") => cases.push(Case {
                files: vec![file.clone()],
                repeat: 1,
                expect: Expect::Rejected,
                policy: None,
            }),
            Some("") => cases.push(Case {
                files: vec![file.clone()],
                repeat: 2,
                expect: Expect::Once,
                policy: None,
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

/// `dedup replay` without any DEDUP_* variable of the caller's environment.
fn dedup() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dedup"));
    for (var, _) in std::env::vars() {
        if var.starts_with("DEDUP_") || var == "DEMO_LEDGER" || var == "RUST_LOG" {
            cmd.env_remove(var);
        }
    }
    cmd.current_dir(root());
    cmd
}

/// Runs one case; the error says what went wrong.
fn run(case: &Case) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ledger = dir.path().join("ledger.jsonl");
    let mut cmd = dedup();
    cmd.env("DEMO_LEDGER", &ledger)
        .args(["replay", "--store", "memory", "--repeat"])
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
    let entries = toolcall_dedup::demo::read_ledger(&ledger).map_err(|e| e.to_string())?;
    if entries.len() as u64 != executed {
        return Err(format!(
            "the demo tool ran {} times, the summary says {executed}",
            entries.len()
        ));
    }
    Ok(())
}

#[test]
fn every_event_file_runs_through_dedup_replay() {
    let cases = cases();
    let corpus_pairs = cases
        .iter()
        .filter(|c| c.policy == Some("corpus/policy.json"))
        .count();
    assert_eq!(
        corpus_pairs,
        96 + 12,
        "96 retry pairs and 12 deliberate repeats"
    );
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Err(e) = run(case) {
                        let names: Vec<String> = case.files.iter().map(|f| name(f)).collect();
                        failures.lock().unwrap().push(format!(
                            "{} ({:?}): {e}",
                            names.join(" + "),
                            case.expect
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn the_adapter_reads_every_valid_event_and_refuses_every_bad_one() {
    for file in event_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let event: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", name(&file)));
        let read = Envelope::parse(&event).and_then(|envelope| envelope.tool_call());
        let bad = file
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("bad-"));
        match (bad, read) {
            (false, Ok(call)) => assert!(!call.params.is_empty(), "{}", name(&file)),
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
