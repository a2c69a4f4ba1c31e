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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::StalledStreamProtectionConfig;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use tokio::time::Instant;

use super::codec::{EncodedResult, ResultEncoding, decode_result, encode_result};
use super::{
    BoxError, ClaimContended, ClaimOutcome, ClaimRequest, Clock, Completion,
    DEFAULT_COMPRESS_THRESHOLD, LeaseToken, Offloaded, Op, Record, RequestCounter, RequestCounts,
    Resolution, ResultBucket, RetriesExhausted, Status, Store, StoreError, SystemClock,
    expiry_covering_lease, validate_claim, validate_key,
};

/// Fixed attribute names (the key and TTL attribute names come from [`DynamoDbConfig`]).
pub mod attr {
    /// `IN_PROGRESS` or `COMPLETED` (S).
    pub const STATUS: &str = "status";
    /// End of the claim's lease, epoch milliseconds (N).
    pub const LEASE_UNTIL: &str = "lease_until";
    /// The claim's fencing token (S).
    pub const LEASE_TOKEN: &str = "lease_token";
    /// Hash of the call's canonical form (S).
    pub const FINGERPRINT: &str = "fingerprint";
    /// The tool's name (S).
    pub const TOOL: &str = "tool";
    /// When the claim was made, epoch milliseconds (N).
    pub const CREATED_AT: &str = "created_at";
    /// The stored result (B).
    pub const RESULT: &str = "result";
    /// How `result` is encoded: `raw` or `gzip` (S).
    pub const RESULT_ENCODING: &str = "result_encoding";
    /// On a completed record without its result (too large): the result's size in bytes.
    pub const RESULT_OMITTED: &str = "result_omitted";
    /// On a completed record settled as outcome unknown: `true` (BOOL).
    pub const OUTCOME_UNKNOWN: &str = "outcome_unknown";
    /// On a claim of an `at_most_once` tool: `true` (BOOL); never taken over.
    pub const AT_MOST_ONCE: &str = "at_most_once";
    /// On a claim keyed by its caller's key: a digest per argument leaf (S).
    pub const PATH_DIGESTS: &str = "path_digests";
    /// On a completed record whose result is in the results bucket: the object's key (S).
    pub const RESULT_OBJECT: &str = "result_object";
    /// With `result_object`: the result's SHA-256, hex (S).
    pub const RESULT_SHA256: &str = "result_sha256";
    /// With `result_object`: the result's size in bytes (N).
    pub const RESULT_BYTES: &str = "result_bytes";

    pub(crate) const ALL: [&str; 15] = [
        STATUS,
        LEASE_UNTIL,
        LEASE_TOKEN,
        FINGERPRINT,
        TOOL,
        CREATED_AT,
        RESULT,
        RESULT_ENCODING,
        RESULT_OMITTED,
        OUTCOME_UNKNOWN,
        AT_MOST_ONCE,
        PATH_DIGESTS,
        RESULT_OBJECT,
        RESULT_SHA256,
        RESULT_BYTES,
    ];
}

type Item = HashMap<String, AttributeValue>;

/// Absent, or expired, or in progress with an ended lease (unless claimed `at_most_once`).
const CLAIM_CONDITION: &str = "attribute_not_exists(#pk) OR #exp < :now_s OR \
     (#st = :in_progress AND #lease < :now_ms AND attribute_not_exists(#amo))";
/// Live, in progress, and still carrying the caller's token (names and values: [`Held`]).
const HELD_CONDITION: &str = "#tok = :tok AND #st = :in_progress AND #exp >= :now_s";
/// A put that replaces the version it read.
const PUT_REPLACING_CONDITION: &str = "#tok = :tok";
/// A put where there was nothing live to read.
const PUT_NEW_CONDITION: &str = "attribute_not_exists(#pk) OR #exp < :now_s";

/// The expression names and values of [`HELD_CONDITION`] for one token at one time, which every
/// fenced write (complete, extend, release) starts from and adds its own to.
struct Held {
    names: HashMap<String, String>,
    values: Item,
}
const COMPLETE_UPDATE: &str = "SET #st = :completed, #exp = :exp, #res = :res, #enc = :enc";
/// Settled as outcome unknown: completed, with no result to replay.
const UNKNOWN_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #unk = :true REMOVE #res, #enc, #omit";
/// What an operator may settle ([`Store::resolve`]): still carrying the token read, live, and
/// either settled as outcome unknown or in progress with its lease ended.
const RESOLVABLE_CONDITION: &str = "#tok = :tok AND #exp >= :now_s AND \
     ((#st = :completed AND #unk = :true) OR (#st = :in_progress AND #lease < :now_ms))";
/// An operator's reply replaces the unknown marker.
const RESOLVE_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #res = :res, #enc = :enc REMOVE #unk, #omit";
/// A longer lease for a claim still held (a long or late-starting side effect).
const EXTEND_UPDATE: &str = "SET #lease = :lease, #exp = :exp";
/// Completion without the result (too large to store): the call stays settled.
const COMPLETE_OMITTED_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #omit = :omit REMOVE #res, #enc";
/// Completion with the result in the results bucket: the record points to it.
const COMPLETE_OFFLOADED_UPDATE: &str = "SET #st = :completed, #exp = :exp, #obj = :obj, \
     #sha = :sha, #size = :size REMOVE #res, #enc";

/// Rounds of "conditional write failed, but the record read back is claimable" before giving up.
/// Each round means another writer changed the record in between, so this only bounds livelock.
const MAX_CLAIM_ROUNDS: u32 = 5;

