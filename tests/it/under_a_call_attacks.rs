//! An independent attack on issue 48's changes (a resumed claim handed to a fresh token, the
//! interceptor's `request:<hash>` note its RESPONSE settles by): each test is one suspicion of a
//! broken promise, asserted through the real handler (memory store, one on moto). Those that
//! failed when written name the fix in `under_a_call.rs`'s terms: notes hold every claim of a
//! request and never release one, their names are unambiguous, replays are marked, a session
//! alone never resumes a claim, a caller's key with other arguments is refused before a resume.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use toolcall_dedup::config::{Config, Mode, Sessionless};
use toolcall_dedup::handler::ClientContext;
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::store::{ManualClock, Status, Store};
use toolcall_dedup::telemetry::Outcome;

use crate::gateway::{self, container, response, send, send_with};
use crate::servers::{self, Backend, Faulty};

const TOOL: &str = "payments___charge_card";

/// A `tools/call` REQUEST of the charge tool.
fn request(session: Option<&str>, id: u64, arguments: Value) -> Value {
    gateway::request(TOOL, session, id, arguments)
}

fn charge(amount: Value) -> Value {
    json!({"customer_id": "cus_1", "amount": amount, "currency": "USD"})
}

fn policies(json: Value) -> PolicySet {
    PolicySet::parse(&json.to_string(), false).expect("a policy set")
}

/// The stored result of `key`, as text (empty when none).
async fn stored_text<S: Store>(store: &S, key: &str) -> String {
    store
        .get(key)
        .await
        .unwrap()
        .and_then(|r| r.result)
        .map(|r| String::from_utf8_lossy(&r).into_owned())
        .unwrap_or_default()
}

fn check(broken: &mut Vec<String>, ok: bool, what: impl Into<String>) {
    if !ok {
        broken.push(what.into());
    }
}

fn verdict(broken: Vec<String>) {
    assert!(
        broken.is_empty(),
        "promises broken:\n- {}",
        broken.join("\n- ")
    );
}

// ---------------------------------------------------------------------------------------------
// 1. Two different requests with one `request_record` name.
// ---------------------------------------------------------------------------------------------

/// Sessionless (`gateway_scope`), no `REQUEST_ID`, no Authorization (or a shared API key): two
/// clients whose libraries both number from 1 send the same call, keyed in two containers whose
/// configurations (or cached listings) differ, so their keys differ and both run. Their
/// `request_record` names are equal: nothing tells the two requests apart. Client B's REQUEST must
/// not release client A's running claim, a third identical call keyed as A's must not run the
/// side effect again, and once both RESPONSEs passed no claim is left in progress, each key
/// holding a receipt of this one call (under `gateway_scope` identical calls are one call, so
/// either twin's receipt answers it; docs/entry-points.md).
async fn sessionless_twins_keep_their_own_claims<S: Store + Clone>(store: S) {
    let old = Config {
        sessionless: Sessionless::GatewayScope,
        ..Config::default()
    };
    let new = Config {
        sessionless: Sessionless::GatewayScope,
        policies: policies(json!({"tools": {TOOL: {"key_fields": ["amount"]}}})),
        ..Config::default()
    };
    let (a, b) = (
        container(store.clone(), &old),
        container(store.clone(), &new),
    );
    let twin = request(None, 1, charge(json!(4200)));
    let mut broken = Vec::new();

    let ca = send(&a, &twin).await;
    assert_eq!(ca.outcome, Outcome::Executed);
    let cb = send(&b, &twin).await;
    assert_eq!(cb.outcome, Outcome::Executed, "another key: a new call");
    let (k1, k2) = (ca.key.clone().unwrap(), cb.key.clone().unwrap());
    assert_ne!(k1, k2);

    let a_claim = store.get(&k1).await.unwrap();
    check(
        &mut broken,
        a_claim.as_ref().map(|r| r.status) == Some(Status::InProgress),
        format!("client B's REQUEST released client A's running claim {k1}: {a_claim:?}"),
    );
    // A third identical call keyed as A's (container a) while A's target still runs.
    let third = send(&a, &request(None, 2, charge(json!(4200)))).await;
    check(
        &mut broken,
        third.outcome != Outcome::Executed,
        format!(
            "a third call keyed {k1} ran the side effect again while A's ran: {:?}",
            third.outcome
        ),
    );

    send(&a, &response(&twin, "A's receipt")).await;
    send(&b, &response(&twin, "B's receipt")).await;
    for key in [&k1, &k2] {
        let record = store.get(key).await.unwrap();
        check(
            &mut broken,
            record.as_ref().map(|r| r.status) == Some(Status::Completed),
            format!("{key} is left {record:?} once both RESPONSEs passed"),
        );
        let text = stored_text(&store, key).await;
        check(
            &mut broken,
            text.contains("A's receipt") || text.contains("B's receipt"),
            format!("{key} holds no receipt of the call: {text}"),
        );
    }
    verdict(broken);
}

