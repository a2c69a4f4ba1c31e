//! The soak's tool: the demo tool behind the planned tool faults, invoked in-process or through
//! the fake Lambda ([`super::lambda`]).

use std::sync::Arc;
use std::time::Duration;

use crate::demo::DemoTool;
use toolcall_dedup::dispatch::{DispatchError, Dispatcher, Route, Routes};

use super::attempt::*;
use super::lambda::{FUNCTION_TIMEOUT, ToolLambda};

/// The demo tool behind the planned tool faults. Outside an [`ATTEMPT`] it is the plain demo
/// tool (with its timeout enforced). A clone shares the tool, its ledger and its fake Lambda.
#[derive(Clone)]
pub(crate) struct ChaosTool {
    pub(crate) demo: Arc<DemoTool>,
    /// The `Invoke` path of the invoke fault classes (without it, they run in process).
    lambda: Option<Arc<ToolLambda>>,
}

impl ChaosTool {
    pub(crate) fn new(demo: DemoTool) -> ChaosTool {
        ChaosTool {
            demo: Arc::new(demo),
            lambda: None,
        }
    }

    /// Sends the invoke fault classes through `lambda`.
    pub(crate) fn with_lambda(mut self, lambda: Arc<ToolLambda>) -> ChaosTool {
        self.lambda = Some(lambda);
        self
    }

    fn effect(&self, target: &str, payload: &[u8]) -> Result<Vec<u8>, DispatchError> {
        effect(&self.demo, current().as_deref(), target, payload)
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
            ToolFault::None
            | ToolFault::PauseBeforeComplete
            | ToolFault::ClaimAnswersLost
            | ToolFault::ItemTooLarge
            | ToolFault::ItemTooLargeOnClaim => self.effect(target, &payload),
            ToolFault::InvokeThrottled
            | ToolFault::InvokeRefused
            | ToolFault::InvokePrestartUnknown
            | ToolFault::Invoke5xx
            | ToolFault::SandboxTimedout
            | ToolFault::InvokeConnectionLost => match &self.lambda {
                Some(lambda) => lambda.invoke(attempt, target, payload, timeout).await,
                None => self.effect(target, &payload),
            },
            ToolFault::SlowClaim => {
                // A tool Lambda with a timeout of its own: the invoker's client gives up at its
                // timeout (the outcome is unknown), the function goes on and does its side effect
                // late, possibly after this invocation ended.
                let (demo, target) = (self.demo.clone(), target.to_string());
                tokio::spawn(async move {
                    tokio::time::sleep(LONG_RUN - LONG_RUN_SLACK).await;
                    let _ = effect(&demo, Some(&*attempt), &target, &payload);
                });
                std::future::pending().await
            }
            ToolFault::SlowCompletionNearDeadline => {
                tokio::time::sleep(timeout.saturating_sub(NEAR_TIMEOUT)).await;
                self.effect(target, &payload)
            }
            ToolFault::ErrorBeforeEffect => Err(failure(attempt.fault, target)),
            ToolFault::TypedErrorAfterEffect
            | ToolFault::FourXxAfterRun
            | ToolFault::CrashAfterEffect => {
                self.effect(target, &payload)?;
                Err(failure(attempt.fault, target))
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

/// The error a tool fault that fails the call returns (after its side effect, for all but
/// [`ToolFault::ErrorBeforeEffect`]).
fn failure(fault: ToolFault, target: &str) -> DispatchError {
    let function_error = |kind: &str, message: &str| DispatchError::FunctionError {
        target: target.into(),
        kind: kind.into(),
        message: message.into(),
    };
    match fault {
        ToolFault::ErrorBeforeEffect => function_error(
            toolcall_dedup::config::NOTHING_RAN_ERROR,
            "chaos: the tool rejected the call before doing anything",
        ),
        ToolFault::TypedErrorAfterEffect => function_error(
            "ValidationException",
            "chaos: the receipt write was rejected after the side effect",
        ),
        ToolFault::FourXxAfterRun => DispatchError::Invoke {
            target: target.into(),
            // What the Lambda dispatcher makes of a 410 EFSIOException.
            outcome_unknown: true,
            source: "chaos: EFSIOException (410) after the function ran".into(),
        },
        ToolFault::CrashAfterEffect => function_error(
            "Runtime.ExitError",
            "chaos: the tool exited after its side effect",
        ),
        other => unreachable!("{other:?} does not fail the call"),
    }
}

impl Dispatcher for ChaosTool {
    fn route(
        &self,
        routes: &Routes,
        action_group: &str,
        tool: &str,
    ) -> Result<Route, DispatchError> {
        // In process, a tool cannot outlive its invocation, except the slow-claim one, which
        // models a tool Lambda with a timeout of its own.
        let max_run_time = match current() {
            Some(a) if a.fault == ToolFault::SlowClaim => LONG_RUN,
            Some(a) if a.fault.is_invoke() && self.lambda.is_some() => FUNCTION_TIMEOUT,
            _ => Duration::ZERO,
        };
        Ok(Route {
            max_run_time,
            ..Route::in_process("demo-tool", routes, action_group, tool)
        })
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        // A slow tool's client does not enforce the timeout (the Lambda deadline does). On the
        // Invoke path the real dispatcher enforces it itself: a second timer here fired first (the
        // tool's start is a few ms late), cut the dispatcher in a throttle's backoff and lost what
        // it knew, that nothing started, so the claim was kept (seed 14 on moto, once).
        let own_timer = current().is_some_and(|a| {
            a.fault == ToolFault::SlowPastDeadline || (a.fault.is_invoke() && self.lambda.is_some())
        });
        let work = self.faulted(target, payload, timeout);
        if own_timer {
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
