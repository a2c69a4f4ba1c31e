//! The state machine of one keyed call: claim, run the side effect once, complete or release,
//! wait for an identical call in flight, replay. It knows no event format and no tool transport:
//! the handler ([`crate::handler`]) and the library guard ([`crate::guard`]) both run it, each
//! with its own way to perform the side effect.
//!
//! Each claim's outcome goes through the pure [`decide`]; the executor performs the
//! [`NextAction`] and returns a [`Settled`] value that the caller turns into its answer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::decide::{AfterRun, CallerMatch, Mode, NextAction, RunEnd, after_run, decide};
use crate::key::{Delivery, Keyer, OnFailure, Strategy, differing_paths};
use crate::store::{
    CallAbout, ClaimRequest, Completion, LeaseToken, Record, Status, Store, StoreError,
};

mod cache;
pub(crate) mod lease;
mod lost_claims;
mod note;
mod outcome;
#[cfg(test)]
mod tests;
pub(crate) mod unknown;

pub(crate) use crate::telemetry::Outcome;
use cache::RecordCache;
pub(crate) use lease::Lease;
pub use lease::Settings;
pub(crate) use outcome::{
    CallerKey, ClaimMade, Finished, FinishedElsewhere, Keyed, Opened, RecordedClaim, RequestOwner,
    Settled, ToolRun,
};

/// What the claim loop ended with.
enum Acquired<E> {
    Owner(Started),
    Shadow {
        started: Started,
        outcome: Outcome,
        rules: Vec<&'static str>,
    },
    Answered(Finished<E>),
}

/// How one claim round ended: the claim loop is done, waits for an identical call in flight, or
/// resumes this request's own claim.
enum RoundEnd<E> {
    Acquired(Acquired<E>),
    Wait(Box<Record>),
    Resume(Box<Record>),
}

/// The claim a side effect runs under, and when it was sent.
struct Started {
    token: Option<LeaseToken>,
    claimed_at: Instant,
}

/// Rounds of claim → wait → claim again before answering "in progress" (each claim may itself
/// be several writes: the store's own retries).
const MAX_WAIT_ROUNDS: u32 = 3;
/// Moves of a lease answered too slowly before the call is refused (see `cover_late_start`).
const MAX_LEASE_MOVES: u32 = 3;
/// The polls of a record in flight.
const POLL_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(25),
    most: Duration::from_millis(500),
};

/// Runs keyed calls against one store.
pub(crate) struct Executor<S> {
    /// Shared with the completion task, which outlives a dropped caller.
    store: Arc<S>,
    keyer: Keyer,
    settings: Settings,
    cache: Option<RecordCache>,
    /// Claims that may have been written while every answer was lost
    /// ([`StoreError::ClaimUnconfirmed`]): nothing ran under them, so they are released (fenced)
    /// at the start of the next call.
    ///
    /// Keyed by token, not by key: several sends of one call can each hand a token back, and
    /// only one of them may be the claim that was written, so none may replace another.
    ///
    /// Shared with the executors that later configurations of this container build
    /// ([`Executor::sharing_lost_claims`]).
    orphans: Arc<Mutex<HashMap<LeaseToken, String>>>,
}

/// The claim a settling write acts on: its key, the fingerprint stored with it (the warm cache
/// keeps it beside the reply) and the policy entry its expiry comes from.
#[derive(Clone, Copy)]
struct Settling<'a> {
    key: &'a str,
    tool: &'a str,
    fingerprint: &'a str,
    policy_name: &'a str,
    /// When the call's claim was taken, epoch ms: what a replay says the call first ran at.
    first_ran_ms: i64,
}

impl<'a> Settling<'a> {
    /// `call`, whose claim was taken at `claimed_at` (by this executor's clock).
    fn of(call: Keyed<'a>, store_now_ms: i64, claimed_at: Instant) -> Settling<'a> {
        let since = i64::try_from(claimed_at.elapsed().as_millis()).unwrap_or(0);
        Settling {
            key: call.key,
            tool: call.call.tool,
            fingerprint: call.fingerprint,
            policy_name: call.call.policy_name(),
            first_ran_ms: store_now_ms.saturating_sub(since),
        }
    }
}

/// What waiting for an in-flight call ended with.
enum Waited {
    Completed(Record),
    /// Released, expired or lease ended: claim again.
    Claimable,
    StillRunning(Record),
    Failed(StoreError),
}

impl<S: Store> Executor<S> {
    /// An executor over `store`, keying with `keyer`.
    pub(crate) fn new(store: S, keyer: Keyer, settings: Settings) -> Executor<S> {
        let cache = RecordCache::new(settings.local_cache_items);
        Executor {
            store: Arc::new(store),
            keyer,
            settings,
            cache,
            orphans: Arc::default(),
        }
    }

