//! Attacks on issue 53's operator changes: the per-tool EMF directive (949eb50), the bounded scans
//! of `dedup list` (9a07b29), `dedup settle --completed FILE --bedrock-body` (8509f84, its
//! `operator_reply`), and `Store for Arc<S>` (91e37ee, b64c155). Each test is one suspicion; its
//! doc comment says what it attacks.
//!
//! Breaks these tests show (left failing on purpose until the product is fixed):
//! - `a_scan_bounded_at_zero_items_answers_like_the_memory_store_on_every_server` (local servers):
//!   `max_scanned: 0` (`dedup list --max-scanned 0`) sends DynamoDB `Limit: 0`, which DynamoDB
//!   refuses; the memory store lists nothing.
//! - `the_documented_price_counts_every_series_one_door_publishes`: an invocation with no tool
//!   (a refused event) publishes the four per-tool metrics under `Tool=none`, which the price in
//!   docs/operations.md does not count.
//! - `tool_dimension_values_are_ones_cloudwatch_accepts`: a tool's name goes into the `Tool`
//!   dimension as sent, non-ASCII, control characters, whitespace-only and over 1,024 bytes
//!   included, which CloudWatch's Dimension contract refuses (older than 949eb50).
//! - `a_crowd_of_newer_unknown_outcomes_never_hides_an_unsettled_claim_from_the_sweep`: the sweep
//!   lists unknowns newest first, 500 at most, settled ones included; 500 newer settled unknowns
//!   hide an unsettled claim from every sweep (older than 9a07b29; found while checking that the
//!   sweep is not bounded by `max_scanned`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use serde_json::{Map, Value, json};
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::internals::bedrock::{ActionGroupEvent, operator_reply, validate_reply};
use toolcall_dedup::internals::decide::ReplyClass;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::stand_ins::demo::DemoTool;
use toolcall_dedup::store::{
    CallAbout, ClaimOutcome, ClaimRequest, Clock, LeaseToken, ManualClock, MemoryStore, OnFailure,
    RecordFilter, RecordState, Records, SETTLE_MARGIN_MS, SettleAs, Status, Store,
};
use toolcall_dedup::telemetry::{Outcome, Sink, Telemetry};

use crate::fixture::{Act, Scripted, demo, event, root, send};
use crate::servers::{self, Backend};

// ---------------------------------------------------------------------------------------------
// 1. The EMF line: two directives, on every invocation's path

/// The units the EMF specification's schema allows.
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// What makes `text` an invalid EMF document, by the CloudWatch embedded metric format
/// specification (its structure rules and JSON schema; the DimensionSet limit as it is now, 30).
fn emf_violations(text: &str) -> Vec<String> {
    let mut v = Vec::new();
    if text.len() > 256 * 1024 {
        v.push(format!("{} bytes: over a log event's size", text.len()));
    }
    if text.contains('\n') {
        v.push("a raw line break: two log events on stdout".into());
    }
    let doc: Value = match serde_json::from_str(text) {
        Ok(doc) => doc,
        Err(e) => return vec![format!("not JSON: {e}")],
    };
    let Some(root) = doc.as_object() else {
        return vec!["not an object".into()];
    };
    let aws = &doc["_aws"];
    if !(aws["Timestamp"].is_u64() || aws["Timestamp"].is_i64()) {
        v.push(format!(
            "_aws.Timestamp {} is not an integer",
            aws["Timestamp"]
        ));
    }
    let Some(directives) = aws["CloudWatchMetrics"].as_array() else {
        v.push("no _aws.CloudWatchMetrics array".into());
        return v;
    };
    for (i, d) in directives.iter().enumerate() {
        match d["Namespace"].as_str() {
            Some(ns) if (1..=255).contains(&ns.len()) && !ns.contains('\n') => {}
            other => v.push(format!("directive {i}: Namespace {other:?}")),
        }
        match d["Dimensions"].as_array() {
            Some(sets) if !sets.is_empty() => {
                for set in sets {
                    let Some(set) = set.as_array() else {
                        v.push(format!("directive {i}: a dimension set {set} is no array"));
                        continue;
                    };
                    if set.len() > 30 {
                        v.push(format!("directive {i}: {} dimensions in a set", set.len()));
                    }
                    for dimension in set {
                        match dimension.as_str() {
                            Some(name) if (1..=255).contains(&name.len()) => {
                                if !root.get(name).is_some_and(Value::is_string) {
                                    v.push(format!(
                                        "directive {i}: dimension {name} is no top-level string"
                                    ));
                                }
                            }
                            _ => v.push(format!("directive {i}: dimension {dimension}")),
                        }
                    }
                }
            }
            _ => v.push(format!("directive {i}: no Dimensions")),
        }
        let Some(metrics) = d["Metrics"].as_array() else {
            v.push(format!("directive {i}: no Metrics"));
            continue;
        };
        if metrics.len() > 100 {
            v.push(format!("directive {i}: {} metrics", metrics.len()));
        }
        let mut seen = BTreeSet::new();
        for m in metrics {
            let Some(name) = m["Name"].as_str().filter(|n| (1..=255).contains(&n.len())) else {
                v.push(format!("directive {i}: metric {m} has no Name"));
                continue;
            };
            if !seen.insert(name) {
                v.push(format!("directive {i}: {name} twice"));
            }
            let numeric = match root.get(name) {
                Some(Value::Number(_)) => true,
                Some(Value::Array(values)) => {
                    values.len() <= 100 && values.iter().all(Value::is_number)
                }
                _ => false,
            };
            if !numeric {
                v.push(format!("directive {i}: {name} is no top-level number"));
            }
            if let Some(unit) = m.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                v.push(format!("directive {i}: {name} has unit {unit}"));
            }
        }
    }
    v
}

