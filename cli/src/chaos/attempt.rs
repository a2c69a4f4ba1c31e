//! One invocation's faults and what happened to it, as seen from the tool and the store.
//!
//! The soak runs each invocation inside [`ATTEMPT`] (a task-local), so that the tool and the
//! store wrapper, called by the handler in the same task, can act on the invocation's planned
//! fault and note what they saw: when the claim was made and until when, which receipt the tool
//! wrote, whether the result was stored. The oracle uses these notes only to tell an allowed
//! re-execution (after an attempt whose outcome was unknown and whose lease had ended) from a
//! double execution; the count of side effects comes from the ledger alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::proxy::{KeyedFault, KeyedFaults};
use crate::demo::DemoTool;
use toolcall_dedup::dispatch::DispatchError;
use toolcall_dedup::store::{
    ClaimOutcome, ClaimRequest, Clock, LeaseToken, Record, RecordFilter, Records, RequestCounts,
    SettleAs, Status, Store, StoreError, SystemClock,
};

tokio::task_local! {
    /// The invocation the current task runs.
    pub(crate) static ATTEMPT: Arc<Attempt>;
}

/// What the tool does on this invocation (if the handler calls it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolFault {
    None,
    /// Raises `DedupNothingRan` before doing anything: the tool says nothing ran.
    ErrorBeforeEffect,
    /// Does the side effect, then raises a validation-style error (`ValidationException`, as an
    /// AWS SDK v3 Node tool whose receipt write was rejected): the outcome is unknown.
    TypedErrorAfterEffect,
    /// Does the side effect, then the invoke fails with a Lambda 4xx that can come mid-run
    /// (`EFSIOException`, 410), as the Lambda dispatcher reports it: the outcome is unknown.
    FourXxAfterRun,
    /// Does the side effect, then crashes (`Runtime.ExitError`): the outcome is unknown.
    CrashAfterEffect,
    /// Never answers; the dispatcher gives up at its timeout. Nothing ran.
    HangPastTimeout,
    /// Ignores its timeout and does the side effect close to the Lambda deadline, which may kill
    /// the invocation before or after the effect.
    SlowPastDeadline,
    /// The invocation is killed (future dropped) while the tool runs, before the effect.
    KillBeforeEffect,
    /// The invocation is killed right after the effect, before the result is stored.
    KillAfterEffect,
    /// The invocation pauses after the tool returned, before storing the result, until its lease
    /// has ended and another invocation has taken the key over; then it resumes and completes.
    /// (A frozen container, a long GC or VM pause, or a clock skewed past the margin: the case
    /// the lease token fences. Lambda would kill a paused invocation at its deadline; this one is
    /// not killed.)
    PauseBeforeComplete,
    /// Store path, armed by [`NotingStore`] through the proxy's [`KeyedFaults`]: every answer to
    /// the claim's PutItem is held past the attempt timeout for [`SLOW_CLAIM_HOLD_FOR`], so the
    /// claim succeeds only on a late retry and the executor must move the lease before the tool
    /// starts. The tool (a Lambda with a timeout of its own, [`LONG_RUN`]) then outlives the
    /// invocation and does its side effect after the end of a lease sized when the claim was sent,
    /// but within the moved one.
    SlowClaim,
    /// Store path: the tool uses nearly all of its allowed time, then every answer to the
    /// completion's UpdateItem is held (the first ones past the attempt timeout, then slow), so the
    /// completion ends near the Lambda deadline.
    SlowCompletionNearDeadline,
    /// Store path: every answer to the claim's PutItem is dropped (forwarded, then the connection
    /// closed) until the store's retries run out, so the store must read the claim back and
    /// release it, or hand its token back ([`StoreError::ClaimUnconfirmed`]) for the executor to
    /// release at its next call. The tool is never called.
    ClaimAnswersLost,
    /// Store path: the tool runs as usual; the first UpdateItem of its completion is answered
    /// HTTP 400 `ValidationException` "Item size has exceeded the maximum allowed size" without
    /// forwarding (as for a result over DynamoDB's 400 KB item limit), so the store writes the
    /// `result_omitted` marker instead: the call stays settled, and repeats are told it already
    /// ran, without its result.
    ItemTooLarge,
    /// Store path: the claim's first PutItem is answered HTTP 400 `ValidationException` "Item size
    /// has exceeded the maximum allowed size" without forwarding (as for a call whose key or
    /// arguments make the claim item too large): the claim fails closed, the tool is not called.
    ItemTooLargeOnClaim,
    /// `Invoke` path ([`super::lambda`]): throttled once (retried, then the function runs) or on
    /// every attempt (the function never started: the claim is released).
    InvokeThrottled,
    /// `Invoke` path: an error Lambda answers before the function starts (400, 403, 404, 409,
    /// 413, 415): the claim is released.
    InvokeRefused,
    /// `Invoke` path: a set-up or restore failure before the handler (`SnapStart*`, `EFSMount*`)
    /// that the dispatcher cannot tell from a started function: the claim is kept.
    InvokePrestartUnknown,
    /// `Invoke` path: 500, 503 or a 502 of the execution environment, before or after the
    /// function ran: the claim is kept.
    Invoke5xx,
    /// `Invoke` path: 200 with `Unhandled` `Sandbox.Timedout` after the side effect, or
    /// `Runtime.InvalidEntrypoint` before any (read by `error_payload`): the claim is kept.
    SandboxTimedout,
    /// `Invoke` path: the connect refused (released), the connection closed after the function
    /// ran or its answer cut (kept).
    InvokeConnectionLost,
}

