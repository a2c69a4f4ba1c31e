//! The state machine of one keyed call: claim, run the side effect once, complete or release,
//! wait for an identical call in flight, replay. It knows no event format and no tool transport:
//! the handler ([`crate::handler`]) and the library guard ([`crate::guard`]) both run it, each
//! with its own way to perform the side effect.
//!
//! Each claim's outcome goes through the pure [`decide`]; the executor performs the
//! [`NextAction`] and returns a [`Settled`] value that the caller turns into its answer.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Config, LEASE_MARGIN, Mode};
use crate::decide::{AfterRun, NextAction, RunEnd, after_run, decide};
use crate::key::{Call, Delivery, Keyer, Strategy, differing_paths};
use crate::seam::ReplyClass;
use crate::store::{ClaimRequest, Completion, LeaseToken, Record, Status, Store, StoreError};

/// How one invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The tool ran for this call.
    Executed,
    /// A completed record answered.
    Replayed,
    /// An identical in-flight call finished while this one waited, and its result answered.
    Waited,
    /// An identical call was still running when the wait bound passed: REPROMPT.
    InProgress,
    /// The tool failed, timed out or could not be reached: REPROMPT (or FAILURE without a route).
    ToolError,
    /// The store was unreachable: the tool was not called (fail closed).
    StoreError,
    /// The event or its arguments were invalid; nothing was claimed.
    BadRequest,
    /// Shadow mode: a repeat that enforce mode would have replayed (or waited for) ran again.
    ShadowReplay,
    /// The tool's policy turns deduplication off (`dedup = "off"`): it ran, unclaimed.
    DedupOff,
    /// A Gateway call that names no run ran unclaimed (`DEDUP_SESSIONLESS=pass_through`).
    Sessionless,
    /// A Gateway interceptor message that is not a keyed call (`tools/list`, `initialize`, our
    /// own answers seen again at RESPONSE): passed on untouched.
    PassedOn,
    /// An `at_most_once` call whose outcome is unknown: the tool was not run again, and the
    /// caller is told so until an operator settles the call (`dedup settle`).
    Unknown,
    /// The caller's idempotency key was first used with other arguments: refused, nothing ran.
    KeyReused,
    /// A Gateway interceptor invocation this version does not read (an HTTP target's, an
    /// unknown input version): passed on untouched.
    PassedUnread,
    /// An event of an entry point this deployment does not serve (`DEDUP_DOORS`): refused.
    DoorRefused,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 15] = [
        Outcome::Executed,
        Outcome::Replayed,
        Outcome::Waited,
        Outcome::InProgress,
        Outcome::ToolError,
        Outcome::StoreError,
        Outcome::BadRequest,
        Outcome::ShadowReplay,
        Outcome::DedupOff,
        Outcome::Sessionless,
        Outcome::PassedOn,
        Outcome::Unknown,
        Outcome::KeyReused,
        Outcome::PassedUnread,
        Outcome::DoorRefused,
    ];

    /// The outcome's own name (metrics, logs).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::Waited => "waited",
            Outcome::InProgress => "in_progress",
            Outcome::ToolError => "tool_error",
            Outcome::StoreError => "store_error",
            Outcome::BadRequest => "bad_request",
            Outcome::ShadowReplay => "shadow_replay",
            Outcome::DedupOff => "dedup_off",
            Outcome::Sessionless => "sessionless",
            Outcome::PassedOn => "passed_on",
            Outcome::Unknown => "outcome_unknown",
            Outcome::KeyReused => "idempotency_key_reused",
            Outcome::PassedUnread => "passed_unread",
            Outcome::DoorRefused => "door_refused",
        }
    }

    /// The word a caller reads in `dedup.outcome`: `executed` for a call that ran (shadow
    /// repeats included), `replayed` for one answered from the store (waited-for calls
    /// included), else the outcome's own name.
    pub fn caller_word(self) -> &'static str {
        match self {
            Outcome::Executed
            | Outcome::ShadowReplay
            | Outcome::DedupOff
            | Outcome::Sessionless => "executed",
            Outcome::Replayed | Outcome::Waited => "replayed",
            other => other.name(),
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The executor's own knobs (mode, retention, waiting, cache, timing), from [`Config`] plus fixed
/// margins. How a call is scoped belongs to the handler ([`crate::handler::DoorSettings`]).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DEDUP_MODE`: enforce, shadow (key and report, never replay) or off.
    pub mode: Mode,
    /// How long a completed result is replayed (`DEDUP_TTL_SECONDS`).
    pub ttl: Duration,
    /// How long a repeat waits for an identical call in flight (`DEDUP_WAIT_MS`).
    pub wait: Duration,
    /// Completed records the container keeps (`DEDUP_LOCAL_CACHE_ITEMS`, 0: no cache).
    pub local_cache_items: usize,
    /// The lease ends this long after the later of the Lambda deadline and the tool's own
    /// timeout (clock skew between containers).
    pub lease_margin: Duration,
    /// Time kept back before the deadline to store the result: the tool's timeout ends this
    /// long (plus `reply_margin`) before the deadline, so a completion and its retries finish
    /// while the invocation still lives.
    pub completion_reserve: Duration,
    /// Time kept back before the deadline to write the answer: every store call gives up then.
    pub reply_margin: Duration,
    /// The budget of an invocation without a deadline (`dedup replay`, tests), and the guard's
    /// lease (renewed while its side effect runs).
    pub default_budget: Duration,
    /// A claim that took longer than this (store retries) has its lease moved forward just
    /// before the side effect starts, so the lease covers the side effect from its start.
    pub slow_claim: Duration,
}