    /// Adjusts the settings (tests shorten margins and budgets).
    pub(crate) fn with_settings(mut self, adjust: impl FnOnce(&mut Settings)) -> Executor<S> {
        adjust(&mut self.settings);
        self.cache = RecordCache::new(self.settings.local_cache_items);
        self
    }

    /// The store claims are made in.
    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    /// The keyer calls are keyed with.
    pub(crate) fn keyer(&self) -> &Keyer {
        &self.keyer
    }

    /// The executor's settings.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Runs `call` at most once per key. `end` is the deadline (monotonic) by which the answer
    /// is due; `lease` says how long the side effect may run and how its claim is kept.
    /// `side_effect` gets the time it may take.
    pub(crate) async fn run<E, F, Fut>(
        &self,
        call: Keyed<'_>,
        end: Instant,
        lease: Lease,
        side_effect: F,
    ) -> Finished<E>
    where
        F: FnOnce(Duration) -> Fut,
        Fut: Future<Output = ToolRun<E>>,
    {
        let acquired = self
            .acquire(call, end, lease, None)
            .instrument(tracing::info_span!("claim"))
            .await;
        match acquired {
            Acquired::Owner(started) => {
                let settled = self.execute(call, started, end, lease, side_effect).await;
                finished(settled, Outcome::Executed, Vec::new())
            }
            Acquired::Shadow {
                started,
                outcome,
                rules,
            } => {
                let settled = self.execute(call, started, end, lease, side_effect).await;
                finished(settled, outcome, rules)
            }
            Acquired::Answered(done) => done,
        }
    }

    /// Claims `call` for a side effect that runs *elsewhere*, after this invocation answers (the
    /// Gateway interceptor door: the Gateway calls the target once the REQUEST interceptor lets the
    /// request through). `owner` names the request, so that the invocation that sees the side
    /// effect's reply can tell its own claim ([`Executor::finish_claimed`]).
    pub(crate) async fn open<E>(
        &self,
        call: Keyed<'_>,
        end: Instant,
        lease: Lease,
        owner: &RequestOwner,
    ) -> Opened<E> {
        let acquired = self
            .acquire(call, end, lease, Some(owner))
            .instrument(tracing::info_span!("claim"))
            .await;
        match acquired {
            Acquired::Owner(started) => match &owner.noted_at {
                None => Opened::Claimed,
                Some(at) => match self.note_claim(at, call, &owner.name, end, lease).await {
                    Ok(()) => Opened::Claimed,
                    Err(e) => {
                        // Unnoted, the claim could not be settled: nothing runs under it (shadow
                        // mode never blocks: there the call runs unclaimed).
                        tracing::error!(error = %e, "could not note the claim; released it");
                        self.release(call.key, started.token.as_ref()).await;
                        match self.settings.mode {
                            Mode::Shadow => Opened::Unclaimed(Outcome::Executed),
                            _ => Opened::Answered(store_down(e)),
                        }
                    }
                },
            },
            Acquired::Shadow { outcome, .. } => Opened::Unclaimed(outcome),
            Acquired::Answered(done) => Opened::Answered(done),
        }
    }

