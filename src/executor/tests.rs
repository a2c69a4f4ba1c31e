//! The executor's unit tests.

use super::*;
use crate::decide::ReplyClass;
use crate::key::Call;
use crate::store::{ClaimOutcome, MemoryStore};

/// The tool gets the time to the deadline less what the completion and the answer need: a
/// tool given more would still be running when its result has to be stored.
#[tokio::test]
async fn the_tool_is_given_the_time_left_less_the_completion_reserve_and_the_reply_margin() {
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
    let settings = executor.settings().clone();
    let keyed = keyed("f", None);
    let budget = Duration::from_secs(10);
    let end = Instant::now() + budget;
    let given = Arc::new(Mutex::new(None));
    let finished: Finished<()> = executor
        .run(keyed, end, NO_RUN_TIME, |timeout| {
            *given.lock().unwrap() = Some(timeout);
            async {
                ToolRun::Replied {
                    reply: b"{}".to_vec(),
                    class: ReplyClass::Success,
                }
            }
        })
        .await;
    assert_eq!(finished.outcome, Outcome::Executed);
    let given = given.lock().unwrap().expect("the tool ran");
    let most = budget - settings.completion_reserve - settings.reply_margin;
    assert!(
        given <= most && given > most - Duration::from_secs(1),
        "the tool was given {given:?}; at most {most:?} fits before the deadline"
    );
}

const CHARGE: Call<'static> = Call {
    tool: "charge_card",
    args: r#"{"amount":42}"#,
    namespace: None,
    run_id: Some("run"),
    step: Some("1"),
    schema: None,
    policy: None,
};

fn keyed<'a>(fingerprint: &'a str, caller: Option<CallerKey<'a>>) -> Keyed<'a> {
    Keyed {
        key: "k",
        fingerprint,
        call: &CHARGE,
        delivery: Delivery::AtLeastOnce,
        caller,
    }
}

const NO_RUN_TIME: Lease = Lease::Covering {
    max_run_time: Duration::ZERO,
};

async fn replying(_timeout: Duration) -> ToolRun<()> {
    ToolRun::Replied {
        reply: b"{}".to_vec(),
        class: ReplyClass::Success,
    }
}

/// The interceptor door's two halves: a reply settles only the claim its own request took,
/// and never a call that is already completed.
#[tokio::test]
async fn a_claim_opened_for_a_request_is_settled_only_by_that_request() {
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
    let end = Instant::now() + Duration::from_secs(10);
    let call = keyed("f", None);
    let success = RunEnd::Replied(ReplyClass::Success);
    let owner = |name: &str, is_one_request| RequestOwner {
        name: name.into(),
        is_one_request,
        noted_at: None,
    };
    let opened: Opened<()> = executor
        .open(call, end, NO_RUN_TIME, &owner("request-a", false))
        .await;
    assert!(matches!(opened, Opened::Claimed), "{opened:?}");
    // Invoked again for the same request: a name that may stand for several requests waits
    // (answered "in progress" here: no wait), one that stands for one request goes on as
    // the owner, under the claim it already holds.
    let executor = executor.with_settings(|s| s.wait = Duration::ZERO);
    let shared: Opened<()> = executor
        .open(call, end, NO_RUN_TIME, &owner("request-a", false))
        .await;
    assert!(matches!(shared, Opened::Answered(_)), "{shared:?}");
    let before = executor.store().get("k").await.unwrap().unwrap();
    let again: Opened<()> = executor
        .open(call, end, NO_RUN_TIME, &owner("request-a", true))
        .await;
    assert!(matches!(again, Opened::Claimed), "{again:?}");
    let resumed = executor.store().get("k").await.unwrap().unwrap();
    assert_ne!(
        resumed.token, before.token,
        "the same claim, handed to a fresh token"
    );
    assert_eq!(resumed.token.owner(), Some("request-a"));
    assert!(
        executor.store().release("k", &before.token).await.is_err(),
        "the old token can no longer release it"
    );
    let not_ours: Opened<()> = executor
        .open(call, end, NO_RUN_TIME, &owner("request-b", true))
        .await;
    assert!(matches!(not_ours, Opened::Answered(_)), "{not_ours:?}");

    let other = executor.finish_claimed(made("request-b"), end, success, b"{}");
    assert_eq!(other.await.unwrap(), FinishedElsewhere::NoClaim);
    let record = executor.store().get("k").await.unwrap().expect("the claim");
    assert_eq!(
        record.status,
        Status::InProgress,
        "another request's reply settled it"
    );

    let own = executor.finish_claimed(made("request-a"), end, success, b"{}");
    assert_eq!(
        own.await.unwrap(),
        FinishedElsewhere::Settled(AfterRun::Complete)
    );
    let record = executor
        .store()
        .get("k")
        .await
        .unwrap()
        .expect("the result");
    assert_eq!(record.status, Status::Completed);

    for request in ["request-a", "request-b"] {
        let again = executor.finish_claimed(made(request), end, success, b"{}");
        assert_eq!(
            again.await.unwrap(),
            FinishedElsewhere::AlreadyCompleted,
            "{request}"
        );
    }
}

