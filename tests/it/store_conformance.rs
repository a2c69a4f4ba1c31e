//! One conformance suite for every [`Store`]: each case is a generic async fn, run against the
//! memory store, moto (single-threaded) and dynalite. The DynamoDB-compatible servers come from
//! `scripts/dynamodb-servers.sh`; without them those tests fail and say how to start them.
//!
//! Time is a [`ManualClock`] everywhere: the DynamoDB store sends the current time in its
//! conditions, so leases end and records expire on the servers exactly when the test says.
//!
//! `DEDUP_TEST_RACE_ROUNDS` sets the rounds of the 50-way claim race (default 20).

use crate::servers;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeDeserializationInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use servers::Backend;
use tokio::task::JoinSet;
use toolcall_dedup::key::OnFailure;
use toolcall_dedup::store::dynamodb::BreakerOpen;
use toolcall_dedup::store::table::{TtlState, create_table_with_client};
use toolcall_dedup::store::{
    CallAbout, ClaimBudget, ClaimOutcome, ClaimRequest, Clock, Completion, DynamoDbConfig,
    LeaseToken, MAX_STORED_RESULT_BYTES, ManualClock, Record, RecordAbout, RecordFilter,
    RecordState, Records, RequestCounts, RetriesExhausted, RetryPolicy, SettleAs, Status, Store,
    StoreError,
};

const LEASE_MS: i64 = 30_000;
const TTL_S: i64 = 3_600;

/// What each case gets: a store on a fresh table, the clock that drives it, and its backend.
struct Ctx<S> {
    store: Arc<S>,
    clock: ManualClock,
    backend: Backend,
}

impl<S: Store + 'static> Ctx<S> {
    fn key(&self, name: &str) -> String {
        format!("{name}-{}", uuid::Uuid::new_v4().simple())
    }

    /// A claim with a 30 s lease and a 1 h record life from the current time.
    fn req<'a>(&self, key: &'a str) -> ClaimRequest<'a> {
        let now = self.store.now_ms();
        ClaimRequest {
            key,
            fingerprint: "fp-1",
            tool: "send_email",
            lease_until_ms: now + LEASE_MS,
            expires_at_s: now.div_euclid(1000) + TTL_S,
            owner: None,
            at_most_once: false,
            on_failure: Default::default(),
            path_digests: None,
            about: CallAbout::default(),
        }
    }

    async fn claim(&self, key: &str) -> ClaimOutcome {
        self.store.claim(self.req(key)).await.expect("claim")
    }

    async fn claimed(&self, key: &str) -> LeaseToken {
        match self.claim(key).await {
            ClaimOutcome::Claimed { token } => token,
            other => panic!("{:?}: expected Claimed, got {other:?}", self.backend),
        }
    }

    fn counts(&self) -> RequestCounts {
        self.store.requests()
    }

    /// Claims `key` `at_most_once` and settles it as outcome unknown, as an executor does when
    /// such a tool crashed; returns the claim's token and the record's expiry.
    async fn settled_unknown(&self, key: &str) -> (LeaseToken, i64) {
        let token = match self
            .store
            .claim(ClaimRequest {
                at_most_once: true,
                on_failure: Default::default(),
                ..self.req(key)
            })
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { token } => token,
            other => panic!("{:?}: expected Claimed, got {other:?}", self.backend),
        };
        let expires = self.store.now_ms().div_euclid(1000) + TTL_S;
        self.store
            .settle_unknown(key, &token, expires)
            .await
            .unwrap();
        (token, expires)
    }

    /// Completes with a 1 h record life from the current time.
    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
    ) -> Result<Completion, StoreError> {
        let expires_at_s = self.store.now_ms().div_euclid(1000) + TTL_S;
        self.store.complete(key, token, result, expires_at_s).await
    }
}

fn in_progress(outcome: ClaimOutcome) -> Record {
    match outcome {
        ClaimOutcome::InProgress(r) => r,
        other => panic!("expected InProgress, got {other:?}"),
    }
}

fn completed(outcome: ClaimOutcome) -> Record {
    match outcome {
        ClaimOutcome::Completed(r) => r,
        other => panic!("expected Completed, got {other:?}"),
    }
}

#[track_caller]
fn assert_lease_lost<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    match r {
        Err(StoreError::LeaseLost) => {}
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u8(..)).collect()
}

fn race_rounds() -> usize {
    std::env::var("DEDUP_TEST_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

// ---------------------------------------------------------------------------------------------
// The cases

/// Issue 51: the rule for failures a claim was taken under is what a later reader (an interceptor
/// RESPONSE in another invocation) gets back, through completion too; every store the same.
async fn a_claims_rule_for_failures_reads_back_as_written<S: Store + 'static>(cx: Ctx<S>) {
    for on_failure in [
        OnFailure::Replay,
        OnFailure::ReplayFor(Duration::from_secs(60)),
        OnFailure::ReplayFor(Duration::from_secs(1)),
        OnFailure::Retry,
    ] {
        let key = cx.key("on-failure");
        let claimed = cx
            .store
            .claim(ClaimRequest {
                on_failure,
                ..cx.req(&key)
            })
            .await
            .unwrap();
        let ClaimOutcome::Claimed { token } = claimed else {
            panic!("{:?}: {claimed:?}", cx.backend);
        };
        let read = cx.store.get(&key).await.unwrap().unwrap();
        assert_eq!(read.on_failure, on_failure, "{:?}: claimed", cx.backend);
        cx.store
            .complete(&key, &token, b"{}", cx.store.now_ms() / 1000 + TTL_S)
            .await
            .unwrap();
        let read = cx.store.get(&key).await.unwrap().unwrap();
        assert_eq!(read.on_failure, on_failure, "{:?}: completed", cx.backend);
    }
}

async fn first_claim_wins_and_a_second_caller_sees_it_in_progress<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("first");
    let req = cx.req(&key);
    let token = cx.claimed(&key).await;

    cx.clock.advance_ms(5);
    let r = in_progress(cx.claim(&key).await);
    assert_eq!(r.token, token, "the record carries the winner's token");
    assert_eq!(r.key, key);
    assert_eq!(r.status, Status::InProgress);
    assert_eq!(
        (r.fingerprint.as_str(), r.tool.as_str()),
        (req.fingerprint, req.tool)
    );
    assert_eq!(
        (r.lease_until_ms, r.expires_at_s),
        (req.lease_until_ms, req.expires_at_s)
    );
    assert_eq!(r.created_at_ms, cx.clock.now_ms() - 5);
    assert_eq!(r.result, None);
}

async fn repeat_returns_completed_with_the_result_for_the_expected_request_count<
    S: Store + 'static,
>(
    cx: Ctx<S>,
) {
    let key = cx.key("repeat");
    let before = cx.counts();
    let token = cx.claimed(&key).await;
    let claim_cost = cx.counts() - before;
    assert_eq!(
        claim_cost,
        RequestCounts {
            put_item: 1,
            ..Default::default()
        },
        "first sight: one claim write"
    );

    let before = cx.counts();
    cx.complete(&key, &token, b"{\"sent\":true}").await.unwrap();
    let complete_cost = cx.counts() - before;
    assert_eq!(
        complete_cost,
        RequestCounts {
            update_item: 1,
            ..Default::default()
        },
        "one completion write"
    );

    let before = cx.counts();
    let r = completed(cx.claim(&key).await);
    let repeat_cost = cx.counts() - before;
    assert_eq!(r.result.as_deref(), Some(&b"{\"sent\":true}"[..]));
    assert_eq!(r.token, token);
    assert_eq!(r.status, Status::Completed);
    assert_eq!(repeat_cost.put_item, 1);
    assert_eq!(
        repeat_cost.total(),
        cx.backend.repeat_requests(),
        "{:?}: a repeat costs {} request(s), got {repeat_cost}",
        cx.backend,
        cx.backend.repeat_requests()
    );

    let got = cx.store.get(&key).await.unwrap().expect("completed record");
    assert_eq!(got, r);
}

async fn claim_in_flight_returns_in_progress_until_the_lease_ends<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("inflight");
    let req = cx.req(&key);
    let token = cx.claimed(&key).await;

    cx.clock.set_ms(req.lease_until_ms); // the lease's last millisecond
    assert_eq!(in_progress(cx.claim(&key).await).token, token);

    cx.clock.set_ms(req.lease_until_ms + 1);
    let new = cx.claimed(&key).await;
    assert_ne!(new, token);
}

async fn an_extended_lease_keeps_the_key_and_only_its_holder_can_extend<S: Store + 'static>(
    cx: Ctx<S>,
) {
    let key = cx.key("extend");
    let token = cx.claimed(&key).await;
    let before = cx.counts();
    // Extended to 3 leases from now, with an expiry before the new lease end: the stored expiry
    // still covers the lease.
    let now = cx.clock.now_ms();
    let until = now + 3 * LEASE_MS;
    cx.store
        .extend_lease(&key, &token, until, now.div_euclid(1000) + 1)
        .await
        .unwrap();
    assert_eq!((cx.counts() - before).update_item, 1, "one UpdateItem");
    // Repeating it is harmless (a retry after a lost answer).
    cx.store
        .extend_lease(&key, &token, until, now.div_euclid(1000) + 1)
        .await
        .unwrap();
    cx.clock.set_ms(now + 2 * LEASE_MS);
    let r = in_progress(cx.claim(&key).await);
    assert_eq!((r.token.clone(), r.lease_until_ms), (token.clone(), until));
    assert!(r.expires_at_s >= until.div_euclid(1000), "{r:?}");
    // Another token cannot extend, and neither can the holder once the key was taken over.
    assert_lease_lost(
        cx.store
            .extend_lease(&key, &LeaseToken::new("someone-else"), until + 1, TTL_S)
            .await,
    );
    cx.clock.set_ms(until + 1);
    let new = cx.claimed(&key).await;
    assert_ne!(new, token);
    assert_lease_lost(
        cx.store
            .extend_lease(&key, &token, until + LEASE_MS, now.div_euclid(1000) + TTL_S)
            .await,
    );
    cx.complete(&key, &new, b"done").await.unwrap();
    assert_lease_lost(
        cx.store
            .extend_lease(&key, &new, until + LEASE_MS, now.div_euclid(1000) + TTL_S)
            .await,
    );
    assert_lease_lost(
        cx.store
            .extend_lease(&cx.key("absent"), &new, until, TTL_S)
            .await,
    );
}

