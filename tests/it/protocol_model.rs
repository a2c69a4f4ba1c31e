//! The claim / lease / fence protocol, model-checked with stateright.
//!
//! N callers retry one call against one key. Every transition asks the product: a claim's fate is
//! the store rule `Record::is_claimable` (and `ClaimRequest::record_expiry` for what a claim
//! writes), what a caller does with it is `decide::decide`, and what a side effect's end does to
//! the claim is `decide::after_run`. The model only holds the state (one record, the callers, a
//! clock) and the store's fence (a write applies while the record is live, in progress and carries
//! the writer's token), so the model and the product cannot drift.
//!
//! Modelled: callers with clocks skewed by up to one tick; a tool that runs up to its timeout,
//! crashes after its effect, times out, refuses its input, says "not now", or answers late; a
//! claim that applied but whose answer was lost (released at the caller's next call, fenced); a
//! completion that never lands; an invocation killed mid-call; leases ending, takeovers, records
//! expiring and still present; `at_least_once` and `at_most_once` tools; the scheduled sweep
//! (issue 51), which lists the attention index with a clock up to a tick ahead and settles, in a
//! later step, what it listed: the listing may be stale by then.
//!
//! Invariants:
//! - **at most once**: a second effect happens only after a takeover the protocol allows (the
//!   earlier owner can no longer act, and either its record expired or its lease ended under
//!   `at_least_once`);
//! - **replies**: every reply a caller gets is one an effect produced, and without an allowed
//!   takeover they are all the same;
//! - **no claim held past its lease**: an in-progress record whose lease ended (plus the skew) is
//!   claimable, or says outcome unknown (`at_most_once`);
//! - **fence**: a stored result was produced by the owner whose token the record carries;
//! - **the sweep settles only claims whose owner can no longer act**: what it listed may have been
//!   released and claimed again before its settle is written.
//!
//! Three bugs come back behind [`Bug`] and the checker must find each with a trace: a claim whose
//! TTL is shorter than its lease, a crash-type error that releases the claim, and a sweep that
//! settles the record it listed without its token fence.
//!
//! `DEDUP_MODEL_CALLERS` (default 2), `DEDUP_MODEL_TICKS` (default 7) and
//! `DEDUP_MODEL_ATTEMPTS` (default 2) size the run; docs/testing.md records a larger one.

use std::time::Duration;

use stateright::{Checker, HasDiscoveries, Model, Property};
use toolcall_dedup::config::Mode;
use toolcall_dedup::internals::decide::ReplyClass;
use toolcall_dedup::internals::decide::{AfterRun, NextAction, RunEnd, after_run, decide};
use toolcall_dedup::internals::sweep::is_left_unsettled;
use toolcall_dedup::key::{Delivery, OnFailure};
use toolcall_dedup::store::{
    CallAbout, ClaimOutcome, ClaimRequest, LeaseToken, Record, Status, StoreError,
};

/// One tick of the model clock, in the product's milliseconds: a minute, so that the product's
/// settle margin (`SETTLE_MARGIN_MS`, what the sweep and an operator keep back for a clock running
/// ahead) is one tick, the skew the model gives a clock.
const TICK_MS: i64 = 60_000;

/// A fixed bug re-introduced at the model's boundary with the product, to show the checker finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bug {
    /// A claim writes `expires_at = now + ttl` with a TTL shorter than its lease, instead of
    /// `ClaimRequest::record_expiry` (the record turns absent while its owner still runs).
    TtlShorterThanLease,
    /// A crash-type error (outcome unknown) releases the claim instead of keeping it.
    CrashReleases,
    /// The sweep settles the key's in-progress record whoever holds it now, instead of fencing the
    /// settle with the token of the claim it listed.
    SweepUnfenced,
    /// The sweep settles under the listed claim's token instead of first taking the claim under a
    /// token of its own: a second sweep that listed the claim meets the first's settle as a retry
    /// of its own would, succeeds, and reports the call again (the code before stop 60).
    SweepSettlesUnderTheHoldersToken,
    /// The invocation announces the call it settled as outcome unknown whether or not its settle
    /// write landed (the code before stop 61): a write that never landed leaves the claim to
    /// the sweep, which announces the call again.
    AnnouncesAFailedSettle,
    /// The sweep's hand-over is fenced by the listed claim's token only, not by its lease too (the
    /// code before stop 61): a holder that renewed after the listing loses its claim to the sweep.
    SweepFencedByTokenOnly,
}

