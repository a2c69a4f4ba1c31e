//! The flow of the doors that invoke the tool themselves (Bedrock action groups, the AgentCore
//! Lambda target, the invoke envelope): route, key, run through the executor, answer.

use std::time::Duration;

use tokio::time::Instant;

use crate::answer::{self, Ending, Handled, ToolFailure};
use crate::decide::Mode;
use crate::dispatch::Dispatcher;
use crate::doors::port::{EntryPoint, Scoping, Unkeyed};
use crate::engine::{CallKey, Engine};
use crate::executor::{Lease, ToolRun, remaining};
use crate::store::Store;
use crate::telemetry::Outcome;

/// Routes, keys and runs one call that came in by `door`, then writes how it ended in the door's
/// format (the one hand-over to [`answer`]).
pub(crate) async fn answer<S: Store, D: Dispatcher, E: EntryPoint>(
    engine: &Engine<S>,
    dispatcher: &D,
    door: &E,
    end: Instant,
) -> Handled {
    let flow = Direct { engine, dispatcher };
    let ending = flow.run(door, end).await;
    answer::ended(door, ending, engine.doors.replay_marker)
}

/// Every sessionless call that runs is warned about, so that a deployment never believes it is
/// protected when it is not.
pub(crate) fn warn_sessionless(tool: &str, missing: &str) {
    tracing::warn!(
        tool,
        "sessionless call: {missing}; it runs WITHOUT dedup (DEDUP_SESSIONLESS=pass_through). \
         Send a session id, or choose gateway_scope or refuse"
    );
}

struct Direct<'a, S, D> {
    engine: &'a Engine<S>,
    dispatcher: &'a D,
}

impl<S: Store, D: Dispatcher> Direct<'_, S, D> {
    async fn run<E: EntryPoint>(&self, door: &E, end: Instant) -> Ending {
        let (group, tool_name) = door.route();
        let route = match self.dispatcher.route(&self.engine.routes, group, tool_name) {
            Ok(route) => route,
            Err(e) => return Ending::NoRoute(e),
        };
        let engine = self.engine;
        let settings = engine.settings();
        let scoping = engine.doors.scoping();
        let passed = |outcome| self.pass_through(door, &route.target, scoping, end, outcome);
        if settings.mode == Mode::Off {
            return passed(Outcome::Executed).await;
        }
        let mut call = match door.call(scoping) {
            Ok(call) => call,
            Err(_) if settings.mode == Mode::Shadow => {
                tracing::warn!("shadow mode: invalid event passed through unkeyed");
                return passed(Outcome::Executed).await;
            }
            Err(Unkeyed::Sessionless(missing)) => {
                warn_sessionless(door.tool(), &missing);
                return passed(Outcome::Sessionless).await;
            }
            Err(Unkeyed::Refused(notice)) => return Ending::Refused(notice),
        };
        if let Some(namespace) = &route.namespace {
            call.rename_namespace(namespace);
        }
        let keyer = engine.keyer();
        if !keyer.dedups(call.policy_key()) {
            return passed(Outcome::DedupOff).await;
        }
        let key_call = call.key_call();
        let derived =
            tracing::info_span!("key").in_scope(|| CallKey::derive(keyer, &call, &key_call));
        let call_key = match derived {
            Ok(call_key) => call_key,
            Err(notice) if settings.mode == Mode::Shadow => {
                tracing::warn!(message = %notice.message, "shadow mode: unkeyable call passed through");
                return passed(Outcome::Executed).await;
            }
            Err(notice) => return Ending::Refused(notice),
        };
        let keyed = call_key.keyed(&key_call, keyer.delivery(call.policy_key()));
        let key = call_key.key.as_str();
        let lease = Lease::Covering {
            max_run_time: route.max_run_time,
        };
        let finished = engine
            .executor
            .run(keyed, end, lease, |timeout| {
                self.invoke(door, &route.target, Some(key), scoping, timeout)
            })
            .await;
        engine.telemetry.call(keyer, &key_call, finished.outcome);
        Ending::Finished {
            finished,
            key: call_key.key.clone(),
        }
    }

    /// Invokes the routed tool and checks its reply in the caller's format.
    async fn invoke(
        &self,
        door: &impl EntryPoint,
        target: &str,
        key: Option<&str>,
        scoping: Scoping<'_>,
        timeout: Duration,
    ) -> ToolRun<ToolFailure> {
        let forward = match door.forward(key, scoping) {
            Ok(forward) => forward,
            Err(e) => {
                return ToolRun::Failed {
                    error: ToolFailure::Unforwardable(e),
                    outcome_unknown: false,
                };
            }
        };
        match self
            .dispatcher
            .invoke_forward(target, forward, timeout)
            .await
        {
            Ok(reply) => match door.classify(&reply) {
                Ok(class) => ToolRun::Replied {
                    reply: door.stored_form(reply),
                    class,
                },
                // The tool answered, so it ran: its side effect may have happened even though
                // its reply is unusable. Keep the claim until the lease ends, as for a timeout.
                Err(e) => ToolRun::Failed {
                    error: ToolFailure::MalformedReply(e),
                    outcome_unknown: true,
                },
            },
            Err(e) => ToolRun::Failed {
                outcome_unknown: e.outcome_unknown(&self.engine.doors.release_on_errors),
                error: ToolFailure::Dispatch(e),
            },
        }
    }

    /// `DEDUP_MODE=off`, shadow mode's unkeyable calls, sessionless calls and tools whose policy
    /// says `dedup = "off"`: the event goes to the tool as it came, and its reply comes back
    /// unchanged, reported as `outcome`.
    async fn pass_through(
        &self,
        door: &impl EntryPoint,
        target: &str,
        scoping: Scoping<'_>,
        end: Instant,
        outcome: Outcome,
    ) -> Ending {
        let timeout = remaining(end).saturating_sub(self.engine.settings().reply_margin);
        let run = self.invoke(door, target, None, scoping, timeout).await;
        Ending::PassedThrough { outcome, run }
    }
}
