//! Upgrades that never run a call twice (issue 52): two builds serve one table side by side, as
//! the stacks' 10 % canary makes them for five minutes, and a retry lands on the other build.
//!
//! The old build is a handler keyed with `typed/v2`, the rules every build before pinning used:
//! that these are the old build's rules is what `tests/golden/typed/v2.jsonl` (the golden file
//! those builds were checked against, unchanged) and the shared hash domain
//! (`every_version_keys_under_the_first_versions_hash_domain`) prove. The new build is this
//! build with the deployment's config: no pin, so it keys as the old one did.
//!
//! Then the operator moves the pin to `typed/v3` between runs: `dedup key --compare-keyer` lists
//! the calls the move re-keys, and exactly those run again if a retry straddles it.

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Handler, Invocation};
use toolcall_dedup::key::{Call, Keyer, KeyerVersion, Strategy};
use toolcall_dedup::stand_ins::demo::{DemoTool, Ledger, read_ledger};
use toolcall_dedup::store::{DynamoDbStore, ManualClock};
use toolcall_dedup::telemetry::Outcome;

use crate::servers::{self, Backend};

/// Our own retries: a call, and the same call written again the ways a model does.
fn retries() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "charge_card",
            json!({"amount": 4200, "currency": "USD", "customer": "cus_17"}),
            json!({"customer": "cus_17", "currency": "usd", "amount": 4200.0}),
        ),
        (
            "book_room",
            json!({"room": "Fjord", "starts_at": "2026-12-07T09:00:00Z", "notes": null}),
            json!({"starts_at": "2026-12-07T10:00:00.000+01:00", "room": "Fjord"}),
        ),
        (
            "add_contact_note",
            json!({"contact_name": "Maria Lopez", "note": "Remember to buy milk."}),
            json!({"contact_name": " Maria Lopez ", "note": " Remember to buy milk. "}),
        ),
        (
            "replace_line",
            json!({"path": "app.py", "old_line": "    return None", "new_line": "    return 0"}),
            json!({"path": " app.py", "old_line": "    return  None ", "new_line": "    return 0"}),
        ),
    ]
}

fn envelope(tool: &str, args: &Value, run: &str) -> Value {
    json!({"tool": tool, "run_id": run, "step": 1, "args": args.to_string()})
}

type Build = Handler<DynamoDbStore, DemoTool>;

/// A build on `store` whose demo tool writes to the ledger file both builds share.
fn build(store: &DynamoDbStore, ledger: &std::path::Path, keyer: Option<KeyerVersion>) -> Build {
    let mut config = Config::default();
    if let Some(version) = keyer {
        config.keyer = version;
    }
    crate::fixture::handler(store.clone(), DemoTool::new(Ledger::file(ledger)), &config)
}

/// Sends `a` to `first` and its retry `b` to `second`; the outcomes.
async fn across(first: &Build, second: &Build, a: &Value, b: &Value) -> (Outcome, Outcome) {
    let one = first.handle(a, &Invocation::default()).await.outcome;
    let two = second.handle(b, &Invocation::default()).await.outcome;
    (one, two)
}

fn runs(ledger: &std::path::Path) -> usize {
    read_ledger(ledger).map_or(0, |entries| entries.len())
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_retry_on_the_other_build_replays_whichever_way_it_crosses() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let old = build(&store, &ledger, Some(KeyerVersion::V2));
    let new = build(&store, &ledger, None);
    let mut sent = 0;
    for (n, (tool, a, b)) in retries().iter().enumerate() {
        // Old build first, then new build first: each crossing in its own run.
        for (first, second, run) in [
            (&old, &new, format!("old-{n}")),
            (&new, &old, format!("new-{n}")),
        ] {
            let (a, b) = (envelope(tool, a, &run), envelope(tool, b, &run));
            let before = runs(&ledger);
            let outcomes = across(first, second, &a, &b).await;
            sent += 1;
            // A v2 retry of a padded value is a stranger under both builds alike (v2's rule).
            let padded = *tool == "add_contact_note";
            let expected = if padded {
                (Outcome::Executed, Outcome::Executed)
            } else {
                (Outcome::Executed, Outcome::Replayed)
            };
            assert_eq!(outcomes, expected, "{tool} {run}");
            assert_eq!(
                runs(&ledger) - before,
                if padded { 2 } else { 1 },
                "{tool} {run}"
            );
        }
    }
    assert_eq!(sent, 2 * retries().len());
}

/// The move between runs: what `--compare-keyer typed/v2 typed/v3` lists is exactly what runs
/// again when a retry straddles the move, and nothing else does.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_move_of_the_pin_re_keys_exactly_the_calls_compare_keyer_lists() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let before_move = build(&store, &ledger, None);
    let after_move = build(&store, &ledger, Some(KeyerVersion::V3));
    let compared = |version: KeyerVersion, call: &Call<'_>| {
        Keyer::new()
            .with_version(version)
            .key(Strategy::Typed, call)
            .unwrap()
    };
    let mut re_keyed = 0;
    for (tool, a, _) in retries() {
        // The identical call sent again after the move: only a changed canonical form re-keys it.
        let args = a.to_string();
        let call = Call {
            tool,
            args: &args,
            run_id: Some("run-move"),
            step: Some("1"),
            ..Call::default()
        };
        let listed = compared(KeyerVersion::V2, &call) != compared(KeyerVersion::V3, &call);
        let event = envelope(tool, &a, "run-move");
        let before = runs(&ledger);
        let outcomes = across(&before_move, &after_move, &event, &event).await;
        let ran = runs(&ledger) - before;
        assert_eq!(ran, 1 + usize::from(listed), "{tool}: {outcomes:?}");
        re_keyed += usize::from(listed);
    }
    // None of these retries' first sends has a pad before several words: the move re-keys none.
    assert_eq!(re_keyed, 0);

    // A padded call straddling the move is listed, and runs again: move between runs.
    let padded = json!({"contact_name": " Maria Lopez", "note": "x"});
    let args = padded.to_string();
    let call = Call {
        tool: "add_contact_note",
        args: &args,
        run_id: Some("run-pad"),
        step: Some("1"),
        ..Call::default()
    };
    assert_ne!(
        compared(KeyerVersion::V2, &call),
        compared(KeyerVersion::V3, &call)
    );
    let event = envelope("add_contact_note", &padded, "run-pad");
    let before = runs(&ledger);
    across(&before_move, &after_move, &event, &event).await;
    assert_eq!(runs(&ledger) - before, 2);
}
