//! The product path with no policy file (issue 12): Bedrock's declared `string` is no schema.
//!
//! - The issue's own example, `events/fd-charge_card-drift.json` and its retry (`"4200.0"` for
//!   `"4200"` declared `number`, `"usd"` for `"USD"` declared `string`): one execution without a policy;
//!   two with `events/policies/charge_card-currency-strict.json`, a JSON Schema saying
//!   `currency: {type: string}`. The same for an OpenAPI event and a policy that carries the OpenAPI
//!   operation itself.
//! - Every pair of the article-spec corpus (`tests/corpus/`), as function-details and as OpenAPI
//!   events with the parameter types a developer declares for those values and no policy file,
//!   through the real handler (in-memory store, the in-process demo tool counting executions): every
//!   retry executes once, every value-changed pair and deliberate repeat twice, every adversarial
//!   pair as its class says, except the pairs named in [`LIMITS`], which need a fact only a schema
//!   states; each is then shown fixed by the policy line the README's Limits give for it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dedup_cli::corpus::events::{DeclaredTypes, Flavour, pair_events};
use dedup_cli::corpus::{Corpus, Expect, Pair};
use dedup_cli::demo::{DemoTool, Ledger};
use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::MemoryStore;
use toolcall_dedup::telemetry::{Outcome, Telemetry};

fn root() -> PathBuf {
    crate::fixture::root()
}

fn read_json(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn event(name: &str) -> Value {
    read_json(root().join("events").join(name))
}

fn config(policy: Option<&str>) -> Config {
    Config {
        policies: policy.map_or_else(PolicySet::default, |p| PolicySet::parse(p, false).unwrap()),
        ..Config::default()
    }
}

/// Sends `events` in order to one fresh handler; returns what each got and how often the tool ran.
async fn send_all(config: &Config, events: &[Value]) -> (Vec<Handled>, usize) {
    let tool = DemoTool::new(Ledger::memory());
    let handler = Handler::new(MemoryStore::new(), tool, config, Telemetry::quiet());
    let mut handled = Vec::new();
    for event in events {
        handled.push(handler.handle(event, &Invocation::default()).await);
    }
    let executions = handler.dispatcher().ledger().entries().unwrap().len();
    (handled, executions)
}

fn outcomes(handled: &[Handled]) -> Vec<Outcome> {
    handled.iter().map(|h| h.outcome).collect()
}

// ---------------------------------------------------------------------------------------------
// the issue's example

const STRICT_CURRENCY: &str = "events/policies/charge_card-currency-strict.json";

#[tokio::test]
async fn a_retry_with_a_float_amount_and_a_lowercase_currency_executes_once_without_a_policy() {
    let pair = [
        event("fd-charge_card-drift.json"),
        event("fd-charge_card-drift-retry.json"),
    ];
    let (handled, executions) = send_all(&config(None), &pair).await;
    assert_eq!(
        outcomes(&handled),
        [Outcome::Executed, Outcome::Replayed],
        "{:?}",
        handled[1].response
    );
    assert_eq!(executions, 1, "the card is charged once");
    // The retry's rules: the declared number coerced. Its `"usd"` is already what case folding
    // writes, so the original (`"USD"`) is the side that folds.
    assert!(
        handled[1].rules.contains(&"schema-coercion"),
        "{:?}",
        handled[1].rules
    );
}

#[tokio::test]
async fn a_policy_schema_saying_type_string_keeps_the_declared_string_strict() {
    let policy = std::fs::read_to_string(root().join(STRICT_CURRENCY)).unwrap();
    let pair = [
        event("fd-charge_card-drift.json"),
        event("fd-charge_card-drift-retry.json"),
    ];
    let (handled, executions) = send_all(&config(Some(&policy)), &pair).await;
    assert_eq!(outcomes(&handled), [Outcome::Executed, Outcome::Executed]);
    assert_eq!(executions, 2);
    // Only the case keeps them apart: with the original currency the retry replays.
    let mut same_currency = pair[1].clone();
    same_currency["parameters"][2]["value"] = json!("USD");
    let (handled, executions) =
        send_all(&config(Some(&policy)), &[pair[0].clone(), same_currency]).await;
    assert_eq!(outcomes(&handled), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(executions, 1);
}

/// `events/openapi-charge_card.json` retried with `"42.5"` and `"usd"`: the request body's declared
/// types are the same five words, so the same precedence holds; the policy may carry the OpenAPI
/// operation (`infra/openapi/demo-tools.yaml`, `POST /charges`) under `"POST /charges"`.
#[tokio::test]
async fn openapi_request_bodies_follow_the_same_precedence() {
    let original = event("openapi-charge_card.json");
    let mut retry = original.clone();
    let properties = retry
        .pointer_mut("/requestBody/content/application~1json/properties")
        .and_then(Value::as_array_mut)
        .unwrap();
    properties.reverse();
    for p in properties.iter_mut() {
        match p["name"].as_str() {
            Some("amount") => p["value"] = json!("42.5"),
            Some("currency") => p["value"] = json!("usd"),
            _ => {}
        }
    }
    let pair = [original, retry];
    let (handled, executions) = send_all(&config(None), &pair).await;
    assert_eq!(outcomes(&handled), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(executions, 1);

    let operation = json!({"tools": {"POST /charges": {"schema": {
        "operationId": "charge_card",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object", "required": ["customer_id", "amount", "currency"],
            "properties": {
                "customer_id": {"type": "string"}, "amount": {"type": "number"},
                "currency": {"type": "string"}, "capture": {"type": "boolean"},
                "line_items": {"type": "array", "items": {"type": "string"}}}}}}}}}}});
    let (handled, executions) = send_all(&config(Some(&operation.to_string())), &pair).await;
    assert_eq!(outcomes(&handled), [Outcome::Executed, Outcome::Executed]);
    assert_eq!(executions, 2);
}

