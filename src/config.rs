//! Configuration: every `DEDUP_*` variable, parsed once into typed values with loud, named errors.
//!
//! The Lambda and `dedup replay` read the same variables, so a replay behaves like the deployed
//! function. Only the store differs by default: the Lambda uses DynamoDB, `dedup replay` the
//! in-memory store. An empty variable counts as unset (CloudFormation passes `""` for optional
//! parameters).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::catalog::DEFAULT_CATALOG_TTL_SECONDS;
use crate::key::{PolicyError, PolicySet};
use crate::store::{ClaimBudget, DynamoDbConfig};

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

/// What the handler does with a repeat (`DEDUP_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replay repeats: the tool runs once per key.
    Enforce,
    /// Run every call, but record claims and count "would have replayed".
    Shadow,
    /// Pass-through kill switch: no key, no store, the tool is invoked as if we were not there.
    Off,
}

pub use crate::key::CallerKeyScope;
pub use crate::seam::{Scope, Sessionless};

/// The per-call log line for `dedup audit` (`DEDUP_LOG_CALLS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogCalls {
    /// No tool-call line (the default).
    Off,
    /// Keys under every strategy, no argument values.
    Hashes,
    /// Keys and the argument text.
    Full,
}

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
parse_enum!(Sessionless, "DEDUP_SESSIONLESS", "pass_through" => Sessionless::PassThrough, "gateway_scope" => Sessionless::GatewayScope, "refuse" => Sessionless::Refuse);
parse_enum!(CallerKeyScope, "DEDUP_ENVELOPE_CALLER_KEY_SCOPE", "run" => CallerKeyScope::Run, "namespace" => CallerKeyScope::Namespace);
parse_enum!(LogCalls, "DEDUP_LOG_CALLS", "off" => LogCalls::Off, "hashes" => LogCalls::Hashes, "full" => LogCalls::Full);

/// The entry points this deployment serves (`DEDUP_DOORS`, comma-separated names; all when unset).
/// The SAM and CDK stacks set it from what they wire, so that a principal allowed to invoke the
/// function cannot pick another door by the shape of its event (an envelope harness sending
/// interceptor-shaped events to write catalogs, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doors {
    /// `bedrock`: Bedrock Agents action groups.
    pub bedrock: bool,
    /// `agentcore`: AgentCore Gateway Lambda targets.
    pub agentcore: bool,
    /// `interceptor`: the AgentCore Gateway interceptor.
    pub interceptor: bool,
    /// `envelope`: the invoke envelope.
    pub envelope: bool,
}

impl Doors {
    /// The environment variable.
    pub const VAR: &'static str = "DEDUP_DOORS";
    /// Every door.
    pub const ALL: Doors = Doors {
        bedrock: true,
        agentcore: true,
        interceptor: true,
        envelope: true,
    };
    const NAMES: [&'static str; 4] = ["bedrock", "agentcore", "interceptor", "envelope"];

    /// Parses a comma-separated list of door names; `none` names no door (a stack that wires
    /// nothing yet writes `none`, and every event is then refused, saying so).
    pub fn parse(text: &str) -> Result<Doors, String> {
        let mut doors = Doors {
            bedrock: false,
            agentcore: false,
            interceptor: false,
            envelope: false,
        };
        for name in comma_list(text) {
            match name.to_ascii_lowercase().as_str() {
                "bedrock" => doors.bedrock = true,
                "agentcore" => doors.agentcore = true,
                "interceptor" => doors.interceptor = true,
                "envelope" => doors.envelope = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown door {other:?}: expected some of {}, or none",
                        Doors::NAMES.join(",")
                    ));
                }
            }
        }
        Ok(doors)
    }

    /// Whether the door named `name` (one of `bedrock`, `agentcore`, `interceptor`, `envelope`) is
    /// served.
    pub fn serves(&self, name: &str) -> bool {
        match name {
            "bedrock" => self.bedrock,
            "agentcore" => self.agentcore,
            "interceptor" => self.interceptor,
            "envelope" => self.envelope,
            _ => false,
        }
    }

    /// The doors served, by name.
    pub fn names(&self) -> Vec<&'static str> {
        Doors::NAMES
            .into_iter()
            .filter(|n| self.serves(n))
            .collect()
    }
}

impl Default for Doors {
    fn default() -> Doors {
        Doors::ALL
    }
}

