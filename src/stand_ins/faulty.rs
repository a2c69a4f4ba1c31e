//! A store that fails on cue: scripted slowness, lost answers, rivals and outages around any
//! [`Store`]. The chaos soaks drive it, and the tests reproduce each failure with it.

use std::sync::Mutex;
use std::time::Duration;

use crate::store::{
    CallAbout, ClaimOutcome, ClaimRequest, Completion, LeaseToken, ManualClock, Record,
    RequestCounts, Store, StoreError,
};

/// A store wrapper with scripted slowness, lost answers and outages.
pub struct Faulty<S> {
    pub inner: S,
    /// While set, every operation fails as unreachable (a clone of it switches the store off).
    pub down: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub clock: Option<ManualClock>,
    /// Each claim takes this long (real time), and moves the manual clock by `claim_clock`.
    pub claim_delay: Duration,
    pub claim_clock: Duration,
    /// Each completion takes this long.
    pub complete_delay: Duration,
    /// This many claims are applied but answered as if every answer was lost.
    pub lose_claim_answers: std::sync::atomic::AtomicU32,
    /// This many lease moves are applied, then answered `claim_delay` later (real time) with the
    /// manual clock moved by `extend_clock`.
    pub slow_extensions: std::sync::atomic::AtomicU32,
    pub extend_clock: Duration,
    /// Identical calls racing ours: for this many claims, a rival claims the key just before
    /// ours, and hands its claim back just before our next read, so each claim round is lost.
    pub rival_claims: std::sync::atomic::AtomicU32,
    /// After the rivals: the first read with no rival held finds one last rival's record,
    /// completed with this result (`Some`), or still running (`None`).
    pub last_rival: Mutex<Option<Option<Vec<u8>>>>,
    /// This many reads fail as unreachable (the rest of the store answering).
    pub unavailable_gets: std::sync::atomic::AtomicU32,
    /// This many writes of a request's note of its claims (`request:` records) fail as
    /// unreachable.
    pub fail_request_notes: std::sync::atomic::AtomicU32,
    /// This many hand-overs are applied, then answered as if every answer was lost.
    pub lose_hand_over_answers: std::sync::atomic::AtomicU32,
    /// This many settlements as outcome unknown are applied, then answered as if every answer
    /// was lost...
    pub lose_settle_unknown_answers: std::sync::atomic::AtomicU32,
    /// ...and, after those, this many fail as unreachable without applying.
    pub refuse_settle_unknown: std::sync::atomic::AtomicU32,
    /// Reads of a call's record (not a request's note or a catalog) wait here for one another:
    /// the barrier, and how many such reads still meet at it (a test's interleaving).
    pub gets_meet: Mutex<Option<(std::sync::Arc<tokio::sync::Barrier>, u32)>>,
    rival: Mutex<Option<LeaseToken>>,
    /// The fingerprint and tool of the call the rivals race, for the last rival's record.
    raced: Mutex<(String, String)>,
}

impl<S: Store> Faulty<S> {
    pub fn new(inner: S) -> Faulty<S> {
        Faulty {
            inner,
            down: Default::default(),
            clock: None,
            claim_delay: Duration::ZERO,
            claim_clock: Duration::ZERO,
            complete_delay: Duration::ZERO,
            lose_claim_answers: std::sync::atomic::AtomicU32::new(0),
            slow_extensions: std::sync::atomic::AtomicU32::new(0),
            extend_clock: Duration::ZERO,
            rival_claims: std::sync::atomic::AtomicU32::new(0),
            last_rival: Mutex::new(None),
            unavailable_gets: std::sync::atomic::AtomicU32::new(0),
            fail_request_notes: std::sync::atomic::AtomicU32::new(0),
            lose_hand_over_answers: std::sync::atomic::AtomicU32::new(0),
            lose_settle_unknown_answers: std::sync::atomic::AtomicU32::new(0),
            refuse_settle_unknown: std::sync::atomic::AtomicU32::new(0),
            gets_meet: Mutex::new(None),
            rival: Mutex::new(None),
            raced: Mutex::default(),
        }
    }
}

/// Counts one down from `left`, if any is left: whether this one is among the scripted ones.
fn take_one(left: &std::sync::atomic::AtomicU32) -> bool {
    left.fetch_update(
        std::sync::atomic::Ordering::SeqCst,
        std::sync::atomic::Ordering::SeqCst,
        |n| n.checked_sub(1),
    )
    .is_ok()
}