/// Table, attribute names, compression and retry settings of a [`DynamoDbStore`].
///
/// The Lambda reads them from `DEDUP_TABLE_NAME`, `DEDUP_KEY_ATTRIBUTE` and `DEDUP_TTL_ATTRIBUTE`
/// (and the endpoint from `DEDUP_DYNAMODB_ENDPOINT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbConfig {
    /// The table's name.
    pub table: String,
    /// Partition key attribute (type S). Default `pk`.
    pub key_attribute: String,
    /// TTL attribute (type N, epoch seconds). Default `expires_at`.
    pub ttl_attribute: String,
    /// Results longer than this many bytes are stored gzip-compressed. Default 8 KiB.
    pub compress_threshold: usize,
    /// How long and how often a request is retried.
    pub retry: RetryPolicy,
    /// With a results bucket: results longer than this go to it even when they would fit in an
    /// item (`DEDUP_OFFLOAD_THRESHOLD_BYTES`). `None`: only what does not fit goes.
    pub offload_above: Option<usize>,
    /// How long a claim may keep its caller waiting on a store that does not answer, and the
    /// breaker after it.
    pub claim: ClaimBudget,
}

/// A claim fails closed within a budget (`DEDUP_CLAIM_BUDGET_MS`), and after one has, later claims
/// of the container fail at once for a while (`DEDUP_STORE_BREAKER_MS`), then one probes the store.
/// Only claims are bounded so tightly: nothing has run yet, and failing closed loses nothing. A
/// completion, a release or a settlement keeps [`RetryPolicy::deadline`]: it carries a side effect's
/// outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimBudget {
    /// The claim's write and its retries (two thirds of the budget): enough to ride out one
    /// throttle (one fast refusal, a backoff of at most 25 ms, a second attempt).
    pub write_within: Duration,
    /// The read-back of a claim write whose every answer was lost (the rest of the budget). Past
    /// it, the claim's token is handed back to the executor, which releases it at its next call.
    pub read_back_within: Duration,
    /// After a claim ran out of its budget, later claims fail at once for this long; the first
    /// one after it probes the store. Zero: no breaker.
    pub breaker_open_for: Duration,
}

impl ClaimBudget {
    /// The whole budget unless configured: about what boto3's default retries take to give up
    /// against a store answering 500 (Powertools, docs/performance.md).
    pub const DEFAULT_WITHIN: Duration = Duration::from_millis(150);
    /// How long the breaker stays open unless configured.
    pub const DEFAULT_BREAKER_OPEN_FOR: Duration = Duration::from_secs(2);

    /// A budget of `within` in all, split between the write and the read-back.
    pub fn within(within: Duration, breaker_open_for: Duration) -> Self {
        let write_within = within * 2 / 3;
        ClaimBudget {
            write_within,
            read_back_within: within - write_within,
            breaker_open_for,
        }
    }
}

impl Default for ClaimBudget {
    fn default() -> Self {
        ClaimBudget::within(Self::DEFAULT_WITHIN, Self::DEFAULT_BREAKER_OPEN_FOR)
    }
}

/// Open after a claim found the store unavailable, until `open_until`; shared by the clones of a
/// store (one container).
#[derive(Debug, Default)]
struct Breaker {
    open_until: std::sync::Mutex<Option<Instant>>,
}

impl Breaker {
    /// How much longer claims are refused without asking the store.
    fn open_for(&self) -> Option<Duration> {
        let until = (*self.open_until.lock().unwrap_or_else(|p| p.into_inner()))?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Opens on a claim that ran out of retries or time, closes on any answer the store gave.
    fn note(&self, claimed: &Result<ClaimOutcome, StoreError>, open_for: Duration) {
        let unreachable = match claimed {
            Err(StoreError::ClaimUnconfirmed { .. }) => true,
            Err(StoreError::Unavailable(source)) => source.is::<RetriesExhausted>(),
            Err(_) => false,
            Ok(_) => false,
        };
        let mut open_until = self.open_until.lock().unwrap_or_else(|p| p.into_inner());
        *open_until = (unreachable && !open_for.is_zero()).then(|| Instant::now() + open_for);
    }
}

/// Source of [`StoreError::Unavailable`] for a claim refused by the open breaker.
#[derive(Debug, thiserror::Error)]
#[error("the store was unavailable to a recent claim; claims fail at once for {left:?} more")]
pub struct BreakerOpen {
    /// Until the next claim probes the store.
    pub left: Duration,
}

impl DynamoDbConfig {
    /// The partition key attribute unless configured.
    pub const DEFAULT_KEY_ATTRIBUTE: &'static str = "pk";
    /// The TTL attribute unless configured.
    pub const DEFAULT_TTL_ATTRIBUTE: &'static str = "expires_at";

    /// Defaults for everything but the table name.
    pub fn new(table: impl Into<String>) -> Self {
        DynamoDbConfig {
            table: table.into(),
            key_attribute: Self::DEFAULT_KEY_ATTRIBUTE.to_owned(),
            ttl_attribute: Self::DEFAULT_TTL_ATTRIBUTE.to_owned(),
            compress_threshold: DEFAULT_COMPRESS_THRESHOLD,
            retry: RetryPolicy::default(),
            offload_above: None,
            claim: ClaimBudget::default(),
        }
    }

