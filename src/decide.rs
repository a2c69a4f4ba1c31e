//! The executor's decisions, as pure functions. No I/O, no clock: the executor
//! ([`crate::executor`]) performs what they say.
//!
//! - [`decide`]: from what the store said about a claim, the mode and the time left to wait, to
//!   the [`NextAction`]; after a wait, the executor asks again.
//! - [`after_run`]: from what the side effect gave, to what becomes of the claim ([`AfterRun`]).
//!
//! | the side effect gave | claim | a repeat gets |
//! |---|---|---|
//! | a reply: success | completed | the stored reply |
//! | a reply: failed while acting (FAILURE, 5xx, `isError`) | as the claim's `on_failure` says: completed (replay), completed for a short retention (replay for), released (retry) | the stored reply, or a new run |
//! | a reply: failed, and it says a retry may succeed (a result flagged `toolcall-dedup/retryable`) | released | a new run |
//! | a reply: input refused before acting (REPROMPT, 4xx but 409/429) | released | a new run |
//! | a reply: not now (409, 429) | kept until the lease ends (`at_most_once`: settled unknown) | "in progress", then a new run (`at_most_once`: "outcome unknown" until an operator settles it) |
//! | no reply, and nothing ran (a `DedupNothingRan` error, an invoke never sent) | released | a new run |
//! | no reply, outcome unknown (crash, timeout, lost answer, unusable reply) | kept until the lease ends (`at_most_once`: settled unknown) | "in progress", then a new run (`at_most_once`: "outcome unknown" until an operator settles it) |

use std::time::Duration;

use crate::key::{Delivery, OnFailure};
use crate::store::{ClaimOutcome, LeaseToken, Record, StoreError};

/// What the executor does with a repeat (`DEDUP_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replay repeats: the tool runs once per key.
    Enforce,
    /// Run every call, but record claims and count "would have replayed".
    Shadow,
    /// Pass-through kill switch: no key, no store, the tool is invoked as if we were not there.
    Off,
}

/// What the record under a caller's own key must hold for a call to be the same call: the same
/// typed fingerprint, or, when the tool's policy (its schema) or the typed keyer's version changed
/// since the record was written, the same strict fingerprint (the typed form moved with the schema
/// or the rules; the arguments did not). A repeat across a schema change or a pin move is then the
/// same call, never "other arguments".
#[derive(Debug, Clone, Copy)]
pub struct CallerMatch<'a> {
    /// The typed fingerprint of this call's arguments.
    pub(crate) fingerprint: &'a str,
    /// Their strict fingerprint.
    pub(crate) arguments: &'a str,
    /// The tool's policy fingerprint now.
    pub(crate) policy: Option<&'a str>,
    /// What keyed this call ([`crate::key::KeyerVersion::caller_label`]), as its record would say.
    pub(crate) keyer: &'a str,
}

impl CallerMatch<'_> {
    /// Whether `record` is of this same call (see the type's docs).
    pub(crate) fn meets(&self, record: &Record) -> bool {
        let retyped = record.about.policy.as_deref() != self.policy
            || record.about.keyer.as_deref() != Some(self.keyer);
        record.fingerprint == self.fingerprint
            || (retyped && record.about.arguments.as_deref() == Some(self.arguments))
    }
}

/// What to do next with one keyed call.
#[derive(Debug)]
pub enum NextAction {
    /// This invocation owns the key: run the tool, then complete or release under `token`.
    Execute {
        /// The claim's fencing token.
        token: LeaseToken,
    },
    /// The live claim of the request this invocation answers, taken by an earlier invocation
    /// for it (the Gateway invokes an interceptor again): hand it to a fresh token with a lease
    /// counted from now ([`crate::store::Store::hand_over`]), then let the side effect run. Never
    /// the old token: a copy of it may be remembered elsewhere as a lost claim to release.
    Resume(Record),
    /// The key was completed: answer with the stored reply.
    Replay(Record),
    /// The caller's idempotency key was first used for other arguments: refuse, run nothing.
    Mismatch(Record),
    /// The call's outcome is unknown and its tool is `at_most_once` (settled so, or its claim's
    /// lease ended unsettled): answer "outcome unknown", never run it again.
    Unknown(Record),
    /// An identical call holds the key and there is time to wait for it.
    Wait(Record),
    /// An identical call holds the key and there is no time left to wait: answer "in progress".
    Busy(Record),
    /// The store could not be asked: answer without running the tool (fail closed).
    StoreDown(StoreError),
    /// Shadow mode: run the tool without a claim. `seen` is the record enforce mode would have
    /// replayed or waited for; `None` when the store was unreachable (shadow never blocks).
    Shadow {
        /// The record enforce mode would have acted on.
        seen: Option<Record>,
    },
}

