//! The config document (`DEDUP_CONFIG`): YAML with routes, settings, policies and OpenAPI schemas
//! (with `$ref`s), from a file, an SSM parameter on moto, or with a schema kept in S3; a bad update
//! keeps the last good document.

use std::time::Duration;

use serde_json::Value;
use toolcall_dedup::config::document;
use toolcall_dedup::config::source::{ConfigSource, Loader};
use toolcall_dedup::config::{Config, Mode, StoreKind};
use toolcall_dedup::handler::Handler;
use toolcall_dedup::internals::reload::{Refreshed, Reloading};
use toolcall_dedup::key::{Call, Keyer};
use toolcall_dedup::store::MemoryStore;
use toolcall_dedup::telemetry::{Sink, Telemetry};

use crate::fixture::*;
use crate::servers::{self, Backend};

fn payments() -> String {
    std::fs::read_to_string(root().join("tests/cases/config/payments.yaml")).unwrap()
}

fn config(document: &document::Document) -> Config {
    Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory).unwrap()
}

#[test]
fn a_yaml_document_gives_routes_settings_policies_and_schemas_behind_refs() {
    let document = document::parse(&payments()).unwrap();
    assert_eq!(
        document.schema_sources["charge_card"],
        "tool_definitions[0]"
    );
    assert_eq!(document.schema_sources["refund"], "tool_definitions[0]");
    let config = config(&document);
    assert_eq!(config.mode, Mode::Shadow);
    assert_eq!(config.wait, Duration::from_millis(2500));
    assert_eq!(config.routes.targets(), ["default-fn", "payments-fn"]);
    let charge = config.policies.get("charge_card").unwrap();
    assert!(
        charge.schema.is_some(),
        "the $ref'd request body is the schema"
    );
    assert_eq!(charge.delivery, toolcall_dedup::key::Delivery::AtMostOnce);
    // The schema types the call: a quoted amount is the number it stands for, and the enum's
    // case is kept apart from another currency.
    let keyer = Keyer::new().with_policies(config.policies.clone());
    let key = |args: &str| {
        keyer
            .key(
                toolcall_dedup::key::Strategy::Typed,
                &Call {
                    tool: "charge_card",
                    args,
                    ..Call::default()
                },
            )
            .unwrap()
            .to_string()
    };
    assert_eq!(
        key(r#"{"customer_id":"c1","amount":42.5,"currency":"USD"}"#),
        key(r#"{"currency":"USD","amount":"42.50","customer_id":"c1"}"#)
    );
    assert_ne!(
        key(r#"{"customer_id":"c1","amount":42.5,"currency":"USD"}"#),
        key(r#"{"customer_id":"c1","amount":42.5,"currency":"EUR"}"#)
    );
}

#[test]
fn an_action_group_payload_in_yaml_is_read() {
    let group = serde_json::json!({
        "actionGroupName": "payments",
        "apiSchema": {"payload": "openapi: 3.0.0\npaths:\n  /charges:\n    post:\n      operationId: charge_card\n      requestBody:\n        content:\n          application/json:\n            schema: {type: object, properties: {amount: {type: number}}}\n"}
    });
    let text = serde_json::json!({"tool_definitions": [group]}).to_string();
    let document = document::parse(&text).unwrap();
    assert!(
        document
            .policies
            .get("charge_card")
            .unwrap()
            .schema
            .is_some()
    );
}

#[test]
fn routes_and_policies_are_given_in_one_place() {
    let document = document::parse(&payments()).unwrap();
    let both = Config::from_lookup_and_document(
        |v| (v == "DEDUP_ROUTES").then(|| r#"{"*":"fn"}"#.to_string()),
        Some(&document),
        StoreKind::Memory,
    );
    assert!(both.unwrap_err().to_string().contains("one place"));
    // The environment's setting wins over the document's.
    let env_mode = Config::from_lookup_and_document(
        |v| (v == "DEDUP_MODE").then(|| "enforce".to_string()),
        Some(&document),
        StoreKind::Memory,
    )
    .unwrap();
    assert_eq!(env_mode.mode, Mode::Enforce);
    // An empty variable is unset (a stack's optional parameter left empty): the document's
    // setting applies, as the keyer pin must (found by the attack on issue 52).
    let empty = Config::from_lookup_and_document(
        |v| matches!(v, "DEDUP_MODE" | "DEDUP_KEYER").then(|| " ".to_string()),
        Some(&document),
        StoreKind::Memory,
    )
    .unwrap();
    assert_eq!(empty.mode, Mode::Shadow);
}

fn ssm() -> aws_sdk_ssm::Client {
    let config = aws_sdk_ssm::Config::builder()
        .behavior_version(aws_sdk_ssm::config::BehaviorVersion::latest())
        .endpoint_url(Backend::Moto.endpoint())
        .region(aws_sdk_ssm::config::Region::from_static("us-east-1"))
        .credentials_provider(aws_sdk_ssm::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "dedup-tests",
        ))
        .build();
    aws_sdk_ssm::Client::from_conf(config)
}

async fn put_parameter(name: &str, text: &str) {
    ssm()
        .put_parameter()
        .name(name)
        .value(text)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .unwrap_or_else(|e| panic!("put_parameter on moto: {e:?}\n{}", servers::START_HINT));
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn the_function_follows_its_ssm_document_and_keeps_the_last_good_one() {
    let name = format!("/dedup-tests/{}", uuid::Uuid::new_v4().simple());
    put_parameter(&name, &payments()).await;
    let endpoint = Backend::Moto.endpoint();
    let loader = Loader::new(
        ConfigSource::Ssm(name.clone()),
        Some(&endpoint),
        Some(&endpoint),
    )
    .await;
    let loaded = loader.load().await.unwrap();
    let build = |document: &document::Document| {
        let config = Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory)?;
        Ok(Handler::new(
            MemoryStore::new(),
            demo(),
            &config,
            Telemetry::quiet(),
        ))
    };
    let (sink, lines) = Sink::memory();
    let telemetry = Telemetry::quiet()
        .with_sink(sink)
        .with_emf(Some("NS".into()));
    let reloading =
        Reloading::start(loader, loaded, build, Duration::from_secs(60), telemetry).unwrap();
    assert_eq!(reloading.current().settings().mode, Mode::Shadow);
    assert_eq!(reloading.refresh().await.unwrap(), Refreshed::Unchanged);

    // A bad update: refused with its path, reported, and the last good document stays.
    put_parameter(&name, &payments().replace("wait_ms: 2500", "wait_ms: soon")).await;
    let refused = reloading.refresh().await.unwrap_err().to_string();
    assert!(
        refused.contains("DEDUP_WAIT_MS") && refused.contains(&name),
        "{refused}"
    );
    reloading.refresh_reported().await;
    let rejected: Vec<Value> = lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0]["config_rejected"], 1);
    assert_eq!(reloading.current().settings().mode, Mode::Shadow);
    let answered = send(&reloading.current(), &event("fd-charge_card.json")).await;
    assert!(answered.response.is_ok());

    // A good one replaces it.
    put_parameter(&name, &payments().replace("mode: shadow", "mode: enforce")).await;
    assert_eq!(reloading.refresh().await.unwrap(), Refreshed::Replaced);
    assert_eq!(reloading.current().settings().mode, Mode::Enforce);
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn an_action_group_schema_kept_in_s3_is_read_from_it() {
    let bucket = servers::result_bucket().await;
    let openapi = "openapi: 3.0.0\npaths:\n  /refunds:\n    post:\n      operationId: refund\n      requestBody:\n        content:\n          application/json:\n            schema: {type: object, properties: {charge_id: {type: string}}}\n";
    servers::s3_put(
        bucket.bucket(),
        "schemas/payments.yaml",
        openapi.as_bytes().to_vec(),
    )
    .await;
    let document = format!(
        "tool_definitions:\n  - actionGroupName: payments\n    apiSchema:\n      s3: {{s3BucketName: {}, s3ObjectKey: schemas/payments.yaml}}\n",
        bucket.bucket()
    );
    let path = std::env::temp_dir().join(format!("dedup-{}.yaml", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, document).unwrap();
    let endpoint = Backend::Moto.endpoint();
    let loader = Loader::new(ConfigSource::File(path.clone()), None, Some(&endpoint)).await;
    let loaded = loader.load().await.unwrap();
    assert!(
        loaded
            .document
            .policies
            .get("refund")
            .unwrap()
            .schema
            .is_some()
    );
    let missing = std::fs::read_to_string(&path)
        .unwrap()
        .replace("payments.yaml", "nowhere.yaml");
    let e = loader.parse(missing).await.unwrap_err().to_string();
    assert!(e.contains("tool_definitions[0].apiSchema.s3"), "{e}");
    std::fs::remove_file(path).ok();
}

/// A document that cannot be read says why, down to the SDK error's cause: "service error" alone
/// would not tell a missing parameter from a refused one.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_document_that_cannot_be_read_names_the_cause() {
    let name = format!("/dedup-tests/missing-{}", uuid::Uuid::new_v4().simple());
    let endpoint = Backend::Moto.endpoint();
    let loader = Loader::new(ConfigSource::Ssm(name.clone()), Some(&endpoint), None).await;
    let error = loader
        .load()
        .await
        .expect_err("no such parameter")
        .to_string();
    assert!(error.contains(&name), "{error}");
    assert!(
        error.contains("ParameterNotFound"),
        "the cause is named: {error}"
    );
}

/// Before each invocation the function starts a refresh beside it only when one is due
/// (`Reloading::refresh_if_due`, which `serve` calls): never before the interval has passed, one
/// at a time, and the handler it builds answers the next invocation.
#[tokio::test]
async fn a_refresh_starts_only_when_due_and_one_at_a_time() {
    let path = std::env::temp_dir().join(format!("dedup-{}.yaml", uuid::Uuid::new_v4().simple()));
    let start = |every: Duration| {
        let path = path.clone();
        async move {
            std::fs::write(&path, "settings: {mode: shadow}\n").unwrap();
            let loader = Loader::new(ConfigSource::File(path.clone()), None, None).await;
            let loaded = loader.load().await.unwrap();
            let build = |document: &document::Document| {
                let config =
                    Config::from_lookup_and_document(|_| None, Some(document), StoreKind::Memory)?;
                Ok(Handler::new(
                    MemoryStore::new(),
                    demo(),
                    &config,
                    Telemetry::quiet(),
                ))
            };
            let reloading = Reloading::start(loader, loaded, build, every, Telemetry::quiet());
            std::fs::write(&path, "settings: {mode: enforce}\n").unwrap();
            std::sync::Arc::new(reloading.unwrap())
        }
    };
    let hourly = start(Duration::from_secs(3_600)).await;
    assert!(!hourly.refresh_if_due(), "not due for an hour");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hourly.current().settings().mode, Mode::Shadow);

    let due = start(Duration::ZERO).await;
    assert!(due.refresh_if_due(), "due at once");
    assert!(!due.refresh_if_due(), "one refresh at a time");
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while due.current().settings().mode != Mode::Enforce {
        assert!(
            std::time::Instant::now() < until,
            "the refresh never replaced the handler"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::remove_file(path).ok();
}
