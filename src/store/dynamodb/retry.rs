//! Sending a request: the retry loop (deadline, per-attempt bound, backoff), how each failure is classed, the breaker that fails claims fast after an outage, and the request counter.

use aws_sdk_dynamodb::config::ConfigBag;
use aws_sdk_dynamodb::config::Intercept;
use aws_sdk_dynamodb::config::RuntimeComponents;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::error::SdkError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::{
    BoxError, ClaimOutcome, DynamoDbStore, Item, Op, RequestCounter, RetriesExhausted, StoreError,
};

/// Open after a claim found the store unavailable, until `open_until`; shared by the clones of a
/// store (one container).
#[derive(Debug, Default)]
pub(super) struct Breaker {
    open_until: std::sync::Mutex<Option<Instant>>,
}

impl Breaker {
    /// How much longer claims are refused without asking the store.
    pub(super) fn open_for(&self) -> Option<Duration> {
        let until = (*self.open_until.lock().unwrap_or_else(|p| p.into_inner()))?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Opens on a claim that ran out of retries or time, closes on any answer the store gave.
    pub(super) fn note(&self, claimed: &Result<ClaimOutcome, StoreError>, open_for: Duration) {
        let unreachable = match claimed {
            Err(StoreError::ClaimUnconfirmed { .. }) => true,
            Err(StoreError::Unavailable(source)) => source.is::<RetriesExhausted>(),
            Err(_) => false,
            Ok(_) => false,
        };
        let mut open_until = self.open_until.lock().unwrap_or_else(|p| p.into_inner());
        *open_until = (unreachable && !open_for.is_zero()).then(|| Instant::now() + open_for);
    }
}

/// Source of [`StoreError::Unavailable`] for a claim refused by the open breaker.
#[derive(Debug, thiserror::Error)]
#[error("the store was unavailable to a recent claim; claims fail at once for {left:?} more")]
pub struct BreakerOpen {
    /// Until the next claim probes the store.
    pub(crate) left: Duration,
}

/// Counts every request attempt by operation name.
#[derive(Debug)]
pub(super) struct CountRequests(pub(super) Arc<RequestCounter>);

impl Intercept for CountRequests {
    fn name(&self) -> &'static str {
        "toolcall_dedup::CountRequests"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg
            .load::<Metadata>()
            .map_or(Op::Other, |m| Op::from_name(m.name()));
        self.0.record(op);
        Ok(())
    }
}

impl DynamoDbStore {
    /// Sends one request with retries; see [`RetryPolicy`].
    pub(super) async fn send<T, E, F, Fut>(
        &self,
        operation: &'static str,
        attempt: F,
    ) -> Result<T, Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let deadline = Instant::now() + self.cfg.retry.deadline;
        self.send_until(operation, deadline, attempt).await
    }

    /// [`DynamoDbStore::send`], giving up at `deadline` (or the policy's, if sooner).
    pub(super) async fn send_until<T, E, F, Fut>(
        &self,
        operation: &'static str,
        deadline: Instant,
        mut attempt: F,
    ) -> Result<T, Failed<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let policy = &self.cfg.retry;
        let start = Instant::now();
        let deadline = deadline.min(start + policy.deadline);
        let mut attempts = 0u32;
        let mut maybe_applied = false;
        loop {
            attempts += 1;
            // The first attempt always gets its whole timeout: a deadline shorter than one
            // attempt (a claim's budget) must not fail a store that is only slow to connect.
            let bound = if attempts == 1 {
                policy.attempt_timeout
            } else {
                let remaining = deadline.saturating_duration_since(Instant::now());
                policy.attempt_timeout.min(remaining)
            };
            let (ambiguous, last): (bool, BoxError) =
                match tokio::time::timeout(bound, attempt()).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(err)) => match classify(&err) {
                        Class::Final => {
                            return Err(Failed::Engine {
                                err,
                                maybe_applied_before: maybe_applied,
                            });
                        }
                        Class::Retry { ambiguous } => (ambiguous, Box::new(err)),
                    },
                    Err(_) => (true, format!("attempt timed out after {bound:?}").into()),
                };
            maybe_applied |= ambiguous;
            let backoff = policy.backoff(attempts);
            if Instant::now() + backoff >= deadline {
                let exhausted = RetriesExhausted {
                    operation,
                    attempts,
                    elapsed: start.elapsed(),
                    last,
                };
                return Err(Failed::Unavailable {
                    error: StoreError::Unavailable(Box::new(exhausted)),
                    maybe_applied,
                });
            }
            tracing::debug!(operation, attempts, ambiguous, error = %last, ?backoff, "retrying DynamoDB request");
            tokio::time::sleep(backoff).await;
        }
    }
}

