//! How one invocation ends, whatever door it came in by: the answer in the caller's format and
//! what the report says about it. Every flow (the direct doors in [`crate::invoking`], the Gateway
//! interceptor in [`crate::doors::interceptor::flow`]) turns the executor's [`Finished`] into an
//! [`Handled`] here, so that each situation is answered the same way at every door.

use serde_json::value::RawValue;

use crate::dispatch::DispatchError;
use crate::doors::port::{Answers, DedupInfo, MalformedReply, Notice, NoticeKind, Unforwardable};
pub(crate) use crate::doors::refusal::HandlerError;
pub(crate) use crate::doors::refusal::raw;
use crate::executor::{Finished, Settled, ToolRun};
use crate::store::StoreError;
use crate::telemetry::Outcome;

/// How one invocation ended: the answer and what the report says about it.
#[derive(Debug)]
pub struct Handled {
    /// What happened to the call.
    pub outcome: Outcome,
    /// The answer to send.
    pub response: Result<Box<RawValue>, HandlerError>,
    /// The tool, when the invocation got that far.
    pub tool: Option<String>,
    /// The derived key (32 hex digits), when the call got that far.
    pub key: Option<String>,
    /// For replays: the normalization rules that made this call meet the stored one (empty when
    /// the strict fingerprints are equal).
    pub rules: Vec<&'static str>,
    /// A short reason for error outcomes (never argument values).
    pub reason: Option<String>,
    /// The keys of the calls this invocation settled as outcome unknown (an `at_most_once` call
    /// whose side effect may have happened; an interceptor RESPONSE can settle several): it is
    /// the one that announces each.
    pub settled_unknown: Vec<String>,
}

impl Handled {
    pub(crate) fn new(outcome: Outcome, response: Result<Box<RawValue>, HandlerError>) -> Handled {
        Handled {
            outcome,
            response,
            tool: None,
            key: None,
            rules: Vec::new(),
            reason: None,
            settled_unknown: Vec::new(),
        }
    }

    pub(crate) fn because(mut self, reason: impl Into<String>) -> Handled {
        self.reason = Some(reason.into());
        self
    }

    pub(crate) fn tool(mut self, tool: &str) -> Handled {
        self.tool = Some(tool.to_string());
        self
    }

    pub(crate) fn keyed(mut self, key: &str) -> Handled {
        self.key = Some(key.to_string());
        self
    }
}

/// Why the tool gave no usable reply.
#[derive(Debug)]
pub(crate) enum ToolFailure {
    Dispatch(DispatchError),
    /// The event could not be forwarded: the tool did not run.
    Unforwardable(Unforwardable),
    /// The tool ran, but its reply is not one of the caller's format; the reason says why.
    MalformedReply(MalformedReply),
}

/// How a call through a door that invokes the tool ended, before it is written in the door's
/// format ([`ended`]).
pub(crate) enum Ending {
    /// No route for the tool: nothing was claimed or invoked.
    NoRoute(DispatchError),
    /// The call cannot be keyed (bad arguments, a missing session, ...): nothing ran.
    Refused(Notice),
    /// Sent to the tool unkeyed, reported as `outcome`.
    PassedThrough {
        outcome: Outcome,
        run: ToolRun<ToolFailure>,
    },
    /// Keyed and run through the executor.
    Finished {
        finished: Finished<ToolFailure>,
        key: String,
    },
}

/// Writes how a call ended in `door`'s format: the one place a direct door's call is answered.
pub(crate) fn ended(door: &impl Answers, ending: Ending, replay_marker: bool) -> Handled {
    match ending {
        Ending::NoRoute(e) => notice(
            door,
            Outcome::ToolError,
            Notice::no_route(&e.short_reason()),
            None,
        )
        .because(e.to_string()),
        Ending::Refused(notice) => refuse(door, notice),
        Ending::PassedThrough { outcome, run } => {
            let answered = match run {
                ToolRun::Replied { reply, .. } => {
                    Handled::new(outcome, reply_answer(door, &reply, dedup(outcome, None)))
                }
                ToolRun::Failed {
                    error,
                    outcome_unknown,
                } => tool_failed(door, &error, outcome_unknown, None),
            };
            let answered = answered.tool(door.tool());
            match outcome {
                Outcome::Sessionless => answered.because("sessionless"),
                _ => answered,
            }
        }
        Ending::Finished { finished: f, key } => finished(door, f, &key, replay_marker),
    }
}

