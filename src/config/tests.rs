//! The configuration's tests.

use std::collections::HashMap;

use super::*;

fn config(vars: &[(&str, &str)], default_store: StoreKind) -> Result<Config, ConfigError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| map.get(k).cloned(), default_store)
}

#[test]
fn zero_configuration_gives_the_documented_defaults() {
    let c = config(&[], StoreKind::Memory).unwrap();
    assert_eq!(c.store, StoreKind::Memory);
    assert_eq!(
        (c.scope, c.mode, c.log_calls),
        (Scope::Turn, Mode::Enforce, LogCalls::Off)
    );
    assert_eq!(c.ttl, Duration::from_secs(86_400));
    assert_eq!(c.wait, Duration::from_millis(10_000));
    assert_eq!(c.step_attribute, "dedup_step");
    assert_eq!(c.run_argument, "dedup_run_id");
    assert!(c.routes.is_empty() && c.look_up_timeouts);
    assert_eq!(c.release_on_errors, ErrorTypes::default());
}

#[test]
fn the_lambda_default_store_needs_a_table_name() {
    let err = config(&[], StoreKind::DynamoDb).unwrap_err();
    assert!(
        err.to_string().contains("DEDUP_TABLE_NAME is required"),
        "{err}"
    );
    let c = config(&[("DEDUP_TABLE_NAME", "t-1")], StoreKind::DynamoDb).unwrap();
    assert_eq!(c.dynamodb().unwrap().table, "t-1");
}

#[test]
fn bad_values_name_their_variable() {
    for (var, value) in [
        ("DEDUP_MODE", "enforced"),
        ("DEDUP_SCOPE", "step"),
        ("DEDUP_WAIT_MS", "-1"),
        ("DEDUP_TTL_SECONDS", "0"),
        ("DEDUP_TTL_SECONDS", "60"),
        (
            "DEDUP_RELEASE_ON_ERRORS",
            "ValidationError,Sandbox.Timedout",
        ),
        ("DEDUP_ALLOW_MEMORY_STORE", "perhaps"),
        ("DEDUP_CACHE_FAILURES", "maybe"),
        ("DEDUP_LOG_CALLS", "all"),
        ("DEDUP_ROUTES", "[\"x\"]"),
        ("DEDUP_ROUTES", "{\"payments\":\"fn\"}"),
        (
            "DEDUP_ROUTES",
            "{\"*\":{\"function\":\"fn\",\"timeout_seconds\":901}}",
        ),
        (
            "DEDUP_ROUTES",
            "{\"*\":{\"function\":\"fn\",\"timeout\":30}}",
        ),
        ("DEDUP_STORE", "redis"),
    ] {
        let err = config(&[(var, value)], StoreKind::Memory).unwrap_err();
        assert!(err.to_string().starts_with(var), "{var}: {err}");
    }
    let err = config(
        &[("DEDUP_POLICY_FILE", "/nonexistent.toml")],
        StoreKind::Memory,
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("DEDUP_POLICY_FILE"), "{err}");
}

#[test]
fn empty_values_count_as_unset_and_values_are_case_insensitive() {
    let c = config(
        &[
            ("DEDUP_MODE", " Shadow "),
            ("DEDUP_SCOPE", ""),
            ("DEDUP_LOOK_UP_TIMEOUTS", "FALSE"),
        ],
        StoreKind::Memory,
    )
    .unwrap();
    assert_eq!(
        (c.mode, c.scope, c.look_up_timeouts),
        (Mode::Shadow, Scope::Turn, false)
    );
}

#[test]
fn the_lambda_refuses_the_memory_store_unless_allowed() {
    let routes = ("DEDUP_ROUTES", "{\"*\":\"fn\"}");
    let err = config(&[routes, ("DEDUP_STORE", "memory")], StoreKind::DynamoDb)
        .unwrap()
        .for_lambda()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("DEDUP_STORE") && text.contains("DEDUP_ALLOW_MEMORY_STORE=true"),
        "{text}"
    );
    let allowed = config(
        &[
            routes,
            ("DEDUP_STORE", "memory"),
            ("DEDUP_ALLOW_MEMORY_STORE", "true"),
        ],
        StoreKind::DynamoDb,
    )
    .unwrap()
    .for_lambda()
    .unwrap();
    assert_eq!(allowed.store, StoreKind::Memory);
    // `dedup replay` defaults to the memory store and never asks.
    assert_eq!(
        config(&[], StoreKind::Memory).unwrap().store,
        StoreKind::Memory
    );
    // An interceptor-only deployment routes nothing.
    let no_routes = config(&[("DEDUP_TABLE_NAME", "t-1")], StoreKind::DynamoDb).unwrap();
    assert!(no_routes.for_lambda().unwrap().routes.is_empty());
}

