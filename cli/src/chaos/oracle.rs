//! The oracle: reads the demo tool's ledger at the end and checks the run against it.
//!
//! Per distinct call (one session each):
//!
//! - **Side effects** are the ledger entries of its session. The first is the execution. A
//!   further one is allowed only when an earlier execution's outcome was unknown to the executor
//!   (the tool crashed or the invocation was killed after the effect, or the completion write
//!   failed) *and* the further execution claimed the key after that execution's lease had ended:
//!   that is the documented at-least-once window of an unrecorded outcome. Any other further
//!   entry is a **double execution**. A claim takes the key when its write applies: no earlier
//!   than the proxy sent the write the server applied ([`super::proxy::WriteLog`]), and no
//!   earlier than the clock reading its condition was written with. A claim held or retried for a while applies
//!   well after that reading, and may then find the key free because the lease it saw ended
//!   meanwhile and a later holder released it.
//! - **Results**: every replayed answer, and every executed answer whose completion was stored,
//!   equals the call's stored result byte for byte; and no completion is refused before its own
//!   lease ended (that would mean someone overwrote or deleted the record under its holder).
//!   Otherwise it is a **lost result**. A completion refused after its own lease ended (sent
//!   late, or sent in time and retried past it) is the fence working, counted apart. A result too large for an item is not stored by design: the
//!   record is completed with the `result_omitted` marker instead. That is not a lost result when
//!   the record's marker names exactly the size of the result the completion was given, the
//!   completion said so (`ResultOmitted`), and every replayed answer is the "already ran, result
//!   too large to store" notice; anything else about such a record is a lost result. A store
//!   error answered before the tool ran (failing closed) is neither: it is counted in the
//!   answers (`store_error`) and by cause in `store_paths`.
//! - **Claims**: after the run settles (every lease plus a margin has passed) no record may still
//!   block its key, and a last, fault-free send of every call must be answered, not told "in
//!   progress". Otherwise it is a **stuck claim**.

use std::collections::HashMap;

use serde_json::Value;

use super::attempt::{Attempt, Completion, LostClaim, Notes};
use super::proxy::WriteSeen;
use toolcall_dedup::store::{Record, Status};
use toolcall_dedup::telemetry::Outcome;

/// One finished (or killed) invocation, as the oracle needs it.
#[derive(Debug)]
pub(crate) struct Observed {
    pub(crate) call: usize,
    /// `None` when the invocation was killed.
    pub(crate) outcome: Option<Outcome>,
    /// Why it was killed: `killed_by_fault` (the tool pulled the switch) or `killed_at_deadline`.
    pub(crate) killed: Option<&'static str>,
    pub(crate) response: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) notes: Notes,
    /// Where the notes come from (read again before the oracle runs).
    pub(crate) attempt: std::sync::Arc<Attempt>,
    /// The answer said this invocation settled its call as outcome unknown, so announced it.
    pub(crate) announced: bool,
}

/// What the store holds for one call, and how its door answers from a stored result.
#[derive(Clone, Copy)]
pub(crate) struct StoreSeen<'a> {
    /// The call's record after the run.
    pub(crate) record: Option<&'a Record>,
    /// The writes the proxy saw for the call's key.
    pub(crate) writes: &'a [WriteSeen],
    /// The answer the call's door writes from a stored result.
    pub(crate) answered_from: &'a dyn Fn(&[u8]) -> Option<String>,
}

/// What the oracle found.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) executed: u64,
    pub(crate) double_executions: u64,
    pub(crate) reexecutions_after_unknown_outcome: u64,
    /// Of those, the ones whose claim write applied after the earlier lease ended, though its
    /// condition was written before.
    pub(crate) reexecutions_claimed_by_a_late_write: u64,
    pub(crate) late_completions_refused: u64,
    pub(crate) lost_results: u64,
    pub(crate) stuck_claims: u64,
    /// Calls with no side effect before the settling pass (every attempt ended in a store
    /// outage, a tool fault or a kill before the effect).
    pub(crate) unexecuted_before_settle: u64,
    /// Calls whose invocations derived different keys (the sends of one call must meet).
    pub(crate) key_splits: u64,
    /// Completions stored without their result (too large), the record saying so.
    pub(crate) results_omitted: u64,
    /// Replayed answers of such a record: "already ran", without the result.
    pub(crate) already_ran_answers: u64,
    /// Invoke faults after which the executor released the claim, or kept it.
    pub(crate) invoke_claims_released: u64,
    pub(crate) invoke_claims_kept: u64,
    /// Invoke faults after which the executor released a claim whose tool may have run, or kept
    /// one whose tool provably never started.
    pub(crate) claims_misjudged: u64,
    pub(crate) at_most_once_calls: u64,
    pub(crate) at_most_once_unknown: u64,
    pub(crate) announced_twice: u64,
    /// Calls settled as outcome unknown that no invocation or sweep announced.
    pub(crate) unannounced: Vec<String>,
    pub(crate) findings: Vec<String>,
}

