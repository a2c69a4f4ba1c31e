//! The item layout: the attributes a record is written as, and read back from.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use std::time::Duration;

use crate::key::OnFailure;

use super::{
    ClaimRequest, DynamoDbConfig, DynamoDbStore, EncodedResult, LeaseToken, Offloaded, Record,
    RecordAbout, ResultEncoding, Status, StoreError, decode_result,
};

/// Fixed attribute names (the key and TTL attribute names come from [`DynamoDbConfig`]).
pub mod attr {
    /// `IN_PROGRESS` or `COMPLETED` (S).
    pub(crate) const STATUS: &str = "status";
    /// End of the claim's lease, epoch milliseconds (N).
    pub(crate) const LEASE_UNTIL: &str = "lease_until";
    /// The claim's fencing token (S).
    pub const LEASE_TOKEN: &str = "lease_token";
    /// Hash of the call's canonical form (S).
    pub(crate) const FINGERPRINT: &str = "fingerprint";
    /// The tool's name (S).
    pub(crate) const TOOL: &str = "tool";
    /// When the claim was made, epoch milliseconds (N).
    pub(crate) const CREATED_AT: &str = "created_at";
    /// The stored result (B).
    pub(crate) const RESULT: &str = "result";
    /// How `result` is encoded: `raw` or `gzip` (S).
    pub(crate) const RESULT_ENCODING: &str = "result_encoding";
    /// On a completed record without its result (too large): the result's size in bytes.
    pub(crate) const RESULT_OMITTED: &str = "result_omitted";
    /// On a completed record settled as outcome unknown: `true` (BOOL).
    pub(crate) const OUTCOME_UNKNOWN: &str = "outcome_unknown";
    /// On a claim of an `at_most_once` tool: `true` (BOOL); never taken over.
    pub(crate) const AT_MOST_ONCE: &str = "at_most_once";
    /// What a failure reply does (N, seconds): `0` releases the claim, more replays the failure
    /// that long; absent, it replays for the record's whole retention.
    pub(crate) const ON_FAILURE: &str = "on_failure";
    /// On a claim keyed by its caller's key: a digest per argument leaf (S).
    pub(crate) const PATH_DIGESTS: &str = "path_digests";
    /// On a completed record whose result is in the results bucket: the object's key (S).
    pub(crate) const RESULT_OBJECT: &str = "result_object";
    /// With `result_object`: the result's SHA-256, hex (S).
    pub(crate) const RESULT_SHA256: &str = "result_sha256";
    /// With `result_object`: the result's size in bytes (N).
    pub(crate) const RESULT_BYTES: &str = "result_bytes";
    /// The call's namespace: entry point and owner (S).
    pub(crate) const NAMESPACE: &str = "namespace";
    /// The run (session) the call belongs to (S).
    pub(crate) const RUN: &str = "run";
    /// The step within the run (S).
    pub(crate) const STEP: &str = "step";
    /// The keyer that derived the key (S).
    pub(crate) const KEYER: &str = "keyer";
    /// The fingerprint of the tool's policy when it was keyed (S).
    pub(crate) const POLICY: &str = "policy";
    /// A caller-keyed call's strict fingerprint of its arguments (S).
    pub(crate) const ARGUMENTS: &str = "arguments_fingerprint";
    /// Set while a record needs an operator's eye: `claim` on an `at_most_once` claim (it needs
    /// one once its lease ends), `unknown` once settled so. The key of the sparse index
    /// [`ATTENTION_INDEX`](super::ATTENTION_INDEX) (S).
    pub(crate) const ATTENTION: &str = "attention";

    pub(crate) const ALL: [&str; 22] = [
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
        NAMESPACE,
        RUN,
        STEP,
        KEYER,
        POLICY,
        ARGUMENTS,
        ATTENTION,
    ];
}

/// The sparse index of the records that need an operator: partition key
/// `attr::ATTENTION`, sort key `attr::CREATED_AT`. Only such records carry the attribute,
/// so the index stays as small as the work waiting for someone.
pub const ATTENTION_INDEX: &str = "attention";

