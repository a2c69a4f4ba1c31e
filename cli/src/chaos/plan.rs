//! The soak's workload, fixed by the seed: distinct calls (corpus events and generated ones),
//! how often and when each is sent, and which tool fault each invocation carries.

use std::time::Duration;

use serde_json::{Value, json};

use super::attempt::ToolFault;
use super::proxy::AccessError;

/// One distinct call: its own session, so the ledger tells calls apart without the keyer.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) session_id: String,
    pub(crate) event: Value,
}

/// One invocation.
#[derive(Debug, Clone)]
pub(crate) struct Send {
    pub(crate) call: usize,
    /// When it starts, from the start of the run.
    pub(crate) at: Duration,
    pub(crate) fault: ToolFault,
    /// The call's event with its parameters in a shuffled order (the same call as the agent
    /// would resend it).
    pub(crate) event: Value,
}

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) calls: Vec<Call>,
    /// In start order.
    pub(crate) sends: Vec<Send>,
    /// The store's fault windows.
    pub(crate) windows: Windows,
}

/// Per mille of invocations that carry each planned fault (the tool's, or a store-path fault
/// armed for that invocation's key).
const TOOL_FAULTS: [(ToolFault, u32); 20] = [
    (ToolFault::ErrorBeforeEffect, 35),
    (ToolFault::TypedErrorAfterEffect, 20),
    (ToolFault::FourXxAfterRun, 20),
    (ToolFault::CrashAfterEffect, 25),
    (ToolFault::HangPastTimeout, 30),
    (ToolFault::SlowPastDeadline, 25),
    // Counted only when the tool was reached (most sends replay), so drawn more.
    (ToolFault::KillBeforeEffect, 60),
    (ToolFault::KillAfterEffect, 25),
    (ToolFault::PauseBeforeComplete, 25),
    // Most sends of a call find it completed: a slow claim then only replays, so it is drawn more.
    (ToolFault::SlowClaim, 50),
    (ToolFault::SlowCompletionNearDeadline, 20),
    (ToolFault::ClaimAnswersLost, 10),
    // Acts only on the completion of the invocation that runs the tool (most sends replay).
    (ToolFault::ItemTooLarge, 30),
    // Acts only on a send that claims.
    (ToolFault::ItemTooLargeOnClaim, 30),
    // The `Invoke` path (acts only on the invocation that runs the tool).
    (ToolFault::InvokeThrottled, 15),
    (ToolFault::InvokeRefused, 20),
    (ToolFault::InvokePrestartUnknown, 15),
    (ToolFault::Invoke5xx, 20),
    (ToolFault::SandboxTimedout, 15),
    (ToolFault::InvokeConnectionLost, 15),
];

/// Calls set aside per planned fault, so that every fault acts in every run whatever the timing:
/// such a call's first send carries the fault and starts alone, clear of the store's fault
/// windows, so it is the one that claims the key; [`COVERAGE_RETRIES`] plain sends follow it.
/// (Drawn faults land mostly on sends that replay, and a short run may draw a fault only onto
/// sends that never reach the tool.)
const COVERAGE_CALLS: usize = 2;
const COVERAGE_RETRIES: usize = 2;
/// Coverage calls are planned only in runs at least this many times their sends.
const COVERAGE_AT_MOST: usize = 10;
/// A coverage call's first send starts at least this long before any fault window opens (and
/// after one closes): its claim and the tool's start.
const COVERAGE_CLEAR: Duration = Duration::from_secs(1);
/// A coverage call's retries start this long after its first send at the earliest.
const COVERAGE_RETRY_AFTER: Duration = Duration::from_millis(300);
/// Sends of one call that are not part of its opening burst spread over this long (a few leases).
const SPREAD: Duration = Duration::from_secs(10);
/// A burst: the sends land within this window, racing for the claim.
const BURST: Duration = Duration::from_millis(100);
/// One store outage and one server pause per this much planned run time (at least one each).
const OUTAGE_EVERY: Duration = Duration::from_secs(8);
/// One access-or-table-error window, one connect-refused window and one black-hole window per
/// this much planned run time (at least one each).
const RARE_WINDOW_EVERY: Duration = Duration::from_secs(16);