#[test]
fn a_tools_ttl_seconds_must_cover_the_longest_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    let file = path.to_str().unwrap().to_string();
    for (ttl, ok) in [
        (LONGEST_LEASE.as_secs(), true),
        (LONGEST_LEASE.as_secs() - 1, false),
    ] {
        let text = format!(r#"{{"tools": {{"charge_card": {{"ttl_seconds": {ttl}}}}}}}"#);
        std::fs::write(&path, text).unwrap();
        let loaded = config(&[("DEDUP_POLICY_FILE", &file)], StoreKind::Memory);
        match (loaded, ok) {
            (Ok(c), true) => assert_eq!(
                c.policies.get("charge_card").unwrap().ttl,
                Some(Duration::from_secs(ttl))
            ),
            (Err(e), false) => assert!(e.to_string().contains("charge_card"), "{e}"),
            (other, _) => panic!("ttl_seconds {ttl}: {other:?}"),
        }
    }
}

#[test]
fn the_results_bucket_keeps_objects_as_long_as_records_live() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.json");
    let file = path.to_str().unwrap().to_string();
    std::fs::write(&path, r#"{"tools": {"refund": {"ttl_seconds": 259200}}}"#).unwrap();
    let bucket = ("DEDUP_RESULTS_BUCKET", "results-bucket");
    let two_days = ("DEDUP_RESULTS_RETENTION_DAYS", "2");
    let policy = ("DEDUP_POLICY_FILE", file.as_str());
    assert!(
        config(&[two_days, bucket], StoreKind::Memory).is_ok(),
        "the 1-day default fits"
    );
    assert!(
        config(&[two_days, policy], StoreKind::Memory).is_ok(),
        "without a bucket nothing is offloaded, so nothing can outlive its object"
    );
    let err = config(&[two_days, policy, bucket], StoreKind::Memory).unwrap_err();
    assert!(
        err.to_string().contains("tool \"refund\"'s ttl_seconds"),
        "{err}"
    );
    let long_ttl = ("DEDUP_TTL_SECONDS", "172801");
    let err = config(&[two_days, long_ttl, bucket], StoreKind::Memory).unwrap_err();
    assert!(
        err.to_string().contains("DEDUP_TTL_SECONDS is 172801"),
        "{err}"
    );
    let c = config(
        &[
            ("DEDUP_RESULTS_RETENTION_DAYS", "3"),
            policy,
            bucket,
            ("DEDUP_OFFLOAD_THRESHOLD_BYTES", "65536"),
        ],
        StoreKind::Memory,
    )
    .unwrap();
    assert_eq!(
        (c.results_bucket.as_deref(), c.offload_above),
        (Some("results-bucket"), Some(65536))
    );
}

#[test]
fn the_ttl_covers_the_longest_lease() {
    let at_least = LONGEST_LEASE.as_secs().to_string();
    let c = config(&[("DEDUP_TTL_SECONDS", &at_least)], StoreKind::Memory).unwrap();
    assert_eq!(c.ttl, LONGEST_LEASE);
    let shorter = (LONGEST_LEASE.as_secs() - 1).to_string();
    let err = config(&[("DEDUP_TTL_SECONDS", &shorter)], StoreKind::Memory).unwrap_err();
    assert!(err.to_string().contains("longest lease"), "{err}");
}

