//! Attacks on stop 61's fence: `Store::hand_over` refused unless the claim still has the token
//! *and the lease* it was read with (memory: equality; DynamoDB: `#lease = :read_lease`), and the
//! interceptor RESPONSE that takes the claim under a fresh token of the request's
//! (`LeaseToken::for_owner`) before settling it as outcome unknown. Each suspicion is one test: a
//! legitimate hand-over refused (a REQUEST re-invocation resuming its own claim, a lost answer
//! retried by the DynamoDB store's own loop), the RESPONSE's new token met later (a second
//! RESPONSE, the sweep, a REQUEST sent again), side-by-side `at_least_once` RESPONSEs, and the lease
//! equality on the DynamoDB-compatible servers (numbers stored as N).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Handled, Invocation};
use toolcall_dedup::store::{ManualClock, MemoryStore, Records, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::fixture::{policies, swept_keys};
use crate::gateway::{self, container, failed_response, send_as};
use crate::servers::{self, Backend, Faulty};

const TOOL: &str = "payments___charge_card";

fn at_most_once() -> Config {
    policies(json!({"tools": {TOOL: {"delivery": "at_most_once"}}}))
}

/// A `tools/call` REQUEST of the charge tool in session `s-1`.
fn request(id: u64) -> Value {
    gateway::request(
        TOOL,
        Some("s-1"),
        id,
        json!({"customer_id": "cus_1", "amount": 4200, "currency": "USD"}),
    )
}

fn answer(h: &Handled) -> Value {
    serde_json::from_str(h.response.as_ref().expect("an answer").get()).unwrap()
}

/// Loses the first `times` answers of the hand-overs the DynamoDB store sends (an `UpdateItem`
/// carrying `:read_lease`), after the server applied them: the store's retry loop sends the same
/// request again, whose condition then meets the token it just wrote.
#[derive(Debug)]
struct LoseHandOverAnswers {
    times: AtomicU32,
    lost: AtomicU32,
    /// Whether the request in flight is a hand-over (set before it is sent).
    in_flight: Mutex<bool>,
}

impl LoseHandOverAnswers {
    fn new(times: u32) -> Arc<Self> {
        Arc::new(LoseHandOverAnswers {
            times: AtomicU32::new(times),
            lost: AtomicU32::new(0),
            in_flight: Mutex::new(false),
        })
    }
}

#[derive(Debug, Clone)]
struct Shared(Arc<LoseHandOverAnswers>);

impl Intercept for Shared {
    fn name(&self) -> &'static str {
        "fence_attacks::LoseHandOverAnswers"
    }

    fn read_before_transmit(
        &self,
        ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = ctx.request().body().bytes().unwrap_or_default();
        let hand_over = String::from_utf8_lossy(body).contains(":read_lease");
        *self.0.in_flight.lock().unwrap() = hand_over;
        Ok(())
    }

    fn read_after_transmit(
        &self,
        _ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let hand_over = std::mem::take(&mut *self.0.in_flight.lock().unwrap());
        let take = self
            .0
            .times
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if hand_over && take {
            self.0.lost.fetch_add(1, Ordering::SeqCst);
            return Err("injected fault: the hand-over's answer was lost".into());
        }
        if !hand_over && take {
            // Not a hand-over: give the count back.
            self.0.times.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

async fn dynamodb(backend: Backend, clock: ManualClock) -> toolcall_dedup::store::DynamoDbStore {
    servers::dynamodb_store(backend, clock).await
}

async fn dynamodb_losing(
    backend: Backend,
    clock: ManualClock,
    lose: &Arc<LoseHandOverAnswers>,
) -> toolcall_dedup::store::DynamoDbStore {
    servers::dynamodb_store_with(
        backend,
        clock,
        servers::config(),
        vec![servers::with_interceptor(Shared(lose.clone()))],
    )
    .await
}

// --- Suspicion 1: the lease fence refuses a REQUEST re-invocation resuming its own claim. ---

/// The Gateway invokes the REQUEST interceptor again for one request (`REQUEST_ID` req-7) in
/// another container: the second resumes the first's claim (a hand-over fenced by the lease the
/// claim came back with), lets the call through, and its RESPONSE settles that claim, announced
/// once. On the DynamoDB servers the lease read back from the claim's answer (moto: the old item
/// of the failed put; dynalite: a read) must compare equal to the stored N.
async fn a_request_sent_again_resumes_its_own_claim<S: Store + Clone + Records>(store: S) {
    let once = at_most_once();
    let (a, b) = (
        container(store.clone(), &once),
        container(store.clone(), &once),
    );
    let first = request(7);
    let one = send_as(&a, &first, "req-7").await;
    assert_eq!(one.outcome, Outcome::Executed, "{one:?}");
    let key = one.key.clone().unwrap();
    let claimed = store.get(&key).await.unwrap().unwrap();

    let two = send_as(&b, &first, "req-7").await;
    assert_eq!(
        two.outcome,
        Outcome::Executed,
        "the REQUEST sent again resumes its own claim and lets the call through: {two:?}"
    );
    let resumed = store.get(&key).await.unwrap().unwrap();
    assert_eq!(resumed.status, Status::InProgress);
    assert_ne!(resumed.token, claimed.token, "handed over to a fresh token");
    assert_eq!(resumed.token.owner(), claimed.token.owner());

    // Sent a third time: the lease it reads now is the resumed one; it resumes again.
    let three = send_as(&a, &first, "req-7").await;
    assert_eq!(three.outcome, Outcome::Executed, "{three:?}");

    let settled = send_as(&b, &failed_response(&first), "req-7").await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        record.status == Status::Completed && record.outcome_unknown,
        "{record:?}"
    );
    assert_eq!(settled.settled_unknown, vec![key.clone()], "{settled:?}");
    let (swept, by_sweep) = swept_keys(&a, &Invocation::default()).await;
    assert!(by_sweep.is_empty(), "announced once: {swept}");
    let again = send_as(&a, &request(8), "req-8").await;
    assert_eq!(again.outcome, Outcome::Unknown, "{again:?}");
}

#[tokio::test]
async fn a_request_sent_again_resumes_its_own_claim_on_memory() {
    a_request_sent_again_resumes_its_own_claim(MemoryStore::new()).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_request_sent_again_resumes_its_own_claim_on_moto() {
    let store = dynamodb(Backend::Moto, ManualClock::starting_now()).await;
    a_request_sent_again_resumes_its_own_claim(store).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_request_sent_again_resumes_its_own_claim_on_dynalite() {
    let store = dynamodb(Backend::Dynalite, ManualClock::starting_now()).await;
    a_request_sent_again_resumes_its_own_claim(store).await;
}

// --- Suspicion 2: the lease equality never matches on the DynamoDB servers' listings. ---

/// The sweep lists a claim left unsettled (from the attention index), and hands it over fenced by
/// the listed lease: the N it decoded from the listing must equal the stored one, or the sweep
/// never settles anything (it takes `LeaseLost` as "someone else did", silently).
async fn the_sweep_settles_a_listed_claim<S: Store + Clone + Records>(
    store: S,
    clock: ManualClock,
) {
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let claimed = send_as(&h, &request(7), "req-7").await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.unwrap();
    clock.advance(Duration::from_secs(3_600));
    let (swept, keys) = swept_keys(&h, &Invocation::default()).await;
    assert_eq!(keys, vec![key.clone()], "{swept}");
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    let (again, none) = swept_keys(&h, &Invocation::default()).await;
    assert!(none.is_empty(), "{again}");
}

#[tokio::test]
async fn the_sweep_settles_a_listed_claim_on_memory() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::new().with_clock(clock.clone());
    the_sweep_settles_a_listed_claim(store, clock).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn the_sweep_settles_a_listed_claim_on_moto() {
    let clock = ManualClock::starting_now();
    let store = dynamodb(Backend::Moto, clock.clone()).await;
    the_sweep_settles_a_listed_claim(store, clock).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn the_sweep_settles_a_listed_claim_on_dynalite() {
    let clock = ManualClock::starting_now();
    let store = dynamodb(Backend::Dynalite, clock.clone()).await;
    the_sweep_settles_a_listed_claim(store, clock).await;
}

// --- Suspicion 3: a hand-over retried by the DynamoDB store's own loop after a lost answer. ---

/// A REQUEST sent again resumes its claim; the hand-over applies, its answer is lost, and the
/// store's retry meets its own new token (`LeaseLost`). The executor claims again, finds the claim
/// still its request's (under the token it just wrote) and resumes that: the call goes through,
/// and the RESPONSE settles the claim.
async fn a_resume_whose_hand_over_answer_was_lost_goes_on(backend: Backend) {
    let clock = ManualClock::starting_now();
    let lose = LoseHandOverAnswers::new(0);
    let store = dynamodb_losing(backend, clock, &lose).await;
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    lose.times.store(1, Ordering::SeqCst);
    let two = send_as(&h, &first, "req-7").await;
    assert_eq!(lose.lost.load(Ordering::SeqCst), 1, "the answer was lost");
    assert_eq!(two.outcome, Outcome::Executed, "{backend:?}: {two:?}");
    let settled = send_as(&h, &failed_response(&first), "req-7").await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        record.status == Status::Completed && record.outcome_unknown,
        "{backend:?}: {record:?}"
    );
    assert_eq!(settled.settled_unknown, vec![key], "{settled:?}");
}

/// A RESPONSE settling a call as outcome unknown takes the claim first; that hand-over applies,
/// its answer is lost, and the store's retry meets the RESPONSE's own token (`LeaseLost`). The
/// read-back must find the token its own, settle and announce once.
async fn a_response_whose_hand_over_answer_was_lost_settles_once(backend: Backend) {
    let clock = ManualClock::starting_now();
    let lose = LoseHandOverAnswers::new(0);
    let store = dynamodb_losing(backend, clock.clone(), &lose).await;
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    lose.times.store(1, Ordering::SeqCst);
    let settled = send_as(&h, &failed_response(&first), "req-7").await;
    assert_eq!(lose.lost.load(Ordering::SeqCst), 1, "the answer was lost");
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        record.status == Status::Completed && record.outcome_unknown,
        "{backend:?}: {record:?}"
    );
    clock.advance(Duration::from_secs(3_600));
    let (_, by_sweep) = swept_keys(&h, &Invocation::default()).await;
    let mut announced = settled.settled_unknown.clone();
    announced.extend(by_sweep);
    assert_eq!(announced, vec![key], "{backend:?}: {settled:?}");
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_resume_whose_hand_over_answer_was_lost_goes_on_on_moto() {
    a_resume_whose_hand_over_answer_was_lost_goes_on(Backend::Moto).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_resume_whose_hand_over_answer_was_lost_goes_on_on_dynalite() {
    a_resume_whose_hand_over_answer_was_lost_goes_on(Backend::Dynalite).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_response_whose_hand_over_answer_was_lost_settles_once_on_moto() {
    a_response_whose_hand_over_answer_was_lost_settles_once(Backend::Moto).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn a_response_whose_hand_over_answer_was_lost_settles_once_on_dynalite() {
    a_response_whose_hand_over_answer_was_lost_settles_once(Backend::Dynalite).await;
}

/// The memory store's stand-in for the same loss (`Faulty::lose_hand_over_answers`: applied, then
/// `Unavailable`) on a REQUEST's resume: the request is refused (store down) rather than let
/// through, the new token is remembered as an orphan, and the request sent once more goes through
/// (nothing ran under the orphaned token; it is not left blocking the request).
#[tokio::test]
async fn a_resume_whose_hand_over_answer_was_lost_on_memory_lets_the_next_invocation_through() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    store.lose_hand_over_answers.store(1, Ordering::SeqCst);
    let two = send_as(&h, &first, "req-7").await;
    assert_ne!(two.outcome, Outcome::Executed, "{two:?}");
    let three = send_as(&h, &first, "req-7").await;
    assert_eq!(three.outcome, Outcome::Executed, "{three:?}");
    let settled = send_as(&h, &failed_response(&first), "req-7").await;
    assert_eq!(settled.settled_unknown, vec![key.clone()], "{settled:?}");
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
}

// --- Suspicion 4: the RESPONSE's fresh token (`for_owner`) met later. ---

/// A RESPONSE whose hand-over applied but whose settle was refused leaves the claim in progress
/// under the RESPONSE's token. The Gateway's second RESPONSE for the request (a retry) must still
/// recognise the claim as its request's (`LeaseToken::owner`), settle it and announce it, once.
#[tokio::test]
async fn a_second_response_settles_a_claim_the_first_took_but_could_not_settle() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let once = at_most_once();
    let (a, b) = (
        container(store.clone(), &once),
        container(store.clone(), &once),
    );
    let first = request(7);
    let key = send_as(&a, &first, "req-7").await.key.unwrap();
    let claimed = store.get(&key).await.unwrap().unwrap();
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let failed = failed_response(&first);
    let one = send_as(&a, &failed, "req-7").await;
    assert!(
        one.settled_unknown.is_empty(),
        "refused, read back: {one:?}"
    );
    let taken = store.get(&key).await.unwrap().unwrap();
    assert_eq!(taken.status, Status::InProgress, "{taken:?}");
    assert_ne!(taken.token, claimed.token, "taken by the RESPONSE");
    assert_eq!(taken.token.owner(), claimed.token.owner());
    assert_eq!(
        taken.lease_until_ms, claimed.lease_until_ms,
        "the lease is not moved"
    );

    let two = send_as(&b, &failed, "req-7").await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(
        record.status == Status::Completed && record.outcome_unknown,
        "{record:?}"
    );
    let mut announced = one.settled_unknown.clone();
    announced.extend(two.settled_unknown.clone());
    assert_eq!(announced, vec![key], "{one:?} / {two:?}");
}

/// The same refused settle and no second RESPONSE: the claim, under the RESPONSE's token, still
/// ends with its lease (not moved by the hand-over), and the sweep settles and announces it.
#[tokio::test]
async fn a_claim_a_response_took_but_could_not_settle_is_swept_once_its_lease_ends() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let one = send_as(&h, &failed_response(&first), "req-7").await;
    assert!(one.settled_unknown.is_empty(), "{one:?}");
    let (early, none) = swept_keys(&h, &Invocation::default()).await;
    assert!(none.is_empty(), "the lease has not ended: {early}");
    clock.advance(Duration::from_secs(3_600));
    let (swept, keys) = swept_keys(&h, &Invocation::default()).await;
    assert_eq!(keys, vec![key.clone()], "{swept}");
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    let retry = send_as(&h, &request(8), "req-8").await;
    assert_eq!(retry.outcome, Outcome::Unknown, "{retry:?}");
}

/// The same refused settle, then the REQUEST of the same request (`REQUEST_ID` req-7) arrives
/// again (a duplicate invocation delivered late, after the target ran and its RESPONSE came). The
/// claim is in progress under a token of the request's owner, its lease live: `decide` takes it
/// for the request's own claim and resumes it, letting the Gateway call an at_most_once target a
/// second time.
// Broke before the fix (and before this stop: the claim under the REQUEST's own token matched the
// owner too): the late REQUEST resumed the claim and let the at_most_once call through again. The
// RESPONSE now takes the claim under a settling token (`LeaseToken::settling_for`), which the
// owner still names and no REQUEST resumes.
#[tokio::test]
async fn a_request_sent_again_after_a_response_took_the_claim_does_not_let_the_call_through() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let one = send_as(&h, &failed_response(&first), "req-7").await;
    assert!(one.settled_unknown.is_empty(), "{one:?}");
    let late = send_as(&h, &first, "req-7").await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert_ne!(
        late.outcome,
        Outcome::Executed,
        "an at_most_once call whose RESPONSE was seen is let through again: {late:?}; {record:?}"
    );
}

/// Without the failed settle: the REQUEST arriving after its RESPONSE settled the call finds it
/// settled as outcome unknown, and lets nothing through.
#[tokio::test]
async fn a_request_sent_again_after_its_response_settled_the_call_is_answered_unknown() {
    let store = MemoryStore::new();
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    send_as(&h, &first, "req-7").await;
    let one = send_as(&h, &failed_response(&first), "req-7").await;
    assert_eq!(one.settled_unknown.len(), 1, "{one:?}");
    let late = send_as(&h, &first, "req-7").await;
    assert_eq!(late.outcome, Outcome::Unknown, "{late:?}");
    assert!(late.settled_unknown.is_empty(), "{late:?}");
}

/// A RESPONSE of *another* request (req-9, same arguments: an identical call) meets the claim a
/// RESPONSE of req-7 took under its fresh token: the owner differs, so it settles nothing and
/// announces nothing; req-7's own RESPONSE settles it.
#[tokio::test]
async fn another_requests_response_never_settles_a_claim_taken_under_a_fresh_token() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let once = at_most_once();
    let h = container(store.clone(), &once);
    let first = request(7);
    let key = send_as(&h, &first, "req-7").await.key.unwrap();
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    send_as(&h, &failed_response(&first), "req-7").await;
    let other = send_as(&h, &failed_response(&first), "req-9").await;
    assert!(other.settled_unknown.is_empty(), "{other:?}");
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress, "{record:?}");
    let own = send_as(&h, &failed_response(&first), "req-7").await;
    assert_eq!(own.settled_unknown, vec![key], "{own:?}");
}

/// A RESPONSE arriving after the claim's lease ended (a slow target) and the sweep racing it:
/// whichever settles first announces; the other finds the call settled. Sweep first, then the
/// RESPONSE; and the RESPONSE first, then the sweep.
#[tokio::test]
async fn a_late_response_and_the_sweep_announce_the_call_once_in_either_order() {
    for sweep_first in [true, false] {
        let clock = ManualClock::starting_now();
        let store = MemoryStore::new().with_clock(clock.clone());
        let once = at_most_once();
        let h = container(store.clone(), &once);
        let first = request(7);
        let key = send_as(&h, &first, "req-7").await.key.unwrap();
        clock.advance(Duration::from_secs(3_600));
        let mut announced = Vec::new();
        if sweep_first {
            announced.extend(swept_keys(&h, &Invocation::default()).await.1);
        }
        let response = send_as(&h, &failed_response(&first), "req-7").await;
        announced.extend(response.settled_unknown.clone());
        if !sweep_first {
            announced.extend(swept_keys(&h, &Invocation::default()).await.1);
        }
        assert_eq!(
            announced,
            vec![key.clone()],
            "sweep first: {sweep_first}; {response:?}"
        );
    }
}

// --- Suspicion 5: at_least_once RESPONSEs (complete) side by side. ---

/// The Gateway sends the RESPONSE of an at_least_once call twice, side by side: both read the
/// claim before either completes it under the REQUEST's token. One result is stored, both pass the
/// target's answer on unchanged, nothing is announced, and a retry replays the stored result.
#[tokio::test]
async fn two_at_least_once_responses_side_by_side_store_one_result_and_both_pass_it_on() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let config = Config::default();
    let (a, b) = (
        container(store.clone(), &config),
        container(store.clone(), &config),
    );
    let first = request(7);
    let claimed = send_as(&a, &first, "req-7").await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.unwrap();
    *store.gets_meet.lock().unwrap() = Some((Arc::new(tokio::sync::Barrier::new(2)), 2));
    let done = gateway::response(&first, "charged 42.00 USD");
    let (one, two) = tokio::join!(send_as(&a, &done, "req-7"), send_as(&b, &done, "req-7"));
    assert_eq!(
        store.gets_meet.lock().unwrap().as_ref().map(|(_, l)| *l),
        Some(0),
        "both read the claim first"
    );
    let target_body = done["mcp"]["gatewayResponse"]["body"].clone();
    for r in [&one, &two] {
        assert_eq!(r.outcome, Outcome::Executed, "{r:?}");
        assert!(r.settled_unknown.is_empty(), "{r:?}");
        assert_eq!(
            answer(r)["mcp"]["transformedGatewayResponse"]["body"],
            target_body,
            "{r:?}"
        );
    }
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Completed, "{record:?}");
    assert!(!record.outcome_unknown);
    let retry = send_as(&b, &request(8), "req-8").await;
    assert_eq!(retry.outcome, Outcome::Replayed, "{retry:?}");
    let replayed = answer(&retry)["mcp"]["transformedGatewayResponse"]["body"].clone();
    assert_eq!(replayed["id"], 8);
    assert_eq!(
        replayed["result"]["content"], target_body["result"]["content"],
        "{replayed}"
    );
}