impl Settings {
    /// The configured mode, TTL, wait and cache, with the built-in margins.
    pub fn from_config(config: &Config) -> Settings {
        Settings {
            mode: config.mode,
            ttl: config.ttl,
            wait: config.wait,
            local_cache_items: config.local_cache_items,
            lease_margin: LEASE_MARGIN,
            completion_reserve: Duration::from_millis(2500),
            reply_margin: Duration::from_millis(200),
            default_budget: Duration::from_secs(60),
            slow_claim: Duration::from_millis(500),
        }
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings::from_config(&Config::default())
    }
}

/// One call, keyed.
#[derive(Debug, Clone, Copy)]
pub struct Keyed<'a> {
    /// The typed key, or the caller's key scoped ([`crate::key::CallerKeyed`]), 32 hex digits.
    pub key: &'a str,
    /// The strict fingerprint (keyer B) of the arguments, stored beside the result; for a
    /// caller-keyed call, the typed canonical form's (a repeat must match it).
    pub fingerprint: &'a str,
    /// The key core's view of the call (to explain which rules made a repeat meet the original).
    pub call: &'a Call<'a>,
    /// What an unknown outcome allows (the tool's policy, or what its Gateway listing says).
    pub delivery: Delivery,
    /// Set for a call keyed by its caller's key: a record under the key with another fingerprint
    /// is a mismatch.
    pub caller: Option<CallerKey<'a>>,
}

/// What a call keyed by its caller's own key carries beside its key.
#[derive(Debug, Clone, Copy)]
pub struct CallerKey<'a> {
    /// The arguments' leaf digests ([`crate::key::CallerKeyed::path_digests`]), stored with the
    /// claim so that a mismatch can name its paths; `None` when too many to store.
    pub path_digests: Option<&'a str>,
}

/// How long the side effect can run, and so how its claim's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// A side effect that stops by itself within `max_run_time` of being started (a tool
    /// Lambda's own timeout and start allowance; zero for one that cannot outlive the
    /// invocation). The lease is set once, to the later of that and the deadline, plus the margin.
    Covering {
        /// Longest the side effect can run once started.
        max_run_time: Duration,
    },
    /// An in-process side effect with no limit of its own (the library guard): the lease is
    /// `length` plus the margin, renewed every third of `length` while the side effect runs, so
    /// a long side effect keeps its key and a dead process frees it within one lease.
    Renewed {
        /// One lease's length before the margin.
        length: Duration,
    },
}