/// Why CloudWatch refuses `value` as a dimension value, if it does (API Reference, `Dimension`:
/// ASCII only, no ASCII control characters, at least one non-whitespace character, 1 to 1,024).
fn dimension_value_fault(value: &str) -> Option<&'static str> {
    if value.is_empty() || value.len() > 1024 {
        Some("length outside 1..=1024")
    } else if !value.is_ascii() {
        Some("non-ASCII")
    } else if value.bytes().any(|b| b.is_ascii_control()) {
        Some("an ASCII control character")
    } else if value.trim().is_empty() {
        Some("whitespace only")
    } else {
        None
    }
}

/// A configuration whose metrics are filed as a Lambda named `service` would file them.
fn metrics_config(service: &str, namespace: &str) -> Config {
    let (service, namespace) = (service.to_string(), namespace.to_string());
    Config::from_lookup(
        move |var| match var {
            "AWS_LAMBDA_FUNCTION_NAME" => Some(service.clone()),
            "DEDUP_METRICS_NAMESPACE" => Some(namespace.clone()),
            _ => None,
        },
        StoreKind::Memory,
    )
    .unwrap()
}

type Lines = Arc<Mutex<Vec<String>>>;

/// The demo handler of `config`, writing its EMF lines to memory.
fn emf_handler(config: &Config) -> (Handler<MemoryStore, DemoTool>, Lines) {
    let (sink, lines) = Sink::memory();
    let telemetry = Telemetry::quiet()
        .with_sink(sink)
        .with_metrics(&config.metrics);
    (
        Handler::new(MemoryStore::new(), demo(), config, telemetry),
        lines,
    )
}

/// A function-details Bedrock event calling `function`.
fn bedrock_call(function: &str) -> Value {
    let mut ev = event("fd-charge_card.json");
    ev["function"] = json!(function);
    ev
}

/// Tool names a caller can send that are hard on a JSON writer.
fn odd_tool_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "charge\"card",
        "back\\slash\\",
        "tab\there",
        "new\nline",
        "\u{1}ctl\u{7f}",
        "café_✓",
        "\u{2028}sep\u{2029}",
        "emoji😀",
        "</script><!--",
        "{\"Service\":\"x\",\"_aws\":1}",
        "_aws",
        " ",
        "none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("t".repeat(2_000));
    names
}