#[tokio::test]
async fn attack_sessionless_twins_keep_their_own_claims_on_memory() {
    sessionless_twins_keep_their_own_claims(servers::memory_store(ManualClock::starting_now()))
        .await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test]
async fn attack_sessionless_twins_keep_their_own_claims_on_moto() {
    let store = servers::dynamodb_store(Backend::Moto, ManualClock::starting_now()).await;
    sessionless_twins_keep_their_own_claims(store).await;
}

/// One request, invoked twice by the Gateway (the first invocation timed out): the second
/// invocation (container b, new configuration) answers first and the Gateway calls the target
/// under its claim K2; the first invocation (container a, old configuration) finishes late and
/// claims K1. The late one's note finds K2 and releases it, though the target runs under it: a
/// retry of the call keyed under today's configuration then runs the side effect again.
#[tokio::test]
async fn attack_a_late_first_invocation_does_not_free_the_claim_the_gateway_went_on_with() {
    let store = servers::memory_store(ManualClock::starting_now());
    let old = Config::default();
    let new = Config {
        policies: policies(json!({"tools": {TOOL: {"key_fields": ["amount"]}}})),
        ..Config::default()
    };
    let (a, b) = (
        container(store.clone(), &old),
        container(store.clone(), &new),
    );
    let call = request(Some("s-1"), 7, charge(json!(4200)));
    let mut broken = Vec::new();

    let used = send(&b, &call).await; // the answer the Gateway goes on with
    assert_eq!(used.outcome, Outcome::Executed);
    let k2 = used.key.clone().unwrap();
    let late = send(&a, &call).await; // its answer is discarded by the Gateway
    let k1 = late.key.clone().unwrap();
    assert_ne!(k1, k2);
    let k2_claim = store.get(&k2).await.unwrap();
    check(
        &mut broken,
        k2_claim.as_ref().map(|r| r.status) == Some(Status::InProgress),
        format!("the late first invocation released the claim the target runs under: {k2_claim:?}"),
    );
    // A client retry (new id) keyed in a container on today's configuration, target still running.
    let retry = send(&b, &request(Some("s-1"), 8, charge(json!(4200)))).await;
    check(
        &mut broken,
        retry.outcome != Outcome::Executed,
        format!("the retry ran the side effect again: {:?}", retry.outcome),
    );
    verdict(broken);
}

/// `request_record` joins its parts with a 0 byte but does not length-prefix them: a session
/// header and an Authorization header that carry a 0 byte can make two requests of two sessions
/// (so two keys) share a note. The second REQUEST then releases the first's running claim.
#[tokio::test]
async fn attack_request_record_parts_are_unambiguous() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let mut victim = request(Some("S\u{0}T"), 1, charge(json!(4200)));
    victim["mcp"]["gatewayRequest"]["headers"]
        .as_object_mut()
        .unwrap()
        .remove("authorization");
    let mut forged = request(Some("S"), 1, charge(json!(4200)));
    forged["mcp"]["gatewayRequest"]["headers"]["authorization"] = json!("T\u{0}");
    let v = send(&h, &victim).await;
    assert_eq!(v.outcome, Outcome::Executed);
    let f = send(&h, &forged).await;
    assert_eq!(f.outcome, Outcome::Executed);
    assert_ne!(v.key, f.key, "two sessions, two keys");
    let victim_claim = store.get(v.key.as_deref().unwrap()).await.unwrap();
    assert_eq!(
        victim_claim.map(|r| r.status),
        Some(Status::InProgress),
        "another session's REQUEST released the victim's running claim"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Resume: is `is_one_request` really one request?
// ---------------------------------------------------------------------------------------------

/// No `REQUEST_ID` (the Gateway documents it for HTTP targets), an MCP session: the client's HTTP
/// layer re-POSTs the same JSON-RPC message (same id, same body) after a 502/504 while the target
/// still runs the first. The second REQUEST is taken for the Gateway invoking the same request
/// again, resumes the claim, and the target is called twice.
#[tokio::test]
async fn attack_a_reposted_message_while_the_target_runs_does_not_run_it_again() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let call = request(Some("s-1"), 7, charge(json!(4200)));
    assert_eq!(send(&h, &call).await.outcome, Outcome::Executed);
    let again = send(&h, &call).await;
    assert_ne!(
        again.outcome,
        Outcome::Executed,
        "the identical message, re-sent while the target runs, is passed to the target again"
    );
}