/// How long the [`ToolFault::SlowClaim`] tool may run (its own timeout), and so what the lease
/// covers from the tool's start.
pub(crate) const LONG_RUN: Duration = super::BUDGET;
/// The [`ToolFault::SlowClaim`] side effect happens this long before [`LONG_RUN`] ends.
pub(super) const LONG_RUN_SLACK: Duration = Duration::from_millis(100);
/// PutItem answers are held this long past the attempt timeout...
const SLOW_CLAIM_HOLD: Duration =
    Duration::from_millis(super::ATTEMPT_TIMEOUT.as_millis() as u64 + 100);
/// ...for requests arriving within this long of the claim: the first two attempts (the write
/// applies, then the retry's conditional check) are lost, the third is answered.
const SLOW_CLAIM_HOLD_FOR: Duration = Duration::from_millis(750);
/// [`ToolFault::SlowCompletionNearDeadline`]: the tool ends this long before its timeout...
pub(super) const NEAR_TIMEOUT: Duration = Duration::from_millis(50);
/// ...the completion's first answers are lost (held past the attempt timeout) for this long...
const SLOW_COMPLETION_LOST_FOR: Duration = Duration::from_millis(750);
/// ...and later ones are slow (within the attempt timeout) until the store's deadline.
const SLOW_COMPLETION_HOLD: Duration = Duration::from_millis(250);
/// [`ToolFault::ClaimAnswersLost`]: PutItem answers are dropped for longer than the store's
/// retry deadline.
const CLAIM_LOST_FOR: Duration =
    Duration::from_millis(super::STORE_DEADLINE.as_millis() as u64 + 300);

