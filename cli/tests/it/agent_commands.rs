//! `dedup config from-agent`, `dedup attach` and `dedup detach` against the local stand-in for the
//! Bedrock Agent API (`agent_api`), with an action group whose schema is kept in S3 (moto).

use std::collections::BTreeMap;
use std::process::Output;

use serde_json::{Value, json};

use crate::agent_api::{Agent, AgentApi, group};
use crate::servers::{self, Backend};

const DEDUP_ALIAS: &str =
    "arn:aws:lambda:us-east-1:123456789012:function:toolcall-dedup-DedupFunction:live";
const CHARGE_FN: &str = "arn:aws:lambda:us-east-1:123456789012:function:charge-fn";
const SUPPORT_FN: &str = "arn:aws:lambda:us-east-1:123456789012:function:support-fn";
const BILLING_FN: &str = "arn:aws:lambda:us-east-1:123456789012:function:billing-fn";

/// Our own agent: an OpenAPI group (inline JSON), a function-details group, a group whose YAML
/// schema is in S3 (`bucket`), and a return-of-control group.
fn agent(bucket: &str) -> Agent {
    let openapi = json!({
        "openapi": "3.0.0", "info": {"title": "payments", "version": "1"},
        "paths": {"/charge": {"post": {"operationId": "charge_card", "requestBody": {"content": {"application/json":
            {"schema": {"type": "object", "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}}}}}}}},
            "/charge/{id}": {"delete": {"operationId": "void_charge", "parameters": [{"name": "id", "in": "path",
            "required": true, "schema": {"type": "string"}}]}}}
    });
    let functions = json!({"functions": [{"name": "create_ticket", "description": "Open a ticket",
        "parameters": {"subject": {"type": "string", "required": true, "description": "one line"},
                       "priority": {"type": "integer", "required": false, "description": "1-4"}}}]});
    Agent {
        id: "AGENT0001".into(),
        groups: [
            group(
                "G1PAY",
                "payments",
                json!({"lambda": CHARGE_FN}),
                ("apiSchema", json!({"payload": openapi.to_string()})),
            ),
            group(
                "G2SUP",
                "support",
                json!({"lambda": SUPPORT_FN}),
                ("functionSchema", functions),
            ),
            group(
                "G3BIL",
                "billing",
                json!({"lambda": BILLING_FN}),
                (
                    "apiSchema",
                    json!({"s3": {"s3BucketName": bucket, "s3ObjectKey": "schemas/billing.yaml"}}),
                ),
            ),
            group(
                "G4ASK",
                "ask_user",
                json!({"customControl": "RETURN_CONTROL"}),
                ("", Value::Null),
            ),
        ]
        .into_iter()
        .collect(),
        ..Agent::default()
    }
}

const BILLING_YAML: &str = "openapi: 3.0.0\ninfo: {title: billing, version: '1'}\npaths:\n  /refund:\n    post:\n      operationId: refund\n      requestBody:\n        content:\n          application/json:\n            schema:\n              $ref: '#/components/schemas/Refund'\ncomponents:\n  schemas:\n    Refund:\n      type: object\n      properties:\n        charge_id: {type: string}\n";

/// `dedup` against the stand-in (both the Bedrock Agent API and the one Lambda operation it serves).
fn dedup(api: &AgentApi, args: &[&str]) -> Output {
    crate::dedup()
        .args(args)
        .env("DEDUP_BEDROCK_AGENT_ENDPOINT", &api.endpoint)
        .env("DEDUP_LAMBDA_ENDPOINT", &api.endpoint)
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("dedup runs")
}

/// `dedup attach` of the stand-in's agent to the dedup alias, recording to `record`, with `extra`.
fn attach_args<'a>(record: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "attach",
        "--agent-id",
        "AGENT0001",
        "--function-arn",
        DEDUP_ALIAS,
        "--record",
        record,
    ];
    args.extend_from_slice(extra);
    args
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn no_refusals(api: &AgentApi) {
    let refused: Vec<_> = api
        .seen()
        .into_iter()
        .filter(|s| s.refused.is_some())
        .collect();
    assert!(
        refused.is_empty(),
        "requests outside the SDK's shapes: {refused:?}"
    );
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn from_agent_writes_a_document_that_routes_to_todays_executors_and_reads_the_s3_schema() {
    let bucket = servers::result_bucket().await;
    servers::s3_put(
        bucket.bucket(),
        "schemas/billing.yaml",
        BILLING_YAML.as_bytes().to_vec(),
    )
    .await;
    let api = AgentApi::start(agent(bucket.bucket()));
    let document = ok(&dedup(
        &api,
        &["config", "from-agent", "--agent-id", "AGENT0001"],
    ));
    no_refusals(&api);
    assert!(
        document.contains("ask_user"),
        "the return-of-control group is named as not routed: {document}"
    );
    // The installer's next steps are in the document: a tag command per routed function, and a
    // `tools:` skeleton under Bedrock's names, a DELETE marked for review (issue 53).
    for function in [CHARGE_FN, SUPPORT_FN, BILLING_FN] {
        let tag = format!(
            "aws lambda tag-resource --resource {function} --tags toolcall-dedup:tool=true"
        );
        assert!(document.contains(&tag), "{tag}: {document}");
    }
    let parsed: Value = serde_yaml_ng::from_str(&document).unwrap();
    let skeleton: Vec<&str> = parsed["tools"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        skeleton,
        ["DELETE /charge/{id}", "POST /charge", "create_ticket"],
        "{document}"
    );
    let delete_line = document
        .lines()
        .find(|l| l.contains("DELETE /charge/{id}"))
        .unwrap();
    assert!(delete_line.contains("REVIEW"), "{delete_line}");
    assert!(
        document.contains("billing: its API schema is in s3://"),
        "the S3 schema's operations are left to the installer: {document}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, &document).unwrap();

    let moto = Backend::Moto.endpoint();
    let out = dedup(
        &api,
        &[
            "config",
            "check",
            file.to_str().unwrap(),
            "--json",
            "--s3-endpoint",
            &moto,
        ],
    );
    let report: Value = serde_json::from_str(&ok(&out)).unwrap();
    let tools: BTreeMap<String, Value> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["tool"].as_str().unwrap().to_string(), t.clone()))
        .collect();
    assert_eq!(
        tools["charge_card"]["routes"][0],
        format!("payments/* → {CHARGE_FN} (namespace AGENT0001/payments)")
    );
    assert_eq!(
        tools["create_ticket"]["routes"][0],
        format!("support/* → {SUPPORT_FN} (namespace AGENT0001/support)")
    );
    assert_eq!(
        tools["refund"]["routes"][0],
        format!("billing/* → {BILLING_FN} (namespace AGENT0001/billing)")
    );
    assert_eq!(
        tools["refund"]["schema"], "tool_definitions[2]",
        "the S3 schema, $ref resolved: {report}"
    );
    assert!(!tools.contains_key("ask_user"));
}

#[test]
fn attach_shows_its_plan_then_attaches_and_detach_restores_exactly() {
    let api = AgentApi::start(agent("unused-bucket"));
    let before = api.executors();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("attach.json");
    let record = record.to_str().unwrap();

    let plan = ok(&dedup(&api, &attach_args(record, &[])));
    assert!(
        plan.contains(&format!("payments: executor {CHARGE_FN} -> {DEDUP_ALIAS}")),
        "{plan}"
    );
    assert!(
        plan.contains("ask_user: return of control, left as it is"),
        "{plan}"
    );
    assert_eq!(api.executors(), before, "a plan changes nothing");
    assert!(!std::path::Path::new(record).exists());

    let attached_out = ok(&dedup(&api, &attach_args(record, &["--yes"])));
    no_refusals(&api);
    // The step attach leaves to the operator, said with its commands (issue 53).
    assert!(
        attached_out.contains(
            "aws bedrock-agent update-agent-alias --agent-id AGENT0001 --agent-alias-id ALIAS_ID"
        ) && attached_out.contains("DRAFT"),
        "{attached_out}"
    );
    let attached = api.executors();
    for name in ["payments", "support", "billing"] {
        assert_eq!(attached[name], json!({"lambda": DEDUP_ALIAS}), "{name}");
    }
    assert_eq!(
        attached["ask_user"],
        json!({"customControl": "RETURN_CONTROL"})
    );
    assert_eq!(api.agent.lock().unwrap().prepared, 1);
    let updates: Vec<_> = api
        .seen()
        .into_iter()
        .filter(|s| s.method == "PUT")
        .collect();
    assert_eq!(
        updates.len(),
        3,
        "one UpdateAgentActionGroup per Lambda-executed group"
    );
    for update in &updates {
        assert!(update.path.ends_with(&format!(
            "/actiongroups/{}",
            update.path.rsplit('/').next().unwrap()
        )));
        assert_eq!(
            update.body["actionGroupExecutor"],
            json!({"lambda": DEDUP_ALIAS})
        );
    }
    // Every update re-sent what it replaces: the schemas are still there.
    let agent = api.agent.lock().unwrap();
    assert!(agent.groups["G1PAY"]["apiSchema"]["payload"].is_string());
    assert!(agent.groups["G2SUP"]["functionSchema"]["functions"].is_array());
    assert!(agent.groups["G3BIL"]["apiSchema"]["s3"].is_object());
    drop(agent);

    // from-agent on an attached agent would route the tools to the dedup function itself.
    let looped = dedup(
        &api,
        &[
            "config",
            "from-agent",
            "--agent-id",
            "AGENT0001",
            "--function-arn",
            DEDUP_ALIAS,
        ],
    );
    assert_eq!(looped.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&looped.stderr).contains("already executed by the dedup function")
    );
    let again = ok(&dedup(
        &api,
        &[
            "attach",
            "--agent-id",
            "AGENT0001",
            "--function-arn",
            DEDUP_ALIAS,
            "--record",
            record,
        ],
    ));
    assert!(again.contains("payments: already attached"), "{again}");

    let plan = ok(&dedup(&api, &["detach", "--record", record]));
    assert!(
        plan.contains(&format!("payments: executor {DEDUP_ALIAS} -> {CHARGE_FN}")),
        "{plan}"
    );
    assert_eq!(api.executors(), attached, "a plan changes nothing");
    ok(&dedup(&api, &["detach", "--record", record, "--yes"]));
    no_refusals(&api);
    assert_eq!(api.executors(), before, "every executor as it was");
    assert_eq!(api.agent.lock().unwrap().prepared, 2);
    assert!(
        !std::path::Path::new(record).exists(),
        "the record is set aside once used"
    );
}

/// `attach --shadow` reads the function's mode first: a function in enforce mode is refused with
/// how to deploy it in shadow mode, and nothing on the agent changes; one in shadow mode is
/// attached.
#[test]
fn attach_in_shadow_mode_attaches_only_a_function_that_runs_in_shadow_mode() {
    let with_mode = |mode: &str| {
        let mut agent = agent("unused-bucket");
        agent.functions.insert(
            DEDUP_ALIAS.to_string(),
            [("DEDUP_MODE".to_string(), mode.to_string())].into(),
        );
        AgentApi::start(agent)
    };
    let attach =
        |api: &AgentApi, record: &str| dedup(api, &attach_args(record, &["--shadow", "--yes"]));
    let dir = tempfile::tempdir().unwrap();

    let enforcing = with_mode("enforce");
    let before = enforcing.executors();
    let record = dir.path().join("enforce.json");
    let refused = attach(&enforcing, record.to_str().unwrap());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("DEDUP_MODE=enforce") && stderr.contains("Mode=shadow"),
        "{stderr}"
    );
    assert_eq!(enforcing.executors(), before, "nothing changed");
    assert!(!record.exists());

    let shadowing = with_mode("shadow");
    let record = dir.path().join("shadow.json");
    let out = ok(&attach(&shadowing, record.to_str().unwrap()));
    assert!(out.contains("mode: shadow"), "{out}");
    no_refusals(&shadowing);
    assert_eq!(
        shadowing.executors()["payments"],
        json!({"lambda": DEDUP_ALIAS})
    );
    assert!(record.exists());
}

/// A function `attach --shadow` cannot read is named with the service's own words, or with what
/// kept the request from an answer: one line, never the SDK's debug dump (issue 53).
#[test]
fn attach_says_in_one_line_why_it_cannot_read_the_function() {
    let api = AgentApi::start(agent("unused-bucket"));
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("attach.json");
    let record = record.to_str().unwrap();
    let unknown = dedup(&api, &attach_args(record, &["--shadow", "--yes"]));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success());
    assert!(stderr.contains("ResourceNotFoundException: "), "{stderr}");
    let closed = dedup(
        &api,
        &attach_args(
            record,
            &[
                "--shadow",
                "--yes",
                "--lambda-endpoint",
                "http://127.0.0.1:9",
            ],
        ),
    );
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert!(stderr.contains("could not reach the service: "), "{stderr}");
    for dump in ["DispatchFailure", "ServiceError {", "SdkError", "source:"] {
        assert!(!stderr.contains(dump), "{dump} in {stderr}");
    }
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}
