//! `dedup config check`: the function's own reading of a config document, run locally.

use serde_json::{Value, json};

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

/// `dedup config check DOC --gateway ID` against the control API stand-in, as one JSON report.
fn check_gateway(
    gateways: Vec<Value>,
    id: &str,
    document: &str,
    more: &[&str],
) -> (std::process::Output, Value) {
    let endpoint = crate::gateway_api::start(gateways);
    let dir = std::env::temp_dir().join(format!("dedup-gw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{id}.yaml"));
    std::fs::write(&path, document).unwrap();
    let out = crate::dedup()
        .args([
            "config",
            "check",
            path.to_str().unwrap(),
            "--json",
            "--gateway",
            id,
        ])
        .args(["--gateway-endpoint", &endpoint])
        .args(more)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("dedup runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

fn findings(report: &Value, level: &str) -> Vec<String> {
    report["gateway"]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["level"] == level)
        .map(|f| f["text"].as_str().unwrap().to_string())
        .collect()
}

const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:toolcall-dedup";
const DOCUMENT: &str = "settings: {mode: enforce}\n";

/// An existing gateway without `sessionConfiguration` (AgentCore developer guide, *Use MCP sessions
/// with your gateway*: the Gateway issues `Mcp-Session-Id` only with one) is reported as
/// sessionless, with what that means under the deployment's `DEDUP_SESSIONLESS`; under
/// `principal` an AWS_IAM gateway is named as giving no caller to key by.
#[test]
fn a_gateway_without_sessions_is_reported_with_what_its_calls_get() {
    let attached = crate::gateway_api::interceptor(
        &format!("{FUNCTION}:interceptor"),
        &["REQUEST", "RESPONSE"],
        true,
    );
    let iam = crate::gateway_api::gateway(
        "gw-iam",
        "AWS_IAM",
        Some(json!({"supportedVersions": ["2025-11-25"]})),
        json!([attached]),
    );
    let alias = ["--function", FUNCTION, "--interceptor-alias", "interceptor"];
    let (out, report) = check_gateway(vec![iam.clone()], "gw-iam", DOCUMENT, &alias);
    assert!(out.status.success(), "warnings only: {report}");
    assert_eq!(
        report["gateway"]["reading"]["session_timeout_seconds"],
        Value::Null
    );
    let warned = findings(&report, "warning").join("\n");
    assert!(warned.contains("issues no Mcp-Session-Id"), "{warned}");
    assert!(
        warned.contains("DEDUP_SESSIONLESS=pass_through"),
        "{warned}"
    );
    assert!(warned.contains("run with no dedup at all"), "{warned}");

    let principal = "settings: {mode: enforce, sessionless: principal}\n";
    let (_, report) = check_gateway(vec![iam], "gw-iam", principal, &alias);
    let warned = findings(&report, "warning").join("\n");
    assert!(warned.contains("an AWS_IAM gateway sends none"), "{warned}");
}

/// A gateway with sessions, the interceptor at both points with headers passed, through the
/// interceptor's alias: nothing to say. One that speaks MCP 2026-07-28 is told that those clients
/// have no session whatever the configuration.
#[test]
fn a_gateway_with_sessions_and_the_interceptor_as_documented_passes() {
    let attached = crate::gateway_api::interceptor(
        &format!("{FUNCTION}:interceptor"),
        &["REQUEST", "RESPONSE"],
        true,
    );
    let mcp = |versions: Value| json!({"supportedVersions": versions, "sessionConfiguration": {"sessionTimeoutInSeconds": 28800}});
    let gateways = vec![
        crate::gateway_api::gateway(
            "gw-ok",
            "CUSTOM_JWT",
            Some(mcp(json!(["2025-11-25"]))),
            json!([attached.clone()]),
        ),
        crate::gateway_api::gateway(
            "gw-stateless",
            "CUSTOM_JWT",
            Some(mcp(json!(["2026-07-28", "2025-11-25"]))),
            json!([attached]),
        ),
    ];
    let alias = ["--function", FUNCTION, "--interceptor-alias", "interceptor"];
    let (out, report) = check_gateway(gateways.clone(), "gw-ok", DOCUMENT, &alias);
    assert!(out.status.success());
    assert_eq!(
        report["gateway"]["reading"]["session_timeout_seconds"],
        28800
    );
    assert_eq!(report["gateway"]["findings"], json!([]), "{report}");
    let (out, report) = check_gateway(gateways, "gw-stateless", DOCUMENT, &alias);
    assert!(out.status.success());
    let warned = findings(&report, "warning").join("\n");
    assert!(
        warned.contains("speaks MCP 2026-07-28, which has no session"),
        "{warned}"
    );
}

/// The function attached at REQUEST only, without the request headers, or through another alias
/// than the one it serves the interceptor door through: each an error, and the exit code 1.
#[test]
fn an_interceptor_attached_wrongly_is_an_error() {
    let half = crate::gateway_api::interceptor(FUNCTION, &["REQUEST"], false);
    let gateway = crate::gateway_api::gateway(
        "gw-half",
        "CUSTOM_JWT",
        Some(json!({"sessionConfiguration": {"sessionTimeoutInSeconds": 900}})),
        json!([half]),
    );
    let alias = ["--function", FUNCTION, "--interceptor-alias", "interceptor"];
    let (out, report) = check_gateway(vec![gateway], "gw-half", DOCUMENT, &alias);
    assert_eq!(out.status.code(), Some(1), "{report}");
    let errors = findings(&report, "error").join("\n");
    assert!(
        errors.contains("must be attached at REQUEST and RESPONSE"),
        "{errors}"
    );
    assert!(errors.contains("passRequestHeaders"), "{errors}");
    assert!(
        errors.contains("does not invoke the alias interceptor"),
        "{errors}"
    );

    let other = crate::gateway_api::gateway("gw-other", "CUSTOM_JWT", None, json!([]));
    let (out, report) = check_gateway(vec![other], "gw-other", DOCUMENT, &alias);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        findings(&report, "error")
            .join("\n")
            .contains("has no interceptor that invokes")
    );
    let (out, _) = check_gateway(vec![], "gw-missing", DOCUMENT, &alias);
    assert!(!out.status.success(), "an unknown gateway is an error");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("GetGateway gw-missing: ResourceNotFoundException"),
        "{said}"
    );
}

/// A document over SSM's tiers is named with its size and where it fits instead (issue 53).
#[test]
fn a_document_over_the_ssm_limits_is_warned_about_with_its_size() {
    let dir = tempfile::tempdir().unwrap();
    for (bytes, says) in [
        (3_000, None),
        (6_000, Some("4 KB Standard tier")),
        (9_000, Some("8 KB limit")),
    ] {
        let padding = "x".repeat(bytes);
        let document = format!("settings:\n  mode: shadow\n# {padding}\n");
        let file = dir.path().join(format!("doc-{bytes}.yaml"));
        std::fs::write(&file, &document).unwrap();
        let out = check(&[file.to_str().unwrap(), "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let warnings: Vec<&str> = report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|w| w.contains("SSM"))
            .collect();
        match says {
            None => assert!(warnings.is_empty(), "{warnings:?}"),
            Some(text) => {
                assert_eq!(warnings.len(), 1, "{warnings:?}");
                assert!(warnings[0].contains(text), "{}", warnings[0]);
                assert!(
                    warnings[0].contains(&document.len().to_string()),
                    "{}",
                    warnings[0]
                );
            }
        }
    }
}