/// Suspicion: `EmfHead::line` writes its JSON by hand; a tool, door or service name with quotes,
/// backslashes, control characters or non-BMP characters might break the line, or a name might
/// shadow a member the directives reference. Every line must be valid JSON and a valid EMF
/// document (both directives: every metric a top-level number, every dimension a top-level
/// string, the limits), with the names read back as sent.
#[tokio::test]
async fn every_emf_line_is_valid_emf_whatever_the_names() {
    for (service, namespace) in [
        ("fn-\"q\\", "ToolcallDedup"),
        ("fn-é\u{1}", "N\"S\\\u{2028}"),
    ] {
        let config = metrics_config(service, namespace);
        let (h, lines) = emf_handler(&config);
        let names = odd_tool_names();
        let mut tools = Vec::new();
        for name in &names {
            // A name the door refuses (whitespace only) is reported with no tool.
            tools.push(send(&h, &bedrock_call(name)).await.tool);
        }
        // An event no door reads (Door and Tool are `none`), and an envelope call.
        send(&h, &json!(42)).await;
        send(
            &h,
            &json!({"tool": "ü\"\\", "run_id": "r", "input": {"a": 1}}),
        )
        .await;
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), names.len() + 2);
        for (i, text) in lines.iter().enumerate() {
            let violations = emf_violations(text);
            assert!(violations.is_empty(), "{violations:?} in {text}");
            let doc: Value = serde_json::from_str(text).unwrap();
            assert_eq!(doc["Service"], service.trim(), "{text}");
            let directives = doc["_aws"]["CloudWatchMetrics"].as_array().unwrap();
            assert_eq!(directives.len(), 2, "{text}");
            for d in directives {
                // The configuration trims its values (U+2028 is whitespace).
                assert_eq!(d["Namespace"], namespace.trim(), "{text}");
            }
            if let Some(tool) = tools.get(i) {
                if tool.is_none() {
                    assert_eq!(doc["Tool"], "none", "{text}");
                } else {
                    // A name CloudWatch refuses as a dimension value counts as `other` (fixed
                    // after this attack: such lines had their metrics dropped).
                    let name = names[i].as_str();
                    let valid = (1..=1024).contains(&name.len())
                        && name.bytes().all(|b| (b' '..=b'~').contains(&b))
                        && name.bytes().any(|b| b != b' ');
                    assert_eq!(doc["Tool"], if valid { name } else { "other" }, "{text}");
                }
                assert_eq!(doc["Door"], "bedrock", "{text}");
            }
        }
    }
}

/// Suspicion: the `Tool` dimension is the tool's name as sent. CloudWatch's `Dimension` takes
/// ASCII only, no control characters, at least one non-whitespace character, at most 1,024
/// characters: a name outside that makes a metric CloudWatch cannot file. Both doors here take
/// such names (the envelope door trims and checks only for emptiness; the Bedrock door checks
/// nothing of a function's name). Pre-existing (the dimension is older than 949eb50).
#[tokio::test]
async fn tool_dimension_values_are_ones_cloudwatch_accepts() {
    let config = metrics_config("toolcall-dedup-DedupFunction-x1", "ToolcallDedup");
    let (h, lines) = emf_handler(&config);
    for name in odd_tool_names() {
        send(&h, &bedrock_call(&name)).await;
    }
    // The harness-neutral envelope: a harness whose tool is named in another script.
    send(
        &h,
        &json!({"tool": "créer_ticket", "run_id": "run-1", "input": {"a": 1}}),
    )
    .await;
    let mut faults = Vec::new();
    for text in lines.lock().unwrap().iter() {
        let doc: Value = serde_json::from_str(text).unwrap();
        for dimension in ["Service", "Door", "Tool"] {
            let value = doc[dimension].as_str().unwrap();
            if let Some(fault) = dimension_value_fault(value) {
                let shown: String = value.chars().take(24).collect();
                faults.push(format!("{dimension}={shown:?}: {fault}"));
            }
        }
    }
    assert!(
        faults.is_empty(),
        "dimension values CloudWatch refuses:\n{}",
        faults.join("\n")
    );
}

/// A metric a dashboard widget draws: its namespace, name and dimension names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Drawn {
    namespace: String,
    metric: String,
    dimensions: BTreeSet<String>,
}

/// The function's own metrics the SAM dashboard draws: every `SEARCH('{NS,dims} MetricName="m"`
/// expression and every `["NS", "m", "Dim", "value", ...]` metric array.
fn dashboard_metrics(template: &str, namespace: &str) -> Vec<Drawn> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find("SEARCH('{") {
        rest = &rest[at + "SEARCH('{".len()..];
        let schema = &rest[..rest.find('}').expect("a closed schema")];
        let mut parts = schema.split(',').map(str::trim);
        let ns = parts.next().unwrap().to_string();
        let dimensions = parts.map(str::to_string).collect();
        let name_at = rest.find("MetricName=\\\"").expect("a MetricName") + 13;
        let metric = &rest[name_at..];
        let metric = metric[..metric.find('\\').unwrap()].to_string();
        out.push(Drawn {
            namespace: ns,
            metric,
            dimensions,
        });
    }
    let opening = format!("[\"{namespace}\", ");
    let mut rest = template;
    while let Some(at) = rest.find(&opening) {
        rest = &rest[at..];
        let end = rest.find(']').unwrap();
        let array: Vec<Value> = serde_json::from_str(&rest[..=end]).unwrap();
        let strings: Vec<&str> = array.iter().map_while(Value::as_str).collect();
        let dimensions = strings[2..]
            .chunks(2)
            .map(|pair| pair[0].to_string())
            .collect();
        out.push(Drawn {
            namespace: strings[0].to_string(),
            metric: strings[1].to_string(),
            dimensions,
        });
        rest = &rest[end..];
    }
    out
}