/// Lease ends are compared with claim times read from the same clock a few microseconds apart.
const CLOCK_SLACK_MS: i64 = 5;
/// A double execution's finding lists the key's writes from this long before the first claim...
const WRITES_SHOWN_BEFORE_MS: i64 = 1_000;
/// ...to this long after the claim that ran the effect again.
const WRITES_SHOWN_AFTER_MS: i64 = 1_000;
/// In the answer to a repeat of a call whose result was too large to store
/// (`Notice::already_executed`).
const ALREADY_RAN: &str = "Its result was too large to store";
const MAX_FINDINGS: usize = 40;

impl Verdict {
    fn finding(&mut self, text: String) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(text);
        }
    }
}

/// Checks one call. `observed` are its invocations in the run (settling pass included, from
/// `settle_index` on), `store` what the store holds for it; an `at_most_once` call has no
/// at-least-once window: any second side effect is a double execution.
pub(crate) fn check_call(
    verdict: &mut Verdict,
    session: &str,
    entries: &[&Value],
    observed: &[&Observed],
    settle_index: usize,
    at_most_once: bool,
    store: &StoreSeen<'_>,
) {
    verdict.executed += entries.len() as u64;
    let before_settle = entries
        .iter()
        .filter(|e| {
            let receipt = e["receipt_id"].as_str();
            !observed[settle_index..]
                .iter()
                .any(|o| o.notes.receipt_id.as_deref() == receipt)
        })
        .count();
    if before_settle == 0 {
        verdict.unexecuted_before_settle += 1;
    }
    let keys: std::collections::BTreeSet<_> =
        observed.iter().filter_map(|o| o.key.as_ref()).collect();
    if keys.len() > 1 {
        verdict.key_splits += 1;
        verdict.finding(format!(
            "{session}: its sends derived {} different keys",
            keys.len()
        ));
    }
    check_side_effects(
        verdict,
        session,
        entries,
        observed,
        store.writes,
        at_most_once,
    );
    check_results(verdict, session, observed, store);
    check_lost_claims(verdict, session, observed);
    check_invoke_releases(verdict, session, observed);

    // Claims.
    let record = store.record;
    let settled = observed.get(settle_index).and_then(|o| o.outcome);
    let blocking = record.is_some_and(|r| r.status == Status::InProgress);
    if settled == Some(Outcome::InProgress) || blocking {
        verdict.stuck_claims += 1;
        verdict.finding(format!(
            "{session}: still claimed after every lease ended (settling answer {settled:?}, record {record:?})"
        ));
    }
}

/// One side effect, with the invocation that noted it and when its claim took the key.
type Execution<'a> = (&'a Value, Option<&'a Observed>, Option<i64>);