    /// Rejects names DynamoDB would refuse or that collide with the fixed attributes.
    pub fn validate(&self) -> Result<(), StoreError> {
        let table_ok = (3..=255).contains(&self.table.len())
            && self
                .table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !table_ok {
            return Err(StoreError::config(format!(
                "table name {:?} must be 3-255 characters of a-z, A-Z, 0-9, '_', '-', '.'",
                self.table
            )));
        }
        for (what, name) in [
            ("key attribute", &self.key_attribute),
            ("TTL attribute", &self.ttl_attribute),
        ] {
            if name.is_empty() || name.len() > 255 {
                return Err(StoreError::config(format!(
                    "{what} {name:?} must be 1-255 bytes"
                )));
            }
            if attr::ALL.contains(&name.as_str()) {
                return Err(StoreError::config(format!(
                    "{what} {name:?} collides with a record attribute"
                )));
            }
        }
        if self.key_attribute == self.ttl_attribute {
            return Err(StoreError::config(
                "key attribute and TTL attribute must differ",
            ));
        }
        if self.retry.deadline.is_zero() || self.retry.attempt_timeout.is_zero() {
            return Err(StoreError::config(
                "retry deadline and attempt timeout must be positive",
            ));
        }
        Ok(())
    }
}

/// Retries of throttling, 5xx and network errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Give up (with [`StoreError::Unavailable`]) once this much time has passed since the call.
    pub deadline: Duration,
    /// Bound of one attempt; a slower attempt counts as a timeout and is retried.
    pub attempt_timeout: Duration,
    /// Backoff before the second attempt; it doubles per attempt up to `max_backoff`, jittered.
    pub initial_backoff: Duration,
    /// Longest backoff between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(2),
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// "Equal jitter": half the capped exponential delay, plus a random share of the other half.
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let cap = exp.min(self.max_backoff);
        let half = cap / 2;
        let jitter_us = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(fastrand::u64(0..=jitter_us))
    }
}

/// A DynamoDB client from the default AWS configuration, optionally pointed at a local endpoint
/// (see [`crate::aws::sdk_config`]).
pub async fn build_client(endpoint_url: Option<&str>) -> Client {
    Client::new(&crate::aws::sdk_config(endpoint_url).await)
}

