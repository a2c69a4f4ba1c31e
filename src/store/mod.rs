//! Idempotency store: exactly one caller owns a key, and only that caller can settle it.
//!
//! A key moves through `absent -> IN_PROGRESS -> COMPLETED`, or back to `absent` on
//! [`Store::release`]. The rules every implementation follows, so that [`MemoryStore`] and
//! [`DynamoDbStore`] are interchangeable:
//!
//! - **Expiry is logical.** A record whose `expires_at_s` is before the current second counts as
//!   absent in every condition and every read. DynamoDB's TTL deletes up to about two days late,
//!   and local servers never delete, so nothing here waits for the sweeper.
//! - **A claim succeeds** when there is no live record, or when the live record is `IN_PROGRESS`
//!   and its lease has ended (`lease_until_ms < now_ms`), unless that claim was taken
//!   `at_most_once`. A caller that died mid-call therefore blocks its key only until its lease
//!   ends; an `at_most_once` caller's key stays blocked (outcome unknown) until an operator settles
//!   it ([`Records::settle`]) or it expires. Otherwise the claim reports the live record:
//!   [`ClaimOutcome::Completed`] with its result, or [`ClaimOutcome::InProgress`].
//! - **The lease token is the fence.** Every claim writes a fresh random [`LeaseToken`].
//!   [`Store::complete`] and [`Store::release`] succeed only while the live record is
//!   `IN_PROGRESS` under the caller's token; anything else is [`StoreError::LeaseLost`]. A late
//!   caller whose lease was taken over can neither overwrite nor delete the new owner's record
//!   (the Powertools peer completes with an unconditional write). The fence is the token, not the
//!   wall clock: a caller that finishes after its lease ended, while nobody took the key over,
//!   still completes, which saves a second execution of the side effect.
//! - **Completing is idempotent** for the token that completed: repeating `complete` succeeds and
//!   keeps the first result. A request retried after a lost response therefore cannot turn a
//!   success into `LeaseLost`.
//! - **A record never expires before its lease ends**: a claim stores
//!   `max(expires_at_s, lease end)`, so an in-progress record cannot turn absent while its caller
//!   may still be running. **Completing sets a new expiry**, so a completed call replays for its
//!   full life counted from completion.
//! - **Results** above a threshold (default 8 KiB) are stored gzip-compressed. A result that would
//!   not fit in one DynamoDB item (400 KB) still settles the call: the record is completed without
//!   it ([`Completion::ResultOmitted`], [`Record::omitted_result_bytes`]), so a repeat learns that
//!   the call already ran instead of running it again. Nothing is half-written.
//!
//! Time comes from an injectable [`Clock`]; the DynamoDB store sends the current time in its
//! conditions, so [`ManualClock`] drives expiry and lease ends on real servers too.

use std::fmt;
use std::future::Future;
use std::ops::Sub;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::key::OnFailure;

mod codec;
pub mod dynamodb;
pub mod memory;
pub mod offload;
mod shared;
pub mod table;
mod token;

pub use codec::{
    DEFAULT_COMPRESS_THRESHOLD, MAX_KEY_BYTES, MAX_LABEL_BYTES, MAX_RESULT_BYTES,
    MAX_STORED_RESULT_BYTES, ResultEncoding, decode_result,
};
pub use dynamodb::{ClaimBudget, DynamoDbConfig, DynamoDbStore, RetryPolicy, decode_item};
pub use memory::MemoryStore;
pub use offload::{Offloaded, ResultBucket};
pub use token::LeaseToken;

