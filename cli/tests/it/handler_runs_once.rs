//! The paths where a side effect could run twice, a result could be lost or one caller could
//! read another's, each through the real handler (issue "runs once, round 2"): a lease that
//! covers a tool starting late after a slow claim, a completion that finishes before the deadline,
//! keys that no entry point can forge for another, no stale `dedup_key` on pass-through paths,
//! and a claim whose answers were lost.

use crate::fixture;
use crate::servers;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dedup_cli::chaos::proxy::{FaultProxy, RequestFaults};
use dedup_cli::demo::{InProcess, StandIn};
use fixture::*;
use serde_json::{Value, json};
use servers::{Backend, Faulty};
use tokio::sync::Notify;
use tokio::time::Instant;
use toolcall_dedup::config::{Config, Mode, Scope};
use toolcall_dedup::dispatch::{DispatchError, Dispatcher};
use toolcall_dedup::handler::{ClientContext, Invocation};
use toolcall_dedup::internals::port::Forward;
use toolcall_dedup::key::{Call, Keyer, Schema, Strategy};
use toolcall_dedup::store::{
    DynamoDbConfig, DynamoDbStore, ManualClock, MemoryStore, RetryPolicy, Status, Store,
};
use toolcall_dedup::telemetry::Outcome;

/// One case on the memory store and on moto, both on a manual clock, each behind `Faulty`.
macro_rules! on_memory_and_moto {
    ($case:ident: $memory:ident, $moto:ident) => {
        #[tokio::test]
        async fn $memory() {
            let clock = ManualClock::starting_now();
            $case(Faulty::new(servers::memory_store(clock.clone())), clock).await
        }

        #[cfg_attr(
            not(feature = "local-servers"),
            ignore = "needs the local DynamoDB servers: run scripts/test"
        )]
        #[tokio::test]
        async fn $moto() {
            let clock = ManualClock::starting_now();
            let store = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
            $case(Faulty::new(store), clock).await
        }
    };
}

