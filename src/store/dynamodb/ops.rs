//! The operations: claim, complete, extend, release, settle (an unknown outcome, or an operator's settling), put and get, each one fenced write (or read) with its retries.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use tokio::time::Instant;

use super::wire::{Action, Request};

use super::{
    ATTENTION_UNKNOWN, CLAIM_CONDITION, COMPLETE_OFFLOADED_UPDATE, COMPLETE_OMITTED_UPDATE,
    COMPLETE_UPDATE, ClaimContended, ClaimOutcome, ClaimRequest, Completion, DynamoDbStore,
    EXTEND_UPDATE, EncodedResult, Failed, HAND_OVER_UPDATE, HELD_CONDITION, Held, LeaseToken,
    PUT_NEW_CONDITION, PUT_REPLACING_CONDITION, Record, SETTLE_UPDATE, SETTLEABLE_CONDITION,
    SettleAs, Status, StoreError, UNKNOWN_UPDATE, Written, attr, decode_item, encode_result,
    expiry_covering_lease, n, s, validate_claim, validate_key,
};
use crate::store::SETTLE_MARGIN_MS;

/// Rounds of "conditional write failed, but the record read back is claimable" before giving up.
/// Each round means another writer changed the record in between, so this only bounds livelock.
pub(super) const MAX_CLAIM_ROUNDS: u32 = 5;

impl DynamoDbStore {
    /// One consistent read of the raw record, expired or not.
    pub(super) async fn read(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let item = self
            .send(&Request::new(Action::Get, self.key_value(key)))
            .await
            .map_err(Failed::into_store_error)?;
        item.map(|item| decode_item(&self.cfg, &item)).transpose()
    }