/// What an unknown outcome allows is the claim's: a claim taken `at_most_once` is settled as
/// outcome unknown even when the invocation that sees the reply keys the call `at_least_once`
/// (a policy reloaded between the REQUEST and the RESPONSE, or another container's).
#[tokio::test]
async fn an_unknown_outcome_is_settled_as_the_claim_was_taken() {
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
    let end = Instant::now() + Duration::from_secs(10);
    let owner = RequestOwner {
        name: "request-a".into(),
        is_one_request: true,
        noted_at: None,
    };
    let at_most_once = Keyed {
        delivery: Delivery::AtMostOnce,
        ..keyed("f", None)
    };
    let opened: Opened<()> = executor.open(at_most_once, end, NO_RUN_TIME, &owner).await;
    assert!(matches!(opened, Opened::Claimed), "{opened:?}");
    let unknown = RunEnd::Failed {
        outcome_unknown: true,
    };
    let finished = executor
        .finish_claimed(made("request-a"), end, unknown, b"")
        .await
        .unwrap();
    assert_eq!(
        finished,
        FinishedElsewhere::Settled(AfterRun::SettleUnknown)
    );
    let record = executor
        .store()
        .get("k")
        .await
        .unwrap()
        .expect("the record");
    assert!(
        record.is_outcome_unknown(executor.store().now_ms()),
        "{record:?}"
    );
}

/// A caller-keyed repeat with the same arguments is answered by the warm cache without a
/// request; with other arguments it goes to the store, whose record says the key was reused.
#[tokio::test]
async fn the_warm_cache_answers_a_caller_keyed_repeat_only_with_the_same_arguments() {
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default())
        .with_settings(|s| s.local_cache_items = 8);
    let end = Instant::now() + Duration::from_secs(10);
    let caller = Some(CallerKey {
        path_digests: None,
        arguments: "a",
    });
    let first: Finished<()> = executor
        .run(keyed("f1", caller), end, NO_RUN_TIME, replying)
        .await;
    assert_eq!(first.outcome, Outcome::Executed);

    let before = executor.store().requests().total();
    let same: Finished<()> = executor
        .run(keyed("f1", caller), end, NO_RUN_TIME, replying)
        .await;
    assert_eq!(same.outcome, Outcome::Replayed);
    assert_eq!(
        executor.store().requests().total(),
        before,
        "the repeat asked the store"
    );

    let other: Finished<()> = executor
        .run(keyed("f2", caller), end, NO_RUN_TIME, replying)
        .await;
    assert_eq!(other.outcome, Outcome::KeyReused);
}

