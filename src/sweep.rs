//! The sweep (issue 51): an `at_most_once` claim whose lease ended unsettled (its invocation was
//! killed, or its interceptor RESPONSE never came) is a call whose outcome is unknown, yet nobody
//! announced it: only an invocation that settles a call announces it, and none does until a
//! repeat comes. A schedule invokes the function with [`is_sweep`]'s event; the sweep reads the
//! sparse attention index, settles each such claim as outcome unknown, fenced by the claim's own
//! token (a claim settled, released or taken meanwhile is left as it is), and reports each call it
//! settled, so each is announced once: by the one invocation whose settle write applied.

use serde_json::Value;

use crate::store::{
    LeaseToken, Record, RecordFilter, RecordState, Records, Status, Store, StoreError,
    is_not_a_call,
};

/// The scheduled event's one member: `{"toolcall-dedup": "sweep"}` (the SAM and CDK stacks' rule
/// sends it every five minutes). Nothing else has it: no door reads a member of that name.
pub(crate) const SWEEP_MEMBER: &str = "toolcall-dedup";

/// How many records one sweep reads from the attention index at most; the next sweep goes on.
const SWEEP_LIMIT: usize = 500;

/// Whether `event` asks for a sweep.
pub(crate) fn is_sweep(event: &Value) -> bool {
    event.get(SWEEP_MEMBER).and_then(Value::as_str) == Some("sweep")
}

/// What one sweep found and did.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// `at_most_once` claims past their lease (and the margin), unsettled.
    pub(crate) found: usize,
    /// Those this sweep settled as outcome unknown: each to announce, once.
    pub(crate) settled: Vec<Record>,
}

/// Whether the sweep settles `record` at `now_ms`: an `at_most_once` claim still in progress that
/// an operator could settle ([`Record::is_settleable`]). The listing it came from may be stale by
/// the time the settle is written; the settle's token fence is what makes that safe.
pub fn is_left_unsettled(record: &Record, now_ms: i64) -> bool {
    record.status == Status::InProgress
        && record.at_most_once
        && !is_not_a_call(&record.key)
        && record.is_settleable(now_ms)
}

/// Settles as outcome unknown every `at_most_once` claim an operator could settle: its lease
/// ended more than the clock margin ago ([`Record::is_settleable`], what `dedup settle` keeps).
pub(crate) async fn sweep<S: Records>(store: &S) -> Result<Swept, StoreError> {
    let now_ms = store.now_ms();
    let filter = RecordFilter {
        state: Some(RecordState::Unknown),
        // Settled outcomes are not the sweep's: however many, they must not crowd a claim out.
        claims_only: true,
        limit: SWEEP_LIMIT,
        ..RecordFilter::default()
    };
    let mut swept = Swept::default();
    for record in store.list(&filter).await? {
        if !is_left_unsettled(&record, now_ms) {
            continue;
        }
        swept.found += 1;
        match settle_left(store, &record).await {
            Ok(()) => {
                // The line the runbook's "calls left unknown" query finds, as the executor's.
                tracing::warn!(
                    key = %record.key,
                    "an at_most_once claim whose owner never settled it is settled as outcome \
                     unknown by the sweep, until an operator settles it (dedup settle)"
                );
                swept.settled.push(record);
            }
            // Settled, released or taken over meanwhile: whoever did it answers for it.
            Err(StoreError::LeaseLost) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the sweep could not settle a claim; the next sweep tries again")
            }
        }
    }
    Ok(swept)
}

/// Settles one claim the listing found left unsettled, as outcome unknown. The sweep first takes
/// the claim under a token of its own, then settles under that token: of two sweeps that listed
/// the claim, only the one whose hand-over applied goes on, and its settle, retried after a lost
/// answer or not, is its own. (Settled under the holder's token, the second sweep's settle met
/// the first's as a retry would, succeeded, and the call was announced twice.) A hand-over whose
/// answers were lost (its retry refused, or the store unreachable) is read back: if it applied,
/// the sweep goes on under its token, so the claim is not left under a token nobody settles.
async fn settle_left<S: Store>(store: &S, record: &Record) -> Result<(), StoreError> {
    let mine = LeaseToken::random();
    let handed = store
        .hand_over(
            &record.key,
            &record.token,
            &mine,
            record.lease_until_ms,
            record.expires_at_s,
        )
        .await;
    if let Err(e) = handed {
        let applied = matches!(
            store.get(&record.key).await,
            Ok(Some(now)) if now.token == mine && now.status == Status::InProgress
        );
        if !applied {
            return Err(e);
        }
    }
    store
        .settle_unknown(&record.key, &mine, record.expires_at_s)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        ClaimOutcome, ClaimRequest, Clock, ManualClock, MemoryStore, SETTLE_MARGIN_MS,
    };

    /// An `at_most_once` claim on `store`, left unsettled past its lease and the settle margin, as
    /// a sweep lists it.
    async fn left_unsettled<S: Store>(store: &S, clock: &ManualClock) -> Record {
        let now = clock.now_ms();
        let claimed = store
            .claim(ClaimRequest {
                key: "0123456789abcdef0123456789abcdef",
                fingerprint: "f",
                tool: "refund",
                lease_until_ms: now + 1_000,
                expires_at_s: now / 1000 + 86_400,
                owner: None,
                at_most_once: true,
                on_failure: Default::default(),
                path_digests: None,
                about: Default::default(),
            })
            .await
            .unwrap();
        assert!(matches!(claimed, ClaimOutcome::Claimed { .. }));
        clock.advance_ms(1_000 + SETTLE_MARGIN_MS + 1);
        let listed = store
            .get("0123456789abcdef0123456789abcdef")
            .await
            .unwrap()
            .unwrap();
        assert!(is_left_unsettled(&listed, clock.now_ms()));
        listed
    }

    /// A hand-over that applied but whose answers were lost is read back: the same sweep settles
    /// the claim, rather than leaving it under a token no one holds until the next sweep.
    #[cfg(feature = "stand-ins")]
    #[tokio::test]
    async fn a_hand_over_whose_answer_was_lost_still_settles_the_claim() {
        let clock = ManualClock::starting_now();
        let store = crate::stand_ins::Faulty::new(MemoryStore::new().with_clock(clock.clone()));
        store
            .lose_hand_over_answers
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let listed = left_unsettled(&store, &clock).await;
        let settled = settle_left(&store, &listed).await;
        assert!(settled.is_ok(), "{settled:?}");
        let record = store.get(&listed.key).await.unwrap().unwrap();
        assert!(record.outcome_unknown && record.status == Status::Completed);
        assert!(matches!(
            settle_left(&store, &listed).await,
            Err(StoreError::LeaseLost)
        ));
    }

    /// Two sweeps that listed one claim left unsettled (two containers' schedules, or a retried
    /// scheduled invocation) settle it once between them: only one reports it, so it is announced
    /// once.
    #[tokio::test]
    async fn of_two_sweeps_that_listed_one_claim_only_one_settles_it() {
        let clock = ManualClock::starting_now();
        let store = MemoryStore::new().with_clock(clock.clone());
        let listed = left_unsettled(&store, &clock).await;
        let first = settle_left(&store, &listed).await;
        let second = settle_left(&store, &listed).await;
        assert!(first.is_ok(), "{first:?}");
        assert!(matches!(second, Err(StoreError::LeaseLost)), "{second:?}");
        let settled = store.get(&listed.key).await.unwrap().unwrap();
        assert!(settled.outcome_unknown && settled.status == Status::Completed);
    }
}