/// What running the side effect gave.
#[derive(Debug)]
pub enum ToolRun<E> {
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
pub enum Settled<E> {
    /// The side effect ran for this call (also shadow mode's repeats: see `outcome`).
    Executed {
        /// The tool's reply.
        reply: Vec<u8>,
    },
    /// A completed record answered: from the store, the warm cache, or after waiting.
    Replayed {
        /// The stored reply.
        reply: Arc<[u8]>,
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
pub struct Finished<E> {
    /// How the call ended.
    pub settled: Settled<E>,
    /// The outcome to report.
    pub outcome: Outcome,
    /// For replays: the normalization rules that made this call meet the stored one.
    pub rules: Vec<&'static str>,
}

/// Who takes a claim for a side effect that runs elsewhere ([`Executor::open`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOwner {
    /// The name the claim's token carries ([`LeaseToken::for_owner`]).
    pub name: String,
    /// The name stands for one request and no other: a claim found under it is this request's
    /// own, taken by an earlier invocation for the same request (the Gateway invokes an
    /// interceptor again after a failure or a timeout), and goes on as the owner's.
    pub is_one_request: bool,
}

/// What [`Executor::open`] ended with.
#[derive(Debug)]
pub enum Opened<E> {
    /// This request holds the claim: let the side effect run.
    Claimed,
    /// Shadow mode: nothing was claimed for this request (`outcome` says what enforce mode would
    /// have done); let the side effect run.
    Unclaimed(Outcome),
    /// The call is answered without running the side effect (replay, in progress, store down).
    Answered(Finished<E>),
}

/// What [`Executor::finish_claimed`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishedElsewhere {
    /// This request's claim was completed, released or kept.
    Settled(AfterRun),
    /// The call was already completed (a replayed answer, or an earlier owner's reply).
    AlreadyCompleted,
    /// No claim of this request holds the key (another request's claim, or none).
    NoClaim,
}

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

/// The claim a side effect runs under, and when it was sent.
struct Started {
    token: Option<LeaseToken>,
    claimed_at: Instant,
}

/// Rounds of claim → wait → claim again before answering "in progress".
const MAX_CLAIM_ROUNDS: u32 = 3;
/// Moves of a lease answered too slowly before the call is refused (see `cover_late_start`).
const MAX_LEASE_MOVES: u32 = 3;
const FIRST_POLL: Duration = Duration::from_millis(25);
const MAX_POLL: Duration = Duration::from_millis(500);

/// Runs keyed calls against one store.
pub struct Executor<S> {
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
    orphans: Mutex<HashMap<LeaseToken, String>>,
}

/// Orphaned claims remembered at most (each is released at the next call, so few ever wait).
const MAX_ORPHANS: usize = 256;

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
    pub fn new(store: S, keyer: Keyer, settings: Settings) -> Executor<S> {
        let cache = RecordCache::new(settings.local_cache_items);
        Executor {
            store: Arc::new(store),
            keyer,
            settings,
            cache,
            orphans: Mutex::default(),
        }
    }

    /// Adjusts the settings (tests shorten margins and budgets).
    pub fn with_settings(mut self, adjust: impl FnOnce(&mut Settings)) -> Executor<S> {
        adjust(&mut self.settings);
        self.cache = RecordCache::new(self.settings.local_cache_items);
        self
    }

    /// The store claims are made in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The keyer calls are keyed with.
    pub fn keyer(&self) -> &Keyer {
        &self.keyer
    }

