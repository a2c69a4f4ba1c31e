//! The interceptor's protocol: a `tools/call` is claimed at REQUEST (the Gateway then calls the
//! target) and settled at RESPONSE, when the target's answer passes by; every other message
//! passes through. See the module docs of [`crate::interceptor`] for the contract.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{Interception, Phase};
use crate::answer::{self, Answered, HandlerError, ToolFailure, Unanswerable};
use crate::config::Mode;
use crate::decide::RunEnd;
use crate::direct::warn_sessionless;
use crate::executor::{FinishedElsewhere, Lease, Opened, Outcome};
use crate::seam::{Notice, Unkeyed};
use crate::service::{CallKey, Service};
use crate::store::Store;

/// Answers one interceptor invocation.
pub(crate) async fn intercept<S: Store>(
    service: &Service<S>,
    event: &Value,
    client_context: Option<&HashMap<String, String>>,
    end: Instant,
) -> Answered {
    let interception = match Interception::parse(event, client_context) {
        Ok(interception) => interception,
        Err(e) => {
            let reason = e.to_string();
            return Answered::new(
                Outcome::BadRequest,
                Err(HandlerError::InvalidEvent(Unanswerable::Interceptor(e))),
            )
            .because(reason);
        }
    };
    let request = interception.phase == Phase::Request;
    let pass = |outcome: Outcome| {
        let text = if request {
            interception.pass_request()
        } else {
            interception.pass_response()
        };
        Answered::new(outcome, answer::raw(text))
    };
    let settings = service.settings();
    if let Some(listed) = interception.listed_tools() {
        if settings.mode != Mode::Off {
            learn(service, &interception, listed).await;
        }
        return pass(Outcome::PassedOn).because("tools/list learned");
    }
    let call = match interception.tools_call() {
        Some(Ok(call)) if settings.mode != Mode::Off => call,
        Some(Err(notice)) if request && settings.mode != Mode::Off => {
            return Answered::new(
                Outcome::BadRequest,
                answer::raw(interception.refusal(&notice)),
            )
            .because("invalid tools/call");
        }
        _ => return pass(Outcome::PassedOn),
    };
    let doors = &service.doors;
    let mut tool_call = match interception.tool_call(
        &call,
        &doors.step_attribute,
        &doors.idempotency_key_name,
        doors.sessionless,
    ) {
        Ok(tool_call) => tool_call,
        Err(Unkeyed::Sessionless(missing)) => {
            if request {
                warn_sessionless(call.tool, &missing);
            }
            return pass(Outcome::Sessionless)
                .tool(call.tool)
                .because("sessionless");
        }
        Err(Unkeyed::Refused(notice)) if request => return answer::refuse(&call, notice),
        Err(Unkeyed::Refused(_)) => return pass(Outcome::PassedOn),
    };
    let keyer = service.keyer();
    let mut delivery = keyer.delivery(&tool_call.tool);
    // A policy file entry always wins over what a listing taught.
    if keyer.policies().get(&tool_call.tool).is_none() {
        match service
            .catalogs
            .lookup(service.store(), &tool_call.namespace)
            .await
        {
            Ok(catalog) => {
                let learned = catalog.as_deref().and_then(|c| c.tool(call.tool));
                if let Some(learned) = learned {
                    if learned.read_only == Some(true)
                        && doors.trusts_annotations(interception.gateway())
                    {
                        return pass(Outcome::DedupOff)
                            .tool(call.tool)
                            .because("read-only (trusted annotations)");
                    }
                    tool_call.schema = learned.schema.clone();
                    delivery = learned.delivery();
                }
            }
            // Keying without the schema could give a retry another key: fail closed.
            Err(e) if settings.mode != Mode::Shadow => {
                tracing::error!(error = %e, "could not read the tool catalog");
                return if request {
                    answer::notice(
                        &call,
                        Outcome::StoreError,
                        Notice::store_unavailable(call.tool),
                        None,
                    )
                } else {
                    pass(Outcome::StoreError)
                }
                .because(e.to_string());
            }
            Err(_) => {}
        }
    }
    if !keyer.dedups(&tool_call.tool) {
        return pass(Outcome::DedupOff).tool(call.tool);
    }
    let key_call = tool_call.key_call();
    let call_key = match CallKey::derive(keyer, &tool_call, &key_call) {
        Ok(call_key) => call_key,
        Err(notice) if request && settings.mode != Mode::Shadow => {
            return answer::refuse(&call, notice);
        }
        Err(_) => return pass(Outcome::PassedOn).tool(call.tool),
    };
    let keyed = call_key.keyed(&key_call, delivery);
    let key = call_key.key.as_str();
    let owner = interception.owner(key);
    let answered = if request {
        // The target runs after we answer, within the Gateway's own limit on a call.
        let lease = Lease::Covering {
            max_run_time: doors.interceptor_timeout,
        };
        match service
            .executor
            .open::<ToolFailure>(keyed, end, lease, &owner)
            .await
        {
            Opened::Claimed => {
                pass(Outcome::Executed).because("claimed; the Gateway calls the target")
            }
            Opened::Unclaimed(outcome) => pass(outcome),
            Opened::Answered(finished) => {
                service.telemetry.call(keyer, &key_call, finished.outcome);
                answer::finished(&call, finished, key)
            }
        }
    } else {
        let Some(reply) = interception.target_reply() else {
            return pass(Outcome::PassedOn).tool(call.tool);
        };
        let (run_end, stored) = match &reply {
            Ok((result, class)) => (RunEnd::Replied(*class), result.as_bytes()),
            Err(outcome_unknown) => (
                RunEnd::Failed {
                    outcome_unknown: *outcome_unknown,
                },
                &[][..],
            ),
        };
        match service
            .executor
            .finish_claimed(keyed, &owner, end, run_end, stored)
            .await
        {
            Ok(FinishedElsewhere::Settled(after)) => {
                pass(Outcome::Executed).because(format!("settled: {after:?}"))
            }
            Ok(FinishedElsewhere::AlreadyCompleted) => pass(Outcome::PassedOn),
            Ok(FinishedElsewhere::NoClaim) => {
                tracing::warn!(
                    "the target answered a call this request holds no claim on: passed on, not stored"
                );
                pass(Outcome::PassedOn).because("no claim of this request")
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "could not settle the call after the target ran; it stays claimed until its lease ends"
                );
                pass(Outcome::StoreError).because(format!("store: {e}"))
            }
        }
    };
    answered.keyed(key).tool(call.tool)
}

/// Learns each target's tools from a `tools/list` answer (see [`crate::catalog`]). A catalog
/// that cannot be written is only logged: the listing still reaches the client, and calls are
/// keyed as before.
async fn learn<S: Store>(
    service: &Service<S>,
    interception: &Interception<'_>,
    listed: BTreeMap<&str, Map<String, Value>>,
) {
    for (target, tools) in listed {
        let namespace = interception.namespace(target);
        match service
            .catalogs
            .learn(service.store(), &namespace, &tools)
            .await
        {
            Ok(wrote) => {
                tracing::debug!(target, tools = tools.len(), wrote, "learned tools/list")
            }
            Err(e) => {
                tracing::warn!(target, error = %e, "could not store the learned tool catalog")
            }
        }
    }
}