/// Boxed error kept as a `source` (SDK errors, I/O errors).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The operations the handler needs from an idempotency store.
///
/// Static dispatch only: the handler is generic over `S: Store`. `'static` because a completion
/// write runs in its own task, so that it finishes when its caller is dropped.
pub trait Store: Send + Sync + 'static {
    /// Claims `req.key` for one caller. See the module docs for when a claim succeeds.
    fn claim(
        &self,
        req: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Stores `result`, marks the record `COMPLETED` and sets its expiry to `expires_at_s`, if
    /// `token` still holds the claim. A result too large to store completes the record without
    /// it ([`Completion::ResultOmitted`]).
    fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Moves the lease of a claim `token` still holds to `lease_until_ms`, and its expiry to
    /// `expires_at_s` (never before the lease's last second), so that a side effect that runs long,
    /// or starts late, keeps its key. Fenced like [`Store::complete`]; repeating it is harmless.
    fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Hands a claim `from` still holds to the new token `to`, with its lease moved to
    /// `lease_until_ms` (and its expiry to `expires_at_s`, never before the lease's last second),
    /// in one conditional write. A request that goes on under a claim an earlier invocation took
    /// for it (the Gateway invokes an interceptor again) takes it over so: no stale copy of the
    /// old token (a lost claim another container remembers to release) can release or complete
    /// it, and the lease counts from the side effect this invocation starts. Fenced like
    /// [`Store::extend_lease`], and by the lease read with the claim: only while it still ends at
    /// `from_lease_until_ms`. A holder that moved its lease since (a renewal that came through
    /// after an outage) is alive: the sweep, whose listing predates that move, must not take the
    /// claim from it, nor set its lease back.
    fn hand_over(
        &self,
        key: &str,
        from: &LeaseToken,
        from_lease_until_ms: i64,
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the claim, if `token` still holds it, so that a retry can run.
    fn release(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes `value` as a completed record of `key` that lives until `expires_at_s`, without a
    /// claim, and returns the new record's token (its version). Only for records that are not
    /// calls (the tool catalog an interceptor learns from MCP `tools/list`): a call's record is
    /// written only through a claim. The write is conditional, so that two writers that each read,
    /// changed and wrote a record never lose one another's change: with `replacing`, only while
    /// the record still carries that token (the version that was read); without, only while there
    /// is no live record. A record that changed since is [`StoreError::LeaseLost`]; read it again
    /// and retry. A value too large for one item is [`StoreError::ResultTooLarge`].
    fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> impl Future<Output = Result<LeaseToken, StoreError>> + Send;

    /// Settles a claim `token` still holds as *outcome unknown* (an `at_most_once` tool that
    /// crashed, timed out or lost its answer): the record is completed without a result, so no
    /// repeat runs the side effect again until an operator settles it ([`Records::settle`]) or the
    /// record expires at `expires_at_s`. Fenced and repeatable like [`Store::complete`].
    fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads the live record of `key`; an expired record is `None`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// The store's current time in epoch milliseconds, from its [`Clock`]. Callers compute
    /// `lease_until_ms` and `expires_at_s` from it so that a [`ManualClock`] drives everything.
    fn now_ms(&self) -> i64;

    /// Requests sent to the backend so far (every attempt, retries included).
    fn requests(&self) -> RequestCounts;
}

/// What an operator asks of a store beyond the executor's primitives: the records that need
/// them, and the eviction of one (`dedup list`, `dedup evict`).
pub trait Records: Store {
    /// The live records `filter` selects, newest first, at most `filter.limit`. Records that
    /// need an operator (an outcome unknown: settled so, or an `at_most_once` claim past its lease)
    /// come from an index, without a scan; the other states are a scan.
    fn list(
        &self,
        filter: &RecordFilter,
    ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send;

    /// An operator's settlement of a call nobody can settle by itself: stores `settle_as`'s
    /// reply as the completed result (expiring at `expires_at_s`), or deletes the record. Only
    /// while the live record still carries `token` and is either settled as outcome unknown or in
    /// progress with its lease ended, so a running owner is never overwritten
    /// ([`StoreError::LeaseLost`] otherwise). Completing again under the same token succeeds
    /// and keeps the first reply, so a write retried after a lost answer cannot fail.
    fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes the record of `key` while it still carries `token` (the version an operator read)
    /// and is expired or completed with a known outcome: never a claim whose call may still be
    /// running, nor an unknown outcome (that is [`Records::settle`]'s, which settles it on purpose).
    /// [`StoreError::LeaseLost`] otherwise.
    fn evict(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Which records [`Records::list`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFilter {
    /// Only records in this state (any when `None`).
    pub state: Option<RecordState>,
    /// Only this tool's records.
    pub tool: Option<String>,
    /// Only records created at or after this time (epoch milliseconds).
    pub since_ms: Option<i64>,
    /// At most this many.
    pub limit: usize,
    /// A state the attention index does not hold (in progress, completed) is found by a scan of
    /// the table: it reads at most this many items, so an operator's command on a large table
    /// costs a bounded read (the newest among them are listed).
    pub max_scanned: usize,
    /// Only claims (records in progress): what the sweep settles. Settled outcomes, however many
    /// and however new, then never crowd an unsettled claim out of the listing.
    pub claims_only: bool,
}

/// [`RecordFilter::max_scanned`] unless said otherwise: a few megabytes of reads.
pub const DEFAULT_MAX_SCANNED: usize = 10_000;

impl Default for RecordFilter {
    fn default() -> RecordFilter {
        RecordFilter {
            state: None,
            tool: None,
            since_ms: None,
            limit: 100,
            max_scanned: DEFAULT_MAX_SCANNED,
            claims_only: false,
        }
    }
}

/// A record's state, as an operator asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// The call's outcome is unknown until an operator settles it.
    Unknown,
    /// A claim: the call may be running.
    InProgress,
    /// Settled with a result (or a marker that it ran).
    Completed,
}

impl RecordState {
    /// The state `record` is in at `now_ms`.
    pub fn of(record: &Record, now_ms: i64) -> RecordState {
        if record.is_outcome_unknown(now_ms) {
            RecordState::Unknown
        } else if record.status == Status::InProgress {
            RecordState::InProgress
        } else {
            RecordState::Completed
        }
    }

    /// Whether `record` is in this state at `now_ms`, and `filter`'s other terms hold.
    pub fn selects(filter: &RecordFilter, record: &Record, now_ms: i64) -> bool {
        filter
            .state
            .is_none_or(|s| s == RecordState::of(record, now_ms))
            && filter.tool.as_ref().is_none_or(|t| *t == record.tool)
            && filter
                .since_ms
                .is_none_or(|since| record.created_at_ms >= since)
            && (!filter.claims_only || record.status == Status::InProgress)
            && !is_not_a_call(&record.key)
    }
}

/// Records in the table that are not calls: a Gateway's learned catalog (`catalog:`) and a
/// request's note of its claims (`request:`). Listing leaves them out.
pub(crate) fn is_not_a_call(key: &str) -> bool {
    ["catalog:", "request:"]
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

/// What a caller asks to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimRequest<'a> {
    /// The idempotency key; at most [`MAX_KEY_BYTES`] bytes, not empty.
    pub key: &'a str,
    /// Fingerprint of the arguments, stored so a replay can be checked against its request.
    pub fingerprint: &'a str,
    /// The tool name.
    pub tool: &'a str,
    /// End of the lease, epoch milliseconds. Until then nobody else can take the key over.
    pub lease_until_ms: i64,
    /// End of the record's life, epoch seconds; the DynamoDB TTL attribute. The store never
    /// writes an expiry before the lease's last second (see [`ClaimRequest::record_expiry`]).
    pub expires_at_s: i64,
    /// Who takes the claim, when a later invocation must recognise it (see
    /// [`LeaseToken::for_owner`]); `None` for a plain random token.
    pub owner: Option<&'a str>,
    /// The tool is `at_most_once`: once the lease ends, nobody takes the claim over; the call's
    /// outcome is unknown until an operator settles it.
    pub at_most_once: bool,
    /// What a failure reply does to this call, fixed at the claim.
    pub on_failure: OnFailure,
    /// For a call keyed by its caller's key: a digest per argument leaf, so that a repeat with
    /// other arguments can be told which paths differ ([`crate::key::differing_paths`]).
    pub path_digests: Option<&'a str>,
    /// What the record says about the call, for an operator.
    pub about: CallAbout<'a>,
}

/// What a call's record says about it, for an operator reading the table (never its arguments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallAbout<'a> {
    /// The call's namespace: its entry point and owner (`bedrock:AGENT/payments`).
    pub namespace: Option<&'a str>,
    /// The run (session) it belongs to.
    pub run: Option<&'a str>,
    /// The step within the run.
    pub step: Option<&'a str>,
    /// The keyer that derived the key ([`crate::key::KeyerVersion::name`] or the caller-key
    /// keyer's).
    pub keyer: Option<&'a str>,
    /// The fingerprint of the tool's policy when it was keyed, if it has one.
    pub policy: Option<&'a str>,
    /// For a call keyed by its caller's key: the strict fingerprint of its arguments
    /// ([`crate::key::CallerKeyed::arguments`]), which no schema change moves.
    pub arguments: Option<&'a str>,
}

/// [`CallAbout`], as a record carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordAbout {
    /// The call's namespace: its entry point and owner.
    pub namespace: Option<String>,
    /// The run (session) it belongs to.
    pub run: Option<String>,
    /// The step within the run.
    pub step: Option<String>,
    /// The keyer that derived the key.
    pub keyer: Option<String>,
    /// The fingerprint of the tool's policy when it was keyed.
    pub policy: Option<String>,
    /// For a caller-keyed call, the strict fingerprint of its arguments.
    pub arguments: Option<String>,
}

impl RecordAbout {
    /// What `about` says, owned.
    pub fn from_call(about: &CallAbout<'_>) -> RecordAbout {
        let owned = |v: Option<&str>| v.map(str::to_string);
        RecordAbout {
            namespace: owned(about.namespace),
            run: owned(about.run),
            step: owned(about.step),
            keyer: owned(about.keyer),
            policy: owned(about.policy),
            arguments: owned(about.arguments),
        }
    }

    /// The entry point the call came in by: the namespace's first part.
    pub fn door(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .and_then(|n| n.split_once(':'))
            .map(|(door, _)| door)
    }
}

impl ClaimRequest<'_> {
    /// The expiry a claim writes: `expires_at_s`, but never before the lease ends. An expired
    /// record counts as absent, so an earlier expiry would let a second caller run the call while
    /// the first one still may.
    pub fn record_expiry(&self) -> i64 {
        expiry_covering_lease(self.expires_at_s, self.lease_until_ms)
    }
}

/// `expires_at_s`, or the lease's last second if that is later.
pub(crate) fn expiry_covering_lease(expires_at_s: i64, lease_until_ms: i64) -> i64 {
    expires_at_s.max(lease_until_ms.div_euclid(1000))
}

/// What [`Store::complete`] stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The record is completed with its result.
    Stored,
    /// The result (`bytes` long) went to the results bucket ([`offload`]); the record points to
    /// it, and a replay reads it back.
    Offloaded {
        /// Size of the result.
        bytes: usize,
    },
    /// The result (`bytes` long) could not fit in one item even compressed: the record is
    /// completed without it, so the call stays settled and a repeat is told it already ran.
    ResultOmitted {
        /// Size of the result that was not stored.
        bytes: usize,
    },
}

/// How an operator settles a call ([`Records::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleAs<'a> {
    /// The side effect happened and this is its reply: repeats replay it.
    Complete(&'a [u8]),
    /// The side effect did not happen: the record goes, and a retry runs.
    Release,
}

/// Result of [`Store::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller owns the key until `lease_until_ms` and must `complete` or `release` it.
    Claimed {
        /// The claim's fencing token: `complete` and `release` succeed only with it.
        token: LeaseToken,
    },
    /// The key was already completed: replay `record.result`.
    Completed(Record),
    /// Another caller holds the lease; `record.lease_until_ms` says until when.
    InProgress(Record),
}

