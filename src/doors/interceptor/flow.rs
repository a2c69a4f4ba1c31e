//! The interceptor's protocol: a `tools/call` is claimed at REQUEST (the Gateway then calls the
//! target) and settled at RESPONSE, when the target's answer passes by; every other message
//! passes through. See the module docs of [`crate::doors::interceptor`] for the contract.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{Intercepted, Interception, Phase, ToolsCall};
use crate::answer::{self, Handled, ToolFailure};
use crate::decide::Mode;
use crate::decide::ReplyClass;
use crate::decide::RunEnd;
use crate::doors::port::{Notice, ToolCall, Unkeyed};
use crate::engine::{CallKey, Engine};
use crate::executor::lease::TOOL_START_ALLOWANCE;
use crate::executor::{
    ClaimMade, Finished, FinishedElsewhere, Keyed, Lease, Opened, Outcome, RequestOwner, Settled,
};
use crate::invoking::warn_sessionless;
use crate::key::{Call, Delivery};
use crate::store::Store;

/// Answers one interceptor invocation, as [`Intercepted::parse`] read it.
pub(crate) async fn intercept<S: Store>(
    engine: &Engine<S>,
    read: Intercepted<'_>,
    end: Instant,
) -> Handled {
    let doors = &engine.doors;
    let interception = match read {
        Intercepted::Mcp(interception) => interception,
        Intercepted::Unread { answer, why, warn } => {
            if warn {
                tracing::warn!("interceptor invocation passed on unread: {why}");
            } else {
                tracing::debug!("interceptor invocation passed on unread: {why}");
            }
            return Handled::new(Outcome::PassedUnread, answer::raw(answer)).because(why);
        }
    };
    // At RESPONSE, what the target answered, read once for every claim it settles.
    let reply = match interception.phase {
        Phase::Response => interception.target_reply(&doors.release_on_rpc_errors),
        Phase::Request => None,
    };
    let flow = Flow {
        engine,
        interception,
        reply,
        end,
    };
    flow.answer().await
}

/// One interceptor invocation being answered.
struct Flow<'a, S> {
    engine: &'a Engine<S>,
    interception: Interception<'a>,
    /// At RESPONSE, the target's answer to settle with ([`Interception::target_reply`]); `None`
    /// when there is nothing to settle (and always at REQUEST).
    reply: Option<Result<(String, ReplyClass), bool>>,
    end: Instant,
}

/// A `tools/call` ready for the executor: its keyed call and what the key came from.
struct Prepared {
    tool_call: ToolCall,
    delivery: Delivery,
}