#[derive(Debug, Clone)]
struct Protocol {
    callers: usize,
    ticks: u8,
    attempts: u8,
    /// The tool's own timeout, in ticks: its effect happens within it.
    run_ticks: u8,
    /// The lease margin over the tool's timeout (covers the skew).
    margin_ticks: u8,
    /// Record life from completion.
    ttl_ticks: u8,
    delivery: Delivery,
    /// What a failure reply does (issue 51): the claim records it, and `after_run` follows it.
    on_failure: OnFailure,
    /// Owners renew their lease while they run (the in-process guard's `Lease::Renewed`), even
    /// after it ended (a renewal that comes through after an outage).
    renewing: bool,
    bug: Option<Bug>,
}

/// The one record, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Stored {
    status: Status,
    token: u8,
    lease_until_ms: i64,
    expires_at_s: i64,
    /// The effect whose reply is stored.
    result: Option<u8>,
    outcome_unknown: bool,
    at_most_once: bool,
    /// The token of the claim that wrote this record: which call's life it is, whoever holds it
    /// after a hand-over.
    claimed_under: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// About to send a claim (again).
    Ready,
    /// Holds the claim `token` since tick `started`; `effect` once the tool acted.
    Running {
        token: u8,
        started: u8,
        effect: Option<u8>,
    },
    /// Answered: a reply (the effect that produced it) or a refusal.
    Replied(u8),
    Refused,
    /// The invocation was killed mid-call: it writes nothing more, but the tool it invoked may
    /// still act within its timeout.
    Dead {
        token: u8,
        started: u8,
        effect: Option<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Caller {
    phase: Phase,
    attempts_left: u8,
    /// Ticks this caller's clock runs ahead.
    skew: u8,
    /// A claim written while every answer to it was lost: released (fenced) at the next claim.
    orphan: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    tick: u8,
    record: Option<Stored>,
    callers: Vec<Caller>,
    /// Effects that happened, in order; the value is the claim token they ran under.
    effects: Vec<u8>,
    next_token: u8,
    /// A takeover the protocol allows happened (see the module docs).
    rerun_allowed: bool,
    /// Effects that ended in a failure the claim's rule lets run again (released, or replayed
    /// for a short retention): each allows one more effect.
    retried_failures: u8,
    /// What each of two sweeps (two containers' schedules) listed and has not settled yet: the
    /// claim's token, its expiry and its lease.
    sweep_listed: [Option<(u8, i64, i64)>; 2],
    /// The sweep settled a claim; one whose owner could still act.
    swept: bool,
    swept_a_live_owner: bool,
    /// Calls the sweeps reported settling, so announced.
    sweep_reports: u8,
    /// The record lives ([`Stored::claimed_under`]) announced as settled outcome unknown, by
    /// invocations and sweeps, in order.
    announced: Vec<u8>,
}

/// How a running side effect ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ending {
    /// The tool answered success; the completion is written.
    Replied,
    /// The tool answered, but the completion write never lands (store down, container gone).
    CompletionLost,
    /// Crashed after its effect (`Unhandled`, `Runtime.ExitError`).
    CrashAfterEffect,
    /// Crashed after its effect, and the write that settles the call (as outcome unknown, for
    /// an `at_most_once` tool) never lands: refused, with nothing applied.
    CrashSettleLost,
    /// No answer in time: the effect may or may not have happened.
    TimedOut,
    /// The tool proved nothing ran (`DedupNothingRan`).
    NothingRan,
    /// Refused its input before acting (REPROMPT, HTTP 4xx).
    Rejected,
    /// "Not now" (HTTP 409/429): it may have acted first.
    NotNow,
    /// Acted and answered a failure (Bedrock FAILURE, HTTP 5xx, MCP `isError`).
    Failed,
    /// Answered a failure it says a retry may cure (HTTP 503, flagged retryable).
    Retryable,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Claim(usize),
    /// A claim that applies, but every answer to it is lost.
    ClaimAnswerLost(usize),
    Effect(usize),
    Finish(usize, Ending),
    Kill(usize),
    /// A sweep (of two) reads the attention index, its clock this many ticks ahead.
    SweepList(usize, u8),
    /// A sweep writes its settle for what it listed.
    SweepSettle(usize),
    /// An owner renews its lease (and its time to act goes on).
    Renew(usize),
}