    /// Settles a claim [`Executor::open`] took, once its side effect's reply is seen elsewhere:
    /// stores, releases or keeps it as [`after_run`] says, fenced by the claim's token. `made` is
    /// the claim as the REQUEST recorded it (its key and owner), never a key derived again from
    /// today's configuration. Only the claim `made.owner` took is touched; anything else (a
    /// completed record, another request's claim, none) is left as it is and said in the answer.
    /// What an unknown outcome allows is the claim's (taken `at_most_once` or not), whatever this
    /// invocation's view of the tool says.
    pub(crate) async fn finish_claimed(
        &self,
        made: ClaimMade<'_>,
        end: Instant,
        run_end: RunEnd,
        reply: &[u8],
    ) -> Result<FinishedElsewhere, StoreError> {
        let record = match self.bounded(end, self.store.get(made.key)).await? {
            None => return Ok(FinishedElsewhere::NoClaim),
            Some(record) if record.status == Status::Completed => {
                return Ok(FinishedElsewhere::AlreadyCompleted);
            }
            Some(record) if record.token.owner() != Some(made.owner) => {
                return Ok(FinishedElsewhere::NoClaim);
            }
            Some(record) => record,
        };
        let token = &record.token;
        let lease = Lease::Covering {
            max_run_time: Duration::ZERO,
        };
        let target = Settling {
            key: made.key,
            tool: &record.tool,
            fingerprint: &record.fingerprint,
            policy_name: made.policy_name,
            first_ran_ms: record.created_at_ms,
        };
        let after = after_run(
            run_end,
            Delivery::default_for(record.at_most_once),
            record.on_failure,
        );
        match after {
            AfterRun::Complete | AfterRun::CompleteFor(_) => {
                let retention = match after {
                    AfterRun::CompleteFor(retention) => Some(retention),
                    _ => None,
                };
                self.complete(target, token, reply, end, lease, retention)
                    .instrument(tracing::info_span!("complete"))
                    .await
            }
            AfterRun::Release => self.release(made.key, Some(token)).await,
            // Read, not taken: a second RESPONSE for the request may have read it too.
            AfterRun::SettleUnknown => {
                let mine = LeaseToken::settling_for(made.owner);
                self.settle_unknown(target, unknown::Holding::Read(&record, mine), end)
                    .await
            }
            AfterRun::Keep => {}
        }
        Ok(FinishedElsewhere::Settled(after))
    }

    /// The claim loop: the warm cache, the claim, waiting for an identical call in flight.
    async fn acquire<E>(
        &self,
        call: Keyed<'_>,
        end: Instant,
        lease: Lease,
        owner: Option<&RequestOwner>,
    ) -> Acquired<E> {
        if let Some(done) = self.cached_answer(call) {
            return Acquired::Answered(done);
        }
        if let Err(refused) = self.release_orphans(end).await {
            // The store answered a release with a failure: a claim now would fail the same way,
            // only later, so the call fails closed (or runs unclaimed in shadow mode) at once.
            let action = decide(
                Err(refused),
                self.settings.mode,
                Duration::ZERO,
                self.store.now_ms(),
                None,
                None,
            );
            if let RoundEnd::Acquired(acquired) = self.act_on(action, call, Instant::now()) {
                return acquired;
            }
        }
        let wait_until = Instant::now() + self.wait_bound(end);
        for _round in 0..MAX_WAIT_ROUNDS {
            let claim_started = Instant::now();
            let claim = self
                .bounded(
                    end,
                    self.store.claim(ClaimRequest {
                        owner: owner.map(|o| o.name.as_str()),
                        ..self.claim_request(call, end, lease)
                    }),
                )
                .await;
            if let Err(StoreError::ClaimUnconfirmed { token, .. }) = &claim {
                self.remember_orphan(call.key, token.clone());
            }
            let action = decide(
                claim,
                self.settings.mode,
                wait_until.saturating_duration_since(Instant::now()),
                self.store.now_ms(),
                self.caller_match(call),
                owner.filter(|o| o.is_one_request).map(|o| o.name.as_str()),
            );
            let record = match self.act_on(action, call, claim_started) {
                RoundEnd::Acquired(acquired) => return acquired,
                RoundEnd::Wait(record) => *record,
                RoundEnd::Resume(record) => {
                    match self.resume(call, &record, end, lease, owner).await {
                        Ok(started) => return Acquired::Owner(started),
                        // Settled or taken over since it was read: claim again.
                        Err(StoreError::LeaseLost) => continue,
                        Err(e) => return Acquired::Answered(store_down(e)),
                    }
                }
            };
            let done = match self.wait(call.key, record, wait_until, end).await {
                Waited::Completed(record) => self.replay(record, call, Outcome::Waited),
                Waited::Claimable => continue,
                Waited::StillRunning(record) => self.in_progress(&record),
                Waited::Failed(e) => store_down(e),
            };
            return Acquired::Answered(done);
        }
        Acquired::Answered(self.read_after_racing(call, end).await)
    }