/// Decides what a claim's outcome means at `now_ms`. `wait_left` is what remains of the wait
/// bound (the smaller of `DEDUP_WAIT_MS` and the time before the deadline, less the answer margin).
/// `caller` is set for a call keyed by its caller's key: a record of other arguments under that
/// key (`CallerMatch::meets`) is a mismatch, whatever its state. `own` names the request this invocation
/// answers, when the name stands for that one request (`crate::executor::RequestOwner`): a live
/// claim under it is this request's own, taken by an earlier invocation for it, and is carried on.
pub fn decide(
    claim: Result<ClaimOutcome, StoreError>,
    mode: Mode,
    wait_left: Duration,
    now_ms: i64,
    caller: Option<CallerMatch<'_>>,
    own: Option<&str>,
) -> NextAction {
    let shadow = mode == Mode::Shadow;
    match claim {
        // Shadow mode claims too (it counts "would have replayed"), and runs under its claim
        // when it got one, so that a later enforce rollout finds real records.
        Ok(ClaimOutcome::Claimed { token }) => NextAction::Execute { token },
        Ok(ClaimOutcome::InProgress(record))
            if !shadow
                && own.is_some_and(|o| record.token.owner() == Some(o))
                // Taken by the request's RESPONSE to settle: its target ran.
                && !record.token.is_settling()
                && caller.is_none_or(|c| c.meets(&record))
                && !record.lease_ended(now_ms) =>
        {
            NextAction::Resume(record)
        }
        Ok(ClaimOutcome::Completed(record) | ClaimOutcome::InProgress(record)) if shadow => {
            NextAction::Shadow { seen: Some(record) }
        }
        Err(_) if shadow => NextAction::Shadow { seen: None },
        Err(e) => NextAction::StoreDown(e),
        Ok(ClaimOutcome::Completed(record) | ClaimOutcome::InProgress(record))
            if caller.is_some_and(|c| !c.meets(&record)) =>
        {
            NextAction::Mismatch(record)
        }
        Ok(ClaimOutcome::Completed(record) | ClaimOutcome::InProgress(record))
            if record.is_outcome_unknown(now_ms) =>
        {
            NextAction::Unknown(record)
        }
        Ok(ClaimOutcome::Completed(record)) => NextAction::Replay(record),
        Ok(ClaimOutcome::InProgress(record)) if wait_left.is_zero() => NextAction::Busy(record),
        Ok(ClaimOutcome::InProgress(record)) => NextAction::Wait(record),
    }
}

/// How a side effect ended, as far as the claim is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The tool answered, and its reply says this.
    Replied(ReplyClass),
    /// No usable reply. `outcome_unknown` unless it is proven that nothing ran.
    Failed {
        /// True when the side effect may have happened.
        outcome_unknown: bool,
    },
}

/// What becomes of a claim once its side effect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Store the reply: every repeat replays it.
    Complete,
    /// Store the reply for this long only (a failure under `failures` replay for a retention):
    /// repeats within it replay it, a call after it runs again.
    CompleteFor(Duration),
    /// Delete the claim: nothing happened, so a retry runs.
    Release,
    /// Leave the claim in progress until its lease ends: the side effect may have happened.
    Keep,
    /// Settle the call as outcome unknown: the side effect may have happened, and the tool is
    /// never re-run automatically (`at_most_once`).
    SettleUnknown,
}