/// Record status, stored as `IN_PROGRESS` / `COMPLETED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Claimed and not yet settled: the tool may be running.
    InProgress,
    /// Settled: the result (or a marker that it ran) is stored.
    Completed,
}

impl Status {
    /// The stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "IN_PROGRESS",
            Status::Completed => "COMPLETED",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "IN_PROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored record, with its result decompressed.
#[derive(Clone, PartialEq, Eq)]
pub struct Record {
    /// The idempotency key (the table's partition key).
    pub key: String,
    /// Whether the call is in progress or settled.
    pub status: Status,
    /// Epoch seconds; the TTL attribute.
    pub expires_at_s: i64,
    /// Epoch milliseconds.
    pub lease_until_ms: i64,
    /// Token of the claim that wrote this record (and completed it, if completed).
    pub token: LeaseToken,
    /// Hash of the call's canonical form, to tell a key collision from a replay.
    pub fingerprint: String,
    /// The tool's name, for operators reading the table.
    pub tool: String,
    /// Epoch milliseconds, when the claim was made.
    pub created_at_ms: i64,
    /// The stored result; `Some` when the record is completed, unless the result was too large
    /// to store.
    pub result: Option<Vec<u8>>,
    /// Set on a completed record stored without its result because it was too large: the
    /// result's size in bytes. The call ran; its result cannot be replayed.
    pub omitted_result_bytes: Option<usize>,
    /// Set on a completed record settled as *outcome unknown* ([`Store::settle_unknown`]): the
    /// side effect may or may not have happened, and nothing is replayed or re-run until an
    /// operator settles the call.
    pub outcome_unknown: bool,
    /// The claim was taken `at_most_once` ([`ClaimRequest::at_most_once`]).
    pub at_most_once: bool,
    /// The claim's [`ClaimRequest::on_failure`].
    pub on_failure: OnFailure,
    /// The claim's [`ClaimRequest::path_digests`].
    pub path_digests: Option<String>,
    /// Set on a completed record whose result is in the results bucket ([`offload`]). The store
    /// reads it back into `result` before handing the record out.
    pub offloaded: Option<Offloaded>,
    /// What the call was, for an operator (empty on records written before records said so).
    pub about: RecordAbout,
}

/// How long after a claim's lease ended an operator may settle it (the sweep's margin too): a
/// margin over clock skew between the operator's machine and the claim's owner.
pub const SETTLE_MARGIN_MS: i64 = 60_000;

impl Record {
    /// True while an operator may settle the record ([`Records::settle`]) at `now_ms`: settled as
    /// outcome unknown, or in progress with its lease ended more than [`SETTLE_MARGIN_MS`] ago
    /// (an operator's clock running ahead must not release a claim whose owner still runs).
    pub fn is_settleable(&self, now_ms: i64) -> bool {
        !self.is_expired(now_ms)
            && match self.status {
                Status::Completed => self.outcome_unknown,
                Status::InProgress => self.lease_ended(now_ms.saturating_sub(SETTLE_MARGIN_MS)),
            }
    }

