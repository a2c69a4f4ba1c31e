//! The library guard: deduplication inside a Rust tool, with no Lambda in front of it (the
//! use case of the Powertools idempotency decorator).
//!
//! [`Dedup::run`] keys the call by meaning, claims the key, runs the side effect at most once
//! per key and replays its stored result to every repeat, with the same claim, complete,
//! release and wait semantics as the Lambda handler: both run one [`Executor`].
//!
//! ```
//! use toolcall_dedup::guard::Dedup;
//! use toolcall_dedup::key::{Call, Keyer};
//! use toolcall_dedup::store::MemoryStore;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let dedup = Dedup::new(MemoryStore::new(), Keyer::new());
//! let charges = std::sync::atomic::AtomicU32::new(0);
//! let charge = |args: &'static str| Call {
//!     tool: "charge_card",
//!     args,
//!     namespace: Some("payments"),
//!     run_id: Some("run-42"),
//!     step: Some("7"),
//!     schema: None,
//! };
//! for args in [r#"{"customer_id": "cus_1", "amount": 4200, "currency": "USD"}"#,
//!              // the model's retry: keys reordered, 4200.0, "usd"
//!              r#"{"currency": "usd", "amount": 4200.0, "customer_id": "cus_1"}"#] {
//!     let receipt = dedup
//!         .run(&charge(args), || async {
//!             let n = charges.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
//!             Ok::<_, std::io::Error>(format!("ch_{n}"))
//!         })
//!         .await
//!         .unwrap();
//!     assert_eq!(receipt.value, "ch_1");
//! }
//! assert_eq!(charges.into_inner(), 1, "the card was charged once");
//! # });
//! ```

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::adapter::ReplyClass;
use crate::executor::{Executor, Keyed, Settings, Settled, ToolRun};
use crate::key::{Call, KeyError, Keyer, Strategy};
use crate::store::{Store, StoreError};
use crate::telemetry::Outcome;

/// A guarded result.
#[derive(Debug, Clone, PartialEq)]
pub struct Guarded<T> {
    pub value: T,
    /// [`Outcome::Executed`] when the side effect ran for this call, [`Outcome::Replayed`] or
    /// [`Outcome::Waited`] when a stored result answered.
    pub outcome: Outcome,
    /// The derived key, 32 hex digits.
    pub key: String,
}

impl<T> Guarded<T> {
    /// True when the side effect did not run for this call.
    pub fn replayed(&self) -> bool {
        matches!(self.outcome, Outcome::Replayed | Outcome::Waited)
    }
}

/// Why a guarded call returned no value. Only [`GuardError::SideEffect`] means the side effect
/// ran (and failed); every other variant means it did not run for this call.
#[derive(Debug, thiserror::Error)]
pub enum GuardError<E> {
    /// The arguments cannot be keyed (not a JSON object, too deep, too large, ...).
    #[error("cannot key the call: {0}")]
    Key(#[from] KeyError),
    /// An identical call holds the key and did not finish within the wait bound.
    #[error("an identical call is still running")]
    InProgress {
        /// When the running call's lease ends, if known.
        retry_after_ms: Option<i64>,
    },
    /// The store could not be asked, so the side effect was not run (fail closed).
    #[error("idempotency store unavailable; the side effect did not run")]
    Store(#[source] StoreError),
    /// The side effect returned an error. The claim was released: a retry runs it again.
    #[error("the side effect failed")]
    SideEffect(#[source] E),
    /// The result could not be stored as JSON, or a stored result is not a `T`.
    #[error("the result does not round-trip through JSON")]
    Result(#[source] serde_json::Error),
    /// An identical call already ran, but its result was too large to store, so it cannot be
    /// returned again.
    #[error("an identical call already ran; its result ({bytes} bytes) was too large to store")]
    ResultNotStored { bytes: usize },
    /// The lease budget was spent before the side effect could start.
    #[error("no time left to run the side effect")]
    NoTime,
}

/// Deduplicates side effects in-process. See the module docs.
pub struct Dedup<S> {
    executor: Executor<S>,
}

impl<S: Store> Dedup<S> {
    /// A guard over `store`, keying with `keyer` (and its policies), with the default settings:
    /// results live 24 h, a claim's lease is 60 s plus a 5 s margin, and a repeat waits up to
    /// 10 s for an identical call in flight.
    pub fn new(store: S, keyer: Keyer) -> Dedup<S> {
        Dedup {
            executor: Executor::new(store, keyer, Settings::default()),
        }
    }

    /// Adjusts the settings: `default_budget` is how long a side effect may take (the lease),
    /// `ttl` how long a result is replayed, `wait` how long a repeat waits.
    pub fn with_settings(self, adjust: impl FnOnce(&mut Settings)) -> Dedup<S> {
        Dedup {
            executor: self.executor.with_settings(adjust),
        }
    }

    pub fn store(&self) -> &S {
        self.executor.store()
    }

    /// Runs `side_effect` unless a call with the same key already did, and returns its value
    /// (stored as JSON). The call's schema, if any, is overlaid with the keyer's policy schema
    /// for the tool.
    pub async fn run<T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        side_effect: F,
    ) -> Result<Guarded<T>, GuardError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let keyer = self.executor.keyer();
        let policy_schema = keyer
            .policies()
            .get(call.tool)
            .and_then(|p| p.schema.as_ref());
        let merged = match (call.schema, policy_schema) {
            (Some(own), Some(policy)) => Some(own.clone().overlay(policy)),
            _ => None,
        };
        let call = Call {
            schema: merged.as_ref().or(call.schema).or(policy_schema),
            ..*call
        };
        let key = keyer.key(Strategy::Typed, &call)?.to_string();
        let fingerprint = keyer.fingerprint(&call)?.to_string();
        let keyed = Keyed {
            key: &key,
            fingerprint: &fingerprint,
            call: &call,
        };
        let end = Instant::now() + self.executor.settings().default_budget;
        let finished = self
            .executor
            // In-process: the side effect cannot outlive this call.
            .run(keyed, end, Duration::ZERO, |_timeout| async move {
                match side_effect().await {
                    Ok(value) => match serde_json::to_vec(&value) {
                        Ok(reply) => ToolRun::Replied {
                            reply,
                            class: ReplyClass::Success,
                        },
                        Err(e) => ToolRun::Failed {
                            error: GuardError::Result(e),
                            outcome_unknown: false,
                        },
                    },
                    Err(e) => ToolRun::Failed {
                        error: GuardError::SideEffect(e),
                        outcome_unknown: false,
                    },
                }
            })
            .await;
        let value = match finished.settled {
            Settled::Executed { reply } => serde_json::from_slice(&reply),
            Settled::Replayed { reply } => serde_json::from_slice(&reply),
            Settled::InProgress { retry_after_ms } => {
                return Err(GuardError::InProgress { retry_after_ms });
            }
            Settled::AlreadyRan { bytes } => return Err(GuardError::ResultNotStored { bytes }),
            Settled::StoreDown(e) => return Err(GuardError::Store(e)),
            Settled::ToolFailed { error, .. } => return Err(error),
            Settled::NoTime => return Err(GuardError::NoTime),
        }
        .map_err(GuardError::Result)?;
        Ok(Guarded {
            value,
            outcome: finished.outcome,
            key,
        })
    }
}
