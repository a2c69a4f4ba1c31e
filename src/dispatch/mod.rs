//! Dispatch: hands a call to the real tool. [`Dispatcher`] is the port the handler is generic
//! over; [`LambdaDispatcher`] invokes tool Lambdas by route, and `stand_ins::demo::DemoTool`
//! (feature `stand-ins`) runs the demo tool in-process for `dedup replay` and tests.

mod lambda;
mod routes;

use std::future::Future;
use std::time::Duration;

pub use lambda::{LambdaDispatcher, build_client};
pub use routes::{Routes, lambda_timeout};

use crate::doors::port::Forward;

/// Boxed error kept as a `source`.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where a call goes, decided once before it is claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The tool that takes the call (a function name or ARN).
    pub target: String,
    /// The namespace the route states its calls are keyed in (`{"namespace": ...}`), instead of
    /// the one the door derives; `None` when it states none.
    pub namespace: Option<String>,
    /// How long `target` can keep running once invoked: its own timeout, which may be longer than
    /// this invocation's deadline. The handler's lease covers it, so that nobody takes a key over
    /// while its tool may still be running. `Duration::ZERO` for a tool that runs in-process and
    /// cannot outlive the invocation.
    pub max_run_time: Duration,
}

impl Route {
    /// A route to a tool that runs in-process and takes every call: keyed in the namespace the
    /// route `routes` give the call states, if any, and it cannot outlive the invocation.
    pub fn in_process(target: &str, routes: &Routes, action_group: &str, tool: &str) -> Route {
        let namespace = routes.take(action_group, tool).and_then(|(_, ns)| ns);
        Route {
            target: target.to_string(),
            namespace: namespace.map(str::to_string),
            max_run_time: Duration::ZERO,
        }
    }
}

/// Sends a call to its tool.
pub trait Dispatcher: Send + Sync {
    /// The route of a call of `tool` in `action_group` by the handler's `routes` (the
    /// configuration's `DEDUP_ROUTES`, which the handler alone holds): target, stated namespace
    /// and run time, decided together. No I/O: the handler asks before it claims, so that an
    /// unroutable call claims nothing.
    fn route(
        &self,
        routes: &Routes,
        action_group: &str,
        tool: &str,
    ) -> Result<Route, DispatchError>;

    /// Invokes `target` with the forwarded event and returns the tool's reply bytes. Must give up
    /// with [`DispatchError::Timeout`] once `timeout` has passed.
    fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, DispatchError>> + Send;

    /// Invokes `target` with what an entry point forwards: the payload and, for tools that read
    /// one, a Lambda client context. A dispatcher that cannot pass a client context drops it.
    fn invoke_forward(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, DispatchError>> + Send {
        self.invoke(target, forward.payload, timeout)
    }
}

/// Why a call did not reach its tool, or the tool did not answer.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// `DEDUP_ROUTES` names no target for the tool: nothing was invoked.
    #[error("no route for {action_group}/{tool} in DEDUP_ROUTES")]
    NoRoute {
        /// The action group (or gateway target, or namespace) of the call.
        action_group: String,
        /// The tool's name.
        tool: String,
    },
    /// The tool raised, crashed, timed out or ran out of memory (Lambda `FunctionError`).
    #[error("tool {target} failed: {kind}: {message}")]
    FunctionError {
        /// The routed target (function name or ARN).
        target: String,
        /// The `errorType` of the error payload (`Sandbox.Timedout`, `ValidationError`, ...), else
        /// the `FunctionError` header (`Unhandled`).
        kind: String,
        /// The `errorMessage` of the error payload.
        message: String,
    },
    /// No answer in time. The tool may still be running or may have finished.
    #[error("tool {target} did not answer within {after:?}")]
    Timeout {
        /// The routed target.
        target: String,
        /// How long the dispatcher waited.
        after: Duration,
    },
    /// The invoke itself failed.
    #[error("invoking tool {target} failed")]
    Invoke {
        /// The routed target.
        target: String,
        /// False only when the request provably never left (connection refused, DNS failure, a
        /// request that could not be built); any other failure may have reached the tool.
        outcome_unknown: bool,
        /// The SDK's error.
        #[source]
        source: BoxError,
    },
}