/// Builds the plan. `corpus` holds `(file name, event)` of executable events; `rate` is the
/// planned invocations per second; `excluded` tool faults are never drawn.
pub(crate) fn build(
    seed: u64,
    invocations: usize,
    rate: f64,
    corpus: &[(String, Value)],
    excluded: &[ToolFault],
) -> Plan {
    let span = Duration::from_secs_f64(invocations as f64 / rate.max(1.0));
    let covered: Vec<ToolFault> = TOOL_FAULTS
        .iter()
        .map(|&(fault, _)| fault)
        .filter(|f| !excluded.contains(f))
        .collect();
    let coverage_sends = covered.len() * COVERAGE_CALLS * (1 + COVERAGE_RETRIES);
    let (covered, drawn_sends) = if invocations >= COVERAGE_AT_MOST * coverage_sends {
        (covered, invocations - coverage_sends)
    } else {
        (Vec::new(), invocations)
    };
    let mut workload = Workload {
        rng: fastrand::Rng::with_seed(seed),
        seed,
        span,
        calls: Vec::new(),
        sends: Vec::new(),
    };
    workload.draw_sends(drawn_sends, corpus, excluded);
    let (windows, quiet) = Windows::draw(&mut workload.rng, span);
    workload.cover(&covered, &quiet);
    let Workload {
        calls, mut sends, ..
    } = workload;
    sends.sort_by_key(|s| s.at);
    Plan {
        calls,
        sends,
        windows,
    }
}

/// The calls and sends planned so far, and the generator that draws them (the seed fixes the
/// order of its draws: sends, then windows, then coverage sends).
struct Workload {
    rng: fastrand::Rng,
    seed: u64,
    /// The planned length of the run.
    span: Duration,
    calls: Vec<Call>,
    sends: Vec<Send>,
}

impl Workload {
    /// `count` sends with drawn faults: calls from the corpus (7 in 10) or generated, each sent
    /// 1 to 20 times around a random moment, some in a burst racing for the claim.
    fn draw_sends(&mut self, count: usize, corpus: &[(String, Value)], excluded: &[ToolFault]) {
        let rng = &mut self.rng;
        let mut order: Vec<usize> = (0..corpus.len()).collect();
        rng.shuffle(&mut order);
        let mut next_corpus = 0;
        while self.sends.len() < count {
            let event = if !order.is_empty() && rng.u32(0..10) < 7 {
                let (_, event) = &corpus[order[next_corpus % order.len()]];
                next_corpus += 1;
                event.clone()
            } else {
                generated(rng)
            };
            let id = push_call(&mut self.calls, self.seed, event);
            let event = &self.calls[id].event;
            let center = self.span.mul_f64(rng.f64());
            let copies = rng.usize(1..=20).min(count - self.sends.len());
            for _ in 0..copies {
                let offset = if rng.u32(0..10) < 4 {
                    BURST.mul_f64(rng.f64())
                } else {
                    SPREAD.mul_f64(rng.f64())
                };
                self.sends.push(Send {
                    call: id,
                    at: center + offset,
                    fault: draw_fault(rng, excluded),
                    event: shuffled(event, rng),
                });
            }
        }
    }

    /// [`COVERAGE_CALLS`] calls per `covered` fault, each opened by a send that carries it where
    /// no window of `quiet` is open, then retried plainly.
    fn cover(&mut self, covered: &[ToolFault], quiet: &[(Duration, Duration)]) {
        let rng = &mut self.rng;
        for &fault in covered {
            for _ in 0..COVERAGE_CALLS {
                let generated = generated(rng);
                let id = push_call(&mut self.calls, self.seed, generated);
                let event = &self.calls[id].event;
                let first_try = self.span.mul_f64(rng.f64());
                let at = clear_of(rng, self.span, quiet, first_try, COVERAGE_CLEAR);
                self.sends.push(Send {
                    call: id,
                    at,
                    fault,
                    event: shuffled(event, rng),
                });
                for _ in 0..COVERAGE_RETRIES {
                    self.sends.push(Send {
                        call: id,
                        at: at + COVERAGE_RETRY_AFTER + SPREAD.mul_f64(rng.f64()),
                        fault: ToolFault::None,
                        event: shuffled(event, rng),
                    });
                }
            }
        }
    }
}