/// A claim handed over to a new token (a request resumed by another invocation) moves its
/// lease, and from then on only the new token settles it: the old one can neither release nor
/// complete it, nor hand it over again.
async fn a_handed_over_claim_answers_only_to_its_new_token<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("handover");
    let old = cx.claimed(&key).await;
    let read = cx.store.get(&key).await.unwrap().unwrap().lease_until_ms;
    let new = LeaseToken::new("resumed.1");
    let before = cx.counts();
    let now = cx.clock.now_ms();
    let until = now + 3 * LEASE_MS;
    cx.store
        .hand_over(&key, &old, read, &new, until, now.div_euclid(1000) + 1)
        .await
        .unwrap();
    assert_eq!((cx.counts() - before).update_item, 1, "one UpdateItem");
    cx.clock.set_ms(now + 2 * LEASE_MS);
    let r = in_progress(cx.claim(&key).await);
    assert_eq!((r.token.clone(), r.lease_until_ms), (new.clone(), until));
    assert!(r.expires_at_s >= until.div_euclid(1000), "{r:?}");
    assert_lease_lost(cx.store.release(&key, &old).await);
    assert_lease_lost(
        cx.store
            .hand_over(&key, &old, until, &LeaseToken::new("x.2"), until, TTL_S)
            .await,
    );
    assert!(cx.complete(&key, &old, b"stale").await.is_err());
    cx.complete(&key, &new, b"done").await.unwrap();
    // Completed: nothing is handed over any more, and an absent key never was.
    assert_lease_lost(
        cx.store
            .hand_over(&key, &new, until, &LeaseToken::new("x.3"), until, TTL_S)
            .await,
    );
    assert_lease_lost(
        cx.store
            .hand_over(&cx.key("absent"), &new, until, &old, until, TTL_S)
            .await,
    );
}

/// A hand-over is fenced by the lease the claim was read with, not only its token: a holder that
/// moved its lease since (a renewal after an outage) keeps its claim, and its lease is not set
/// back. The sweep's listing can be that stale.
async fn a_hand_over_from_a_lease_moved_since_it_was_read_is_refused<S: Store + 'static>(
    cx: Ctx<S>,
) {
    let key = cx.key("handover-stale");
    let holder = cx.claimed(&key).await;
    let listed = cx.store.get(&key).await.unwrap().unwrap();
    let now = cx.clock.now_ms();
    let renewed = now + 5 * LEASE_MS;
    cx.store
        .extend_lease(&key, &holder, renewed, TTL_S)
        .await
        .unwrap();
    assert_lease_lost(
        cx.store
            .hand_over(
                &key,
                &holder,
                listed.lease_until_ms,
                &LeaseToken::new("sweep.1"),
                listed.lease_until_ms,
                TTL_S,
            )
            .await,
    );
    let r = cx.store.get(&key).await.unwrap().unwrap();
    assert_eq!((r.token, r.lease_until_ms), (holder.clone(), renewed));
    // Read again, the claim is handed over.
    cx.store
        .hand_over(
            &key,
            &holder,
            renewed,
            &LeaseToken::new("sweep.2"),
            renewed,
            TTL_S,
        )
        .await
        .unwrap();
}

async fn expired_lease_lets_a_new_caller_take_over<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("takeover");
    let old = cx.claimed(&key).await;
    cx.clock.advance_ms(LEASE_MS + 1);

    let new = cx.claimed(&key).await;
    assert_ne!(old, new);
    let r = in_progress(cx.claim(&key).await);
    assert_eq!(r.token, new);
    assert_eq!(
        r.lease_until_ms,
        cx.clock.now_ms() + LEASE_MS,
        "the new owner's lease"
    );
    cx.complete(&key, &new, b"new").await.unwrap();
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"new"[..])
    );
}

async fn stale_token_cannot_complete_or_release_after_takeover<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("stale");
    let old = cx.claimed(&key).await;
    cx.clock.advance_ms(LEASE_MS + 1);
    let new = cx.claimed(&key).await;

    assert_lease_lost(cx.store.release(&key, &old).await);
    assert_eq!(
        in_progress(cx.claim(&key).await).token,
        new,
        "a stale release deletes nothing"
    );
    assert_lease_lost(cx.complete(&key, &old, b"late").await);
    assert_eq!(
        in_progress(cx.claim(&key).await).token,
        new,
        "a stale complete writes nothing"
    );

    cx.complete(&key, &new, b"owner").await.unwrap();
    assert_lease_lost(cx.complete(&key, &old, b"late").await);
    assert_lease_lost(cx.store.release(&key, &old).await);
    let r = completed(cx.claim(&key).await);
    assert_eq!(
        (r.result.as_deref(), &r.token),
        (Some(&b"owner"[..]), &new),
        "the owner's result stands"
    );
}

/// The "Done when" scenario: a caller killed between claim and complete.
async fn killed_caller_blocks_its_key_only_until_its_lease_ends<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("killed");
    let killed = cx.claimed(&key).await; // ... and the caller dies here
    for _ in 0..3 {
        cx.clock.advance_ms(LEASE_MS / 4);
        let r = in_progress(cx.claim(&key).await);
        assert_eq!(r.token, killed);
        assert!(r.lease_until_ms >= cx.clock.now_ms());
    }
    cx.clock.advance_ms(LEASE_MS / 4 + 1);
    let next = cx.claimed(&key).await;
    cx.complete(&key, &next, b"done once").await.unwrap();

    assert_lease_lost(cx.complete(&key, &killed, b"zombie").await);
    let r = completed(cx.claim(&key).await);
    assert_eq!(r.result.as_deref(), Some(&b"done once"[..]));
    assert_eq!(r.token, next);
}

/// The fence is the token, not the clock: a caller that finishes after its lease ended, with
/// nobody having taken over, still completes, and the side effect is not run a second time.
async fn late_complete_without_takeover_still_completes<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("late");
    let token = cx.claimed(&key).await;
    cx.clock.advance_ms(LEASE_MS * 2);
    cx.complete(&key, &token, b"slow but sole").await.unwrap();
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"slow but sole"[..])
    );
}

async fn expired_but_undeleted_record_counts_as_absent<S: Store + 'static>(cx: Ctx<S>) {
    // Completed record: live through its last second, absent after.
    let key = cx.key("expired");
    let req = cx.req(&key);
    let token = cx.claimed(&key).await;
    cx.complete(&key, &token, b"old").await.unwrap();
    cx.clock.set_ms(req.expires_at_s * 1000 + 999);
    assert!(
        cx.store.get(&key).await.unwrap().is_some(),
        "live during its expiry second"
    );
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"old"[..])
    );

    cx.clock.set_ms((req.expires_at_s + 1) * 1000);
    assert_eq!(
        cx.store.get(&key).await.unwrap(),
        None,
        "expired counts as absent"
    );
    let fresh = cx.claimed(&key).await;
    assert_ne!(fresh, token);
    assert_eq!(in_progress(cx.claim(&key).await).token, fresh);

    // In-progress record whose lease ended and which then expired: its holder can no longer
    // settle it. (It cannot expire while its lease holds: see
    // `a_claim_never_expires_before_its_lease_ends`.)
    let key = cx.key("expired-held");
    let req = cx.req(&key);
    let held = cx.claimed(&key).await;
    cx.clock.set_ms((req.expires_at_s + 1) * 1000);
    assert_eq!(cx.store.get(&key).await.unwrap(), None);
    assert_lease_lost(cx.complete(&key, &held, b"too late").await);
    assert_lease_lost(cx.store.release(&key, &held).await);
    let _ = cx.claimed(&key).await;
}

async fn an_oversized_result_completes_the_record_without_it<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("oversized");
    let token = cx.claimed(&key).await;
    let result = noise(MAX_STORED_RESULT_BYTES + 50_000, 7);
    let omitted = Completion::ResultOmitted {
        bytes: result.len(),
    };
    let before = cx.counts();
    assert_eq!(cx.complete(&key, &token, &result).await.unwrap(), omitted);
    assert_eq!(
        cx.counts() - before,
        RequestCounts {
            update_item: 1,
            ..Default::default()
        },
        "one write: the marker"
    );
    let r = completed(cx.claim(&key).await);
    assert_eq!(
        (r.result.as_deref(), r.omitted_result_bytes, &r.token),
        (None, Some(result.len()), &token),
        "{:?}: the call stays settled, without its result",
        cx.backend
    );
    let got = cx.store.get(&key).await.unwrap().expect("settled");
    assert_eq!(got, r);
    assert_lease_lost(cx.store.release(&key, &token).await);
    assert_eq!(
        cx.complete(&key, &token, b"small").await.unwrap(),
        omitted,
        "a repeated complete (a lost response) reports what was stored"
    );
}

async fn a_claim_never_expires_before_its_lease_ends<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("short-ttl");
    let now = cx.store.now_ms();
    let req = ClaimRequest {
        expires_at_s: now.div_euclid(1000) + 1,
        ..cx.req(&key)
    };
    let ClaimOutcome::Claimed { token } = cx.store.claim(req).await.unwrap() else {
        panic!("expected Claimed")
    };
    cx.clock.set_ms(req.lease_until_ms); // the lease's last millisecond, the TTL long past
    assert_eq!(in_progress(cx.claim(&key).await).token, token);
    let r = cx.store.get(&key).await.unwrap().expect("still live");
    assert!(
        r.expires_at_s >= req.lease_until_ms.div_euclid(1000),
        "{:?}: expires at {} s, lease until {} ms",
        cx.backend,
        r.expires_at_s,
        req.lease_until_ms
    );
    cx.clock.set_ms(req.lease_until_ms + 1);
    assert_ne!(
        cx.claimed(&key).await,
        token,
        "taken over once the lease ended"
    );
}

