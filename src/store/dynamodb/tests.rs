//! The DynamoDB store's unit tests (the conformance suite runs it on real servers).

use std::collections::HashMap;
use std::time::Duration;

use super::*;
use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use proptest::prelude::*;

fn cfg() -> DynamoDbConfig {
    DynamoDbConfig::new("dedup")
}

#[tokio::test]
async fn the_breaker_opens_only_when_the_store_did_not_answer_and_closes_on_an_answer() {
    let open_for = Duration::from_millis(100);
    let exhausted = || {
        StoreError::Unavailable(Box::new(RetriesExhausted {
            operation: "PutItem",
            attempts: 3,
            elapsed: Duration::from_millis(100),
            last: "503".into(),
        }))
    };
    let breaker = Breaker::default();
    // Answers that say the store is there keep it closed.
    for answered in [
        Err(StoreError::Unavailable(Box::new(ClaimContended {
            key: "k".into(),
            rounds: 3,
        }))),
        Err(StoreError::Config {
            message: "no table".into(),
            source: None,
        }),
        Err(StoreError::LeaseLost),
    ] {
        breaker.note(&answered, open_for);
        assert_eq!(breaker.open_for(), None, "{answered:?}");
    }
    breaker.note(&Err(exhausted()), open_for);
    assert!(breaker.open_for().is_some_and(|left| left <= open_for));
    tokio::time::sleep(open_for).await;
    assert_eq!(breaker.open_for(), None, "the next claim probes");
    let unconfirmed = StoreError::ClaimUnconfirmed {
        token: LeaseToken::new("t"),
        source: Box::new(exhausted()),
    };
    breaker.note(&Err(unconfirmed), open_for);
    assert!(
        breaker.open_for().is_some(),
        "a probe that fails reopens it"
    );
    breaker.note(
        &Ok(ClaimOutcome::Claimed {
            token: LeaseToken::new("t"),
        }),
        open_for,
    );
    assert_eq!(breaker.open_for(), None, "an answer closes it");
    breaker.note(&Err(exhausted()), Duration::ZERO);
    assert_eq!(breaker.open_for(), None, "a zero breaker never opens");
}

#[test]
fn the_claim_budget_is_split_between_the_write_and_the_read_back() {
    let budget = ClaimBudget::default();
    assert_eq!(budget.write_within, Duration::from_millis(100));
    assert_eq!(budget.read_back_within, Duration::from_millis(50));
    assert_eq!(budget.breaker_open_for, Duration::from_secs(2));
}

fn completed_item() -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_owned(), s("k")),
        (attr::STATUS.to_owned(), s("COMPLETED")),
        ("expires_at".to_owned(), n(100)),
        (attr::LEASE_UNTIL.to_owned(), n(50_000)),
        (attr::LEASE_TOKEN.to_owned(), s("tok")),
        (attr::FINGERPRINT.to_owned(), s("fp")),
        (attr::TOOL.to_owned(), s("tool")),
        (attr::CREATED_AT.to_owned(), n(40_000)),
        (
            attr::RESULT.to_owned(),
            AttributeValue::B(Blob::new(b"out".to_vec())),
        ),
        (attr::RESULT_ENCODING.to_owned(), s("raw")),
    ])
}

#[test]
fn decodes_a_completed_item() {
    let r = decode_item(&cfg(), &completed_item()).unwrap();
    assert_eq!(r.key, "k");
    assert_eq!(r.status, Status::Completed);
    assert_eq!(
        (r.expires_at_s, r.lease_until_ms, r.created_at_ms),
        (100, 50_000, 40_000)
    );
    assert_eq!(r.token, LeaseToken::new("tok"));
    assert_eq!(r.result.as_deref(), Some(&b"out"[..]));
}

#[test]
fn malformed_items_are_corrupt() {
    let cases: Vec<(&str, Option<AttributeValue>)> = vec![
        (attr::STATUS, Some(s("DONE"))),
        (attr::STATUS, Some(n(1))),
        (attr::STATUS, None),
        ("expires_at", Some(s("soon"))),
        ("expires_at", Some(AttributeValue::N("1.5".into()))),
        (
            "expires_at",
            Some(AttributeValue::N("99999999999999999999999".into())),
        ),
        (attr::LEASE_TOKEN, None),
        (attr::RESULT, None),
        (attr::RESULT, Some(s("out"))),
        (attr::RESULT_ENCODING, Some(s("zstd"))),
        (attr::RESULT_ENCODING, Some(s("gzip"))),
        ("pk", Some(AttributeValue::Bool(true))),
    ];
    for (name, value) in cases {
        let mut item = completed_item();
        match value.clone() {
            Some(v) => item.insert(name.to_owned(), v),
            None => item.remove(name),
        };
        assert!(
            matches!(decode_item(&cfg(), &item), Err(StoreError::Corrupt(_))),
            "{name} = {value:?} should be corrupt"
        );
    }
}