    /// The executor's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Runs `call` at most once per key. `end` is the deadline (monotonic) by which the answer
    /// is due; `lease` says how long the side effect may run and how its claim is kept.
    /// `side_effect` gets the time it may take.
    pub async fn run<E, F, Fut>(
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
        match self.acquire(call, end, lease, None).await {
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
    pub async fn open<E>(
        &self,
        call: Keyed<'_>,
        end: Instant,
        lease: Lease,
        owner: &RequestOwner,
    ) -> Opened<E> {
        match self.acquire(call, end, lease, Some(owner)).await {
            Acquired::Owner(_) => Opened::Claimed,
            Acquired::Shadow { outcome, .. } => Opened::Unclaimed(outcome),
            Acquired::Answered(done) => Opened::Answered(done),
        }
    }

    /// Settles a claim [`Executor::open`] took, once its side effect's reply is seen elsewhere:
    /// stores, releases or keeps it as [`after_run`] says, fenced by the claim's token. Only the
    /// claim `owner` took is touched; anything else (a completed record, another request's claim,
    /// none) is left as it is and said in the answer. What an unknown outcome allows is the claim's
    /// (taken `at_most_once` or not), whatever this invocation's view of the tool says.
    pub async fn finish_claimed(
        &self,
        call: Keyed<'_>,
        owner: &str,
        end: Instant,
        run_end: RunEnd,
        reply: &[u8],
    ) -> Result<FinishedElsewhere, StoreError> {
        let record = match self.bounded(end, self.store.get(call.key)).await? {
            None => return Ok(FinishedElsewhere::NoClaim),
            Some(record) if record.status == Status::Completed => {
                return Ok(FinishedElsewhere::AlreadyCompleted);
            }
            Some(record) if record.token.owner() != Some(owner) => {
                return Ok(FinishedElsewhere::NoClaim);
            }
            Some(record) => record,
        };
        let token = record.token;
        let lease = Lease::Covering {
            max_run_time: Duration::ZERO,
        };
        let claimed_as = Keyed {
            delivery: Delivery::default_for(record.at_most_once),
            ..call
        };
        let after = after_run(run_end, claimed_as.delivery);
        match after {
            AfterRun::Complete => self.complete(call, &token, reply, end, lease).await,
            AfterRun::Release => self.release(call.key, Some(&token)).await,
            AfterRun::SettleUnknown => self.settle_unknown(claimed_as, &token, end).await,
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
        let mut rules = Vec::new();
        let shadow = self.settings.mode == Mode::Shadow;
        if !shadow {
            if let Some(hit) = self
                .cache
                .as_ref()
                .and_then(|c| c.get(call.key, self.store.now_ms()))
                // A caller key met with other arguments is answered from the record, which says how.
                .filter(|hit| call.caller.is_none() || hit.fingerprint == call.fingerprint)
            {
                tracing::debug!("replayed from the warm-container cache");
                return Acquired::Answered(Finished {
                    rules: self.meeting_rules(&hit.fingerprint, call),
                    settled: Settled::Replayed { reply: hit.result },
                    outcome: Outcome::Replayed,
                });
            }
        }
        self.release_orphans(end).await;
        let wait_until = Instant::now() + self.wait_bound(end);
        for _round in 0..MAX_CLAIM_ROUNDS {
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
            let wait_left = wait_until.saturating_duration_since(Instant::now());
            let now_ms = self.store.now_ms();
            let caller_fingerprint = call.caller.map(|_| call.fingerprint);
            let own = owner.filter(|o| o.is_one_request).map(|o| o.name.as_str());
            let record = match decide(
                claim,
                self.settings.mode,
                wait_left,
                now_ms,
                caller_fingerprint,
                own,
            ) {
                NextAction::Execute { token } => {
                    return Acquired::Owner(Started {
                        token: Some(token),
                        claimed_at: claim_started,
                    });
                }
                NextAction::Shadow { seen } => {
                    let outcome = match &seen {
                        Some(record) => {
                            rules = self.meeting_rules(&record.fingerprint, call);
                            tracing::info!(rules = %rules.join(","), "shadow mode: would have replayed or waited");
                            Outcome::ShadowReplay
                        }
                        None => {
                            tracing::warn!("shadow mode: store unavailable, executing anyway");
                            Outcome::Executed
                        }
                    };
                    return Acquired::Shadow {
                        started: Started {
                            token: None,
                            claimed_at: claim_started,
                        },
                        outcome,
                        rules,
                    };
                }
                NextAction::StoreDown(e) => {
                    return Acquired::Answered(finished(
                        Settled::StoreDown(e),
                        Outcome::StoreError,
                        rules,
                    ));
                }
                NextAction::Replay(record) => {
                    return Acquired::Answered(self.replay(record, call, Outcome::Replayed));
                }
                NextAction::Unknown(_) => return Acquired::Answered(outcome_unknown()),
                NextAction::Mismatch(record) => {
                    return Acquired::Answered(key_reused(&record, call));
                }
                NextAction::Busy(record) => return Acquired::Answered(self.in_progress(&record)),
                NextAction::Wait(record) => record,
            };
            let done = match self.wait(call.key, record, wait_until, end).await {
                Waited::Completed(record) => self.replay(record, call, Outcome::Waited),
                Waited::Claimable => continue,
                Waited::StillRunning(record) => self.in_progress(&record),
                Waited::Failed(e) => finished(Settled::StoreDown(e), Outcome::StoreError, rules),
            };
            return Acquired::Answered(done);
        }
        Acquired::Answered(self.settle_after_racing(call, end).await)
    }

    /// After every claim round lost to identical calls: what the record says now.
    async fn settle_after_racing<E>(&self, call: Keyed<'_>, end: Instant) -> Finished<E> {
        let rules = Vec::new();
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
                    rules,
                )
            }
            Err(e) => finished(Settled::StoreDown(e), Outcome::StoreError, rules),
        }
    }

    /// How long a lease taken (or moved) now lasts.
    fn lease_length(&self, end: Instant, lease: Lease) -> Duration {
        let running = match lease {
            // Until the later of our deadline and the tool's own end: a tool that outlives us
            // may still be running after our deadline.
            Lease::Covering { max_run_time } => remaining(end).max(max_run_time),
            Lease::Renewed { length } => length,
        };
        running + self.settings.lease_margin
    }