async fn completing_sets_the_expiry_from_completion<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("expiry-from-completion");
    let req = cx.req(&key);
    let token = cx.claimed(&key).await;
    cx.clock.advance_ms(50 * 60_000); // a slow call: 50 of the record's 60 minutes
    let completed_at_s = cx.store.now_ms().div_euclid(1000);
    assert_eq!(
        cx.complete(&key, &token, b"done").await.unwrap(),
        Completion::Stored
    );
    let r = cx.store.get(&key).await.unwrap().expect("completed");
    assert_eq!(r.expires_at_s, completed_at_s + TTL_S);
    cx.clock.set_ms((req.expires_at_s + 600) * 1000); // 10 minutes past the claim's expiry
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"done"[..])
    );
    cx.clock.set_ms((completed_at_s + TTL_S + 1) * 1000);
    assert_ne!(
        cx.claimed(&key).await,
        token,
        "expired a full life after completion"
    );
}

async fn results_round_trip_raw_compressed_and_empty<S: Store + 'static>(cx: Ctx<S>) {
    let compressible = |len: usize| -> Vec<u8> {
        let row = b"{\"id\":12345,\"status\":\"delivered\",\"note\":\"same row again\"},";
        row.iter().copied().cycle().take(len).collect()
    };
    let results: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("small", b"ok".to_vec()),
        ("at threshold", compressible(8 * 1024)),
        ("just over threshold", compressible(8 * 1024 + 1)),
        ("incompressible 100 KB", noise(100_000, 3)),
        ("compressible 3 MiB", compressible(3 << 20)),
        ("binary", (0..=255u8).collect()),
    ];
    for (what, result) in results {
        let key = cx.key("roundtrip");
        let token = cx.claimed(&key).await;
        cx.complete(&key, &token, &result)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let r = completed(cx.claim(&key).await);
        assert!(
            r.result.as_deref() == Some(&result[..]),
            "{what}: result differs"
        );
        let got = cx.store.get(&key).await.unwrap().expect(what);
        assert!(
            got.result.as_deref() == Some(&result[..]),
            "{what}: get differs"
        );
    }
}

async fn put_replaces_only_the_version_read_and_reads_back_completed_until_it_expires<
    S: Store + 'static,
>(
    cx: Ctx<S>,
) {
    let key = cx.key("put");
    let now_s = cx.store.now_ms().div_euclid(1000);
    let before = cx.counts();
    let first = cx
        .store
        .put(&key, "catalog", b"first", now_s + 60, None)
        .await
        .unwrap();
    assert_eq!(
        cx.counts() - before,
        RequestCounts {
            put_item: 1,
            ..Default::default()
        }
    );
    assert_eq!(cx.store.get(&key).await.unwrap().unwrap().token, first);
    // Two writers that read the same version: the first write wins, the second is told to read
    // again, so neither change is lost.
    match cx
        .store
        .put(&key, "catalog", b"blind", now_s + 60, None)
        .await
    {
        Err(StoreError::LeaseLost) => {}
        other => panic!(
            "{:?}: a put over a live record read as absent: {other:?}",
            cx.backend
        ),
    }
    let big = noise(100_000, 9);
    let second = cx
        .store
        .put(&key, "catalog", &big, now_s + 120, Some(&first))
        .await
        .unwrap();
    assert_ne!(second, first, "each version has its own token");
    match cx
        .store
        .put(&key, "catalog", b"stale", now_s + 60, Some(&first))
        .await
    {
        Err(StoreError::LeaseLost) => {}
        other => panic!(
            "{:?}: a put over a version it did not read: {other:?}",
            cx.backend
        ),
    }
    let r = cx.store.get(&key).await.unwrap().expect("put record");
    assert_eq!(r.status, Status::Completed);
    assert_eq!(r.tool, "catalog");
    assert_eq!(r.expires_at_s, now_s + 120);
    assert_eq!(r.token, second);
    assert!(
        r.result.as_deref() == Some(&big[..]),
        "the second put replaces the first, and the refused ones change nothing"
    );
    // A claimed record is replaced by a put that read it (put is for records never claimed).
    let claimed = cx.key("put-over-claim");
    let claim_token = cx.claimed(&claimed).await;
    cx.store
        .put(&claimed, "catalog", b"v", now_s + 60, Some(&claim_token))
        .await
        .unwrap();
    assert_eq!(
        completed(cx.claim(&claimed).await).result.as_deref(),
        Some(&b"v"[..])
    );
    match cx
        .store
        .put(
            &key,
            "catalog",
            &noise(MAX_STORED_RESULT_BYTES + 1, 4),
            now_s + 60,
            Some(&second),
        )
        .await
    {
        Err(StoreError::ResultTooLarge { .. }) => {}
        other => panic!("{:?}: expected ResultTooLarge, got {other:?}", cx.backend),
    }
    assert!(
        cx.store.get(&key).await.unwrap().unwrap().result.as_deref() == Some(&big[..]),
        "a refused put leaves the record as it was"
    );
    cx.clock.set_ms((now_s + 121) * 1000);
    assert_eq!(cx.store.get(&key).await.unwrap(), None, "expired");
    // An expired record counts as absent: a put that read nothing replaces it.
    let now_s = now_s + 121;
    cx.store
        .put(&key, "catalog", b"anew", now_s + 60, None)
        .await
        .unwrap();
    assert_eq!(
        cx.store.get(&key).await.unwrap().unwrap().result.as_deref(),
        Some(&b"anew"[..])
    );
}

async fn release_gives_the_key_back_once<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("release");
    let token = cx.claimed(&key).await;
    let before = cx.counts();
    cx.store.release(&key, &token).await.unwrap();
    assert_eq!(
        cx.counts() - before,
        RequestCounts {
            delete_item: 1,
            ..Default::default()
        }
    );
    assert_eq!(cx.store.get(&key).await.unwrap(), None);
    assert_lease_lost(cx.store.release(&key, &token).await);
    assert_lease_lost(cx.complete(&key, &token, b"after release").await);
    let again = cx.claimed(&key).await;
    assert_ne!(again, token);
}

async fn complete_is_idempotent_for_its_own_token_and_keeps_the_first_result<S: Store + 'static>(
    cx: Ctx<S>,
) {
    let key = cx.key("idempotent");
    let token = cx.claimed(&key).await;
    cx.complete(&key, &token, b"first").await.unwrap();
    cx.complete(&key, &token, b"second").await.unwrap();
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"first"[..])
    );
    assert_lease_lost(cx.store.release(&key, &token).await);
    assert!(
        cx.store.get(&key).await.unwrap().is_some(),
        "a completed result is never released"
    );
    assert_lease_lost(
        cx.complete(&key, &LeaseToken::new("someone else"), b"x")
            .await,
    );
}

async fn unknown_keys_cannot_be_settled_and_read_as_absent<S: Store + 'static>(cx: Ctx<S>) {
    let key = cx.key("unknown");
    let token = LeaseToken::random();
    assert_eq!(cx.store.get(&key).await.unwrap(), None);
    assert_lease_lost(cx.complete(&key, &token, b"x").await);
    assert_lease_lost(cx.store.release(&key, &token).await);
    assert_eq!(
        cx.store.get(&key).await.unwrap(),
        None,
        "a refused complete creates nothing"
    );
}

async fn an_at_most_once_claim_is_never_taken_over_and_reads_as_outcome_unknown<
    S: Store + 'static,
>(
    cx: Ctx<S>,
) {
    let key = cx.key("amo");
    let req = ClaimRequest {
        at_most_once: true,
        on_failure: Default::default(),
        ..cx.req(&key)
    };
    let ClaimOutcome::Claimed { token } = cx.store.claim(req).await.unwrap() else {
        panic!("expected Claimed")
    };
    cx.clock.set_ms(req.lease_until_ms + 1); // the owner died: its lease ended unsettled
    let held = in_progress(cx.claim(&key).await);
    assert_eq!(
        held.token, token,
        "{:?}: an at_most_once claim was taken over",
        cx.backend
    );
    assert!(held.at_most_once && held.is_outcome_unknown(cx.store.now_ms()));
    // An at_least_once claim of another key is taken over as before.
    let other = cx.key("alo");
    let other_req = cx.req(&other);
    cx.claimed(&other).await;
    cx.clock.set_ms(other_req.lease_until_ms + 1);
    cx.claimed(&other).await;
    // Once it expires, the key is free again.
    cx.clock.set_ms((req.record_expiry() + 1) * 1000);
    cx.claimed(&key).await;
}

async fn settled_unknown_is_completed_without_a_result_and_only_by_its_holder<
    S: Store + 'static,
>(
    cx: Ctx<S>,
) {
    let key = cx.key("unknown-settled");
    let token = cx.claimed(&key).await;
    let expires_at_s = cx.store.now_ms().div_euclid(1000) + TTL_S;
    assert_lease_lost(
        cx.store
            .settle_unknown(&key, &LeaseToken::new("someone else"), expires_at_s)
            .await,
    );
    cx.store
        .settle_unknown(&key, &token, expires_at_s)
        .await
        .unwrap();
    // Repeating it (a retried write) succeeds; completing it now does not.
    cx.store
        .settle_unknown(&key, &token, expires_at_s)
        .await
        .unwrap();
    assert_lease_lost(cx.complete(&key, &token, b"late").await);
    let r = completed(cx.claim(&key).await);
    assert!(r.outcome_unknown, "{:?}", cx.backend);
    assert_eq!(r.result, None);
    assert_eq!(r.expires_at_s, expires_at_s);
    assert!(r.is_outcome_unknown(cx.store.now_ms()) && r.is_settleable(cx.store.now_ms()));
    assert_eq!(cx.store.get(&key).await.unwrap(), Some(r));
    // A call its holder completed is never turned into an unknown one afterwards.
    let done = cx.key("completed-then-unknown");
    let token = cx.claimed(&done).await;
    cx.complete(&done, &token, b"ok").await.unwrap();
    assert_lease_lost(cx.store.settle_unknown(&done, &token, expires_at_s).await);
    assert!(!completed(cx.claim(&done).await).outcome_unknown);
}

