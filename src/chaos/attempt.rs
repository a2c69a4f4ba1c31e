//! One invocation's faults and what happened to it, as seen from the tool and the store.
//!
//! The soak runs each invocation inside [`ATTEMPT`] (a task-local), so that the tool and the
//! store wrapper, called by the handler in the same task, can act on the invocation's planned
//! fault and note what they saw: when the claim was made and until when, which receipt the tool
//! wrote, whether the result was stored. The oracle uses these notes only to tell an allowed
//! re-execution (after an attempt whose outcome was unknown and whose lease had ended) from a
//! double execution; the count of side effects comes from the ledger alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
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
    /// Raises before doing anything (a validation-style error: nothing ran).
    ErrorBeforeEffect,
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
}

impl ToolFault {
    pub const ALL: [ToolFault; 7] = [
        ToolFault::None,
        ToolFault::ErrorBeforeEffect,
        ToolFault::CrashAfterEffect,
        ToolFault::HangPastTimeout,
        ToolFault::SlowPastDeadline,
        ToolFault::KillBeforeEffect,
        ToolFault::KillAfterEffect,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ToolFault::None => "none",
            ToolFault::ErrorBeforeEffect => "tool_error_before_effect",
            ToolFault::CrashAfterEffect => "tool_crash_after_effect",
            ToolFault::HangPastTimeout => "tool_hang_past_timeout",
            ToolFault::SlowPastDeadline => "tool_slow_past_deadline",
            ToolFault::KillBeforeEffect => "kill_before_effect",
            ToolFault::KillAfterEffect => "kill_after_effect",
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
        let function_error = |kind: &str, message: String| DispatchError::FunctionError {
            target: target.to_string(),
            kind: kind.to_string(),
            message,
        };
        let event: Value = serde_json::from_slice(payload)
            .map_err(|e| function_error("InvalidEvent", e.to_string()))?;
        let done = self.demo.perform(&event).map_err(|e| {
            let d = lambda_runtime::Diagnostic::from(e);
            function_error(&d.error_type, d.error_message)
        })?;
        if let (Some(attempt), Some(receipt)) = (current(), &done.receipt_id) {
            attempt.note(|n| n.receipt_id = Some(receipt.clone()));
        }
        serde_json::to_vec(&done.reply).map_err(|e| function_error("Internal", e.to_string()))
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
            ToolFault::None => self.effect(target, &payload),
            ToolFault::ErrorBeforeEffect => Err(DispatchError::FunctionError {
                target: target.into(),
                kind: "ValidationException".into(),
                message: "chaos: the tool rejected the call before doing anything".into(),
            }),
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

/// A store that notes, per invocation, its successful claim and how its completion went.
pub struct NotingStore<S>(pub S);

impl<S: Store> Store for NotingStore<S> {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let sent_at = self.0.now_ms();
        let lease_until = req.lease_until_ms;
        let outcome = self.0.claim(req).await;
        if let (Ok(ClaimOutcome::Claimed { .. }), Some(attempt)) = (&outcome, current()) {
            attempt.note(|n| {
                n.claimed_at_ms = Some(sent_at);
                n.lease_until_ms = Some(lease_until);
            });
        }
        outcome
    }

    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
    ) -> Result<(), StoreError> {
        let outcome = self.0.complete(key, token, result).await;
        if let Some(attempt) = current() {
            let completion = match &outcome {
                Ok(()) => Completion::Stored,
                Err(StoreError::LeaseLost) => Completion::LeaseLost,
                Err(_) => Completion::Failed,
            };
            attempt.note(|n| n.completion = Some(completion));
        }
        outcome
    }

    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.0.release(key, token).await
    }

    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.0.get(key).await
    }

    fn now_ms(&self) -> i64 {
        self.0.now_ms()
    }

    fn requests(&self) -> RequestCounts {
        self.0.requests()
    }
}