/// Why [`DynamoDbStore::send`] stopped without a response.
pub(super) enum Failed<E> {
    /// A final answer from the service (or a request that could not be built).
    Engine {
        err: SdkError<E, HttpResponse>,
        maybe_applied_before: bool,
    },
    /// Retries ran out; `maybe_applied` when an attempt may have been applied.
    Unavailable {
        error: StoreError,
        maybe_applied: bool,
    },
}

impl<E> Failed<E>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    pub(super) fn maybe_applied_before(&self) -> bool {
        match self {
            Failed::Engine {
                maybe_applied_before,
                ..
            } => *maybe_applied_before,
            Failed::Unavailable { maybe_applied, .. } => *maybe_applied,
        }
    }

    /// A conditional-check failure gives `Ok(old item)` (`None` if the server sent no item, as
    /// dynalite does); any other failure becomes its [`StoreError`].
    pub(super) fn into_condition_failure(
        self,
        ccf: impl Fn(&E) -> Option<Option<Item>>,
    ) -> Result<Option<Item>, StoreError> {
        if let Failed::Engine { err, .. } = &self
            && let Some(old) = err.as_service_error().and_then(&ccf)
        {
            return Ok(old);
        }
        Err(self.into_store_error())
    }

    pub(super) fn is_item_too_large(&self) -> bool {
        match self {
            Failed::Engine { err, .. } => {
                err.code() == Some("ValidationException")
                    && err
                        .message()
                        .is_some_and(|m| m.to_ascii_lowercase().contains("item size"))
            }
            Failed::Unavailable { .. } => false,
        }
    }

    pub(super) fn into_store_error(self) -> StoreError {
        match self {
            Failed::Unavailable { error, .. } => error,
            Failed::Engine { err, .. } => match err.code() {
                Some("ResourceNotFoundException") => StoreError::Config {
                    message: "table not found (create it with `dedup table create`)".into(),
                    source: Some(Box::new(err)),
                },
                Some(
                    "AccessDeniedException"
                    | "UnrecognizedClientException"
                    | "MissingAuthenticationTokenException",
                ) => StoreError::Config {
                    message: "not allowed to use the table".into(),
                    source: Some(Box::new(err)),
                },
                _ => StoreError::Rejected(Box::new(err)),
            },
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Class {
    Final,
    /// `ambiguous`: the request may have been applied.
    Retry {
        ambiguous: bool,
    },
}

pub(super) fn classify<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Class {
    match err {
        SdkError::ConstructionFailure(_) => Class::Final,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => Class::Retry { ambiguous: true },
        SdkError::DispatchFailure(d) if d.is_user() => Class::Final,
        SdkError::DispatchFailure(_) => Class::Retry { ambiguous: true },
        // An answer with no error code is one the SDK could not read (a garbled or cut-off body): the
        // request may have applied, as for a broken response.
        SdkError::ServiceError(_) if err.code().is_none() => Class::Retry { ambiguous: true },
        SdkError::ServiceError(service) => match err.code() {
            Some(
                "ProvisionedThroughputExceededException"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "TransactionConflictException"
                // A multi-Region strongly consistent table refused the write (not applied): the
                // item is being written in another Region. The retry's condition decides.
                | "ReplicatedWriteConflictException",
            ) => Class::Retry { ambiguous: false },
            _ if service.raw().status().is_server_error() => Class::Retry { ambiguous: true },
            _ => Class::Final,
        },
        _ => Class::Final,
    }
}