/// [`attr::ATTENTION`] on an `at_most_once` claim.
pub(super) const ATTENTION_CLAIM: &str = "claim";
/// [`attr::ATTENTION`] on a record settled as outcome unknown.
pub(super) const ATTENTION_UNKNOWN: &str = "unknown";

pub(super) type Item = HashMap<String, AttributeValue>;

impl DynamoDbStore {
    pub(super) fn key_value(&self, key: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([(
            self.cfg.key_attribute.clone(),
            AttributeValue::S(key.to_owned()),
        )])
    }

    pub(super) fn claim_item(
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
        if req.at_most_once {
            item.insert(attr::ATTENTION.into(), s(ATTENTION_CLAIM));
        }
        match req.on_failure {
            OnFailure::Replay => {}
            OnFailure::ReplayFor(retention) => {
                item.insert(
                    attr::ON_FAILURE.into(),
                    n(i64::try_from(retention.as_secs().max(1)).unwrap_or(i64::MAX)),
                );
            }
            OnFailure::Retry => {
                item.insert(attr::ON_FAILURE.into(), n(0));
            }
        }
        if let Some(digests) = req.path_digests {
            item.insert(attr::PATH_DIGESTS.into(), s(digests));
        }
        let about = [
            (attr::NAMESPACE, req.about.namespace),
            (attr::RUN, req.about.run),
            (attr::STEP, req.about.step),
            (attr::KEYER, req.about.keyer),
            (attr::POLICY, req.about.policy),
            (attr::ARGUMENTS, req.about.arguments),
        ];
        for (name, value) in about {
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                item.insert(name.into(), s(value));
            }
        }
        item
    }
}

/// What a completion writes: the encoded result, or the marker of a result too large to store.
#[derive(Clone, Copy)]
pub(super) enum Written<'a> {
    Result(&'a EncodedResult),
    Offloaded(&'a Offloaded),
    Omitted { bytes: usize },
    Unknown,
}

pub(super) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

pub(super) fn n(v: i64) -> AttributeValue {
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
        on_failure: match item.get(attr::ON_FAILURE) {
            None => OnFailure::Replay,
            Some(_) => match get_n(item, attr::ON_FAILURE)? {
                0 => OnFailure::Retry,
                seconds => OnFailure::ReplayFor(Duration::from_secs(seconds.unsigned_abs())),
            },
        },
        path_digests: optional_s(item, attr::PATH_DIGESTS),
        offloaded,
        about: RecordAbout {
            namespace: optional_s(item, attr::NAMESPACE),
            run: optional_s(item, attr::RUN),
            step: optional_s(item, attr::STEP),
            keyer: optional_s(item, attr::KEYER),
            policy: optional_s(item, attr::POLICY),
            arguments: optional_s(item, attr::ARGUMENTS),
        },
    })
}

/// A string attribute that may be absent (records written before it existed).
fn optional_s(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    }
}

pub(super) fn missing(name: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name:?} missing"))
}

pub(super) fn wrong_type(name: &str, want: &str) -> StoreError {
    StoreError::Corrupt(format!("attribute {name:?} is not of type {want}"))
}

pub(super) fn get_s<'a>(
    item: &'a HashMap<String, AttributeValue>,
    name: &str,
) -> Result<&'a str, StoreError> {
    match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v),
        Some(_) => Err(wrong_type(name, "S")),
        None => Err(missing(name)),
    }
}

pub(super) fn get_n(item: &HashMap<String, AttributeValue>, name: &str) -> Result<i64, StoreError> {
    match item.get(name) {
        Some(AttributeValue::N(v)) => v.parse::<i64>().map_err(|_| {
            StoreError::Corrupt(format!("attribute {name:?} is not an integer in range"))
        }),
        Some(_) => Err(wrong_type(name, "N")),
        None => Err(missing(name)),
    }
}