/// Route table from `DEDUP_ROUTES`: `"actionGroup/function"`, `"actionGroup/METHOD /path"`,
/// `"actionGroup/*"` or `"*"` → tool function name or ARN, or
/// `{"function": "name or ARN", "timeout_seconds": 120}` to state the tool's own timeout (else
/// the Lambda looks it up at cold start). The most specific entry wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    exact: HashMap<String, String>,
    groups: HashMap<String, String>,
    default: Option<String>,
    /// Timeouts stated in the routes, by target.
    timeouts: HashMap<String, Duration>,
}

impl Routes {
    /// Parses the JSON object text of `DEDUP_ROUTES`.
    pub fn parse(text: &str) -> Result<Routes, String> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON object of strings: {e}"))?;
        let mut routes = Routes::default();
        for (pattern, value) in map {
            let (target, timeout) = route_target(&value)
                .map_err(|reason| format!("route {pattern:?}: {reason}, got {value}"))?;
            if let Some(timeout) = timeout {
                routes.state_timeout(&target, timeout);
            }
            routes.insert(&pattern, target)?;
        }
        Ok(routes)
    }

    /// Records that `target` can run for `timeout` (the longest stated one wins).
    pub fn state_timeout(&mut self, target: &str, timeout: Duration) {
        let known = self.timeouts.entry(target.to_string()).or_default();
        *known = (*known).max(timeout);
    }

    /// The timeout stated for `target` in the routes, if any.
    pub fn stated_timeout(&self, target: &str) -> Option<Duration> {
        self.timeouts.get(target).copied()
    }

    /// Every distinct target, sorted.
    pub fn targets(&self) -> Vec<&str> {
        let mut targets: Vec<&str> = self
            .exact
            .values()
            .chain(self.groups.values())
            .chain(&self.default)
            .map(String::as_str)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Adds one route; the pattern syntax is the same as in [`Routes::parse`].
    pub fn insert(&mut self, pattern: &str, target: String) -> Result<(), String> {
        let pattern = pattern.trim();
        if pattern == "*" {
            self.default = Some(target);
            return Ok(());
        }
        let (group, tool) = pattern
            .split_once('/')
            .filter(|(g, t)| !g.is_empty() && !t.is_empty())
            .ok_or_else(|| {
                format!("route {pattern:?} must be \"actionGroup/function\", \"actionGroup/METHOD /path\", \"actionGroup/*\" or \"*\"")
            })?;
        if tool == "*" {
            self.groups.insert(group.to_string(), target);
        } else {
            self.exact
                .insert(route_key(group, &normalize_tool(tool)), target);
        }
        Ok(())
    }

    /// A route table that sends everything to `target`.
    pub fn everything_to(target: impl Into<String>) -> Routes {
        Routes {
            default: Some(target.into()),
            ..Routes::default()
        }
    }

    /// The target for a call of `tool` (a function name or `"METHOD /path"`) in `action_group`.
    pub fn resolve(&self, action_group: &str, tool: &str) -> Option<&str> {
        self.exact
            .get(&route_key(action_group, tool))
            .or_else(|| self.groups.get(action_group))
            .or(self.default.as_ref())
            .map(String::as_str)
    }

    /// True when no route at all is configured (the Lambda refuses to start then).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.groups.is_empty() && self.default.is_none()
    }
}

/// A route's value: `"target"` or `{"function": "target", "timeout_seconds": N}`.
fn route_target(value: &serde_json::Value) -> Result<(String, Option<Duration>), String> {
    use serde_json::Value;
    let non_empty = |v: Option<&Value>| match v {
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.trim().to_string()),
        _ => None,
    };
    if let Some(target) = non_empty(Some(value)) {
        return Ok((target, None));
    }
    let Value::Object(fields) = value else {
        return Err("target must be a non-empty string or an object".into());
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !["function", "timeout_seconds"].contains(&k.as_str()))
    {
        return Err(format!(
            "unknown field {unknown:?} (expected \"function\" and \"timeout_seconds\")"
        ));
    }
    let target =
        non_empty(fields.get("function")).ok_or("\"function\" must be a non-empty string")?;
    let timeout = match fields.get("timeout_seconds") {
        None => None,
        Some(t) => Some(t.as_u64().and_then(lambda_timeout).ok_or(format!(
            "\"timeout_seconds\" must be a whole number of seconds from 1 to {} (Lambda's maximum)",
            MAX_TOOL_TIMEOUT.as_secs()
        ))?),
    };
    Ok((target, timeout))
}