#[test]
fn no_error_type_releases_by_default_but_ours_and_crash_types_are_refused() {
    let c = config(&[], StoreKind::Memory).unwrap();
    for after_a_side_effect in ["ValidationError", "ValidationException", "BadRequest"] {
        assert!(
            !c.release_on_errors.contains(after_a_side_effect),
            "{after_a_side_effect}"
        );
    }
    for ours in [
        NOTHING_RAN_ERROR,
        "com.example.tools.DedupNothingRan",
        "Outer$DedupNothingRan",
    ] {
        assert!(c.release_on_errors.contains(ours), "{ours}");
    }
    assert!(!c.release_on_errors.contains("NotDedupNothingRan"));
    for crash in [
        "Unhandled",
        "Sandbox.Timedout",
        "Runtime.ExitError",
        "Runtime.OutOfMemory",
        "Function.ResponseSizeTooLarge",
    ] {
        assert!(!c.release_on_errors.contains(crash), "{crash}");
        let err = config(
            &[("DEDUP_RELEASE_ON_ERRORS", &format!("BadInput,{crash}"))],
            StoreKind::Memory,
        )
        .unwrap_err();
        assert!(err.to_string().contains(crash), "{err}");
    }
    let c = config(
        &[("DEDUP_RELEASE_ON_ERRORS", " CardRejected , BadInput ")],
        StoreKind::Memory,
    )
    .unwrap();
    assert!(
        c.release_on_errors.contains("CardRejected") && c.release_on_errors.contains("BadInput")
    );
    assert!(!c.release_on_errors.contains("ValidationError"));
    let none = config(&[("DEDUP_RELEASE_ON_ERRORS", "none")], StoreKind::Memory).unwrap();
    assert_eq!(none.release_on_errors, ErrorTypes::default());
    assert!(none.release_on_errors.contains(NOTHING_RAN_ERROR));
}

#[test]
fn cache_failures_is_retired_loudly_and_the_timeout_lookup_can_be_switched_off() {
    for value in ["false", "true"] {
        let err = config(&[("DEDUP_CACHE_FAILURES", value)], StoreKind::Memory).unwrap_err();
        assert!(err.to_string().contains("retired"), "{err}");
        assert!(err.to_string().contains("failures = \"retry\""), "{err}");
    }
    assert!(config(&[], StoreKind::Memory).unwrap().look_up_timeouts);
    let off = config(&[("DEDUP_LOOK_UP_TIMEOUTS", "false")], StoreKind::Memory).unwrap();
    assert!(!off.look_up_timeouts);
}

#[test]
fn a_route_can_state_its_tools_timeout() {
    let r = Routes::parse(
        r#"{"payments/*":{"function":"pay-fn","timeout_seconds":120},
            "payments/refund":{"function":"pay-fn","timeout_seconds":30},"*":"other-fn"}"#,
    )
    .unwrap();
    assert_eq!(r.resolve("payments", "charge_card"), Some("pay-fn"));
    assert_eq!(
        r.stated_timeout("pay-fn"),
        Some(Duration::from_secs(120)),
        "the longest"
    );
    assert_eq!(r.stated_timeout("other-fn"), None);
    assert_eq!(r.targets(), vec!["other-fn", "pay-fn"]);
}

#[test]
fn routes_prefer_the_most_specific_entry() {
    let r = Routes::parse(
        r#"{"payments/charge_card":"charge-fn","payments/*":"payments-fn",
            "api/post /charges":"api-charge","*":"default-fn"}"#,
    )
    .unwrap();
    assert_eq!(r.resolve("payments", "charge_card"), Some("charge-fn"));
    assert_eq!(r.resolve("payments", "refund"), Some("payments-fn"));
    assert_eq!(r.resolve("api", "POST /charges"), Some("api-charge"));
    assert_eq!(r.resolve("support", "create_ticket"), Some("default-fn"));
    let none = Routes::parse(r#"{"payments/charge_card":"charge-fn"}"#).unwrap();
    assert_eq!(none.resolve("support", "create_ticket"), None);
}

#[test]
fn a_catalog_must_outlive_the_records_it_keys() {
    let err = config(
        &[
            ("DEDUP_CATALOG_TTL_SECONDS", "3600"),
            ("DEDUP_TTL_SECONDS", "86400"),
        ],
        StoreKind::Memory,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("DEDUP_CATALOG_TTL_SECONDS"), "{err}");
    assert!(
        config(
            &[
                ("DEDUP_CATALOG_TTL_SECONDS", "86400"),
                ("DEDUP_TTL_SECONDS", "86400")
            ],
            StoreKind::Memory,
        )
        .is_ok()
    );
}

