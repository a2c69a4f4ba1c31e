//! The conditions and updates of the fenced writes: every write but a claim succeeds only while the record is held under the writer's token.

use std::collections::HashMap;

use super::{DynamoDbStore, Item, LeaseToken, Status, attr, n, s};

/// Absent, or expired, or in progress with an ended lease (unless claimed `at_most_once`).
pub(super) const CLAIM_CONDITION: &str = "attribute_not_exists(#pk) OR #exp < :now_s OR \
     (#st = :in_progress AND #lease < :now_ms AND attribute_not_exists(#amo))";
/// The text of [`HELD_CONDITION`], which [`HAND_OVER_CONDITION`] extends.
macro_rules! held_condition {
    () => {
        "#tok = :tok AND #st = :in_progress AND #exp >= :now_s"
    };
}
/// Live, in progress, and still carrying the caller's token (names and values: [`Held`]).
pub(super) const HELD_CONDITION: &str = held_condition!();
/// A put that replaces the version it read.
pub(super) const PUT_REPLACING_CONDITION: &str = "#tok = :tok";
/// A put where there was nothing live to read.
pub(super) const PUT_NEW_CONDITION: &str = "attribute_not_exists(#pk) OR #exp < :now_s";

/// The expression names and values of [`HELD_CONDITION`] for one token at one time, which every
/// fenced write (complete, extend, release) starts from and adds its own to.
pub(super) struct Held {
    pub(super) names: HashMap<String, String>,
    pub(super) values: Item,
}
/// Completion with the result; the record leaves the attention index.
pub(super) const COMPLETE_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #res = :res, #enc = :enc REMOVE #att";
/// Settled as outcome unknown: completed, with no result to replay, and in the attention index.
pub(super) const UNKNOWN_UPDATE: &str = "SET #st = :completed, #exp = :exp, #unk = :true, \
     #att = :att_unknown REMOVE #res, #enc, #omit";
/// What an operator may settle ([`Records::settle`]): still carrying the token read, live, and
/// either settled as outcome unknown or in progress with its lease ended.
pub(super) const SETTLEABLE_CONDITION: &str = "#tok = :tok AND #exp >= :now_s AND \
     ((#st = :completed AND #unk = :true) OR (#st = :in_progress AND #lease < :now_ms))";
/// An operator's reply replaces the unknown marker.
pub(super) const SETTLE_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #res = :res, #enc = :enc REMOVE #unk, #omit, #att";
/// What an operator may evict ([`Records::evict`]): the version read, expired or completed with
/// a known outcome.
pub(super) const EVICTABLE_CONDITION: &str =
    "#tok = :tok AND (#exp < :now_s OR (#st = :completed AND attribute_not_exists(#unk)))";
/// A longer lease for a claim still held (a long or late-starting side effect).
pub(super) const EXTEND_UPDATE: &str = "SET #lease = :lease, #exp = :exp";
/// [`HELD_CONDITION`], and the lease still the one the claim was read with (`:read_lease`): a
/// holder that moved it since is alive.
pub(super) const HAND_OVER_CONDITION: &str =
    concat!(held_condition!(), " AND #lease = :read_lease");
/// A claim handed to a new token, with its lease moved (a request that goes on under its own claim).
pub(super) const HAND_OVER_UPDATE: &str = "SET #tok = :new_tok, #lease = :lease, #exp = :exp";
/// Completion without the result (too large to store): the call stays settled.
pub(super) const COMPLETE_OMITTED_UPDATE: &str =
    "SET #st = :completed, #exp = :exp, #omit = :omit REMOVE #res, #enc, #att";
/// Completion with the result in the results bucket: the record points to it.
pub(super) const COMPLETE_OFFLOADED_UPDATE: &str = "SET #st = :completed, #exp = :exp, #obj = :obj, \
     #sha = :sha, #size = :size REMOVE #res, #enc, #att";

impl DynamoDbStore {
    pub(super) fn held(&self, token: &LeaseToken, now_ms: i64) -> Held {
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
}