impl ToolFault {
    pub(crate) const ALL: [ToolFault; 21] = [
        ToolFault::None,
        ToolFault::ErrorBeforeEffect,
        ToolFault::TypedErrorAfterEffect,
        ToolFault::FourXxAfterRun,
        ToolFault::CrashAfterEffect,
        ToolFault::HangPastTimeout,
        ToolFault::SlowPastDeadline,
        ToolFault::KillBeforeEffect,
        ToolFault::KillAfterEffect,
        ToolFault::PauseBeforeComplete,
        ToolFault::SlowClaim,
        ToolFault::SlowCompletionNearDeadline,
        ToolFault::ClaimAnswersLost,
        ToolFault::ItemTooLarge,
        ToolFault::ItemTooLargeOnClaim,
        ToolFault::InvokeThrottled,
        ToolFault::InvokeRefused,
        ToolFault::InvokePrestartUnknown,
        ToolFault::Invoke5xx,
        ToolFault::SandboxTimedout,
        ToolFault::InvokeConnectionLost,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            ToolFault::None => "none",
            ToolFault::ErrorBeforeEffect => "tool_error_before_effect",
            ToolFault::TypedErrorAfterEffect => "tool_typed_error_after_effect",
            ToolFault::FourXxAfterRun => "tool_4xx_after_run",
            ToolFault::CrashAfterEffect => "tool_crash_after_effect",
            ToolFault::HangPastTimeout => "tool_hang_past_timeout",
            ToolFault::SlowPastDeadline => "tool_slow_past_deadline",
            ToolFault::KillBeforeEffect => "kill_before_effect",
            ToolFault::KillAfterEffect => "kill_after_effect",
            ToolFault::PauseBeforeComplete => "pause_before_complete_past_lease",
            ToolFault::SlowClaim => "store_slow_claim",
            ToolFault::SlowCompletionNearDeadline => "store_slow_completion_near_deadline",
            ToolFault::ClaimAnswersLost => "store_claim_answers_lost",
            ToolFault::ItemTooLarge => "store_item_too_large",
            ToolFault::ItemTooLargeOnClaim => "store_item_too_large_on_claim",
            ToolFault::InvokeThrottled => "tool_invoke_throttled",
            ToolFault::InvokeRefused => "tool_invoke_refused",
            ToolFault::InvokePrestartUnknown => "tool_invoke_prestart_unknown",
            ToolFault::Invoke5xx => "tool_invoke_5xx",
            ToolFault::SandboxTimedout => "tool_sandbox_timedout",
            ToolFault::InvokeConnectionLost => "tool_invoke_connection_lost",
        }
    }

    /// Sent through the real `LambdaDispatcher` to the fake Lambda ([`super::lambda`]).
    pub(crate) fn is_invoke(self) -> bool {
        matches!(
            self,
            ToolFault::InvokeThrottled
                | ToolFault::InvokeRefused
                | ToolFault::InvokePrestartUnknown
                | ToolFault::Invoke5xx
                | ToolFault::SandboxTimedout
                | ToolFault::InvokeConnectionLost
        )
    }

    /// Counted by the fault proxy when it hits (its name is a [`super::proxy::StoreFault`]'s),
    /// not by the soak when the tool is reached.
    pub(crate) fn counted_by_proxy(self) -> bool {
        matches!(
            self,
            ToolFault::ItemTooLarge | ToolFault::ItemTooLargeOnClaim
        )
    }
}

/// How the store took this invocation's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    Stored,
    /// Stored without its result (too large for an item): the `result_omitted` marker.
    ResultOmitted,
    LeaseLost,
    Failed,
}

/// What became of a claim whose every answer was lost ([`ToolFault::ClaimAnswersLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostClaim {
    /// The store said it read the claim back and released it (or found it was not written), and
    /// a read right after found the key not held by it.
    ReleasedByStore,
    /// The store said so, but a read right after found the claim still holding the key, and no
    /// write of it was in flight when the store answered.
    LeftHeld,
    /// The store said so while a write of the claim was still in flight (forwarded, not yet
    /// answered by the server), or one was answered while the store read back and released (it
    /// may have applied after the read), and a read right after found the claim holding the key.
    /// Left to its lease.
    AppliedAfterReadBack,
    /// The store said so; the read after could not be made.
    Unchecked,
    /// The store handed the token back; the executor must release it.
    HandedBack,
    /// The executor released a handed-back token (or found it taken over).
    HandedBackReleased,
}