    /// True once the record counts as absent (`expires_at_s` before the current second).
    pub fn is_expired(&self, now_ms: i64) -> bool {
        is_expired(self.expires_at_s, now_ms)
    }

    /// True once the lease has ended (`lease_until_ms < now_ms`).
    pub fn lease_ended(&self, now_ms: i64) -> bool {
        self.lease_until_ms < now_ms
    }

    /// True if a claim made at `now_ms` would replace this record.
    pub fn is_claimable(&self, now_ms: i64) -> bool {
        self.is_expired(now_ms)
            || (self.status == Status::InProgress && self.lease_ended(now_ms) && !self.at_most_once)
    }

    /// True if the record says the call's outcome is unknown for good (until an operator
    /// settles it): settled so, or an `at_most_once` claim whose lease ended unsettled.
    pub fn is_outcome_unknown(&self, now_ms: i64) -> bool {
        !self.is_expired(now_ms)
            && match self.status {
                Status::Completed => self.outcome_unknown,
                Status::InProgress => self.at_most_once && self.lease_ended(now_ms),
            }
    }
}

impl fmt::Debug for Record {
    // Results can be large and may hold data nobody wants in a log line: show their size only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Record")
            .field("key", &self.key)
            .field("status", &self.status)
            .field("expires_at_s", &self.expires_at_s)
            .field("lease_until_ms", &self.lease_until_ms)
            .field("token", &self.token)
            .field("fingerprint", &self.fingerprint)
            .field("tool", &self.tool)
            .field("created_at_ms", &self.created_at_ms)
            .field("result_bytes", &self.result.as_ref().map(Vec::len))
            .field("omitted_result_bytes", &self.omitted_result_bytes)
            .field("outcome_unknown", &self.outcome_unknown)
            .field("at_most_once", &self.at_most_once)
            .field("path_digests", &self.path_digests.as_ref().map(String::len))
            .field("offloaded", &self.offloaded)
            .field("about", &self.about)
            .finish()
    }
}