/// Turns how the executor settled the call into the caller's answer.
/// `replay_marker` is `DEDUP_REPLAY_MARKER`.
pub(crate) fn finished(
    door: &impl Answers,
    finished: Finished<ToolFailure>,
    key: &str,
    replay_marker: bool,
) -> Handled {
    let Finished {
        settled,
        outcome,
        rules,
    } = finished;
    let tool = door.tool();
    let mut answered = match settled {
        Settled::Executed { reply } => Handled::new(
            outcome,
            reply_answer(door, &reply, dedup(outcome, Some(key))),
        ),
        Settled::Replayed {
            reply,
            first_ran_ms,
        } => {
            let dedup = DedupInfo {
                first_ran_ms: Some(first_ran_ms),
                mark: replay_marker,
                ..dedup(outcome, Some(key))
            };
            Handled::new(outcome, reply_answer(door, &reply, dedup))
        }
        Settled::KeyReused { paths } => notice(
            door,
            outcome,
            Notice::key_reused(tool, paths.as_deref()),
            Some(key),
        )
        .because("idempotency key reused with other arguments"),
        Settled::OutcomeUnknown => {
            notice(door, outcome, Notice::outcome_unknown(tool, key), Some(key))
                .because("outcome unknown (at_most_once); waits for an operator")
        }
        Settled::AlreadyRan { bytes } => {
            notice(door, outcome, Notice::already_executed(tool), Some(key))
                .because(format!("result of {bytes} bytes was too large to store"))
        }
        Settled::InProgress { retry_after_ms } => {
            let reason = match retry_after_ms {
                Some(_) => "identical call still running",
                None => "claim kept racing with identical calls",
            };
            notice(
                door,
                outcome,
                Notice::in_progress(tool, retry_after_ms),
                Some(key),
            )
            .because(reason)
        }
        Settled::StoreDown(e @ StoreError::ResultUnavailable { .. }) => {
            tracing::error!(error = %e, "the stored result is unavailable; the call is not run again");
            notice(door, outcome, Notice::result_unavailable(tool), Some(key))
                .because(e.to_string())
        }
        Settled::StoreDown(e) => {
            tracing::error!(error = ?e, "idempotency store unavailable; failing closed");
            notice(
                door,
                Outcome::StoreError,
                Notice::store_unavailable(tool),
                Some(key),
            )
            .because(format!("store: {e}"))
        }
        Settled::ToolFailed {
            error,
            outcome_unknown,
        } => tool_failed(door, &error, outcome_unknown, Some(key)),
        Settled::NoTime => notice(door, Outcome::ToolError, Notice::no_time(), Some(key))
            .because("no time left before the Lambda deadline"),
    };
    answered.rules = rules;
    answered.keyed(key).tool(tool)
}

/// The answer to a tool that gave no usable reply.
pub(crate) fn tool_failed(
    door: &impl Answers,
    error: &ToolFailure,
    outcome_unknown: bool,
    key: Option<&str>,
) -> Handled {
    let (notice_, reason) = match error {
        ToolFailure::MalformedReply(e) => (Notice::malformed_reply(), e.to_string()),
        ToolFailure::Unforwardable(e) => (Notice::unforwardable(), e.to_string()),
        ToolFailure::Dispatch(e) => {
            // The tool's own error message may quote its arguments: only at DEBUG.
            tracing::debug!(error = %e, "tool error");
            let reason = e.short_reason();
            (Notice::tool_failed(&reason, outcome_unknown), reason)
        }
    };
    notice(door, Outcome::ToolError, notice_, key).because(reason)
}

/// The executor's own answer, in the door's format.
pub(crate) fn notice(
    door: &impl Answers,
    outcome: Outcome,
    notice: Notice,
    key: Option<&str>,
) -> Handled {
    Handled::new(outcome, raw(door.notice(&notice, dedup(outcome, key)))).tool(door.tool())
}

/// The refusal of a call that cannot be keyed (bad arguments, a missing session, ...).
pub(crate) fn refuse(door: &impl Answers, refusal: Notice) -> Handled {
    tracing::debug!(message = %refusal.message, "invalid event");
    let reason = match refusal.kind {
        NoticeKind::InvalidArguments => "invalid arguments",
        _ => "invalid event",
    };
    notice(door, Outcome::BadRequest, refusal, None).because(reason)
}

pub(crate) fn dedup(outcome: Outcome, key: Option<&str>) -> DedupInfo<'_> {
    DedupInfo {
        outcome: outcome.caller_word(),
        key,
        first_ran_ms: None,
        mark: false,
    }
}

/// The answer carrying the tool's reply (checked JSON when it was stored).
pub(crate) fn reply_answer(
    door: &impl Answers,
    reply: &[u8],
    dedup: DedupInfo<'_>,
) -> Result<Box<RawValue>, HandlerError> {
    let text = std::str::from_utf8(reply)
        .map_err(|e| HandlerError::Internal(format!("reply is not UTF-8: {e}")))?;
    raw(door.result(text, dedup))
}
