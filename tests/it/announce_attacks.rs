//! Attacks on stop 61's promise: every call settled as outcome unknown is announced exactly once,
//! by the invocation whose write settled it or by the sweep, never by an invocation that did not
//! settle it. An invocation announces each key of `Handled::settled_unknown`
//! (`Handler::handle_with_context`); the sweep announces each key of its answer's `settled_keys`.
//! The tests read those two, which is what reaches the event bus.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::store::{ManualClock, MemoryStore, Status, Store};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

use crate::fixture::{Act, Scripted, event, policies, send, swept_keys};
use crate::gateway::{self, container, failed_response, send_as};
use crate::servers::Faulty;

const TOOL: &str = "payments___charge_card";

/// The Bedrock fixture's `charge_card`, `at_most_once`.
fn charge_card_at_most_once() -> Config {
    policies(json!({"tools": {"charge_card": {"delivery": "at_most_once"}}}))
}

fn charge(amount: Value) -> Value {
    json!({"customer_id": "cus_1", "amount": amount, "currency": "USD"})
}

/// A `tools/call` REQUEST of the charge tool in session `s-1`.
fn request(id: u64) -> Value {
    gateway::request(TOOL, Some("s-1"), id, charge(json!(4200)))
}

/// The keys an invocation announces.
fn announced_by(h: &Handled) -> Vec<String> {
    h.settled_unknown.clone()
}

/// The claims an at_most_once REQUEST made in two containers whose configurations key the call
/// differently (a policy change between the Gateway's two invocations of one REQUEST): one
/// request's note holds both claims, and its RESPONSE settles both.
async fn two_claims_of_one_request(
    before: &Config,
    after: &Config,
) -> (
    MemoryStore,
    Handler<MemoryStore, impl Dispatcher + use<>>,
    String,
    String,
) {
    let store = MemoryStore::new();
    let (a, b) = (
        container(store.clone(), before),
        container(store.clone(), after),
    );
    let first = request(7);
    let one = send_as(&a, &first, "req-7").await;
    assert_eq!(one.outcome, Outcome::Executed, "{one:?}");
    let two = send_as(&b, &first, "req-7").await;
    assert_eq!(two.outcome, Outcome::Executed, "{two:?}");
    let (k1, k2) = (one.key.expect("keyed"), two.key.expect("keyed"));
    assert_ne!(k1, k2, "the two configurations key the call differently");
    (store, b, k1, k2)
}

/// Suspicion: the interceptor's RESPONSE settles every claim its request noted, each through
/// `settle_unknown` inside one `counted` scope, but the invocation announces one key: a second
/// claim settled as outcome unknown by the same RESPONSE is announced by nobody (settled, the
/// sweep no longer lists it).
// Broke before the fix: the RESPONSE settled both, announced only the first noted key (a count
// collapsed to one flag and the answer's one key). Each settled call is now noted by key.
#[tokio::test]
async fn a_response_settling_two_noted_claims_announces_both() {
    let once = json!({"delivery": "at_most_once"});
    let before = policies(json!({"tools": {TOOL: once}}));
    let after =
        policies(json!({"tools": {TOOL: {"delivery": "at_most_once", "key_fields": ["amount"]}}}));
    let (store, b, k1, k2) = two_claims_of_one_request(&before, &after).await;

    let settled = send_as(&b, &failed_response(&request(7)), "req-7").await;
    for key in [&k1, &k2] {
        let record = store.get(key).await.unwrap().unwrap();
        assert!(
            record.status == Status::Completed && record.outcome_unknown,
            "{record:?}"
        );
    }
    let mut announced: Vec<String> = announced_by(&settled).into_iter().collect();
    let h = container(store.clone(), &after);
    let (swept, by_sweep) = swept_keys(&h, &Invocation::default()).await;
    announced.extend(by_sweep);
    announced.sort();
    let mut expected = vec![k1, k2];
    expected.sort();
    assert_eq!(
        announced, expected,
        "each call settled as outcome unknown is announced once (RESPONSE: {settled:?}; sweep: {swept})"
    );
}

/// Suspicion: of two noted claims, only the second is `at_most_once` (the policy making the tool
/// at_most_once came with the re-keying). The RESPONSE settles that one as outcome unknown and
/// keeps the other; the answer it keeps is the first claim's, so the announcement names a call
/// this invocation did not settle as outcome unknown.
// Broke before the fix: the announcement named k1 (kept, not settled as unknown), and k2 was
// announced by nobody. The announcement now names the calls noted as settled, not the answer's key.
#[tokio::test]
async fn a_response_announces_the_claim_it_settled_as_unknown_not_another() {
    let before = Config::default();
    let after =
        policies(json!({"tools": {TOOL: {"delivery": "at_most_once", "key_fields": ["amount"]}}}));
    let (store, b, k1, k2) = two_claims_of_one_request(&before, &after).await;

    let settled = send_as(&b, &failed_response(&request(7)), "req-7").await;
    let second = store.get(&k2).await.unwrap().unwrap();
    assert!(second.outcome_unknown, "{second:?}");
    let first = store.get(&k1).await.unwrap();
    assert!(
        first.as_ref().is_none_or(|r| !r.outcome_unknown),
        "the first claim is not at_most_once: {first:?}"
    );
    assert_eq!(
        announced_by(&settled),
        std::slice::from_ref(&k2),
        "the invocation announces the call it settled as outcome unknown ({k2}), no other: {settled:?}"
    );
}

