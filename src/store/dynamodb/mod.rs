//! DynamoDB store.
//!
//! - **claim** is one conditional `PutItem` with `ReturnValuesOnConditionCheckFailure=ALL_OLD`,
//!   so a repeat costs one request. Servers that ignore that flag (dynalite) return no item; the
//!   store then reads the record with one consistent `GetItem`.
//! - **complete** (`UpdateItem`) and **release** (`DeleteItem`) are conditional on the lease token.
//! - Every request is counted by an SDK interceptor ([`Store::requests`]).
//! - Throttling, 5xx and network errors are retried here, with jittered exponential backoff until
//!   a deadline; the SDK's own retries are switched off so that the store sees every attempt. An
//!   attempt whose outcome is unknown (timeout, lost response) may have been applied, so the retry
//!   recognises its own work: a claim that finds its own token is `Claimed`, a complete that finds
//!   the record completed under its token succeeds, a release that finds the record gone succeeds.
//!   A claim is never reported lost while it is in fact held.
//!
//! Item layout (attribute names other than the key and TTL attribute are fixed):
//!
//! | attribute | type | content |
//! |---|---|---|
//! | `pk` (`key_attribute`) | S | the idempotency key |
//! | `status` | S | `IN_PROGRESS` or `COMPLETED` |
//! | `expires_at` (`ttl_attribute`) | N | epoch seconds; the table's TTL attribute |
//! | `lease_until` | N | epoch milliseconds |
//! | `lease_token` | S | UUID of the claim |
//! | `fingerprint` | S | argument fingerprint |
//! | `tool` | S | tool name |
//! | `created_at` | N | epoch milliseconds |
//! | `result` | B | the result, present once completed |
//! | `result_encoding` | S | `raw` or `gzip` |
//! | `result_omitted` | N | instead of `result`: the size of a result too large to store |
//! | `outcome_unknown` | BOOL | instead of `result`: settled as outcome unknown, for an operator |
//! | `at_most_once` | BOOL | the claim is never taken over once its lease ends |
//! | `path_digests` | S | a caller-keyed call's digest per argument leaf (no values) |
//! | `result_object` | S | instead of `result`: the results bucket's object holding it |
//! | `result_sha256` | S | with `result_object`: the result's SHA-256 (hex) |
//! | `result_bytes` | N | with `result_object`: the result's size |
//! | `namespace`, `run`, `step`, `keyer`, `policy` | S | what the call was and what keyed it (the keyer's version, the tool policy's fingerprint), for an operator (never its arguments) |
//! | `attention` | S | `claim` on an `at_most_once` claim, `unknown` once settled so; removed when settled with a result. Key of the sparse index `attention` (sort key `created_at`) |

use std::fmt;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;
use aws_sdk_dynamodb::config::retry::RetryConfig;

use super::codec::{EncodedResult, ResultEncoding, decode_result, encode_result};
use super::{
    BoxError, ClaimContended, ClaimOutcome, ClaimRequest, Clock, Completion,
    DEFAULT_COMPRESS_THRESHOLD, LeaseToken, Offloaded, Op, Record, RecordAbout, RecordFilter,
    RecordState, Records, RequestCounter, RequestCounts, ResultBucket, RetriesExhausted, SettleAs,
    Status, Store, StoreError, SystemClock, expiry_covering_lease, validate_claim, validate_key,
};

mod config;
mod expressions;
mod item;
mod ops;
mod records;
mod retry;
#[cfg(test)]
mod tests;

pub use config::{ClaimBudget, DynamoDbConfig, RetryPolicy};
use expressions::*;
use item::*;
pub use item::{ATTENTION_INDEX, attr, decode_item};
pub use retry::BreakerOpen;
use retry::*;

/// A DynamoDB client from the default AWS configuration, optionally pointed at a local endpoint
/// (see `aws::sdk_config`).
pub async fn build_client(endpoint_url: Option<&str>) -> Client {
    Client::new(&crate::aws::sdk_config(endpoint_url).await)
}

