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

use crate::demo::DemoTool;
use crate::dispatch::{DispatchError, Dispatcher};
use crate::store::{
    ClaimOutcome, ClaimRequest, LeaseToken, Record, RequestCounts, Store, StoreError,
};

tokio::task_local! {
    /// The invocation the current task runs.
    pub static ATTEMPT: Arc<Attempt>;
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
}

impl ToolFault {
    pub const ALL: [ToolFault; 10] = [
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
    ];

    /// The fault called `name` (see [`ToolFault::name`]).
    pub fn from_name(name: &str) -> Option<ToolFault> {
        ToolFault::ALL.into_iter().find(|f| f.name() == name)
    }

    pub fn name(self) -> &'static str {
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
        }
    }
}

/// How the store took this invocation's completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    Stored,
    LeaseLost,
    Failed,
}

/// Notes on one invocation.
#[derive(Debug, Default)]
pub struct Notes {
    /// Store time when the successful claim was sent, and the lease it asked for.
    pub claimed_at_ms: Option<i64>,
    pub lease_until_ms: Option<i64>,
    /// The tool was called.
    pub invoked: bool,
    /// The receipt the tool wrote, and when.
    pub receipt_id: Option<String>,
    pub completion: Option<Completion>,
    /// Store time when the completion was sent.
    pub completed_at_ms: Option<i64>,
}

/// One invocation: its planned tool fault, a kill switch, and notes.
#[derive(Debug)]
pub struct Attempt {
    pub fault: ToolFault,
    /// Pulled by the tool for the kill faults; the driver then drops the invocation's future.
    pub kill: Notify,
    pub notes: Mutex<Notes>,
}

impl Attempt {
    pub fn new(fault: ToolFault) -> Attempt {
        Attempt {
            fault,
            kill: Notify::new(),
            notes: Mutex::new(Notes::default()),
        }
    }

    pub fn note<T>(&self, f: impl FnOnce(&mut Notes) -> T) -> T {
        f(&mut self.notes.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn current() -> Option<Arc<Attempt>> {
    ATTEMPT.try_with(Arc::clone).ok()
}

/// The demo tool behind the planned tool faults. Outside an [`ATTEMPT`] it is the plain demo
/// tool (with its timeout enforced).
pub struct ChaosTool {
    pub demo: DemoTool,
}

impl ChaosTool {
    fn effect(&self, target: &str, payload: &[u8]) -> Result<Vec<u8>, DispatchError> {
        let (reply, receipt) = self.demo.perform_payload(target, payload)?;
        if let (Some(attempt), Some(receipt)) = (current(), receipt) {
            attempt.note(|n| n.receipt_id = Some(receipt));
        }
        Ok(reply)
    }

    async fn faulted(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let Some(attempt) = current() else {
            return self.effect(target, &payload);
        };
        attempt.note(|n| n.invoked = true);
        // A tool takes a little time, so that identical calls overlap.
        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..15))).await;
        match attempt.fault {
            ToolFault::None | ToolFault::PauseBeforeComplete => self.effect(target, &payload),
            ToolFault::ErrorBeforeEffect => Err(DispatchError::FunctionError {
                target: target.into(),
                kind: crate::config::NOTHING_RAN_ERROR.into(),
                message: "chaos: the tool rejected the call before doing anything".into(),
            }),
            ToolFault::TypedErrorAfterEffect => {
                self.effect(target, &payload)?;
                Err(DispatchError::FunctionError {
                    target: target.into(),
                    kind: "ValidationException".into(),
                    message: "chaos: the receipt write was rejected after the side effect".into(),
                })
            }
            ToolFault::FourXxAfterRun => {
                self.effect(target, &payload)?;
                Err(DispatchError::Invoke {
                    target: target.into(),
                    // What the Lambda dispatcher makes of a 410 EFSIOException.
                    outcome_unknown: true,
                    source: "chaos: EFSIOException (410) after the function ran".into(),
                })
            }
            ToolFault::CrashAfterEffect => {
                self.effect(target, &payload)?;
                Err(DispatchError::FunctionError {
                    target: target.into(),
                    kind: "Runtime.ExitError".into(),
                    message: "chaos: the tool exited after its side effect".into(),
                })
            }
            ToolFault::HangPastTimeout => std::future::pending().await,
            ToolFault::SlowPastDeadline => {
                // Past the dispatch timeout, around the moment the driver kills the invocation.
                let over = Duration::from_millis(fastrand::u64(0..2000));
                tokio::time::sleep(timeout + over).await;
                self.effect(target, &payload)
            }
            ToolFault::KillBeforeEffect => {
                attempt.kill.notify_one();
                std::future::pending().await
            }
            ToolFault::KillAfterEffect => {
                self.effect(target, &payload)?;
                attempt.kill.notify_one();
                std::future::pending().await
            }
        }
    }
}

impl Dispatcher for ChaosTool {
    fn route(&self, _action_group: &str, _tool: &str) -> Result<String, DispatchError> {
        Ok("demo-tool".into())
    }

    fn max_run_time(&self, _target: &str) -> Duration {
        Duration::ZERO
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let slow = current().is_some_and(|a| a.fault == ToolFault::SlowPastDeadline);
        let work = self.faulted(target, payload, timeout);
        if slow {
            // This tool's client does not enforce the timeout: the Lambda deadline does.
            return work.await;
        }
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(DispatchError::Timeout {
                    target: target.into(),
                    after: timeout,
                })
            })
    }
}

/// A store that notes, per invocation, its successful claim and how its completion went, and
/// holds a [`ToolFault::PauseBeforeComplete`] completion until the key is taken over.
pub struct NotingStore<S> {
    inner: S,
    /// Per key, woken at each successful claim.
    claims: Mutex<HashMap<String, Arc<Notify>>>,
    /// The invocation that holds each claim: the executor completes in a task of its own, where
    /// [`ATTEMPT`] is not set.
    holders: Mutex<HashMap<LeaseToken, Arc<Attempt>>>,
}

/// A paused completion resumes at the latest this long after its lease ended.
const MAX_PAUSE_PAST_LEASE: Duration = Duration::from_secs(3);

impl<S: Store> NotingStore<S> {
    pub fn new(inner: S) -> NotingStore<S> {
        NotingStore {
            inner,
            claims: Mutex::new(HashMap::new()),
            holders: Mutex::new(HashMap::new()),
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

impl<S: Store> Store for NotingStore<S> {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let sent_at = self.inner.now_ms();
        let (key, lease_until) = (req.key, req.lease_until_ms);
        let outcome = self.inner.claim(req).await;
        if let Ok(ClaimOutcome::Claimed { token }) = &outcome {
            if let Some(attempt) = current() {
                attempt.note(|n| {
                    n.claimed_at_ms = Some(sent_at);
                    n.lease_until_ms = Some(lease_until);
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
    ) -> Result<crate::store::Completion, StoreError> {
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
        let sent_at = self.inner.now_ms();
        let outcome = self.inner.complete(key, token, result, expires_at_s).await;
        if let Some(attempt) = attempt {
            let completion = match &outcome {
                Ok(_) => Completion::Stored,
                Err(StoreError::LeaseLost) => Completion::LeaseLost,
                Err(_) => Completion::Failed,
            };
            attempt.note(|n| {
                n.completion = Some(completion);
                n.completed_at_ms = Some(sent_at);
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
        if extended.is_ok() {
            if let Some(attempt) = current() {
                attempt.note(|n| n.lease_until_ms = Some(lease_until_ms));
            }
        }
        extended
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
        self.inner.release(key, token).await
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