async fn an_operator_settles_only_what_no_owner_can<S: Store + Records + 'static>(cx: Ctx<S>) {
    let expires_at_s = cx.store.now_ms().div_euclid(1000) + TTL_S;
    // A running owner (its lease not ended) is never overwritten, nor deleted.
    let running = cx.key("running");
    let req = cx.req(&running);
    let owner = cx.claimed(&running).await;
    for resolution in [SettleAs::Complete(b"op"), SettleAs::Release] {
        assert_lease_lost(
            cx.store
                .settle(&running, &owner, resolution, expires_at_s)
                .await,
        );
    }
    // A completed call is not the operator's either: it cannot be deleted, and completing it
    // again (what a retried write looks like) keeps the tool's own reply.
    cx.complete(&running, &owner, b"tool's own").await.unwrap();
    assert_lease_lost(
        cx.store
            .settle(&running, &owner, SettleAs::Release, expires_at_s)
            .await,
    );
    cx.store
        .settle(&running, &owner, SettleAs::Complete(b"op"), expires_at_s)
        .await
        .unwrap();
    assert_eq!(
        completed(cx.claim(&running).await).result.as_deref(),
        Some(&b"tool's own"[..])
    );

    // Settled unknown: the operator's reply is replayed from then on.
    let unknown = cx.key("to-complete");
    let token = cx.claimed(&unknown).await;
    cx.store
        .settle_unknown(&unknown, &token, expires_at_s)
        .await
        .unwrap();
    let stale = LeaseToken::new("read before someone else settled it");
    assert_lease_lost(
        cx.store
            .settle(&unknown, &stale, SettleAs::Complete(b"x"), expires_at_s)
            .await,
    );
    let reply = noise(20_000, 7); // compressed on the way in
    cx.store
        .settle(&unknown, &token, SettleAs::Complete(&reply), expires_at_s)
        .await
        .unwrap();
    cx.store
        .settle(&unknown, &token, SettleAs::Complete(b"again"), expires_at_s)
        .await
        .expect("completing again under the same token changes nothing");
    let r = completed(cx.claim(&unknown).await);
    assert!(!r.outcome_unknown);
    assert_eq!(r.result.as_deref(), Some(&reply[..]));
    assert_lease_lost(
        cx.store
            .settle(&unknown, &token, SettleAs::Release, expires_at_s)
            .await,
    );

    // Released: a retry runs again.
    let released = cx.key("to-release");
    let token = cx.claimed(&released).await;
    cx.store
        .settle_unknown(&released, &token, expires_at_s)
        .await
        .unwrap();
    cx.store
        .settle(&released, &token, SettleAs::Release, expires_at_s)
        .await
        .unwrap();
    assert_eq!(cx.store.get(&released).await.unwrap(), None);
    cx.claimed(&released).await;

    // An in-progress claim whose lease ended (its owner died) is the operator's too.
    cx.clock.set_ms(req.lease_until_ms + 1);
    let dead = cx.key("dead-owner");
    let dead_req = ClaimRequest {
        at_most_once: true,
        on_failure: Default::default(),
        ..cx.req(&dead)
    };
    let ClaimOutcome::Claimed { token } = cx.store.claim(dead_req).await.unwrap() else {
        panic!("expected Claimed")
    };
    // Not within the clock margin after its lease ended (issue 51: an operator's clock that runs
    // ahead must not release a claim whose owner still runs); after it, yes.
    cx.clock.set_ms(dead_req.lease_until_ms + 1);
    assert_lease_lost(
        cx.store
            .settle(&dead, &token, SettleAs::Release, expires_at_s)
            .await,
    );
    cx.clock
        .set_ms(dead_req.lease_until_ms + toolcall_dedup::store::SETTLE_MARGIN_MS + 1);
    cx.store
        .settle(&dead, &token, SettleAs::Release, expires_at_s)
        .await
        .unwrap();
    cx.claimed(&dead).await;
}

async fn invalid_requests_are_refused_before_any_request<S: Store + 'static>(cx: Ctx<S>) {
    let long = "k".repeat(2049);
    let before = cx.counts();
    for req in [
        cx.req(""),
        cx.req(&long),
        ClaimRequest {
            tool: "",
            ..cx.req("k")
        },
        ClaimRequest {
            fingerprint: "",
            ..cx.req("k")
        },
    ] {
        assert!(matches!(
            cx.store.claim(req).await,
            Err(StoreError::InvalidRequest(_))
        ));
    }
    assert!(matches!(
        cx.store.get("").await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert!(matches!(
        cx.complete("", &LeaseToken::random(), b"").await,
        Err(StoreError::InvalidRequest(_))
    ));
    assert_eq!(cx.counts() - before, RequestCounts::default());
    let max = "k".repeat(2048);
    let _ = cx.claimed(&max).await;
}

/// 50 callers claim one key at once: exactly one wins, every other sees the winner's claim.
/// Odd rounds race for a key whose previous holder's lease has ended (the takeover condition).
async fn fifty_concurrent_claims_have_exactly_one_winner<S: Store + 'static>(cx: Ctx<S>) {
    const CALLERS: usize = 50;
    let rounds = race_rounds();
    for round in 0..rounds {
        let key = cx.key("race");
        let previous = if round % 2 == 1 {
            let t = cx.claimed(&key).await;
            cx.clock.advance_ms(LEASE_MS + 1);
            Some(t)
        } else {
            None
        };
        let req = cx.req(&key);
        let (lease_until_ms, expires_at_s) = (req.lease_until_ms, req.expires_at_s);
        let before = cx.counts();
        let barrier = Arc::new(tokio::sync::Barrier::new(CALLERS));
        let mut set = JoinSet::new();
        for i in 0..CALLERS {
            let (store, barrier, key) = (cx.store.clone(), barrier.clone(), key.clone());
            set.spawn(async move {
                barrier.wait().await;
                let fingerprint = format!("caller-{i}");
                let req = ClaimRequest {
                    key: &key,
                    fingerprint: &fingerprint,
                    tool: "t",
                    lease_until_ms,
                    expires_at_s,
                    owner: None,
                    at_most_once: false,
                    on_failure: Default::default(),
                    path_digests: None,
                    about: CallAbout::default(),
                };
                store.claim(req).await
            });
        }
        let mut winners = Vec::new();
        let mut seen = Vec::new();
        while let Some(joined) = set.join_next().await {
            match joined
                .expect("task")
                .unwrap_or_else(|e| panic!("{:?} round {round}: {e:?}", cx.backend))
            {
                ClaimOutcome::Claimed { token } => winners.push(token),
                ClaimOutcome::InProgress(r) => seen.push(r.token),
                ClaimOutcome::Completed(r) => panic!("round {round}: unexpected Completed {r:?}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "{:?} round {round}: {} winners",
            cx.backend,
            winners.len()
        );
        let winner = &winners[0];
        assert!(
            seen.iter().all(|t| t == winner),
            "{:?} round {round}: a loser saw another owner",
            cx.backend
        );
        assert_ne!(Some(winner), previous.as_ref());
        let cost = cx.counts() - before;
        assert_eq!(
            cost.put_item, CALLERS as u64,
            "{:?} round {round}: {cost}",
            cx.backend
        );
        let fallback_reads = if cx.backend.repeat_requests() == 2 {
            CALLERS as u64 - 1
        } else {
            0
        };
        assert_eq!(
            cost.get_item, fallback_reads,
            "{:?} round {round}: {cost}",
            cx.backend
        );
        assert_eq!(in_progress(cx.claim(&key).await).token, *winner);
    }
}

async fn records_say_what_the_call_was_and_list_by_state_tool_and_time<S: Records + 'static>(
    cx: Ctx<S>,
) {
    let about = CallAbout {
        namespace: Some("envelope:payments"),
        run: Some("run-1"),
        step: Some("3"),
        keyer: Some("typed/v1"),
        policy: Some("0a1b2c3d4e5f"),
        arguments: Some("9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    };
    let settled = cx.key("settled");
    let token = match cx
        .store
        .claim(ClaimRequest {
            about,
            ..cx.req(&settled)
        })
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token } => token,
        other => panic!("{other:?}"),
    };
    cx.complete(&settled, &token, b"{\"ok\":true}")
        .await
        .unwrap();
    cx.clock.advance(Duration::from_millis(10));
    let charging = cx.key("charging");
    let charge = ClaimRequest {
        tool: "charge_card",
        at_most_once: true,
        on_failure: Default::default(),
        ..cx.req(&charging)
    };
    assert!(matches!(
        cx.store.claim(charge).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    let catalog = format!("catalog:{}", cx.key("gw"));
    let expires = cx.store.now_ms().div_euclid(1000) + TTL_S;
    cx.store
        .put(&catalog, "catalog", b"{}", expires, None)
        .await
        .unwrap();
    // A request's note of its claims is no call either.
    let note = format!("request:{}", cx.key("note"));
    cx.store
        .put(&note, "request", b"[]", expires, None)
        .await
        .unwrap();

    let list = |filter: RecordFilter| {
        let store = cx.store.clone();
        async move { store.list(&filter).await.expect("list") }
    };
    let keys = |records: Vec<Record>| records.into_iter().map(|r| r.key).collect::<Vec<_>>();

    let all = list(RecordFilter::default()).await;
    assert_eq!(
        keys(all.clone()),
        [charging.clone(), settled.clone()],
        "newest first, no catalog and no request note"
    );
    let read = all.iter().find(|r| r.key == settled).unwrap();
    assert_eq!(read.about.namespace.as_deref(), Some("envelope:payments"));
    assert_eq!(read.about.run.as_deref(), Some("run-1"));
    assert_eq!(read.about.step.as_deref(), Some("3"));
    assert_eq!(read.about.keyer.as_deref(), Some("typed/v1"));
    assert_eq!(read.about.policy.as_deref(), Some("0a1b2c3d4e5f"));
    assert_eq!(
        read.about.arguments.as_deref(),
        Some("9f8e7d6c5b4a39281706f5e4d3c2b1a0")
    );
    assert_eq!(read.about.door(), Some("envelope"));
    assert_eq!(
        all[0].about,
        RecordAbout::default(),
        "nothing said, nothing stored"
    );

    let by_state = |state| RecordFilter {
        state: Some(state),
        ..RecordFilter::default()
    };
    assert_eq!(
        keys(list(by_state(RecordState::Completed)).await),
        std::slice::from_ref(&settled)
    );
    assert_eq!(
        keys(list(by_state(RecordState::InProgress)).await),
        std::slice::from_ref(&charging)
    );
    assert!(list(by_state(RecordState::Unknown)).await.is_empty());
    let by_tool = RecordFilter {
        tool: Some("charge_card".into()),
        ..RecordFilter::default()
    };
    assert_eq!(keys(list(by_tool).await), std::slice::from_ref(&charging));
    let since = RecordFilter {
        since_ms: Some(all[0].created_at_ms),
        ..RecordFilter::default()
    };
    assert_eq!(keys(list(since).await), std::slice::from_ref(&charging));
    let one = RecordFilter {
        limit: 1,
        ..RecordFilter::default()
    };
    assert_eq!(keys(list(one).await), std::slice::from_ref(&charging));
    // A scan reads a bounded number of items: one item read lists at most one of the two.
    let one_read = RecordFilter {
        max_scanned: 1,
        ..RecordFilter::default()
    };
    let read = keys(list(one_read).await);
    assert!(
        read.len() <= 1 && read.iter().all(|k| *k == charging || *k == settled),
        "{read:?}"
    );

    // The at-most-once claim's lease ends: its outcome is unknown (found through the index).
    cx.clock.advance(Duration::from_millis(LEASE_MS as u64 + 1));
    assert_eq!(
        keys(list(by_state(RecordState::Unknown)).await),
        std::slice::from_ref(&charging)
    );
    assert!(list(by_state(RecordState::InProgress)).await.is_empty());

    // Settled as unknown by a holder: still listed as unknown, and gone once settled.
    let lost = cx.key("lost");
    let (lost_token, expires) = cx.settled_unknown(&lost).await;
    assert_eq!(
        keys(list(by_state(RecordState::Unknown)).await),
        [lost.clone(), charging.clone()]
    );
    cx.store
        .settle(&lost, &lost_token, SettleAs::Complete(b"{}"), expires)
        .await
        .unwrap();
    assert_eq!(
        keys(list(by_state(RecordState::Unknown)).await),
        std::slice::from_ref(&charging)
    );
    assert!(
        keys(list(by_state(RecordState::Completed)).await).contains(&lost),
        "{:?}",
        cx.backend
    );
}

async fn evict_removes_only_a_completed_record_at_the_version_read<S: Records + 'static>(
    cx: Ctx<S>,
) {
    let key = cx.key("evict");
    let token = cx.claimed(&key).await;
    assert_lease_lost(cx.store.evict(&key, &token).await);
    assert!(
        cx.store.get(&key).await.unwrap().is_some(),
        "a running claim stays"
    );
    cx.complete(&key, &token, b"{}").await.unwrap();
    assert_lease_lost(cx.store.evict(&key, &LeaseToken::new("another")).await);
    cx.store.evict(&key, &token).await.expect("evict");
    assert!(cx.store.get(&key).await.unwrap().is_none());
    assert_lease_lost(cx.store.evict(&key, &token).await);
    let again = cx.claimed(&key).await;
    assert_ne!(again, token, "the same call claims and runs again");

    // An unknown outcome is the operator's to settle, not to evict.
    let unknown = cx.key("unknown");
    let (held, _) = cx.settled_unknown(&unknown).await;
    assert_lease_lost(cx.store.evict(&unknown, &held).await);
    assert!(cx.store.get(&unknown).await.unwrap().is_some());

    // An expired record goes whatever it was.
    cx.clock.advance(Duration::from_secs(TTL_S as u64 + 1));
    cx.store
        .evict(&unknown, &held)
        .await
        .expect("evict expired");
    assert!(
        cx.store
            .list(&RecordFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// One test per case and backend

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod memory {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let clock = ManualClock::starting_now();
                    let store = servers::memory_store(clock.clone());
                    super::$case(Ctx { store: Arc::new(store), clock, backend: Backend::Memory }).await;
                }
            )*
        }
        mod moto {
            use super::*;
            $(
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let clock = ManualClock::starting_now();
                    let store = servers::dynamodb_store(Backend::Moto, clock.clone()).await;
                    super::$case(Ctx { store: Arc::new(store), clock, backend: Backend::Moto }).await;
                }
            )*
        }
        mod dynalite {
            use super::*;
            $(
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let clock = ManualClock::starting_now();
                    let store = servers::dynamodb_store(Backend::Dynalite, clock.clone()).await;
                    super::$case(Ctx { store: Arc::new(store), clock, backend: Backend::Dynalite }).await;
                }
            )*
        }
    };
}