/// Suspicion: the Gateway invokes the RESPONSE interceptor twice for one request (a retry of an
/// invocation that timed out), side by side. Both read the claim in progress; both settle under
/// the claim's token; the store answers the second as a retry of the first (`settle_unknown` is
/// idempotent under one token), so both count it and the call is announced twice.
// Broke before the fix: both RESPONSE invocations reported the key (announced twice). A RESPONSE
// now takes the claim under a token of its own before settling it, as the sweep does.
#[tokio::test]
async fn two_responses_side_by_side_announce_the_call_once() {
    let once = policies(json!({"tools": {TOOL: {"delivery": "at_most_once"}}}));
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let (a, b) = (
        container(store.clone(), &once),
        container(store.clone(), &once),
    );
    let first = request(7);
    let claimed = send_as(&a, &first, "req-7").await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.clone().unwrap();

    *store.gets_meet.lock().unwrap() = Some((Arc::new(tokio::sync::Barrier::new(2)), 2));
    let failed = failed_response(&first);
    let (one, two) = tokio::join!(send_as(&a, &failed, "req-7"), send_as(&b, &failed, "req-7"));
    assert_eq!(
        store
            .gets_meet
            .lock()
            .unwrap()
            .as_ref()
            .map(|(_, left)| *left),
        Some(0),
        "both RESPONSE invocations read the claim before either settled it"
    );
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    let announced: Vec<String> = [&one, &two].into_iter().flat_map(announced_by).collect();
    assert_eq!(
        announced,
        vec![key],
        "announced once, by the RESPONSE whose write settled it: {one:?} / {two:?}"
    );
}

/// The same two RESPONSE invocations one after the other: the second finds the call completed
/// and announces nothing.
#[tokio::test]
async fn two_responses_in_turn_announce_the_call_once() {
    let once = policies(json!({"tools": {TOOL: {"delivery": "at_most_once"}}}));
    let store = MemoryStore::new();
    let (a, b) = (
        container(store.clone(), &once),
        container(store.clone(), &once),
    );
    let first = request(7);
    let key = send_as(&a, &first, "req-7").await.key.unwrap();
    let failed = failed_response(&first);
    let one = send_as(&a, &failed, "req-7").await;
    let two = send_as(&b, &failed, "req-7").await;
    let announced: Vec<String> = [&one, &two].into_iter().flat_map(announced_by).collect();
    assert_eq!(announced, vec![key]);
}

/// A Bedrock handler over `store` whose `charge_card` crashes after its side effect.
fn crashing<S: Store>(store: S) -> Handler<S, impl Dispatcher + use<S>> {
    Handler::new(
        store,
        Scripted::new(vec![Act::RunThenFail("Sandbox.Timedout")]),
        &charge_card_at_most_once(),
        Telemetry::quiet(),
    )
}

/// A settle write refused without applying, whose read-back fails too, is announced "in case" by
/// the invocation; the claim stays in progress, and the sweep settles and announces it again once
/// its lease ends. The promise's one exception, on purpose (docs/operations.md, "Who announces"):
/// when neither the write's answer nor a read says what happened, the call is announced rather
/// than risk nobody announcing it (an applied settle is never listed again). Announced at least
/// once, at most twice, the second by the writer that did settle it.
// The attack expected exactly once; no writer can promise that when the store answers neither its
// write nor its read (an event sent before a crash, or not sent after one, breaks it too).
#[tokio::test]
async fn a_refused_settle_with_an_unreadable_record_is_announced_in_case_then_by_the_sweep() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    store.unavailable_gets.store(1, Ordering::SeqCst);
    let h = crashing(store.clone());
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(crashed.outcome, Outcome::ToolError);
    let key = crashed.key.clone().unwrap();
    assert_eq!(
        store.unavailable_gets.load(Ordering::SeqCst),
        0,
        "the read-back was the read that failed"
    );
    clock.advance(Duration::from_secs(3_600));
    let (swept, by_sweep) = swept_keys(&h, &Invocation::default()).await;
    assert_eq!(
        (announced_by(&crashed), by_sweep),
        (vec![key.clone()], vec![key]),
        "in case, then by the sweep that settled it (sweep: {swept})"
    );
}

/// A settle that applied, its answers lost and its read-back failing, is announced by the
/// invocation (in case), and the sweep, finding the call settled, announces nothing more.
#[tokio::test]
async fn a_lost_settle_with_an_unreadable_record_is_announced_once() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    store.lose_settle_unknown_answers.store(1, Ordering::SeqCst);
    store.unavailable_gets.store(1, Ordering::SeqCst);
    let h = crashing(store.clone());
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    let key = crashed.key.clone().unwrap();
    clock.advance(Duration::from_secs(3_600));
    let (_, by_sweep) = swept_keys(&h, &Invocation::default()).await;
    let mut announced: Vec<String> = announced_by(&crashed).into_iter().collect();
    announced.extend(by_sweep);
    assert_eq!(announced, vec![key]);
}

