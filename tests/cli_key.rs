//! The `dedup key` contract: one output line per input line, in order; errors inline; exit status.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

fn dedup_key(args: &[&str], input: &str) -> (Vec<Value>, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dedup"))
        .arg("key")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("dedup runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, out.status.success())
}

#[test]
fn a_retry_gets_the_same_key_and_the_issue_example_holds() {
    let input = concat!(
        r#"{"tool":"charge_card","args":"{\"amount\": 4200.0, \"currency\": \"usd\"}","run_id":"r1","step":3}"#,
        "\n",
        r#"{"tool":"charge_card","args":"{\"currency\":\"USD\",\"amount\":4200}","run_id":"r1","step":"3"}"#,
        "\n",
        r#"{"tool":"t","args":"{\"zip\":\"01234\"}"}"#,
        "\n",
        r#"{"tool":"t","args":"{\"zip\":\"1234\"}"}"#,
        "\n",
    );
    let (lines, ok) = dedup_key(&[], input);
    assert!(ok);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["strategy"], "typed");
    assert_eq!(lines[0]["key"].as_str().unwrap().len(), 32);
    assert_eq!(lines[0]["key"], lines[1]["key"]);
    assert_ne!(lines[2]["key"], lines[3]["key"]);
}

#[test]
fn bad_lines_get_an_inline_error_the_rest_go_on_and_the_exit_is_non_zero() {
    let input = "not json\n{\"tool\":\"t\",\"args\":\"{\\\"a\\\":1,\\\"a\\\":2}\"}\n\n{\"tool\":\"t\",\"args\":\"{}\"}\n";
    let (lines, ok) = dedup_key(&[], input);
    assert!(!ok);
    assert_eq!(
        lines.len(),
        4,
        "one line out per line in, blank lines included"
    );
    assert!(lines[0]["error"].is_string());
    assert!(lines[1]["error"].as_str().unwrap().contains("duplicate"));
    assert!(lines[2]["error"].is_string());
    assert!(lines[3]["key"].is_string());
}

#[test]
fn strategies_explain_and_schema_in_a_provider_wrapper() {
    let call = r#"{"tool":"charge","args":"{\"currency\": \"Usd\"}","schema":{"name":"charge","input_schema":{"type":"object","properties":{"currency":{"enum":["USD"]}}}}}"#;
    let (lines, ok) = dedup_key(&["--explain"], &format!("{call}\n"));
    assert!(ok);
    assert_eq!(lines[0]["canonical"], r#"{"currency":"USD"}"#);
    assert_eq!(lines[0]["rules"], serde_json::json!(["enum-case"]));
    let mut keys = std::collections::HashSet::new();
    for strategy in ["raw", "canonical", "normalized", "scoped", "typed"] {
        let (lines, ok) = dedup_key(&["--strategy", strategy], &format!("{call}\n"));
        assert!(ok, "{strategy}");
        assert_eq!(lines[0]["strategy"], strategy);
        keys.insert(lines[0]["key"].as_str().unwrap().to_string());
    }
    assert_eq!(keys.len(), 5);
}

#[test]
fn a_policy_file_applies_per_tool() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "[tools.charge_card]\nfields = { memo = \"ignore\" }\n",
    )
    .unwrap();
    let input = concat!(
        r#"{"tool":"charge_card","args":"{\"amount\": 1, \"memo\": \"thanks\"}"}"#,
        "\n",
        r#"{"tool":"charge_card","args":"{\"amount\": 1, \"memo\": \"cheers\"}"}"#,
        "\n",
    );
    let (lines, ok) = dedup_key(&["--policy", policy.to_str().unwrap()], input);
    assert!(ok);
    assert_eq!(lines[0]["key"], lines[1]["key"]);
    let (lines, _) = dedup_key(&[], input);
    assert_ne!(lines[0]["key"], lines[1]["key"]);
}