conformance!(
    first_claim_wins_and_a_second_caller_sees_it_in_progress,
    an_extended_lease_keeps_the_key_and_only_its_holder_can_extend,
    a_handed_over_claim_answers_only_to_its_new_token,
    a_hand_over_from_a_lease_moved_since_it_was_read_is_refused,
    repeat_returns_completed_with_the_result_for_the_expected_request_count,
    claim_in_flight_returns_in_progress_until_the_lease_ends,
    expired_lease_lets_a_new_caller_take_over,
    stale_token_cannot_complete_or_release_after_takeover,
    killed_caller_blocks_its_key_only_until_its_lease_ends,
    late_complete_without_takeover_still_completes,
    expired_but_undeleted_record_counts_as_absent,
    an_oversized_result_completes_the_record_without_it,
    a_claim_never_expires_before_its_lease_ends,
    completing_sets_the_expiry_from_completion,
    results_round_trip_raw_compressed_and_empty,
    release_gives_the_key_back_once,
    put_replaces_only_the_version_read_and_reads_back_completed_until_it_expires,
    complete_is_idempotent_for_its_own_token_and_keeps_the_first_result,
    unknown_keys_cannot_be_settled_and_read_as_absent,
    invalid_requests_are_refused_before_any_request,
    fifty_concurrent_claims_have_exactly_one_winner,
    an_at_most_once_claim_is_never_taken_over_and_reads_as_outcome_unknown,
    settled_unknown_is_completed_without_a_result_and_only_by_its_holder,
    an_operator_settles_only_what_no_owner_can,
    records_say_what_the_call_was_and_list_by_state_tool_and_time,
    evict_removes_only_a_completed_record_at_the_version_read,
    a_claims_rule_for_failures_reads_back_as_written,
);

// ---------------------------------------------------------------------------------------------
// DynamoDB only: faults injected into real round trips, table creation, configuration

/// Fault injected into the first `times` responses of one operation, after the server applied it.
#[derive(Debug)]
struct Fault {
    operation: &'static str,
    kind: FaultKind,
    /// Responses of the operation left alone before the fault starts.
    skip: AtomicU32,
    remaining: AtomicU32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FaultKind {
    /// The response never reaches the caller (what a timeout after the write looks like).
    LoseResponse,
    /// The response is replaced by a throttling error.
    Throttle,
    /// The response is replaced by an internal server error (retried; the write may have applied).
    ServerError,
    /// The response is replaced by an access refusal (final).
    AccessDenied,
}

impl FaultKind {
    /// The answer that replaces the server's, for the kinds that replace one.
    fn answer(self) -> Option<(u16, &'static str)> {
        match self {
            FaultKind::LoseResponse => None,
            FaultKind::Throttle => Some((400, "ProvisionedThroughputExceededException")),
            FaultKind::ServerError => Some((500, "InternalServerError")),
            FaultKind::AccessDenied => Some((400, "AccessDeniedException")),
        }
    }
}

impl Fault {
    fn new(operation: &'static str, kind: FaultKind, times: u32) -> Self {
        Fault::after(0, operation, kind, times)
    }

    /// The fault, from the `skip + 1`th response of `operation` on.
    fn after(skip: u32, operation: &'static str, kind: FaultKind, times: u32) -> Self {
        Fault {
            operation,
            kind,
            skip: AtomicU32::new(skip),
            remaining: AtomicU32::new(times),
        }
    }

    fn fire(&self, kind: FaultKind, cfg: &ConfigBag) -> bool {
        let take = |n: &AtomicU32| {
            n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        kind == self.kind
            && cfg
                .load::<Metadata>()
                .is_some_and(|m| m.name() == self.operation)
            && !take(&self.skip)
            && take(&self.remaining)
    }
}

impl Intercept for Fault {
    fn name(&self) -> &'static str {
        "store_conformance::Fault"
    }

    fn read_after_transmit(
        &self,
        _ctx: &BeforeDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.fire(FaultKind::LoseResponse, cfg) {
            return Err("injected fault: response lost".into());
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        ctx: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some((status, code)) = self.kind.answer().filter(|_| self.fire(self.kind, cfg)) {
            let body = format!(
                r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}","message":"injected"}}"#
            );
            let mut response =
                HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::from(body));
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            *ctx.response_mut() = response;
        }
        Ok(())
    }
}

async fn faulty_store(
    backend: Backend,
    clock: ManualClock,
    fault: Fault,
) -> toolcall_dedup::store::DynamoDbStore {
    servers::dynamodb_store_with(
        backend,
        clock,
        servers::config(),
        vec![servers::with_interceptor(fault)],
    )
    .await
}