impl Protocol {
    fn now_ms(&self, state: &State, caller: usize) -> i64 {
        i64::from(state.tick + state.callers[caller].skew) * TICK_MS
    }

    fn lease_ms(&self) -> i64 {
        i64::from(self.run_ticks + self.margin_ticks) * TICK_MS
    }

    /// Whether a claim can outlive its lease and the settle margin here: an `at_most_once` tool's,
    /// with records that live longer than that.
    fn sweep_can_settle(&self) -> bool {
        self.delivery == Delivery::AtMostOnce
            && self.ttl_ticks > self.run_ticks + self.margin_ticks + 1
    }

    /// A record's life from a write at `now_ms`, as the epoch second it expires at.
    fn life_s(&self, now_ms: i64) -> i64 {
        (now_ms + i64::from(self.ttl_ticks) * TICK_MS).div_euclid(1000)
    }

    fn product_record(stored: &Stored) -> Record {
        Record {
            key: "k".into(),
            status: stored.status,
            expires_at_s: stored.expires_at_s,
            lease_until_ms: stored.lease_until_ms,
            token: LeaseToken::new(stored.token.to_string()),
            fingerprint: "f".into(),
            tool: "charge_card".into(),
            created_at_ms: 0,
            result: stored.result.map(|effect| vec![effect]),
            omitted_result_bytes: None,
            outcome_unknown: stored.outcome_unknown,
            at_most_once: stored.at_most_once,
            on_failure: OnFailure::Replay,
            path_digests: None,
            offloaded: None,
            about: Default::default(),
        }
    }

    /// The store's fence: live, in progress, and carrying `token`.
    fn held_by(record: &Option<Stored>, token: u8, now_ms: i64) -> bool {
        record.as_ref().is_some_and(|r| {
            r.status == Status::InProgress
                && r.token == token
                && !Self::product_record(r).is_expired(now_ms)
        })
    }

    /// Whether the caller holding `token` can no longer act (its effect window is over, or it
    /// stopped); a caller of another token never could.
    fn owner_cannot_act(&self, state: &State, token: u8) -> bool {
        state.callers.iter().all(|c| match &c.phase {
            Phase::Running {
                token: t, started, ..
            } if *t == token => state.tick > started + self.run_ticks,
            Phase::Dead {
                token: t, started, ..
            } if *t == token => state.tick > started + self.run_ticks,
            _ => true,
        })
    }

    /// The store's conditional claim at `now_ms`, as the product rules it.
    fn claim(&self, state: &mut State, caller: usize) -> ClaimOutcome {
        let now_ms = self.now_ms(state, caller);
        if let Some(existing) = &state.record {
            let record = Self::product_record(existing);
            if !record.is_claimable(now_ms) {
                return match record.status {
                    Status::Completed => ClaimOutcome::Completed(record),
                    Status::InProgress => ClaimOutcome::InProgress(record),
                };
            }
            let expired = record.is_expired(now_ms);
            let allowed = expired
                || (record.status == Status::InProgress && self.delivery == Delivery::AtLeastOnce);
            if allowed && self.owner_cannot_act(state, existing.token) {
                state.rerun_allowed = true;
            }
        }
        let token = state.next_token;
        state.next_token += 1;
        let request = ClaimRequest {
            key: "k",
            fingerprint: "f",
            tool: "charge_card",
            lease_until_ms: now_ms + self.lease_ms(),
            expires_at_s: self.life_s(now_ms),
            owner: None,
            at_most_once: self.delivery == Delivery::AtMostOnce,
            on_failure: self.on_failure,
            path_digests: None,
            about: CallAbout::default(),
        };
        let expires_at_s = match self.bug {
            Some(Bug::TtlShorterThanLease) => request.expires_at_s,
            _ => request.record_expiry(),
        };
        state.record = Some(Stored {
            status: Status::InProgress,
            token,
            lease_until_ms: request.lease_until_ms,
            expires_at_s,
            result: None,
            outcome_unknown: false,
            at_most_once: request.at_most_once,
            claimed_under: token,
        });
        ClaimOutcome::Claimed {
            token: LeaseToken::new(token.to_string()),
        }
    }

