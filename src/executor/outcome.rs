//! What the executor is handed and what it hands back: a keyed call, what its side effect gave,
//! and how the call ended.

use std::sync::Arc;

use crate::decide::AfterRun;
use crate::decide::ReplyClass;
use crate::key::{Call, Delivery};
use crate::store::StoreError;
use crate::telemetry::Outcome;

/// One call, keyed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keyed<'a> {
    /// The typed key, or the caller's key scoped ([`crate::key::CallerKeyed`]), 32 hex digits.
    pub(crate) key: &'a str,
    /// The strict fingerprint (keyer B) of the arguments, stored beside the result; for a
    /// caller-keyed call, the typed canonical form's (a repeat must match it).
    pub(crate) fingerprint: &'a str,
    /// The key core's view of the call (to explain which rules made a repeat meet the original).
    pub(crate) call: &'a Call<'a>,
    /// What an unknown outcome allows (the tool's policy, or what its Gateway listing says).
    pub(crate) delivery: Delivery,
    /// Set for a call keyed by its caller's key: a record under the key with another fingerprint
    /// is a mismatch.
    pub(crate) caller: Option<CallerKey<'a>>,
}

/// What a call keyed by its caller's own key carries beside its key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerKey<'a> {
    /// The arguments' leaf digests ([`crate::key::CallerKeyed::path_digests`]), stored with the
    /// claim so that a mismatch can name its paths; `None` when too many to store.
    pub(crate) path_digests: Option<&'a str>,
    /// The strict fingerprint of the arguments ([`crate::key::CallerKeyed::arguments`]).
    pub(crate) arguments: &'a str,
}

/// What running the side effect gave.
#[derive(Debug)]
pub(crate) enum ToolRun<E> {
    /// A reply, classified by the caller's format.
    Replied {
        /// The reply, in the caller's format.
        reply: Vec<u8>,
        /// Whether it is a result to keep or an error to release.
        class: ReplyClass,
    },
    /// No usable reply. `outcome_unknown` when the side effect may have happened (a timeout, a
    /// lost response): the claim is then kept until its lease ends instead of released.
    Failed {
        /// Why there is no reply.
        error: E,
        /// True when the side effect may have happened.
        outcome_unknown: bool,
    },
}

/// How a keyed call ended.
#[derive(Debug)]
pub(crate) enum Settled<E> {
    /// The side effect ran for this call (also shadow mode's repeats: see `outcome`).
    Executed {
        /// The tool's reply.
        reply: Vec<u8>,
    },
    /// A completed record answered: from the store, the warm cache, or after waiting.
    Replayed {
        /// The stored reply.
        reply: Arc<[u8]>,
        /// When the call first ran (its claim was taken), epoch ms.
        first_ran_ms: i64,
    },
    /// An `at_most_once` call whose outcome is unknown (settled so, or its owner's lease ended
    /// unsettled): the side effect was not run again, and will not be until an operator settles it.
    OutcomeUnknown,
    /// The caller's idempotency key was first used for other arguments: nothing ran. `paths` are
    /// the argument paths that differ (JSON Pointers, never values); `None` when they were not
    /// recorded.
    KeyReused {
        /// The differing paths.
        paths: Option<Vec<String>>,
    },
    /// A completed record answered whose result was too large to store (`bytes` long): the call
    /// ran, and its result cannot be shown again.
    AlreadyRan {
        /// Size of the result that was not stored.
        bytes: usize,
    },
    /// An identical call still holds the key. `retry_after_ms` is when its lease ends.
    InProgress {
        /// Epoch milliseconds when the holder's lease ends, if known.
        retry_after_ms: Option<i64>,
    },
    /// The store could not be asked; the side effect did not run.
    StoreDown(StoreError),
    /// The side effect failed (see [`ToolRun::Failed`]).
    ToolFailed {
        /// Why the side effect failed.
        error: E,
        /// True when the side effect may have happened (the claim is kept, not released).
        outcome_unknown: bool,
    },
    /// Too little time was left to run the side effect; it did not run.
    NoTime,
}

/// [`Settled`] with what the report needs.
#[derive(Debug)]
pub(crate) struct Finished<E> {
    /// How the call ended.
    pub(crate) settled: Settled<E>,
    /// The outcome to report.
    pub(crate) outcome: Outcome,
    /// For replays: the normalization rules that made this call meet the stored one.
    pub(crate) rules: Vec<&'static str>,
}

/// Who takes a claim for a side effect that runs elsewhere ([`crate::executor::Executor::open`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestOwner {
    /// The name the claim's token carries ([`crate::store::LeaseToken::for_owner`]).
    pub(crate) name: String,
    /// The name stands for one request and no other: a claim found under it is this request's
    /// own, taken by an earlier invocation for the same request (the Gateway invokes an
    /// interceptor again after a failure or a timeout), and goes on as the owner's.
    pub(crate) is_one_request: bool,
    /// The record the claim is noted under ([`RecordedClaim`]), found again by whatever settles
    /// it; `None` when the settling side derives the key itself.
    pub(crate) noted_at: Option<String>,
}

/// Which key a request claimed and under which owner, as noted beside the claim (its JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RecordedClaim {
    /// The key claimed.
    pub(crate) key: String,
    /// The owner the claim's token names.
    pub(crate) owner: String,
}

/// A claim [`crate::executor::Executor::open`] took, as the invocation that took it recorded it:
/// what settles it later ([`crate::executor::Executor::finish_claimed`]) acts on this, never on a
/// key derived again from a configuration or listing that may have changed since.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimMade<'a> {
    /// The key claimed.
    pub(crate) key: &'a str,
    /// The owner the claim's token names ([`RequestOwner::name`]).
    pub(crate) owner: &'a str,
    /// The policy entry the settled record's expiry comes from.
    pub(crate) policy_name: &'a str,
}

/// What [`crate::executor::Executor::open`] ended with.
#[derive(Debug)]
pub(crate) enum Opened<E> {
    /// This request holds the claim: let the side effect run.
    Claimed,
    /// Shadow mode: nothing was claimed for this request (`outcome` says what enforce mode would
    /// have done); let the side effect run.
    Unclaimed(Outcome),
    /// The call is answered without running the side effect (replay, in progress, store down).
    Answered(Finished<E>),
}

/// What [`crate::executor::Executor::finish_claimed`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishedElsewhere {
    /// This request's claim was completed, released or kept.
    Settled(AfterRun),
    /// The call was already completed (a replayed answer, or an earlier owner's reply).
    AlreadyCompleted,
    /// No claim of this request holds the key (another request's claim, or none).
    NoClaim,
}
