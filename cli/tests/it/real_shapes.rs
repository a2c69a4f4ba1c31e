//! The real-shape cases through `dedup key`, with the schema inline, in a policy file and inside
//! its platform's container: each pair keys as the case says, whichever way the schema came.

use serde_json::{Value, json};

use crate::cli_key::dedup_key_with_stderr;
use crate::shapes::{Expect, WAYS, cases};

/// Keys `lines` with `policy` as the policy file; returns the output lines, or stderr on failure.
fn dedup_key(policy: &Value, lines: &[Value]) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    std::fs::write(&path, policy.to_string()).unwrap();
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    // The cases state what the newest keyer version does (their file's `_about`).
    let args = ["--policy", path.to_str().unwrap(), "--keyer", "typed/v3"];
    let (out, _, stderr) = dedup_key_with_stderr(&args, input);
    if out.is_empty() {
        return Err(stderr);
    }
    Ok(out)
}

#[test]
fn every_real_shape_keys_as_its_case_says_whichever_way_the_schema_comes() {
    let cases = cases();
    assert!(cases.len() >= 9, "the file holds the cases");
    let mut checked = 0;
    for case in &cases {
        for way in WAYS {
            let line = |args: &str| {
                // The tool as its platform lists it (a Gateway target's `office___<tool>`).
                let tool = case.policy_name(way);
                let mut l = json!({"tool": tool, "args": args, "run_id": "run-1", "step": 1});
                if let Some(schema) = case.inline_schema(way) {
                    l["schema"] = schema.clone();
                }
                l
            };
            let policy = case.policy_file(way);
            if let Some(expected) = &case.error {
                // Refused loudly, naming the tool: at start-up for a policy file, per line inline.
                let message = match dedup_key(&policy, &[line("{}")]) {
                    Ok(out) => out[0]["error"].as_str().unwrap_or_default().to_string(),
                    Err(stderr) => stderr,
                };
                assert!(
                    message.contains(expected.as_str()) && message.contains(&case.tool),
                    "{} ({way:?}): {message}",
                    case.id
                );
                continue;
            }
            let lines: Vec<Value> = case
                .pairs
                .iter()
                .flat_map(|p| [line(&p.a), line(&p.b)])
                .collect();
            let out =
                dedup_key(&policy, &lines).unwrap_or_else(|e| panic!("{} ({way:?}): {e}", case.id));
            for (pair, keys) in case.pairs.iter().zip(out.chunks(2)) {
                let (a, b) = (&keys[0], &keys[1]);
                assert!(
                    a.get("key").is_some() && b.get("key").is_some(),
                    "{}: {a} {b}",
                    case.id
                );
                let same = a["key"] == b["key"];
                let off = a.get("dedup") == Some(&json!("off"));
                let what = format!("{} ({way:?}): {} | {} -> {a} {b}", case.id, pair.a, pair.b);
                match pair.expect {
                    Expect::Same => assert!(same && !off, "{what}: {}", pair.why),
                    Expect::Distinct => assert!(!same, "{what}: {}", pair.why),
                    Expect::RunsEach => assert!(off, "{what}: the tool's policy turns dedup off"),
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 3 * 25, "{checked} pairs checked");
}