/// Two at_most_once RESPONSEs side by side where the first's settle is refused after its
/// hand-over applied: the second read the claim under the REQUEST's token, so its hand-over is
/// refused (`LeaseLost`, nothing announced) and the claim waits for the sweep under the first
/// RESPONSE's token. Announced once in all: by the sweep.
#[tokio::test]
async fn side_by_side_responses_with_a_refused_settle_leave_the_call_to_the_sweep_once() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    let once = at_most_once();
    let (a, b) = (
        container(store.clone(), &once),
        container(store.clone(), &once),
    );
    let first = request(7);
    let key = send_as(&a, &first, "req-7").await.key.unwrap();
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    *store.gets_meet.lock().unwrap() = Some((Arc::new(tokio::sync::Barrier::new(2)), 2));
    let failed = failed_response(&first);
    let (one, two) = tokio::join!(send_as(&a, &failed, "req-7"), send_as(&b, &failed, "req-7"));
    let mut announced: Vec<String> = [&one, &two]
        .into_iter()
        .flat_map(|h| h.settled_unknown.clone())
        .collect();
    clock.advance(Duration::from_secs(3_600));
    announced.extend(swept_keys(&a, &Invocation::default()).await.1);
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    assert_eq!(announced, vec![key], "{one:?} / {two:?}");
}
