//! Store backends for the conformance suite: the memory store, and DynamoDB-compatible servers on
//! loopback started by `scripts/dynamodb-servers.sh`. Each DynamoDB test gets its own table.

use crate::store::table::{CreateTableReport, create_table_with_client};
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Intercept, Region};
use std::time::Duration;

pub use crate::stand_ins::Faulty;
use crate::store::{
    ClaimBudget, DynamoDbConfig, DynamoDbStore, ManualClock, MemoryStore, RetryPolicy,
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
