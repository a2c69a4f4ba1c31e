//! Configuration: every `DEDUP_*` variable, parsed once into typed values with loud, named errors.
//!
//! The Lambda and `dedup replay` read the same variables, so a replay behaves like the deployed
//! function. Only the store differs by default: the Lambda uses DynamoDB, `dedup replay` the
//! in-memory store. An empty variable counts as unset (CloudFormation passes `""` for optional
//! parameters).
//!
//! Three steps, each in its own file: [`mod@env`] reads each variable into its typed value (no
//! variable looks at another), `checks` refuses the combinations that cannot work (a time to
//! live shorter than the longest lease, a bucket that forgets results before their records), and
//! the policy file named by `DEDUP_POLICY_FILE` is loaded between them. The handler projects the
//! result onto each component's own settings; no component below it reads a [`Config`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::catalog::DEFAULT_CATALOG_TTL_SECONDS;
use crate::key::{KeyerVersion, PolicyError, PolicySet};
use crate::store::{ClaimBudget, DynamoDbConfig};
use crate::telemetry::MetricsSettings;
use document::Document;

mod checks;
pub mod document;
pub mod env;
pub mod source;
#[cfg(test)]
mod tests;
mod variables;

pub use crate::dispatch::{ErrorTypes, NOTHING_RAN_ERROR, Routes};
pub use crate::doors::Doors;
use env::invalid;
pub use variables::VARIABLES;

/// Errors in the environment, each naming the variable at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A variable is set, but to a value that cannot be used.
    #[error("{var}={value:?} is invalid: {reason}")]
    Invalid {
        /// The variable at fault, e.g. `DEDUP_TTL_SECONDS`.
        var: &'static str,
        /// The value as read (trimmed), quoted in the message.
        value: String,
        /// Why the value is refused, and what would be accepted.
        reason: String,
    },
    /// A variable this setup needs is unset (or empty).
    #[error("{var} is required {why}")]
    Missing {
        /// The variable that must be set.
        var: &'static str,
        /// When or by what it is required, the end of the message (e.g. "when DEDUP_STORE=dynamodb").
        why: &'static str,
    },
    /// The policy file named by `DEDUP_POLICY_FILE` could not be read or parsed.
    #[error("DEDUP_POLICY_FILE: {0}")]
    Policy(#[from] PolicyError),
}

/// Which idempotency store backs the handler (`DEDUP_STORE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `dynamodb`: a DynamoDB table shared by every container (the Lambda's default).
    DynamoDb,
    /// `memory`: a map in this process only (`dedup replay`'s default); the Lambda accepts it only
    /// with `DEDUP_ALLOW_MEMORY_STORE=true`.
    Memory,
}

pub use crate::decide::Mode;

pub use crate::doors::port::{Scope, Sessionless};
pub use crate::key::CallerKeyScope;

pub use crate::telemetry::LogCalls;

macro_rules! parse_enum {
    ($ty:ident, $var:literal, $($text:literal => $variant:expr),+ $(,)?) => {
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok($variant),)+
                    _ => Err(format!("expected one of {}", [$($text),+].join("|"))),
                }
            }
        }
        impl $ty {
            /// The environment variable this setting is read from.
            pub const VAR: &'static str = $var;
            /// The setting as spelt in its variable (lower case); also what `Display` writes.
            pub fn name(self) -> &'static str {
                match self { $(v if v == $variant => $text,)+ _ => unreachable!() }
            }
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

parse_enum!(StoreKind, "DEDUP_STORE", "dynamodb" => StoreKind::DynamoDb, "memory" => StoreKind::Memory);
parse_enum!(Mode, "DEDUP_MODE", "enforce" => Mode::Enforce, "shadow" => Mode::Shadow, "off" => Mode::Off);
parse_enum!(Scope, "DEDUP_SCOPE", "turn" => Scope::Turn, "session" => Scope::Session);
parse_enum!(Sessionless, "DEDUP_SESSIONLESS", "pass_through" => Sessionless::PassThrough, "gateway_scope" => Sessionless::GatewayScope, "principal" => Sessionless::Principal, "refuse" => Sessionless::Refuse);
parse_enum!(CallerKeyScope, "DEDUP_ENVELOPE_CALLER_KEY_SCOPE", "run" => CallerKeyScope::Run, "namespace" => CallerKeyScope::Namespace);
parse_enum!(LogCalls, "DEDUP_LOG_CALLS", "off" => LogCalls::Off, "hashes" => LogCalls::Hashes, "full" => LogCalls::Full);