/// A caller's idempotency key with the same JSON-RPC id and session but other arguments: the
/// owner (key, id, REQUEST_ID) is the same, so the claim is resumed before the fingerprint is
/// compared: other arguments run under the first arguments' claim, and a RESPONSE stores a reply
/// under a fingerprint it does not belong to.
#[tokio::test]
async fn attack_a_callers_key_with_other_arguments_is_never_resumed() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let args = |amount: u64| {
        json!({"customer_id": "cus_1", "amount": amount, "currency": "USD",
               "idempotency_key": "ck-1"})
    };
    let first = request(Some("s-1"), 7, args(1));
    let other = request(Some("s-1"), 7, args(500));
    let a = send(&h, &first).await;
    assert_eq!(a.outcome, Outcome::Executed);
    let b = send(&h, &other).await;
    assert_eq!(a.key, b.key, "keyed by the caller's key");
    assert_eq!(
        b.outcome,
        Outcome::KeyReused,
        "other arguments under a used caller key are refused, not run"
    );
}

/// Sessionless `gateway_scope` with a `REQUEST_ID`: the Gateway re-invoking the REQUEST with the
/// same id resumes; the resumed invocation's lease counts from now and its RESPONSE settles.
/// (Control: expected to hold.)
#[tokio::test]
async fn attack_control_resume_by_request_id_settles_once() {
    let clock = ManualClock::starting_now();
    let store = servers::memory_store(clock.clone());
    let config = Config {
        sessionless: Sessionless::GatewayScope,
        ..Config::default()
    };
    let h = container(store.clone(), &config);
    let ctx: ClientContext = HashMap::from([("REQUEST_ID".to_string(), "req-a".to_string())]);
    let call = request(None, 1, charge(json!(1)));
    let first = send_with(&h, &call, &ctx).await;
    assert_eq!(first.outcome, Outcome::Executed);
    clock.advance_ms(30_000);
    assert_eq!(send_with(&h, &call, &ctx).await.outcome, Outcome::Executed);
    let done = send_with(&h, &response(&call, "ok"), &ctx).await;
    assert_eq!(done.outcome, Outcome::Executed, "{done:?}");
    let key = first.key.unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed)
    );
}

// ---------------------------------------------------------------------------------------------
// 3. The note's life: expiry, failure, other requests' RESPONSEs.
// ---------------------------------------------------------------------------------------------

/// A tool with a short `ttl_seconds` (60 s) whose target runs 2 minutes (within the Gateway's
/// 900 s limit, so within the claim's lease). The claim's expiry covers its lease; the note's does
/// not, so it has expired when the RESPONSE comes, and the RESPONSE falls back to deriving the
/// key, under a configuration that changed in between: the result is lost and the claim stays.
#[tokio::test]
async fn attack_a_note_outlives_the_claim_it_names() {
    let clock = ManualClock::starting_now();
    let store = servers::memory_store(clock.clone());
    let before = Config {
        policies: policies(json!({"tools": {TOOL: {"ttl_seconds": 60}}})),
        ..Config::default()
    };
    let after = Config {
        policies: policies(json!({"tools": {TOOL: {"ttl_seconds": 60, "key_fields": ["amount"]}}})),
        ..Config::default()
    };
    let (a, b) = (
        container(store.clone(), &before),
        container(store.clone(), &after),
    );
    let call = request(Some("s-1"), 7, charge(json!(4200)));
    let claimed = send(&a, &call).await;
    assert_eq!(claimed.outcome, Outcome::Executed);
    let key = claimed.key.unwrap();
    clock.advance_ms(120_000);
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::InProgress),
        "the claim is live (its lease covers the target)"
    );
    let settled = send(&b, &response(&call, "charged")).await;
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed),
        "the result is lost: the RESPONSE found no note and settled {:?} ({:?})",
        settled.key,
        settled.outcome
    );
}