/// Side effects, in the order they happened: each after the first is a re-execution after an
/// unknown outcome whose lease had ended, or a double execution.
fn check_side_effects(
    verdict: &mut Verdict,
    session: &str,
    entries: &[&Value],
    observed: &[&Observed],
    writes: &[WriteSeen],
    at_most_once: bool,
) {
    let by_receipt: HashMap<&str, &Observed> = observed
        .iter()
        .filter_map(|o| o.notes.receipt_id.as_deref().map(|r| (r, *o)))
        .collect();
    // Each with its invocation and when its claim took the key, worked out once.
    let mut executions: Vec<Execution<'_>> = entries
        .iter()
        .map(|e| {
            let o = e["receipt_id"]
                .as_str()
                .and_then(|r| by_receipt.get(r).copied());
            (*e, o, o.and_then(|o| took_key_at(o, writes)))
        })
        .collect();
    executions.sort_by_key(|(e, _, took)| (took.unwrap_or(i64::MAX), e["ts_ms"].as_i64()));
    for i in 1..executions.len() {
        let (_, this, claimed_at) = executions[i];
        let explained_at = |claimed_at: i64| {
            executions[..i].iter().any(|(earlier_entry, earlier, _)| {
                // The earlier side effect itself happened before this claim: a lease that ended
                // while its tool still ran would let both run at once.
                let done_before = earlier_entry["ts_ms"]
                    .as_i64()
                    .is_some_and(|ts| ts < claimed_at + CLOCK_SLACK_MS);
                earlier.is_some_and(|e| {
                    outcome_unknown(e)
                        && done_before
                        && e.notes
                            .lease_until_ms
                            .is_some_and(|lease| lease < claimed_at + CLOCK_SLACK_MS)
                })
            })
        };
        if !at_most_once && claimed_at.is_some_and(explained_at) {
            verdict.reexecutions_after_unknown_outcome += 1;
            // Counted apart: judged by its condition's clock reading, it would have been a
            // double execution (the shape earlier soaks reported).
            if !this
                .and_then(|o| o.notes.claimed_at_ms)
                .is_some_and(explained_at)
            {
                verdict.reexecutions_claimed_by_a_late_write += 1;
            }
        } else {
            verdict.double_executions += 1;
            let finding = double_execution(session, &executions[..=i], writes);
            verdict.finding(finding);
        }
    }
}

