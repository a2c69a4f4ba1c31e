//! `dedup config check`: the function's own reading of a config document, run locally.

use serde_json::Value;

fn check(args: &[&str]) -> std::process::Output {
    crate::dedup()
        .args(["config", "check"])
        .args(args)
        .output()
        .expect("dedup runs")
}

#[test]
fn a_yaml_document_with_an_openapi_schema_behind_refs_names_each_tool_and_its_schema_source() {
    let out = check(&["tests/cases/config/payments.yaml", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tool = |name: &str| {
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tool"] == name)
            .unwrap_or_else(|| panic!("{name} not in {report}"))
            .clone()
    };
    let charge = tool("charge_card");
    assert_eq!(charge["schema"], "tool_definitions[0]");
    assert_eq!(charge["delivery"], "at_most_once");
    assert_eq!(charge["ttl_seconds"], 86_400);
    assert_eq!(
        charge["routes"],
        serde_json::json!(["payments/* → payments-fn", "* → default-fn"])
    );
    assert_eq!(tool("refund")["delivery"], "at_least_once");
    assert_eq!(
        report["settings"],
        serde_json::json!(["DEDUP_MODE=shadow", "DEDUP_WAIT_MS=2500"])
    );
    let text = check(&["tests/cases/config/payments.yaml"]);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(
        shown.contains("charge_card: schema tool_definitions[0]; at_most_once"),
        "{shown}"
    );
}

#[test]
fn errors_name_the_path_in_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("settings: {wait_ms: soon}\n", "settings.wait_ms"),
        ("routes: {'payments/': fn}\n", "routes"),
        (
            "tool_definitions:\n  - openapi: 3.0.0\n    paths: {/x: {post: {operationId: t, requestBody: {content: {application/json: {schema: {$ref: '#/components/schemas/Nope'}}}}}}}\n",
            "tool_definitions[0]",
        ),
        ("tools: {t: {delivery: twice}}\n", "tools"),
    ];
    for (i, (text, path)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("doc-{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let out = check(&[file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: {path}", file.display())),
            "{text}: {stderr}"
        );
    }
    let missing = check(&["no/such/document.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
}

/// The hazards a document can hold while parsing fine (issue 48): each refused with its path in
/// the document, and a field mode that reaches nothing warned.
#[test]
fn config_hazards_are_refused_with_their_path() {
    let dir = tempfile::tempdir().unwrap();
    let definitions = "tool_definitions:\n  - openapi: 3.0.0\n    paths:\n      /refunds:\n        post:\n          operationId: issue_refund\n          requestBody: {content: {application/json: {schema: {type: object, properties: {amount: {type: number}, charge_id: {type: string}}}}}}\n";
    let cases = [
        (
            format!("tools:\n  issue_refnd: {{destructive: true}}\n{definitions}"),
            vec![],
            "tools.issue_refnd: names no tool",
        ),
        (
            format!("tools:\n  issue_refund: {{key_fields: [/amout]}}\n{definitions}"),
            vec![],
            "tools.issue_refund.key_fields[0]",
        ),
        (
            "routes:\n  '*': {function: pay-fn, namespace: payments}\n".to_string(),
            vec![],
            "catches several callers",
        ),
        (
            "routes:\n  payments/*: arn:aws:lambda:us-east-1:123456789012:function:toolcall-dedup:live\n"
                .to_string(),
            vec!["--function", "toolcall-dedup"],
            "routes: DEDUP_ROUTES",
        ),
    ];
    for (i, (text, extra, wanted)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("hazard-{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let mut args = vec![file.to_str().unwrap()];
        args.extend(extra.iter().copied());
        let out = check(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {stderr}");
        assert!(
            stderr.contains(wanted),
            "{text}: wanted {wanted:?} in {stderr}"
        );
    }

    // Written under the operationId, the policy reaches Bedrock's name for the operation; a field
    // mode on an undeclared member is warned, not refused.
    let file = dir.path().join("fine.yaml");
    std::fs::write(
        &file,
        format!(
            "tools:\n  issue_refund: {{destructive: true, fields: {{memo: ignore}}}}\n{definitions}"
        ),
    )
    .unwrap();
    let out = check(&[file.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let bedrock = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "POST /refunds")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(bedrock["delivery"], "at_most_once");
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("tools.issue_refund.fields.memo"),
        "{report}"
    );
}