/// Suspicion: the dashboard's per-tool widgets (`SEARCH('{ToolcallDedup,Service,Door,Tool} ...')`)
/// and its Service-level graphs must still find a metric the function publishes under exactly
/// those dimensions, now that only four metrics have the per-tool set. (The alarms are checked by
/// `operations::every_alarm_watches_a_metric_the_function_emits`.)
#[tokio::test]
async fn every_dashboard_metric_is_one_the_function_publishes_under_its_dimensions() {
    let template = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    let namespace = "ToolcallDedup";
    assert!(template.contains(&format!("DEDUP_METRICS_NAMESPACE: {namespace}")));
    let drawn = dashboard_metrics(&template, namespace);
    assert!(
        drawn
            .iter()
            .filter(|d| d.dimensions.len() == 3)
            .map(|d| d.metric.as_str())
            .collect::<BTreeSet<_>>()
            == BTreeSet::from(["executed", "replayed"]),
        "{drawn:?}"
    );
    let config = metrics_config("toolcall-dedup-DedupFunction-x1", namespace);
    let (h, lines) = emf_handler(&config);
    assert_eq!(
        send(&h, &event("fd-charge_card.json")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&h, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Replayed
    );
    let lines: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for d in &drawn {
        assert_eq!(d.namespace, namespace, "{d:?}");
        let published = lines.iter().any(|line| {
            line[&d.metric].is_number()
                && line["_aws"]["CloudWatchMetrics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|directive| {
                        directive["Namespace"] == namespace
                            && directive["Metrics"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|m| m["Name"] == d.metric.as_str())
                            && directive["Dimensions"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|set| {
                                    set.as_array()
                                        .unwrap()
                                        .iter()
                                        .map(|s| s.as_str().unwrap().to_string())
                                        .collect::<BTreeSet<_>>()
                                        == d.dimensions
                                })
                    })
        });
        assert!(published, "the dashboard draws {d:?}; no line publishes it");
    }
    // Both per-tool widgets have something to draw for the tool that ran.
    for metric in ["executed", "replayed"] {
        assert!(
            lines
                .iter()
                .any(|l| l[metric] == 1 && l["Tool"] == "charge_card" && l["Door"] == "bedrock"),
            "{metric}"
        );
    }
}

/// Every metric series `lines` publish: namespace, metric and each dimension's value.
fn series(lines: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for text in lines {
        let doc: Value = serde_json::from_str(text).unwrap();
        for directive in doc["_aws"]["CloudWatchMetrics"].as_array().unwrap() {
            for set in directive["Dimensions"].as_array().unwrap() {
                let dims: Vec<String> = set
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| {
                        let d = d.as_str().unwrap();
                        format!("{d}={}", doc[d].as_str().unwrap())
                    })
                    .collect();
                for m in directive["Metrics"].as_array().unwrap() {
                    out.insert(format!(
                        "{} {} {}",
                        directive["Namespace"].as_str().unwrap(),
                        m["Name"].as_str().unwrap(),
                        dims.join(",")
                    ));
                }
            }
        }
    }
    out
}

