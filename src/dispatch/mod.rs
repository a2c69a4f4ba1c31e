//! Dispatch: hands a call to the real tool. [`Dispatcher`] is the port the handler is generic
//! over; [`LambdaDispatcher`] invokes tool Lambdas by route, and `crate::demo::DemoTool` runs the
//! demo tool in-process for `dedup replay` and tests.

mod lambda;

use std::future::Future;
use std::time::Duration;

pub use lambda::{LambdaDispatcher, build_client};

/// Boxed error kept as a `source`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Sends a call to its tool.
pub trait Dispatcher: Send + Sync {
    /// The tool that takes calls of `tool` in `action_group`. No I/O: the handler asks before it
    /// claims, so that an unroutable call claims nothing.
    fn route(&self, action_group: &str, tool: &str) -> Result<String, DispatchError>;

    /// Invokes `target` with the forwarded event and returns the tool's reply bytes. Must give up
    /// with [`DispatchError::Timeout`] once `timeout` has passed.
    fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, DispatchError>> + Send;
}

/// Why a call did not reach its tool, or the tool did not answer.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("no route for {action_group}/{tool} in DEDUP_ROUTES")]
    NoRoute { action_group: String, tool: String },
    /// The tool ran and raised (Lambda `FunctionError`).
    #[error("tool {target} failed: {kind}: {message}")]
    FunctionError {
        target: String,
        kind: String,
        message: String,
    },
    /// No answer in time. The tool may still be running or may have finished.
    #[error("tool {target} did not answer within {after:?}")]
    Timeout { target: String, after: Duration },
    /// The invoke itself failed.
    #[error("invoking tool {target} failed")]
    Invoke {
        target: String,
        /// True when the request may have reached the tool (the response was lost).
        outcome_unknown: bool,
        #[source]
        source: BoxError,
    },
}

impl DispatchError {
    /// True when the tool may have run: the claim must then be kept until its lease ends, not
    /// released for an immediate retry.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            DispatchError::Timeout { .. } => true,
            DispatchError::Invoke {
                outcome_unknown, ..
            } => *outcome_unknown,
            DispatchError::NoRoute { .. } | DispatchError::FunctionError { .. } => false,
        }
    }

    /// A one-line reason for the model: no payloads, no stack traces.
    pub fn short_reason(&self) -> String {
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
