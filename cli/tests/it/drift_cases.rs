//! Structural drift (tests/cases/drift): undeclared members and unordered lists, keyed through
//! `dedup key --policy` as the issue's checks ask.

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;

use crate::fixture::root;

fn keys(lines: &[Value]) -> Vec<Value> {
    let mut child = crate::dedup()
        .args([
            "key",
            "--policy",
            "tests/cases/drift/policy.json",
            "--explain",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn undeclared_members_and_unordered_lists_key_as_the_policy_says() {
    let cases: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/cases/drift/pairs.json")).unwrap(),
    )
    .unwrap();
    for pair in cases["pairs"].as_array().unwrap() {
        let call = |side: &str| serde_json::json!({"tool": pair["tool"], "args": pair[side].to_string(), "run_id": "r1", "step": 1});
        let out = keys(&[call("a"), call("b")]);
        let same = out[0]["key"] == out[1]["key"];
        let want_same = pair["expect"] == "same";
        assert_eq!(same, want_same, "{}: {} | {}", pair["id"], out[0], out[1]);
    }
}

#[test]
fn explain_names_the_structural_rules() {
    let call = serde_json::json!({"tool": "exchange_items", "run_id": "r1", "step": 1,
        "args": r##"{"order_id":"#W1","item_ids":["2","1"],"new_item_ids":["3"],"payment_method_id":"p","extra":1}"##});
    let out = keys(&[call]);
    let rules: Vec<&str> = out[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        rules.contains(&"undeclared-ignored") && rules.contains(&"list-order"),
        "{rules:?}"
    );
    assert!(!out[0]["canonical"].as_str().unwrap().contains("extra"));
}

#[test]
fn compare_policy_lists_the_calls_a_policy_change_rekeys() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.json");
    // The same tool without the structural options.
    let mut policy: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/cases/drift/policy.json")).unwrap(),
    )
    .unwrap();
    let tool = policy["tools"]["exchange_items"].as_object_mut().unwrap();
    tool.remove("undeclared");
    tool.remove("fields");
    std::fs::write(&old, policy.to_string()).unwrap();
    let calls = [
        // Unaffected: no undeclared member, lists already in order.
        r##"{"tool": "exchange_items", "run_id": "r1", "step": 1, "args": "{\"order_id\": \"#W1\", \"item_ids\": [\"1\", \"2\"], \"new_item_ids\": [\"3\"], \"payment_method_id\": \"p\"}"}"##,
        // Re-keyed: an undeclared member now leaves the key.
        r##"{"dedup_call": 1, "tool": "exchange_items", "run_id": "r1", "step": 2, "keys": {}, "args": "{\"order_id\": \"#W1\", \"item_ids\": [\"1\"], \"new_item_ids\": [\"3\"], \"payment_method_id\": \"p\", \"note\": \"x\"}"}"##,
        // Re-keyed: a list out of order is now sorted.
        r##"{"tool": "exchange_items", "run_id": "r1", "step": 3, "args": "{\"order_id\": \"#W1\", \"item_ids\": [\"2\", \"1\"], \"new_item_ids\": [\"3\"], \"payment_method_id\": \"p\"}"}"##,
        // Another tool, untouched by the change.
        r##"{"tool": "book_trip", "run_id": "r1", "step": 4, "args": "{\"user_id\": \"u\"}"}"##,
        "not a call",
    ];
    let mut child = crate::dedup()
        .args([
            "key",
            "--compare-policy",
            old.to_str().unwrap(),
            "tests/cases/drift/policy.json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for call in calls {
        writeln!(stdin, "{call}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rekeyed: Vec<u64> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l["line"].as_u64().unwrap())
        .collect();
    assert_eq!(rekeyed, [2, 3]);
    assert_ne!(lines[0]["old_policy"], lines[0]["new_policy"]);
    let summary = lines.last().unwrap();
    assert_eq!(summary["calls"], 4);
    assert_eq!(summary["rekeyed"], 2);
    assert_eq!(summary["skipped"], 1);
    assert_eq!(summary["by_tool"]["book_trip"]["rekeyed"], 0);
}

#[test]
fn explain_prints_the_keyer_version_and_the_policy_fingerprint() {
    let call = serde_json::json!({"tool": "book_trip", "args": r#"{"user_id": "u"}"#});
    let out = keys(&[call]);
    assert_eq!(out[0]["keyer_version"], "typed/v2");
    let fingerprint = out[0]["policy"].as_str().unwrap();
    assert_eq!(fingerprint.len(), 12, "{fingerprint}");
    let other = serde_json::json!({"tool": "no_policy", "args": "{}"});
    assert!(keys(&[other])[0]["policy"].is_null());
}

/// `--config` keys as the function its document configures: the document's pinned keyer
/// (`settings.keyer`) and its tools' policies; `--keyer` overrides the pin. (Before, `dedup key`
/// read only `DEDUP_KEYER`, so an operator keying with the function's document got the unpinned
/// default's keys, not the function's.)
#[test]
fn config_keys_with_the_documents_pinned_keyer_and_policies() {
    let dir = tempfile::tempdir().unwrap();
    let document = dir.path().join("dedup.yaml");
    std::fs::write(
        &document,
        "settings:\n  keyer: typed/v3\ntools:\n  add_note: {key_fields: [note]}\n",
    )
    .unwrap();
    let lines = [
        serde_json::json!({"tool": "add_note", "args": r#"{"note": " Call Maria back", "at": "09:00"}"#}),
        serde_json::json!({"tool": "add_note", "args": r#"{"note": "Call Maria back", "at": "10:30"}"#}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let doc = document.to_str().unwrap();
    let (keyed, ok, stderr) =
        crate::cli_key::dedup_key_with_stderr(&["--config", doc, "--explain"], &input);
    assert!(ok, "{stderr}");
    assert_eq!(keyed[0]["keyer_version"], "typed/v3");
    // The pad goes under v3, and the policy keys on `note` alone.
    assert_eq!(keyed[0]["key"], keyed[1]["key"], "{keyed:?}");
    let (overridden, ok, _) =
        crate::cli_key::dedup_key_with_stderr(&["--config", doc, "--keyer", "typed/v2"], &input);
    assert!(ok);
    assert_ne!(overridden[0]["key"], overridden[1]["key"]);
    let (without, ok, _) = crate::cli_key::dedup_key_with_stderr(&[], &input);
    assert!(ok);
    assert_ne!(without[0]["key"], without[1]["key"]);
    let (refused, ok, stderr) =
        crate::cli_key::dedup_key_with_stderr(&["--config", "no-such.yaml"], &input);
    assert!(
        !ok && refused.is_empty() && stderr.contains("no-such.yaml"),
        "{stderr}"
    );
}

/// `--compare-keyer` lists exactly the calls a move of the pinned version re-keys (a single pad
/// before several words, v2 → v3), names both versions, and says the version `--explain` keyed with.
#[test]
fn compare_keyer_lists_the_calls_a_version_move_re_keys() {
    let lines = [
        serde_json::json!({"tool": "add_note", "args": r#"{"note": " Call Maria back"}"#}),
        serde_json::json!({"tool": "add_note", "args": r#"{"note": "Call Maria back"}"#}),
        serde_json::json!({"tool": "edit", "args": r#"{"line": "    return None"}"#}),
        serde_json::json!({"tool": "edit", "args": r#"{"path": " app.py"}"#}),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let compare = ["--compare-keyer", "typed/v2", "typed/v3"];
    let (out, ok, stderr) = crate::cli_key::dedup_key_with_stderr(&compare, &input);
    assert!(ok, "{stderr}");
    let (changed, summary) = out.split_at(out.len() - 1);
    assert_eq!(changed.len(), 1, "{out:?}");
    assert_eq!(changed[0]["line"], 1);
    assert_eq!(
        (&changed[0]["old_keyer"], &changed[0]["new_keyer"]),
        (&Value::from("typed/v2"), &Value::from("typed/v3"))
    );
    assert_eq!(
        (summary[0]["calls"].as_u64(), summary[0]["rekeyed"].as_u64()),
        (Some(4), Some(1))
    );
    let (explained, ok, _) =
        crate::cli_key::dedup_key_with_stderr(&["--explain", "--keyer", "typed/v3"], &input);
    assert!(ok);
    assert_eq!(explained[0]["keyer_version"], "typed/v3");
    assert_eq!(explained[0]["key"], explained[1]["key"]);
    let (refused, ok, stderr) = crate::cli_key::dedup_key_with_stderr(&["--keyer", "typed/v9"], "");
    assert!(
        !ok && refused.is_empty() && stderr.contains("typed/v3"),
        "{stderr}"
    );
}