/// Shadow mode never blocks a call: a REQUEST whose claim applied but whose note could not be
/// written must still be passed to the target (a store failure at claim time is, in shadow mode).
#[tokio::test]
async fn attack_shadow_mode_is_never_blocked_by_a_failed_note() {
    let store = Faulty::new(servers::memory_store(ManualClock::starting_now()));
    store.fail_request_notes.store(1, Ordering::SeqCst);
    let config = Config {
        mode: Mode::Shadow,
        ..Config::default()
    };
    let h = container(store, &config);
    let handled = send(&h, &request(Some("s-1"), 7, charge(json!(1)))).await;
    let out: Value = serde_json::from_str(handled.response.as_ref().unwrap().get()).unwrap();
    assert!(
        out["mcp"].get("transformedGatewayRequest").is_some(),
        "shadow mode refused the call ({:?}): {out}",
        handled.outcome
    );
}

/// Enforce mode, note write failed: the claim is released (nothing stuck), the caller gets a
/// marked store error, and the Gateway's next invocation of the request runs. (Control.)
#[tokio::test]
async fn attack_control_a_failed_note_leaves_no_claim() {
    let store = servers::memory_store(ManualClock::starting_now());
    let faulty = Faulty::new(store.clone());
    faulty.fail_request_notes.store(1, Ordering::SeqCst);
    let h = container(faulty, &Config::default());
    let call = request(Some("s-1"), 7, charge(json!(1)));
    let failed = send(&h, &call).await;
    assert_eq!(failed.outcome, Outcome::StoreError);
    let key = failed.key.clone().unwrap();
    assert!(store.get(&key).await.unwrap().is_none(), "released");
    assert_eq!(send(&h, &call).await.outcome, Outcome::Executed);
    assert_eq!(
        send(&h, &response(&call, "ok")).await.outcome,
        Outcome::Executed
    );
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed)
    );
}

/// A hand-over applied with its answer lost: the new token is remembered to release. The Gateway
/// invokes the request again in another container, which resumes; the first container's next
/// call releases the token it remembered: fenced out, the claim lives and is settled. (Control.)
#[tokio::test]
async fn attack_control_a_lost_hand_over_answer_frees_nothing_live() {
    let clock = ManualClock::starting_now();
    let inner = servers::memory_store(clock.clone());
    let lossy = Faulty::new(inner.clone());
    lossy.lose_hand_over_answers.store(1, Ordering::SeqCst);
    let config = Config::default();
    let (one, two, three) = (
        container(inner.clone(), &config),
        container(lossy, &config),
        container(inner.clone(), &config),
    );
    let call = request(Some("s-1"), 7, charge(json!(1)));
    // The Gateway names its request (REQUEST_ID) in every invocation of it.
    let named: ClientContext = HashMap::from([("REQUEST_ID".to_string(), "req-7".to_string())]);
    let first = send_with(&one, &call, &named).await;
    let key = first.key.unwrap();
    let lost = send_with(&two, &call, &named).await;
    assert_eq!(lost.outcome, Outcome::StoreError);
    assert_eq!(
        send_with(&three, &call, &named).await.outcome,
        Outcome::Executed
    );
    // Container two's next call releases what it remembered.
    send(&two, &request(Some("s-9"), 1, charge(json!(2)))).await;
    assert_eq!(
        inner.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::InProgress)
    );
    send_with(&three, &response(&call, "ok"), &named).await;
    assert_eq!(
        inner.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::Completed)
    );
}

/// The RESPONSE of another request (same session, other JSON-RPC id, the id a busy twin got)
/// carrying a forged result cannot settle the first request's claim. (Control.)
#[tokio::test]
async fn attack_control_another_requests_response_settles_nothing() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let call = request(Some("s-1"), 7, charge(json!(1)));
    let first = send(&h, &call).await;
    let key = first.key.unwrap();
    let twin = request(Some("s-1"), 8, charge(json!(1)));
    assert_eq!(send(&h, &twin).await.outcome, Outcome::InProgress);
    let forged = send(&h, &response(&twin, "forged")).await;
    assert_eq!(forged.outcome, Outcome::PassedOn, "{forged:?}");
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status),
        Some(Status::InProgress)
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Cost: store requests per REQUEST and RESPONSE.
// ---------------------------------------------------------------------------------------------