fn ctx<S: Store + 'static>(store: S, clock: ManualClock, backend: Backend) -> Ctx<S> {
    Ctx {
        store: Arc::new(store),
        clock,
        backend,
    }
}

async fn claim_whose_response_was_lost_is_still_ours(backend: Backend) {
    let clock = ManualClock::starting_now();
    let store = faulty_store(
        backend,
        clock.clone(),
        Fault::new("PutItem", FaultKind::LoseResponse, 1),
    )
    .await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("lost-claim");
    let token = cx.claimed(&key).await;
    let c = cx.counts();
    assert_eq!(c.put_item, 2, "{c}");
    assert_eq!(c.get_item, backend.repeat_requests() - 1, "{c}");
    assert_eq!(in_progress(cx.claim(&key).await).token, token);
    cx.complete(&key, &token, b"r").await.unwrap();
}

/// A claim refused because another caller holds the key, whose answers were all lost: the
/// read-back finds the other caller's claim, which it must leave alone (no delete is sent).
async fn a_lost_claim_read_back_under_another_token_is_left_alone(backend: Backend) {
    let clock = ManualClock::starting_now();
    let cfg = servers::config();
    let rival = servers::dynamodb_store_with(backend, clock.clone(), cfg.clone(), vec![]).await;
    let lossy = servers::dynamodb_store_with(
        backend,
        clock.clone(),
        cfg,
        vec![servers::with_interceptor(Fault::new(
            "PutItem",
            FaultKind::LoseResponse,
            u32::MAX,
        ))],
    )
    .await;
    let rival = ctx(rival, clock.clone(), backend);
    let key = rival.key("held-by-a-rival");
    let rival_token = rival.claimed(&key).await;
    let cx = ctx(lossy, clock, backend);
    let outcome = cx.store.claim(cx.req(&key)).await;
    assert!(outcome.is_err(), "{backend:?}: {outcome:?}");
    let c = cx.counts();
    assert_eq!(
        c.delete_item, 0,
        "{backend:?}: released a claim not its own: {c}"
    );
    assert_eq!(in_progress(rival.claim(&key).await).token, rival_token);
}

async fn complete_whose_response_was_lost_still_succeeds(backend: Backend) {
    let clock = ManualClock::starting_now();
    let store = faulty_store(
        backend,
        clock.clone(),
        Fault::new("UpdateItem", FaultKind::LoseResponse, 1),
    )
    .await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("lost-complete");
    let token = cx.claimed(&key).await;
    cx.complete(&key, &token, b"applied once").await.unwrap();
    assert_eq!(cx.counts().update_item, 2);
    assert_eq!(
        completed(cx.claim(&key).await).result.as_deref(),
        Some(&b"applied once"[..])
    );
}

async fn release_whose_response_was_lost_still_succeeds(backend: Backend) {
    let clock = ManualClock::starting_now();
    let store = faulty_store(
        backend,
        clock.clone(),
        Fault::new("DeleteItem", FaultKind::LoseResponse, 1),
    )
    .await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("lost-release");
    let token = cx.claimed(&key).await;
    cx.store.release(&key, &token).await.unwrap();
    assert_eq!(cx.counts().delete_item, 2);
    assert_eq!(cx.store.get(&key).await.unwrap(), None);
}

async fn throttled_requests_are_retried(backend: Backend) {
    let clock = ManualClock::starting_now();
    let store = faulty_store(
        backend,
        clock.clone(),
        Fault::new("GetItem", FaultKind::Throttle, 2),
    )
    .await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("throttled");
    let token = cx.claimed(&key).await;
    assert_eq!(
        cx.store.get(&key).await.unwrap().expect("record").token,
        token
    );
    assert_eq!(
        cx.counts().get_item,
        3,
        "two throttled attempts, then the answer"
    );
}

/// The product's claim budget, not the tests' patient one, with this breaker.
async fn budgeted_store(
    backend: Backend,
    clock: ManualClock,
    breaker_open_for: Duration,
    faults: Vec<Fault>,
) -> toolcall_dedup::store::DynamoDbStore {
    let cfg = DynamoDbConfig {
        claim: ClaimBudget::within(ClaimBudget::DEFAULT_WITHIN, breaker_open_for),
        ..servers::config()
    };
    let interceptors = faults.into_iter().map(servers::with_interceptor).collect();
    servers::dynamodb_store_with(backend, clock, cfg, interceptors).await
}

/// A claim write that may have applied (a 500 after the server wrote it), then a final refusal
/// (credentials revoked: the retry and the read-back are denied): the token is handed back, so
/// that the claim is released at the next chance instead of blocking the key for its lease.
async fn a_claim_that_may_have_applied_then_was_refused_hands_its_token_back(backend: Backend) {
    let clock = ManualClock::starting_now();
    let faults = vec![
        Fault::new("PutItem", FaultKind::ServerError, 1),
        Fault::after(1, "PutItem", FaultKind::AccessDenied, 1),
        Fault::new("GetItem", FaultKind::AccessDenied, 1),
    ];
    let store = budgeted_store(backend, clock.clone(), Duration::ZERO, faults).await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("applied-then-denied");
    let token = match cx.store.claim(cx.req(&key)).await {
        Err(StoreError::ClaimUnconfirmed { token, .. }) => token,
        other => panic!("{backend:?}: expected ClaimUnconfirmed, got {other:?}"),
    };
    // The faults are spent: the store reads again.
    let written = cx
        .store
        .get(&key)
        .await
        .unwrap()
        .expect("the first write applied");
    assert_eq!(written.token, token, "the token handed back is the claim's");
    cx.store.release(&key, &token).await.unwrap();
}

async fn a_claim_rides_out_one_throttle_within_its_budget(backend: Backend) {
    let clock = ManualClock::starting_now();
    let fault = Fault::new("PutItem", FaultKind::Throttle, 1);
    let store = budgeted_store(backend, clock.clone(), Duration::ZERO, vec![fault]).await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("throttled-once");
    cx.claimed(&key).await;
    assert_eq!(
        cx.counts().put_item,
        2,
        "one throttled attempt, then the claim"
    );
}

async fn a_claim_fails_closed_within_its_budget_then_the_breaker_answers_until_a_probe(
    backend: Backend,
) {
    let clock = ManualClock::starting_now();
    let open_for = Duration::from_millis(300);
    // Every write and read answer is lost: the claim may have applied and cannot be read back.
    let faults = vec![
        Fault::new("PutItem", FaultKind::LoseResponse, u32::MAX),
        Fault::new("GetItem", FaultKind::LoseResponse, u32::MAX),
    ];
    let store = budgeted_store(backend, clock.clone(), open_for, faults).await;
    let cx = ctx(store, clock, backend);
    let (first, second) = (cx.key("outage-1"), cx.key("outage-2"));
    let started = std::time::Instant::now();
    match cx.store.claim(cx.req(&first)).await {
        Err(StoreError::ClaimUnconfirmed { .. }) => {}
        other => panic!("{backend:?}: expected ClaimUnconfirmed, got {other:?}"),
    }
    // Well inside the store's 5 s deadline: the budget, not the deadline, ended it.
    assert!(
        started.elapsed() < RetryPolicy::default().attempt_timeout,
        "{:?}",
        started.elapsed()
    );
    let sent = cx.counts();
    assert!(sent.put_item >= 2, "retried within the budget: {sent:?}");
    // The breaker is open: the next claim fails at once, without a request.
    match cx.store.claim(cx.req(&second)).await {
        Err(StoreError::Unavailable(source)) => assert!(source.is::<BreakerOpen>(), "{source}"),
        other => panic!("{backend:?}: expected the open breaker, got {other:?}"),
    }
    assert_eq!(cx.counts(), sent, "no request while the breaker is open");
    // Once it has been open long enough, a claim asks the store again.
    tokio::time::sleep(open_for).await;
    assert!(cx.store.claim(cx.req(&second)).await.is_err());
    assert!(
        cx.counts().put_item > sent.put_item,
        "the probe reached the store"
    );
}

/// A store answering every request with a 500, in front of the guard: each call fails closed
/// within the claim budget, however many claims it left behind. A claim whose answers were lost
/// is released at the next call; that release must not take the store's 5 s deadline (it did,
/// one lost claim after another, so the n-th call of an outage waited about 5(n - 1) s), and once
/// the store has answered it with a failure, the call fails closed without claiming.
async fn an_outage_fails_every_call_closed_within_the_budget_however_many_claims_were_lost(
    backend: Backend,
) {
    use toolcall_dedup::guard::{Dedup, GuardError};
    use toolcall_dedup::key::{Call, Keyer};

    let clock = ManualClock::starting_now();
    let faults = ["PutItem", "GetItem", "DeleteItem"]
        .map(|op| Fault::new(op, FaultKind::ServerError, u32::MAX))
        .into();
    let store = budgeted_store(backend, clock, Duration::ZERO, faults).await;
    let counter = store.clone();
    let dedup = Dedup::new(store, Keyer::new());
    let runs = AtomicU32::new(0);
    for n in 1..=3 {
        let args = format!(r#"{{"order": "o-{n}"}}"#);
        let call = Call {
            tool: "charge_card",
            args: &args,
            run_id: Some("run-outage"),
            ..Call::default()
        };
        let before = counter.requests();
        let started = std::time::Instant::now();
        let result = dedup
            .run(&call, || async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            })
            .await;
        let took = started.elapsed();
        assert!(
            matches!(result, Err(GuardError::Store(_))),
            "{backend:?} call {n}: {result:?}"
        );
        assert!(
            took < RetryPolicy::default().attempt_timeout,
            "{backend:?} call {n} failed closed after {took:?}"
        );
        let sent = counter.requests();
        if n == 1 {
            assert!(sent.put_item > before.put_item, "the first call claims");
        } else {
            assert!(
                sent.delete_item > before.delete_item,
                "{backend:?} call {n}: the lost claims are released first"
            );
            assert_eq!(
                sent.put_item, before.put_item,
                "{backend:?} call {n}: refused releases fail the call closed without a claim"
            );
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "fail closed: nothing ran");
}

/// A claim written while every answer to it was lost fails its call closed; the next call of the
/// key releases that claim first (the store answers again) and runs, instead of waiting out the
/// claim's lease.
async fn a_lost_claim_is_released_at_the_next_call_and_its_key_runs(backend: Backend) {
    use toolcall_dedup::guard::{Dedup, GuardError};
    use toolcall_dedup::key::{Call, Keyer};

    let clock = ManualClock::starting_now();
    let store = servers::Faulty::new(servers::dynamodb_store(backend, clock).await);
    // The first claim is written, and every answer to it lost.
    store.lose_claim_answers.store(1, Ordering::SeqCst);
    let counter = store.inner.clone();
    let dedup = Dedup::new(store, Keyer::new());
    let runs = AtomicU32::new(0);
    let call = Call {
        tool: "charge_card",
        args: r#"{"order": "o-lost"}"#,
        run_id: Some("run-lost"),
        ..Call::default()
    };
    let charge = || async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<_, std::io::Error>(())
    };
    let lost = dedup.run(&call, charge).await;
    assert!(
        matches!(lost, Err(GuardError::Store(_))),
        "{backend:?}: {lost:?}"
    );
    let before = counter.requests();
    let ran = dedup.run(&call, charge).await;
    assert!(ran.is_ok(), "{backend:?}: {ran:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the retry ran, once");
    assert!(
        counter.requests().delete_item > before.delete_item,
        "{backend:?}: the lost claim was released first"
    );
}