impl DispatchError {
    /// True when the tool may have run: the claim must then be kept until its lease ends, not
    /// released for an immediate retry. A tool error proves nothing ran only when its type is one
    /// of `nothing_ran` (`DEDUP_RELEASE_ON_ERRORS`): a tool that timed out, ran out of memory or
    /// crashed may have done its side effect first.
    pub fn outcome_unknown(&self, nothing_ran: &ErrorTypes) -> bool {
        match self {
            DispatchError::Timeout { .. } => true,
            DispatchError::Invoke {
                outcome_unknown, ..
            } => *outcome_unknown,
            DispatchError::FunctionError { kind, .. } => !nothing_ran.contains(kind),
            DispatchError::NoRoute { .. } => false,
        }
    }

    /// A one-line reason for the model: no payloads, no stack traces.
    pub(crate) fn short_reason(&self) -> String {
        match self {
            DispatchError::NoRoute { action_group, tool } => {
                format!("no tool is configured for {action_group}/{tool}")
            }
            DispatchError::FunctionError { kind, .. } => {
                format!("the tool raised an error ({kind})")
            }
            DispatchError::Timeout { after, .. } => {
                format!("the tool did not answer within {} ms", after.as_millis())
            }
            DispatchError::Invoke { .. } => "the tool could not be invoked".into(),
        }
    }
}

/// The error type a tool raises to say that it did nothing (it refused its input before acting),
/// so the claim is released and a retry runs. It is ours: no library raises it by accident.
/// Python: `class DedupNothingRan(Exception)`; Node: `err.name = "DedupNothingRan"`; Java: a class
/// of that simple name in any package.
pub const NOTHING_RAN_ERROR: &str = "DedupNothingRan";

/// Lambda's own error types for an invocation that failed or was cut off: whatever ran before
/// stays done, so they can never release a claim.
const CRASH_ERROR_TYPES: [&str; 1] = ["Unhandled"];
const CRASH_ERROR_PREFIXES: [&str; 3] = ["Sandbox.", "Runtime.", "Function."];

/// A set of tool error types (the `errorType` of a Lambda error payload) that prove nothing ran.
/// [`NOTHING_RAN_ERROR`] is always in it; other types only when `DEDUP_RELEASE_ON_ERRORS` names
/// them, because an error type alone cannot tell whether a side effect came first (a Node tool
/// that charged a card and then had a write rejected raises `ValidationException`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorTypes(Vec<String>);

impl ErrorTypes {
    /// Parses a comma-separated list; `none` is the empty set. Lambda's crash types are refused.
    pub fn parse(text: &str) -> Result<ErrorTypes, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(ErrorTypes::default());
        }
        let names = crate::text_list::comma_list(text);
        if let Some(crash) = names.iter().find(|n| {
            CRASH_ERROR_TYPES.contains(&n.as_str())
                || CRASH_ERROR_PREFIXES.iter().any(|p| n.starts_with(p))
        }) {
            return Err(format!(
                "{crash} is Lambda's error for an invocation that failed or was cut off, after which \
                 the side effect may have happened; it can never release a claim"
            ));
        }
        Ok(ErrorTypes(names))
    }

    /// True when a tool error of this type proves that nothing ran: [`NOTHING_RAN_ERROR`] (also
    /// as the last segment of a qualified name, `com.example.DedupNothingRan`), or a configured
    /// type (exact, case-sensitive).
    pub(crate) fn contains(&self, error_type: &str) -> bool {
        let simple = error_type.rsplit(['.', '$']).next().unwrap_or(error_type);
        simple == NOTHING_RAN_ERROR || self.0.iter().any(|n| n == error_type)
    }
}