/// Notes on one invocation.
#[derive(Debug, Default, Clone)]
pub(crate) struct Notes {
    /// The store time the successful claim's condition was written with (the store's first clock
    /// reading in the claim, noted by [`NotingClock`]), and the lease it asked for.
    pub(crate) claimed_at_ms: Option<i64>,
    pub(crate) lease_until_ms: Option<i64>,
    /// The token of that claim.
    pub(crate) token: Option<String>,
    /// The tool was called.
    pub(crate) invoked: bool,
    /// The receipt the tool wrote, and when.
    pub(crate) receipt_id: Option<String>,
    pub(crate) completion: Option<Completion>,
    /// Store time when the completion was sent.
    pub(crate) completed_at_ms: Option<i64>,
    /// The executor moved the lease (a slow claim).
    pub(crate) lease_extended: bool,
    /// For [`ToolFault::ClaimAnswersLost`]: the claim failed, and what became of it.
    pub(crate) lost_claim: Option<LostClaim>,
    /// Store time when the completion returned.
    pub(crate) completion_returned_at_ms: Option<i64>,
    /// A store-path fault was armed for this invocation.
    pub(crate) armed: bool,
    /// The invocation's Lambda deadline (store time).
    pub(crate) deadline_ms: Option<i64>,
    /// For a handed-back claim: the executor's release attempts that failed (store time: error).
    pub(crate) orphan_releases: Vec<String>,
    /// For a handed-back claim still pending: when another claim on the same key was handed back
    /// (store time).
    pub(crate) later_unconfirmed_on_key: Vec<i64>,
    /// A claim is under way: the next store clock reading is its time ([`NotingClock`]).
    pub(crate) claiming: Option<Option<i64>>,
    /// The size of the result the completion stored (or tried to).
    pub(crate) result_bytes: Option<usize>,
    /// For [`Completion::ResultOmitted`]: the size the store said it omitted.
    pub(crate) omitted_bytes: Option<usize>,
    /// The last claim that failed: the kind of its error ([`error_kind`]).
    pub(crate) claim_error: Option<&'static str>,
    /// A completion that failed: the kind of its error.
    pub(crate) completion_error: Option<&'static str>,
    /// A claim that failed with a final error (`rejected`, `config`) and that a later claim on the
    /// key found written, held under a token no claim was told it holds: the kind of that error.
    pub(crate) claim_written_though_failed: Option<&'static str>,
    /// A settlement of this invocation's call as outcome unknown applied, answered: the
    /// invocation must announce it (unless it was killed first).
    pub(crate) settled_unknown_here: bool,
    /// An invoke fault's form: what the executor must do with the claim (see
    /// [`super::lambda::Form::release`]).
    pub(crate) invoke_release: Option<Option<bool>>,
    /// The executor sent a release of this invocation's claim.
    pub(crate) release_sent: bool,
}

/// A store error with its sources (`a: b: c`), so that a note names the service's error code.
fn error_chain(e: &StoreError) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A short name of a store error's kind, for the counts.
fn error_kind(e: &StoreError) -> &'static str {
    match e {
        StoreError::LeaseLost => "lease_lost",
        StoreError::ResultTooLarge { .. } => "result_too_large",
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Corrupt(_) => "corrupt",
        StoreError::Config { .. } => "config",
        StoreError::ClaimUnconfirmed { .. } => "claim_unconfirmed",
        StoreError::ResultUnavailable { .. } => "result_unavailable",
        StoreError::InvalidRequest(_) => "invalid_request",
        StoreError::Rejected(_) => "rejected",
        _ => "other",
    }
}

/// One invocation: its planned tool fault, a kill switch, and notes.
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) fault: ToolFault,
    /// Pulled by the tool for the kill faults; the driver then drops the invocation's future.
    pub(crate) kill: Notify,
    pub(crate) notes: Mutex<Notes>,
}

impl Attempt {
    pub(crate) fn new(fault: ToolFault) -> Attempt {
        Attempt {
            fault,
            kill: Notify::new(),
            notes: Mutex::new(Notes::default()),
        }
    }