async fn store_gives_up_with_unavailable_at_its_deadline(backend: Backend) {
    let clock = ManualClock::starting_now();
    let mut cfg = servers::config();
    cfg.retry = RetryPolicy {
        deadline: Duration::from_millis(300),
        ..RetryPolicy::default()
    };
    let fault = Fault::new("GetItem", FaultKind::LoseResponse, u32::MAX);
    let store =
        servers::dynamodb_store_with(backend, clock, cfg, vec![servers::with_interceptor(fault)])
            .await;
    let started = std::time::Instant::now();
    let err = store.get("any").await.expect_err("every response is lost");
    assert!(err.is_retryable(), "{err:?}");
    let StoreError::Unavailable(source) = &err else {
        panic!("expected Unavailable, got {err:?}")
    };
    let exhausted = source
        .downcast_ref::<RetriesExhausted>()
        .expect("RetriesExhausted source");
    assert_eq!(exhausted.operation, "GetItem");
    assert!(exhausted.attempts >= 2, "{exhausted}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "deadline respected: {:?}",
        started.elapsed()
    );
    assert_eq!(store.requests().get_item, u64::from(exhausted.attempts));
}

async fn table_create_is_idempotent_and_reports_ttl(backend: Backend) {
    let client = servers::client(&backend.endpoint(), Vec::new());
    let cfg = servers::config();
    let first = create_table_with_client(&client, &cfg).await.unwrap();
    let second = create_table_with_client(&client, &cfg).await.unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert!(
        first.index_added && !second.index_added,
        "{first} / {second}"
    );
    match backend {
        Backend::Moto => {
            assert_eq!(
                first.ttl,
                TtlState::Enabled {
                    attribute: "expires_at".into()
                }
            );
            assert_eq!(
                second.ttl,
                TtlState::AlreadyEnabled {
                    attribute: "expires_at".into()
                }
            );
        }
        _ => {
            assert!(matches!(first.ttl, TtlState::Unsupported { .. }), "{first}");
        }
    }
    assert!(first.to_string().contains(&cfg.table));

    let other_key = DynamoDbConfig {
        key_attribute: "id".into(),
        ..cfg.clone()
    };
    match create_table_with_client(&client, &other_key).await {
        Err(StoreError::Config { message, .. }) => assert!(message.contains("\"id\""), "{message}"),
        other => panic!("expected a key schema Config error, got {other:?}"),
    }
}

/// Tables made before records had an attention index get it from `dedup table create`, and the
/// unknown outcomes written before are listed once the index has them.
async fn a_table_made_before_the_index_gets_it(backend: Backend) {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let client = servers::client(&backend.endpoint(), Vec::new());
    let cfg = servers::config();
    client
        .create_table()
        .table_name(&cfg.table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(&cfg.key_attribute)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(&cfg.key_attribute)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("an old-style table");
    let report = match (backend, create_table_with_client(&client, &cfg).await) {
        (_, Ok(report)) => report,
        // dynalite wants provisioned throughput for a new index even on an on-demand table
        // (DynamoDB refuses it there): the failure must say what it was doing.
        (Backend::Dynalite, Err(StoreError::Config { message, .. })) => {
            assert!(
                message.contains("adding the index \"attention\""),
                "{message}"
            );
            return;
        }
        (_, Err(e)) => panic!("{e:?}"),
    };
    assert!(!report.created && report.index_added, "{report}");
    assert!(
        report.to_string().contains("index attention added"),
        "{report}"
    );
    let clock = ManualClock::starting_now();
    let store = toolcall_dedup::store::DynamoDbStore::new(&client, cfg)
        .unwrap()
        .with_clock(clock.clone());
    let cx = Ctx {
        store: Arc::new(store),
        clock,
        backend,
    };
    let key = cx.key("old");
    let req = ClaimRequest {
        at_most_once: true,
        on_failure: Default::default(),
        ..cx.req(&key)
    };
    assert!(matches!(
        cx.store.claim(req).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    cx.clock.advance(Duration::from_millis(LEASE_MS as u64 + 1));
    let unknown = RecordFilter {
        state: Some(RecordState::Unknown),
        ..RecordFilter::default()
    };
    let listed = cx.store.list(&unknown).await.unwrap();
    assert_eq!(listed.iter().map(|r| &r.key).collect::<Vec<_>>(), [&key]);
}

async fn custom_attribute_names_are_used(backend: Backend) {
    let clock = ManualClock::starting_now();
    let cfg = DynamoDbConfig {
        key_attribute: "id".into(),
        ttl_attribute: "ttl".into(),
        ..servers::config()
    };
    let store = servers::dynamodb_store_with(backend, clock.clone(), cfg.clone(), Vec::new()).await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("custom");
    let req = cx.req(&key);
    let token = cx.claimed(&key).await;
    cx.complete(&key, &token, b"r").await.unwrap();

    let item = cx
        .store
        .client()
        .get_item()
        .table_name(&cfg.table)
        .key(
            "id",
            aws_sdk_dynamodb::types::AttributeValue::S(key.clone()),
        )
        .send()
        .await
        .unwrap()
        .item
        .expect("item under the custom key");
    assert_eq!(
        item.get("ttl").and_then(|v| v.as_n().ok()),
        Some(&req.expires_at_s.to_string())
    );
    assert!(!item.contains_key("pk") && !item.contains_key("expires_at"));
    assert_eq!(
        toolcall_dedup::store::decode_item(&cfg, &item)
            .unwrap()
            .token,
        token
    );

    cx.clock.set_ms((req.expires_at_s + 1) * 1000);
    let _ = cx.claimed(&key).await; // the condition reads the custom TTL attribute
}

macro_rules! dynamodb_only {
    ($($case:ident),* $(,)?) => {
        mod moto_only_dynamodb {
            $(
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::Moto).await;
                }
            )*
        }
        mod dynalite_only_dynamodb {
            $(
                #[cfg_attr(not(feature = "local-servers"), ignore = "needs the local DynamoDB servers: run scripts/test")]
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::Dynalite).await;
                }
            )*
        }
    };
}

/// With a results bucket, a result past the item limit goes to S3 and replays byte for byte, fenced
/// and repeatable like any completion; an object that is missing or altered is "stored result
/// unavailable", never a claimable key.
async fn an_oversized_result_goes_to_the_results_bucket(backend: Backend) {
    let clock = ManualClock::starting_now();
    let store = servers::dynamodb_store_offloading(backend, clock.clone()).await;
    let cx = ctx(store, clock, backend);
    let key = cx.key("offloaded");
    let token = cx.claimed(&key).await;
    let result = noise(MAX_STORED_RESULT_BYTES + 50_000, 9);
    let offloaded = Completion::Offloaded {
        bytes: result.len(),
    };
    assert_lease_lost(cx.complete(&key, &LeaseToken::new("stale"), &result).await);
    assert_eq!(cx.complete(&key, &token, &result).await.unwrap(), offloaded);
    assert_eq!(
        cx.complete(&key, &token, b"small").await.unwrap(),
        offloaded,
        "a repeated complete (a lost response) reports what was stored"
    );
    let r = completed(cx.claim(&key).await);
    assert_eq!(r.result.as_deref(), Some(&result[..]), "{backend:?}");
    let pointer = r
        .offloaded
        .clone()
        .expect("the record points to the object");
    assert_eq!(pointer.bytes, result.len());
    assert!(
        pointer.object.ends_with(&format!("{key}/{token}")),
        "{pointer:?}"
    );
    assert_eq!(cx.store.get(&key).await.unwrap().unwrap().result, r.result);

    // A small result stays in the item.
    let small = cx.key("small");
    let small_token = cx.claimed(&small).await;
    assert_eq!(
        cx.complete(&small, &small_token, b"{}").await.unwrap(),
        Completion::Stored
    );

    // The object altered, then gone: the record stays completed, the result unavailable.
    let bucket = cx.store.result_bucket().unwrap().bucket().to_string();
    let mut altered = result.clone();
    altered[100] ^= 1;
    servers::s3_put(&bucket, &pointer.object, altered).await;
    match cx.store.claim(cx.req(&key)).await {
        Err(StoreError::ResultUnavailable { why, .. }) => assert!(why.contains("SHA-256"), "{why}"),
        other => panic!("{backend:?}: expected ResultUnavailable, got {other:?}"),
    }
    servers::s3_delete(&bucket, &pointer.object).await;
    match cx.store.get(&key).await {
        Err(StoreError::ResultUnavailable { why, .. }) => assert!(why.contains("missing"), "{why}"),
        other => panic!("{backend:?}: expected ResultUnavailable, got {other:?}"),
    }
}