/// Everything the Lambda and `dedup replay` read from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// `DEDUP_STORE`: which idempotency store backs the handler.
    pub store: StoreKind,
    /// `DEDUP_TABLE_NAME`; required when the store is DynamoDB.
    pub table_name: Option<String>,
    /// `DEDUP_DYNAMODB_ENDPOINT`: a local DynamoDB-compatible server.
    pub dynamodb_endpoint: Option<String>,
    /// `DEDUP_KEY_ATTRIBUTE`: the table's string partition key attribute (default `pk`).
    pub key_attribute: String,
    /// `DEDUP_TTL_ATTRIBUTE`: the table's TTL attribute, expiry in epoch seconds (default
    /// `expires_at`).
    pub ttl_attribute: String,
    /// How long a completed call is replayed (`DEDUP_TTL_SECONDS`).
    pub ttl: Duration,
    /// `DEDUP_SCOPE`: where the step comes from when the caller sends none (default `turn`).
    pub scope: Scope,
    /// Session attribute holding the caller's step (`DEDUP_STEP_ATTRIBUTE`).
    pub step_attribute: String,
    /// The argument an AgentCore Gateway call names its run by when the Gateway sends no session
    /// id (`DEDUP_RUN_ARGUMENT`).
    pub run_argument: String,
    /// `DEDUP_IDEMPOTENCY_KEY_NAME`: the envelope member, AgentCore argument or `_meta` member,
    /// or Bedrock session attribute that carries a caller's own idempotency key.
    pub idempotency_key_name: String,
    /// `DEDUP_SESSIONLESS`: what a Gateway call that names no run gets (default `pass_through`).
    pub sessionless: Sessionless,
    /// `DEDUP_ENVELOPE_CALLER_KEY_SCOPE`: how far an envelope's caller key reaches: its run
    /// (`run`, the default), or every run of its namespace (`namespace`, for a harness whose keys
    /// are unique across runs).
    pub envelope_caller_key_scope: CallerKeyScope,
    /// `DEDUP_ROUTES`: which tool Lambda each call is sent to (empty when unset; the Lambda
    /// requires at least one route).
    pub routes: Routes,
    /// `DEDUP_LAMBDA_ENDPOINT`: where tool Lambdas are invoked (e.g. `cargo lambda watch`).
    pub lambda_endpoint: Option<String>,
    /// `DEDUP_RESULTS_BUCKET`: where results past DynamoDB's item limit go (else they are omitted
    /// and repeats told the call already ran).
    pub results_bucket: Option<String>,
    /// `DEDUP_S3_ENDPOINT`: a local S3-compatible server for the results bucket.
    pub s3_endpoint: Option<String>,
    /// `DEDUP_EVENT_BUS`: the EventBridge bus (a name or an ARN) that hears of each call left
    /// with its outcome unknown; `None`: no events.
    pub event_bus: Option<String>,
    /// `DEDUP_EVENTS_ENDPOINT`: a local EventBridge-compatible server.
    pub events_endpoint: Option<String>,
    /// `DEDUP_OFFLOAD_THRESHOLD_BYTES`: with a results bucket, results longer than this go to it
    /// even when they would fit in an item.
    pub offload_above: Option<usize>,
    /// Upper bound on waiting for an identical in-flight call (`DEDUP_WAIT_MS`).
    pub wait: Duration,
    /// `DEDUP_CLAIM_BUDGET_MS` and `DEDUP_STORE_BREAKER_MS`: how soon a claim fails closed on a
    /// store that does not answer, and how long later claims then fail at once.
    pub claim: ClaimBudget,
    /// `DEDUP_MODE`: enforce, shadow or off (default enforce).
    pub mode: Mode,
    /// `DEDUP_LOG_CALLS`: the tool-call line for `dedup audit` (default off).
    pub log_calls: LogCalls,
    /// The EMF metrics: `DEDUP_METRICS_NAMESPACE` (default [`DEFAULT_METRICS_NAMESPACE`]),
    /// `DEDUP_METRICS_SERVICE` (default the function's name, `AWS_LAMBDA_FUNCTION_NAME`) and
    /// `DEDUP_METRICS_MAX_TOOLS`.
    pub metrics: MetricsSettings,
    /// `DEDUP_POLICY_FILE`: a `.json` or `.toml` file of per-tool key policies and schemas, read
    /// once at start-up.
    pub policy_file: Option<PathBuf>,
    /// Loaded from `policy_file` (empty without one).
    pub policies: PolicySet,
    /// Completed records kept in a warm container (`DEDUP_LOCAL_CACHE_ITEMS`, default 0 = off).
    pub local_cache_items: usize,
    /// Tool error types that prove nothing ran, so the claim is released (`DEDUP_RELEASE_ON_ERRORS`,
    /// beside [`NOTHING_RAN_ERROR`]; none by default).
    pub release_on_errors: ErrorTypes,
    /// JSON-RPC error codes of a Gateway target's own that say nothing ran, so the claim is
    /// released (`DEDUP_RELEASE_ON_RPC_ERRORS`, beside the protocol's own refusals; none by
    /// default).
    pub release_on_rpc_errors: Vec<i64>,
    /// `DEDUP_TARGET_KEY_HEADER`: the header (`Idempotency-Key`, the IETF draft's name) in which
    /// the interceptor hands a claimed call's key to the target; none by default.
    pub target_key_header: Option<String>,
    /// `DEDUP_ENVELOPE_NAMESPACES`: the namespaces an invoke envelope may name (comma-separated);
    /// any when unset. The namespace scopes the key, so this keeps callers of this function to
    /// the scopes the deployment gives them.
    pub envelope_namespaces: Option<Vec<String>>,
    /// `DEDUP_LOOK_UP_TIMEOUTS`: ask Lambda (`GetFunctionConfiguration`) for the timeout of a
    /// routed tool whose route states none. That permission also reads the tool's environment
    /// variables; a deployment whose routes all state `timeout_seconds` can switch it off.
    pub look_up_timeouts: bool,
    /// `DEDUP_REPLAY_MARKER`: also mark replays on the Bedrock and Lambda-target doors, where the
    /// marker changes what the caller reads (a prompt session attribute; a member of the reply).
    /// The interceptor and envelope doors always mark them.
    pub replay_marker: bool,
    /// `DEDUP_KEYER`: the typed keyer's version (`typed/v1`…; default `typed/v2`, the rules every
    /// build before pinning used). Pinned so that a new build keys as the old one did until an
    /// operator moves it, between an agent's runs (docs/keys.md, "Versions").
    pub keyer: KeyerVersion,
    /// `DEDUP_ALLOW_MEMORY_STORE`: lets the Lambda run on the per-container in-memory store.
    pub allow_memory_store: bool,
    /// `DEDUP_TRUSTED_ANNOTATIONS`: the gateways (their id or ARN, `-` for one that names itself
    /// nowhere, or `*` for all) whose MCP tool listings may loosen a key: a tool listed with
    /// `readOnlyHint: true` is then never claimed, and `x-dedup` field modes in a listed schema
    /// apply. None by default, because MCP calls annotations hints from possibly untrusted
    /// servers; every listing still types its tools.
    pub trusted_annotations: Vec<String>,
    /// `DEDUP_GATEWAY_ID`: the gateway this function intercepts for, when the invocation names
    /// none (no `GATEWAY_ARN` in the client context, no `Host` header).
    pub gateway_id: Option<String>,
    /// `DEDUP_DOORS`: the entry points this deployment serves.
    pub doors: Doors,
    /// `DEDUP_INTERCEPTOR_ALIAS`: the one alias that serves the interceptor door, and only it
    /// (unset: any qualifier serves every served door).
    pub interceptor_alias: Option<String>,
    /// `DEDUP_CATALOG_TTL_SECONDS`: how long a catalog learned from `tools/list` lives after it
    /// last changed or was refreshed (default `DEFAULT_CATALOG_TTL_SECONDS`).
    pub catalog_ttl: Duration,
    /// `DEDUP_INTERCEPTOR_TIMEOUT_SECONDS`: the longest a Gateway target may take to answer; an
    /// interceptor claim's lease covers it, so a REQUEST whose RESPONSE never comes blocks its
    /// key no longer than that (default and maximum: [`MAX_TOOL_TIMEOUT`]).
    pub interceptor_timeout: Duration,
}