/// The store's fault windows of one run, each (start from the run's start, length).
#[derive(Debug, Clone, Default)]
pub(crate) struct Windows {
    /// Store outages.
    pub(crate) outages: Vec<(Duration, Duration)>,
    /// Server pauses.
    pub(crate) pauses: Vec<(Duration, Duration)>,
    /// Every store request is answered with one access or table error.
    pub(crate) access_errors: Vec<(Duration, Duration, AccessError)>,
    /// The fault proxy does not listen (connects refused).
    pub(crate) refusals: Vec<(Duration, Duration)>,
    /// Connects to the fault proxy hang and its connections go silent.
    pub(crate) blackholes: Vec<(Duration, Duration)>,
}

impl Windows {
    /// Draws the windows over `span`, and every window in which a coverage send may not start.
    fn draw(rng: &mut fastrand::Rng, span: Duration) -> (Windows, Vec<(Duration, Duration)>) {
        let outages = windows(rng, span, OUTAGE_EVERY, 300..2500);
        let pauses = windows(rng, span, OUTAGE_EVERY, 300..2500);
        // Clear of the outages (which close every connection before a request is read) and of
        // each other, so that each window's own failure is what the store sees.
        let mut taken = outages.clone();
        // Short: a table or a permission back within a second or two.
        let mut access_errors = Vec::new();
        for (at, length) in windows(rng, span, RARE_WINDOW_EVERY, 150..1200) {
            let at = clear_of(rng, span, &taken, at, length);
            taken.push((at, length));
            let error = AccessError::ALL[rng.usize(..AccessError::ALL.len())];
            access_errors.push((at, length, error));
        }
        access_errors.sort();
        // Each window moved clear of those placed before it, and taken in turn.
        let mut placed = |rng: &mut fastrand::Rng, drawn: Vec<(Duration, Duration)>| {
            let mut placed: Vec<_> = drawn
                .into_iter()
                .map(|(at, length)| {
                    let at = clear_of(rng, span, &taken, at, length);
                    taken.push((at, length));
                    (at, length)
                })
                .collect();
            placed.sort();
            placed
        };
        let drawn = windows(rng, span, RARE_WINDOW_EVERY, 300..2000);
        let refusals = placed(rng, drawn);
        let drawn = windows(rng, span, RARE_WINDOW_EVERY, 300..1500);
        let blackholes = placed(rng, drawn);
        // Coverage sends claim where no window (server pauses included) is open.
        let quiet = taken.iter().chain(&pauses).copied().collect();
        let windows = Windows {
            outages,
            pauses,
            access_errors,
            refusals,
            blackholes,
        };
        (windows, quiet)
    }
}

/// One window per `every` of `span` (at least one), each starting at a random time and lasting
/// a random number of `millis`; in start order.
fn windows(
    rng: &mut fastrand::Rng,
    span: Duration,
    every: Duration,
    millis: std::ops::Range<u64>,
) -> Vec<(Duration, Duration)> {
    let n = (span.as_secs_f64() / every.as_secs_f64()).ceil().max(1.0) as usize;
    let mut w: Vec<_> = (0..n)
        .map(|_| {
            (
                span.mul_f64(rng.f64()),
                Duration::from_millis(rng.u64(millis.clone())),
            )
        })
        .collect();
    w.sort();
    w
}

/// Adds a call with its own session (`chaos-<seed>-<index>`, written into the event), and returns
/// its index.
fn push_call(calls: &mut Vec<Call>, seed: u64, mut event: Value) -> usize {
    let id = calls.len();
    let session_id = format!("chaos-{seed}-{id}");
    event["sessionId"] = json!(session_id);
    calls.push(Call { session_id, event });
    id
}

/// A start for a window of `length` that overlaps none of `taken` (with a margin), drawn again
/// from `at` a few times; the last draw when none is clear (a short span).
fn clear_of(
    rng: &mut fastrand::Rng,
    span: Duration,
    taken: &[(Duration, Duration)],
    mut at: Duration,
    length: Duration,
) -> Duration {
    const MARGIN: Duration = Duration::from_millis(300);
    for _ in 0..50 {
        let overlaps = taken
            .iter()
            .any(|&(t, l)| at < t + l + MARGIN && t < at + length + MARGIN);
        if !overlaps {
            break;
        }
        at = span.mul_f64(rng.f64());
    }
    at
}