/// The finding for the last of `executions`, a double execution: every execution up to it, and
/// the key's writes around them.
fn double_execution(session: &str, executions: &[Execution<'_>], writes: &[WriteSeen]) -> String {
    let (entry, _, claimed_at) = executions[executions.len() - 1];
    let history: Vec<String> = executions
        .iter()
        .map(|(e, o, took)| describe(e, *o, *took))
        .collect();
    let from = executions[0].1.and_then(|o| o.notes.claimed_at_ms);
    let until = claimed_at.map(|t| t + WRITES_SHOWN_AFTER_MS);
    let seen: Vec<String> = writes
        .iter()
        .filter(|w| from.is_none_or(|f| w.sent_ms >= f - WRITES_SHOWN_BEFORE_MS))
        .filter(|w| until.is_none_or(|u| w.sent_ms <= u))
        .map(WriteSeen::to_string)
        .collect();
    format!(
        "{session}: side effect #{} ({}) is a double execution; executions: {}; the key's \
         writes around them: {}",
        executions.len(),
        entry["receipt_id"],
        history.join(" | "),
        seen.join(" | ")
    )
}

/// Results: every answer from the stored result equals it, a result too large to store is
/// accounted for as such, and no completion is refused within its lease.
fn check_results(
    verdict: &mut Verdict,
    session: &str,
    observed: &[&Observed],
    store: &StoreSeen<'_>,
) {
    let record = store.record;
    let completed = record.filter(|r| r.status == Status::Completed);
    let stored = completed.and_then(|r| r.result.as_deref());
    let omitted = completed.and_then(|r| r.omitted_result_bytes);
    for o in observed {
        check_result(verdict, session, o, stored, omitted, store.answered_from);
    }
}

/// The results check of one invocation; `stored` and `omitted` are the completed record's.
fn check_result(
    verdict: &mut Verdict,
    session: &str,
    o: &Observed,
    stored: Option<&[u8]>,
    omitted: Option<usize>,
    answered_from: &dyn Fn(&[u8]) -> Option<String>,
) {
    let replayed = matches!(o.outcome, Some(Outcome::Replayed | Outcome::Waited));
    let executed_and_stored =
        o.outcome == Some(Outcome::Executed) && o.notes.completion == Some(Completion::Stored);
    if o.notes.completion == Some(Completion::ResultOmitted) {
        // Not stored by design: the record must say so, with this result's size.
        let told = o.notes.omitted_bytes;
        if omitted.is_some() && omitted == o.notes.result_bytes && told == omitted {
            verdict.results_omitted += 1;
        } else {
            verdict.lost_results += 1;
            verdict.finding(format!(
                "{session}: a completion reported its result omitted ({told:?} bytes; the \
                 result had {:?}), but the record's marker says {omitted:?} ({})",
                o.notes.result_bytes,
                describe_notes(o)
            ));
        }
    } else if replayed && omitted.is_some() {
        let notice = o
            .response
            .as_deref()
            .is_some_and(|r| r.contains(ALREADY_RAN));
        if notice {
            verdict.already_ran_answers += 1;
        } else {
            verdict.lost_results += 1;
            verdict.finding(format!(
                "{session}: a {:?} answer of a call stored without its result is not the \
                 \"already ran\" notice: {:?}",
                o.outcome, o.response
            ));
        }
    } else if o.notes.completion == Some(Completion::LeaseLost) {
        // The fence checks the token, not the lease: a completion sent within its lease whose
        // retries outlast it may meet a takeover, which the lease allowed.
        let late = match (o.notes.completion_returned_at_ms, o.notes.lease_until_ms) {
            (Some(refused), Some(lease)) => refused > lease,
            _ => false,
        };
        if late {
            verdict.late_completions_refused += 1;
        } else {
            verdict.lost_results += 1;
            verdict.finding(format!(
                "{session}: a completion was refused within its lease: the record was \
                 overwritten or deleted under its holder, and its result is lost ({})",
                describe_notes(o)
            ));
        }
    } else if replayed || executed_and_stored {
        // The answer is what the call's door writes from the stored result (a Bedrock reply
        // with the call's own session attributes).
        let same = match (stored.and_then(answered_from), &o.response) {
            (Some(expected), Some(answer)) => expected == *answer,
            _ => false,
        };
        if !same {
            verdict.lost_results += 1;
            verdict.finding(format!(
                "{session}: a {:?} answer differs from the stored result (stored: {})",
                o.outcome,
                stored.map_or("none".into(), |s| String::from_utf8_lossy(s).into_owned())
            ));
        }
    }
}

/// Claims whose every answer was lost: released by the store, or handed back and released by
/// the executor (the fault-free settling pass gives it calls to do that at), never left to
/// block the key for a whole lease.
fn check_lost_claims(verdict: &mut Verdict, session: &str, observed: &[&Observed]) {
    for o in observed {
        let left = match o.notes.lost_claim {
            Some(LostClaim::LeftHeld) => {
                "the store reported it released, yet it still held the key"
            }
            Some(LostClaim::HandedBack) => {
                "its token was handed back, and the executor never released it"
            }
            _ => continue,
        };
        verdict.stuck_claims += 1;
        verdict.finding(format!(
            "{session}: a claim whose answers were lost: {left} ({}; deadline {:?}; failed \
             releases: [{}]; later claims on the key handed back at {:?})",
            describe_notes(o),
            o.notes.deadline_ms,
            o.notes.orphan_releases.join("; "),
            o.notes.later_unconfirmed_on_key,
        ));
    }
}

/// The `Invoke` path: a claim is released exactly when the dispatcher's answer proves that the
/// tool never started (an invocation killed at its deadline may not have got to decide).
fn check_invoke_releases(verdict: &mut Verdict, session: &str, observed: &[&Observed]) {
    for o in observed.iter().filter(|o| o.killed.is_none()) {
        let Some(expected) = o.notes.invoke_release else {
            continue;
        };
        let released = o.notes.release_sent;
        if released {
            verdict.invoke_claims_released += 1;
        } else {
            verdict.invoke_claims_kept += 1;
        }
        if released != (expected == Some(true)) {
            verdict.claims_misjudged += 1;
            let (did, should) = if released {
                ("released", "the tool may have run")
            } else {
                ("kept", "the tool provably never started")
            };
            verdict.finding(format!(
                "{session}: {:?} ({}): the executor {did} the claim, but {should} ({})",
                o.attempt.fault,
                o.outcome.map_or("none", Outcome::name),
                describe_notes(o)
            ));
        }
    }
}

/// The executor could not know whether this execution happened or could not record it.
fn outcome_unknown(o: &Observed) -> bool {
    !matches!(
        o.notes.completion,
        Some(Completion::Stored | Completion::ResultOmitted)
    )
}

/// When `o`'s claim took the key: no earlier than its condition's clock reading, nor than the
/// proxy sent the claim write the server applied (a held or retried write applies late). `None`
/// if it did not claim.
fn took_key_at(o: &Observed, writes: &[WriteSeen]) -> Option<i64> {
    let claimed_at = o.notes.claimed_at_ms?;
    let token = o.notes.token.as_deref();
    let applied = writes
        .iter()
        .filter(|w| w.operation == "PutItem" && w.applied() && w.token.as_deref() == token)
        .map(|w| w.sent_ms)
        .min();
    Some(applied.map_or(claimed_at, |sent| sent.max(claimed_at)))
}

fn describe_notes(o: &Observed) -> String {
    format!(
        "token={} claimed_at={:?} lease_until={:?} completed_at={:?} completion_returned_at={:?} \
         outcome={:?} completion={:?}",
        o.notes.token.as_deref().unwrap_or("-"),
        o.notes.claimed_at_ms,
        o.notes.lease_until_ms,
        o.notes.completed_at_ms,
        o.notes.completion_returned_at_ms,
        o.outcome,
        o.notes.completion
    )
}

fn describe(entry: &Value, o: Option<&Observed>, took_key_at: Option<i64>) -> String {
    match o {
        Some(o) => format!(
            "{} took_key_at={took_key_at:?} {}",
            entry["receipt_id"],
            describe_notes(o)
        ),
        None => format!("{} (no invocation noted it)", entry["receipt_id"]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::attempt::ToolFault;
    use serde_json::json;

    /// An invocation that claimed at `claimed_at` (its condition's clock reading) with `token`,
    /// held the lease until `lease_until`, and did the effect `receipt` with no outcome recorded.
    fn killed_after_effect(
        claimed_at: i64,
        lease_until: i64,
        token: &str,
        receipt: &str,
    ) -> Observed {
        let notes = Notes {
            claimed_at_ms: Some(claimed_at),
            lease_until_ms: Some(lease_until),
            token: Some(token.to_string()),
            invoked: true,
            receipt_id: Some(receipt.to_string()),
            ..Notes::default()
        };
        Observed {
            call: 0,
            outcome: None,
            killed: Some("killed_by_fault"),
            response: None,
            key: Some("k".to_string()),
            notes,
            attempt: std::sync::Arc::new(Attempt::new(ToolFault::KillAfterEffect)),
            announced: false,
        }
    }

    fn claim_applied(token: &str, sent_ms: i64) -> WriteSeen {
        WriteSeen {
            operation: "PutItem".to_string(),
            token: Some(token.to_string()),
            condition_now_ms: None,
            sent_ms,
            answered: Some((sent_ms + 5, 200, String::new())),
            fault: None,
        }
    }

    /// The verdict on two executions: the first's lease ends at 2,000; the second's condition was
    /// written at 1,500 and its write was the one the server applied when sent at `applied_sent`.
    fn second_claim_applied_at(applied_sent: Option<i64>, at_most_once: bool) -> Verdict {
        let first = killed_after_effect(1_000, 2_000, "t1", "r1");
        let second = killed_after_effect(1_500, 6_000, "t2", "r2");
        let entries = [
            json!({"receipt_id": "r1", "ts_ms": 1_100}),
            json!({"receipt_id": "r2", "ts_ms": 2_300}),
        ];
        let mut writes = vec![claim_applied("t1", 1_001)];
        writes.extend(applied_sent.map(|sent| claim_applied("t2", sent)));
        let mut verdict = Verdict::default();
        check_call(
            &mut verdict,
            "s",
            &entries.iter().collect::<Vec<_>>(),
            &[&first, &second],
            2,
            at_most_once,
            &StoreSeen {
                record: None,
                writes: &writes,
                answered_from: &|_| None,
            },
        );
        verdict
    }

    #[test]
    fn a_claim_takes_the_key_when_its_write_applies_not_when_its_condition_was_written() {
        // Applied after the first lease ended: the allowed re-execution of an unknown outcome.
        let late = second_claim_applied_at(Some(2_100), false);
        assert_eq!(
            (
                late.double_executions,
                late.reexecutions_after_unknown_outcome,
                late.reexecutions_claimed_by_a_late_write
            ),
            (0, 1, 1),
            "{:?}",
            late.findings
        );
        // Applied inside the first lease, or with no applied write seen: a double execution,
        // reported with the key's writes.
        for early in [Some(1_600), None] {
            let verdict = second_claim_applied_at(early, false);
            assert_eq!(verdict.double_executions, 1, "{early:?}");
            let finding = &verdict.findings[0];
            assert!(finding.contains("PutItem tok=t1"), "{finding}");
        }
    }

    /// An `at_most_once` call has no at-least-once window: the same second execution, claimed
    /// after the first's lease ended, is a double execution.
    #[test]
    fn an_at_most_once_call_runs_at_most_once_even_after_an_unknown_outcome() {
        let allowed = second_claim_applied_at(Some(2_100), false);
        assert_eq!(allowed.double_executions, 0, "{:?}", allowed.findings);
        let strict = second_claim_applied_at(Some(2_100), true);
        assert_eq!(strict.double_executions, 1);
        assert_eq!(strict.reexecutions_after_unknown_outcome, 0);
    }
}