pub use crate::executor::lease::{
    LEASE_MARGIN, LONGEST_LEASE, MAX_TOOL_TIMEOUT, TOOL_START_ALLOWANCE,
};

/// Default for `DEDUP_TTL_SECONDS`: a completed call is replayed for one day.
pub const DEFAULT_TTL_SECONDS: u64 = 86_400;
/// Default for `DEDUP_WAIT_MS`: a repeat waits up to 10 s for an identical call in flight.
pub const DEFAULT_WAIT_MS: u64 = 10_000;
/// Default for `DEDUP_STEP_ATTRIBUTE`.
pub const DEFAULT_STEP_ATTRIBUTE: &str = "dedup_step";
/// Where a caller's own idempotency key travels, unless `DEDUP_IDEMPOTENCY_KEY_NAME` says otherwise.
pub const DEFAULT_IDEMPOTENCY_KEY_NAME: &str = "idempotency_key";
/// Default for `DEDUP_RUN_ARGUMENT`.
pub const DEFAULT_RUN_ARGUMENT: &str = "dedup_run_id";
/// Default for `DEDUP_METRICS_NAMESPACE`.
pub const DEFAULT_METRICS_NAMESPACE: &str = "ToolcallDedup";

impl Default for Config {
    /// The zero-configuration defaults (in-memory store, no routes).
    fn default() -> Self {
        Config {
            store: StoreKind::Memory,
            table_name: None,
            dynamodb_endpoint: None,
            key_attribute: DynamoDbConfig::DEFAULT_KEY_ATTRIBUTE.into(),
            ttl_attribute: DynamoDbConfig::DEFAULT_TTL_ATTRIBUTE.into(),
            ttl: Duration::from_secs(DEFAULT_TTL_SECONDS),
            scope: Scope::Turn,
            step_attribute: DEFAULT_STEP_ATTRIBUTE.into(),
            run_argument: DEFAULT_RUN_ARGUMENT.into(),
            idempotency_key_name: DEFAULT_IDEMPOTENCY_KEY_NAME.into(),
            sessionless: Sessionless::PassThrough,
            envelope_caller_key_scope: CallerKeyScope::Run,
            routes: Routes::default(),
            lambda_endpoint: None,
            results_bucket: None,
            event_bus: None,
            events_endpoint: None,
            s3_endpoint: None,
            offload_above: None,
            wait: Duration::from_millis(DEFAULT_WAIT_MS),
            claim: ClaimBudget::default(),
            mode: Mode::Enforce,
            log_calls: LogCalls::Off,
            metrics: MetricsSettings::new(DEFAULT_METRICS_NAMESPACE),
            policy_file: None,
            policies: PolicySet::default(),
            local_cache_items: 0,
            release_on_errors: ErrorTypes::default(),
            release_on_rpc_errors: Vec::new(),
            target_key_header: None,
            envelope_namespaces: None,
            look_up_timeouts: true,
            replay_marker: false,
            keyer: KeyerVersion::default(),
            allow_memory_store: false,
            trusted_annotations: Vec::new(),
            gateway_id: None,
            doors: Doors::ALL,
            interceptor_alias: None,
            catalog_ttl: Duration::from_secs(DEFAULT_CATALOG_TTL_SECONDS),
            interceptor_timeout: MAX_TOOL_TIMEOUT,
        }
    }
}