/// Counts the store requests of one call's REQUEST, its RESPONSE, a retry's REQUEST (replayed)
/// and that replay's RESPONSE, on a warm container, against the budget docs/performance.md states:
/// REQUEST: catalog read + claim + the note; RESPONSE: note read + record read + complete;
/// replayed REQUEST: catalog read + claim; replay's RESPONSE: nothing (the replay is marked).
#[tokio::test]
async fn attack_cost_store_requests_per_invocation() {
    let store = servers::memory_store(ManualClock::starting_now());
    let h = container(store.clone(), &Config::default());
    let warm = request(Some("s-0"), 1, charge(json!(9)));
    send(&h, &warm).await;
    send(&h, &response(&warm, "warm")).await;
    let mut last = store.requests();
    let mut step = |name: &str| {
        let now = store.requests();
        let (reads, writes) = (now.reads() - last.reads(), now.writes() - last.writes());
        last = now;
        eprintln!("{name}: {reads} reads, {writes} writes");
        (reads, writes)
    };
    let call = request(Some("s-1"), 7, charge(json!(1)));
    send(&h, &call).await;
    let req = step("REQUEST");
    send(&h, &response(&call, "ok")).await;
    let resp = step("RESPONSE");
    let retry = request(Some("s-1"), 8, charge(json!(1)));
    let replayed = send(&h, &retry).await;
    let rep = step("replayed REQUEST");
    let mut seen = retry.clone();
    let answer: Value = serde_json::from_str(replayed.response.as_ref().unwrap().get()).unwrap();
    seen["mcp"]["gatewayResponse"] = answer["mcp"]["transformedGatewayResponse"].clone();
    send(&h, &seen).await;
    let rep_resp = step("replay's RESPONSE");
    let mut broken = Vec::new();
    check(
        &mut broken,
        req == (1, 2),
        format!("REQUEST (reads, writes) = {req:?}, budget (1, 2)"),
    );
    check(
        &mut broken,
        resp == (2, 1),
        format!("RESPONSE = {resp:?}, budget (2, 1)"),
    );
    check(
        &mut broken,
        rep == (1, 1),
        format!("replayed REQUEST = {rep:?}, budget (1, 1)"),
    );
    check(
        &mut broken,
        rep_resp == (0, 0),
        format!("replay's RESPONSE = {rep_resp:?}, budget (0, 0)"),
    );
    verdict(broken);
}

// ---------------------------------------------------------------------------------------------
// 5. A replay's RESPONSE looks like a target's answer.
// ---------------------------------------------------------------------------------------------

/// Request R's first invocation (container a, old configuration: every argument keys) claims K1
/// and notes it; its answer never reaches the Gateway. The Gateway invokes R again in container b,
/// where a new policy keys by `amount` only, and K2 was completed by another customer's call (same
/// agent session): R is
/// answered with that replay (the new policy's intent). R's RESPONSE carries the replayed reply,
/// which is indistinguishable from a target's: it follows R's note to K1 and completes K1, a key of
/// customer cus_1 only, with customer cus_2's receipt. A cus_1 retry keyed under the old
/// configuration then replays another customer's receipt, though nothing ever ran under K1.
#[tokio::test]
async fn attack_a_replays_response_never_completes_an_unrun_claim() {
    let store = servers::memory_store(ManualClock::starting_now());
    let old = Config::default();
    let new = Config {
        policies: policies(json!({"tools": {TOOL: {"key_fields": ["amount"]}}})),
        ..Config::default()
    };
    let (a, b) = (
        container(store.clone(), &old),
        container(store.clone(), &new),
    );
    let other = request(
        Some("s-1"),
        1,
        json!({"customer_id": "cus_2", "amount": 4200, "currency": "USD"}),
    );
    assert_eq!(send(&b, &other).await.outcome, Outcome::Executed);
    send(&b, &response(&other, "cus_2's receipt")).await;

    let r = request(Some("s-1"), 7, charge(json!(4200)));
    let lost = send(&a, &r).await; // answer lost: the Gateway invokes R again
    assert_eq!(lost.outcome, Outcome::Executed);
    let k1 = lost.key.unwrap();
    let again = send(&b, &r).await;
    assert_eq!(again.outcome, Outcome::Replayed, "the new policy's replay");
    let mut seen = r.clone();
    let answer: Value = serde_json::from_str(again.response.as_ref().unwrap().get()).unwrap();
    seen["mcp"]["gatewayResponse"] = answer["mcp"]["transformedGatewayResponse"].clone();
    let settled = send(&b, &seen).await;
    let in_k1 = stored_text(&store, &k1).await;
    assert!(
        !in_k1.contains("cus_2"),
        "the replay's RESPONSE ({:?}, settled {:?}) completed cus_1's unrun claim {k1} with: {in_k1}",
        settled.outcome,
        settled.key
    );
}