    /// A repeat the warm cache answers (never in shadow mode, which always runs the call). A
    /// caller key met with other arguments goes to the record, which says how they differ.
    fn cached_answer<E>(&self, call: Keyed<'_>) -> Option<Finished<E>> {
        if self.settings.mode == Mode::Shadow {
            return None;
        }
        let hit = self
            .cache
            .as_ref()?
            .get(call.key, self.store.now_ms())
            .filter(|hit| call.caller.is_none() || hit.fingerprint == call.fingerprint)?;
        tracing::debug!("replayed from the warm-container cache");
        Some(Finished {
            rules: self.meeting_rules(&hit.fingerprint, call),
            settled: Settled::Replayed {
                reply: hit.result,
                first_ran_ms: hit.first_ran_ms,
            },
            outcome: Outcome::Replayed,
        })
    }

    /// What a claim round's [`NextAction`] ends with, or the record of an identical call in
    /// flight to wait for.
    fn act_on<E>(
        &self,
        action: NextAction,
        call: Keyed<'_>,
        claim_started: Instant,
    ) -> RoundEnd<E> {
        let answered = |done| RoundEnd::Acquired(Acquired::Answered(done));
        match action {
            NextAction::Execute { token } => RoundEnd::Acquired(Acquired::Owner(Started {
                token: Some(token),
                claimed_at: claim_started,
            })),
            NextAction::Shadow { seen } => {
                let (outcome, rules) = match &seen {
                    Some(record) => {
                        let rules = self.meeting_rules(&record.fingerprint, call);
                        tracing::info!(rules = %rules.join(","), "shadow mode: would have replayed or waited");
                        (Outcome::ShadowReplay, rules)
                    }
                    None => {
                        tracing::warn!("shadow mode: store unavailable, executing anyway");
                        (Outcome::Executed, Vec::new())
                    }
                };
                RoundEnd::Acquired(Acquired::Shadow {
                    started: Started {
                        token: None,
                        claimed_at: claim_started,
                    },
                    outcome,
                    rules,
                })
            }
            NextAction::StoreDown(e) => answered(store_down(e)),
            NextAction::Replay(record) => answered(self.replay(record, call, Outcome::Replayed)),
            NextAction::Unknown(_) => answered(outcome_unknown()),
            NextAction::Mismatch(record) => answered(key_reused(&record, call)),
            NextAction::Busy(record) => answered(self.in_progress(&record)),
            NextAction::Wait(record) => RoundEnd::Wait(Box::new(record)),
            NextAction::Resume(record) => RoundEnd::Resume(Box::new(record)),
        }
    }

    /// Takes this request's own claim (`record`, from an earlier invocation for the same
    /// request) over under a fresh token, its lease counted from now, in one fenced write.
    async fn resume(
        &self,
        call: Keyed<'_>,
        record: &Record,
        end: Instant,
        lease: Lease,
        owner: Option<&RequestOwner>,
    ) -> Result<Started, StoreError> {
        let claimed_at = Instant::now();
        let token = LeaseToken::for_owner(owner.map(|o| o.name.as_str()));
        let now = self.store.now_ms();
        let lease_until_ms = self.lease_until_ms(now, end, lease);
        let handed = self.store.hand_over(
            call.key,
            &record.token,
            record.lease_until_ms,
            &token,
            lease_until_ms,
            self.expiry_from(call.call.policy_name(), now, None),
        );
        if let Err(e) = self.bounded(end, handed).await {
            if !matches!(e, StoreError::LeaseLost) {
                // The write may have applied with its answer lost: the new token is then the
                // claim's, and nothing ran under it, so it is released at the next call.
                self.remember_orphan(call.key, token);
            }
            return Err(e);
        }
        tracing::info!("resumed this request's own claim under a new token");
        Ok(Started {
            token: Some(token),
            claimed_at,
        })
    }

    /// After every claim round lost to identical calls: what the record says now.
    async fn read_after_racing<E>(&self, call: Keyed<'_>, end: Instant) -> Finished<E> {
        match self.bounded(end, self.store.get(call.key)).await {
            Ok(Some(record)) if record.status == Status::Completed => {
                self.replay(record, call, Outcome::Waited)
            }
            Ok(Some(record)) => self.in_progress(&record),
            Ok(None) => {
                tracing::info!("claim kept racing with identical calls");
                finished(
                    Settled::InProgress {
                        retry_after_ms: None,
                    },
                    Outcome::InProgress,
                    Vec::new(),
                )
            }
            Err(e) => store_down(e),
        }
    }

