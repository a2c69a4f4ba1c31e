//! Store backends for the conformance suite: the memory store, and DynamoDB-compatible servers on
//! loopback started by `scripts/dynamodb-servers.sh`. Each DynamoDB test gets its own table.

use crate::store::table::{CreateTableReport, create_table_with_client};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Intercept, Region};
use std::sync::Mutex;
use std::time::Duration;

use crate::store::{
    CallAbout, ClaimBudget, ClaimOutcome, ClaimRequest, Completion, DynamoDbConfig, DynamoDbStore,
    LeaseToken, ManualClock, MemoryStore, Record, RequestCounts, RetryPolicy, Store, StoreError,
};

pub const START_HINT: &str = "start the local DynamoDB servers first: \
     `scripts/dynamodb-servers.sh install && eval \"$(scripts/dynamodb-servers.sh start)\"` \
     (stop them with `scripts/dynamodb-servers.sh stop`)";

/// Something to do to the client's config builder before the client is built.
pub type ClientTweak = Box<dyn FnOnce(&mut aws_sdk_dynamodb::config::Builder)>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// moto served single-threaded (`tools/moto_single.py`).
    Moto,
    /// dynalite: ignores `ReturnValuesOnConditionCheckFailure`, has no `UpdateTimeToLive`.
    Dynalite,
}

impl Backend {
    /// Requests a repeat of a completed key costs: one conditional put that returns the old item,
    /// or, where the server returns no old item, that put plus one consistent read.
    pub fn repeat_requests(self) -> u64 {
        match self {
            Backend::Memory | Backend::Moto => 1,
            Backend::Dynalite => 2,
        }
    }

    fn env_var(self) -> &'static str {
        match self {
            Backend::Memory => unreachable!("the memory store needs no server"),
            Backend::Moto => "DEDUP_TEST_MOTO_ENDPOINT",
            Backend::Dynalite => "DEDUP_TEST_DYNALITE_ENDPOINT",
        }
    }

    /// The server's endpoint URL. Panics, with how to start the servers, if it is not set: a
    /// server-backed test must never pass without its server.
    pub fn endpoint(self) -> String {
        let var = self.env_var();
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => v,
            _ => panic!("{var} is not set, so the {self:?} store tests cannot run: {START_HINT}"),
        }
    }
}

/// A client for `endpoint` with dummy credentials; `extra` interceptors are kept by the store.
pub fn client(endpoint: &str, extra: Vec<ClientTweak>) -> Client {
    let mut builder = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::from_static("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "dedup-tests"));
    for f in extra {
        f(&mut builder);
    }
    Client::from_conf(builder.build())
}

/// Adds an interceptor to the client `client_with` builds.
pub fn with_interceptor(interceptor: impl Intercept + 'static) -> ClientTweak {
    Box::new(move |b| {
        b.push_interceptor(aws_sdk_dynamodb::config::SharedInterceptor::new(
            interceptor,
        ));
    })
}

pub fn unique_table() -> String {
    format!("dedup-test-{}", uuid::Uuid::new_v4().simple())
}

/// Creates a fresh table on `backend` through `dedup table create`'s code path.
pub async fn create_table(
    client: &Client,
    cfg: &DynamoDbConfig,
    backend: Backend,
) -> CreateTableReport {
    create_table_with_client(client, cfg)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "creating table {} on {backend:?} failed: {e:?}\n{START_HINT}",
                cfg.table
            )
        })
}

/// A DynamoDB store on a fresh table of `backend`.
pub async fn dynamodb_store_with(
    backend: Backend,
    clock: ManualClock,
    cfg: DynamoDbConfig,
    extra: Vec<ClientTweak>,
) -> DynamoDbStore {
    let client = client(&backend.endpoint(), extra);
    create_table(&client, &cfg, backend).await;
    DynamoDbStore::new(&client, cfg)
        .expect("valid config")
        .with_clock(clock)
}

pub async fn dynamodb_store(backend: Backend, clock: ManualClock) -> DynamoDbStore {
    dynamodb_store_with(backend, clock, config(), Vec::new()).await
}

/// A store configuration on a fresh table, whose claims are as patient as its other requests and
/// have no breaker: a loaded machine's local server can be slower than the claim budget, which
/// has tests of its own (`store_conformance`, "claim budget").
pub fn config() -> DynamoDbConfig {
    DynamoDbConfig {
        claim: ClaimBudget::within(RetryPolicy::default().deadline, Duration::ZERO),
        ..DynamoDbConfig::new(unique_table())
    }
}

/// moto's S3, path-style on its loopback endpoint, with dummy credentials.
pub fn s3_client() -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .endpoint_url(Backend::Moto.endpoint())
        .region(aws_sdk_s3::config::Region::from_static("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "dedup-tests",
        ))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

/// A fresh results bucket on moto's S3.
pub async fn result_bucket() -> crate::store::ResultBucket {
    let client = s3_client();
    let bucket = format!("dedup-results-{}", uuid::Uuid::new_v4().simple());
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("creating bucket {bucket} on moto failed: {e:?}\n{START_HINT}"));
    crate::store::ResultBucket::new(client, bucket)
}

/// Writes `body` as `object` of `bucket` on moto's S3 (a test altering what the store wrote).
pub async fn s3_put(bucket: &str, object: &str, body: Vec<u8>) {
    s3_client()
        .put_object()
        .bucket(bucket)
        .key(object)
        .body(body.into())
        .send()
        .await
        .unwrap();
}

/// Deletes `object` of `bucket` on moto's S3.
pub async fn s3_delete(bucket: &str, object: &str) {
    s3_client()
        .delete_object()
        .bucket(bucket)
        .key(object)
        .send()
        .await
        .unwrap();
}

/// Reads `object` of `bucket` on moto's S3.
pub async fn s3_get(bucket: &str, object: &str) -> Vec<u8> {
    let out = s3_client()
        .get_object()
        .bucket(bucket)
        .key(object)
        .send()
        .await
        .unwrap();
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

/// A DynamoDB store on a fresh table of `backend` whose results past the item limit go to a fresh
/// bucket on moto's S3.
pub async fn dynamodb_store_offloading(backend: Backend, clock: ManualClock) -> DynamoDbStore {
    dynamodb_store(backend, clock)
        .await
        .with_result_bucket(result_bucket().await)
}

pub fn memory_store(clock: ManualClock) -> MemoryStore {
    MemoryStore::new().with_clock(clock)
}

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
        to: &LeaseToken,
        lease_until_ms: i64,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        self.check()?;
        self.inner
            .hand_over(key, from, to, lease_until_ms, expires_at_s)
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
        self.inner.settle_unknown(key, token, expires_at_s).await
    }
    async fn get(&self, key: &str) -> Result<Option<Record>, StoreError> {
        self.check()?;
        if take_one(&self.unavailable_gets) {
            return Err(StoreError::Unavailable("read failed by the test".into()));
        }
        self.before_get(key).await;
        self.inner.get(key).await
    }
    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }
    fn requests(&self) -> RequestCounts {
        self.inner.requests()
    }
}