impl Config {
    /// Reads the process environment; `default_store` applies when `DEDUP_STORE` is unset.
    pub fn from_env(default_store: StoreKind) -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok(), default_store)
    }

    /// Reads variables through `lookup` (tests pass a map instead of mutating the environment),
    /// loads the policy file they name, and refuses combinations that cannot work.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        default_store: StoreKind,
    ) -> Result<Config, ConfigError> {
        Config::from_lookup_and_document(lookup, None, default_store)
    }

    /// [`Config::from_lookup`] with a config document: its settings apply where the variables
    /// do not say otherwise, its routes and policies replace `DEDUP_ROUTES` and the policy file
    /// (giving both is refused: one place for each).
    pub fn from_lookup_and_document(
        lookup: impl Fn(&str) -> Option<String>,
        document: Option<&Document>,
        default_store: StoreKind,
    ) -> Result<Config, ConfigError> {
        let vars = env::Vars {
            // An empty variable counts as unset (CloudFormation passes "" for an optional
            // parameter), so it must not hide the document's setting either.
            lookup: |var: &str| {
                lookup(var)
                    .filter(|value| !value.trim().is_empty())
                    .or_else(|| document.and_then(|d| d.settings.get(var).cloned()))
            },
        };
        let mut config = env::read(&vars, default_store)?;
        if let Some(path) = &config.policy_file {
            config.policies = PolicySet::load(path)?;
        }
        if let Some(document) = document {
            take_from_document(&vars, document, &mut config)?;
        }
        checks::check(&vars, &config)?;
        if config.store == StoreKind::DynamoDb {
            config.dynamodb()?;
        }
        Ok(config)
    }

    /// The Lambda's configuration from the process environment and the config document it names
    /// (`DEDUP_CONFIG`, already loaded); see [`Config::for_lambda`].
    pub fn lambda_with_document(document: Option<&Document>) -> Result<Config, ConfigError> {
        Config::from_lookup_and_document(
            |name| std::env::var(name).ok(),
            document,
            StoreKind::DynamoDb,
        )?
        .for_lambda()
    }

    /// The Lambda's configuration from the process environment; see [`Config::for_lambda`].
    pub fn lambda_from_env() -> Result<Config, ConfigError> {
        Config::from_env(StoreKind::DynamoDb)?.for_lambda()
    }

    /// Checks what the Lambda needs beyond [`Config::from_lookup`]: no in-memory store unless
    /// `DEDUP_ALLOW_MEMORY_STORE=true` (each container would dedup only the calls it sees itself,
    /// so retries landing on another container would run again). Routes are optional: a
    /// deployment that is only a Gateway interceptor calls no tool itself.
    pub fn for_lambda(self) -> Result<Config, ConfigError> {
        if self.routes.is_empty() {
            tracing::warn!(
                "DEDUP_ROUTES is unset: only the Gateway interceptor door can serve calls; every \
                 Bedrock, Lambda-target and envelope call is answered with a no-route error"
            );
        }
        if self.store == StoreKind::Memory {
            if !self.allow_memory_store {
                return Err(invalid(
                    StoreKind::VAR,
                    StoreKind::Memory.name(),
                    "the in-memory store dedups within one Lambda container only, so a retry \
                     served by another container runs the tool again; use DynamoDB, or set \
                     DEDUP_ALLOW_MEMORY_STORE=true for local use",
                ));
            }
            tracing::warn!(
                "DEDUP_STORE=memory with DEDUP_ALLOW_MEMORY_STORE=true: calls are deduplicated \
                 within this container only; for local use, never in production"
            );
        }
        Ok(self)
    }

    /// The DynamoDB store settings; fails when `DEDUP_TABLE_NAME` is missing or a name is invalid.
    pub fn dynamodb(&self) -> Result<DynamoDbConfig, ConfigError> {
        let table = self.table_name.clone().ok_or(ConfigError::Missing {
            var: "DEDUP_TABLE_NAME",
            why: "when DEDUP_STORE=dynamodb (the Lambda's default)",
        })?;
        let cfg = DynamoDbConfig {
            key_attribute: self.key_attribute.clone(),
            ttl_attribute: self.ttl_attribute.clone(),
            offload_above: self.offload_above,
            claim: self.claim,
            ..DynamoDbConfig::new(table.clone())
        };
        cfg.validate().map_err(|e| ConfigError::Invalid {
            var: "DEDUP_TABLE_NAME/DEDUP_KEY_ATTRIBUTE/DEDUP_TTL_ATTRIBUTE",
            value: format!("{table}/{}/{}", cfg.key_attribute, cfg.ttl_attribute),
            reason: e.to_string(),
        })?;
        Ok(cfg)
    }
}

/// The document's routes and policies, where no variable gives them too.
fn take_from_document<F: Fn(&str) -> Option<String>>(
    vars: &env::Vars<F>,
    document: &Document,
    config: &mut Config,
) -> Result<(), ConfigError> {
    if let Some(routes) = &document.routes {
        if let Some(given) = vars.get("DEDUP_ROUTES") {
            return Err(env::invalid(
                "DEDUP_ROUTES",
                &given,
                "the config document (DEDUP_CONFIG) has routes too: keep them in one place",
            ));
        }
        config.routes = routes.clone();
    }
    if !document.policies.is_empty() {
        if let Some(given) = vars.get("DEDUP_POLICY_FILE") {
            return Err(env::invalid(
                "DEDUP_POLICY_FILE",
                &given,
                "the config document (DEDUP_CONFIG) has tools or tool_definitions too: keep \
                 them in one place",
            ));
        }
        config.policies = document.policies.clone();
    }
    Ok(())
}