/// A route back to this function itself is refused with the route that does it.
#[test]
fn a_route_to_this_function_itself_is_refused() {
    let err = config(
        &[
            ("AWS_LAMBDA_FUNCTION_NAME", "toolcall-dedup"),
            (
                "DEDUP_ROUTES",
                r#"{"payments/*": "arn:aws:lambda:us-east-1:123456789012:function:toolcall-dedup:live"}"#,
            ),
        ],
        StoreKind::Memory,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("payments/*") && err.contains("itself"),
        "{err}"
    );
    let elsewhere = config(
        &[
            ("AWS_LAMBDA_FUNCTION_NAME", "toolcall-dedup"),
            (
                "DEDUP_ROUTES",
                r#"{"payments/*": "toolcall-dedup-payments"}"#,
            ),
        ],
        StoreKind::Memory,
    );
    assert!(elsewhere.is_ok(), "{elsewhere:?}");
}

#[test]
fn an_interceptor_alias_needs_the_interceptor_door() {
    let alias = ("DEDUP_INTERCEPTOR_ALIAS", "interceptor");
    let err = config(
        &[alias, ("DEDUP_DOORS", "bedrock,envelope")],
        StoreKind::Memory,
    )
    .unwrap_err();
    assert!(err.to_string().contains("DEDUP_INTERCEPTOR_ALIAS"), "{err}");
    assert!(err.to_string().contains("bedrock,envelope"), "{err}");
    let served = config(
        &[alias, ("DEDUP_DOORS", "bedrock,interceptor")],
        StoreKind::Memory,
    );
    assert_eq!(
        served.unwrap().interceptor_alias.as_deref(),
        Some("interceptor")
    );
}

/// A `tools` entry is no hazard when it names a Gateway tool (`target___tool`, which no document
/// defines) or a tool an exact route names; a name nothing defines is refused with its path.
#[test]
fn a_policy_for_a_gateway_or_routed_tool_is_no_hazard() {
    let definitions = "tool_definitions:\n  - name: charge\n    inputSchema: {type: object}\n";
    let accepted = format!(
        "{definitions}routes:\n  payments/refund: refund-fn\n  payments/charge: charge-fn\n\
         tools:\n  inventory___reserve: {{ttl_seconds: 3600}}\n  refund: {{ttl_seconds: 3600}}\n"
    );
    document::parse(&accepted).expect("a Gateway tool and a routed tool are defined");
    let refused = format!("{definitions}tools:\n  refnd: {{ttl_seconds: 3600}}\n");
    let error = document::parse(&refused).unwrap_err().to_string();
    assert!(error.contains("tools.refnd"), "{error}");
}

/// The longest lease is Lambda's 900 s, the 11 s start allowance and the 5 s margin: a time to
/// live of 916 s outlives it, one of 915 s is refused (README, configuration table).
#[test]
fn the_ttl_must_outlive_the_longest_lease_of_916_seconds() {
    let ttl = |s: &str| config(&[("DEDUP_TTL_SECONDS", s)], StoreKind::Memory);
    let refused = ttl("915").unwrap_err().to_string();
    assert!(refused.contains("at least 916"), "{refused}");
    assert_eq!(ttl("916").unwrap().ttl, Duration::from_secs(916));
}

/// A schema that fails in `tool_definitions` is named by the definition that holds it, never by a
/// `tools` entry the document does not have.
#[test]
fn a_bad_schema_is_named_by_its_definition() {
    let text = "tool_definitions:\n  - name: ok\n    inputSchema: {type: object}\n  - name: lookup\n    \
                inputSchema: {properties: {q: {type: text}}}\n";
    let error = document::parse(text).unwrap_err().to_string();
    assert!(error.contains("tool_definitions[1]"), "{error}");
}

/// A `key_fields` path the tool's schema declares is taken; one it does not declare is refused
/// with its path (every call would key alike on it).
#[test]
fn a_key_field_must_be_one_the_schema_declares() {
    let document_keying = |field: &str| {
        format!(
            "tool_definitions:\n  - name: refund\n    inputSchema: {{type: object, properties: \
             {{amount: {{type: number}}}}}}\ntools:\n  refund: {{key_fields: [\"{field}\"]}}\n"
        )
    };
    document::parse(&document_keying("/amount")).expect("a declared member");
    let error = document::parse(&document_keying("/amout"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("tools.refund.key_fields[0]"), "{error}");
}