/// [`Store`] on a DynamoDB table (or a DynamoDB-compatible server).
#[derive(Clone)]
pub struct DynamoDbStore {
    client: Client,
    cfg: Arc<DynamoDbConfig>,
    clock: Arc<dyn Clock>,
    counter: Arc<RequestCounter>,
    /// Where results past the item limit go; without it they are omitted.
    results: Option<ResultBucket>,
    breaker: Arc<Breaker>,
}

impl fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("cfg", &self.cfg)
            .field("clock", &self.clock)
            .field("requests", &self.counter.snapshot())
            .field("results", &self.results)
            .finish_non_exhaustive()
    }
}

impl DynamoDbStore {
    /// Wraps `client`'s configuration with a request counter, with the SDK's retries off (the
    /// store retries itself, see the module docs) and without stalled-stream protection (every
    /// attempt is bounded by [`RetryPolicy::attempt_timeout`], which ends a stalled answer before
    /// the protection's 5 s grace would, so it only cost a timed body wrapper per request).
    /// Interceptors already on `client` are kept.
    pub fn new(client: &Client, cfg: DynamoDbConfig) -> Result<Self, StoreError> {
        cfg.validate()?;
        let counter = Arc::new(RequestCounter::default());
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .interceptor(CountRequests(counter.clone()))
            .build();
        Ok(DynamoDbStore {
            client: Client::from_conf(conf),
            cfg: Arc::new(cfg),
            clock: Arc::new(SystemClock),
            counter,
            results: None,
            breaker: Arc::default(),
        })
    }

    /// Replaces the clock.
    pub fn with_clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Results that do not fit in an item (or are longer than
    /// [`DynamoDbConfig::offload_above`]) go to `bucket` instead of being omitted.
    pub fn with_result_bucket(mut self, bucket: ResultBucket) -> Self {
        self.results = Some(bucket);
        self
    }

    /// Where results past the item limit go, if anywhere.
    pub fn result_bucket(&self) -> Option<&ResultBucket> {
        self.results.as_ref()
    }

    /// A completed record with its offloaded result read back (and checked) into `result`.
    async fn with_result(&self, mut record: Record) -> Result<Record, StoreError> {
        if let (Status::Completed, None, Some(offloaded)) =
            (record.status, &record.result, &record.offloaded)
        {
            let bucket = self
                .results
                .as_ref()
                .ok_or_else(|| StoreError::ResultUnavailable {
                    object: offloaded.object.clone(),
                    why: "no results bucket is configured (DEDUP_RESULTS_BUCKET)".into(),
                })?;
            record.result = Some(bucket.fetch(offloaded).await?);
        }
        Ok(record)
    }

    /// The table and attribute settings this store uses.
    pub fn config(&self) -> &DynamoDbConfig {
        &self.cfg
    }

    /// The store's client (retries off, requests counted).
    pub fn client(&self) -> &Client {
        &self.client
    }
}

// Each method forwards to its operation in `ops.rs` (the `*_inner` twins, which build the request,
// its condition and its retries); what only the port adds stays here: the breaker around a claim
// and the offloaded result read back with a record.
impl Store for DynamoDbStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        if let Some(left) = self.breaker.open_for() {
            return Err(StoreError::Unavailable(Box::new(BreakerOpen { left })));
        }
        let claimed = self.claim_inner(req).await;
        self.breaker.note(&claimed, self.cfg.claim.breaker_open_for);
        match claimed? {
            ClaimOutcome::Completed(record) => {
                Ok(ClaimOutcome::Completed(self.with_result(record).await?))
            }
            other => Ok(other),
        }
    }

    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        self.complete_inner(key, token, result, expires_at_s).await
    }

    async fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.move_lease(key, token, None, lease_until_ms, expires_at_s)
            .await
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.release_inner(key, token).await
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &LeaseToken,
        from_lease_until_ms: i64,
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.move_lease(
            key,
            from,
            Some((to, from_lease_until_ms)),
            lease_until_ms,
            expires_at_s,
        )
        .await
    }

    async fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        self.put_inner(key, label, value, expires_at_s, replacing)
            .await
    }

    async fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.settle_unknown_inner(key, token, expires_at_s).await
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        match self.get_inner(key).await? {
            Some(record) => Ok(Some(self.with_result(record).await?)),
            None => Ok(None),
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn requests(&self) -> RequestCounts {
        self.counter.snapshot()
    }
}