/// The sweep's own settle, refused and unreadable, is announced "in case" (the exception above);
/// the claim stays in progress under the sweep's token and the next sweep settles and announces
/// it again: twice, never more, and never zero times.
#[tokio::test]
async fn a_sweeps_refused_and_unreadable_settle_is_announced_in_case_then_by_the_next_sweep() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    // The invocation's settle fails without applying (read back: not settled, so no announcement).
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let h = crashing(store.clone());
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    assert!(crashed.settled_unknown.is_empty(), "{crashed:?}");
    let key = crashed.key.clone().unwrap();
    clock.advance(Duration::from_secs(3_600));
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    store.unavailable_gets.store(1, Ordering::SeqCst);
    let (first, mut announced) = swept_keys(&h, &Invocation::default()).await;
    let (second, again) = swept_keys(&h, &Invocation::default()).await;
    announced.extend(again);
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.outcome_unknown, "{record:?}");
    assert_eq!(
        announced,
        vec![key.clone(), key],
        "in case, then by the sweep that settled it ({first} then {second})"
    );
    let (third, none) = swept_keys(&h, &Invocation::default()).await;
    assert!(
        none.is_empty(),
        "settled: nothing more to announce ({third})"
    );
}

/// Suspicion: `has_time` off by one: a sweep with too little time left still starts a record (and
/// may be cut off between its settle and its announcement), or counts it neither settled nor left.
#[tokio::test]
async fn a_sweep_without_time_starts_nothing_and_leaves_it_for_the_next() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let h = crashing(store.clone());
    let key = send(&h, &event("fd-charge_card.json")).await.key.unwrap();
    clock.advance(Duration::from_secs(3_600));
    let wall_now_ms = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let short = Invocation {
        deadline_ms: Some(wall_now_ms + 1_500),
        ..Invocation::default()
    };
    let (swept, keys) = swept_keys(&h, &short).await;
    assert!(keys.is_empty(), "{swept}");
    assert_eq!(swept["swept"], 1, "{swept}");
    assert_eq!(swept["left_for_next"], 1, "{swept}");
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status, Status::InProgress, "untouched: {record:?}");
    let (swept, keys) = swept_keys(&h, &Invocation::default()).await;
    assert_eq!(keys, vec![key], "{swept}");
    assert_eq!(swept["left_for_next"], 0, "{swept}");
}

/// A repeat of a call left unknown (settled, or its at_most_once claim's lease ended) answers
/// `outcome_unknown` and announces nothing: it settled nothing.
#[tokio::test]
async fn a_repeat_of_a_call_left_unknown_announces_nothing() {
    let clock = ManualClock::starting_now();
    let store = Arc::new(Faulty::new(MemoryStore::new().with_clock(clock.clone())));
    store.refuse_settle_unknown.store(1, Ordering::SeqCst);
    let h = Handler::new(
        store.clone(),
        Scripted::new(vec![
            Act::RunThenFail("Sandbox.Timedout"),
            Act::Run,
            Act::Run,
        ]),
        &charge_card_at_most_once(),
        Telemetry::quiet(),
    );
    let crashed = send(&h, &event("fd-charge_card.json")).await;
    assert!(crashed.settled_unknown.is_empty());
    clock.advance(Duration::from_secs(3_600));
    let repeat = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(repeat.outcome, Outcome::Unknown, "{repeat:?}");
    assert!(repeat.settled_unknown.is_empty(), "{repeat:?}");
    let (_, keys) = swept_keys(&h, &Invocation::default()).await;
    assert_eq!(keys, vec![crashed.key.clone().unwrap()]);
    let again = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(again.outcome, Outcome::Unknown, "{again:?}");
    assert!(again.settled_unknown.is_empty(), "{again:?}");
    assert_eq!(h.dispatcher().invokes(), 1, "ran once");
}

/// Suspicion: the boxed handle future still overflows a 2 MiB stack (a tokio worker's) in a debug
/// build, on the paths the change lengthened: a crash settled as outcome unknown, a RESPONSE
/// settling a claim, a sweep.
#[test]
fn the_settling_paths_fit_a_tokio_workers_stack() {
    let ran = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let h = crashing(MemoryStore::new());
                let crashed = send(&h, &event("fd-charge_card.json")).await;
                assert!(!crashed.settled_unknown.is_empty());
                let once = policies(json!({"tools": {TOOL: {"delivery": "at_most_once"}}}));
                let c = container(MemoryStore::new(), &once);
                let first = request(7);
                send_as(&c, &first, "req-7").await;
                let settled = send_as(&c, &failed_response(&first), "req-7").await;
                assert!(!settled.settled_unknown.is_empty(), "{settled:?}");
                h.sweep(&Invocation::default()).await.unwrap();
            });
        })
        .unwrap()
        .join();
    assert!(ran.is_ok(), "the thread panicked or overflowed");
}