/// `seconds` as a timeout a Lambda function can have (1 s to [`MAX_TOOL_TIMEOUT`]).
fn lambda_timeout(seconds: u64) -> Option<Duration> {
    (1..=MAX_TOOL_TIMEOUT.as_secs())
        .contains(&seconds)
        .then(|| Duration::from_secs(seconds))
}

fn route_key(action_group: &str, tool: &str) -> String {
    format!("{action_group}/{tool}")
}

/// `"post /x"` → `"POST /x"`, the spelling [`crate::bedrock`] gives OpenAPI tools.
fn normalize_tool(tool: &str) -> String {
    match tool.split_once(' ') {
        Some((method, path)) if path.starts_with('/') => {
            format!("{} {}", method.to_ascii_uppercase(), path.trim())
        }
        _ => tool.to_string(),
    }
}

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
    /// `DEDUP_METRICS_NAMESPACE`: the CloudWatch namespace of the EMF metrics (default
    /// [`DEFAULT_METRICS_NAMESPACE`]).
    pub metrics_namespace: String,
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
    /// `DEDUP_ENVELOPE_NAMESPACES`: the namespaces an invoke envelope may name (comma-separated);
    /// any when unset. The namespace scopes the key, so this keeps callers of this function to
    /// the scopes the deployment gives them.
    pub envelope_namespaces: Option<Vec<String>>,
    /// `DEDUP_LOOK_UP_TIMEOUTS`: ask Lambda (`GetFunctionConfiguration`) for the timeout of a
    /// routed tool whose route states none. That permission also reads the tool's environment
    /// variables; a deployment whose routes all state `timeout_seconds` can switch it off.
    pub look_up_timeouts: bool,
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
    /// `DEDUP_CATALOG_TTL_SECONDS`: how long a catalog learned from `tools/list` lives after it
    /// last changed or was refreshed (default [`DEFAULT_CATALOG_TTL_SECONDS`]).
    pub catalog_ttl: Duration,
    /// `DEDUP_INTERCEPTOR_TIMEOUT_SECONDS`: the longest a Gateway target may take to answer; an
    /// interceptor claim's lease covers it, so a REQUEST whose RESPONSE never comes blocks its
    /// key no longer than that (default and maximum: [`MAX_TOOL_TIMEOUT`]).
    pub interceptor_timeout: Duration,
}

/// The longest a Lambda function can run (its maximum timeout): the bound of a tool whose own
/// timeout is not known, and of this function's own deadline.
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(900);

/// A lease ends this long after the later of the tool's timeout and the Lambda deadline: the
/// bound on clock skew between the containers that compare it (Lambda hosts keep time with the
/// Amazon Time Sync Service, well within a second).
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);

/// How late a tool Lambda may start after it is invoked, on top of its own timeout: its init
/// phase, which runs outside the timeout (Lambda cuts it at 10 s), and our retries of a throttled
/// invoke (under 1 s).
pub const TOOL_START_ALLOWANCE: Duration = Duration::from_secs(11);

/// The longest lease any claim can take: Lambda's maximum run time, the start allowance and the
/// margin. `DEDUP_TTL_SECONDS` may not be shorter, so a completed call outlives any lease.
pub const LONGEST_LEASE: Duration = Duration::from_secs(
    MAX_TOOL_TIMEOUT.as_secs() + TOOL_START_ALLOWANCE.as_secs() + LEASE_MARGIN.as_secs(),
);

/// The error type a tool raises to say that it did nothing (it refused its input before acting),
/// so the claim is released and a retry runs. It is ours: no library raises it by accident.
/// Python: `class DedupNothingRan(Exception)`; Node: `err.name = "DedupNothingRan"`; Java: a class
/// of that simple name in any package.
pub const NOTHING_RAN_ERROR: &str = "DedupNothingRan";

/// Lambda's own error types for an invocation that failed or was cut off: whatever ran before
/// stays done, so they can never release a claim.
const CRASH_ERROR_TYPES: [&str; 1] = ["Unhandled"];
const CRASH_ERROR_PREFIXES: [&str; 3] = ["Sandbox.", "Runtime.", "Function."];