    /// When a lease taken (or moved) at `now_ms` ends, epoch milliseconds.
    fn lease_until_ms(&self, now_ms: i64, end: Instant, lease: Lease) -> i64 {
        let running = match lease {
            // Until the later of our deadline and the tool's own end: a tool that outlives us
            // may still be running after our deadline.
            Lease::Covering { max_run_time } => remaining(end).max(max_run_time),
            Lease::Renewed { length } => length,
        };
        now_ms.saturating_add(millis(running + self.settings.lease_margin))
    }

    fn claim_request<'a>(
        &'a self,
        call: Keyed<'a>,
        end: Instant,
        lease: Lease,
    ) -> ClaimRequest<'a> {
        let now = self.store.now_ms();
        ClaimRequest {
            key: call.key,
            fingerprint: call.fingerprint,
            tool: call.call.tool,
            lease_until_ms: self.lease_until_ms(now, end, lease),
            expires_at_s: self.expiry_from(call.call.policy_name(), now, None),
            owner: None,
            at_most_once: call.delivery == Delivery::AtMostOnce,
            on_failure: self.on_failure(call),
            path_digests: call.caller.and_then(|c| c.path_digests),
            about: CallAbout {
                namespace: call.call.namespace,
                run: call.call.run_id,
                step: call.call.step,
                keyer: Some(match call.caller {
                    Some(_) => self.keyer.version().caller_label(),
                    None => self.keyer.version().name(),
                }),
                policy: self.keyer.policy_fingerprint(call.call.policy_name()),
                arguments: call.caller.map(|c| c.arguments),
            },
        }
    }

    /// Moves the lease of a held claim to cover a side effect starting now.
    async fn extend(
        &self,
        call: Keyed<'_>,
        token: &LeaseToken,
        end: Instant,
        lease: Lease,
    ) -> Result<(), StoreError> {
        let now = self.store.now_ms();
        let lease_until_ms = self.lease_until_ms(now, end, lease);
        let extend = self.store.extend_lease(
            call.key,
            token,
            lease_until_ms,
            self.expiry_from(call.call.policy_name(), now, None),
        );
        match lease {
            Lease::Covering { .. } => self.bounded(end, extend).await,
            Lease::Renewed { .. } => extend.await,
        }
    }

    /// `operation`, given up as [`StoreError::Unavailable`] when the answer is due: a store call
    /// that outlives the invocation would leave the caller with nothing.
    async fn bounded<T>(
        &self,
        end: Instant,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        within(Some(self.answer_by(end)), operation).await
    }

    /// What is left of the time before the answer is due: the deadline less the reply margin.
    fn until_answer(&self, end: Instant) -> Duration {
        remaining(end).saturating_sub(self.settings.reply_margin)
    }

    /// When the answer is due: store requests are given up then ([`Executor::bounded`]).
    fn answer_by(&self, end: Instant) -> Instant {
        Instant::now() + self.until_answer(end)
    }

    /// The expiry of a record of `tool` written at `now_ms`: the tool policy's `ttl_seconds`
    /// later, else `DEDUP_TTL_SECONDS` later; a failure's shorter `retention` when it has one.
    fn expiry_from(&self, tool: &str, now_ms: i64, retention: Option<Duration>) -> i64 {
        let ttl = self
            .keyer
            .policies()
            .get(tool)
            .and_then(|p| p.ttl)
            .unwrap_or(self.settings.ttl);
        let ttl = retention.map_or(ttl, |retention| retention.min(ttl));
        now_ms
            .div_euclid(1000)
            .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
    }

    /// What a failure reply does to `call`: its policy's `failures`, else the default for its
    /// delivery. Fixed at the claim ([`ClaimRequest::on_failure`]); the invocation that ran the
    /// tool settles with the same executor, one that did not reads the claim's.
    fn on_failure(&self, call: Keyed<'_>) -> OnFailure {
        self.keyer
            .policies()
            .get(call.call.policy_name())
            .and_then(|p| p.on_failure)
            .unwrap_or(OnFailure::default_for(call.delivery))
    }

    fn wait_bound(&self, end: Instant) -> Duration {
        self.settings
            .wait
            .min(remaining(end).saturating_sub(self.settings.completion_reserve))
    }

    /// Polls an in-flight record with backoff until it completes, becomes claimable, or `until`.
    async fn wait(&self, key: &str, mut record: Record, until: Instant, end: Instant) -> Waited {
        let mut polls = 0;
        loop {
            let now_ms = self.store.now_ms();
            if record.is_outcome_unknown(now_ms) {
                return Waited::Completed(record);
            }
            if record.is_claimable(now_ms) {
                return Waited::Claimable;
            }
            let now = Instant::now();
            if now >= until {
                return Waited::StillRunning(record);
            }
            polls += 1;
            let pause = POLL_BACKOFF.jittered(polls);
            tokio::time::sleep(pause.min(until - now)).await;
            match self.bounded(end, self.store.get(key)).await {
                Err(e) => return Waited::Failed(e),
                Ok(None) => return Waited::Claimable,
                Ok(Some(r)) if r.status == Status::Completed => return Waited::Completed(r),
                Ok(Some(r)) => record = r,
            }
        }
    }

    /// Runs the side effect, then settles the claim as [`after_run`] says. Without a token
    /// (shadow mode) nothing is written.
    async fn execute<E, F, Fut>(
        &self,
        call: Keyed<'_>,
        started: Started,
        end: Instant,
        lease: Lease,
        side_effect: F,
    ) -> Settled<E>
    where
        F: FnOnce(Duration) -> Fut,
        Fut: Future<Output = ToolRun<E>>,
    {
        let key = call.key;
        let token = started.token.as_ref();
        let kept_back = self.settings.completion_reserve + self.settings.reply_margin;
        if remaining(end).saturating_sub(kept_back).is_zero() {
            self.release(key, token).await;
            return Settled::NoTime;
        }
        if let Some(token) = token
            && let Err(settled) = self
                .cover_late_start(call, token, &started, end, lease)
                .await
        {
            return settled;
        }
        // Sized after the lease was moved: the time the extensions took is the tool's no more.
        let timeout = remaining(end).saturating_sub(kept_back);
        if timeout.is_zero() {
            self.release(key, token).await;
            return Settled::NoTime;
        }
        let invoke = tracing::info_span!("invoke", tool = call.call.tool);
        let run = match (lease, token) {
            (Lease::Renewed { length }, Some(token)) => {
                self.renewing(call, token, end, lease, length, side_effect(timeout))
                    .instrument(invoke)
                    .await
            }
            _ => side_effect(timeout).instrument(invoke).await,
        };
        let (run_end, settled) = match run {
            ToolRun::Replied { reply, class } => {
                (RunEnd::Replied(class), Settled::Executed { reply })
            }
            ToolRun::Failed {
                error,
                outcome_unknown,
            } => (
                RunEnd::Failed { outcome_unknown },
                Settled::ToolFailed {
                    error,
                    outcome_unknown,
                },
            ),
        };
        let Some(token) = token else {
            return settled;
        };
        let after = after_run(run_end, call.delivery, self.on_failure(call));
        match after {
            AfterRun::Complete | AfterRun::CompleteFor(_) => {
                let retention = match after {
                    AfterRun::CompleteFor(retention) => Some(retention),
                    _ => None,
                };
                if let Settled::Executed { reply } = &settled {
                    let target = Settling::of(call, self.store.now_ms(), started.claimed_at);
                    self.complete(target, token, reply, end, lease, retention)
                        .instrument(tracing::info_span!("complete"))
                        .await;
                }
            }
            AfterRun::Release => self.release(key, Some(token)).await,
            AfterRun::Keep => {
                tracing::warn!(
                    "the side effect may have happened: the claim is kept until its lease ends"
                )
            }
            AfterRun::SettleUnknown => {
                let target = Settling::of(call, self.store.now_ms(), started.claimed_at);
                self.settle_unknown(target, unknown::Holding::Own(token), end)
                    .await
            }
        }
        settled
    }

    /// Makes the lease cover a side effect starting now. A lease is sized when its write is sent,
    /// so a write the store answered slowly (more than `slow_claim` later) leaves the side effect
    /// starting late against it: the lease is moved again from now, until a move is answered in
    /// time. A store that never answers in time gets the claim released and the call refused
    /// without running the tool, since no lease could be shown to cover it.
    async fn cover_late_start<E>(
        &self,
        call: Keyed<'_>,
        token: &LeaseToken,
        started: &Started,
        end: Instant,
        lease: Lease,
    ) -> Result<(), Settled<E>> {
        let mut sent = started.claimed_at;
        let mut moves = 0;
        while sent.elapsed() > self.settings.slow_claim {
            if moves == MAX_LEASE_MOVES {
                tracing::warn!("the store moved the lease too slowly to cover the side effect");
                self.release(call.key, Some(token)).await;
                return Err(Settled::StoreDown(StoreError::Unavailable(
                    "the store answered too slowly for a lease to cover the tool".into(),
                )));
            }
            moves += 1;
            sent = Instant::now();
            match self.extend(call, token, end, lease).await {
                Ok(()) => {}
                Err(StoreError::LeaseLost) => {
                    tracing::warn!("the claim was lost before the side effect started");
                    return Err(Settled::InProgress {
                        retry_after_ms: None,
                    });
                }
                Err(e) => {
                    self.release(call.key, Some(token)).await;
                    return Err(Settled::StoreDown(e));
                }
            }
        }
        Ok(())
    }

    /// Runs `side_effect` while renewing the claim's lease every third of `length`. A renewal the
    /// fence refuses means the key was taken over: the side effect cannot be recalled, so it is
    /// only reported.
    async fn renewing<T>(
        &self,
        call: Keyed<'_>,
        token: &LeaseToken,
        end: Instant,
        lease: Lease,
        length: Duration,
        side_effect: impl Future<Output = T>,
    ) -> T {
        let every = (length / 3).max(Duration::from_millis(10));
        let mut side_effect = std::pin::pin!(side_effect);
        loop {
            tokio::select! {
                value = &mut side_effect => return value,
                () = tokio::time::sleep(every) => {
                    match self.extend(call, token, end, lease).await {
                        Ok(()) => tracing::debug!("lease renewed"),
                        Err(StoreError::LeaseLost) => tracing::error!(
                            "the side effect outlived its lease and the key was taken over"
                        ),
                        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying at the next renewal"),
                    }
                }
            }
        }
    }

    /// Stores the reply. The write runs in its own task, so that it finishes even when the caller
    /// stops waiting (a dropped future, a deadline). A failure here does not change the answer:
    /// the side effect already ran, and its reply is the truth the caller needs.
    async fn complete(
        &self,
        call: Settling<'_>,
        token: &LeaseToken,
        reply: &[u8],
        end: Instant,
        lease: Lease,
        retention: Option<Duration>,
    ) {
        let expires_at_s = self.expiry_from(call.policy_name, self.store.now_ms(), retention);
        let store = Arc::clone(&self.store);
        let (key, token, result) = (call.key.to_string(), token.clone(), reply.to_vec());
        let write =
            tokio::spawn(async move { store.complete(&key, &token, &result, expires_at_s).await });
        let written = match lease {
            Lease::Covering { .. } => {
                match tokio::time::timeout(self.until_answer(end), write).await {
                    Ok(joined) => joined,
                    Err(_) => {
                        tracing::warn!(
                            "the completion write is still running at the deadline; answering now, and \
                             it goes on in the background while this container lives"
                        );
                        return;
                    }
                }
            }
            Lease::Renewed { .. } => write.await,
        };
        match written {
            Ok(Ok(Completion::Stored | Completion::Offloaded { .. })) => {
                // Warm the cache from what is in hand: no read after the write.
                if let Some(cache) = &self.cache {
                    let first_ran_ms = call.first_ran_ms;
                    cache.insert(
                        call.key,
                        reply,
                        call.fingerprint,
                        expires_at_s,
                        first_ran_ms,
                    );
                }
            }
            Ok(Ok(Completion::ResultOmitted { bytes })) => tracing::warn!(
                bytes,
                "the tool's reply is too large to store; the call is settled and repeats are told \
                 it already ran, without its result"
            ),
            Ok(Err(StoreError::LeaseLost)) => tracing::warn!(
                "completion refused: the lease ended and another invocation took the key over; \
                 returning this invocation's result without storing it"
            ),
            Ok(Err(e)) => tracing::error!(
                error = %e,
                "completion write failed after the tool ran; a repeat may run the tool again once the lease ends"
            ),
            Err(e) => tracing::error!(error = %e, "the completion task failed"),
        }
    }

    /// Settles an `at_most_once` claim as outcome unknown. A write that fails changes nothing
    /// for the caller: the claim, taken `at_most_once`, is never taken over once its lease ends.
    async fn release(&self, key: &str, token: Option<&LeaseToken>) {
        let Some(token) = token else { return };
        match self.store.release(key, token).await {
            Ok(()) | Err(StoreError::LeaseLost) => {}
            Err(e) => {
                tracing::warn!(error = %e, "release failed; the key stays blocked until its lease ends")
            }
        }
    }

    /// What a caller-keyed call's record must hold to be this same call.
    fn caller_match<'a>(&'a self, call: Keyed<'a>) -> Option<CallerMatch<'a>> {
        call.caller.map(|caller| CallerMatch {
            fingerprint: call.fingerprint,
            arguments: caller.arguments,
            policy: self.keyer.policy_fingerprint(call.call.policy_name()),
            keyer: self.keyer.version().caller_label(),
        })
    }

    fn replay<E>(&self, record: Record, call: Keyed<'_>, outcome: Outcome) -> Finished<E> {
        if self.caller_match(call).is_some_and(|c| !c.meets(&record)) {
            return key_reused(&record, call);
        }
        if record.is_outcome_unknown(self.store.now_ms()) {
            return outcome_unknown();
        }
        let rules = self.meeting_rules(&record.fingerprint, call);
        if let Some(cache) = &self.cache {
            cache.put(&record.key, &record, self.store.now_ms());
        }
        match (record.result, record.omitted_result_bytes) {
            (Some(result), _) => finished(
                Settled::Replayed {
                    reply: Arc::from(result),
                    first_ran_ms: record.created_at_ms,
                },
                outcome,
                rules,
            ),
            (None, Some(bytes)) => finished(Settled::AlreadyRan { bytes }, outcome, rules),
            (None, None) => {
                let e = StoreError::Corrupt("completed record without a result".into());
                finished(Settled::StoreDown(e), Outcome::StoreError, rules)
            }
        }
    }

    fn in_progress<E>(&self, record: &Record) -> Finished<E> {
        let retry_after_ms = (record.lease_until_ms - self.store.now_ms()).clamp(0, 60_000);
        finished(
            Settled::InProgress {
                retry_after_ms: Some(retry_after_ms),
            },
            Outcome::InProgress,
            Vec::new(),
        )
    }

    /// Which normalization rules made this call meet the stored one: none when the strict
    /// fingerprints are equal, else the typed rules that fired on this call.
    fn meeting_rules(&self, stored: &str, call: Keyed<'_>) -> Vec<&'static str> {
        if stored == call.fingerprint {
            return Vec::new();
        }
        self.keyer
            .explain(Strategy::Typed, call.call)
            .map(|e| e.rules.names().collect())
            .unwrap_or_default()
    }
}

