//! In-memory store: the embedded default for local runs and the reference the DynamoDB store is
//! tested against. Same semantics, same limits, same request accounting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::OnFailure;
use super::codec::{EncodedResult, decode_result, encode_result};
use super::{
    ClaimOutcome, ClaimRequest, Clock, Completion, DEFAULT_COMPRESS_THRESHOLD, LeaseToken, Op,
    Record, RecordAbout, RecordFilter, RecordState, Records, RequestCounter, RequestCounts,
    SettleAs, Status, Store, StoreError, SystemClock, expiry_covering_lease, is_expired,
    validate_claim, validate_key,
};

/// Expired records are swept after this many claims, so a long local run does not grow forever.
const SWEEP_EVERY: u64 = 4096;

/// Concurrency-safe in-memory [`Store`]. Clones share the same records.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    items: Mutex<Items>,
    clock: Arc<dyn Clock>,
    counter: RequestCounter,
    compress_threshold: usize,
}

#[derive(Debug, Default)]
struct Items {
    map: HashMap<String, Stored>,
    claims: u64,
}

/// A record as it would sit in DynamoDB: the result still encoded.
#[derive(Debug, Clone)]
struct Stored {
    status: Status,
    expires_at_s: i64,
    lease_until_ms: i64,
    token: LeaseToken,
    fingerprint: String,
    tool: String,
    created_at_ms: i64,
    result: Option<EncodedResult>,
    /// Set when completed without a result that was too large (see [`Completion`]).
    omitted_result_bytes: Option<usize>,
    /// Set when settled as outcome unknown ([`Store::settle_unknown`]).
    outcome_unknown: bool,
    at_most_once: bool,
    on_failure: OnFailure,
    path_digests: Option<String>,
    about: RecordAbout,
}

impl Stored {
    fn is_live(&self, now_ms: i64) -> bool {
        !is_expired(self.expires_at_s, now_ms)
    }

    /// What [`Records::evict`] may delete: expired, or completed with a known outcome.
    fn is_evictable(&self, now_ms: i64) -> bool {
        !self.is_live(now_ms) || (self.status == Status::Completed && !self.outcome_unknown)
    }

    fn held_by(&self, token: &LeaseToken, now_ms: i64) -> bool {
        self.is_live(now_ms) && self.status == Status::InProgress && &self.token == token
    }

    fn decode(&self, key: &str) -> Result<Record, StoreError> {
        let result = match (&self.status, &self.result) {
            (Status::Completed, Some(r)) => Some(decode_result(r.encoding, &r.bytes)?),
            (Status::Completed, None)
                if self.omitted_result_bytes.is_some() || self.outcome_unknown =>
            {
                None
            }
            (Status::Completed, None) => {
                return Err(StoreError::Corrupt(
                    "completed record without result".into(),
                ));
            }
            (Status::InProgress, _) => None,
        };
        Ok(Record {
            key: key.to_owned(),
            status: self.status,
            expires_at_s: self.expires_at_s,
            lease_until_ms: self.lease_until_ms,
            token: self.token.clone(),
            fingerprint: self.fingerprint.clone(),
            tool: self.tool.clone(),
            created_at_ms: self.created_at_ms,
            result,
            omitted_result_bytes: self.omitted_result_bytes,
            outcome_unknown: self.outcome_unknown,
            at_most_once: self.at_most_once,
            on_failure: self.on_failure,
            path_digests: self.path_digests.clone(),
            offloaded: None,
            about: self.about.clone(),
        })
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        MemoryStore::with_options(Arc::new(SystemClock), DEFAULT_COMPRESS_THRESHOLD)
    }

    /// Replaces the clock (before the store is shared).
    pub fn with_clock(self, clock: impl Clock + 'static) -> Self {
        MemoryStore::with_options(Arc::new(clock), self.inner.compress_threshold)
    }