// ---------------------------------------------------------------------------------------------
// the whole article-spec corpus through the product path

/// Pairs no schema-free rule can get right, each with the policy (one line of a policy file) that
/// fixes it. The README's Limits name the same ones.
const LIMITS: [(&str, &str); 2] = [
    // `Release` vs `release`: a capitalized word and a case-sensitive identifier that happens to be
    // one look alike (retries need `Paris`/`paris` to merge).
    (
        "adversarial/case_id/6",
        r#"{"tools": {"provision_vm": {"fields": {"git_ref": "exact"}}}}"#,
    ),
    // `40` vs `"40.00"` inside an `array` parameter's objects: declared types are flat, so the
    // element's `amount` has no type, and `"40.00"` has the shape of a version string (`"2.0"`).
    (
        "adversarial/decimal_string/4",
        r#"{"tools": {"refund": {"schema": {"properties": {"line_items": {"items": {"properties": {"amount": {"type": "number"}}}}}}}}}"#,
    ),
];

fn expected_executions(pair: &Pair) -> usize {
    match pair.expect {
        Expect::Same => 1,
        Expect::Distinct => 2,
    }
}

async fn executions_of(
    pair: &Pair,
    flavour: Flavour,
    declared: &DeclaredTypes,
    config: &Config,
) -> usize {
    let events: Vec<Value> = pair_events(pair, flavour, declared)
        .iter()
        .map(|text| serde_json::from_str(text).unwrap())
        .collect();
    let (handled, executions) = send_all(config, &events).await;
    for h in &handled {
        assert!(
            matches!(h.outcome, Outcome::Executed | Outcome::Replayed),
            "{} ({}): {:?} {:?}",
            pair.id,
            flavour.name(),
            h.outcome,
            h.response
        );
    }
    executions
}

#[tokio::test]
async fn every_corpus_pair_through_the_handler_with_declared_types_only() {
    let corpus = Corpus::load(&root().join("tests/corpus")).unwrap();
    let declared = DeclaredTypes::from_values(&corpus.pairs);
    let no_policy = config(None);
    // (section, class) → (pairs, right under function details, right under OpenAPI)
    let mut by_class: BTreeMap<(String, String), (usize, usize, usize)> = BTreeMap::new();
    let mut wrong: Vec<String> = Vec::new();
    for pair in &corpus.pairs {
        let row = by_class
            .entry((pair.section.clone(), pair.class.clone()))
            .or_default();
        row.0 += 1;
        for flavour in Flavour::ALL {
            let executions = executions_of(pair, flavour, &declared, &no_policy).await;
            if executions == expected_executions(pair) {
                match flavour {
                    Flavour::FunctionDetails => row.1 += 1,
                    Flavour::OpenApi => row.2 += 1,
                }
            } else {
                wrong.push(format!(
                    "{} ({}): executed {executions}",
                    pair.id,
                    flavour.name()
                ));
            }
        }
    }
    println!("section/class: pairs, as expected (function details, OpenAPI)");
    for ((section, class), (n, fd, api)) in &by_class {
        println!("{section}/{class}: {n}, {fd}, {api}");
    }

    let limits: Vec<String> = LIMITS
        .iter()
        .flat_map(|(id, _)| {
            let executed = |n| format!("{id} ({}): executed {n}", Flavour::FunctionDetails.name());
            let pair = corpus.pairs.iter().find(|p| p.id == *id).unwrap();
            let got = 3 - expected_executions(pair);
            [
                executed(got),
                format!("{id} ({}): executed {got}", Flavour::OpenApi.name()),
            ]
        })
        .collect();
    assert_eq!(wrong, limits, "only the named limits go wrong");

    // The article's spec, whole: 96 retries once, 12 value changes and 12 deliberate repeats twice.
    for (section, class, n) in [
        ("distinct", "value_changed", 12),
        ("distinct", "deliberate_repeat", 12),
    ] {
        let row = by_class[&(section.to_string(), class.to_string())];
        assert_eq!(row, (n, n, n), "{section}/{class}");
    }
    let retries: (usize, usize, usize) = by_class
        .iter()
        .filter(|((section, _), _)| section == "retries")
        .fold((0, 0, 0), |t, (_, r)| (t.0 + r.0, t.1 + r.1, t.2 + r.2));
    assert_eq!(retries, (96, 96, 96));

    // Each limit is fixed by its policy line, on both flavours (the OpenAPI tool is `POST /<tool>`).
    for (id, policy) in LIMITS {
        let pair = corpus.pairs.iter().find(|p| p.id == id).unwrap();
        let fd_config = config(Some(policy));
        let api_policy = policy.replacen(
            &format!("\"{}\"", pair.tool),
            &format!("\"POST /{}\"", pair.tool),
            1,
        );
        let api_config = config(Some(&api_policy));
        for (flavour, config) in [
            (Flavour::FunctionDetails, &fd_config),
            (Flavour::OpenApi, &api_config),
        ] {
            assert_eq!(
                executions_of(pair, flavour, &declared, config).await,
                expected_executions(pair),
                "{id} ({}) with {policy}",
                flavour.name()
            );
        }
    }
}
