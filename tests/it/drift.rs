//! Structural drift (tests/cases/drift) through the handler: a repeat with undeclared members or a
//! reordered unordered list replays; a changed declared value runs again.

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::MemoryStore;
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::*;

#[tokio::test]
async fn each_drift_case_runs_once_or_twice_as_it_says() {
    let config = Config {
        policies: PolicySet::load(&root().join("tests/cases/drift/policy.json")).unwrap(),
        ..Config::default()
    };
    let cases: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/cases/drift/pairs.json")).unwrap(),
    )
    .unwrap();
    for (i, pair) in cases["pairs"].as_array().unwrap().iter().enumerate() {
        let h = handler(MemoryStore::new(), demo(), &config);
        let envelope = |side: &str| json!({"tool": pair["tool"], "run_id": format!("run-{i}"), "args": pair[side].to_string()});
        let first = send(&h, &envelope("a")).await;
        assert_eq!(first.outcome, Outcome::Executed, "{}", pair["id"]);
        let second = send(&h, &envelope("b")).await;
        let want = if pair["expect"] == "same" {
            Outcome::Replayed
        } else {
            Outcome::Executed
        };
        assert_eq!(
            second.outcome, want,
            "{}: {:?}",
            pair["id"], second.response
        );
    }
}

#[test]
fn an_object_schema_can_ignore_its_undeclared_members_itself() {
    use toolcall_dedup::key::{Call, Keyer, Schema, Strategy};
    let schema = |x_dedup: Value| {
        Schema::from_json(&json!({"type": "object", "x-dedup": x_dedup,
            "properties": {"order_id": {"type": "string"}, "item_ids": {"type": "array", "x-dedup": "unordered"}}}))
    };
    let keyer = Keyer::new();
    let key = |schema: &Schema, args: &str| {
        keyer
            .key(
                Strategy::Typed,
                &Call {
                    tool: "exchange_items",
                    args,
                    schema: Some(schema),
                    ..Call::default()
                },
            )
            .unwrap()
    };
    let ignoring = schema(json!({"undeclared": "ignore"})).unwrap();
    let base = r#"{"order_id": "W1", "item_ids": ["b", "a"]}"#;
    let echoed = r#"{"order_id": "W1", "item_ids": ["a", "b"], "customer": "Ada"}"#;
    assert_eq!(key(&ignoring, base), key(&ignoring, echoed));
    let keying = schema(json!({"undeclared": "key"})).unwrap();
    assert_ne!(key(&keying, base), key(&keying, echoed));
    assert!(schema(json!({"undeclared": "sometimes"})).is_err());
    assert!(schema(json!(7)).is_err());
}
