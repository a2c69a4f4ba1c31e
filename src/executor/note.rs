//! A request's note of the claims it made (the Gateway interceptor's `request:<hash>` records):
//! what settles the request later reads the claims here, never a key derived again from a
//! configuration or listing that may have changed since.

use tokio::time::Instant;

use super::{Executor, Keyed, Lease, RecordedClaim};
use crate::store::{LeaseToken, Record, Store, StoreError};

/// The label of a request's note of its claims ([`super::RequestOwner::noted_at`]).
const NOTE_LABEL: &str = "request";
/// A note outlives its claim's lease by this much (seconds).
const NOTE_MARGIN_S: i64 = 60;
/// Writes of a note that others keep changing before giving up.
const NOTE_ROUNDS: u32 = 4;

/// The claims a note record holds.
fn decode_notes(record: &Record) -> Result<Vec<RecordedClaim>, StoreError> {
    serde_json::from_slice(record.result.as_deref().unwrap_or_default())
        .map_err(|e| StoreError::Corrupt(format!("a request's note: {e}")))
}

impl<S: Store> Executor<S> {
    /// Notes under `at` that this request claimed `call.key` as `owner` (see
    /// [`super::RequestOwner::noted_at`]), beside any claim an earlier invocation for the same request
    /// noted there (a configuration or listing changed between the two invocations, so it keyed
    /// another key): whatever settles the request settles each claim its owner still holds. No
    /// noted claim is ever released here: the name of a request that carries no `REQUEST_ID` may
    /// be shared by an identical request of another client, whose claim that may be. The note
    /// lives as long as the lease, within which the request's RESPONSE comes.
    pub(super) async fn note_claim(
        &self,
        at: &str,
        call: Keyed<'_>,
        owner: &str,
        end: Instant,
        lease: Lease,
    ) -> Result<(), StoreError> {
        let note = RecordedClaim {
            key: call.key.to_string(),
            owner: owner.to_string(),
        };
        let now = self.store.now_ms();
        let lease_until_ms = self.lease_until_ms(now, end, lease);
        let expires_at_s = lease_until_ms.div_euclid(1000) + NOTE_MARGIN_S;
        let mut earlier: Option<(Vec<RecordedClaim>, LeaseToken)> = None;
        for _round in 0..NOTE_ROUNDS {
            let mut claims = earlier.as_ref().map(|(c, _)| c.clone()).unwrap_or_default();
            if claims.contains(&note) {
                return Ok(());
            }
            claims.push(note.clone());
            let value =
                serde_json::to_vec(&claims).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let replacing = earlier.as_ref().map(|(_, token)| token);
            let put = self
                .store
                .put(at, NOTE_LABEL, &value, expires_at_s, replacing);
            match self.bounded(end, put).await {
                Err(StoreError::LeaseLost) => {}
                other => return other.map(drop),
            }
            // Noted since it was read: read it again and add to it.
            earlier = match self.bounded(end, self.store.get(at)).await? {
                None => None,
                Some(record) => Some((decode_notes(&record)?, record.token)),
            };
        }
        Err(StoreError::Unavailable(
            "the request's note kept changing under its writes".into(),
        ))
    }

    /// The claims a request noted under `at` ([`super::RequestOwner::noted_at`]); empty when none.
    pub(crate) async fn noted_claims(
        &self,
        at: &str,
        end: Instant,
    ) -> Result<Vec<RecordedClaim>, StoreError> {
        match self.bounded(end, self.store.get(at)).await? {
            Some(record) => decode_notes(&record),
            None => Ok(Vec::new()),
        }
    }
}