    pub(super) async fn claim_inner(
        &self,
        req: ClaimRequest<'_>,
    ) -> Result<ClaimOutcome, StoreError> {
        validate_claim(&req)?;
        let now = self.clock.now_ms();
        let token = LeaseToken::for_owner(req.owner);
        let put = Request::new(
            Action::Put(self.claim_item(&req, &token, now)),
            Default::default(),
        )
        .when(
            CLAIM_CONDITION,
            HashMap::from([
                ("#pk".to_string(), self.cfg.key_attribute.clone()),
                ("#exp".to_string(), self.cfg.ttl_attribute.clone()),
                ("#st".to_string(), attr::STATUS.to_string()),
                ("#lease".to_string(), attr::LEASE_UNTIL.to_string()),
                ("#amo".to_string(), attr::AT_MOST_ONCE.to_string()),
            ]),
            HashMap::from([
                (":now_s".to_string(), n(now.div_euclid(1000))),
                (":now_ms".to_string(), n(now)),
                (":in_progress".to_string(), s(Status::InProgress.as_str())),
            ]),
        )
        .old_on_refusal();
        let write_deadline = Instant::now() + self.cfg.claim.write_within;
        for _round in 0..MAX_CLAIM_ROUNDS {
            let sent = self.send_until(write_deadline, &put).await;
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
                    match failed.into_condition_failure() {
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
    pub(super) async fn unconfirmed_claim(
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

    /// Moves the lease of a claim `token` holds (extend), and hands it to `to` when given
    /// (hand over): one conditional update either way.
    pub(super) async fn move_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        to: Option<&LeaseToken>,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let mut held = self.held(token, self.clock.now_ms());
        held.names
            .insert("#lease".to_string(), attr::LEASE_UNTIL.to_string());
        held.values.insert(":lease".to_string(), n(lease_until_ms));
        held.values.insert(
            ":exp".to_string(),
            n(expiry_covering_lease(expires_at_s, lease_until_ms)),
        );
        let update = match to {
            Some(to) => {
                held.values.insert(":new_tok".to_string(), s(to.as_str()));
                HAND_OVER_UPDATE
            }
            None => EXTEND_UPDATE,
        };
        let sent = self
            .send(&held.fence(Action::Update(update), self.key_value(key), HELD_CONDITION))
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(failed) => {
                failed.into_condition_failure()?;
                Err(StoreError::LeaseLost)
            }
        }
    }

    pub(super) async fn complete_inner(
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
    pub(super) async fn send_complete(
        &self,
        key: &str,
        token: &LeaseToken,
        written: Written<'_>,
        expires_at_s: i64,
    ) -> Result<(), Failed> {
        let mut held = self.held(token, self.clock.now_ms());
        let mut name = |k: &str, v: &str| held.names.insert(k.to_string(), v.to_string());
        name("#res", attr::RESULT);
        name("#enc", attr::RESULT_ENCODING);
        name("#att", attr::ATTENTION);
        let update = match written {
            Written::Result(_) => COMPLETE_UPDATE,
            Written::Omitted { .. } => {
                name("#omit", attr::RESULT_OMITTED);
                COMPLETE_OMITTED_UPDATE
            }
            Written::Offloaded(_) => {
                name("#obj", attr::RESULT_OBJECT);
                name("#sha", attr::RESULT_SHA256);
                name("#size", attr::RESULT_BYTES);
                COMPLETE_OFFLOADED_UPDATE
            }
            Written::Unknown => {
                name("#omit", attr::RESULT_OMITTED);
                name("#unk", attr::OUTCOME_UNKNOWN);
                UNKNOWN_UPDATE
            }
        };
        let values = &mut held.values;
        values.insert(":completed".into(), s(Status::Completed.as_str()));
        values.insert(":exp".into(), n(expires_at_s));
        match written {
            Written::Result(EncodedResult { encoding, bytes }) => {
                values.insert(":res".into(), AttributeValue::B(Blob::new(bytes.clone())));
                values.insert(":enc".into(), s(encoding.as_str()));
            }
            Written::Omitted { bytes } => {
                values.insert(":omit".into(), n(i64::try_from(bytes).unwrap_or(i64::MAX)));
            }
            Written::Offloaded(offloaded) => {
                values.insert(":obj".into(), s(&offloaded.object));
                values.insert(":sha".into(), s(&offloaded.sha256));
                let size = i64::try_from(offloaded.bytes).unwrap_or(i64::MAX);
                values.insert(":size".into(), n(size));
            }
            Written::Unknown => {
                values.insert(":true".into(), AttributeValue::Bool(true));
                values.insert(":att_unknown".into(), s(ATTENTION_UNKNOWN));
            }
        }
        let update = held
            .fence(Action::Update(update), self.key_value(key), HELD_CONDITION)
            .old_on_refusal();
        self.send(&update).await.map(|_| ())
    }

    /// What a completion write ended with (`completion`: `None` for a settlement as outcome
    /// unknown). A refused write is still a success when the record is already settled the same
    /// way under this token: a retry after a lost response, or a repeat.
    pub(super) async fn completed(
        &self,
        key: &str,
        token: &LeaseToken,
        sent: Result<(), Failed>,
        completion: Option<Completion>,
    ) -> Result<Completion, StoreError> {
        let failed = match sent {
            Ok(()) => return Ok(completion.unwrap_or(Completion::Stored)),
            Err(failed) => failed,
        };
        let now = self.clock.now_ms();
        let old = failed.into_condition_failure()?;
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

    pub(super) async fn release_inner(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let held = self.held(token, self.clock.now_ms());
        let delete = held
            .fence(Action::Delete, self.key_value(key), HELD_CONDITION)
            .old_on_refusal();
        let failed = match self.send(&delete).await {
            Ok(_) => return Ok(()),
            Err(failed) => failed,
        };
        let maybe_applied = failed.maybe_applied_before();
        let old = failed.into_condition_failure()?;
        if old.is_some() || !maybe_applied {
            return Err(StoreError::LeaseLost);
        }
        // An earlier attempt may have deleted the record before its response was lost.
        match self.read(key).await? {
            None => Ok(()),
            Some(_) => Err(StoreError::LeaseLost),
        }
    }

    pub(super) async fn settle_unknown_inner(
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

    pub(super) async fn settle_inner(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
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
        // A lease must have ended the margin ago, by this clock (`Record::is_settleable`).
        held.values
            .insert(":now_ms".into(), n(now.saturating_sub(SETTLE_MARGIN_MS)));
        match settle_as {
            SettleAs::Release => self.settle_by_deleting(key, &held).await,
            SettleAs::Complete(reply) => {
                self.settle_by_completing(key, token, held, reply, expires_at_s)
                    .await
            }
        }
    }

    /// An operator's release: the record goes, while it is still settleable under the token.
    async fn settle_by_deleting(&self, key: &str, held: &Held) -> Result<(), StoreError> {
        let delete = held
            .clone()
            .fence(Action::Delete, self.key_value(key), SETTLEABLE_CONDITION);
        match self.send(&delete).await {
            Ok(_) => Ok(()),
            // An earlier attempt may have deleted the record before its response was lost.
            Err(failed) if failed.maybe_applied_before() => match self.read(key).await? {
                None => Ok(()),
                Some(_) => Err(StoreError::LeaseLost),
            },
            Err(failed) => {
                failed.into_condition_failure()?;
                Err(StoreError::LeaseLost)
            }
        }
    }

    /// An operator's completion with the reply the side effect gave.
    async fn settle_by_completing(
        &self,
        key: &str,
        token: &LeaseToken,
        mut held: Held,
        reply: &[u8],
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        let EncodedResult { encoding, bytes } = encode_result(reply, self.cfg.compress_threshold)?;
        held.names.insert("#res".into(), attr::RESULT.into());
        held.names
            .insert("#enc".into(), attr::RESULT_ENCODING.into());
        held.names
            .insert("#omit".into(), attr::RESULT_OMITTED.into());
        held.names.insert("#att".into(), attr::ATTENTION.into());
        held.values.insert(":exp".into(), n(expires_at_s));
        held.values
            .insert(":res".into(), AttributeValue::B(Blob::new(bytes)));
        held.values.insert(":enc".into(), s(encoding.as_str()));
        let update = held.fence(
            Action::Update(SETTLE_UPDATE),
            self.key_value(key),
            SETTLEABLE_CONDITION,
        );
        let failed = match self.send(&update).await {
            Ok(_) => return Ok(()),
            Err(failed) if failed.is_item_too_large() => {
                return Err(StoreError::ResultTooLarge { bytes: reply.len() });
            }
            Err(failed) => failed,
        };
        failed.into_condition_failure()?;
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

    pub(super) async fn put_inner(
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
        let put = Request::new(Action::Put(item), Default::default());
        let put = match replacing {
            Some(read) => put.when(
                PUT_REPLACING_CONDITION,
                HashMap::from([("#tok".to_string(), attr::LEASE_TOKEN.to_string())]),
                HashMap::from([(":tok".to_string(), s(read.as_str()))]),
            ),
            None => put.when(
                PUT_NEW_CONDITION,
                HashMap::from([
                    ("#pk".to_string(), self.cfg.key_attribute.clone()),
                    ("#exp".to_string(), self.cfg.ttl_attribute.clone()),
                ]),
                HashMap::from([(":now_s".to_string(), n(now_s))]),
            ),
        }
        .old_on_refusal();
        let old = match self.send(&put).await {
            Ok(_) => return Ok(token),
            Err(failed) if failed.is_item_too_large() => {
                return Err(StoreError::ResultTooLarge { bytes: value.len() });
            }
            Err(failed) => failed.into_condition_failure()?,
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

    pub(super) async fn get_inner(&self, key: &str) -> Result<Option<Record>, StoreError> {
        validate_key(key)?;
        let now = self.clock.now_ms();
        Ok(self.read(key).await?.filter(|r| !r.is_expired(now)))
    }
}