impl<S: Store> Flow<'_, S> {
    fn request(&self) -> bool {
        self.interception.phase == Phase::Request
    }

    fn pass(&self, outcome: Outcome) -> Handled {
        Handled::new(outcome, answer::raw(self.interception.pass()))
    }

    async fn answer(&self) -> Handled {
        let (engine, interception) = (self.engine, &self.interception);
        let enforcing = engine.settings().mode != Mode::Off;
        if let Some(listed) = interception.listed_tools() {
            if enforcing {
                self.learn(listed).await;
            }
            return self.pass(Outcome::PassedOn).because("tools/list learned");
        }
        if enforcing && self.request() && interception.is_batch_with_tools_call() {
            return Handled::new(
                Outcome::BadRequest,
                answer::raw(interception.batch_refusal()),
            )
            .because("a batch holding tools/call");
        }
        let call = match interception.tools_call() {
            Some(Ok(call)) if enforcing => call,
            Some(Err(notice)) if self.request() && enforcing => {
                return Handled::new(
                    Outcome::BadRequest,
                    answer::raw(interception.refusal(&notice)),
                )
                .because("invalid tools/call");
            }
            _ => return self.pass(Outcome::PassedOn),
        };
        warn_once_if_gateway_unnamed(&engine.warned_gateway_unnamed, interception);
        if !self.request()
            && let Some(settled) = self.settle_as_noted(&call).await
        {
            return settled.tool(call.tool);
        }
        let prepared = match self.prepare(&call).await {
            Ok(prepared) => prepared,
            Err(answered) => return answered.tool(call.tool),
        };
        let key_call = prepared.tool_call.key_call();
        let keyer = engine.keyer();
        let derived = tracing::info_span!("key")
            .in_scope(|| CallKey::derive(keyer, &prepared.tool_call, &key_call));
        let call_key = match derived {
            Ok(call_key) => call_key,
            Err(notice) if self.request() && engine.settings().mode != Mode::Shadow => {
                return answer::refuse(&call, notice);
            }
            Err(_) => return self.pass(Outcome::PassedOn).tool(call.tool),
        };
        let keyed = call_key.keyed(&key_call, prepared.delivery);
        let answered = if self.request() {
            self.open(&call, keyed, &key_call).await
        } else {
            // No note of the claim: a REQUEST of a build before notes, or one that claimed
            // nothing (shadow mode). The key is derived as that REQUEST derived it.
            let owner = self.interception.owner(keyed.key);
            let made = ClaimMade {
                key: keyed.key,
                owner: &owner,
                policy_name: call.listed_name,
            };
            self.settle(made).await
        };
        answered.keyed(&call_key.key).tool(call.tool)
    }

    /// The call to key, with the schema and delivery its policy entry, or else its learned
    /// listing, gives; `Err` is the answer when there is none to key.
    async fn prepare(&self, call: &ToolsCall<'_>) -> Result<Prepared, Handled> {
        let (engine, interception) = (self.engine, &self.interception);
        let doors = &engine.doors;
        let mut tool_call = match interception.tool_call(
            call,
            &doors.step_attribute,
            &doors.idempotency_key_name,
            doors.sessionless,
        ) {
            Ok(tool_call) => tool_call,
            Err(Unkeyed::Sessionless(missing)) => {
                if self.request() {
                    warn_sessionless(call.tool, &missing);
                }
                return Err(self.pass(Outcome::Sessionless).because("sessionless"));
            }
            Err(Unkeyed::Refused(notice)) if self.request() => {
                return Err(answer::refuse(call, notice));
            }
            Err(Unkeyed::Refused(_)) => return Err(self.pass(Outcome::PassedOn)),
        };
        let keyer = engine.keyer();
        // Policy entries name the tool as the Gateway lists it (`target___tool`), so that one
        // target's policy never applies to another target's tool of the same name.
        tool_call.policy_name = Some(call.listed_name.to_string());
        let by_policy = keyer.policies().get(call.listed_name).is_some();
        let mut delivery = keyer.delivery(call.listed_name);
        if !by_policy {
            let trusted = doors.trusts_gateway(interception.gateway());
            match engine
                .catalogs
                .lookup(engine.store(), &tool_call.namespace, trusted)
                .await
            {
                Ok(catalog) => {
                    if let Some(learned) = catalog.as_deref().and_then(|c| c.tool(call.tool)) {
                        if learned.read_only == Some(true) && trusted {
                            return Err(self
                                .pass(Outcome::DedupOff)
                                .because("read-only (trusted annotations)"));
                        }
                        tool_call.schema = learned.schema.clone();
                        delivery = learned.delivery();
                    }
                }
                // Keying without the schema could give a retry another key: fail closed.
                Err(e) if engine.settings().mode != Mode::Shadow => {
                    tracing::error!(error = %e, "could not read the tool catalog");
                    let answered = if self.request() {
                        answer::notice(
                            call,
                            Outcome::StoreError,
                            Notice::store_unavailable(call.tool),
                            None,
                        )
                    } else {
                        self.pass(Outcome::StoreError)
                    };
                    return Err(answered.because(e.to_string()));
                }
                Err(_) => {}
            }
        }
        if !keyer.dedups(call.listed_name) {
            return Err(self.pass(Outcome::DedupOff));
        }
        Ok(Prepared {
            tool_call,
            delivery,
        })
    }

    /// REQUEST: claim the call for the target the Gateway calls next, or answer for it.
    async fn open(&self, call: &ToolsCall<'_>, keyed: Keyed<'_>, key_call: &Call<'_>) -> Handled {
        let engine = self.engine;
        let owner = RequestOwner {
            name: self.interception.owner(keyed.key),
            is_one_request: self.interception.owner_is_one_request(),
            noted_at: Some(self.interception.request_record()),
        };
        // The target runs after we answer, within the Gateway's limit on a call, once started.
        let lease = Lease::Covering {
            max_run_time: engine.doors.interceptor_timeout + TOOL_START_ALLOWANCE,
        };
        match engine
            .executor
            .open::<ToolFailure>(keyed, self.end, lease, &owner)
            .await
        {
            Opened::Claimed => {
                let passed = match &engine.doors.target_key_header {
                    Some(header) => self.interception.pass_with_key(header, keyed.key),
                    None => self.interception.pass(),
                };
                Handled::new(Outcome::Executed, answer::raw(passed))
                    .because("claimed; the Gateway calls the target")
            }
            Opened::Unclaimed(outcome) => self.pass(outcome),
            Opened::Answered(finished) => {
                if let Some(ended) = ended_task(&finished, engine.store().now_ms()) {
                    // The stored answer hands out a task that no longer lives: the call was made
                    // once, and what its task did is not ours to know.
                    tracing::info!(ended, "the stored task handle outlived its task");
                    return answer::notice(
                        call,
                        Outcome::Unknown,
                        Notice::outcome_unknown(call.tool, keyed.key),
                        Some(keyed.key),
                    )
                    .because("the stored task has ended");
                }
                engine
                    .telemetry
                    .call(engine.keyer(), key_call, finished.outcome);
                answer::finished(call, finished, keyed.key, true)
            }
        }
    }

    /// RESPONSE: the claims this request's REQUEST noted ([`Interception::request_record`]),
    /// each settled with the target's answer while its owner holds it; `None` when it noted none.
    async fn settle_as_noted(&self, call: &ToolsCall<'_>) -> Option<Handled> {
        if self.reply.is_none() {
            return Some(self.pass(Outcome::PassedOn));
        }
        let record = self.interception.request_record();
        let noted = match self.engine.executor.noted_claims(&record, self.end).await {
            Ok(noted) if noted.is_empty() => return None,
            Ok(noted) => noted,
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "could not read which claim the request made; it stays claimed until its lease ends"
                );
                return Some(
                    self.pass(Outcome::StoreError)
                        .because(format!("store: {e}")),
                );
            }
        };
        let mut settled: Option<Handled> = None;
        for claim in &noted {
            let made = ClaimMade {
                key: &claim.key,
                owner: &claim.owner,
                policy_name: call.listed_name,
            };
            let answered = self.settle(made).await.keyed(&claim.key);
            // The answer that says most: a claim settled, else a store error, else passed on.
            let rank = |a: &Handled| match a.outcome {
                Outcome::Executed => 2,
                Outcome::StoreError => 1,
                _ => 0,
            };
            if settled.as_ref().is_none_or(|s| rank(&answered) > rank(s)) {
                settled = Some(answered);
            }
        }
        settled
    }

    /// RESPONSE: settle the claim `made` with the target's answer, and pass it on.
    async fn settle(&self, made: ClaimMade<'_>) -> Handled {
        let Some(reply) = &self.reply else {
            return self.pass(Outcome::PassedOn);
        };
        let (run_end, stored) = match reply {
            Ok((result, class)) => (RunEnd::Replied(*class), result.as_bytes()),
            Err(outcome_unknown) => (
                RunEnd::Failed {
                    outcome_unknown: *outcome_unknown,
                },
                &[][..],
            ),
        };
        let settled = self
            .engine
            .executor
            .finish_claimed(made, self.end, run_end, stored)
            .await;
        match settled {
            Ok(FinishedElsewhere::Settled(after)) => self
                .pass(Outcome::Executed)
                .because(format!("settled: {after:?}")),
            Ok(FinishedElsewhere::AlreadyCompleted) => self.pass(Outcome::PassedOn),
            Ok(FinishedElsewhere::NoClaim) => {
                tracing::warn!(
                    "the target answered a call this request holds no claim on: passed on, not stored"
                );
                self.pass(Outcome::PassedOn)
                    .because("no claim of this request")
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    "could not settle the call after the target ran; it stays claimed until its lease ends"
                );
                self.pass(Outcome::StoreError)
                    .because(format!("store: {e}"))
            }
        }
    }

    /// Learns each target's tools from a `tools/list` answer (see [`crate::catalog`]). A catalog
    /// that cannot be written is only logged: the listing still reaches the client, and calls
    /// are keyed as before.
    async fn learn(&self, listed: BTreeMap<&str, Map<String, Value>>) {
        let (engine, interception) = (self.engine, &self.interception);
        let trusted = engine.doors.trusts_gateway(interception.gateway());
        for (target, tools) in listed {
            let namespace = interception.namespace(target);
            match engine
                .catalogs
                .learn(engine.store(), &namespace, &tools, trusted)
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
}

/// A deployment whose Gateway names itself nowhere keys every gateway's calls as one (`-`): said
/// once per container (`warned`), since every call would say it again.
fn warn_once_if_gateway_unnamed(warned: &AtomicBool, interception: &Interception<'_>) {
    if !interception.gateway_is_named() && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "no gateway id in the invocation (no GATEWAY_ARN, no Host header) and no \
             DEDUP_GATEWAY_ID: every gateway that invokes this function shares keys and catalogs \
             (\"-\"); set DEDUP_GATEWAY_ID, or give each gateway its own function"
        );
    }
}

/// When a replayed answer hands out a task (MCP tasks) whose TTL has passed at `now_ms`: the
/// instant it ended.
fn ended_task(finished: &Finished<ToolFailure>, now_ms: i64) -> Option<i64> {
    let Settled::Replayed { reply, .. } = &finished.settled else {
        return None;
    };
    let result: Value = serde_json::from_slice(reply).ok()?;
    super::task_ends_ms(&result).filter(|ended| *ended < now_ms)
}
