//! The `dedup key` contract: one output line per input line, in order; errors inline; exit status.

use std::io::Write;
use std::process::Stdio;

use serde_json::Value;

/// `dedup key` with `args`, fed `input`: its output lines and whether it exited 0.
pub fn dedup_key(args: &[&str], input: impl AsRef<[u8]>) -> (Vec<Value>, bool) {
    let (lines, ok, _) = dedup_key_with_stderr(args, input);
    (lines, ok)
}

/// [`dedup_key`], with what it wrote to stderr (a policy file it refused at start-up).
pub fn dedup_key_with_stderr(args: &[&str], input: impl AsRef<[u8]>) -> (Vec<Value>, bool, String) {
    let mut child = crate::dedup()
        .arg("key")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dedup runs");
    let written = child.stdin.take().unwrap().write_all(input.as_ref());
    // A policy file refused at start-up makes `dedup` exit before it reads its input: the broken
    // pipe is that exit, which the status and stderr then report.
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (lines, out.status.success(), stderr)
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
    let (lines, ok) = dedup_key(&["--explain"], format!("{call}\n"));
    assert!(ok);
    assert_eq!(lines[0]["canonical"], r#"{"currency":"USD"}"#);
    assert_eq!(lines[0]["rules"], serde_json::json!(["enum-case"]));
    let mut keys = std::collections::HashSet::new();
    for strategy in ["raw", "canonical", "normalized", "scoped", "typed"] {
        let (lines, ok) = dedup_key(&["--strategy", strategy], format!("{call}\n"));
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

/// Bad input (the product's catalogue in `tests/it/bad_input.rs`) as `dedup key` answers it: an
/// error line for the line that is bad, the lines around it keyed, and a failing exit status.
#[test]
fn bad_lines_get_their_own_error_line() {
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    let line = serde_json::json!({"tool": "t", "args": format!("{{\"a\":{deep}}}")});
    let (lines, ok) = dedup_key(&[], format!("{line}\n"));
    assert!(!ok);
    assert_eq!(lines[0]["error"], "arguments nest deeper than 64 levels");

    let (lines, ok) = dedup_key(&[], b"{\"tool\":\"\",\"args\":\"{}\"}\n");
    assert!(!ok);
    assert_eq!(lines[0]["error"], "the tool name is empty");

    // A line that is not UTF-8, and one with a lone surrogate escape, between two good lines.
    let mut input = Vec::new();
    input.extend_from_slice(br#"{"tool":"t","args":"{\"a\":1}"}"#);
    input.extend_from_slice(b"\n{\"tool\":\"t\",\"args\":\"\xff\"}\n");
    input.extend_from_slice(br#"{"tool":"t","args":"{\"a\":\"\\ud800\"}"}"#);
    input.extend_from_slice(b"\n");
    input.extend_from_slice(br#"{"tool":"t","args":"{\"a\":2}"}"#);
    input.push(b'\n');
    let (lines, ok) = dedup_key(&[], &input);
    assert!(!ok);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[0]["key"].is_string());
    let error = |i: usize| lines[i]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error(1).contains("UTF-8"), "{lines:?}");
    assert!(error(2).contains("surrogate"), "{lines:?}");
    assert!(lines[3]["key"].is_string());
}