fn attribute_value() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        any::<String>().prop_map(AttributeValue::S),
        any::<i64>().prop_map(|v| AttributeValue::N(v.to_string())),
        "[0-9eE.+-]{0,24}".prop_map(AttributeValue::N),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|b| AttributeValue::B(Blob::new(b))),
        Just(AttributeValue::S("COMPLETED".into())),
        Just(AttributeValue::S("IN_PROGRESS".into())),
        Just(AttributeValue::S("gzip".into())),
        any::<bool>().prop_map(AttributeValue::Bool),
        Just(AttributeValue::Null(true)),
    ]
}

proptest! {
    #[test]
    fn decoding_arbitrary_items_never_panics(
        entries in proptest::collection::vec(
            (prop_oneof![
                Just("pk".to_owned()), Just("expires_at".to_owned()),
                Just(attr::STATUS.to_owned()), Just(attr::LEASE_UNTIL.to_owned()),
                Just(attr::LEASE_TOKEN.to_owned()), Just(attr::FINGERPRINT.to_owned()),
                Just(attr::TOOL.to_owned()), Just(attr::CREATED_AT.to_owned()),
                Just(attr::RESULT.to_owned()), Just(attr::RESULT_ENCODING.to_owned()),
                any::<String>(),
            ], attribute_value()),
            0..14,
        )
    ) {
        let item: HashMap<String, AttributeValue> = entries.into_iter().collect();
        let _ = decode_item(&cfg(), &item);
    }
}

fn service_error(status: u16, code: &str, message: &str) -> SdkError<GetItemError, HttpResponse> {
    let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
    let err = GetItemError::generic(ErrorMetadata::builder().code(code).message(message).build());
    SdkError::service_error(err, raw)
}

#[test]
fn throttling_is_retried_and_known_not_applied() {
    for code in [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
    ] {
        assert_eq!(
            classify(&service_error(400, code, "m")),
            Class::Retry { ambiguous: false },
            "{code}"
        );
    }
}

#[test]
fn server_errors_are_retried_as_maybe_applied() {
    assert_eq!(
        classify(&service_error(500, "InternalServerError", "m")),
        Class::Retry { ambiguous: true }
    );
    assert_eq!(
        classify(&service_error(503, "ServiceUnavailable", "m")),
        Class::Retry { ambiguous: true }
    );
}

#[test]
fn client_errors_are_final() {
    assert_eq!(
        classify(&service_error(400, "ValidationException", "m")),
        Class::Final
    );
    assert_eq!(
        classify(&service_error(400, "ResourceNotFoundException", "m")),
        Class::Final
    );
    assert_eq!(
        classify(&service_error(400, "ConditionalCheckFailedException", "m")),
        Class::Final
    );
}

#[test]
fn an_answer_without_an_error_code_may_have_applied() {
    // What the SDK makes of a body it cannot read, whatever the status.
    for status in [200, 400, 500] {
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        let unreadable =
            SdkError::service_error(GetItemError::generic(ErrorMetadata::builder().build()), raw);
        assert_eq!(
            classify(&unreadable),
            Class::Retry { ambiguous: true },
            "{status}"
        );
    }
}

#[test]
fn item_size_refusal_is_recognised() {
    let too_large: Failed<GetItemError> = Failed::Engine {
        err: service_error(
            400,
            "ValidationException",
            "Item size has exceeded the maximum allowed size",
        ),
        maybe_applied_before: false,
    };
    assert!(too_large.is_item_too_large());
    let other: Failed<GetItemError> = Failed::Engine {
        err: service_error(
            400,
            "ValidationException",
            "One or more parameter values were invalid",
        ),
        maybe_applied_before: false,
    };
    assert!(!other.is_item_too_large());
}

#[test]
fn backoff_grows_jittered_and_capped() {
    let p = RetryPolicy::default();
    for attempt in 1..40 {
        let cap = p
            .initial_backoff
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(p.max_backoff);
        let b = p.backoff(attempt);
        assert!(
            b >= cap / 2 && b <= cap,
            "attempt {attempt}: {b:?} not in [{:?}, {cap:?}]",
            cap / 2
        );
    }
}

#[test]
fn config_rejects_colliding_or_bad_names() {
    assert!(cfg().validate().is_ok());
    let bad = [
        DynamoDbConfig {
            table: "x".into(),
            ..cfg()
        },
        DynamoDbConfig {
            table: "has space".into(),
            ..cfg()
        },
        DynamoDbConfig {
            key_attribute: "status".into(),
            ..cfg()
        },
        DynamoDbConfig {
            ttl_attribute: "pk".into(),
            ..cfg()
        },
        DynamoDbConfig {
            key_attribute: String::new(),
            ..cfg()
        },
    ];
    for c in bad {
        assert!(
            matches!(c.validate(), Err(StoreError::Config { .. })),
            "{c:?}"
        );
    }
}
