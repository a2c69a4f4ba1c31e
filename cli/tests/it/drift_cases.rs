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