    /// The product's after-run rule, with [`Bug::CrashReleases`] at the boundary.
    fn after(&self, end: RunEnd) -> AfterRun {
        match (
            self.bug,
            end,
            after_run(end, self.delivery, self.on_failure),
        ) {
            (
                Some(Bug::CrashReleases),
                RunEnd::Failed {
                    outcome_unknown: true,
                },
                _,
            ) => AfterRun::Release,
            (_, _, after) => after,
        }
    }

    fn refuse_or_retry(caller: &mut Caller) {
        caller.phase = if caller.attempts_left > 0 {
            Phase::Ready
        } else {
            Phase::Refused
        };
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // Every assignment of skews (0 or 1 tick) to the callers; the first caller's clock is true.
        (0..1u32 << (self.callers - 1))
            .map(|mask| State {
                tick: 0,
                record: None,
                callers: (0..self.callers)
                    .map(|i| Caller {
                        phase: Phase::Ready,
                        attempts_left: self.attempts,
                        skew: u8::from(i > 0 && mask & (1 << (i - 1)) != 0),
                        orphan: None,
                    })
                    .collect(),
                effects: Vec::new(),
                next_token: 1,
                rerun_allowed: false,
                retried_failures: 0,
                sweep_listed: [None, None],
                swept: false,
                swept_a_live_owner: false,
                sweep_reports: 0,
                announced: Vec::new(),
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.tick < self.ticks {
            actions.push(Action::Tick);
        }
        for (sweep, listed) in state.sweep_listed.iter().enumerate() {
            match listed {
                None => actions.extend([Action::SweepList(sweep, 0), Action::SweepList(sweep, 1)]),
                Some(_) => actions.push(Action::SweepSettle(sweep)),
            }
        }
        for (i, caller) in state.callers.iter().enumerate() {
            match &caller.phase {
                Phase::Ready => {
                    actions.push(Action::Claim(i));
                    actions.push(Action::ClaimAnswerLost(i));
                }
                Phase::Running {
                    started, effect, ..
                } => {
                    if effect.is_none() && state.tick <= started + self.run_ticks {
                        actions.push(Action::Effect(i));
                    }
                    let endings: &[Ending] = match effect {
                        Some(_) => &[
                            Ending::Replied,
                            Ending::CompletionLost,
                            Ending::CrashAfterEffect,
                            Ending::CrashSettleLost,
                            Ending::TimedOut,
                            Ending::NotNow,
                            Ending::Failed,
                            Ending::Retryable,
                        ],
                        None => &[
                            Ending::TimedOut,
                            Ending::NothingRan,
                            Ending::Rejected,
                            Ending::NotNow,
                        ],
                    };
                    actions.extend(endings.iter().map(|e| Action::Finish(i, *e)));
                    actions.push(Action::Kill(i));
                    if self.renewing {
                        actions.push(Action::Renew(i));
                    }
                }
                Phase::Dead {
                    started, effect, ..
                } if effect.is_none() && state.tick <= started + self.run_ticks => {
                    actions.push(Action::Effect(i));
                }
                _ => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.tick += 1,
            Action::Claim(i) | Action::ClaimAnswerLost(i) => {
                let now_ms = self.now_ms(&state, i);
                // The executor first releases a claim whose answers were lost, fenced.
                if let Some(orphan) = state.callers[i].orphan.take()
                    && Self::held_by(&state.record, orphan, now_ms)
                {
                    state.record = None;
                }
                let outcome = self.claim(&mut state, i);
                let claim = match (&action, outcome) {
                    (Action::ClaimAnswerLost(_), ClaimOutcome::Claimed { token }) => {
                        state.callers[i].orphan = token.as_str().parse().ok();
                        Err(StoreError::ClaimUnconfirmed {
                            token,
                            source: "every answer was lost".into(),
                        })
                    }
                    (Action::ClaimAnswerLost(_), _) => return None,
                    (_, outcome) => Ok(outcome),
                };
                let caller = &mut state.callers[i];
                caller.attempts_left = caller.attempts_left.saturating_sub(1);
                // No waiting in the model: an identical call in flight is answered "busy", and
                // the caller retries while it has attempts left.
                match decide(claim, Mode::Enforce, Duration::ZERO, now_ms, None, None) {
                    NextAction::Execute { token } => {
                        caller.phase = Phase::Running {
                            token: token.as_str().parse().unwrap(),
                            started: state.tick,
                            effect: None,
                        }
                    }
                    NextAction::Replay(record) => {
                        caller.phase = match record.result.as_deref() {
                            Some([effect]) => Phase::Replied(*effect),
                            _ => Phase::Refused,
                        }
                    }
                    NextAction::Unknown(_) | NextAction::Mismatch(_) => {
                        caller.phase = Phase::Refused
                    }
                    NextAction::Busy(_) | NextAction::Wait(_) | NextAction::StoreDown(_) => {
                        Self::refuse_or_retry(caller)
                    }
                    NextAction::Shadow { .. } => unreachable!("enforce mode"),
                    NextAction::Resume(_) => unreachable!("no caller names a request here"),
                }
            }
            Action::Effect(i) => {
                let (Phase::Running { token, effect, .. } | Phase::Dead { token, effect, .. }) =
                    &mut state.callers[i].phase
                else {
                    return None;
                };
                state.effects.push(*token);
                *effect = Some(u8::try_from(state.effects.len()).unwrap());
            }
            Action::Kill(i) => {
                let Phase::Running {
                    token,
                    started,
                    effect,
                } = state.callers[i].phase
                else {
                    return None;
                };
                state.callers[i].phase = Phase::Dead {
                    token,
                    started,
                    effect,
                };
            }
            Action::Finish(i, ending) => {
                let Phase::Running { token, effect, .. } = state.callers[i].phase.clone() else {
                    return None;
                };
                let now_ms = self.now_ms(&state, i);
                let end = match ending {
                    Ending::Replied | Ending::CompletionLost => {
                        RunEnd::Replied(ReplyClass::Success)
                    }
                    Ending::CrashAfterEffect | Ending::CrashSettleLost | Ending::TimedOut => {
                        RunEnd::Failed {
                            outcome_unknown: true,
                        }
                    }
                    Ending::NothingRan => RunEnd::Failed {
                        outcome_unknown: false,
                    },
                    Ending::Rejected => RunEnd::Replied(ReplyClass::Rejected),
                    Ending::NotNow => RunEnd::Replied(ReplyClass::NotNow),
                    Ending::Failed => RunEnd::Replied(ReplyClass::Failure),
                    Ending::Retryable => RunEnd::Replied(ReplyClass::Retryable),
                };
                let held = Self::held_by(&state.record, token, now_ms);
                let life_s = self.life_s(now_ms);
                let after = self.after(end);
                if matches!(ending, Ending::Failed | Ending::Retryable)
                    && matches!(after, AfterRun::Release | AfterRun::CompleteFor(_))
                {
                    state.retried_failures += 1;
                }
                match after {
                    AfterRun::Complete if held && ending != Ending::CompletionLost => {
                        let record = state.record.as_mut().unwrap();
                        record.status = Status::Completed;
                        record.result = effect;
                        record.expires_at_s = life_s;
                    }
                    AfterRun::CompleteFor(retention) if held => {
                        let record = state.record.as_mut().unwrap();
                        record.status = Status::Completed;
                        record.result = effect;
                        record.expires_at_s =
                            now_ms.div_euclid(1000) + i64::try_from(retention.as_secs()).unwrap();
                    }
                    AfterRun::Release if held => state.record = None,
                    AfterRun::SettleUnknown if held && ending != Ending::CrashSettleLost => {
                        let record = state.record.as_mut().unwrap();
                        record.status = Status::Completed;
                        record.outcome_unknown = true;
                        record.expires_at_s = life_s;
                        state.announced.push(token);
                    }
                    AfterRun::SettleUnknown if self.bug == Some(Bug::AnnouncesAFailedSettle) => {
                        state.announced.push(token);
                    }
                    _ => {}
                }
                let caller = &mut state.callers[i];
                match (end, effect) {
                    // The executor answers with the tool's reply whatever became of the write.
                    (RunEnd::Replied(ReplyClass::Success), Some(effect)) => {
                        caller.phase = Phase::Replied(effect)
                    }
                    _ => Self::refuse_or_retry(caller),
                }
            }
            Action::Renew(i) => {
                let Phase::Running { token, .. } = state.callers[i].phase else {
                    return None;
                };
                let now_ms = self.now_ms(&state, i);
                if !Self::held_by(&state.record, token, now_ms) {
                    return None;
                }
                let lease_until_ms = now_ms + self.lease_ms();
                let record = state.record.as_mut().unwrap();
                if record.lease_until_ms >= lease_until_ms {
                    return None;
                }
                record.lease_until_ms = lease_until_ms;
                record.expires_at_s = record.expires_at_s.max(lease_until_ms.div_euclid(1000));
                if let Phase::Running { started, .. } = &mut state.callers[i].phase {
                    *started = state.tick;
                }
            }
            Action::SweepList(sweep, ahead) => {
                let now_ms = i64::from(state.tick + ahead) * TICK_MS;
                let listed = state
                    .record
                    .as_ref()
                    .filter(|stored| is_left_unsettled(&Self::product_record(stored), now_ms))?;
                state.sweep_listed[sweep] =
                    Some((listed.token, listed.expires_at_s, listed.lease_until_ms));
            }
            Action::SweepSettle(sweep) => {
                let (token, expires_at_s, listed_lease) = state.sweep_listed[sweep].take()?;
                let now_ms = i64::from(state.tick) * TICK_MS;
                let held = match self.bug {
                    Some(Bug::SweepUnfenced) => state.record.as_ref().is_some_and(|r| {
                        r.status == Status::InProgress
                            && !Self::product_record(r).is_expired(now_ms)
                    }),
                    Some(Bug::SweepFencedByTokenOnly) => {
                        Self::held_by(&state.record, token, now_ms)
                    }
                    _ => {
                        Self::held_by(&state.record, token, now_ms)
                            && state
                                .record
                                .as_ref()
                                .is_some_and(|r| r.lease_until_ms == listed_lease)
                    }
                };
                // The sweep's hand-over to a token of its own (fenced by the listed claim's
                // token), then its settle_unknown under that token, which it alone holds.
                if held {
                    let owner = state.record.as_ref().unwrap().token;
                    let settled_under = match self.bug {
                        Some(Bug::SweepSettlesUnderTheHoldersToken) => owner,
                        _ => {
                            state.next_token += 1;
                            state.next_token - 1
                        }
                    };
                    let record = state.record.as_mut().unwrap();
                    record.token = settled_under;
                    record.status = Status::Completed;
                    record.outcome_unknown = true;
                    record.result = None;
                    record.expires_at_s = expires_at_s;
                    state.swept = true;
                    state.sweep_reports += 1;
                    state.announced.push(record.claimed_under);
                    if !self.owner_cannot_act(&state, owner) {
                        state.swept_a_live_owner = true;
                    }
                } else if self.bug == Some(Bug::SweepSettlesUnderTheHoldersToken)
                    && state.record.as_ref().is_some_and(|r| {
                        r.outcome_unknown
                            && r.token == token
                            && !Self::product_record(r).is_expired(now_ms)
                    })
                {
                    // settle_unknown's answer to a retry of its own write: settled so already.
                    state.sweep_reports += 1;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most once", |_, s: &State| {
                s.effects.len() <= 1 + usize::from(s.retried_failures) || s.rerun_allowed
            }),
            Property::always("replies come from effects", |_, s: &State| {
                let replies: Vec<u8> = s
                    .callers
                    .iter()
                    .filter_map(|c| match c.phase {
                        Phase::Replied(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                replies.iter().all(|e| usize::from(*e) <= s.effects.len())
                    && (s.rerun_allowed
                        || s.retried_failures > 0
                        || replies.windows(2).all(|w| w[0] == w[1]))
            }),
            Property::always("no claim held past its lease", |_, s: &State| {
                let Some(stored) = &s.record else { return true };
                let record = Protocol::product_record(stored);
                // By every clock (the slowest is the true one), a lease that ended leaves a record
                // a retry can claim, or one that says the outcome is unknown: never stuck.
                let now_ms = i64::from(s.tick) * TICK_MS;
                record.status != Status::InProgress
                    || !record.lease_ended(now_ms)
                    || record.is_claimable(now_ms)
                    || record.is_outcome_unknown(now_ms)
            }),
            Property::always(
                "the sweep settles only claims whose owner cannot act",
                |_, s: &State| !s.swept_a_live_owner,
            ),
            Property::always("the sweeps announce a call once", |_, s: &State| {
                s.sweep_reports <= 1
            }),
            // Whoever settles a call as outcome unknown announces it, and nobody else: the
            // invocation whose settle write landed, or the sweep that settled what it left.
            Property::always("a call left unknown is announced once", |_, s: &State| {
                let mut lives = s.announced.clone();
                lives.sort_unstable();
                lives.dedup();
                let settled = s
                    .record
                    .as_ref()
                    .filter(|r| r.status == Status::Completed && r.outcome_unknown);
                lives.len() == s.announced.len()
                    && settled.is_none_or(|r| s.announced.contains(&r.claimed_under))
            }),
            // Where a claim can be left unsettled past its lease and the margin while its record
            // lives, the sweep must be seen settling one, or the invariant above proves nothing.
            Property::sometimes(
                "the sweep settles an abandoned claim",
                |m: &Protocol, s: &State| s.swept || !m.sweep_can_settle(),
            ),
            Property::always("a stored result is its owner's", |_, s: &State| {
                match &s.record {
                    Some(Stored {
                        result: Some(effect),
                        token,
                        ..
                    }) => s.effects[usize::from(*effect) - 1] == *token,
                    _ => true,
                }
            }),
        ]
    }
}

fn size(var: &str, default: u8) -> u8 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn protocol(delivery: Delivery, bug: Option<Bug>) -> Protocol {
    Protocol {
        callers: usize::from(size("DEDUP_MODEL_CALLERS", 2)),
        ticks: size("DEDUP_MODEL_TICKS", 7),
        attempts: size("DEDUP_MODEL_ATTEMPTS", 2),
        run_ticks: 2,
        margin_ticks: 1,
        // Shorter than the lease on purpose: only `record_expiry` keeps a claim alive while its
        // owner may run, and completed records expire within the run.
        ttl_ticks: 1,
        delivery,
        on_failure: OnFailure::default_for(delivery),
        renewing: false,
        bug,
    }
}

/// The counterexample for `property`, one step a line, cut at the first state that breaks it,
/// with what that state holds.
fn trace(model: Protocol, property: &'static str) -> Option<String> {
    counterexample(model, property, |state| {
        format!(
            "tick {}: effects ran under claims {:?}; record {:?}",
            state.tick, state.effects, state.record
        )
    })
}

/// The first counterexample a breadth-first check of `model` finds for `property` (the checker
/// stops at it), one action a line, cut at the first state that breaks the property, which
/// `describe` says. Every model of the protocol (this one, the interceptor's) reports so.
pub(crate) fn counterexample<M>(
    model: M,
    property: &'static str,
    describe: impl Fn(&M::State) -> String,
) -> Option<String>
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let condition = model.property(property).condition;
    let checker = model
        .clone()
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    let steps = checker.discovery(property)?.into_vec();
    let mut lines = vec![format!("counterexample to {property:?}:")];
    for (n, (state, action)) in steps.iter().enumerate() {
        if !condition(&model, state) {
            lines.push(format!("  broken at {}", describe(state)));
            break;
        }
        if let Some(action) = action {
            lines.push(format!("  {:>2}. {action:?}", n + 1));
        }
    }
    Some(lines.join("\n"))
}

#[test]
fn the_protocol_keeps_every_invariant_for_both_deliveries() {
    // Each delivery with its kind of default rule for failures (a short retention: one tick, so it
    // ends inside the run), and a failure that releases its claim.
    for (delivery, on_failure) in [
        (
            Delivery::AtLeastOnce,
            OnFailure::ReplayFor(Duration::from_secs(60)),
        ),
        (
            Delivery::AtMostOnce,
            OnFailure::default_for(Delivery::AtMostOnce),
        ),
        (Delivery::AtLeastOnce, OnFailure::Retry),
    ] {
        let model = Protocol {
            on_failure,
            ..protocol(delivery, None)
        };
        check_every_property(model);
    }
}

/// `at_most_once` records that outlive the lease and the settle margin: the sweep's window.
#[test]
fn the_sweep_settles_only_abandoned_claims() {
    check_every_property(swept(None));
}

#[test]
fn a_sweep_without_its_token_fence_is_found_with_a_trace() {
    let found = trace(
        swept(Some(Bug::SweepUnfenced)),
        "the sweep settles only claims whose owner cannot act",
    )
    .expect("the checker must find the unfenced sweep");
    eprintln!("{found}");
    assert!(
        found.contains("SweepList") && found.contains("SweepSettle"),
        "{found}"
    );
}

/// Two sweeps that list one claim: settled under the holder's token, the second one's settle
/// succeeds as a retry would and the call is reported twice; the model finds it.
#[test]
fn two_sweeps_settling_under_the_holders_token_are_found_with_a_trace() {
    let found = trace(
        swept(Some(Bug::SweepSettlesUnderTheHoldersToken)),
        "the sweeps announce a call once",
    )
    .expect("the checker must find the twice-announced call");
    eprintln!("{found}");
    assert!(
        found.contains("SweepSettle(0)") && found.contains("SweepSettle(1)"),
        "{found}"
    );
}

/// Owners that renew their lease while they run, even after it ended: the sweep's listing can
/// then be older than the lease, and the sweep must leave a renewed claim to its owner.
fn renewing(bug: Option<Bug>) -> Protocol {
    Protocol {
        renewing: true,
        ticks: size("DEDUP_MODEL_TICKS", 6),
        ..swept(bug)
    }
}

#[test]
fn a_renewing_owner_keeps_its_claim_from_a_sweep_that_listed_it_before() {
    check_every_property(renewing(None));
}

#[test]
fn a_sweep_fenced_by_the_token_only_is_found_with_a_trace() {
    let found = trace(
        renewing(Some(Bug::SweepFencedByTokenOnly)),
        "the sweep settles only claims whose owner cannot act",
    )
    .expect("the checker must find the sweep taking a renewed claim");
    eprintln!("{found}");
    let (listed, renewed, settled) = (
        found.find("SweepList"),
        found.find("Renew"),
        found.find("SweepSettle"),
    );
    assert!(
        listed < renewed && renewed < settled && listed.is_some(),
        "{found}"
    );
}

#[test]
fn an_invocation_announcing_a_settle_that_never_landed_is_found_with_a_trace() {
    let found = trace(
        swept(Some(Bug::AnnouncesAFailedSettle)),
        "a call left unknown is announced once",
    )
    .expect("the checker must find the call announced by its invocation and by the sweep");
    eprintln!("{found}");
    assert!(
        found.contains("SweepSettle") && found.contains("Finish(0,"),
        "{found}"
    );
}

/// An `at_most_once` protocol whose records live two ticks past the lease and the margin.
fn swept(bug: Option<Bug>) -> Protocol {
    let model = protocol(Delivery::AtMostOnce, bug);
    Protocol {
        ttl_ticks: model.run_ticks + model.margin_ticks + 2,
        ..model
    }
}

fn check_every_property(model: Protocol) {
    let (delivery, on_failure, ttl) = (model.delivery, model.on_failure, model.ttl_ticks);
    assert_every_property(
        model,
        &format!("{delivery:?}, {on_failure:?}, records live {ttl} ticks"),
    );
}

/// Explores `model` breadth-first, says how many states it saw (under `label`), and asserts every
/// property held: every model of the protocol (this one, the interceptor's) is checked so.
pub(crate) fn assert_every_property<M>(model: M, label: &str)
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let checker = model.checker().spawn_bfs().join();
    eprintln!("{label}: {} unique states", checker.unique_state_count());
    assert!(
        checker.unique_state_count() > 1_000,
        "the model explored too little"
    );
    checker.assert_properties();
}

#[test]
fn a_ttl_shorter_than_the_lease_is_found_with_a_trace() {
    let found = trace(
        protocol(Delivery::AtLeastOnce, Some(Bug::TtlShorterThanLease)),
        "at most once",
    )
    .expect("the checker must find the re-introduced TTL bug");
    eprintln!("{found}");
    assert!(found.contains("broken at"), "{found}");
}

#[test]
fn a_crash_that_releases_the_claim_is_found_with_a_trace() {
    let found = trace(
        protocol(Delivery::AtLeastOnce, Some(Bug::CrashReleases)),
        "at most once",
    )
    .expect("the checker must find the re-introduced release-on-crash bug");
    eprintln!("{found}");
    assert!(found.contains("broken at"), "{found}");
    assert!(
        found.contains("CrashAfterEffect") || found.contains("TimedOut"),
        "released after an unknown outcome: {found}"
    );
}