/// Counts every request attempt by operation name.
#[derive(Debug)]
struct CountRequests(Arc<RequestCounter>);

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "toolcall_dedup::CountRequests"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg
            .load::<Metadata>()
            .map_or(Op::Other, |m| Op::from_name(m.name()));
        self.0.record(op);
        Ok(())
    }
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

    fn held(&self, token: &LeaseToken, now_ms: i64) -> Held {
        Held {
            names: HashMap::from([
                ("#tok".to_string(), attr::LEASE_TOKEN.to_string()),
                ("#st".to_string(), attr::STATUS.to_string()),
                ("#exp".to_string(), self.cfg.ttl_attribute.clone()),
            ]),
            values: HashMap::from([
                (":tok".to_string(), s(token.as_str())),
                (":in_progress".to_string(), s(Status::InProgress.as_str())),
                (":now_s".to_string(), n(now_ms.div_euclid(1000))),
            ]),
        }
    }

    fn key_value(&self, key: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([(
            self.cfg.key_attribute.clone(),
            AttributeValue::S(key.to_owned()),
        )])
    }

    fn claim_item(
        &self,
        req: &ClaimRequest<'_>,
        token: &LeaseToken,
        now_ms: i64,
    ) -> HashMap<String, AttributeValue> {
        let mut item = self.key_value(req.key);
        item.insert(attr::STATUS.into(), s(Status::InProgress.as_str()));
        item.insert(self.cfg.ttl_attribute.clone(), n(req.record_expiry()));
        item.insert(attr::LEASE_UNTIL.into(), n(req.lease_until_ms));
        item.insert(attr::LEASE_TOKEN.into(), s(token.as_str()));
        item.insert(attr::FINGERPRINT.into(), s(req.fingerprint));
        item.insert(attr::TOOL.into(), s(req.tool));
        item.insert(attr::CREATED_AT.into(), n(now_ms));
        if req.at_most_once {
            item.insert(attr::AT_MOST_ONCE.into(), AttributeValue::Bool(true));
        }
        if let Some(digests) = req.path_digests {
            item.insert(attr::PATH_DIGESTS.into(), s(digests));
        }
        item
    }

    /// One consistent read of the raw record, expired or not.
    async fn read(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let out = self
            .send("GetItem", || {
                self.client
                    .get_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .consistent_read(true)
                    .send()
            })
            .await
            .map_err(Failed::into_store_error)?;
        out.item()
            .map(|item| decode_item(&self.cfg, item))
            .transpose()
    }

    async fn claim_inner(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        validate_claim(&req)?;
        let now = self.clock.now_ms();
        let token = LeaseToken::for_owner(req.owner);
        let item = self.claim_item(&req, &token, now);
        let write_deadline = Instant::now() + self.cfg.claim.write_within;
        for _round in 0..MAX_CLAIM_ROUNDS {
            let sent = self
                .send_until("PutItem", write_deadline, || {
                    self.client
                        .put_item()
                        .table_name(&self.cfg.table)
                        .set_item(Some(item.clone()))
                        .condition_expression(CLAIM_CONDITION)
                        .expression_attribute_names("#pk", &self.cfg.key_attribute)
                        .expression_attribute_names("#exp", &self.cfg.ttl_attribute)
                        .expression_attribute_names("#st", attr::STATUS)
                        .expression_attribute_names("#lease", attr::LEASE_UNTIL)
                        .expression_attribute_names("#amo", attr::AT_MOST_ONCE)
                        .expression_attribute_values(":now_s", n(now.div_euclid(1000)))
                        .expression_attribute_values(":now_ms", n(now))
                        .expression_attribute_values(":in_progress", s(Status::InProgress.as_str()))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .send()
                })
                .await;
            let old = match sent {
                Ok(_) => return Ok(ClaimOutcome::Claimed { token }),
                Err(Failed::Unavailable {
                    error,
                    maybe_applied: true,
                }) => return Err(self.unconfirmed_claim(req.key, token, error).await),
                Err(failed) => {
                    // A final refusal after an attempt that may have applied (a 500, then
                    // AccessDenied) leaves the claim as uncertain as running out of retries does.
                    let maybe_applied = failed.maybe_applied_before();
                    match failed.into_condition_failure(|e: &PutItemError| match e {
                        PutItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
                        _ => None,
                    }) {
                        Ok(old) => old,
                        Err(error) if maybe_applied => {
                            return Err(self.unconfirmed_claim(req.key, token, error).await);
                        }
                        Err(error) => return Err(error),
                    }
                }
            };
            let record = match old {
                Some(item) => Some(decode_item(&self.cfg, &item)?),
                None => self.read(req.key).await?,
            };
            match record {
                // An earlier attempt whose response was lost did write the claim.
                Some(r) if r.token == token && r.status == Status::InProgress => {
                    return Ok(ClaimOutcome::Claimed { token });
                }
                Some(r) if !r.is_claimable(now) => {
                    return Ok(match r.status {
                        Status::Completed => ClaimOutcome::Completed(r),
                        Status::InProgress => ClaimOutcome::InProgress(r),
                    });
                }
                // Gone or claimable by the time we read it (fallback read only): try again.
                _ => {}
            }
        }
        Err(StoreError::Unavailable(Box::new(ClaimContended {
            key: req.key.to_owned(),
            rounds: MAX_CLAIM_ROUNDS,
        })))
    }

    /// Every answer to a claim write that may have applied was lost. Read it back once, briefly:
    /// if the claim is ours, release it (nothing ran, and the key must not stay blocked for a
    /// whole lease); if it cannot be told, hand the token to the caller
    /// ([`StoreError::ClaimUnconfirmed`]), which releases it at its next chance.
    async fn unconfirmed_claim(
        &self,
        key: &str,
        token: LeaseToken,
        error: StoreError,
    ) -> StoreError {
        let bound = self.cfg.claim.read_back_within;
        let read_back = tokio::time::timeout(bound, self.read(key)).await;
        let ours = match read_back {
            Ok(Ok(Some(r))) => r.token == token && r.status == Status::InProgress,
            Ok(Ok(None)) => false,
            Ok(Err(_)) | Err(_) => {
                return StoreError::ClaimUnconfirmed {
                    token,
                    source: Box::new(error),
                };
            }
        };
        if !ours {
            return error;
        }
        match tokio::time::timeout(bound, self.release_inner(key, &token)).await {
            Ok(Ok(()) | Err(StoreError::LeaseLost)) => {
                tracing::warn!("a claim whose answers were lost was read back and released");
                error
            }
            Ok(Err(_)) | Err(_) => StoreError::ClaimUnconfirmed {
                token,
                source: Box::new(error),
            },
        }
    }

    async fn extend_inner(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let held = self.held(token, self.clock.now_ms());
        let sent = self
            .send("UpdateItem", || {
                self.client
                    .update_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(HELD_CONDITION)
                    .set_expression_attribute_names(Some(held.names.clone()))
                    .set_expression_attribute_values(Some(held.values.clone()))
                    .update_expression(EXTEND_UPDATE)
                    .expression_attribute_names("#lease", attr::LEASE_UNTIL)
                    .expression_attribute_values(":lease", n(lease_until_ms))
                    .expression_attribute_values(
                        ":exp",
                        n(expiry_covering_lease(expires_at_s, lease_until_ms)),
                    )
                    .send()
            })
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(failed) => {
                failed.into_condition_failure(|e: &UpdateItemError| match e {
                    UpdateItemError::ConditionalCheckFailedException(_) => Some(None),
                    _ => None,
                })?;
                Err(StoreError::LeaseLost)
            }
        }
    }

    async fn complete_inner(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        validate_key(key)?;
        let encoded = match encode_result(result, self.cfg.compress_threshold) {
            Ok(e) => Some(e),
            Err(StoreError::ResultTooLarge { .. }) => None,
            Err(e) => return Err(e),
        };
        let offload_now = self
            .cfg
            .offload_above
            .is_some_and(|above| result.len() > above);
        if let Some(encoded) = encoded
            .as_ref()
            .filter(|_| !(offload_now && self.results.is_some()))
        {
            match self
                .send_complete(key, token, Written::Result(encoded), expires_at_s)
                .await
            {
                // The item with its other attributes is over DynamoDB's limit: store the marker.
                Err(failed) if failed.is_item_too_large() => {}
                sent => {
                    return self
                        .completed(key, token, sent, Some(Completion::Stored))
                        .await;
                }
            }
        }
        let bytes = result.len();
        if let Some(bucket) = &self.results {
            // Written before the record points to it: a record never names a missing object.
            match bucket.put(key, token, result).await {
                Ok(offloaded) => {
                    let sent = self
                        .send_complete(key, token, Written::Offloaded(&offloaded), expires_at_s)
                        .await;
                    return self
                        .completed(key, token, sent, Some(Completion::Offloaded { bytes }))
                        .await;
                }
                // The call ran: settle it without its result, as without a bucket, rather than
                // leave it in progress for a retry to run again once the lease ends.
                Err(e) => tracing::error!(
                    error = %e,
                    bucket = bucket.bucket(),
                    "the results bucket refused the result; the call is settled without it"
                ),
            }
        }
        let sent = self
            .send_complete(key, token, Written::Omitted { bytes }, expires_at_s)
            .await;
        self.completed(key, token, sent, Some(Completion::ResultOmitted { bytes }))
            .await
    }

    /// One conditional completion write.
    async fn send_complete(
        &self,
        key: &str,
        token: &LeaseToken,
        written: Written<'_>,
        expires_at_s: i64,
    ) -> Result<(), Failed<UpdateItemError>> {
        let held = self.held(token, self.clock.now_ms());
        self.send("UpdateItem", || {
            let update = self
                .client
                .update_item()
                .table_name(&self.cfg.table)
                .set_key(Some(self.key_value(key)))
                .condition_expression(HELD_CONDITION)
                .set_expression_attribute_names(Some(held.names.clone()))
                .set_expression_attribute_values(Some(held.values.clone()))
                .expression_attribute_names("#res", attr::RESULT)
                .expression_attribute_names("#enc", attr::RESULT_ENCODING)
                .expression_attribute_values(":completed", s(Status::Completed.as_str()))
                .expression_attribute_values(":exp", n(expires_at_s))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                );
            let update = match written {
                Written::Result(EncodedResult { encoding, bytes }) => update
                    .update_expression(COMPLETE_UPDATE)
                    .expression_attribute_values(
                        ":res",
                        AttributeValue::B(Blob::new(bytes.clone())),
                    )
                    .expression_attribute_values(":enc", s(encoding.as_str())),
                Written::Omitted { bytes } => update
                    .update_expression(COMPLETE_OMITTED_UPDATE)
                    .expression_attribute_names("#omit", attr::RESULT_OMITTED)
                    .expression_attribute_values(
                        ":omit",
                        n(i64::try_from(bytes).unwrap_or(i64::MAX)),
                    ),
                Written::Offloaded(offloaded) => update
                    .update_expression(COMPLETE_OFFLOADED_UPDATE)
                    .expression_attribute_names("#obj", attr::RESULT_OBJECT)
                    .expression_attribute_names("#sha", attr::RESULT_SHA256)
                    .expression_attribute_names("#size", attr::RESULT_BYTES)
                    .expression_attribute_values(":obj", s(&offloaded.object))
                    .expression_attribute_values(":sha", s(&offloaded.sha256))
                    .expression_attribute_values(
                        ":size",
                        n(i64::try_from(offloaded.bytes).unwrap_or(i64::MAX)),
                    ),
                Written::Unknown => update
                    .update_expression(UNKNOWN_UPDATE)
                    .expression_attribute_names("#omit", attr::RESULT_OMITTED)
                    .expression_attribute_names("#unk", attr::OUTCOME_UNKNOWN)
                    .expression_attribute_values(":true", AttributeValue::Bool(true)),
            };
            update.send()
        })
        .await
        .map(|_| ())
    }

    /// What a completion write ended with (`completion`: `None` for a settlement as outcome
    /// unknown). A refused write is still a success when the record is already settled the same
    /// way under this token: a retry after a lost response, or a repeat.
    async fn completed(
        &self,
        key: &str,
        token: &LeaseToken,
        sent: Result<(), Failed<UpdateItemError>>,
        completion: Option<Completion>,
    ) -> Result<Completion, StoreError> {
        let failed = match sent {
            Ok(()) => return Ok(completion.unwrap_or(Completion::Stored)),
            Err(failed) => failed,
        };
        let now = self.clock.now_ms();
        let old = failed.into_condition_failure(|e: &UpdateItemError| match e {
            UpdateItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
            _ => None,
        })?;
        let record = match old {
            Some(item) => Some(decode_item(&self.cfg, &item)?),
            None => self.read(key).await?,
        };
        match record {
            Some(r)
                if r.status == Status::Completed
                    && &r.token == token
                    && !r.is_expired(now)
                    && r.outcome_unknown == completion.is_none() =>
            {
                Ok(match (r.omitted_result_bytes, &r.offloaded) {
                    (Some(bytes), _) => Completion::ResultOmitted { bytes },
                    (None, Some(o)) => Completion::Offloaded { bytes: o.bytes },
                    (None, None) => Completion::Stored,
                })
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    async fn release_inner(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        validate_key(key)?;
        let held = self.held(token, self.clock.now_ms());
        let sent = self
            .send("DeleteItem", || {
                self.client
                    .delete_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(HELD_CONDITION)
                    .set_expression_attribute_names(Some(held.names.clone()))
                    .set_expression_attribute_values(Some(held.values.clone()))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
            })
            .await;
        let failed = match sent {
            Ok(_) => return Ok(()),
            Err(failed) => failed,
        };
        let maybe_applied = failed.maybe_applied_before();
        let old = failed.into_condition_failure(|e: &DeleteItemError| match e {
            DeleteItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
            _ => None,
        })?;
        if old.is_some() || !maybe_applied {
            return Err(StoreError::LeaseLost);
        }
        // An earlier attempt may have deleted the record before its response was lost.
        match self.read(key).await? {
            None => Ok(()),
            Some(_) => Err(StoreError::LeaseLost),
        }
    }

    async fn settle_unknown_inner(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let sent = self
            .send_complete(key, token, Written::Unknown, expires_at_s)
            .await;
        self.completed(key, token, sent, None).await.map(|_| ())
    }

    async fn resolve_inner(
        &self,
        key: &str,
        token: &LeaseToken,
        resolution: Resolution<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let now = self.clock.now_ms();
        let mut held = self.held(token, now);
        held.names
            .insert("#unk".into(), attr::OUTCOME_UNKNOWN.into());
        held.names.insert("#lease".into(), attr::LEASE_UNTIL.into());
        held.values
            .insert(":completed".into(), s(Status::Completed.as_str()));
        held.values
            .insert(":true".into(), AttributeValue::Bool(true));
        held.values.insert(":now_ms".into(), n(now));
        let Resolution::Complete(reply) = resolution else {
            let sent = self
                .send("DeleteItem", || {
                    self.client
                        .delete_item()
                        .table_name(&self.cfg.table)
                        .set_key(Some(self.key_value(key)))
                        .condition_expression(RESOLVABLE_CONDITION)
                        .set_expression_attribute_names(Some(held.names.clone()))
                        .set_expression_attribute_values(Some(held.values.clone()))
                        .send()
                })
                .await;
            return match sent {
                Ok(_) => Ok(()),
                // An earlier attempt may have deleted the record before its response was lost.
                Err(failed) if failed.maybe_applied_before() => match self.read(key).await? {
                    None => Ok(()),
                    Some(_) => Err(StoreError::LeaseLost),
                },
                Err(failed) => {
                    failed.into_condition_failure(|e: &DeleteItemError| match e {
                        DeleteItemError::ConditionalCheckFailedException(_) => Some(None),
                        _ => None,
                    })?;
                    Err(StoreError::LeaseLost)
                }
            };
        };
        let EncodedResult { encoding, bytes } = encode_result(reply, self.cfg.compress_threshold)?;
        held.names.insert("#res".into(), attr::RESULT.into());
        held.names
            .insert("#enc".into(), attr::RESULT_ENCODING.into());
        held.names
            .insert("#omit".into(), attr::RESULT_OMITTED.into());
        held.values.insert(":exp".into(), n(expires_at_s));
        held.values
            .insert(":res".into(), AttributeValue::B(Blob::new(bytes)));
        held.values.insert(":enc".into(), s(encoding.as_str()));
        let sent = self
            .send("UpdateItem", || {
                self.client
                    .update_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(RESOLVABLE_CONDITION)
                    .update_expression(RESOLVE_UPDATE)
                    .set_expression_attribute_names(Some(held.names.clone()))
                    .set_expression_attribute_values(Some(held.values.clone()))
                    .send()
            })
            .await;
        let failed = match sent {
            Ok(_) => return Ok(()),
            Err(failed) if failed.is_item_too_large() => {
                return Err(StoreError::ResultTooLarge { bytes: reply.len() });
            }
            Err(failed) => failed,
        };
        failed.into_condition_failure(|e: &UpdateItemError| match e {
            UpdateItemError::ConditionalCheckFailedException(_) => Some(None),
            _ => None,
        })?;
        // Completed under this token already (a retry after a lost response): done.
        match self.read(key).await? {
            Some(r)
                if r.status == Status::Completed
                    && &r.token == token
                    && !r.is_expired(self.clock.now_ms())
                    && r.result.is_some() =>
            {
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    async fn put_inner(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        validate_key(key)?;
        let EncodedResult { encoding, bytes } = encode_result(value, self.cfg.compress_threshold)?;
        let token = LeaseToken::random();
        let mut item = self.key_value(key);
        item.insert(attr::STATUS.into(), s(Status::Completed.as_str()));
        item.insert(self.cfg.ttl_attribute.clone(), n(expires_at_s));
        item.insert(attr::LEASE_UNTIL.into(), n(0));
        item.insert(attr::LEASE_TOKEN.into(), s(token.as_str()));
        item.insert(attr::FINGERPRINT.into(), s(""));
        item.insert(attr::TOOL.into(), s(label));
        item.insert(attr::CREATED_AT.into(), n(self.clock.now_ms()));
        item.insert(attr::RESULT.into(), AttributeValue::B(Blob::new(bytes)));
        item.insert(attr::RESULT_ENCODING.into(), s(encoding.as_str()));
        let now_s = self.clock.now_ms().div_euclid(1000);
        let sent = self
            .send("PutItem", || {
                let put = self
                    .client
                    .put_item()
                    .table_name(&self.cfg.table)
                    .set_item(Some(item.clone()))
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    );
                match replacing {
                    Some(read) => put
                        .condition_expression(PUT_REPLACING_CONDITION)
                        .expression_attribute_names("#tok", attr::LEASE_TOKEN)
                        .expression_attribute_values(":tok", s(read.as_str())),
                    None => put
                        .condition_expression(PUT_NEW_CONDITION)
                        .expression_attribute_names("#pk", &self.cfg.key_attribute)
                        .expression_attribute_names("#exp", &self.cfg.ttl_attribute)
                        .expression_attribute_values(":now_s", n(now_s)),
                }
                .send()
            })
            .await;
        let old = match sent {
            Ok(_) => return Ok(token),
            Err(failed) if failed.is_item_too_large() => {
                return Err(StoreError::ResultTooLarge { bytes: value.len() });
            }
            Err(failed) => failed.into_condition_failure(|e: &PutItemError| match e {
                PutItemError::ConditionalCheckFailedException(c) => Some(c.item().cloned()),
                _ => None,
            })?,
        };
        // Refused: unless an earlier attempt whose answer was lost wrote this very version.
        let current = match old {
            Some(item) => Some(decode_item(&self.cfg, &item)?),
            None => self.read(key).await?,
        };
        match current {
            Some(record) if record.token == token => Ok(token),
            _ => Err(StoreError::LeaseLost),
        }
    }

    async fn get_inner(&self, key: &str) -> Result<Option<Record>, StoreError> {
        validate_key(key)?;
        let now = self.clock.now_ms();
        Ok(self.read(key).await?.filter(|r| !r.is_expired(now)))
    }

    /// Sends one request with retries; see [`RetryPolicy`].
    async fn send<T, E, F, Fut>(&self, operation: &'static str, attempt: F) -> Result<T, Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let deadline = Instant::now() + self.cfg.retry.deadline;
        self.send_until(operation, deadline, attempt).await
    }

    /// [`DynamoDbStore::send`], giving up at `deadline` (or the policy's, if sooner).
    async fn send_until<T, E, F, Fut>(
        &self,
        operation: &'static str,
        deadline: Instant,
        mut attempt: F,
    ) -> Result<T, Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let policy = &self.cfg.retry;
        let start = Instant::now();
        let deadline = deadline.min(start + policy.deadline);
        let mut attempts = 0u32;
        let mut maybe_applied = false;
        loop {
            attempts += 1;
            // The first attempt always gets its whole timeout: a deadline shorter than one
            // attempt (a claim's budget) must not fail a store that is only slow to connect.
            let bound = if attempts == 1 {
                policy.attempt_timeout
            } else {
                let remaining = deadline.saturating_duration_since(Instant::now());
                policy.attempt_timeout.min(remaining)
            };
            let (ambiguous, last): (bool, BoxError) =
                match tokio::time::timeout(bound, attempt()).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(err)) => match classify(&err) {
                        Class::Final => {
                            return Err(Failed::Service {
                                err,
                                maybe_applied_before: maybe_applied,
                            });
                        }
                        Class::Retry { ambiguous } => (ambiguous, Box::new(err)),
                    },
                    Err(_) => (true, format!("attempt timed out after {bound:?}").into()),
                };
            maybe_applied |= ambiguous;
            let backoff = policy.backoff(attempts);
            if Instant::now() + backoff >= deadline {
                let exhausted = RetriesExhausted {
                    operation,
                    attempts,
                    elapsed: start.elapsed(),
                    last,
                };
                return Err(Failed::Unavailable {
                    error: StoreError::Unavailable(Box::new(exhausted)),
                    maybe_applied,
                });
            }
            tracing::debug!(operation, attempts, ambiguous, error = %last, ?backoff, "retrying DynamoDB request");
            tokio::time::sleep(backoff).await;
        }
    }
}

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
        self.extend_inner(key, token, lease_until_ms, expires_at_s)
            .await
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.release_inner(key, token).await
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

    async fn resolve(
        &self,
        key: &str,
        token: &LeaseToken,
        resolution: Resolution<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.resolve_inner(key, token, resolution, expires_at_s)
            .await
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

/// What a completion writes: the encoded result, or the marker of a result too large to store.
#[derive(Clone, Copy)]
enum Written<'a> {
    Result(&'a EncodedResult),
    Offloaded(&'a Offloaded),
    Omitted { bytes: usize },
    Unknown,
}

/// Why [`DynamoDbStore::send`] stopped without a response.
enum Failed<E> {
    /// A final answer from the service (or a request that could not be built).
    Service {
        err: SdkError<E, HttpResponse>,
        maybe_applied_before: bool,
    },
    /// Retries ran out; `maybe_applied` when an attempt may have been applied.
    Unavailable {
        error: StoreError,
        maybe_applied: bool,
    },
}

impl<E> Failed<E>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    fn maybe_applied_before(&self) -> bool {
        match self {
            Failed::Service {
                maybe_applied_before,
                ..
            } => *maybe_applied_before,
            Failed::Unavailable { maybe_applied, .. } => *maybe_applied,
        }
    }

    /// A conditional-check failure gives `Ok(old item)` (`None` if the server sent no item, as
    /// dynalite does); any other failure becomes its [`StoreError`].
    fn into_condition_failure(
        self,
        ccf: impl Fn(&E) -> Option<Option<Item>>,
    ) -> Result<Option<Item>, StoreError> {
        if let Failed::Service { err, .. } = &self {
            if let Some(old) = err.as_service_error().and_then(&ccf) {
                return Ok(old);
            }
        }
        Err(self.into_store_error())
    }

    fn is_item_too_large(&self) -> bool {
        match self {
            Failed::Service { err, .. } => {
                err.code() == Some("ValidationException")
                    && err
                        .message()
                        .is_some_and(|m| m.to_ascii_lowercase().contains("item size"))
            }
            Failed::Unavailable { .. } => false,
        }
    }

    fn into_store_error(self) -> StoreError {
        match self {
            Failed::Unavailable { error, .. } => error,
            Failed::Service { err, .. } => match err.code() {
                Some("ResourceNotFoundException") => StoreError::Config {
                    message: "table not found (create it with `dedup table create`)".into(),
                    source: Some(Box::new(err)),
                },
                Some(
                    "AccessDeniedException"
                    | "UnrecognizedClientException"
                    | "MissingAuthenticationTokenException",
                ) => StoreError::Config {
                    message: "not allowed to use the table".into(),
                    source: Some(Box::new(err)),
                },
                _ => StoreError::Rejected(Box::new(err)),
            },
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Class {
    Final,
    /// `ambiguous`: the request may have been applied.
    Retry {
        ambiguous: bool,
    },
}

fn classify<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Class {
    match err {
        SdkError::ConstructionFailure(_) => Class::Final,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Class::Retry { ambiguous: true },
        SdkError::DispatchFailure(d) if d.is_user() => Class::Final,
        SdkError::DispatchFailure(_) => Class::Retry { ambiguous: true },
        // An answer with no error code is one the SDK could not read (a garbled or cut-off body): the
        // request may have applied, as for a broken response.
        SdkError::ServiceError(_) if err.code().is_none() => Class::Retry { ambiguous: true },
        SdkError::ServiceError(service) => match err.code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "TransactionConflictException"
                // A multi-Region strongly consistent table refused the write (not applied): the
                // item is being written in another Region. The retry's condition decides.
                | "ReplicatedWriteConflictException",
            ) => Class::Retry { ambiguous: false },
            _ if service.raw().status().is_server_error() => Class::Retry { ambiguous: true },
            _ => Class::Final,
        },
        _ => Class::Final,
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// Decodes a stored item into a [`Record`], with the result decompressed. Never panics: anything
/// missing, mistyped or undecodable is [`StoreError::Corrupt`].
pub fn decode_item(
    cfg: &DynamoDbConfig,
    item: &HashMap<String, AttributeValue>,
) -> Result<Record, StoreError> {
    let status_text = get_s(item, attr::STATUS)?;
    let status = Status::parse(status_text).ok_or_else(|| {
        StoreError::Corrupt(format!("attribute {:?}: unknown status", attr::STATUS))
    })?;
    let omitted_result_bytes = match (status, item.get(attr::RESULT_OMITTED)) {
        (Status::Completed, Some(_)) => Some(
            usize::try_from(get_n(item, attr::RESULT_OMITTED)?).map_err(|_| {
                StoreError::Corrupt(format!("attribute {:?} is negative", attr::RESULT_OMITTED))
            })?,
        ),
        _ => None,
    };
    let outcome_unknown = status == Status::Completed
        && matches!(
            item.get(attr::OUTCOME_UNKNOWN),
            Some(AttributeValue::Bool(true))
        );
    let offloaded = match (status, item.get(attr::RESULT_OBJECT)) {
        (Status::Completed, Some(_)) => Some(Offloaded {
            object: get_s(item, attr::RESULT_OBJECT)?.to_owned(),
            sha256: get_s(item, attr::RESULT_SHA256)?.to_owned(),
            bytes: usize::try_from(get_n(item, attr::RESULT_BYTES)?).map_err(|_| {
                StoreError::Corrupt(format!("attribute {:?} is negative", attr::RESULT_BYTES))
            })?,
        }),
        _ => None,
    };
    let result = match status {
        Status::InProgress => None,
        Status::Completed
            if omitted_result_bytes.is_some() || outcome_unknown || offloaded.is_some() =>
        {
            None
        }
        Status::Completed => {
            let encoding = match item.get(attr::RESULT_ENCODING) {
                None => ResultEncoding::Raw,
                Some(AttributeValue::S(e)) => ResultEncoding::parse(e).ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "attribute {:?}: unknown encoding",
                        attr::RESULT_ENCODING
                    ))
                })?,
                Some(_) => return Err(wrong_type(attr::RESULT_ENCODING, "S")),
            };
            let bytes = match item.get(attr::RESULT) {
                Some(AttributeValue::B(b)) => b.as_ref(),
                Some(_) => return Err(wrong_type(attr::RESULT, "B")),
                None => return Err(missing(attr::RESULT)),
            };
            Some(decode_result(encoding, bytes)?)
        }
    };
    Ok(Record {
        key: get_s(item, &cfg.key_attribute)?.to_owned(),
        status,
        expires_at_s: get_n(item, &cfg.ttl_attribute)?,
        lease_until_ms: get_n(item, attr::LEASE_UNTIL)?,
        token: LeaseToken::new(get_s(item, attr::LEASE_TOKEN)?),
        fingerprint: get_s(item, attr::FINGERPRINT)?.to_owned(),
        tool: get_s(item, attr::TOOL)?.to_owned(),
        created_at_ms: get_n(item, attr::CREATED_AT)?,
        result,
        omitted_result_bytes,
        outcome_unknown,
        at_most_once: matches!(
            item.get(attr::AT_MOST_ONCE),
            Some(AttributeValue::Bool(true))
        ),
        path_digests: match item.get(attr::PATH_DIGESTS) {
            Some(AttributeValue::S(digests)) => Some(digests.clone()),
            _ => None,
        },
        offloaded,
    })
}

fn missing(name: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name:?} missing"))
}