fn draw_fault(rng: &mut fastrand::Rng, excluded: &[ToolFault]) -> ToolFault {
    let roll = rng.u32(0..1000);
    let mut acc = 0;
    for (fault, per_mille) in TOOL_FAULTS {
        acc += per_mille;
        if roll < acc {
            return if excluded.contains(&fault) {
                ToolFault::None
            } else {
                fault
            };
        }
    }
    ToolFault::None
}

/// The event with its `parameters` list (function events) shuffled.
fn shuffled(event: &Value, rng: &mut fastrand::Rng) -> Value {
    let mut event = event.clone();
    if let Some(params) = event.get_mut("parameters").and_then(Value::as_array_mut) {
        rng.shuffle(params);
    }
    event
}

/// A fresh call of the demo tool's payments and helpdesk functions, with random arguments.
fn generated(rng: &mut fastrand::Rng) -> Value {
    let param =
        |name: &str, ty: &str, value: String| json!({"name": name, "type": ty, "value": value});
    let (group, function, params) = match rng.u32(0..3) {
        0 => {
            let customer = if rng.u32(0..8) == 0 {
                format!("cus_declined_{}", rng.u32(1000..9999))
            } else {
                format!("cus_{:06x}", rng.u32(0..0xff_ffff))
            };
            (
                "payments",
                "charge_card",
                vec![
                    param("customer_id", "string", customer),
                    param(
                        "amount",
                        "number",
                        format!("{}.{:02}", rng.u32(1..5000), rng.u32(0..100)),
                    ),
                    param(
                        "currency",
                        "string",
                        ["USD", "EUR", "GBP"][rng.usize(0..3)].into(),
                    ),
                    param("capture", "boolean", rng.bool().to_string()),
                ],
            )
        }
        1 => (
            "payments",
            "refund",
            vec![
                param("charge_id", "string", format!("ch_{:08x}", rng.u32(..))),
                param("amount", "number", format!("{}", rng.u32(1..900))),
            ],
        ),
        _ => (
            "helpdesk",
            "create_ticket",
            vec![
                param(
                    "subject",
                    "string",
                    format!("Order {} did not arrive", rng.u32(10_000..99_999)),
                ),
                param(
                    "priority",
                    "string",
                    ["low", "normal", "high"][rng.usize(0..3)].into(),
                ),
            ],
        ),
    };
    json!({
        "messageVersion": "1.0",
        "agent": {"name": "toolcall-dedup-chaos-agent", "id": "CHAOS0AGNT", "alias": "TSTALIASID", "version": "DRAFT"},
        "inputText": format!("please {function}"),
        "sessionId": "",
        "actionGroup": group,
        "function": function,
        "parameters": params,
        "sessionAttributes": {},
        "promptSessionAttributes": {}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_sends(plan: &Plan) -> Vec<&Send> {
        let mut first: Vec<Option<&Send>> = vec![None; plan.calls.len()];
        for send in &plan.sends {
            first[send.call].get_or_insert(send);
        }
        first.into_iter().flatten().collect()
    }

    #[test]
    fn every_fault_opens_calls_of_its_own_clear_of_the_windows() {
        let plan = build(14, 1500, 100.0, &[], &[ToolFault::CrashAfterEffect]);
        assert_eq!(plan.sends.len(), 1500);
        let windows: Vec<_> = plan
            .windows
            .outages
            .iter()
            .chain(&plan.windows.pauses)
            .chain(&plan.windows.refusals)
            .chain(&plan.windows.blackholes)
            .copied()
            .chain(
                plan.windows
                    .access_errors
                    .iter()
                    .map(|&(at, len, _)| (at, len)),
            )
            .collect();
        for &(fault, _) in &TOOL_FAULTS {
            let opened = first_sends(&plan)
                .into_iter()
                .filter(|s| s.fault == fault)
                .filter(|s| {
                    windows
                        .iter()
                        .all(|&(at, len)| s.at + COVERAGE_CLEAR <= at || at + len <= s.at)
                })
                .count();
            if fault == ToolFault::CrashAfterEffect {
                assert_eq!(opened, 0, "an excluded fault is never planned");
            } else {
                assert!(opened >= COVERAGE_CALLS, "{fault:?} opens {opened} calls");
            }
        }
    }

    #[test]
    fn a_short_run_is_all_drawn() {
        let plan = build(14, 50, 100.0, &[], &[]);
        assert_eq!(plan.sends.len(), 50);
        assert!(plan.sends.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
