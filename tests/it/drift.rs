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

/// A route can state the namespace its calls are keyed in, so that renaming an action group, or
/// moving it to another agent, keeps its calls' keys: a retry that spans the rename replays.
/// Without one, the namespace is the one the door derives (agent id and group), and the same
/// retry runs again.
#[tokio::test]
async fn a_namespace_a_route_states_keeps_keys_across_a_renamed_action_group() {
    use toolcall_dedup::dispatch::Routes;
    let original = event("fd-charge_card.json");
    let mut renamed = original.clone();
    renamed["actionGroup"] = json!("billing");
    renamed["agent"]["id"] = json!("AGENT00002");
    let stated = r#"{"payments/*": {"function": "demo", "namespace": "payments", "shared": true},
                     "billing/*": {"function": "demo", "namespace": "payments", "shared": true}}"#;
    for (routes, want) in [
        (r#"{"*": "demo"}"#, Outcome::Executed),
        (stated, Outcome::Replayed),
    ] {
        let config = Config {
            routes: Routes::parse(routes).unwrap(),
            ..Config::default()
        };
        let h = handler(MemoryStore::new(), demo(), &config);
        let first = send(&h, &original).await;
        assert_eq!(first.outcome, Outcome::Executed);
        let retry = send(&h, &renamed).await;
        assert_eq!(retry.outcome, want, "{routes}: {:?}", retry.response);
        let record = h.store().get(first.key.as_deref().unwrap()).await.unwrap();
        let namespace = record.unwrap().about.namespace;
        let expected = if want == Outcome::Replayed {
            "bedrock:payments"
        } else {
            "bedrock:K7QZ2M4RTB/payments"
        };
        assert_eq!(namespace.as_deref(), Some(expected), "{routes}");
    }
}

#[test]
fn a_route_namespace_must_be_text() {
    use toolcall_dedup::dispatch::Routes;
    for bad in [
        r#"{"*": {"function": "demo", "namespace": ""}}"#,
        r#"{"*": {"function": "demo", "namespace": 7}}"#,
    ] {
        let err = Routes::parse(bad).unwrap_err();
        assert!(
            err.contains("\"namespace\" must be a non-empty string"),
            "{err}"
        );
    }
    let routes = Routes::parse(
        r#"{"payments/charge_card": "exact", "payments/*": {"function": "group", "namespace": "pay", "shared": true}}"#,
    )
    .unwrap();
    let namespace = |group, tool| routes.take(group, tool).and_then(|(_, ns)| ns);
    assert_eq!(namespace("payments", "refund"), Some("pay"));
    assert_eq!(
        namespace("payments", "charge_card"),
        None,
        "the namespace of the route the call takes, not of a wider one"
    );
    assert_eq!(namespace("support", "refund"), None);
    assert_eq!(routes.stated_namespace("payments/*"), Some("pay"));
    assert_eq!(routes.stated_namespace("payments/charge_card"), None);
    // A stated namespace on a route that catches several callers merges them: refused unless
    // the route says they share it.
    for catching in [
        r#"{"*": {"function": "demo", "namespace": "pay"}}"#,
        r#"{"payments/*": {"function": "demo", "namespace": "pay"}}"#,
    ] {
        let err = Routes::parse(catching).unwrap_err();
        assert!(err.contains("catches several callers"), "{err}");
    }
    assert!(
        Routes::parse(r#"{"payments/refund": {"function": "demo", "namespace": "pay"}}"#).is_ok()
    );
    let everything = Routes::everything_to("demo");
    assert_eq!(
        everything.take("support", "refund"),
        Some(("demo", None)),
        "the default route states no namespace"
    );
}
