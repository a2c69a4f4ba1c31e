//! Reading the environment: each variable into its typed value, loudly named when it cannot be
//! read. No variable looks at another here: the checks refuses the combinations.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::{
    CallerKeyScope, Config, ConfigError, DEFAULT_TTL_SECONDS, DEFAULT_WAIT_MS, Doors, ErrorTypes,
    LogCalls, Mode, Routes, Scope, Sessionless, StoreKind,
};
use crate::catalog::DEFAULT_CATALOG_TTL_SECONDS;
use crate::dispatch::lambda_timeout;
use crate::executor::lease::MAX_TOOL_TIMEOUT;
use crate::store::ClaimBudget;
use crate::text_list::comma_list;

/// The variables, read through a lookup; an empty value counts as unset.
pub(super) struct Vars<F> {
    pub(super) lookup: F,
}

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    pub(super) fn get(&self, var: &str) -> Option<String> {
        debug_assert!(
            !var.starts_with("DEDUP_") || super::variables::is_registered(var),
            "{var} is read but not in config::VARIABLES"
        );
        (self.lookup)(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// `var` parsed as `T`; `None` when unset.
    pub(super) fn parsed<T: FromStr>(&self, var: &'static str) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        self.get(var)
            .map(|text| {
                text.parse::<T>()
                    .map_err(|e| invalid(var, &text, e.to_string()))
            })
            .transpose()
    }

    /// `var` as `true`/`false`; `None` when unset.
    pub(super) fn flag(&self, var: &'static str) -> Result<Option<bool>, ConfigError> {
        self.get(var)
            .map(|text| match text.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(invalid(var, &text, "expected true|false")),
            })
            .transpose()
    }

    /// `var` read by `read`, which says why a value is refused; `None` when unset.
    fn read<T>(
        &self,
        var: &'static str,
        read: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.get(var)
            .map(|text| read(&text).map_err(|reason| invalid(var, &text, reason)))
            .transpose()
    }
}

/// Every variable's typed value; nothing is checked against anything else yet.
pub(super) fn read<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    default_store: StoreKind,
) -> Result<Config, ConfigError> {
    let mut config = read_store(vars, default_store)?;
    read_doors(vars, &mut config)?;
    read_executor(vars, &mut config)?;
    config.policy_file = vars.get("DEDUP_POLICY_FILE").map(PathBuf::from);
    Ok(config)
}

/// The store, its table and the results bucket.
fn read_store<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    default_store: StoreKind,
) -> Result<Config, ConfigError> {
    let defaults = Config::default();
    Ok(Config {
        store: vars.parsed(StoreKind::VAR)?.unwrap_or(default_store),
        table_name: vars.get("DEDUP_TABLE_NAME"),
        dynamodb_endpoint: vars.get("DEDUP_DYNAMODB_ENDPOINT"),
        key_attribute: vars
            .get("DEDUP_KEY_ATTRIBUTE")
            .unwrap_or(defaults.key_attribute),
        ttl_attribute: vars
            .get("DEDUP_TTL_ATTRIBUTE")
            .unwrap_or(defaults.ttl_attribute),
        results_bucket: vars.get("DEDUP_RESULTS_BUCKET"),
        s3_endpoint: vars.get("DEDUP_S3_ENDPOINT"),
        event_bus: vars.get("DEDUP_EVENT_BUS"),
        events_endpoint: vars.get("DEDUP_EVENTS_ENDPOINT"),
        offload_above: vars.parsed("DEDUP_OFFLOAD_THRESHOLD_BYTES")?,
        claim: claim_budget(vars)?,
        allow_memory_store: vars.flag("DEDUP_ALLOW_MEMORY_STORE")?.unwrap_or(false),
        ..defaults
    })
}

