//! The sweep (issue 51): an `at_most_once` claim whose lease ended unsettled (its invocation was
//! killed, or its interceptor RESPONSE never came) is a call whose outcome is unknown, yet nobody
//! announced it: only an invocation that settles a call announces it, and none does until a
//! repeat comes. A schedule invokes the function with [`is_sweep`]'s event; the sweep reads the
//! sparse attention index, settles each such claim as outcome unknown, fenced by the claim's own
//! token (a claim settled, released or taken meanwhile is left as it is), and reports each call it
//! settled, so each is announced once: by the one invocation whose settle write applied.

use serde_json::Value;

use crate::executor::unknown::take_and_settle;
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

/// A sweep starts on a record only with this much time left: one record's hand-over, settle and
/// announcement take a few store round trips and at most [`crate::announce::SEND_WITHIN`], and a
/// sweep cut off between a settle and its announcement leaves that call announced by nobody.
pub(crate) const RECORD_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Where a sweep announces each call it settles, as it settles it.
pub(crate) trait Announce {
    fn announce(&self, record: &Record) -> impl Future<Output = ()> + Send;
}

/// What one sweep found and did.
#[derive(Debug, Default)]
pub(crate) struct Swept {
    /// `at_most_once` claims past their lease (and the margin), unsettled.
    pub(crate) found: usize,
    /// The keys of those this sweep settled as outcome unknown: each announced, once.
    pub(crate) settled: Vec<String>,
    /// Found, left for the next sweep: this one ran out of time.
    pub(crate) left_for_next: usize,
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
/// Each call it settles is handed to `announce` at once, before the next is tried: a sweep cut
/// off by its deadline loses no announcement of a call it settled. It starts on a record only
/// while `has_time` says so.
pub(crate) async fn sweep<S: Records>(
    store: &S,
    announce: &impl Announce,
    has_time: impl Fn() -> bool,
) -> Result<Swept, StoreError> {
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
        if !has_time() {
            swept.left_for_next += 1;
            continue;
        }
        match settle_left(store, &record).await {
            Ok(()) => {
                // The line the runbook's "calls left unknown" query finds, as the executor's.
                tracing::warn!(
                    key = %record.key,
                    "an at_most_once claim whose owner never settled it is settled as outcome \
                     unknown by the sweep, until an operator settles it (dedup settle)"
                );
                announce.announce(&record).await;
                swept.settled.push(record.key);
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

/// Settles one claim the listing found left unsettled, as outcome unknown, taking it under a
/// token of its own first ([`take_and_settle`]): of two sweeps that listed the claim, only the one
/// whose hand-over applied goes on. (Settled under the holder's token, the second sweep's settle
/// met the first's as a retry would, succeeded, and the call was announced twice.)
async fn settle_left<S: Store>(store: &S, record: &Record) -> Result<(), StoreError> {
    take_and_settle(
        store,
        record,
        LeaseToken::random(),
        record.expires_at_s,
        None,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        ClaimOutcome, ClaimRequest, Clock, ManualClock, MemoryStore, SETTLE_MARGIN_MS,
    };

    /// The keys announced, in order.
    #[derive(Default)]
    struct Announced(std::sync::Mutex<Vec<String>>);

    impl Announced {
        fn keys(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Announce for Announced {
        async fn announce(&self, record: &Record) {
            self.0.lock().unwrap().push(record.key.clone());
        }
    }

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

    /// A hand-over or a settle that applied but whose answers were lost is read back: the same
    /// sweep settles the claim and reports it (so announces it), rather than leaving it under a
    /// token no one holds until the next sweep, or settled and announced by nobody (the next
    /// sweep no longer lists a settled claim).
    #[cfg(feature = "stand-ins")]
    #[tokio::test]
    async fn a_hand_over_or_settle_whose_answer_was_lost_still_settles_the_claim_once() {
        for lose_hand_over in [true, false] {
            let clock = ManualClock::starting_now();
            let store = crate::stand_ins::Faulty::new(MemoryStore::new().with_clock(clock.clone()));
            let lost = match lose_hand_over {
                true => &store.lose_hand_over_answers,
                false => &store.lose_settle_unknown_answers,
            };
            lost.store(1, std::sync::atomic::Ordering::SeqCst);
            let listed = left_unsettled(&store, &clock).await;
            let settled = settle_left(&store, &listed).await;
            assert!(
                settled.is_ok(),
                "hand-over lost {lose_hand_over}: {settled:?}"
            );
            let record = store.get(&listed.key).await.unwrap().unwrap();
            assert!(record.outcome_unknown && record.status == Status::Completed);
            assert!(matches!(
                settle_left(&store, &listed).await,
                Err(StoreError::LeaseLost)
            ));
        }
    }

    /// A settle that failed without applying is not reported; the claim, left under the first
    /// sweep's token, is the next sweep's, which settles it and reports it: announced once.
    #[cfg(feature = "stand-ins")]
    #[tokio::test]
    async fn a_settle_that_failed_is_left_to_the_next_sweep_which_announces_it_once() {
        let clock = ManualClock::starting_now();
        let store = crate::stand_ins::Faulty::new(MemoryStore::new().with_clock(clock.clone()));
        store
            .refuse_settle_unknown
            .store(1, std::sync::atomic::Ordering::SeqCst);
        left_unsettled(&store, &clock).await;
        let announced = Announced::default();
        let first = sweep(&store, &announced, || true).await.unwrap();
        assert_eq!((first.found, first.settled.len()), (1, 0));
        let second = sweep(&store, &announced, || true).await.unwrap();
        assert_eq!((second.found, second.settled.len()), (1, 1));
        let third = sweep(&store, &announced, || true).await.unwrap();
        assert_eq!(third.found, 0);
        assert_eq!(announced.keys(), ["0123456789abcdef0123456789abcdef"]);
    }

    /// A sweep out of time settles nothing more and says how many it left; the next one settles
    /// them. Each call it settles is announced before the next is tried.
    #[tokio::test]
    async fn a_sweep_out_of_time_leaves_the_rest_to_the_next() {
        let clock = ManualClock::starting_now();
        let store = MemoryStore::new().with_clock(clock.clone());
        left_unsettled(&store, &clock).await;
        let announced = Announced::default();
        let out_of_time = sweep(&store, &announced, || false).await.unwrap();
        assert_eq!(
            (
                out_of_time.found,
                out_of_time.settled.len(),
                out_of_time.left_for_next
            ),
            (1, 0, 1)
        );
        let next = sweep(&store, &announced, || true).await.unwrap();
        assert_eq!((next.settled.len(), next.left_for_next), (1, 0));
        assert_eq!(announced.keys().len(), 1);
    }

    /// A holder that renewed its lease after the sweep listed its claim (its renewals failed
    /// past the lease and the margin, then one came through) is alive: the sweep's stale
    /// listing takes nothing from it and sets no lease back.
    #[tokio::test]
    async fn a_claim_renewed_after_the_listing_is_left_to_its_holder() {
        let clock = ManualClock::starting_now();
        let store = MemoryStore::new().with_clock(clock.clone());
        let listed = left_unsettled(&store, &clock).await;
        let renewed = clock.now_ms() + 30_000;
        store
            .extend_lease(&listed.key, &listed.token, renewed, listed.expires_at_s)
            .await
            .unwrap();
        let settled = settle_left(&store, &listed).await;
        assert!(matches!(settled, Err(StoreError::LeaseLost)), "{settled:?}");
        let record = store.get(&listed.key).await.unwrap().unwrap();
        assert_eq!(record.status, Status::InProgress);
        assert_eq!(
            (record.token, record.lease_until_ms),
            (listed.token, renewed)
        );
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