/// A results bucket that refuses the object (missing, denied, a KMS key it cannot use): the call
/// ran, so it is settled as ran with its result omitted, as without a bucket, never left in
/// progress for a retry to run again once the lease ends.
async fn an_offload_the_bucket_refuses_settles_the_call_without_its_result(backend: Backend) {
    let clock = ManualClock::starting_now();
    let missing = toolcall_dedup::store::ResultBucket::new(
        servers::s3_client(),
        format!("dedup-missing-{}", uuid::Uuid::new_v4().simple()),
    );
    let store = servers::dynamodb_store(backend, clock.clone())
        .await
        .with_result_bucket(missing);
    let cx = ctx(store, clock, backend);
    let key = cx.key("offload-refused");
    let token = cx.claimed(&key).await;
    let result = noise(MAX_STORED_RESULT_BYTES + 50_000, 9);
    assert_eq!(
        cx.complete(&key, &token, &result).await.unwrap(),
        Completion::ResultOmitted {
            bytes: result.len()
        }
    );
    let r = completed(cx.claim(&key).await);
    assert_eq!(r.result, None);
    assert_eq!(r.omitted_result_bytes, Some(result.len()));
}

dynamodb_only!(
    an_oversized_result_goes_to_the_results_bucket,
    an_offload_the_bucket_refuses_settles_the_call_without_its_result,
    claim_whose_response_was_lost_is_still_ours,
    complete_whose_response_was_lost_still_succeeds,
    release_whose_response_was_lost_still_succeeds,
    throttled_requests_are_retried,
    a_claim_rides_out_one_throttle_within_its_budget,
    a_claim_that_may_have_applied_then_was_refused_hands_its_token_back,
    a_lost_claim_read_back_under_another_token_is_left_alone,
    a_claim_fails_closed_within_its_budget_then_the_breaker_answers_until_a_probe,
    an_outage_fails_every_call_closed_within_the_budget_however_many_claims_were_lost,
    a_lost_claim_is_released_at_the_next_call_and_its_key_runs,
    store_gives_up_with_unavailable_at_its_deadline,
    table_create_is_idempotent_and_reports_ttl,
    a_table_made_before_the_index_gets_it,
    custom_attribute_names_are_used,
);

/// `dedup table create --endpoint URL --table NAME` runs this: the client comes from
/// `build_client`, with dummy credentials when none are configured.
#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_create_through_an_endpoint_url() {
    let cfg = servers::config();
    let report = toolcall_dedup::store::table::create_table(Some(&Backend::Moto.endpoint()), &cfg)
        .await
        .unwrap();
    assert!(report.created, "{report}");
    assert_eq!(
        report.ttl,
        TtlState::Enabled {
            attribute: "expires_at".into()
        }
    );
}

// ---------------------------------------------------------------------------------------------
// The memory store is the DynamoDB store's twin: random operation sequences, applied to both with
// one clock, must give the same answers step by step.

/// An outcome with tokens replaced by the index of the claim that issued them.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Claimed(usize),
    Record {
        status: Status,
        owner: Option<usize>,
        lease_until_ms: i64,
        expires_at_s: i64,
        result: Option<Vec<u8>>,
    },
    Absent,
    Ok,
    Completed(Completion),
    Err(String),
}

struct Twin<S> {
    store: S,
    tokens: Vec<(String, LeaseToken)>,
}

impl<S: Store> Twin<S> {
    fn record(&self, r: Record) -> Seen {
        Seen::Record {
            status: r.status,
            owner: self.tokens.iter().position(|(_, t)| *t == r.token),
            lease_until_ms: r.lease_until_ms,
            expires_at_s: r.expires_at_s,
            result: r.result,
        }
    }

    fn unit(r: Result<(), StoreError>) -> Seen {
        match r {
            Ok(()) => Seen::Ok,
            Err(e) => Seen::Err(format!("{e:?}")),
        }
    }

    async fn apply(&mut self, op: &TwinOp, now_ms: i64) -> Seen {
        match op {
            TwinOp::Claim {
                key,
                lease_ms,
                ttl_s,
            } => {
                let req = ClaimRequest {
                    key,
                    fingerprint: "fp",
                    tool: "t",
                    lease_until_ms: now_ms + lease_ms,
                    expires_at_s: now_ms.div_euclid(1000) + ttl_s,
                    owner: None,
                    at_most_once: false,
                    on_failure: Default::default(),
                    path_digests: None,
                    about: CallAbout::default(),
                };
                match self.store.claim(req).await {
                    Ok(ClaimOutcome::Claimed { token }) => {
                        self.tokens.push((key.clone(), token));
                        Seen::Claimed(self.tokens.len() - 1)
                    }
                    Ok(ClaimOutcome::Completed(r) | ClaimOutcome::InProgress(r)) => self.record(r),
                    Err(e) => Seen::Err(format!("{e:?}")),
                }
            }
            TwinOp::Complete {
                claim,
                result,
                ttl_s,
            } => match self.tokens.get(*claim) {
                Some((key, token)) => {
                    let expires_at_s = now_ms.div_euclid(1000) + ttl_s;
                    match self.store.complete(key, token, result, expires_at_s).await {
                        Ok(completion) => Seen::Completed(completion),
                        Err(e) => Seen::Err(format!("{e:?}")),
                    }
                }
                None => Seen::Absent,
            },
            TwinOp::Release { claim } => match self.tokens.get(*claim) {
                Some((key, token)) => Self::unit(self.store.release(key, token).await),
                None => Seen::Absent,
            },
            TwinOp::Get { key } => match self.store.get(key).await {
                Ok(Some(r)) => self.record(r),
                Ok(None) => Seen::Absent,
                Err(e) => Seen::Err(format!("{e:?}")),
            },
            TwinOp::Advance { .. } => Seen::Ok,
        }
    }
}

#[derive(Debug)]
enum TwinOp {
    Claim {
        key: String,
        lease_ms: i64,
        ttl_s: i64,
    },
    Complete {
        claim: usize,
        result: Vec<u8>,
        ttl_s: i64,
    },
    Release {
        claim: usize,
    },
    Get {
        key: String,
    },
    Advance {
        ms: i64,
    },
}

fn twin_ops(seed: u64, len: usize, keys: &[String]) -> Vec<TwinOp> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut claims_so_far = 0usize;
    (0..len)
        .map(|_| {
            let key = keys[rng.usize(..keys.len())].clone();
            match rng.u8(..10) {
                0..=2 => {
                    claims_so_far += 1; // an upper bound: not every claim is granted
                    TwinOp::Claim {
                        key,
                        lease_ms: rng.i64(1..20_000),
                        ttl_s: rng.i64(1..60),
                    }
                }
                3 | 4 => TwinOp::Complete {
                    claim: rng.usize(..claims_so_far.max(1)),
                    result: if rng.bool() {
                        noise(rng.usize(..64), rng.u64(..))
                    } else {
                        vec![b'x'; 20_000]
                    },
                    ttl_s: rng.i64(1..60),
                },
                5 => TwinOp::Release {
                    claim: rng.usize(..claims_so_far.max(1)),
                },
                6 | 7 => TwinOp::Get { key },
                _ => TwinOp::Advance {
                    ms: rng.i64(0..15_000),
                },
            }
        })
        .collect()
}

async fn memory_twin_agrees_with(backend: Backend) {
    // What the sequences reached, so that a change to the generator cannot make this test vacuous.
    let mut reached = std::collections::BTreeMap::<&str, usize>::new();
    for seed in 0..4u64 {
        let clock = ManualClock::starting_now();
        let run = uuid::Uuid::new_v4().simple().to_string();
        let keys: Vec<String> = (0..3).map(|i| format!("twin-{run}-{i}")).collect();
        let mut memory = Twin {
            store: servers::memory_store(clock.clone()),
            tokens: Vec::new(),
        };
        let mut dynamo = Twin {
            store: servers::dynamodb_store(backend, clock.clone()).await,
            tokens: Vec::new(),
        };
        for (step, op) in twin_ops(seed, 150, &keys).iter().enumerate() {
            if let TwinOp::Advance { ms } = op {
                clock.advance_ms(*ms);
            }
            let now = clock.now_ms();
            let (m, d) = (memory.apply(op, now).await, dynamo.apply(op, now).await);
            assert_eq!(m, d, "{backend:?} seed {seed} step {step}: {op:?}");
            let what = match (&m, op) {
                (Seen::Claimed(_), _) => "claimed",
                (
                    Seen::Record {
                        status: Status::Completed,
                        ..
                    },
                    TwinOp::Claim { .. },
                ) => "replayed",
                (
                    Seen::Record {
                        status: Status::InProgress,
                        ..
                    },
                    TwinOp::Claim { .. },
                ) => "in progress",
                (Seen::Completed(_), TwinOp::Complete { .. }) => "completed",
                (Seen::Ok, TwinOp::Release { .. }) => "released",
                (Seen::Err(e), _) if e.contains("LeaseLost") => "lease lost",
                (Seen::Absent, TwinOp::Get { .. }) => "absent",
                _ => "other",
            };
            *reached.entry(what).or_default() += 1;
        }
    }
    for what in [
        "claimed",
        "replayed",
        "in progress",
        "completed",
        "released",
        "lease lost",
        "absent",
    ] {
        assert!(
            reached.get(what).copied().unwrap_or(0) > 0,
            "{backend:?}: no step reached {what:?}: {reached:?}"
        );
    }
    eprintln!("{backend:?} twin steps: {reached:?}");
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_twin_agrees_with_moto() {
    memory_twin_agrees_with(Backend::Moto).await;
}

#[cfg_attr(
    not(feature = "local-servers"),
    ignore = "needs the local DynamoDB servers: run scripts/test"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_twin_agrees_with_dynalite() {
    memory_twin_agrees_with(Backend::Dynalite).await;
}