/// A set of tool error types (the `errorType` of a Lambda error payload) that prove nothing ran.
/// [`NOTHING_RAN_ERROR`] is always in it; other types only when `DEDUP_RELEASE_ON_ERRORS` names
/// them, because an error type alone cannot tell whether a side effect came first (a Node tool
/// that charged a card and then had a write rejected raises `ValidationException`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorTypes(Vec<String>);

impl ErrorTypes {
    /// Parses a comma-separated list; `none` is the empty set. Lambda's crash types are refused.
    pub fn parse(text: &str) -> Result<ErrorTypes, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(ErrorTypes::default());
        }
        let names = comma_list(text);
        if let Some(crash) = names.iter().find(|n| {
            CRASH_ERROR_TYPES.contains(&n.as_str())
                || CRASH_ERROR_PREFIXES.iter().any(|p| n.starts_with(p))
        }) {
            return Err(format!(
                "{crash} is Lambda's error for an invocation that failed or was cut off, after which \
                 the side effect may have happened; it can never release a claim"
            ));
        }
        Ok(ErrorTypes(names))
    }

    /// True when a tool error of this type proves that nothing ran: [`NOTHING_RAN_ERROR`] (also
    /// as the last segment of a qualified name, `com.example.DedupNothingRan`), or a configured
    /// type (exact, case-sensitive).
    pub fn contains(&self, error_type: &str) -> bool {
        let simple = error_type.rsplit(['.', '$']).next().unwrap_or(error_type);
        simple == NOTHING_RAN_ERROR || self.0.iter().any(|n| n == error_type)
    }
}

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
            s3_endpoint: None,
            offload_above: None,
            wait: Duration::from_millis(DEFAULT_WAIT_MS),
            claim: ClaimBudget::default(),
            mode: Mode::Enforce,
            log_calls: LogCalls::Off,
            metrics_namespace: DEFAULT_METRICS_NAMESPACE.into(),
            policy_file: None,
            policies: PolicySet::default(),
            local_cache_items: 0,
            release_on_errors: ErrorTypes::default(),
            envelope_namespaces: None,
            look_up_timeouts: true,
            allow_memory_store: false,
            trusted_annotations: Vec::new(),
            gateway_id: None,
            doors: Doors::ALL,
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

    /// Reads variables through `lookup` (tests pass a map instead of mutating the environment).
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
        default_store: StoreKind,
    ) -> Result<Config, ConfigError> {
        let get = |var: &'static str| {
            lookup(var)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let defaults = Config::default();
        let store = parsed(&get, StoreKind::VAR)?.unwrap_or(default_store);
        let ttl_s: u64 = parsed(&get, "DEDUP_TTL_SECONDS")?.unwrap_or(DEFAULT_TTL_SECONDS);
        if ttl_s < LONGEST_LEASE.as_secs() {
            return Err(invalid(
                "DEDUP_TTL_SECONDS",
                &ttl_s.to_string(),
                format!(
                    "must be at least {} seconds, the longest lease (Lambda's {} s maximum run time, \
                     {} s for a tool's init and throttled invokes, and a {} s margin): a shorter life \
                     would let a record expire while its call may still be running",
                    LONGEST_LEASE.as_secs(),
                    MAX_TOOL_TIMEOUT.as_secs(),
                    TOOL_START_ALLOWANCE.as_secs(),
                    LEASE_MARGIN.as_secs()
                ),
            ));
        }
        // Retired: a failure reply says the tool acted, so it is always stored (see
        // `decide::after_run`); a deployment that asked for re-runs must hear that it no longer
        // gets them.
        if parsed_bool(&get, "DEDUP_CACHE_FAILURES")? == Some(false) {
            return Err(invalid(
                "DEDUP_CACHE_FAILURES",
                "false",
                "is retired: a failure reply (Bedrock FAILURE, HTTP 5xx, MCP isError) says the tool \
                 failed while acting, so it is always stored and replayed; a tool that refused its \
                 input answers REPROMPT or HTTP 4xx, or raises DedupNothingRan, and is released. \
                 Remove the variable",
            ));
        }
        let routes = match get("DEDUP_ROUTES") {
            Some(text) => Routes::parse(&text).map_err(|reason| ConfigError::Invalid {
                var: "DEDUP_ROUTES",
                value: text.clone(),
                reason,
            })?,
            None => Routes::default(),
        };
        let step_attribute = get("DEDUP_STEP_ATTRIBUTE").unwrap_or(defaults.step_attribute);
        let run_argument = get("DEDUP_RUN_ARGUMENT").unwrap_or(defaults.run_argument);
        let idempotency_key_name =
            get("DEDUP_IDEMPOTENCY_KEY_NAME").unwrap_or(defaults.idempotency_key_name);
        let policy_file = get("DEDUP_POLICY_FILE").map(PathBuf::from);
        let policies = match &policy_file {
            Some(path) => PolicySet::load(path)?,
            None => PolicySet::default(),
        };
        if let Some((tool, ttl)) = policies
            .iter()
            .filter_map(|(tool, p)| p.ttl.map(|ttl| (tool, ttl)))
            .find(|(_, ttl)| *ttl < LONGEST_LEASE)
        {
            let shown = policy_file
                .as_deref()
                .unwrap_or(Path::new(""))
                .display()
                .to_string();
            return Err(invalid(
                "DEDUP_POLICY_FILE",
                &shown,
                format!(
                    "tool {tool:?} has ttl_seconds {}, under {} seconds, the longest lease: its \
                     record could expire while its call may still be running",
                    ttl.as_secs(),
                    LONGEST_LEASE.as_secs()
                ),
            ));
        }
        // A record that outlives its result object would answer "stored result unavailable".
        let retention_days: Option<u64> = parsed(&get, "DEDUP_RESULTS_RETENTION_DAYS")?;
        // Only a deployment that offloads keeps objects (a stack without a bucket still sets it).
        if let Some(days) = retention_days.filter(|_| get("DEDUP_RESULTS_BUCKET").is_some()) {
            let longest = policies
                .iter()
                .filter_map(|(tool, p)| {
                    p.ttl
                        .map(|ttl| (format!("tool {tool:?}'s ttl_seconds"), ttl))
                })
                .chain([("DEDUP_TTL_SECONDS".to_string(), Duration::from_secs(ttl_s))])
                .max_by_key(|(_, ttl)| *ttl);
            if let Some((what, ttl)) = longest.filter(|(_, ttl)| ttl.as_secs() > days * 86_400) {
                return Err(invalid(
                    "DEDUP_RESULTS_RETENTION_DAYS",
                    &days.to_string(),
                    format!(
                        "{what} is {} seconds, longer than the results bucket keeps an object \
                         ({days} days): raise the bucket's retention",
                        ttl.as_secs()
                    ),
                ));
            }
        }
        let config = Config {
            store,
            table_name: get("DEDUP_TABLE_NAME"),
            dynamodb_endpoint: get("DEDUP_DYNAMODB_ENDPOINT"),
            key_attribute: get("DEDUP_KEY_ATTRIBUTE").unwrap_or(defaults.key_attribute),
            ttl_attribute: get("DEDUP_TTL_ATTRIBUTE").unwrap_or(defaults.ttl_attribute),
            ttl: Duration::from_secs(ttl_s),
            scope: parsed(&get, Scope::VAR)?.unwrap_or(defaults.scope),
            step_attribute,
            run_argument,
            idempotency_key_name,
            sessionless: parsed(&get, Sessionless::VAR)?.unwrap_or(defaults.sessionless),
            envelope_caller_key_scope: parsed(&get, CallerKeyScope::VAR)?
                .unwrap_or(defaults.envelope_caller_key_scope),
            routes,
            lambda_endpoint: get("DEDUP_LAMBDA_ENDPOINT"),
            results_bucket: get("DEDUP_RESULTS_BUCKET"),
            s3_endpoint: get("DEDUP_S3_ENDPOINT"),
            offload_above: parsed(&get, "DEDUP_OFFLOAD_THRESHOLD_BYTES")?,
            wait: Duration::from_millis(parsed(&get, "DEDUP_WAIT_MS")?.unwrap_or(DEFAULT_WAIT_MS)),
            claim: claim_budget(&get)?,
            mode: parsed(&get, Mode::VAR)?.unwrap_or(defaults.mode),
            log_calls: parsed(&get, LogCalls::VAR)?.unwrap_or(defaults.log_calls),
            metrics_namespace: get("DEDUP_METRICS_NAMESPACE").unwrap_or(defaults.metrics_namespace),
            policy_file,
            policies,
            local_cache_items: parsed(&get, "DEDUP_LOCAL_CACHE_ITEMS")?.unwrap_or(0),
            release_on_errors: match get("DEDUP_RELEASE_ON_ERRORS") {
                Some(text) => ErrorTypes::parse(&text)
                    .map_err(|reason| invalid("DEDUP_RELEASE_ON_ERRORS", &text, reason))?,
                None => defaults.release_on_errors,
            },
            envelope_namespaces: get("DEDUP_ENVELOPE_NAMESPACES").map(|text| comma_list(&text)),
            look_up_timeouts: parsed_bool(&get, "DEDUP_LOOK_UP_TIMEOUTS")?.unwrap_or(true),
            allow_memory_store: parsed_bool(&get, "DEDUP_ALLOW_MEMORY_STORE")?.unwrap_or(false),
            trusted_annotations: get("DEDUP_TRUSTED_ANNOTATIONS")
                .map(|text| comma_list(&text))
                .unwrap_or_default(),
            gateway_id: get("DEDUP_GATEWAY_ID"),
            doors: match get(Doors::VAR) {
                Some(text) => {
                    Doors::parse(&text).map_err(|reason| invalid(Doors::VAR, &text, reason))?
                }
                None => Doors::ALL,
            },
            catalog_ttl: Duration::from_secs(
                parsed(&get, "DEDUP_CATALOG_TTL_SECONDS")?.unwrap_or(DEFAULT_CATALOG_TTL_SECONDS),
            ),
            interceptor_timeout: match parsed::<u64>(&get, "DEDUP_INTERCEPTOR_TIMEOUT_SECONDS")? {
                None => defaults.interceptor_timeout,
                Some(s) => lambda_timeout(s).ok_or_else(|| {
                    invalid(
                        "DEDUP_INTERCEPTOR_TIMEOUT_SECONDS",
                        &s.to_string(),
                        format!("must be from 1 to {} seconds", MAX_TOOL_TIMEOUT.as_secs()),
                    )
                })?,
            },
        };
        if config.store == StoreKind::DynamoDb {
            config.dynamodb()?;
        }
        Ok(config)
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

/// `DEDUP_CLAIM_BUDGET_MS` (at least 10 ms: one fast attempt and a retry) and
/// `DEDUP_STORE_BREAKER_MS` (0: no breaker).
fn claim_budget(get: &impl Fn(&'static str) -> Option<String>) -> Result<ClaimBudget, ConfigError> {
    const VAR: &str = "DEDUP_CLAIM_BUDGET_MS";
    let within = match parsed::<u64>(get, VAR)? {
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
    let breaker = parsed::<u64>(get, "DEDUP_STORE_BREAKER_MS")?
        .map_or(ClaimBudget::DEFAULT_BREAKER_OPEN_FOR, Duration::from_millis);
    Ok(ClaimBudget::within(within, breaker))
}

fn invalid(var: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var,
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parsed<T: FromStr>(
    get: &impl Fn(&'static str) -> Option<String>,
    var: &'static str,
) -> Result<Option<T>, ConfigError>
where
    T::Err: fmt::Display,
{
    get(var)
        .map(|value| {
            value
                .parse::<T>()
                .map_err(|e| invalid(var, &value, e.to_string()))
        })
        .transpose()
}

/// The non-empty, trimmed items of a comma-separated list.
fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect()
}

fn parsed_bool(
    get: &impl Fn(&'static str) -> Option<String>,
    var: &'static str,
) -> Result<Option<bool>, ConfigError> {
    get(var)
        .map(|value| match value.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(invalid(var, &value, "expected true|false")),
        })
        .transpose()
}

#[cfg(test)]
mod tests {
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
            c.release_on_errors.contains("CardRejected")
                && c.release_on_errors.contains("BadInput")
        );
        assert!(!c.release_on_errors.contains("ValidationError"));
        let none = config(&[("DEDUP_RELEASE_ON_ERRORS", "none")], StoreKind::Memory).unwrap();
        assert_eq!(none.release_on_errors, ErrorTypes::default());
        assert!(none.release_on_errors.contains(NOTHING_RAN_ERROR));
    }

    #[test]
    fn cache_failures_is_retired_loudly_and_the_timeout_lookup_can_be_switched_off() {
        let err = config(&[("DEDUP_CACHE_FAILURES", "false")], StoreKind::Memory).unwrap_err();
        assert!(err.to_string().contains("retired"), "{err}");
        assert!(config(&[("DEDUP_CACHE_FAILURES", "true")], StoreKind::Memory).is_ok());
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
}