/// The after-run rule (the table in the module docs): what a side effect's end does to its claim,
/// under the tool's `delivery` policy and the claim's rule for failures.
pub fn after_run(end: RunEnd, delivery: Delivery, on_failure: OnFailure) -> AfterRun {
    let unknown = match delivery {
        Delivery::AtLeastOnce => AfterRun::Keep,
        Delivery::AtMostOnce => AfterRun::SettleUnknown,
    };
    match end {
        RunEnd::Replied(ReplyClass::Success) => AfterRun::Complete,
        RunEnd::Replied(ReplyClass::Failure) => match on_failure {
            OnFailure::Replay => AfterRun::Complete,
            OnFailure::ReplayFor(retention) => AfterRun::CompleteFor(retention),
            OnFailure::Retry => AfterRun::Release,
        },
        RunEnd::Replied(ReplyClass::Rejected | ReplyClass::Retryable) => AfterRun::Release,
        RunEnd::Replied(ReplyClass::NotNow) => unknown,
        RunEnd::Failed {
            outcome_unknown: false,
        } => AfterRun::Release,
        RunEnd::Failed {
            outcome_unknown: true,
        } => unknown,
    }
}

/// What a tool's reply says it did: the part of the tool's contract that decides whether the
/// call is stored, released or kept (see [`crate::decide::after_run`]). The rule is the payment
/// APIs': a call is saved once the tool started acting, and only a refusal of the input before
/// acting lets an identical retry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyClass {
    /// The tool completed: the reply is stored and replayed to repeats.
    Success,
    /// The tool failed while acting (Bedrock FAILURE, HTTP 5xx, MCP `isError`): stored and
    /// replayed as the claim's `on_failure` says (for the retention, for a short one, or not).
    Failure,
    /// The tool failed and says a retry may succeed (an MCP-style result whose `_meta` has
    /// `"toolcall-dedup/retryable": true`): never pinned, the claim is released. A bare HTTP 503
    /// is not such a word: a tool that moved money and then lost its provider may answer it.
    Retryable,
    /// The tool refused its input before acting (Bedrock REPROMPT, HTTP 4xx other than 409 and
    /// 429): nothing happened, so the claim is released and a retry runs.
    Rejected,
    /// "Not now" (HTTP 409 conflict, 429 too many requests): the tool may have acted first, so
    /// the claim is kept until its lease ends, as for an unknown outcome.
    NotNow,
}