/// Suspicion: docs/operations.md priced "25 named tools through one door" at 118 custom metrics,
/// and a unit test "recomputed" it as 18 + 25 x 4. But the per-tool directive is on every
/// invocation's line, also those with no tool (`Tool=none`: a refused event), so one such event
/// through that door added four series the price did not count, and `config_rejected` is a 19th
/// under `Service`. Fixed: the docs say 119 and name the `Tool=none` and `Tool=other` series.
#[tokio::test]
async fn the_documented_price_counts_every_series_one_door_publishes() {
    let docs = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    assert!(docs.contains("With 25 named tools through one door: 119 custom metrics"));
    assert!(docs.contains("`Tool=none`") && docs.contains("`Tool=other`"));
    let config = metrics_config("toolcall-dedup-DedupFunction-x1", "ToolcallDedup");
    let (h, lines) = emf_handler(&config);
    for i in 0..25 {
        send(&h, &bedrock_call(&format!("tool_{i:02}"))).await;
    }
    let named = series(&lines.lock().unwrap());
    // The invocation lines' series; `config_rejected`, the 119th, is a line of its own.
    assert_eq!(named.len(), 118, "the documented case itself");
    // One refused Bedrock event (its function is empty) through the same door.
    let refused = send(&h, &event("bad-empty-function.json")).await;
    let lines = lines.lock().unwrap().clone();
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let all = series(&lines);
    let extra: Vec<&String> = all.difference(&named).collect();
    assert!(
        extra.len() == 4 && extra.iter().all(|s| s.contains("Tool=none")),
        "{:?} (Door={}, Tool={}) adds {} series, not the documented four `Tool=none` ones: {extra:?}",
        refused.outcome,
        last["Door"],
        last["Tool"],
        extra.len()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Bounded scans

/// The `Limit` of every Scan request a client sends.
#[derive(Debug, Clone, Default)]
struct ScanLimits(Arc<Mutex<Vec<Option<i64>>>>);

impl Intercept for ScanLimits {
    fn name(&self) -> &'static str {
        "ops_attacks::ScanLimits"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = ctx.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        if target.ends_with(".Scan") {
            let body: Value = request
                .body()
                .bytes()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or_default();
            self.0.lock().unwrap().push(body["Limit"].as_i64());
        }
        Ok(())
    }
}

/// A claim of `key` by `tool`; panics unless it is taken.
async fn claim<S: Store>(store: &S, key: &str, at_most_once: bool, lease_ms: i64) -> LeaseToken {
    let now = store.now_ms();
    let req = ClaimRequest {
        key,
        fingerprint: "fp",
        tool: "charge_card",
        lease_until_ms: now + lease_ms,
        expires_at_s: now / 1000 + 86_400,
        owner: None,
        at_most_once,
        on_failure: OnFailure::Replay,
        path_digests: None,
        about: CallAbout::default(),
    };
    match store.claim(req).await.unwrap() {
        ClaimOutcome::Claimed { token } => token,
        other => panic!("{key}: {other:?}"),
    }
}

/// One completed record and one in progress.
async fn two_records<S: Store>(store: &S) {
    let key = format!("{:032x}", 1);
    let token = claim(store, &key, false, 60_000).await;
    let expires = store.now_ms() / 1000 + 86_400;
    store
        .complete(&key, &token, b"{\"ok\":1}", expires)
        .await
        .unwrap();
    claim(store, &format!("{:032x}", 2), false, 60_000).await;
}

/// Suspicion: `max_scanned: 0` (`dedup list --max-scanned 0`, which the CLI accepts) makes the
/// DynamoDB store send `Limit: 0` (`i32::try_from(0 - 0)`), which DynamoDB refuses (Limit must be
/// at least 1): the operator gets a store error where the memory store lists nothing. And a bound
/// past `i32::MAX` must still mean "the whole table".
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_bounded_at_zero_items_answers_like_the_memory_store_on_every_server() {
    let mut broken = Vec::new();
    for backend in [Backend::Moto, Backend::Dynalite] {
        let clock = ManualClock::starting_now();
        let limits = ScanLimits::default();
        let store = servers::dynamodb_store_with(
            backend,
            clock.clone(),
            servers::config(),
            vec![servers::with_interceptor(limits.clone())],
        )
        .await;
        let memory = MemoryStore::new().with_clock(clock.clone());
        two_records(&store).await;
        two_records(&memory).await;
        for state in [
            None,
            Some(RecordState::InProgress),
            Some(RecordState::Completed),
        ] {
            let filter = RecordFilter {
                state,
                max_scanned: 0,
                ..RecordFilter::default()
            };
            let want = memory.list(&filter).await.unwrap().len();
            match store.list(&filter).await {
                Ok(got) if got.len() == want => {}
                other => broken.push(format!(
                    "{backend:?}, state {state:?}, max_scanned 0: {:?} where the memory store lists {want}",
                    other.map(|r| r.len())
                )),
            }
        }
        let sent: Vec<Option<i64>> = limits.0.lock().unwrap().clone();
        if sent.iter().any(|l| l.is_some_and(|l| l < 1)) {
            broken.push(format!(
                "{backend:?}: Scan requests sent with Limit {sent:?} (DynamoDB requires >= 1)"
            ));
        }
        for max_scanned in [i32::MAX as usize + 1, usize::MAX] {
            let whole = RecordFilter {
                max_scanned,
                ..RecordFilter::default()
            };
            assert_eq!(
                store.list(&whole).await.unwrap().len(),
                2,
                "{backend:?}, max_scanned {max_scanned}"
            );
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// Suspicion: the sweep lists `RecordState::Unknown` with `RecordFilter::default()`, whose
/// `max_scanned` is 10,000; the memory store bounds every state but `Unknown`. A table holding
/// more than 10,000 other records must not hide an unsettled `at_most_once` claim from the sweep,
/// nor from `dedup list --state unknown --max-scanned 0`.
#[tokio::test]
async fn the_sweep_and_the_unknown_listing_are_not_bounded_by_max_scanned() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let expires = clock.now_ms() / 1000 + 86_400;
    for i in 0..10_001u32 {
        let key = format!("{i:032x}");
        let token = claim(&store, &key, false, 60_000).await;
        store.complete(&key, &token, b"{}", expires).await.unwrap();
    }
    let stale = "f".repeat(32);
    claim(&store, &stale, true, 1).await;
    clock.advance(Duration::from_millis(SETTLE_MARGIN_MS as u64 + 1_000));
    let unknown = RecordFilter {
        state: Some(RecordState::Unknown),
        max_scanned: 0,
        ..RecordFilter::default()
    };
    let listed: Vec<String> = store
        .list(&unknown)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(listed, std::slice::from_ref(&stale));
    let h = Handler::new(
        store.clone(),
        demo(),
        &Config::default(),
        Telemetry::quiet(),
    );
    let answer = h.sweep(&Invocation::default()).await.unwrap();
    let answer: Value = serde_json::from_str(answer.get()).unwrap();
    assert_eq!(
        answer,
        json!({"swept": 1, "settled": 1, "settled_keys": [stale], "left_for_next": 0})
    );
    assert!(store.get(&stale).await.unwrap().unwrap().outcome_unknown);
}

/// Suspicion (pre-existing, found beside the one above): the sweep lists `Unknown` records,
/// newest first, at most 500 (`SWEEP_LIMIT`: "the next sweep goes on"), and the list includes
/// calls already settled as outcome unknown, which it skips. 500 settled unknowns newer than an
/// unsettled claim (an outage of an at-most-once tool, none settled yet by an operator) fill
/// every sweep's list: the claim is never settled, never announced, and the
/// OutcomeUnknownAlarm's `settled_unknown` never counts it.
#[tokio::test]
async fn a_crowd_of_newer_unknown_outcomes_never_hides_an_unsettled_claim_from_the_sweep() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    let stale = "f".repeat(32);
    // The claim's lease is long (a slow tool); during it, 500 other calls end unknown.
    claim(&store, &stale, true, 600_000).await;
    for i in 0..500u32 {
        clock.advance_ms(1);
        let key = format!("{i:032x}");
        let token = claim(&store, &key, true, 60_000).await;
        let expires = clock.now_ms() / 1000 + 86_400;
        store.settle_unknown(&key, &token, expires).await.unwrap();
    }
    clock.advance(Duration::from_millis(
        600_000 + SETTLE_MARGIN_MS as u64 + 1_000,
    ));
    let record = store.get(&stale).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress);
    assert!(record.is_settleable(clock.now_ms()));
    // It is an unknown outcome an operator's list finds, given room: the sweep's 500 hide it.
    let roomy = RecordFilter {
        state: Some(RecordState::Unknown),
        limit: 1_000,
        ..RecordFilter::default()
    };
    let listed = store.list(&roomy).await.unwrap();
    assert_eq!(listed.len(), 501);
    assert_eq!(listed.last().unwrap().key, stale);
    let h = Handler::new(
        store.clone(),
        demo(),
        &Config::default(),
        Telemetry::quiet(),
    );
    for sweep in 1..=3 {
        h.sweep(&Invocation::default()).await.unwrap();
        clock.advance(Duration::from_secs(300));
        if store.get(&stale).await.unwrap().unwrap().outcome_unknown {
            return;
        }
        assert!(sweep < 3, "three sweeps never settled the claim {stale}");
    }
}

// ---------------------------------------------------------------------------------------------
// 3. dedup settle --completed FILE --bedrock-body

/// What `dedup settle --bedrock-body` stores for `key` (cli/src/commands/settle.rs
/// `bedrock_reply`, without `--action-group`: the group is the record's namespace after its last
/// `/`).
async fn settle_with_bedrock_body<S: Records>(store: &S, key: &str, body: &str) -> String {
    let record = store.get(key).await.unwrap().expect("a live record");
    let group = record
        .about
        .namespace
        .as_deref()
        .and_then(|ns| ns.rsplit('/').next())
        .filter(|g| !g.is_empty())
        .expect("the record names its namespace")
        .to_string();
    let reply = operator_reply(&group, &record.tool, body.to_string());
    let expires = store.now_ms() / 1000 + 3_600;
    store
        .settle(
            key,
            &record.token,
            SettleAs::Complete(reply.as_bytes()),
            expires,
        )
        .await
        .unwrap();
    reply
}

fn answer_bytes(h: &Handled) -> Vec<u8> {
    h.response.as_ref().unwrap().get().as_bytes().to_vec()
}

/// Suspicion: the operator's reply is written without the caller's session maps (empty maps) and
/// without the `dedupSessionChanges` the executor stores; a repeat must still get a Bedrock
/// response its door accepts (`validate_reply`: the action group, the function or apiPath, the
/// flavour) carrying the repeat's own session attributes, for both flavours.
#[tokio::test]
async fn an_operator_settled_bedrock_body_replays_through_the_door_to_each_caller() {
    let cases = [
        (
            "charge_card",
            "fd-charge_card.json",
            "fd-charge_card-retry.json",
        ),
        (
            "POST /charges",
            "openapi-charge_card.json",
            "openapi-charge_card.json",
        ),
    ];
    for (tool, first, retry) in cases {
        let policy = json!({"tools": {tool: {"delivery": "at_most_once"}}}).to_string();
        let config = Config {
            policies: PolicySet::parse(&policy, false).unwrap(),
            ..Config::default()
        };
        let clock = ManualClock::starting_now();
        let h = Handler::new(
            MemoryStore::new().with_clock(clock.clone()),
            Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout")]),
            &config,
            Telemetry::quiet(),
        );
        let crashed = send(&h, &event(first)).await;
        assert_eq!(crashed.outcome, Outcome::ToolError, "{tool}");
        let key = crashed.key.clone().unwrap();
        let record = h.store().get(&key).await.unwrap().unwrap();
        assert_eq!(record.tool, tool);
        if record.status == Status::InProgress {
            clock.advance(Duration::from_millis(
                (record.lease_until_ms - clock.now_ms()).max(0) as u64
                    + SETTLE_MARGIN_MS as u64
                    + 1_000,
            ));
        }
        let body = "Charged cus_8842 42.50 USD (ch_ops).";
        let stored = settle_with_bedrock_body(h.store(), &key, body).await;

        let mut repeat = event(retry);
        repeat["sessionAttributes"]["tenant"] = json!("acme-2");
        repeat["sessionAttributes"]["dedup_key"] = json!("stale-from-an-earlier-call");
        repeat["promptSessionAttributes"]["locale"] = json!("fr-FR");
        let replayed = send(&h, &repeat).await;
        assert_eq!(replayed.outcome, Outcome::Replayed, "{tool}: {stored}");
        assert_eq!(replayed.key.as_deref(), Some(key.as_str()));
        let envelope = ActionGroupEvent::parse(&repeat).unwrap();
        let bytes = answer_bytes(&replayed);
        assert_eq!(
            validate_reply(&bytes, &envelope.reply_to),
            Ok(ReplyClass::Success),
            "{tool}: {}",
            String::from_utf8_lossy(&bytes)
        );
        let answer: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            answer["sessionAttributes"], repeat["sessionAttributes"],
            "{tool}"
        );
        assert_eq!(
            answer["promptSessionAttributes"], repeat["promptSessionAttributes"],
            "{tool}"
        );
        assert_eq!(answer["messageVersion"], "1.0");
        let r = &answer["response"];
        assert_eq!(r["actionGroup"], repeat["actionGroup"], "{tool}");
        match tool.split_once(' ') {
            Some((method, path)) => {
                assert_eq!(r["apiPath"], path);
                assert_eq!(r["httpMethod"], method);
                assert_eq!(r["httpStatusCode"], 200);
                assert_eq!(r["responseBody"]["application/json"]["body"], body);
                assert!(r.get("functionResponse").is_none());
            }
            None => {
                assert_eq!(r["function"], tool);
                assert_eq!(r["functionResponse"]["responseBody"]["TEXT"]["body"], body);
                assert!(r["functionResponse"].get("responseState").is_none());
            }
        }
        // The tool never ran again.
        assert_eq!(h.dispatcher().invokes(), 1, "{tool}");
    }
}

