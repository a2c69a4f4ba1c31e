//! Every `DEDUP_*` variable the function reads, in one list. The environment reader asks only for
//! these (checked in debug builds), and a test holds the list against the sources, the table in
//! docs/configuration.md and the README's table, so a variable cannot be read without being
//! documented, nor documented without being read.

/// The variables, grouped as docs/configuration.md lists them.
pub const VARIABLES: [&str; 48] = [
    // The config document and its refresh
    "DEDUP_CONFIG",
    "DEDUP_CONFIG_REFRESH_SECONDS",
    "DEDUP_POLICY_FILE",
    // The store
    "DEDUP_STORE",
    "DEDUP_ALLOW_MEMORY_STORE",
    "DEDUP_TABLE_NAME",
    "DEDUP_KEY_ATTRIBUTE",
    "DEDUP_TTL_ATTRIBUTE",
    "DEDUP_CLAIM_BUDGET_MS",
    "DEDUP_STORE_BREAKER_MS",
    "DEDUP_RESULTS_BUCKET",
    "DEDUP_RESULTS_RETENTION_DAYS",
    "DEDUP_OFFLOAD_THRESHOLD_BYTES",
    "DEDUP_LOCAL_CACHE_ITEMS",
    // The executor
    "DEDUP_MODE",
    "DEDUP_TTL_SECONDS",
    "DEDUP_WAIT_MS",
    "DEDUP_CACHE_FAILURES",
    "DEDUP_RELEASE_ON_ERRORS",
    "DEDUP_RELEASE_ON_RPC_ERRORS",
    "DEDUP_KEYER",
    // Routes and tools
    "DEDUP_ROUTES",
    "DEDUP_LOOK_UP_TIMEOUTS",
    "DEDUP_CATALOG_TTL_SECONDS",
    "DEDUP_TRUSTED_ANNOTATIONS",
    // The doors and how they scope a call
    "DEDUP_DOORS",
    "DEDUP_REPLAY_MARKER",
    "DEDUP_INTERCEPTOR_ALIAS",
    "DEDUP_INTERCEPTOR_TIMEOUT_SECONDS",
    "DEDUP_GATEWAY_ID",
    "DEDUP_TARGET_KEY_HEADER",
    "DEDUP_SCOPE",
    "DEDUP_STEP_ATTRIBUTE",
    "DEDUP_RUN_ARGUMENT",
    "DEDUP_SESSIONLESS",
    "DEDUP_IDEMPOTENCY_KEY_NAME",
    "DEDUP_ENVELOPE_NAMESPACES",
    "DEDUP_ENVELOPE_CALLER_KEY_SCOPE",
    // Observability
    "DEDUP_LOG_CALLS",
    "DEDUP_METRICS_NAMESPACE",
    "DEDUP_METRICS_SERVICE",
    "DEDUP_METRICS_MAX_TOOLS",
    "DEDUP_EVENT_BUS",
    // Endpoints of local stand-ins (tests, `dedup replay`)
    "DEDUP_DYNAMODB_ENDPOINT",
    "DEDUP_LAMBDA_ENDPOINT",
    "DEDUP_SSM_ENDPOINT",
    "DEDUP_S3_ENDPOINT",
    "DEDUP_EVENTS_ENDPOINT",
];

/// Whether `name` is one of [`VARIABLES`].
pub(crate) fn is_registered(name: &str) -> bool {
    VARIABLES.contains(&name)
}