fn wrong_type(name: &str, want: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name:?} is not of type {want}"))
}

fn get_s<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Result<&'a str, StoreError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        Some(_) => Err(wrong_type(name, "S")),
        None => Err(missing(name)),
    }
}

fn get_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<i64, StoreError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().map_err(|_| {
            StoreError::Corrupt(format!("attribute {name:?} is not an integer in range"))
        }),
        Some(_) => Err(wrong_type(name, "N")),
        None => Err(missing(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
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
            proptest::collection::vec(any::<u8>(), 0..64)
                .prop_map(|b| AttributeValue::B(Blob::new(b))),
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

    fn service_error(
        status: u16,
        code: &str,
        message: &str,
    ) -> SdkError<GetItemError, HttpResponse> {
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        let err =
            GetItemError::generic(ErrorMetadata::builder().code(code).message(message).build());
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
            let unreadable = SdkError::service_error(
                GetItemError::generic(ErrorMetadata::builder().build()),
                raw,
            );
            assert_eq!(
                classify(&unreadable),
                Class::Retry { ambiguous: true },
                "{status}"
            );
        }
    }

    #[test]
    fn item_size_refusal_is_recognised() {
        let too_large: Failed<GetItemError> = Failed::Service {
            err: service_error(
                400,
                "ValidationException",
                "Item size has exceeded the maximum allowed size",
            ),
            maybe_applied_before: false,
        };
        assert!(too_large.is_item_too_large());
        let other: Failed<GetItemError> = Failed::Service {
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
}