/// Sends `ev` with a Lambda deadline `budget` from now; returns the answer and how long it took.
async fn handle_within<S: Store, D: Dispatcher>(
    h: &toolcall_dedup::handler::Handler<S, D>,
    ev: &Value,
    budget: Duration,
) -> (toolcall_dedup::handler::Handled, Duration) {
    let invocation = Invocation {
        request_id: "r".into(),
        deadline_ms: Some(wall_ms() + budget.as_millis() as i64),
        qualifier: None,
    };
    let started = Instant::now();
    let handled = h.handle(ev, &invocation).await;
    (handled, started.elapsed())
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ---------------------------------------------------------------------------------------------
// 3. The lease covers the tool from when it is invoked

async fn a_slow_claim_moves_the_lease_so_it_covers_a_tool_that_starts_late<S: Store>(
    store: Faulty<S>,
    clock: ManualClock,
) {
    // The claim takes 4 s of store time (retries); the tool's own timeout is 10 s. A lease sized
    // when the claim was sent ends at claim + 15 s; the tool may run until claim + 14 s plus its
    // late start. 16 s after the claim: past a lease sized then, inside the moved one.
    a_tool_that_starts_late_keeps_its_key(store, clock, 16_000).await
}

on_memory_and_moto!(a_slow_claim_moves_the_lease_so_it_covers_a_tool_that_starts_late:
    on_memory_a_slow_claim_moves_the_lease, on_moto_a_slow_claim_moves_the_lease);

async fn a_lease_move_answered_late_is_made_again_before_the_tool_starts<S: Store>(
    mut store: Faulty<S>,
    clock: ManualClock,
) {
    // Found by the 100,000-invocation soak on moto (chaos-100-6973): the claim was slow, and so
    // was the write that moved its lease. Here the move takes 6 s of store time, more than the
    // lease margin (5 s): a lease moved once ends at claim + 4 + 10 + 5 = 19 s, and the tool,
    // started at claim + 10 s with a 10 s timeout of its own, may act until claim + 20 s. 19.5 s
    // after the claim: past the lease moved once, inside the one moved again when the tool started.
    store.extend_clock = Duration::from_secs(6);
    store.slow_extensions.store(1, Ordering::SeqCst);
    a_tool_that_starts_late_keeps_its_key(store, clock, 19_500).await
}

on_memory_and_moto!(a_lease_move_answered_late_is_made_again_before_the_tool_starts:
    on_memory_a_late_lease_move_is_made_again, on_moto_a_late_lease_move_is_made_again);

/// A claim that takes 4 s of store time (600 ms real), then a tool with a 10 s timeout of its own
/// that hangs: a retry `retry_after_ms` after the claim was sent must find the call in progress,
/// and the tool runs once.
async fn a_tool_that_starts_late_keeps_its_key<S: Store>(
    mut store: Faulty<S>,
    clock: ManualClock,
    retry_after_ms: i64,
) {
    store.clock = Some(clock.clone());
    store.claim_delay = Duration::from_millis(600);
    store.claim_clock = Duration::from_secs(4);
    let gate = Arc::new(Notify::new());
    let tool = Scripted::new(vec![Act::HangAfter(gate.clone())])
        .with_max_run_time(Duration::from_secs(10));
    let h = Arc::new(handler(store, tool, &Config::default()).with_settings(|s| {
        s.default_budget = Duration::from_secs(3);
        s.completion_reserve = Duration::from_millis(100);
        s.reply_margin = Duration::from_millis(50);
        s.wait = Duration::ZERO;
    }));
    let claimed_at = h.store().now_ms();
    let first = spawn_send(&h, &event("fd-charge_card.json"));
    wait_for("the tool to start", || h.dispatcher().invokes() == 1).await;
    clock.set_ms(claimed_at + retry_after_ms);
    let retry = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(
        retry.outcome,
        Outcome::InProgress,
        "the key was taken over while its tool still ran"
    );
    gate.notify_one();
    assert_eq!(first.await.unwrap().outcome, Outcome::Executed);
    assert_eq!(h.dispatcher().invokes(), 1);
    assert_eq!(charges(&h.dispatcher().demo), 1);
}

async fn a_store_too_slow_to_move_the_lease_refuses_without_running_the_tool<S: Store>(
    mut store: Faulty<S>,
    clock: ManualClock,
) {
    // Every move of the lease is answered late: no lease can be shown to cover the tool.
    store.clock = Some(clock.clone());
    store.claim_delay = Duration::from_millis(600);
    store.slow_extensions.store(u32::MAX, Ordering::SeqCst);
    let tool = Scripted::new(vec![Act::Run]).with_max_run_time(Duration::from_secs(10));
    let h = handler(store, tool, &Config::default()).with_settings(|s| {
        s.default_budget = Duration::from_secs(10);
        s.completion_reserve = Duration::from_millis(100);
        s.reply_margin = Duration::from_millis(50);
        s.wait = Duration::ZERO;
    });
    let refused = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(refused.outcome, Outcome::StoreError);
    let moves = u32::MAX - h.store().slow_extensions.load(Ordering::SeqCst);
    assert_eq!(
        moves, 3,
        "the lease was moved {moves} times before giving up"
    );
    assert_eq!(
        h.dispatcher().invokes(),
        0,
        "the tool ran without a lease covering it"
    );
    let key = refused.key.as_deref().expect("the call was keyed");
    assert!(
        h.store().get(key).await.unwrap().is_none(),
        "the claim was left behind"
    );
}

on_memory_and_moto!(a_store_too_slow_to_move_the_lease_refuses_without_running_the_tool:
    on_memory_a_store_too_slow_to_move_the_lease, on_moto_a_store_too_slow_to_move_the_lease);

// ---------------------------------------------------------------------------------------------
// 4. The completion finishes before the deadline

/// The demo tool, using nearly all the time it is given before answering.
struct UsesItsTime {
    demo: dedup_cli::demo::DemoTool,
}

impl StandIn for UsesItsTime {
    async fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        tokio::time::sleep(timeout.saturating_sub(Duration::from_millis(50))).await;
        self.demo.answer(target, forward, timeout).await
    }
}

async fn a_slow_completion_is_stored_before_the_deadline<S: Store>(
    mut store: Faulty<S>,
    _clock: ManualClock,
) {
    store.complete_delay = Duration::from_secs(2);
    let h = handler(
        store,
        InProcess::new(UsesItsTime { demo: demo() }),
        &Config::default(),
    );
    let budget = Duration::from_secs(6);
    let (r, took) = handle_within(&h, &event("fd-charge_card.json"), budget).await;
    assert_eq!(r.outcome, Outcome::Executed);
    assert!(
        took < budget,
        "answered after {took:?}, past the {budget:?} deadline: Lambda would have killed the \
         invocation"
    );
    let record = stored(&h, &r).await.expect("stored");
    assert_eq!(record.status, Status::Completed);
}

on_memory_and_moto!(a_slow_completion_is_stored_before_the_deadline:
    on_memory_a_slow_completion_is_stored_in_time, on_moto_a_slow_completion_is_stored_in_time);