impl<S: Store> Faulty<S> {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            Err(StoreError::Unavailable("store stopped by the test".into()))
        } else {
            Ok(())
        }
    }

    /// A rival's claim of `req.key`, as an identical call in another container would take it.
    async fn claim_as_rival(&self, req: ClaimRequest<'_>) -> LeaseToken {
        *self.raced.lock().unwrap() = (req.fingerprint.to_string(), req.tool.to_string());
        let rival = ClaimRequest { owner: None, ..req };
        match self.inner.claim(rival).await {
            Ok(ClaimOutcome::Claimed { token }) => token,
            other => panic!("the scripted rival could not claim: {other:?}"),
        }
    }

    /// Before a read: the rival's claim handed back, or the last rival's record written.
    async fn before_get(&self, key: &str) {
        let held = self.rival.lock().unwrap().take();
        if let Some(token) = held {
            self.inner.release(key, &token).await.unwrap();
            return;
        }
        let Some(last) = self.last_rival.lock().unwrap().take() else {
            return;
        };
        let now_ms = self.inner.now_ms();
        let expires_at_s = now_ms / 1000 + 3600;
        let (fingerprint, tool) = self.raced.lock().unwrap().clone();
        let token = self
            .claim_as_rival(ClaimRequest {
                key,
                fingerprint: &fingerprint,
                tool: &tool,
                lease_until_ms: now_ms + 60_000,
                expires_at_s,
                owner: None,
                at_most_once: false,
                on_failure: Default::default(),
                path_digests: None,
                about: CallAbout::default(),
            })
            .await;
        if let Some(result) = last {
            self.inner
                .complete(key, &token, &result, expires_at_s)
                .await
                .unwrap();
        }
    }
}

impl<S: Store> Store for Faulty<S> {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.check()?;
        if take_one(&self.rival_claims) {
            let token = self.claim_as_rival(req).await;
            *self.rival.lock().unwrap() = Some(token);
        }
        let outcome = self.inner.claim(req).await;
        tokio::time::sleep(self.claim_delay).await;
        if let Some(clock) = &self.clock {
            clock.advance(self.claim_clock);
        }
        match outcome {
            Ok(ClaimOutcome::Claimed { token }) if take_one(&self.lose_claim_answers) => {
                Err(StoreError::ClaimUnconfirmed {
                    token,
                    source: "every answer to the claim was lost".into(),
                })
            }
            other => other,
        }
    }
    async fn complete(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
        expires_at_s: i64,
    ) -> Result<Completion, StoreError> {
        self.check()?;
        tokio::time::sleep(self.complete_delay).await;
        self.inner.complete(key, token, result, expires_at_s).await
    }
    async fn extend_lease(
        &self,
        key: &str,
        token: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        let moved = self
            .inner
            .extend_lease(key, token, lease_until_ms, expires_at_s)
            .await;
        if take_one(&self.slow_extensions) {
            tokio::time::sleep(self.claim_delay).await;
            if let Some(clock) = &self.clock {
                clock.advance(self.extend_clock);
            }
        }
        moved
    }
    async fn release(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.check()?;
        self.inner.release(key, token).await
    }
    async fn hand_over(
        &self,
        key: &str,
        from: &LeaseToken,
        from_lease_until_ms: i64,
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner
            .hand_over(
                key,
                from,
                from_lease_until_ms,
                to,
                lease_until_ms,
                expires_at_s,
            )
            .await?;
        if take_one(&self.lose_hand_over_answers) {
            return Err(StoreError::Unavailable(
                "every answer to the hand-over was lost".into(),
            ));
        }
        Ok(())
    }
    async fn put(
        &self,
        key: &str,
        label: &str,
        value: &[u8],
        expires_at_s: i64,
        replacing: Option<&LeaseToken>,
    ) -> Result<LeaseToken, StoreError> {
        self.check()?;
        if key.starts_with("request:") && take_one(&self.fail_request_notes) {
            return Err(StoreError::Unavailable(
                "the request's note could not be written".into(),
            ));
        }
        self.inner
            .put(key, label, value, expires_at_s, replacing)
            .await
    }
    async fn settle_unknown(
        &self,
        key: &str,
        token: &LeaseToken,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        if take_one(&self.lose_settle_unknown_answers) {
            self.inner.settle_unknown(key, token, expires_at_s).await?;
            return Err(StoreError::Unavailable(
                "every answer to the settlement was lost".into(),
            ));
        }
        if take_one(&self.refuse_settle_unknown) {
            return Err(StoreError::Unavailable(
                "the settlement failed by the test".into(),
            ));
        }
        self.inner.settle_unknown(key, token, expires_at_s).await
    }
    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.check()?;
        if take_one(&self.unavailable_gets) {
            return Err(StoreError::Unavailable("read failed by the test".into()));
        }
        self.before_get(key).await;
        let meet = match &mut *self.gets_meet.lock().unwrap() {
            Some((barrier, left)) if *left > 0 && !crate::store::is_not_a_call(key) => {
                *left -= 1;
                Some(barrier.clone())
            }
            _ => None,
        };
        let read = self.inner.get(key).await;
        // Read first, then wait: each reader holds what it read before any of them goes on.
        if let Some(barrier) = meet {
            barrier.wait().await;
        }
        read
    }
    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }
    fn requests(&self) -> RequestCounts {
        self.inner.requests()
    }
}

/// An operator's reads and settlements, through the same switch (the sweep's tests list through
/// it).
impl<S: crate::store::Records> crate::store::Records for Faulty<S> {
    async fn list(&self, filter: &crate::store::RecordFilter) -> Result<Vec<Record>, StoreError> {
        self.check()?;
        self.inner.list(filter).await
    }
    async fn settle(
        &self,
        key: &str,
        token: &LeaseToken,
        settle_as: crate::store::SettleAs<'_>,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner.settle(key, token, settle_as, expires_at_s).await
    }
    async fn evict(&self, key: &str, token: &LeaseToken) -> Result<(), StoreError> {
        self.check()?;
        self.inner.evict(key, token).await
    }
}