/// `expires_at_s` is before the second that contains `now_ms`. The same test runs in every
/// DynamoDB condition (`#exp < :now_s`), so reads and writes agree on what is expired.
pub(crate) fn is_expired(expires_at_s: i64, now_ms: i64) -> bool {
    expires_at_s < now_ms.div_euclid(1000)
}

/// Errors of the idempotency store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The caller's token no longer holds the claim: it was taken over after the lease ended,
    /// released, completed by someone else, expired, or never existed. For [`Store::put`]: the
    /// record is no longer the version the writer read.
    #[error("lease lost: the record is not held in progress by this lease token")]
    LeaseLost,
    /// The result cannot fit in one item even compressed. [`Store::complete`] never returns it:
    /// it stores the record without the result instead ([`Completion::ResultOmitted`]).
    #[error(
        "result too large: {bytes} bytes to store, limit {MAX_STORED_RESULT_BYTES} (compressed) \
         and {MAX_RESULT_BYTES} (uncompressed)"
    )]
    ResultTooLarge {
        /// Size of the result.
        bytes: usize,
    },
    /// The backend did not answer in time: network errors, throttling or 5xx after retries, or
    /// the retry deadline passed. Whether the last write applied is unknown.
    #[error("store unavailable")]
    Unavailable(#[source] BoxError),
    /// A stored record could not be decoded.
    #[error("corrupt record: {0}")]
    Corrupt(String),
    /// The store is misconfigured: missing table, wrong key schema, bad attribute names.
    #[error("store configuration: {message}")]
    Config {
        /// What is wrong, naming the setting or the table.
        message: String,
        /// The backend's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A claim's write may have applied, but every answer to it was lost and reading it back
    /// failed too: the key may be held in progress under `token`. Nothing ran. The executor keeps
    /// the token and releases the claim at the next chance (see `crate::executor`).
    #[error("store unavailable; a claim may have been written under lease token {token}")]
    ClaimUnconfirmed {
        /// The token the claim may have been written under.
        token: LeaseToken,
        /// The last error seen.
        #[source]
        source: BoxError,
    },
    /// A completed record's result is in the results bucket, but the object is missing or is not
    /// the one the record describes (its size or checksum differ). The call ran: it is never run
    /// again for this, and the caller is told its stored result is unavailable.
    #[error("stored result unavailable: {object}: {why}")]
    ResultUnavailable {
        /// The object's key.
        object: String,
        /// What is wrong with it.
        why: String,
    },
    /// The request itself is invalid (empty key, key too long, ...).
    #[error("invalid store request: {0}")]
    InvalidRequest(String),
    /// The backend refused the request for a reason retrying cannot fix.
    #[error("store rejected the request")]
    Rejected(#[source] BoxError),
}

impl StoreError {
    /// True if the same call may succeed later ([`StoreError::Unavailable`],
    /// [`StoreError::ClaimUnconfirmed`]).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::ClaimUnconfirmed { .. }
        )
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        StoreError::Config {
            message: message.into(),
            source: None,
        }
    }
}