    /// Results longer than `bytes` are stored compressed.
    pub fn with_compress_threshold(self, bytes: usize) -> Self {
        MemoryStore::with_options(self.inner.clock.clone(), bytes)
    }

    fn with_options(clock: Arc<dyn Clock>, compress_threshold: usize) -> Self {
        MemoryStore {
            inner: Arc::new(Inner {
                items: Mutex::new(Items::default()),
                clock,
                counter: RequestCounter::default(),
                compress_threshold,
            }),
        }
    }

    /// Number of records held, expired ones included.
    pub fn len(&self) -> usize {
        self.items().map.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops expired records; returns how many.
    pub fn purge_expired(&self) -> usize {
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        let before = items.map.len();
        items.map.retain(|_, s| s.is_live(now));
        before - items.map.len()
    }

    fn items(&self) -> MutexGuard<'_, Items> {
        // A panic while holding the lock cannot leave a half-applied record (each operation is
        // one insert, update or remove), so a poisoned lock is still consistent.
        self.inner.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn claim_now(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        validate_claim(&req)?;
        self.inner.counter.record(Op::PutItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        if let Some(existing) = items.map.get(req.key) {
            let record = existing.decode(req.key)?;
            if !record.is_claimable(now) {
                return Ok(match record.status {
                    Status::Completed => ClaimOutcome::Completed(record),
                    Status::InProgress => ClaimOutcome::InProgress(record),
                });
            }
        }
        let token = LeaseToken::for_owner(req.owner);
        items.map.insert(
            req.key.to_owned(),
            Stored {
                status: Status::InProgress,
                expires_at_s: req.record_expiry(),
                lease_until_ms: req.lease_until_ms,
                token: token.clone(),
                fingerprint: req.fingerprint.to_owned(),
                tool: req.tool.to_owned(),
                created_at_ms: now,
                result: None,
                omitted_result_bytes: None,
                outcome_unknown: false,
                at_most_once: req.at_most_once,
                on_failure: req.on_failure,
                path_digests: req.path_digests.map(str::to_owned),
                about: RecordAbout::from_call(&req.about),
            },
        );
        items.claims += 1;
        if items.claims.is_multiple_of(SWEEP_EVERY) {
            items.map.retain(|_, s| s.is_live(now));
        }
        Ok(ClaimOutcome::Claimed { token })
    }

    fn complete_now(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        validate_key(key)?;
        let (encoded, completion) = match encode_result(result, self.inner.compress_threshold) {
            Ok(e) => (Some(e), Completion::Stored),
            Err(StoreError::ResultTooLarge { .. }) => (
                None,
                Completion::ResultOmitted {
                    bytes: result.len(),
                },
            ),
            Err(e) => return Err(e),
        };
        self.inner.counter.record(Op::UpdateItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        match items.map.get_mut(key) {
            Some(s) if s.held_by(token, now) => {
                s.status = Status::Completed;
                s.expires_at_s = expires_at_s;
                s.omitted_result_bytes = match completion {
                    Completion::ResultOmitted { bytes } => Some(bytes),
                    Completion::Stored | Completion::Offloaded { .. } => None,
                };
                s.result = encoded;
                Ok(completion)
            }
            // Already completed under this token (a retried complete): keep the first result.
            Some(s)
                if s.is_live(now)
                    && s.status == Status::Completed
                    && &s.token == token
                    && !s.outcome_unknown =>
            {
                Ok(match s.omitted_result_bytes {
                    Some(bytes) => Completion::ResultOmitted { bytes },
                    None => Completion::Stored,
                })
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    /// Moves the lease of a claim `token` holds (extend), and hands it to `to` when given (hand
    /// over): the DynamoDB store's one conditional update, either way.
    /// Moves the lease of the claim `token` holds; with `to` (the new token and the lease the
    /// claim was read with), hands it over too.
    fn move_lease_now(
        &self,
        key: &str,
        token: &LeaseToken,
        to: Option<(&LeaseToken, i64)>,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        self.inner.counter.record(Op::UpdateItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        match items.map.get_mut(key) {
            Some(s)
                if s.held_by(token, now)
                    && to.is_none_or(|(_, read_lease)| s.lease_until_ms == read_lease) =>
            {
                if let Some((to, _)) = to {
                    s.token = to.clone();
                }
                s.lease_until_ms = lease_until_ms;
                s.expires_at_s = expiry_covering_lease(expires_at_s, lease_until_ms);
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    fn release_now(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        validate_key(key)?;
        self.inner.counter.record(Op::DeleteItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        match items.map.get(key) {
            Some(s) if s.held_by(token, now) => {
                items.map.remove(key);
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    fn settle_unknown_now(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        self.inner.counter.record(Op::UpdateItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        match items.map.get_mut(key) {
            Some(s) if s.held_by(token, now) => {
                s.status = Status::Completed;
                s.expires_at_s = expires_at_s;
                s.result = None;
                s.omitted_result_bytes = None;
                s.outcome_unknown = true;
                Ok(())
            }
            // Settled so already under this token (a retried write).
            Some(s) if s.is_live(now) && s.outcome_unknown && &s.token == token => Ok(()),
            _ => Err(StoreError::LeaseLost),
        }
    }

    fn settle_now(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let encoded = match settle_as {
            SettleAs::Complete(reply) => Some(encode_result(reply, self.inner.compress_threshold)?),
            SettleAs::Release => None,
        };
        self.inner.counter.record(match settle_as {
            SettleAs::Complete(_) => Op::UpdateItem,
            SettleAs::Release => Op::DeleteItem,
        });
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        let record = match items.map.get(key) {
            Some(s) if &s.token == token => s.decode(key)?,
            _ => return Err(StoreError::LeaseLost),
        };
        if !record.is_settleable(now) {
            // Completing again what this token completed (a retried write) changes nothing.
            let completed_so = matches!(settle_as, SettleAs::Complete(_))
                && !record.is_expired(now)
                && record.status == Status::Completed
                && record.result.is_some();
            return if completed_so {
                Ok(())
            } else {
                Err(StoreError::LeaseLost)
            };
        }
        match encoded {
            Some(encoded) => {
                if let Some(s) = items.map.get_mut(key) {
                    s.status = Status::Completed;
                    s.expires_at_s = expires_at_s;
                    s.result = Some(encoded);
                    s.omitted_result_bytes = None;
                    s.outcome_unknown = false;
                }
            }
            None => {
                items.map.remove(key);
            }
        }
        Ok(())
    }

    fn put_now(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        validate_key(key)?;
        let encoded = encode_result(value, self.inner.compress_threshold)?;
        self.inner.counter.record(Op::PutItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        let current = items.map.get(key);
        let is_version_read = match replacing {
            Some(token) => current.is_some_and(|s| s.token == *token),
            None => current.is_none_or(|s| !s.is_live(now)),
        };
        if !is_version_read {
            return Err(StoreError::LeaseLost);
        }
        let token = LeaseToken::random();
        items.map.insert(
            key.to_owned(),
            Stored {
                status: Status::Completed,
                expires_at_s,
                lease_until_ms: 0,
                token: token.clone(),
                fingerprint: String::new(),
                tool: label.to_owned(),
                created_at_ms: now,
                result: Some(encoded),
                omitted_result_bytes: None,
                outcome_unknown: false,
                at_most_once: false,
                on_failure: OnFailure::Replay,
                path_digests: None,
                about: RecordAbout::default(),
            },
        );
        Ok(token)
    }

    fn list_now(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.inner.counter.record(Op::Other);
        let now = self.inner.clock.now_ms();
        let items = self.items();
        let mut records = Vec::new();
        // The unknown ones come from the attention index, the others from a bounded scan: read
        // at most `max_scanned` items, as the DynamoDB store does.
        let bounded = filter.state != Some(RecordState::Unknown);
        for (scanned, (key, stored)) in items.map.iter().enumerate() {
            if bounded && scanned >= filter.max_scanned {
                break;
            }
            if !stored.is_live(now) {
                continue;
            }
            let record = stored.decode(key)?;
            if RecordState::selects(filter, &record, now) {
                records.push(record);
            }
        }
        records.sort_by(|a, b| {
            b.created_at_ms
                .cmp(&a.created_at_ms)
                .then(a.key.cmp(&b.key))
        });
        records.truncate(filter.limit);
        Ok(records)
    }

    fn evict_now(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        validate_key(key)?;
        self.inner.counter.record(Op::DeleteItem);
        let now = self.inner.clock.now_ms();
        let mut items = self.items();
        match items.map.get(key) {
            Some(s) if &s.token == token && s.is_evictable(now) => {
                items.map.remove(key);
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }

    fn get_now(&self, key: &str) -> Result<Option<Record>, StoreError> {
        validate_key(key)?;
        self.inner.counter.record(Op::GetItem);
        let now = self.inner.clock.now_ms();
        let items = self.items();
        match items.map.get(key) {
            Some(s) if s.is_live(now) => s.decode(key).map(Some),
            _ => Ok(None),
        }
    }
}

impl Records for MemoryStore {
    async fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.settle_now(key, token, settle_as, expires_at_s)
    }

    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.list_now(filter)
    }

    async fn evict(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.evict_now(key, token)
    }
}

impl Store for MemoryStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.claim_now(req)
    }

    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        self.complete_now(key, token, result, expires_at_s)
    }

    async fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.move_lease_now(key, token, None, lease_until_ms, expires_at_s)
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.release_now(key, token)
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
        self.move_lease_now(
            key,
            from,
            Some((to, from_lease_until_ms)),
            lease_until_ms,
            expires_at_s,
        )
    }

    async fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        self.put_now(key, label, value, expires_at_s, replacing)
    }

    async fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.settle_unknown_now(key, token, expires_at_s)
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.get_now(key)
    }

    fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    fn requests(&self) -> RequestCounts {
        self.inner.counter.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{CallAbout, ManualClock};

    /// Claims `key` (a fresh key: the claim must succeed).
    fn claimed(store: &MemoryStore, key: &str, lease_until_ms: i64, expires_at_s: i64) {
        let req = ClaimRequest {
            key,
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
        assert!(matches!(
            store.claim_now(req),
            Ok(ClaimOutcome::Claimed { .. })
        ));
    }

    #[test]
    fn purge_drops_only_expired_records() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::new().with_clock(clock.clone());
        for (key, expires_at_s) in [("a", 1_000), ("b", 2_000)] {
            claimed(&store, key, 1_200_000, expires_at_s);
        }
        clock.set_ms(1_500_000);
        assert_eq!(store.purge_expired(), 1);
        assert_eq!(store.len(), 1);
    }

    /// A long-lived container never calls `purge_expired`: every `SWEEP_EVERY`-th claim sweeps
    /// the expired records, and no claim before it does.
    #[test]
    fn every_sweep_every_th_claim_sweeps_the_expired_records() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::new().with_clock(clock.clone());
        let claim = |key: &str, expires_at_s: i64| {
            claimed(&store, key, clock.now_ms() + 1_000, expires_at_s);
        };
        let sweep_every = SWEEP_EVERY as usize;
        for i in 0..sweep_every - 1 {
            claim(&format!("short-{i}"), 1_002);
        }
        clock.set_ms(1_010_000);
        assert_eq!(store.len(), sweep_every - 1, "swept before its turn");
        claim("live", 2_000);
        assert_eq!(store.len(), 1, "the sweeping claim left expired records");
        for i in 0..sweep_every - 1 {
            claim(&format!("next-{i}"), 2_000);
        }
        assert_eq!(
            store.len(),
            sweep_every,
            "the next sweep dropped live records"
        );
    }
}