/// A Bedrock event calling a function (`Ok`) or an operation (`Err((method, path))`).
fn bedrock_event(target: Result<&str, (&str, &str)>) -> Value {
    let mut ev = event("fd-charge_card.json");
    let obj = ev.as_object_mut().unwrap();
    match target {
        Ok(function) => {
            obj.insert("function".into(), json!(function));
        }
        Err((method, path)) => {
            obj.remove("function");
            obj.insert("apiPath".into(), json!(path));
            obj.insert("httpMethod".into(), json!(method));
        }
    }
    ev
}

/// Suspicion: `operator_reply` re-derives the flavour from the record's tool name (`METHOD
/// /path` is an operation, anything else a function). For every name the Bedrock door writes, the
/// reply must be the one its door accepts; odd names given directly must stay functions.
#[test]
fn operator_reply_takes_the_flavour_the_door_named_the_tool_by() {
    let targets: [Result<&str, (&str, &str)>; 11] = [
        Ok("charge_card"),
        Ok("GET"),
        Ok("DELETE"),
        Ok("x y"),
        Ok("get-x"),
        Err(("POST", "/refunds")),
        Err(("post", "/refunds")),
        Err(("Get", "/x")),
        Err(("PUT", "/a b")),
        Err(("PATCH", "/charges/{id}")),
        Err(("DELETE", "/")),
    ];
    for target in targets {
        let ev = bedrock_event(target);
        let envelope = ActionGroupEvent::parse(&ev).unwrap();
        let call = envelope.tool_call().unwrap();
        let tool = call.tool().to_string();
        let reply = operator_reply("payments", &tool, "done".into());
        assert_eq!(
            validate_reply(reply.as_bytes(), &envelope.reply_to),
            Ok(ReplyClass::Success),
            "{target:?} (tool {tool:?}): {reply}"
        );
        let r: Value = serde_json::from_str(&reply).unwrap();
        let r = &r["response"];
        match target {
            Ok(function) => assert_eq!(r["function"], function, "{reply}"),
            Err((method, path)) => {
                assert_eq!(r["apiPath"], path, "{reply}");
                assert!(
                    r["httpMethod"]
                        .as_str()
                        .is_some_and(|m| m.eq_ignore_ascii_case(method)),
                    "{reply}"
                );
            }
        }
    }
    for odd in ["GET", "get /x", "POST  /x", "x y", "POST", "/x", " /x"] {
        let r: Value = serde_json::from_str(&operator_reply("g", odd, "b".into())).unwrap();
        assert_eq!(r["response"]["function"], odd, "{odd}: {r}");
        assert!(r["response"].get("apiPath").is_none(), "{odd}: {r}");
    }
    let body: Map<String, Value> =
        serde_json::from_str(&operator_reply("g", "f", "not \"json\"\n".into())).unwrap();
    assert_eq!(
        body["response"]["functionResponse"]["responseBody"]["TEXT"]["body"],
        "not \"json\"\n"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Store for Arc<S>

/// Every `Store` method through `store` (whatever it is), on keys of its own.
async fn every_store_method<S: Store>(store: &S, prefix: char) {
    let key = |n: u32| format!("{prefix}{n:031x}");
    let now = store.now_ms();
    let expires = now / 1000 + 3_600;
    let token = claim(store, &key(1), false, 60_000).await;
    store
        .extend_lease(&key(1), &token, now + 120_000, expires)
        .await
        .unwrap();
    let next = LeaseToken::random();
    store
        .hand_over(
            &key(1),
            &token,
            now + 120_000,
            &next,
            now + 120_000,
            expires,
        )
        .await
        .unwrap();
    store
        .complete(&key(1), &next, b"{\"r\":1}", expires)
        .await
        .unwrap();
    let released = claim(store, &key(2), false, 60_000).await;
    store.release(&key(2), &released).await.unwrap();
    let unknown = claim(store, &key(3), true, 60_000).await;
    store
        .settle_unknown(&key(3), &unknown, expires)
        .await
        .unwrap();
    store
        .put(&key(4), "catalog", b"{}", expires, None)
        .await
        .unwrap();
    assert!(store.get(&key(1)).await.unwrap().is_some());
    assert!(store.get(&key(2)).await.unwrap().is_none());
}

/// Suspicion: `impl<S: Store> Store for Arc<S>` might call itself (`self.method`) instead of the
/// shared store (`(**self).method`): a stack overflow, or a second store. Every method through an
/// `Arc` (and an `Arc` of an `Arc`) must act on the one store and count its requests there.
#[tokio::test]
async fn a_shared_store_is_the_store_it_shares() {
    let clock = ManualClock::starting_now();
    let inner = MemoryStore::new().with_clock(clock.clone());
    let shared = Arc::new(inner.clone());
    let twice = Arc::new(shared.clone());
    every_store_method(&shared, 'a').await;
    every_store_method(&twice, 'b').await;
    assert_eq!(shared.now_ms(), inner.now_ms());
    assert_eq!(twice.now_ms(), clock.now_ms());
    assert_eq!(shared.requests(), inner.requests());
    assert_eq!(twice.requests(), inner.requests());
    for prefix in ['a', 'b'] {
        let done = inner
            .get(&format!("{prefix}{:031x}", 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.result.as_deref(), Some(&b"{\"r\":1}"[..]));
        let unknown = inner
            .get(&format!("{prefix}{:031x}", 3))
            .await
            .unwrap()
            .unwrap();
        assert!(unknown.outcome_unknown);
    }
    // A handler on a shared store replays what a handler on the store itself ran.
    let a = Handler::new(
        shared.clone(),
        demo(),
        &Config::default(),
        Telemetry::quiet(),
    );
    let b = Handler::new(
        inner.clone(),
        demo(),
        &Config::default(),
        Telemetry::quiet(),
    );
    assert_eq!(
        send(&a, &event("fd-charge_card.json")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        send(&b, &event("fd-charge_card-retry.json")).await.outcome,
        Outcome::Replayed
    );
}