/// Source of [`StoreError::Unavailable`] when retries ran out.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: gave up after {attempts} attempt(s) in {elapsed:?}")]
pub struct RetriesExhausted {
    /// The DynamoDB operation (`PutItem`, `UpdateItem`, ...).
    pub operation: &'static str,
    /// Attempts made, the first included.
    pub attempts: u32,
    /// Time from the first attempt to giving up.
    pub elapsed: Duration,
    /// The last attempt's error.
    #[source]
    pub last: BoxError,
}

/// Source of [`StoreError::Unavailable`] when a claim kept meeting records that changed between
/// its conditional write and its read.
#[derive(Debug, thiserror::Error)]
#[error("claim of {key:?} kept racing with other writers after {rounds} rounds")]
pub struct ClaimContended {
    /// The key being claimed.
    pub key: String,
    /// Write-then-read rounds tried.
    pub rounds: u32,
}

/// Source of the time, in epoch milliseconds.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to. Clones share the same time, so a test keeps one clone
/// and hands another to the store.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock stopped at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(start_ms)))
    }

    /// Starts at the system time, so records written to a real server look current.
    pub fn starting_now() -> Self {
        ManualClock::new(SystemClock.now_ms())
    }

    /// Sets the time (it may go backwards, as a skewed clock would).
    pub fn set_ms(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms` milliseconds.
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.advance_ms(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Requests sent to the backend, by DynamoDB operation. The memory store counts the request the
/// DynamoDB store would send on a server that honours `ReturnValuesOnConditionCheckFailure`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestCounts {
    /// `PutItem` requests.
    pub put_item: u64,
    /// `GetItem` requests.
    pub get_item: u64,
    /// `UpdateItem` requests.
    pub update_item: u64,
    /// `DeleteItem` requests.
    pub delete_item: u64,
    /// Anything else sent through the store's client.
    pub other: u64,
}

impl RequestCounts {
    /// Every request.
    pub fn total(&self) -> u64 {
        self.put_item + self.get_item + self.update_item + self.delete_item + self.other
    }

    /// Read requests (`GetItem`).
    pub fn reads(&self) -> u64 {
        self.get_item
    }

    /// Write requests (`PutItem`, `UpdateItem`, `DeleteItem`).
    pub fn writes(&self) -> u64 {
        self.put_item + self.update_item + self.delete_item
    }
}

impl Sub for RequestCounts {
    type Output = RequestCounts;

    /// Counts sent between two snapshots: `after - before`.
    fn sub(self, before: RequestCounts) -> RequestCounts {
        RequestCounts {
            put_item: self.put_item.saturating_sub(before.put_item),
            get_item: self.get_item.saturating_sub(before.get_item),
            update_item: self.update_item.saturating_sub(before.update_item),
            delete_item: self.delete_item.saturating_sub(before.delete_item),
            other: self.other.saturating_sub(before.other),
        }
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "put={} get={} update={} delete={} other={}",
            self.put_item, self.get_item, self.update_item, self.delete_item, self.other
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    PutItem,
    GetItem,
    UpdateItem,
    DeleteItem,
    Other,
}

impl Op {
    pub(crate) fn from_name(name: &str) -> Op {
        match name {
            "PutItem" => Op::PutItem,
            "GetItem" => Op::GetItem,
            "UpdateItem" => Op::UpdateItem,
            "DeleteItem" => Op::DeleteItem,
            _ => Op::Other,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct RequestCounter {
    put_item: AtomicU64,
    get_item: AtomicU64,
    update_item: AtomicU64,
    delete_item: AtomicU64,
    other: AtomicU64,
}

impl RequestCounter {
    pub(crate) fn record(&self, op: Op) {
        let counter = match op {
            Op::PutItem => &self.put_item,
            Op::GetItem => &self.get_item,
            Op::UpdateItem => &self.update_item,
            Op::DeleteItem => &self.delete_item,
            Op::Other => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RequestCounts {
        RequestCounts {
            put_item: self.put_item.load(Ordering::Relaxed),
            get_item: self.get_item.load(Ordering::Relaxed),
            update_item: self.update_item.load(Ordering::Relaxed),
            delete_item: self.delete_item.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

/// Checks what both stores refuse before sending anything.
pub(crate) fn validate_claim(req: &ClaimRequest<'_>) -> Result<(), StoreError> {
    validate_key(req.key)?;
    for (what, value) in [("fingerprint", req.fingerprint), ("tool", req.tool)] {
        if value.is_empty() {
            return Err(StoreError::InvalidRequest(format!("empty {what}")));
        }
        if value.len() > MAX_LABEL_BYTES {
            return Err(StoreError::InvalidRequest(format!(
                "{what} is {} bytes, limit {MAX_LABEL_BYTES}",
                value.len()
            )));
        }
    }
    Ok(())
}

pub(crate) fn validate_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidRequest("empty key".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::InvalidRequest(format!(
            "key is {} bytes, limit {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_never_expires_before_its_lease_ends() {
        let req = |lease_until_ms, expires_at_s| ClaimRequest {
            key: "k",
            fingerprint: "f",
            tool: "t",
            lease_until_ms,
            expires_at_s,
            owner: None,
            at_most_once: false,
            on_failure: Default::default(),
            path_digests: None,
            about: CallAbout::default(),
        };
        assert_eq!(req(65_500, 200).record_expiry(), 200);
        assert_eq!(req(65_500, 1).record_expiry(), 65);
        assert!(!is_expired(req(65_999, 1).record_expiry(), 65_999));
    }

    #[test]
    fn expiry_is_per_second_and_inclusive_of_the_last_second() {
        assert!(!is_expired(100, 100_999));
        assert!(!is_expired(100, 100_000));
        assert!(is_expired(100, 101_000));
        assert!(!is_expired(0, -1));
    }

    #[test]
    fn request_counts_subtract_per_operation() {
        let a = RequestCounts {
            put_item: 3,
            get_item: 1,
            update_item: 2,
            delete_item: 0,
            other: 1,
        };
        let b = RequestCounts {
            put_item: 1,
            get_item: 1,
            update_item: 0,
            delete_item: 0,
            other: 1,
        };
        let d = a - b;
        assert_eq!(
            d,
            RequestCounts {
                put_item: 2,
                update_item: 2,
                ..Default::default()
            }
        );
        assert_eq!(d.total(), 4);
        assert_eq!(d.writes(), 4);
        assert_eq!(d.reads(), 0);
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let c = ManualClock::new(5);
        let d = c.clone();
        c.advance_ms(10);
        d.advance(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 20);
    }

    #[test]
    fn status_round_trips_its_stored_spelling() {
        for s in [Status::InProgress, Status::Completed] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("INPROGRESS"), None);
    }
}
