//! Golden vectors for the key core.
//! - `tests/golden/article.jsonl`: keys computed by the article's own Python listings
//!   (`scripts/article_keyers.py`), which our keyers A–D must reproduce exactly.
//! - `tests/golden/typed/<version>.jsonl`: one hand-written vector per rule of each typed keyer
//!   version, the canonical form written from the rule's statement.

use serde_json::Value;
use toolcall_dedup::key::{Call, Keyer, KeyerVersion, Rules, Schema, Strategy};

fn lines(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {e}: {l}")))
        .collect()
}

#[test]
fn article_keyers_match_the_articles_python_code() {
    let keyer = Keyer::new();
    let vectors = lines("tests/golden/article.jsonl");
    assert!(vectors.len() >= 25);
    for v in &vectors {
        let step = v.get("step").map(|s| match s {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        let call = Call {
            tool: v["tool"].as_str().unwrap(),
            args: v["args"].as_str().unwrap(),
            run_id: v.get("run_id").and_then(Value::as_str),
            step: step.as_deref(),
            ..Call::default()
        };
        for strategy in [
            Strategy::Raw,
            Strategy::Canonical,
            Strategy::Normalized,
            Strategy::Scoped,
        ] {
            let expected = &v[strategy.name()];
            let got = keyer.key(strategy, &call);
            match expected {
                Value::String(hex) => {
                    assert_eq!(
                        got.map(|k| k.to_string()).as_ref(),
                        Ok(hex),
                        "{strategy} on {}",
                        v["args"]
                    )
                }
                _ => assert!(
                    got.is_err(),
                    "{strategy} on {}: Python raised {expected}, we gave {got:?}",
                    v["args"]
                ),
            }
        }
    }
}

/// Each keyer version's vectors (`tests/golden/typed/<version>.jsonl`), derived under that version.
#[test]
fn typed_rules_produce_their_stated_canonical_form_in_every_version() {
    for version in KeyerVersion::ALL {
        let keyer = Keyer::new().with_version(version);
        for v in lines(&golden_file(version)) {
            let schema = v.get("schema").map(|s| Schema::from_json(s).unwrap());
            let call = Call {
                tool: "t",
                args: v["args"].as_str().unwrap(),
                schema: schema.as_ref(),
                ..Call::default()
            };
            let explained = keyer
                .explain(Strategy::Typed, &call)
                .unwrap_or_else(|e| panic!("{version}: {}: {e}", v["rule"]));
            assert_eq!(
                explained.canonical,
                v["canonical"].as_str().unwrap(),
                "{version}: rule: {}",
                v["rule"]
            );
        }
    }
}

fn golden_file(version: KeyerVersion) -> String {
    let name = version.name().strip_prefix("typed/").unwrap();
    format!("tests/golden/typed/{name}.jsonl")
}

/// Each keyer version and how many of its golden file's vectors (the first ones) were pinned with
/// it, with their digest (issue 52: a keyer version that cannot lie). A rule change that moves any
/// pinned vector fails `typed_rules_produce_their_stated_canonical_form_in_every_version`; rewriting
/// the vector to follow fails here. The way on is a new version (a variant of `KeyerVersion`, its own
/// golden file, its line here), the old version's rules kept and its file untouched. New vectors
/// may be appended to the newest file without a new version.
const PINNED_VECTORS: &[(KeyerVersion, usize, &str)] = &[
    (
        KeyerVersion::V1,
        29,
        "863dc83fdf451b3364a4cc2990f7f970119fb59906fa17855c55286afea75783",
    ),
    (
        KeyerVersion::V2,
        32,
        "0ca9b9e77b363abcddb179aa0db3fd64d381e4fb076035e911b299aa5c295a9c",
    ),
    (
        KeyerVersion::V3,
        36,
        "845341e91c74e651296804618976c65700847f51d2564fbd7a8adb5912195adf",
    ),
];

#[test]
fn the_golden_vectors_are_pinned_to_the_keyer_version() {
    use sha2::{Digest, Sha256};
    for version in KeyerVersion::ALL {
        let (_, count, pinned) = PINNED_VECTORS
            .iter()
            .find(|(v, _, _)| *v == version)
            .unwrap_or_else(|| panic!("{version} has no pinned vectors: add its line"));
        let vectors = lines(&golden_file(version));
        assert!(
            vectors.len() >= *count,
            "{version}: pinned vectors were removed"
        );
        let mut digest = Sha256::new();
        for v in &vectors[..*count] {
            let pinned_part = serde_json::json!([v["args"], v.get("schema"), v["canonical"]]);
            digest.update(pinned_part.to_string().as_bytes());
            digest.update(b"\n");
        }
        let digest = hex::encode(digest.finalize());
        assert_eq!(
            &digest, pinned,
            "the first {count} golden vectors of {version} changed: a changed vector is a changed \
             key; keep {version}'s rules and file, and add a new version for the new rules"
        );
    }
}

/// Every version hashes under the one domain the first version's keys were written under, so a
/// record written before versions were pinned is found by its retry, and a version move re-keys
/// only the calls whose canonical form it changes. The key below is computed from the documented
/// layout (domain, four length-prefixed scope fields, the canonical text) by hand in Python.
#[test]
fn every_version_keys_under_the_first_versions_hash_domain() {
    let call = Call {
        tool: "charge_card",
        args: r#"{"amount": 4200.0}"#,
        namespace: Some("agent/payments"),
        run_id: Some("r1"),
        step: Some("2"),
        ..Call::default()
    };
    for version in KeyerVersion::ALL {
        let e = Keyer::new()
            .with_version(version)
            .explain(Strategy::Typed, &call)
            .unwrap();
        assert_eq!(e.canonical, r#"{"amount":4200}"#);
        assert_eq!(
            e.key.to_string(),
            "bed98f00c656401184a06e1ef09d3f12",
            "{version}"
        );
    }
}

/// The rule each version changed, on both sides: a padded retry merges from v3 on while two
/// indentations stay apart in every version since v2 (v1 merged them: the false merge v2 fixed).
#[test]
fn padding_merges_and_indentation_stays_apart_from_v3() {
    let key = |version: KeyerVersion, text: &str| {
        let args = serde_json::json!({ "line": text }).to_string();
        let call = Call {
            tool: "t",
            args: &args,
            ..Call::default()
        };
        Keyer::new()
            .with_version(version)
            .key(Strategy::Typed, &call)
            .unwrap()
    };
    let padded = |v| key(v, " Maria Lopez ") == key(v, "Maria Lopez");
    let indented_apart = |v| key(v, "    return None") != key(v, "        return None");
    assert!(padded(KeyerVersion::V1) && !indented_apart(KeyerVersion::V1));
    assert!(!padded(KeyerVersion::V2) && indented_apart(KeyerVersion::V2));
    assert!(padded(KeyerVersion::V3) && indented_apart(KeyerVersion::V3));
}

#[test]
fn typed_key_separates_every_scope_field() {
    let keyer = Keyer::new();
    let base = Call {
        tool: "charge_card",
        args: r#"{"amount": 1}"#,
        ..Call::default()
    };
    let variants = [
        base,
        Call {
            namespace: Some("agent/payments"),
            ..base
        },
        Call {
            run_id: Some("run-1"),
            ..base
        },
        Call {
            step: Some("3"),
            ..base
        },
        Call {
            run_id: Some(""),
            ..base
        },
        Call {
            step: Some(""),
            ..base
        },
        Call {
            tool: "refund",
            ..base
        },
        // The article's `|` join would make these two equal: "a|b" + "c" vs "a" + "b|c".
        Call {
            run_id: Some("a|b"),
            step: Some("c"),
            ..base
        },
        Call {
            run_id: Some("a"),
            step: Some("b|c"),
            ..base
        },
    ];
    let keys: std::collections::HashSet<_> = variants
        .iter()
        .map(|c| keyer.key(Strategy::Typed, c).unwrap())
        .collect();
    assert_eq!(keys.len(), variants.len());
}

#[test]
fn retries_meet_and_distinct_calls_do_not() {
    let keyer = Keyer::new();
    let key = |args: &str| {
        keyer
            .key(
                Strategy::Typed,
                &Call {
                    tool: "charge_card",
                    args,
                    ..Call::default()
                },
            )
            .unwrap()
    };
    assert_eq!(
        key(r#"{"amount": 4200.0, "currency": "usd"}"#),
        key(r#"{"currency":"USD","amount":4200}"#)
    );
    assert_ne!(key(r#"{"zip": "01234"}"#), key(r#"{"zip": "1234"}"#));
    assert_ne!(
        key(r#"{"n": 9007199254740993}"#),
        key(r#"{"n": 9007199254740992}"#)
    );
    assert_ne!(key(r#"{"v": "1.10"}"#), key(r#"{"v": "1.1"}"#));
    assert_ne!(
        key(r#"{"id": "cus_Ab12Xy"}"#),
        key(r#"{"id": "cus_ab12xy"}"#)
    );
    assert_ne!(key(r#"{"a": [1, 2]}"#), key(r#"{"a": [2, 1]}"#));
    assert_ne!(
        key(r#"{"at": "2026-08-11T09:00:00"}"#),
        key(r#"{"at": "2026-08-11T09:00:00Z"}"#)
    );
}

/// Declared types are evidence of different strength: Bedrock's `number`/`integer`/`boolean`/`array`
/// coerce as a schema would; its `string` (every textual parameter) is no evidence, so the schema-free
/// rules apply; a real JSON Schema laid over it (a policy's) is strict again.
#[test]
fn bedrock_declared_string_is_weaker_than_a_schema() {
    let keyer = Keyer::new();
    let declared = Schema::from_declared_types([
        ("amount", "number"),
        ("currency", "string"),
        ("customer_id", "string"),
        ("metadata", "string"),
    ])
    .unwrap();
    let policy = |currency: serde_json::Value| {
        Schema::from_json(
            &serde_json::json!({"type": "object", "properties": {"currency": currency}}),
        )
        .unwrap()
    };
    let strict = declared
        .clone()
        .overlay(&policy(serde_json::json!({"type": "string"})));
    let enumerated = declared
        .clone()
        .overlay(&policy(serde_json::json!({"enum": ["USD", "EUR"]})));
    let explain = |schema: &Schema, args: &str| {
        keyer
            .explain(
                Strategy::Typed,
                &Call {
                    tool: "charge_card",
                    args,
                    schema: Some(schema),
                    ..Call::default()
                },
            )
            .unwrap()
    };
    let original = r#"{"amount": "4200", "currency": "USD", "customer_id": "cus_Ab12Xy",
                      "metadata": "{\"order_id\": \"ord-1\", \"channel\": \"Web\"}"}"#;
    let retry = r#"{"metadata": "{\n  \"channel\": \"web\",\n  \"order_id\": \"ord-1\"\n}",
                   "customer_id": "cus_Ab12Xy", "currency": "usd", "amount": "4200.0"}"#;
    let recased_id = original.replace("cus_Ab12Xy", "cus_ab12xy");

    // Declared types only: the canonical form the schema-free rules give, the object parsed.
    let a = explain(&declared, original);
    assert_eq!(
        a.canonical,
        r#"{"amount":4200,"currency":"usd","customer_id":"cus_Ab12Xy","metadata":{"channel":"web","order_id":"ord-1"}}"#
    );
    assert!(a.rules.contains(Rules::JSON_TEXT) && a.rules.contains(Rules::CASEFOLD));
    assert_eq!(explain(&declared, retry).key, a.key);
    assert_ne!(
        explain(&declared, &recased_id).key,
        a.key,
        "identifiers keep case"
    );

    // A policy schema saying `type: string` is strict: case stays apart.
    assert_ne!(explain(&strict, retry).key, explain(&strict, original).key);
    assert!(
        explain(&strict, original)
            .canonical
            .contains(r#""currency":"USD""#)
    );
    // An enum in the policy matches case-insensitively and writes the member.
    assert_eq!(
        explain(&enumerated, retry).key,
        explain(&enumerated, original).key
    );
    assert!(
        explain(&enumerated, retry)
            .canonical
            .contains(r#""currency":"USD""#)
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let keyer = Keyer::new();
    let err = |tool: &str, args: &str| {
        keyer
            .key(
                Strategy::Typed,
                &Call {
                    tool,
                    args,
                    ..Call::default()
                },
            )
            .unwrap_err()
    };
    assert!(
        err("t", r#"{"a": 1, "a": 2}"#)
            .to_string()
            .contains("duplicate object key \"a\"")
    );
    assert!(
        err("t", &("[".repeat(10_000) + &"]".repeat(10_000)))
            .to_string()
            .contains("deeper than 64")
    );
    assert!(
        err("t", &format!(r#"{{"a": "{}"}}"#, "x".repeat(300 * 1024)))
            .to_string()
            .contains("limit")
    );
    assert!(err("t", r#"{"a": NaN}"#).to_string().contains("NaN"));
    assert!(
        err("t", r#"{"a": "\ud800"}"#)
            .to_string()
            .contains("surrogate")
    );
    assert!(err("t", "[1]").to_string().contains("object"));
    assert!(err("", "{}").to_string().contains("tool name"));
}