#[tokio::test]
async fn a_completion_slower_than_the_time_left_still_lands_and_the_answer_is_on_time() {
    let mut store = Faulty::new(servers::memory_store(ManualClock::starting_now()));
    store.complete_delay = Duration::from_secs(4);
    let h = handler(
        store,
        InProcess::new(UsesItsTime { demo: demo() }),
        &Config::default(),
    );
    let budget = Duration::from_secs(6);
    let (r, took) = handle_within(&h, &event("fd-charge_card.json"), budget).await;
    assert!(took < budget, "{took:?}");
    assert_eq!(r.outcome, Outcome::Executed);
    // The write went on in its own task.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        stored(&h, &r).await.map(|r| r.status),
        Some(Status::Completed)
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Keys of different entry points and tenants cannot meet

#[tokio::test]
async fn an_envelope_that_copies_a_bedrock_calls_scope_is_its_own_call() {
    let ev = event("fd-charge_card.json");
    let bedrock_call = toolcall_dedup::internals::bedrock::call(
        &toolcall_dedup::internals::bedrock::ActionGroupEvent::parse(&ev).unwrap(),
        "dedup_step",
        "idempotency_key",
        Scope::Turn,
    )
    .unwrap();
    let agent_namespace = "K7QZ2M4RTB/payments";
    let schema = json!({"type": "object", "properties": {
        "amount": {"type": "number"}, "capture": {"type": "boolean"}, "line_items": {"type": "array"}}});
    let copy = json!({
        "tool": "charge_card",
        "namespace": agent_namespace,
        "run_id": bedrock_call.run_id,
        "step": bedrock_call.step,
        "args": bedrock_call.args,
        "schema": schema,
    });
    // Without the entry point in the key, the copy would meet the Bedrock call's record: same
    // namespace, tool, run, step and arguments, typed alike.
    let keyer = Keyer::new();
    let declared = bedrock_call.schema.as_ref().unwrap();
    let own = Schema::from_tool_definition(&schema).unwrap().1;
    let unseparated = |schema: &Schema| {
        keyer
            .key(
                Strategy::Typed,
                &Call {
                    tool: "charge_card",
                    args: &bedrock_call.args,
                    namespace: Some(agent_namespace),
                    run_id: bedrock_call.run_id.as_deref(),
                    step: bedrock_call.step.as_deref(),
                    schema: Some(schema),
                    policy: None,
                },
            )
            .unwrap()
            .to_string()
    };
    assert_eq!(
        unseparated(declared),
        unseparated(&own),
        "the copy is a forgery"
    );

    let h = handler(MemoryStore::new(), demo(), &Config::default());
    let bedrock = send(&h, &ev).await;
    assert_eq!(bedrock.outcome, Outcome::Executed);
    let forged = send(&h, &copy).await;
    assert_eq!(
        forged.outcome,
        Outcome::Executed,
        "answered from the Bedrock call's record"
    );
    assert_ne!(forged.key, bedrock.key);
    let answer = response(&forged);
    assert!(
        answer.get("result").is_some(),
        "an envelope answer: {answer}"
    );
    assert_eq!(charges(h.dispatcher()), 2);
}

#[tokio::test]
async fn an_envelope_may_name_only_the_namespaces_the_deployment_allows() {
    let config = Config {
        envelope_namespaces: Some(vec!["harness-a".into()]),
        ..Config::default()
    };
    let h = handler(MemoryStore::new(), demo(), &config);
    let mut ev = event("envelope/charge_card.json");
    ev["namespace"] = json!("harness-b");
    let refused = send(&h, &ev).await;
    assert_eq!(refused.outcome, Outcome::BadRequest);
    let answer = response(&refused);
    assert_eq!(answer["error"]["type"], "invalid_event", "{answer}");
    assert_eq!(charges(h.dispatcher()), 0);
    assert_eq!(h.store().len(), 0, "no claim");
    ev["namespace"] = json!("harness-a");
    assert_eq!(send(&h, &ev).await.outcome, Outcome::Executed);
}

// ---------------------------------------------------------------------------------------------
// 6. No stale dedup_key reaches the tool

/// Records what the tool received, and answers as the demo tool.
struct Recording {
    demo: dedup_cli::demo::DemoTool,
    seen: Mutex<Vec<(Value, Option<String>)>>,
}

impl StandIn for Recording {
    async fn answer(
        &self,
        t: &str,
        forward: Forward,
        d: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let payload: Value = serde_json::from_slice(&forward.payload).unwrap();
        self.seen
            .lock()
            .unwrap()
            .push((payload, forward.client_context.clone()));
        self.demo.answer(t, forward, d).await
    }
}

#[tokio::test]
async fn a_stale_dedup_key_never_reaches_the_tool() {
    for mode in [Mode::Off, Mode::Enforce] {
        let config = Config {
            mode,
            ..Config::default()
        };
        let tool = Recording {
            demo: demo(),
            seen: Mutex::default(),
        };
        let h = handler(MemoryStore::new(), InProcess::new(tool), &config);
        let ev = with_attrs(
            event("fd-charge_card.json"),
            json!({"dedup_key": "key-of-an-earlier-charge", "tenant": "t1"}),
        );
        let r = send(&h, &ev).await;
        assert_eq!(r.outcome, Outcome::Executed, "{mode:?}");
        let mut custom: ClientContext = client_context("agentcore/charge_card.json").unwrap();
        custom.insert("dedupKey".into(), "key-of-an-earlier-charge".into());
        let r = h
            .handle_with_context(
                &event("agentcore/charge_card.json"),
                &Invocation::default(),
                Some(&custom),
            )
            .await;
        assert_eq!(r.outcome, Outcome::Executed, "{mode:?}");
        let seen = h.dispatcher().seen.lock().unwrap();
        let attributes = &seen[0].0["sessionAttributes"];
        assert_eq!(
            attributes["tenant"], "t1",
            "{mode:?}: other attributes kept"
        );
        assert_ne!(
            attributes.get("dedup_key").and_then(Value::as_str),
            Some("key-of-an-earlier-charge"),
            "{mode:?}: the tool got an earlier call's key"
        );
        assert_eq!(
            attributes.get("dedup_key").is_some(),
            mode == Mode::Enforce,
            "{mode:?}: only a derived key is passed on"
        );
        let context: Value = serde_json::from_str(seen[1].1.as_deref().unwrap()).unwrap();
        assert_ne!(
            context["custom"]["dedupKey"], "key-of-an-earlier-charge",
            "{mode:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 8. A claim whose answers were lost does not block its key

#[tokio::test]
async fn a_claim_whose_answers_were_lost_is_released_for_the_retry() {
    let store = Faulty::new(servers::memory_store(ManualClock::starting_now()));
    store.lose_claim_answers.store(1, Ordering::SeqCst);
    let h = handler(store, demo(), &Config::default()).with_settings(|s| s.wait = Duration::ZERO);
    let first = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(first.outcome, Outcome::StoreError, "fail closed");
    assert_eq!(charges(h.dispatcher()), 0);
    let retry = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(
        retry.outcome,
        Outcome::Executed,
        "the lost claim blocked its key for a whole lease"
    );
    assert_eq!(charges(h.dispatcher()), 1);
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn on_moto_a_claim_whose_answers_were_all_lost_is_released_for_the_retry() {
    let clock = ManualClock::starting_now();
    let direct = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
    let proxy = FaultProxy::start(
        &Backend::Moto.endpoint(),
        18,
        DynamoDbConfig::DEFAULT_KEY_ATTRIBUTE,
    )
    .await
    .unwrap();
    let cfg = DynamoDbConfig {
        retry: RetryPolicy {
            deadline: Duration::from_millis(800),
            attempt_timeout: Duration::from_millis(300),
            ..RetryPolicy::default()
        },
        ..direct.config().clone()
    };
    let store = DynamoDbStore::new(&servers::client(proxy.url(), Vec::new()), cfg)
        .unwrap()
        .with_clock(clock);
    let h = handler(store, demo(), &Config::default()).with_settings(|s| s.wait = Duration::ZERO);
    // Every request is forwarded and its answer thrown away: the claim is written, its writer
    // never hears so, and reading it back fails the same way.
    proxy.set_faults(RequestFaults {
        drop_after: 1000,
        ..RequestFaults::NONE
    });
    let first = send(&h, &event("fd-charge_card.json")).await;
    assert_eq!(first.outcome, Outcome::StoreError, "fail closed");
    let held = direct.get(first.key.as_deref().unwrap()).await.unwrap();
    assert_eq!(
        held.map(|r| r.status),
        Some(Status::InProgress),
        "the claim was written"
    );
    proxy.set_faults(RequestFaults::NONE);
    let retry = send(&h, &event("fd-charge_card-retry.json")).await;
    assert_eq!(
        retry.outcome,
        Outcome::Executed,
        "the lost claim blocked its key for a whole lease"
    );
    assert_eq!(charges(h.dispatcher()), 1);
}
