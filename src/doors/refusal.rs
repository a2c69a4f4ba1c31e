//! What an invocation gets when no door can answer it in its caller's format: a Lambda error
//! ([`HandlerError`]), and why ([`Unanswerable`]). The Lambda runtime reports it as the invoke's
//! `FunctionError`, with the error type an operator filters on.

use serde_json::value::RawValue;

use crate::doors::bedrock::EventError;

/// Errors returned to the Lambda runtime: only for invocations no answer in the caller's format
/// can reach.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The event is not one any entry point can answer in its own format.
    #[error(transparent)]
    InvalidEvent(Unanswerable),
    /// A reply could not be written (a bug, never the caller's input).
    #[error("internal error: {0}")]
    Internal(String),
}

impl HandlerError {
    /// The Lambda error type an operator filters on.
    pub(crate) fn error_type(&self) -> &'static str {
        match self {
            HandlerError::InvalidEvent(
                Unanswerable::DoorNotServed { .. } | Unanswerable::WrongAlias { .. },
            ) => "DoorNotServed",
            HandlerError::InvalidEvent(_) => "InvalidEvent",
            HandlerError::Internal(_) => "Internal",
        }
    }
}

impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(e: HandlerError) -> lambda_runtime::Diagnostic {
        lambda_runtime::Diagnostic {
            error_type: e.error_type().into(),
            error_message: e.to_string(),
        }
    }
}

/// An event that no entry point can answer in its own format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswerable {
    /// Recognised as an action-group event, but without what a Bedrock response needs.
    #[error(transparent)]
    Bedrock(EventError),
    /// Marked as a Gateway interceptor invocation, but not one this door can answer (the
    /// interceptor adapter's reason: the flows sit above this module, their error types too).
    #[error("invalid AgentCore Gateway interceptor event: {0}")]
    Interceptor(String),
    /// No entry point recognises it.
    #[error(
        "not a Bedrock Agents action-group event, an AgentCore Gateway call or interception, or an \
         invoke envelope: {0}. Expected, in this order: a Lambda client context with \
         custom.bedrockAgentCoreToolName (AgentCore Gateway target), an object with \
         \"interceptorInputVersion\" (AgentCore Gateway interceptor), an object with \"actionGroup\" \
         (Bedrock Agents), an object with \"tool\" (invoke envelope)"
    )]
    NoEntryPoint(String),
    /// Shaped for a door this deployment does not serve (`DEDUP_DOORS`).
    #[error(
        "this function serves the {served} door(s) only (DEDUP_DOORS); an event shaped for the \
         {door} door is refused (a stack serves the doors it wires: an agent, a Gateway target or \
         interceptor, envelope namespaces)"
    )]
    DoorNotServed {
        /// The door the event is shaped for.
        door: &'static str,
        /// The doors served, comma-separated.
        served: String,
    },
    /// Came through the wrong alias for its door (`DEDUP_INTERCEPTOR_ALIAS`).
    #[error(
        "the {alias} alias serves the interceptor door and nothing else (DEDUP_INTERCEPTOR_ALIAS); \
         an event shaped for the {door} door came through {qualifier}"
    )]
    WrongAlias {
        /// The door the event is shaped for.
        door: &'static str,
        /// The interceptor's alias.
        alias: String,
        /// The alias or version it came through (`$LATEST` when unqualified).
        qualifier: String,
    },
}

/// JSON text as the Lambda's answer.
pub(crate) fn raw(text: String) -> Result<Box<RawValue>, HandlerError> {
    RawValue::from_string(text)
        .map_err(|e| HandlerError::Internal(format!("reply is not JSON: {e}")))
}
