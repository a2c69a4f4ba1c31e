//! The operations: claim, complete, extend, release, settle (an unknown outcome, or an operator's settling), put and get, each one fenced write (or read) with its retries.

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use tokio::time::Instant;

use super::{
    ATTENTION_UNKNOWN, CLAIM_CONDITION, COMPLETE_OFFLOADED_UPDATE, COMPLETE_OMITTED_UPDATE,
    COMPLETE_UPDATE, ClaimContended, ClaimOutcome, ClaimRequest, Completion, DynamoDbStore,
    EXTEND_UPDATE, EncodedResult, Failed, HAND_OVER_CONDITION, HAND_OVER_UPDATE, HELD_CONDITION,
    Held, LeaseToken, PUT_NEW_CONDITION, PUT_REPLACING_CONDITION, Record, SETTLE_UPDATE,
    SETTLEABLE_CONDITION, SettleAs, Status, StoreError, UNKNOWN_UPDATE, Written, attr, decode_item,
    encode_result, expiry_covering_lease, n, s, validate_claim, validate_key,
};
use crate::store::SETTLE_MARGIN_MS;

/// Rounds of "conditional write failed, but the record read back is claimable" before giving up.
/// Each round means another writer changed the record in between, so this only bounds livelock.
pub(super) const MAX_CLAIM_ROUNDS: u32 = 5;

impl DynamoDbStore {
    /// One consistent read of the raw record, expired or not.
    pub(super) async fn read(&self, key: &str) -> Result<Option<Record>, StoreError> {
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

    pub(super) async fn claim_inner(
        &self,
        req: ClaimRequest<'_>,
    ) -> Result<ClaimOutcome, StoreError> {
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

    /// Moves the lease of a claim `token` holds (extend), and hands it to `to` when given (hand
    /// over, only while the lease is still the one the claim was read with): one conditional
    /// update either way.
    pub(super) async fn move_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        to: Option<(&LeaseToken, i64)>,
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
        let (update, condition) = match to {
            Some((to, read_lease)) => {
                held.values.insert(":new_tok".to_string(), s(to.as_str()));
                held.values.insert(":read_lease".to_string(), n(read_lease));
                (HAND_OVER_UPDATE, HAND_OVER_CONDITION)
            }
            None => (EXTEND_UPDATE, HELD_CONDITION),
        };
        let sent = self
            .send("UpdateItem", || {
                self.client
                    .update_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(condition)
                    .set_expression_attribute_names(Some(held.names.clone()))
                    .set_expression_attribute_values(Some(held.values.clone()))
                    .update_expression(update)
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
                .expression_attribute_names("#att", attr::ATTENTION)
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
                    .expression_attribute_values(":true", AttributeValue::Bool(true))
                    .expression_attribute_values(":att_unknown", s(ATTENTION_UNKNOWN)),
            };
            update.send()
        })
        .await
        .map(|_| ())
    }

    /// What a completion write ended with (`completion`: `None` for a settlement as outcome
    /// unknown). A refused write is still a success when the record is already settled the same
    /// way under this token: a retry after a lost response, or a repeat.
    pub(super) async fn completed(
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

    pub(super) async fn release_inner(
        &self,
        key: &str,
        token: &LeaseToken,
    ) -> Result<(), StoreError> {
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
        let sent = self
            .send("DeleteItem", || {
                self.client
                    .delete_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(SETTLEABLE_CONDITION)
                    .set_expression_attribute_names(Some(held.names.clone()))
                    .set_expression_attribute_values(Some(held.values.clone()))
                    .send()
            })
            .await;
        match sent {
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
        let sent = self
            .send("UpdateItem", || {
                self.client
                    .update_item()
                    .table_name(&self.cfg.table)
                    .set_key(Some(self.key_value(key)))
                    .condition_expression(SETTLEABLE_CONDITION)
                    .update_expression(SETTLE_UPDATE)
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

    pub(super) async fn get_inner(&self, key: &str) -> Result<Option<Record>, StoreError> {
        validate_key(key)?;
        let now = self.clock.now_ms();
        Ok(self.read(key).await?.filter(|r| !r.is_expired(now)))
    }
}