impl ReplyClass {
    /// The class of a bare HTTP status (an OpenAPI action group's reply without a
    /// `responseState`).
    pub fn from_http_status(status: u64) -> ReplyClass {
        match status {
            409 | 429 => ReplyClass::NotNow,
            400..=499 => ReplyClass::Rejected,
            500.. => ReplyClass::Failure,
            _ => ReplyClass::Success,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Status;

    #[test]
    fn after_run_stores_what_acted_releases_what_refused_and_keeps_what_is_unknown() {
        let table = [
            (RunEnd::Replied(ReplyClass::Success), AfterRun::Complete),
            (RunEnd::Replied(ReplyClass::Failure), AfterRun::Complete),
            (RunEnd::Replied(ReplyClass::Rejected), AfterRun::Release),
            (RunEnd::Replied(ReplyClass::NotNow), AfterRun::Keep),
            (
                RunEnd::Failed {
                    outcome_unknown: false,
                },
                AfterRun::Release,
            ),
            (
                RunEnd::Failed {
                    outcome_unknown: true,
                },
                AfterRun::Keep,
            ),
        ];
        for (end, expected) in table {
            assert_eq!(
                after_run(end, Delivery::AtLeastOnce, OnFailure::Replay),
                expected,
                "{end:?}"
            );
            // At most once changes only what may have happened: it is settled, never kept.
            let at_most_once = match expected {
                AfterRun::Keep => AfterRun::SettleUnknown,
                other => other,
            };
            assert_eq!(
                after_run(end, Delivery::AtMostOnce, OnFailure::Replay),
                at_most_once,
                "{end:?}"
            );
        }
    }

    /// Issue 51: only a failure follows the claim's `on_failure`; a success is stored, a refusal
    /// and a retryable failure released, whatever it says.
    #[test]
    fn a_failure_follows_the_claims_rule_and_a_retryable_one_is_never_pinned() {
        let brief = Duration::from_secs(60);
        let failure = RunEnd::Replied(ReplyClass::Failure);
        for delivery in [Delivery::AtLeastOnce, Delivery::AtMostOnce] {
            assert_eq!(
                after_run(failure, delivery, OnFailure::Replay),
                AfterRun::Complete
            );
            assert_eq!(
                after_run(failure, delivery, OnFailure::ReplayFor(brief)),
                AfterRun::CompleteFor(brief)
            );
            assert_eq!(
                after_run(failure, delivery, OnFailure::Retry),
                AfterRun::Release
            );
            for on_failure in [
                OnFailure::Replay,
                OnFailure::ReplayFor(brief),
                OnFailure::Retry,
            ] {
                let end = |class| after_run(RunEnd::Replied(class), delivery, on_failure);
                assert_eq!(end(ReplyClass::Success), AfterRun::Complete);
                assert_eq!(end(ReplyClass::Retryable), AfterRun::Release);
                assert_eq!(end(ReplyClass::Rejected), AfterRun::Release);
            }
        }
        // A bare 503 is a failure like any 5xx: only the tool's explicit word releases it.
        assert_eq!(ReplyClass::from_http_status(503), ReplyClass::Failure);
        assert_eq!(ReplyClass::from_http_status(500), ReplyClass::Failure);
    }

    fn record(status: Status) -> Record {
        Record {
            key: "k".into(),
            status,
            expires_at_s: 10,
            lease_until_ms: 5_000,
            token: LeaseToken::new("t"),
            fingerprint: "f".into(),
            tool: "tool".into(),
            created_at_ms: 0,
            result: (status == Status::Completed).then(|| b"{}".to_vec()),
            omitted_result_bytes: None,
            outcome_unknown: false,
            at_most_once: false,
            on_failure: OnFailure::Replay,
            path_digests: None,
            offloaded: None,
            about: Default::default(),
        }
    }

    fn down() -> StoreError {
        StoreError::Corrupt("down".into())
    }

    const SOME: Duration = Duration::from_millis(100);
    /// Before `record`'s lease ends (5 000) and its expiry (10 s).
    const NOW: i64 = 1_000;

    #[test]
    fn an_unknown_outcome_of_an_at_most_once_call_is_answered_never_waited_for_or_run() {
        let mut settled = record(Status::Completed);
        settled.result = None;
        settled.outcome_unknown = true;
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::Completed(settled)),
                Mode::Enforce,
                SOME,
                NOW,
                None,
                None
            ),
            NextAction::Unknown(_)
        ));
        let mut held = record(Status::InProgress);
        held.at_most_once = true;
        // While the lease runs, the owner may still settle it: wait as for any call in flight.
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::InProgress(held.clone())),
                Mode::Enforce,
                SOME,
                NOW,
                None,
                None
            ),
            NextAction::Wait(_)
        ));
        // Its lease ended unsettled: the owner died, and nobody may run it again.
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::InProgress(held.clone())),
                Mode::Enforce,
                SOME,
                5_001,
                None,
                None
            ),
            NextAction::Unknown(_)
        ));
        // Expired records are absent: a store would have let the claim through.
        assert!(!held.is_outcome_unknown(11_000));
        assert!(!held.is_claimable(5_001) && held.is_claimable(11_000));
        held.at_most_once = false;
        assert!(
            held.is_claimable(5_001),
            "at least once: taken over after the lease"
        );
    }

    #[test]
    fn a_caller_key_met_with_other_arguments_is_a_mismatch_in_any_state() {
        for status in [Status::Completed, Status::InProgress] {
            let claim = || match status {
                Status::Completed => ClaimOutcome::Completed(record(status)),
                Status::InProgress => ClaimOutcome::InProgress(record(status)),
            };
            let other = CallerMatch {
                fingerprint: "other",
                arguments: "a",
                policy: None,
                keyer: "caller/v2+typed/v2",
            };
            assert!(matches!(
                decide(Ok(claim()), Mode::Enforce, SOME, NOW, Some(other), None),
                NextAction::Mismatch(_)
            ));
            let same = CallerMatch {
                fingerprint: "f",
                ..other
            };
            assert!(!matches!(
                decide(Ok(claim()), Mode::Enforce, SOME, NOW, Some(same), None),
                NextAction::Mismatch(_)
            ));
        }
    }

    /// A schema change moves the typed fingerprint of the same arguments: the strict one, stored
    /// with the record, tells the same call from another, and only across a policy change.
    #[test]
    fn a_caller_key_met_across_a_schema_change_is_the_same_call_only_for_the_same_arguments() {
        let mut stored = record(Status::Completed);
        stored.about.policy = Some("p1".into());
        stored.about.arguments = Some("a".into());
        stored.about.keyer = Some("caller/v2+typed/v2".into());
        let retyped = CallerMatch {
            fingerprint: "f-typed-by-p2",
            arguments: "a",
            policy: Some("p2"),
            keyer: "caller/v2+typed/v2",
        };
        assert!(
            retyped.meets(&stored),
            "the same arguments, typed by another schema"
        );
        assert!(
            !CallerMatch {
                arguments: "b",
                ..retyped
            }
            .meets(&stored),
            "other arguments"
        );
        assert!(
            !CallerMatch {
                policy: Some("p1"),
                ..retyped
            }
            .meets(&stored),
            "under the same policy the typed fingerprint decides"
        );
        // A pin move (issue 52) retypes the same arguments as a schema change does.
        let moved = CallerMatch {
            policy: Some("p1"),
            keyer: "caller/v2+typed/v3",
            ..retyped
        };
        assert!(
            moved.meets(&stored),
            "the same arguments, typed by another version"
        );
        assert!(
            !CallerMatch {
                arguments: "b",
                ..moved
            }
            .meets(&stored),
            "other arguments across a pin move"
        );
        stored.about.arguments = None;
        assert!(
            !retyped.meets(&stored),
            "a record from before the strict fingerprint"
        );
    }

    #[test]
    fn enforce_mode() {
        let token = LeaseToken::new("mine");
        assert!(matches!(
            decide(Ok(ClaimOutcome::Claimed { token: token.clone() }), Mode::Enforce, SOME, NOW, None, None),
            NextAction::Execute { token: t } if t == token
        ));
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::Completed(record(Status::Completed))),
                Mode::Enforce,
                Duration::ZERO,
                NOW,
                None,
                None
            ),
            NextAction::Replay(_)
        ));
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::InProgress(record(Status::InProgress))),
                Mode::Enforce,
                SOME,
                NOW,
                None,
                None
            ),
            NextAction::Wait(_)
        ));
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::InProgress(record(Status::InProgress))),
                Mode::Enforce,
                Duration::ZERO,
                NOW,
                None,
                None
            ),
            NextAction::Busy(_)
        ));
        assert!(matches!(
            decide(Err(down()), Mode::Enforce, SOME, NOW, None, None),
            NextAction::StoreDown(_)
        ));
    }

    #[test]
    fn a_live_claim_of_this_very_request_is_resumed_under_a_new_token_never_its_old_one() {
        let mut own = record(Status::InProgress);
        own.token = LeaseToken::for_owner(Some("req-a"));
        let resumed = decide(
            Ok(ClaimOutcome::InProgress(own.clone())),
            Mode::Enforce,
            SOME,
            NOW,
            None,
            Some("req-a"),
        );
        assert!(matches!(resumed, NextAction::Resume(r) if r.token == own.token));
        // Another request's claim, or one whose lease ended, is not this request's to go on under.
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::InProgress(own.clone())),
                Mode::Enforce,
                SOME,
                NOW,
                None,
                Some("req-b")
            ),
            NextAction::Wait(_)
        ));
        own.lease_until_ms = NOW - 1;
        assert!(!matches!(
            decide(
                Ok(ClaimOutcome::InProgress(own)),
                Mode::Enforce,
                SOME,
                NOW,
                None,
                Some("req-a")
            ),
            NextAction::Resume(_)
        ));
    }

    #[test]
    fn shadow_mode_never_blocks_and_never_replays() {
        assert!(matches!(
            decide(
                Ok(ClaimOutcome::Claimed {
                    token: LeaseToken::new("t")
                }),
                Mode::Shadow,
                SOME,
                NOW,
                None,
                None
            ),
            NextAction::Execute { .. }
        ));
        for status in [Status::Completed, Status::InProgress] {
            let claim = match status {
                Status::Completed => ClaimOutcome::Completed(record(status)),
                Status::InProgress => ClaimOutcome::InProgress(record(status)),
            };
            assert!(matches!(
                decide(Ok(claim), Mode::Shadow, Duration::ZERO, NOW, None, None),
                NextAction::Shadow { seen: Some(_) }
            ));
        }
        assert!(matches!(
            decide(Err(down()), Mode::Shadow, SOME, NOW, None, None),
            NextAction::Shadow { seen: None }
        ));
    }
}