    pub(crate) fn note<T>(&self, f: impl FnOnce(&mut Notes) -> T) -> T {
        f(&mut self.notes.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

pub(super) fn current() -> Option<Arc<Attempt>> {
    ATTEMPT.try_with(Arc::clone).ok()
}

/// The store's clock in a soak: the system clock, which also notes, for the invocation whose
/// claim is under way ([`Notes::claiming`]), the first reading the store takes in it: the time
/// the claim's condition is written with.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct NotingClock;

impl Clock for NotingClock {
    fn now_ms(&self) -> i64 {
        let now = SystemClock.now_ms();
        if let Some(attempt) = current() {
            attempt.note(|n| {
                if let Some(at @ None) = n.claiming.as_mut() {
                    *at = Some(now);
                }
            });
        }
        now
    }
}

/// Does the demo tool's side effect, noting its receipt on `attempt`.
pub(super) fn effect(
    demo: &DemoTool,
    attempt: Option<&Attempt>,
    target: &str,
    payload: &[u8],
) -> Result<Vec<u8>, DispatchError> {
    let (reply, receipt) = demo.perform_payload(target, payload)?;
    if let (Some(attempt), Some(receipt)) = (attempt, receipt) {
        attempt.note(|n| n.receipt_id = Some(receipt));
    }
    Ok(reply)
}

/// A store that notes, per invocation, its successful claim and how its completion went, and
/// holds a [`ToolFault::PauseBeforeComplete`] completion until the key is taken over.
pub(crate) struct NotingStore<S> {
    inner: S,
    /// Per key, woken at each successful claim.
    claims: Mutex<HashMap<String, Arc<Notify>>>,
    /// The invocation that holds each claim: the executor completes in a task of its own, where
    /// [`ATTEMPT`] is not set.
    holders: Mutex<HashMap<LeaseToken, Arc<Attempt>>>,
    /// The proxy's keyed rules, armed for the store-path faults (none: those faults do nothing).
    keyed: Option<Arc<KeyedFaults>>,
    /// Claims whose answers were lost and whose token the store handed back, until released.
    handed_back: Mutex<HashMap<LeaseToken, (String, Arc<Attempt>)>>,
    /// Claims that failed with a final error, per key: the lease each asked for, the error's kind,
    /// and the invocation (to note it if a later claim finds that claim written).
    failed_finally: Mutex<HashMap<String, Vec<FailedClaim>>>,
    /// The tokens of every claim the store reported made.
    claimed: Mutex<std::collections::HashSet<LeaseToken>>,
    /// Per key, the settlements as outcome unknown the store reported made (the executor's and
    /// the sweeps'): each is announced, so a key counted twice was announced twice.
    settled_unknown: Mutex<HashMap<String, u32>>,
    /// The keys settled as outcome unknown outside any invocation: by the sweeps.
    settled_by_sweeps: Mutex<Vec<String>>,
}

/// Notes on a handed-back claim's invocation that a release of it sent at `at` was dropped before
/// its answer.
struct CutShort {
    attempt: Option<Arc<Attempt>>,
    at: i64,
    answered: bool,
}

impl Drop for CutShort {
    fn drop(&mut self) {
        if let (Some(attempt), false) = (&self.attempt, self.answered) {
            let at = self.at;
            attempt.note(|n| {
                n.orphan_releases
                    .push(format!("{at}: cut short, no answer"))
            });
        }
    }
}

/// A claim that failed with a final error: the lease it asked for, the error's kind, its
/// invocation.
type FailedClaim = (i64, &'static str, Arc<Attempt>);

/// A paused completion resumes at the latest this long after its lease ended.
const MAX_PAUSE_PAST_LEASE: Duration = Duration::from_secs(3);

impl<S: Store> NotingStore<S> {
    pub(crate) fn new(inner: S) -> NotingStore<S> {
        NotingStore {
            inner,
            claims: Mutex::new(HashMap::new()),
            holders: Mutex::new(HashMap::new()),
            keyed: None,
            handed_back: Mutex::new(HashMap::new()),
            failed_finally: Mutex::new(HashMap::new()),
            claimed: Mutex::new(std::collections::HashSet::new()),
            settled_unknown: Mutex::new(HashMap::new()),
            settled_by_sweeps: Mutex::new(Vec::new()),
        }
    }

    /// The keys the sweeps settled as outcome unknown (the store answered), in order.
    pub(crate) fn settled_by_sweeps(&self) -> Vec<String> {
        self.settled_by_sweeps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The keys whose call was settled as outcome unknown, so announced, more than once.
    pub(crate) fn settled_unknown_twice(&self) -> Vec<String> {
        let settled = self
            .settled_unknown
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        settled
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// A claim on `key` found `held` in progress: if it is a claim that was reported failed with
    /// a final error (the same lease, a token no claim was told it holds), note that it was
    /// written.
    fn written_though_failed(&self, key: &str, held: &Record) {
        if self
            .claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&held.token)
        {
            return;
        }
        let mut failed = self
            .failed_finally
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let Some(claims) = failed.get_mut(key) else {
            return;
        };
        if let Some(i) = claims
            .iter()
            .position(|(lease, _, _)| *lease == held.lease_until_ms)
        {
            let (_, kind, attempt) = claims.swap_remove(i);
            attempt.note(|n| n.claim_written_though_failed = Some(kind));
        }
    }

    /// Arms the store-path faults through `keyed` (the fault proxy's rules).
    pub(crate) fn with_keyed_faults(mut self, keyed: Arc<KeyedFaults>) -> NotingStore<S> {
        self.keyed = Some(keyed);
        self
    }

    /// Another claim on `key` was handed back: noted on the handed-back claims still pending there
    /// (the executor remembers one token per key).
    fn unconfirmed_on(&self, key: &str, token: &LeaseToken) {
        let at = self.inner.now_ms();
        let pending = self.handed_back.lock().unwrap_or_else(|p| p.into_inner());
        for (held, (k, attempt)) in pending.iter() {
            if k == key && held != token {
                attempt.note(|n| n.later_unconfirmed_on_key.push(at));
            }
        }
    }

    /// Arms the claim faults of `attempt`'s plan on `key`, once per invocation.
    fn arm_claim(&self, key: &str, attempt: &Attempt) -> bool {
        let Some(keyed) = &self.keyed else {
            return false;
        };
        let rule = match attempt.fault {
            ToolFault::SlowClaim => (SLOW_CLAIM_HOLD_FOR, KeyedFault::Hold(SLOW_CLAIM_HOLD)),
            ToolFault::ClaimAnswersLost => (CLAIM_LOST_FOR, KeyedFault::Drop),
            ToolFault::ItemTooLargeOnClaim => (super::STORE_DEADLINE, KeyedFault::ItemTooLarge),
            _ => return false,
        };
        if attempt.note(|n| std::mem::replace(&mut n.armed, true)) {
            return false;
        }
        match rule.1 {
            // Only the claim's first write: a racing send of the same call claims as usual.
            KeyedFault::ItemTooLarge => keyed.arm_first("PutItem", key, rule.0, rule.1),
            fault => keyed.arm("PutItem", key, Duration::ZERO, rule.0, fault),
        }
        true
    }

    /// After a claim whose answers were all lost: the store either handed the token back, or
    /// said it released the claim (or that it was never written), which a read checks.
    async fn check_lost_claim(
        &self,
        key: &str,
        error: &StoreError,
        (in_flight, last_done): (usize, Option<tokio::time::Instant>),
        returned_at: tokio::time::Instant,
    ) -> LostClaim {
        // The store's read-back and its release each take at most `READ_BACK_WITHIN`: a write the
        // server applied in that time may have landed after the read.
        let during_read_back =
            last_done.is_some_and(|done| done + super::READ_BACK_WITHIN * 2 >= returned_at);
        if let StoreError::ClaimUnconfirmed { token, .. } = error {
            if let Some(attempt) = current() {
                self.handed_back
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token.clone(), (key.to_string(), attempt));
            }
            return LostClaim::HandedBack;
        }
        let written = self
            .keyed
            .as_ref()
            .and_then(|k| k.first_body("PutItem", key))
            .and_then(|body| serde_json::from_slice::<serde_json::Value>(&body).ok())
            .and_then(|v| super::proxy::written_token(&v).map(str::to_string));
        let Some(written) = written else {
            return LostClaim::Unchecked;
        };
        match self.inner.get(key).await {
            Ok(Some(r)) if r.status == Status::InProgress && r.token.as_str() == written => {
                if in_flight > 0 || during_read_back {
                    LostClaim::AppliedAfterReadBack
                } else {
                    LostClaim::LeftHeld
                }
            }
            Ok(_) => LostClaim::ReleasedByStore,
            Err(_) => LostClaim::Unchecked,
        }
    }

    fn claims_of(&self, key: &str) -> Arc<Notify> {
        self.claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    /// Waits until another invocation claims `key` (its lease ended), or past the lease.
    async fn pause_until_taken_over(&self, key: &str, attempt: &Attempt) {
        let claimed = self.claims_of(key);
        let taken_over = claimed.notified();
        let lease_until = attempt.note(|n| n.lease_until_ms).unwrap_or(0);
        let past_lease = u64::try_from(lease_until - self.inner.now_ms()).unwrap_or(0);
        let _ = tokio::time::timeout(
            Duration::from_millis(past_lease) + MAX_PAUSE_PAST_LEASE,
            taken_over,
        )
        .await;
        // The new holder is now between its claim and its completion.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

// The sweep lists and settles through the same store the calls claim through.
impl<S: Records> Records for NotingStore<S> {
    async fn list(&self, filter: &RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.inner.list(filter).await
    }

    async fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: SettleAs<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.inner.settle(key, token, settle_as, expires_at_s).await
    }

    async fn evict(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.inner.evict(key, token).await
    }
}

impl<S: Store> Store for NotingStore<S> {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let sent_at = self.inner.now_ms();
        let (key, lease_until) = (req.key, req.lease_until_ms);
        let armed = current().is_some_and(|a| self.arm_claim(key, &a));
        if let Some(attempt) = current() {
            attempt.note(|n| n.claiming = Some(None));
        }
        let outcome = self.inner.claim(req).await;
        let returned_at = tokio::time::Instant::now();
        // On a starved machine the store may read its clock well after `sent_at`: the claim's
        // condition compared leases with that later time, so the oracle must too.
        let claimed_at = current()
            .and_then(|a| a.note(|n| n.claiming.take().flatten()))
            .unwrap_or(sent_at);
        if let Err(StoreError::ClaimUnconfirmed { token, .. }) = &outcome {
            self.unconfirmed_on(key, token);
        }
        if let (Err(e), Some(attempt)) = (&outcome, current()) {
            let kind = error_kind(e);
            attempt.note(|n| n.claim_error = Some(kind));
            if matches!(e, StoreError::Rejected(_) | StoreError::Config { .. }) {
                self.failed_finally
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(key.to_string())
                    .or_default()
                    .push((lease_until, kind, attempt));
            }
        }
        if let Ok(ClaimOutcome::InProgress(held)) = &outcome {
            self.written_though_failed(key, held);
        }
        if let Err(e) = &outcome
            && armed
            && current().is_some_and(|a| a.fault == ToolFault::ClaimAnswersLost)
        {
            let in_flight = self
                .keyed
                .as_ref()
                .map_or((0, None), |k| k.in_flight("PutItem", key));
            let lost = self.check_lost_claim(key, e, in_flight, returned_at).await;
            if let Some(attempt) = current() {
                attempt.note(|n| n.lost_claim = Some(lost));
            }
        }
        if let Ok(ClaimOutcome::Claimed { token }) = &outcome {
            self.claimed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(token.clone());
            if let Some(attempt) = current() {
                attempt.note(|n| {
                    n.claimed_at_ms = Some(claimed_at);
                    n.lease_until_ms = Some(lease_until);
                    n.token = Some(token.as_str().to_string());
                });
                self.holders
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token.clone(), attempt);
            }
            self.claims_of(key).notify_waiters();
        }
        outcome
    }

    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<toolcall_dedup::store::Completion, StoreError> {
        let attempt = current().or_else(|| {
            self.holders
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(token)
        });
        if let Some(attempt) = attempt
            .as_ref()
            .filter(|a| a.fault == ToolFault::PauseBeforeComplete)
        {
            self.pause_until_taken_over(key, attempt).await;
        }
        if let (Some(keyed), Some(_)) = (
            &self.keyed,
            attempt
                .as_ref()
                .filter(|a| a.fault == ToolFault::SlowCompletionNearDeadline),
        ) {
            let lost = KeyedFault::Hold(SLOW_CLAIM_HOLD);
            keyed.arm(
                "UpdateItem",
                key,
                Duration::ZERO,
                SLOW_COMPLETION_LOST_FOR,
                lost,
            );
            let slow = KeyedFault::Hold(SLOW_COMPLETION_HOLD);
            let rest = super::STORE_DEADLINE.saturating_sub(SLOW_COMPLETION_LOST_FOR);
            keyed.arm("UpdateItem", key, SLOW_COMPLETION_LOST_FOR, rest, slow);
        }
        if let (Some(keyed), Some(_)) = (
            &self.keyed,
            attempt
                .as_ref()
                .filter(|a| a.fault == ToolFault::ItemTooLarge),
        ) {
            // Only the first write (the one with the result): the marker that follows goes
            // through.
            keyed.arm_first(
                "UpdateItem",
                key,
                super::STORE_DEADLINE,
                KeyedFault::ItemTooLarge,
            );
        }
        let sent_at = self.inner.now_ms();
        let outcome = self.inner.complete(key, token, result, expires_at_s).await;
        let returned_at = self.inner.now_ms();
        if let Some(attempt) = attempt {
            let (completion, omitted) = match &outcome {
                Ok(toolcall_dedup::store::Completion::ResultOmitted { bytes }) => {
                    (Completion::ResultOmitted, Some(*bytes))
                }
                Ok(_) => (Completion::Stored, None),
                Err(StoreError::LeaseLost) => (Completion::LeaseLost, None),
                Err(_) => (Completion::Failed, None),
            };
            attempt.note(|n| {
                n.completion = Some(completion);
                n.completed_at_ms = Some(sent_at);
                n.completion_returned_at_ms = Some(returned_at);
                n.result_bytes = Some(result.len());
                n.omitted_bytes = omitted;
                n.completion_error = outcome.as_ref().err().map(error_kind);
            });
        }
        outcome
    }

    async fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        let extended = self
            .inner
            .extend_lease(key, token, lease_until_ms, expires_at_s)
            .await;
        if extended.is_ok()
            && let Some(attempt) = current()
        {
            attempt.note(|n| {
                n.lease_until_ms = Some(lease_until_ms);
                n.lease_extended = true;
            });
        }
        extended
    }

    async fn hand_over(
        &self,
        key: &str,
        from: &LeaseToken,
        from_lease_until_ms: i64,
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        let handed = self
            .inner
            .hand_over(
                key,
                from,
                from_lease_until_ms,
                to,
                lease_until_ms,
                expires_at_s,
            )
            .await;
        if handed.is_ok() {
            // The claim's new token is held by whoever held the old one.
            let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
            let holder = holders.remove(from).or_else(current);
            if let Some(holder) = holder {
                holder.note(|n| {
                    n.lease_until_ms = Some(lease_until_ms);
                    n.token = Some(to.as_str().to_string());
                });
                holders.insert(to.clone(), holder);
            }
            self.claimed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(to.clone());
        }
        handed
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        let holder = self
            .holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
        if let Some(holder) = holder {
            holder.note(|n| n.release_sent = true);
        }
        let handed_back = self
            .handed_back
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .map(|(_, a)| a.clone());
        // The executor bounds its releases of lost claims: one it gives up on is dropped here.
        let mut cut = CutShort {
            attempt: handed_back.clone(),
            at: self.inner.now_ms(),
            answered: false,
        };
        let released = self.inner.release(key, token).await;
        cut.answered = true;
        if let (Some(attempt), Err(e)) = (handed_back, &released) {
            let at = self.inner.now_ms();
            attempt.note(|n| n.orphan_releases.push(format!("{at}: {}", error_chain(e))));
        }
        if matches!(released, Ok(()) | Err(StoreError::LeaseLost)) {
            let handed_back = self
                .handed_back
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(token);
            if let Some((_, attempt)) = handed_back {
                attempt.note(|n| n.lost_claim = Some(LostClaim::HandedBackReleased));
            }
        }
        released
    }

    async fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        self.inner
            .put(key, label, value, expires_at_s, replacing)
            .await
    }

    async fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        let settled = self.inner.settle_unknown(key, token, expires_at_s).await;
        if settled.is_ok() {
            match current() {
                Some(attempt) => attempt.note(|n| n.settled_unknown_here = true),
                None => self
                    .settled_by_sweeps
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(key.to_owned()),
            }
            *self
                .settled_unknown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.to_owned())
                .or_default() += 1;
        }
        settled
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    fn requests(&self) -> RequestCounts {
        self.inner.requests()
    }
}