/// The answer to a caller key reused with other arguments: which paths differ. (The tool is part
/// of a caller key, so a key reused for another tool is another call.)
fn key_reused<E>(record: &Record, call: Keyed<'_>) -> Finished<E> {
    let paths = differing_paths(
        record.path_digests.as_deref(),
        call.caller.and_then(|c| c.path_digests),
    );
    finished(Settled::KeyReused { paths }, Outcome::KeyReused, Vec::new())
}

/// The answer when the store could not be asked: the side effect did not run.
fn store_down<E>(e: StoreError) -> Finished<E> {
    finished(Settled::StoreDown(e), Outcome::StoreError, Vec::new())
}

/// The answer to a repeat of an `at_most_once` call whose outcome is unknown.
fn outcome_unknown<E>() -> Finished<E> {
    finished(Settled::OutcomeUnknown, Outcome::Unknown, Vec::new())
}

fn finished<E>(settled: Settled<E>, outcome: Outcome, rules: Vec<&'static str>) -> Finished<E> {
    Finished {
        settled,
        outcome,
        rules,
    }
}

/// `operation`, given up as [`StoreError::Unavailable`] at `by` (never, without one: the sweep's
/// store requests have their own deadline). [`Executor::bounded`] is this with the answer's.
async fn within<T>(
    by: Option<Instant>,
    operation: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match by {
        Some(by) => tokio::time::timeout_at(by, operation)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "no time left before the deadline".into(),
                ))
            }),
        None => operation.await,
    }
}

/// The time left before `end`.
pub(crate) fn remaining(end: Instant) -> Duration {
    end.saturating_duration_since(Instant::now())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
