//! The table, the claim budget and the retry policy a store is built with.

use std::time::Duration;

use super::{DEFAULT_COMPRESS_THRESHOLD, StoreError, attr};
use crate::backoff::Backoff;

/// Table, attribute names, compression and retry settings of a [`crate::store::DynamoDbStore`].
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
    pub(crate) const DEFAULT_BREAKER_OPEN_FOR: Duration = Duration::from_secs(2);

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

impl DynamoDbConfig {
    /// The partition key attribute unless configured.
    pub const DEFAULT_KEY_ATTRIBUTE: &'static str = "pk";
    /// The TTL attribute unless configured.
    pub(crate) const DEFAULT_TTL_ATTRIBUTE: &'static str = "expires_at";

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
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
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
    /// The pause after `attempt` failed: the crate's one [`Backoff`], from `initial_backoff` up to
    /// `max_backoff`.
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        Backoff {
            first: self.initial_backoff,
            most: self.max_backoff,
        }
        .jittered(attempt)
    }
}