/// How the doors scope and route calls, and which doors are served.
fn read_doors<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    config: &mut Config,
) -> Result<(), ConfigError> {
    if let Some(v) = vars.parsed(Scope::VAR)? {
        config.scope = v;
    }
    if let Some(v) = vars.get("DEDUP_STEP_ATTRIBUTE") {
        config.step_attribute = v;
    }
    if let Some(v) = vars.get("DEDUP_RUN_ARGUMENT") {
        config.run_argument = v;
    }
    if let Some(v) = vars.get("DEDUP_IDEMPOTENCY_KEY_NAME") {
        config.idempotency_key_name = v;
    }
    if let Some(v) = vars.parsed(Sessionless::VAR)? {
        config.sessionless = v;
    }
    if let Some(v) = vars.parsed(CallerKeyScope::VAR)? {
        config.envelope_caller_key_scope = v;
    }
    if let Some(routes) = vars.read("DEDUP_ROUTES", Routes::parse)? {
        config.routes = routes;
    }
    config.lambda_endpoint = vars.get("DEDUP_LAMBDA_ENDPOINT");
    if let Some(v) = vars.read("DEDUP_RELEASE_ON_ERRORS", ErrorTypes::parse)? {
        config.release_on_errors = v;
    }
    if let Some(v) = vars.read("DEDUP_RELEASE_ON_RPC_ERRORS", |text| {
        comma_list(text)
            .iter()
            .map(|code| {
                code.parse::<i64>()
                    .map_err(|_| format!("{code:?} is not a JSON-RPC error code (an integer)"))
            })
            .collect::<Result<Vec<i64>, String>>()
    })? {
        config.release_on_rpc_errors = v;
    }
    config.target_key_header = vars.read("DEDUP_TARGET_KEY_HEADER", |name| {
        // The Gateway's header rules (developer guide, *Header propagation*).
        let valid = !name.is_empty()
            && name.len() <= 100
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !name.to_ascii_lowercase().starts_with("x-amzn-");
        valid.then(|| name.to_string()).ok_or_else(|| {
            "must be a header name of letters, digits, '-' and '_' (at most 100), not X-Amzn-*"
                .to_string()
        })
    })?;
    config.envelope_namespaces = vars
        .get("DEDUP_ENVELOPE_NAMESPACES")
        .map(|t| comma_list(&t));
    config.look_up_timeouts = vars.flag("DEDUP_LOOK_UP_TIMEOUTS")?.unwrap_or(true);
    config.replay_marker = vars.flag("DEDUP_REPLAY_MARKER")?.unwrap_or(false);
    if let Some(v) = vars.read("DEDUP_KEYER", str::parse)? {
        config.keyer = v;
    }
    config.trusted_annotations = vars
        .get("DEDUP_TRUSTED_ANNOTATIONS")
        .map(|t| comma_list(&t))
        .unwrap_or_default();
    config.gateway_id = vars.get("DEDUP_GATEWAY_ID");
    if let Some(doors) = vars.read(Doors::VAR, Doors::parse)? {
        config.doors = doors;
    }
    config.interceptor_alias = vars.read("DEDUP_INTERCEPTOR_ALIAS", |name| {
        // Lambda's alias names: 1 to 128 of letters, digits, '-' and '_', not all digits (a
        // version number is not an alias).
        let valid = (1..=128).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !name.bytes().all(|b| b.is_ascii_digit());
        valid.then(|| name.to_string()).ok_or_else(|| {
            "must be a Lambda alias name (letters, digits, '-' and '_', not only digits)"
                .to_string()
        })
    })?;
    config.catalog_ttl = Duration::from_secs(
        vars.parsed("DEDUP_CATALOG_TTL_SECONDS")?
            .unwrap_or(DEFAULT_CATALOG_TTL_SECONDS),
    );
    let interceptor = vars.read("DEDUP_INTERCEPTOR_TIMEOUT_SECONDS", |text| {
        text.parse::<u64>()
            .ok()
            .and_then(lambda_timeout)
            .ok_or_else(|| format!("must be from 1 to {} seconds", MAX_TOOL_TIMEOUT.as_secs()))
    })?;
    if let Some(timeout) = interceptor {
        config.interceptor_timeout = timeout;
    }
    Ok(())
}

/// What the executor and the telemetry are told: mode, retention, waiting, cache, logs.
fn read_executor<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    config: &mut Config,
) -> Result<(), ConfigError> {
    config.ttl = Duration::from_secs(
        vars.parsed("DEDUP_TTL_SECONDS")?
            .unwrap_or(DEFAULT_TTL_SECONDS),
    );
    config.wait = Duration::from_millis(vars.parsed("DEDUP_WAIT_MS")?.unwrap_or(DEFAULT_WAIT_MS));
    if let Some(v) = vars.parsed(Mode::VAR)? {
        config.mode = v;
    }
    if let Some(v) = vars.parsed(LogCalls::VAR)? {
        config.log_calls = v;
    }
    if let Some(v) = vars.get("DEDUP_METRICS_NAMESPACE") {
        config.metrics.namespace = v;
    }
    if let Some(v) = vars
        .get("DEDUP_METRICS_SERVICE")
        .or_else(|| vars.get("AWS_LAMBDA_FUNCTION_NAME"))
    {
        config.metrics.service = v;
    }
    if let Some(v) = vars.parsed("DEDUP_METRICS_MAX_TOOLS")? {
        config.metrics.max_tools = v;
    }
    config.local_cache_items = vars.parsed("DEDUP_LOCAL_CACHE_ITEMS")?.unwrap_or(0);
    Ok(())
}

/// `DEDUP_CLAIM_BUDGET_MS` (at least 10 ms: one fast attempt and a retry) and
/// `DEDUP_STORE_BREAKER_MS` (0: no breaker).
fn claim_budget<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<ClaimBudget, ConfigError> {
    const VAR: &str = "DEDUP_CLAIM_BUDGET_MS";
    let within = match vars.parsed::<u64>(VAR)? {
        Some(ms) if ms < 10 => {
            return Err(invalid(
                VAR,
                &ms.to_string(),
                "must be at least 10 (milliseconds)",
            ));
        }
        Some(ms) => Duration::from_millis(ms),
        None => ClaimBudget::DEFAULT_WITHIN,
    };
    let breaker = vars
        .parsed::<u64>("DEDUP_STORE_BREAKER_MS")?
        .map_or(ClaimBudget::DEFAULT_BREAKER_OPEN_FOR, Duration::from_millis);
    Ok(ClaimBudget::within(within, breaker))
}

pub(super) fn invalid(var: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var,
        value: value.to_string(),
        reason: reason.into(),
    }
}
