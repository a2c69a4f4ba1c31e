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