/// Each pause is between half and all of the delay, and the delay doubles from the first
/// poll's to the longest.
#[test]
fn the_polls_of_a_wait_back_off_by_doubling_with_a_random_half() {
    let delays_ms = [25, 50, 100, 200, 400, 500, 500];
    for (poll, delay_ms) in (1..).zip(delays_ms) {
        let delay = Duration::from_millis(delay_ms);
        assert_eq!(POLL_BACKOFF.pause(poll, |_| 0), delay / 2);
        let mut asked = None;
        let pause = POLL_BACKOFF.pause(poll, |most| {
            asked = Some(most);
            most
        });
        assert_eq!(pause, delay);
        assert_eq!(asked, Some(delay_ms * 1000 / 2), "the random half's bound");
    }
}

#[test]
fn an_outcome_shows_as_its_metric_name() {
    for outcome in Outcome::ALL {
        assert_eq!(outcome.to_string(), outcome.name());
    }
    assert_eq!(Outcome::KeyReused.to_string(), "idempotency_key_reused");
}

#[test]
fn every_handed_back_token_of_one_key_is_kept_for_release() {
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), Settings::default());
    executor.remember_orphan("k", LeaseToken::new("written"));
    executor.remember_orphan("k", LeaseToken::new("never-written"));
    let orphans = executor.orphans.lock().unwrap();
    assert_eq!(
        orphans.len(),
        2,
        "a later token replaced the written claim's"
    );
    assert_eq!(orphans[&LeaseToken::new("written")], "k");
}

/// A claim whose answers were lost is released before the next call claims, on a store that
/// answers: the key it blocked runs again at once instead of waiting out the lease, and the
/// release is not mistaken for an outage.
#[tokio::test]
async fn a_lost_claim_is_released_before_the_next_claim_of_its_key() {
    let settings = Settings {
        wait: Duration::from_millis(20),
        ..Settings::default()
    };
    let executor = Executor::new(MemoryStore::new(), Keyer::new(), settings);
    let end = Instant::now() + Duration::from_secs(10);
    let lost = match executor
        .store()
        .claim(executor.claim_request(keyed("f", None), end, NO_RUN_TIME))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token } => token,
        other => panic!("{other:?}"),
    };
    executor.remember_orphan("k", lost);
    let finished: Finished<()> = executor
        .run(keyed("f", None), end, NO_RUN_TIME, replying)
        .await;
    assert_eq!(finished.outcome, Outcome::Executed);
    assert!(
        executor.orphans.lock().unwrap().is_empty(),
        "released, not kept"
    );
}

fn completed(key: &str, expires_at_s: i64) -> Record {
    Record {
        key: key.into(),
        status: Status::Completed,
        expires_at_s,
        lease_until_ms: 0,
        token: LeaseToken::new("t"),
        fingerprint: "f".into(),
        tool: "tool".into(),
        created_at_ms: 0,
        result: Some(key.as_bytes().to_vec()),
        omitted_result_bytes: None,
        outcome_unknown: false,
        at_most_once: false,
        on_failure: Default::default(),
        path_digests: None,
        offloaded: None,
        about: Default::default(),
    }
}

#[test]
fn the_record_cache_evicts_the_least_recently_used_and_honours_expiry() {
    assert!(RecordCache::new(0).is_none(), "capacity 0 is off");
    let cache = RecordCache::new(2).unwrap();
    cache.put("a", &completed("a", 100), 0);
    cache.put("b", &completed("b", 100), 0);
    assert!(cache.get("a", 0).is_some());
    cache.put("c", &completed("c", 100), 0);
    assert!(cache.get("b", 0).is_none(), "b was least recently used");
    assert!(cache.get("a", 0).is_some() && cache.get("c", 0).is_some());
    assert!(cache.get("a", 101_000).is_none(), "expired");
    let mut in_progress = completed("d", 100);
    in_progress.status = Status::InProgress;
    cache.put("d", &in_progress, 0);
    assert!(
        cache.get("d", 0).is_none(),
        "in-progress records are never cached"
    );
}

/// The claim of key `k` as the request `owner` recorded it.
fn made(owner: &str) -> ClaimMade<'_> {
    ClaimMade {
        key: "k",
        owner,
        policy_name: "t",
    }
}