    fn claim_request<'a>(&self, call: Keyed<'a>, end: Instant, lease: Lease) -> ClaimRequest<'a> {
        let now = self.store.now_ms();
        ClaimRequest {
            key: call.key,
            fingerprint: call.fingerprint,
            tool: call.call.tool,
            lease_until_ms: now.saturating_add(millis(self.lease_length(end, lease))),
            expires_at_s: self.expiry_from(call.call.policy_name(), now),
            owner: None,
            at_most_once: call.delivery == Delivery::AtMostOnce,
            path_digests: call.caller.and_then(|c| c.path_digests),
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
        let lease_until_ms = now.saturating_add(millis(self.lease_length(end, lease)));
        let extend = self.store.extend_lease(
            call.key,
            token,
            lease_until_ms,
            self.expiry_from(call.call.policy_name(), now),
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
        match tokio::time::timeout(self.until_answer(end), operation).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(
                "no time left before the deadline".into(),
            )),
        }
    }

    /// What is left of the time before the answer is due: the deadline less the reply margin.
    fn until_answer(&self, end: Instant) -> Duration {
        remaining(end).saturating_sub(self.settings.reply_margin)
    }

    fn remember_orphan(&self, key: &str, token: LeaseToken) {
        let mut orphans = self.orphans.lock().unwrap_or_else(|p| p.into_inner());
        if orphans.len() >= MAX_ORPHANS {
            // Past the bound every remembered claim is forgotten and waits out its lease.
            orphans.clear();
        }
        orphans.insert(token, key.to_string());
    }

    /// Releases the claims written while their answers were lost (fenced: a claim someone else
    /// took over since is left alone). One that cannot be released yet is kept for next time,
    /// whatever the error: a refusal now (an expired credential, a throttled table, a garbled
    /// answer) says nothing about the next call, and a forgotten claim blocks its key until its
    /// lease ends.
    async fn release_orphans(&self, end: Instant) {
        let pending: Vec<(LeaseToken, String)> = {
            let mut orphans = self.orphans.lock().unwrap_or_else(|p| p.into_inner());
            if orphans.is_empty() {
                return;
            }
            orphans.drain().collect()
        };
        for (token, key) in pending {
            match self.bounded(end, self.store.release(&key, &token)).await {
                Ok(()) => tracing::info!("released a claim whose answers were lost"),
                Err(StoreError::LeaseLost) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not release a claim whose answers were lost; trying again at the next call");
                    self.remember_orphan(&key, token)
                }
            }
        }
    }

    /// The expiry of a record of `tool` written at `now_ms`: the tool policy's `ttl_seconds`
    /// later, else `DEDUP_TTL_SECONDS` later.
    fn expiry_from(&self, tool: &str, now_ms: i64) -> i64 {
        let ttl = self
            .keyer
            .policies()
            .get(tool)
            .and_then(|p| p.ttl)
            .unwrap_or(self.settings.ttl);
        now_ms
            .div_euclid(1000)
            .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX))
    }

    fn wait_bound(&self, end: Instant) -> Duration {
        self.settings
            .wait
            .min(remaining(end).saturating_sub(self.settings.completion_reserve))
    }

    /// Polls an in-flight record with backoff until it completes, becomes claimable, or `until`.
    async fn wait(&self, key: &str, mut record: Record, until: Instant, end: Instant) -> Waited {
        let mut backoff = PollBackoff::default();
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
            let pause = backoff.next_pause(|most| fastrand::u64(0..=most));
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
        if let Some(token) = token {
            if let Err(settled) = self
                .cover_late_start(call, token, &started, end, lease)
                .await
            {
                return settled;
            }
        }
        // Sized after the lease was moved: the time the extensions took is the tool's no more.
        let timeout = remaining(end).saturating_sub(kept_back);
        if timeout.is_zero() {
            self.release(key, token).await;
            return Settled::NoTime;
        }
        let run = match (lease, token) {
            (Lease::Renewed { length }, Some(token)) => {
                self.renewing(call, token, end, lease, length, side_effect(timeout))
                    .await
            }
            _ => side_effect(timeout).await,
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
        match after_run(run_end, call.delivery) {
            AfterRun::Complete => {
                if let Settled::Executed { reply } = &settled {
                    self.complete(call, token, reply, end, lease).await;
                }
            }
            AfterRun::Release => self.release(key, Some(token)).await,
            AfterRun::Keep => {
                tracing::warn!(
                    "the side effect may have happened: the claim is kept until its lease ends"
                )
            }
            AfterRun::SettleUnknown => self.settle_unknown(call, token, end).await,
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
        call: Keyed<'_>,
        token: &LeaseToken,
        reply: &[u8],
        end: Instant,
        lease: Lease,
    ) {
        let expires_at_s = self.expiry_from(call.call.policy_name(), self.store.now_ms());
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
                    cache.insert(call.key, reply, call.fingerprint, expires_at_s);
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
    async fn settle_unknown(&self, call: Keyed<'_>, token: &LeaseToken, end: Instant) {
        tracing::warn!(
            key = call.key,
            "the side effect may have happened and the tool is at_most_once: the call is settled \
             as outcome unknown until an operator settles it (dedup settle)"
        );
        let expires_at_s = self.expiry_from(call.call.policy_name(), self.store.now_ms());
        let write = self.store.settle_unknown(call.key, token, expires_at_s);
        if let Err(e) = self.bounded(end, write).await {
            tracing::warn!(error = %e, "could not settle the call as outcome unknown; its claim, \
                 taken at_most_once, stays unknown once its lease ends");
        }
    }

    async fn release(&self, key: &str, token: Option<&LeaseToken>) {
        let Some(token) = token else { return };
        match self.store.release(key, token).await {
            Ok(()) | Err(StoreError::LeaseLost) => {}
            Err(e) => {
                tracing::warn!(error = %e, "release failed; the key stays blocked until its lease ends")
            }
        }
    }

    fn replay<E>(&self, record: Record, call: Keyed<'_>, outcome: Outcome) -> Finished<E> {
        if call.caller.is_some() && record.fingerprint != call.fingerprint {
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

/// The pauses between polls of a record in flight: each between half and all of a delay that
/// starts at [`FIRST_POLL`] and doubles up to [`MAX_POLL`]. The random half spreads the polls of
/// callers that began waiting together, so they do not reach the store in step.
#[derive(Debug)]
struct PollBackoff {
    delay: Duration,
}

impl Default for PollBackoff {
    fn default() -> PollBackoff {
        PollBackoff { delay: FIRST_POLL }
    }
}

impl PollBackoff {
    /// The next pause; `random(most)` draws a number of microseconds in `0..=most`.
    fn next_pause(&mut self, random: impl FnOnce(u64) -> u64) -> Duration {
        let half = self.delay / 2;
        let most = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
        let pause = half + Duration::from_micros(random(most));
        self.delay = (self.delay * 2).min(MAX_POLL);
        pause
    }
}

/// The time left before `end`.
pub fn remaining(end: Instant) -> Duration {
    end.saturating_duration_since(Instant::now())
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Warm-container LRU of completed records (`DEDUP_LOCAL_CACHE_ITEMS`). Only completed records
/// are cached: they never change until they expire, and expiry is checked on every hit.
#[derive(Debug)]
struct RecordCache {
    inner: Mutex<lru::LruCache<String, CacheEntry>>,
}

#[derive(Debug, Clone)]
struct CacheEntry {
    result: Arc<[u8]>,
    fingerprint: String,
    expires_at_s: i64,
}

impl RecordCache {
    /// `None` for a capacity of 0 (the cache is off).
    fn new(capacity: usize) -> Option<RecordCache> {
        NonZeroUsize::new(capacity).map(|capacity| RecordCache {
            inner: Mutex::new(lru::LruCache::new(capacity)),
        })
    }

    fn get(&self, key: &str, now_ms: i64) -> Option<CacheEntry> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match inner.get(key) {
            Some(entry) if entry.expires_at_s >= now_ms.div_euclid(1000) => Some(entry.clone()),
            Some(_) => {
                inner.pop(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: &str, record: &Record, now_ms: i64) {
        let (Status::Completed, Some(result)) = (record.status, &record.result) else {
            return;
        };
        if record.is_expired(now_ms) {
            return;
        }
        self.insert(key, result, &record.fingerprint, record.expires_at_s);
    }

    /// Caches a completed result.
    fn insert(&self, key: &str, result: &[u8], fingerprint: &str, expires_at_s: i64) {
        let entry = CacheEntry {
            result: Arc::from(result),
            fingerprint: fingerprint.to_string(),
            expires_at_s,
        };
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(key.to_string(), entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    /// The tool gets the time to the deadline less what the completion and the answer need: a
    /// tool given more would still be running when its result has to be stored.
    #[tokio::test]
    async fn the_tool_is_given_the_time_left_less_the_completion_reserve_and_the_reply_margin() {
        let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
        let settings = executor.settings().clone();
        let keyed = keyed("f", None);
        let budget = Duration::from_secs(10);
        let end = Instant::now() + budget;
        let given = Arc::new(Mutex::new(None));
        let finished: Finished<()> = executor
            .run(keyed, end, NO_RUN_TIME, |timeout| {
                *given.lock().unwrap() = Some(timeout);
                async {
                    ToolRun::Replied {
                        reply: b"{}".to_vec(),
                        class: ReplyClass::Success,
                    }
                }
            })
            .await;
        assert_eq!(finished.outcome, Outcome::Executed);
        let given = given.lock().unwrap().expect("the tool ran");
        let most = budget - settings.completion_reserve - settings.reply_margin;
        assert!(
            given <= most && given > most - Duration::from_secs(1),
            "the tool was given {given:?}; at most {most:?} fits before the deadline"
        );
    }

    const CHARGE: Call<'static> = Call {
        tool: "charge_card",
        args: r#"{"amount":42}"#,
        namespace: None,
        run_id: Some("run"),
        step: Some("1"),
        schema: None,
        policy: None,
    };

    fn keyed<'a>(fingerprint: &'a str, caller: Option<CallerKey<'a>>) -> Keyed<'a> {
        Keyed {
            key: "k",
            fingerprint,
            call: &CHARGE,
            delivery: Delivery::AtLeastOnce,
            caller,
        }
    }

    const NO_RUN_TIME: Lease = Lease::Covering {
        max_run_time: Duration::ZERO,
    };

    async fn replying(_timeout: Duration) -> ToolRun<()> {
        ToolRun::Replied {
            reply: b"{}".to_vec(),
            class: ReplyClass::Success,
        }
    }

    /// The interceptor door's two halves: a reply settles only the claim its own request took,
    /// and never a call that is already completed.
    #[tokio::test]
    async fn a_claim_opened_for_a_request_is_settled_only_by_that_request() {
        let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
        let end = Instant::now() + Duration::from_secs(10);
        let call = keyed("f", None);
        let success = RunEnd::Replied(ReplyClass::Success);
        let owner = |name: &str, is_one_request| RequestOwner {
            name: name.into(),
            is_one_request,
        };
        let opened: Opened<()> = executor
            .open(call, end, NO_RUN_TIME, &owner("request-a", false))
            .await;
        assert!(matches!(opened, Opened::Claimed), "{opened:?}");
        // Invoked again for the same request: a name that may stand for several requests waits
        // (answered "in progress" here: no wait), one that stands for one request goes on as
        // the owner, under the claim it already holds.
        let executor = executor.with_settings(|s| s.wait = Duration::ZERO);
        let shared: Opened<()> = executor
            .open(call, end, NO_RUN_TIME, &owner("request-a", false))
            .await;
        assert!(matches!(shared, Opened::Answered(_)), "{shared:?}");
        let before = executor.store().get("k").await.unwrap().unwrap();
        let again: Opened<()> = executor
            .open(call, end, NO_RUN_TIME, &owner("request-a", true))
            .await;
        assert!(matches!(again, Opened::Claimed), "{again:?}");
        assert_eq!(
            executor.store().get("k").await.unwrap().unwrap().token,
            before.token,
            "the same claim"
        );
        let not_ours: Opened<()> = executor
            .open(call, end, NO_RUN_TIME, &owner("request-b", true))
            .await;
        assert!(matches!(not_ours, Opened::Answered(_)), "{not_ours:?}");

        let other = executor.finish_claimed(call, "request-b", end, success, b"{}");
        assert_eq!(other.await.unwrap(), FinishedElsewhere::NoClaim);
        let record = executor.store().get("k").await.unwrap().expect("the claim");
        assert_eq!(
            record.status,
            Status::InProgress,
            "another request's reply settled it"
        );

        let own = executor.finish_claimed(call, "request-a", end, success, b"{}");
        assert_eq!(
            own.await.unwrap(),
            FinishedElsewhere::Settled(AfterRun::Complete)
        );
        let record = executor
            .store()
            .get("k")
            .await
            .unwrap()
            .expect("the result");
        assert_eq!(record.status, Status::Completed);

        for request in ["request-a", "request-b"] {
            let again = executor.finish_claimed(call, request, end, success, b"{}");
            assert_eq!(
                again.await.unwrap(),
                FinishedElsewhere::AlreadyCompleted,
                "{request}"
            );
        }
    }

    /// A caller-keyed repeat with the same arguments is answered by the warm cache without a
    /// request; with other arguments it goes to the store, whose record says the key was reused.
    #[tokio::test]
    async fn the_warm_cache_answers_a_caller_keyed_repeat_only_with_the_same_arguments() {
        let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default())
            .with_settings(|s| s.local_cache_items = 8);
        let end = Instant::now() + Duration::from_secs(10);
        let caller = Some(CallerKey { path_digests: None });
        let first: Finished<()> = executor
            .run(keyed("f1", caller), end, NO_RUN_TIME, replying)
            .await;
        assert_eq!(first.outcome, Outcome::Executed);

        let before = executor.store().requests().total();
        let same: Finished<()> = executor
            .run(keyed("f1", caller), end, NO_RUN_TIME, replying)
            .await;
        assert_eq!(same.outcome, Outcome::Replayed);
        assert_eq!(
            executor.store().requests().total(),
            before,
            "the repeat asked the store"
        );

        let other: Finished<()> = executor
            .run(keyed("f2", caller), end, NO_RUN_TIME, replying)
            .await;
        assert_eq!(other.outcome, Outcome::KeyReused);
    }

    /// Each pause is between half and all of the delay, and the delay doubles from the first
    /// poll's to the longest.
    #[test]
    fn the_polls_of_a_wait_back_off_by_doubling_with_a_random_half() {
        let delays_ms = [25, 50, 100, 200, 400, 500, 500];
        let mut shortest = PollBackoff::default();
        let mut longest = PollBackoff::default();
        for delay_ms in delays_ms {
            let delay = Duration::from_millis(delay_ms);
            assert_eq!(shortest.next_pause(|_| 0), delay / 2);
            let mut asked = None;
            let pause = longest.next_pause(|most| {
                asked = Some(most);
                most
            });
            assert_eq!(pause, delay);
            assert_eq!(asked, Some(delay_ms * 1000 / 2), "the random half's bound");
        }
    }

    #[test]
    fn an_outcome_shows_as_its_metric_name() {
        for outcome in Outcome::ALL {
            assert_eq!(outcome.to_string(), outcome.name());
        }
        assert_eq!(Outcome::KeyReused.to_string(), "idempotency_key_reused");
    }

    #[test]
    fn every_handed_back_token_of_one_key_is_kept_for_release() {
        let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
        executor.remember_orphan("k", LeaseToken::new("written"));
        executor.remember_orphan("k", LeaseToken::new("never-written"));
        let orphans = executor.orphans.lock().unwrap();
        assert_eq!(
            orphans.len(),
            2,
            "a later token replaced the written claim's"
        );
        assert_eq!(orphans[&LeaseToken::new("written")], "k");
    }

    fn completed(key: &str, expires_at_s: i64) -> Record {
        Record {
            key: key.into(),
            status: Status::Completed,
            expires_at_s,
            lease_until_ms: 0,
            token: LeaseToken::new("t"),
            fingerprint: "f".into(),
            tool: "tool".into(),
            created_at_ms: 0,
            result: Some(key.as_bytes().to_vec()),
            omitted_result_bytes: None,
            outcome_unknown: false,
            at_most_once: false,
            path_digests: None,
            offloaded: None,
        }
    }

    #[test]
    fn the_record_cache_evicts_the_least_recently_used_and_honours_expiry() {
        assert!(RecordCache::new(0).is_none(), "capacity 0 is off");
        let cache = RecordCache::new(2).unwrap();
        cache.put("a", &completed("a", 100), 0);
        cache.put("b", &completed("b", 100), 0);
        assert!(cache.get("a", 0).is_some());
        cache.put("c", &completed("c", 100), 0);
        assert!(cache.get("b", 0).is_none(), "b was least recently used");
        assert!(cache.get("a", 0).is_some() && cache.get("c", 0).is_some());
        assert!(cache.get("a", 101_000).is_none(), "expired");
        let mut in_progress = completed("d", 100);
        in_progress.status = Status::InProgress;
        cache.put("d", &in_progress, 0);
        assert!(
            cache.get("d", 0).is_none(),
            "in-progress records are never cached"
        );
    }
}
