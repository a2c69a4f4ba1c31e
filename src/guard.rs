//! The library guard: deduplication inside a Rust tool, with no Lambda in front of it (the
//! use case of the Powertools idempotency decorator).
//!
//! [`Dedup::run`] keys the call by meaning, claims the key, runs the side effect at most once
//! per key and replays its stored result to every repeat, with the same claim, complete,
//! release and wait semantics as the Lambda handler: both run one `Executor`.
//!
//! # The contract
//!
//! | the side effect | claim | a repeat gets |
//! |---|---|---|
//! | returns a value | completed with it (JSON) | the stored value |
//! | returns a value that cannot be serialized | kept until its lease ends | "in progress", then a new run |
//! | returns an error | kept until its lease ends: an error cannot prove nothing happened | "in progress", then a new run |
//! | returns an error that [`Dedup::run_with`]'s `nothing_ran` accepts | released | a new run |
//! | runs longer than the lease | the lease (60 s by default, plus a 5 s margin) is renewed every third of it while the side effect runs | "in progress" |
//! | its process dies | renewals stop: the lease ends within one lease | a new run after that |
//!
//! **Caller keys.** [`Dedup::run_keyed`] keys the call by the caller's own idempotency key
//! (scoped by the call's namespace, tool and run; no wider scope is offered) instead of by its
//! arguments: a repeat under the key with arguments
//! of the same meaning replays; one with other arguments is [`GuardError::KeyReused`], naming the
//! paths that differ, and does not run.
//!
//! **Cancellation.** Dropping the future returned by `run` (a web server dropping a request, a
//! `tokio::time::timeout` around it):
//! - while the claim is sent: a claim may have been written; it blocks the key until its lease
//!   ends, and nothing ran;
//! - while the side effect runs: the side effect stops at its next `.await`, having done an
//!   unknown part of its work; the claim is kept until its lease ends;
//! - after the side effect returned, while its result is stored: the write runs in its own task
//!   and finishes anyway, so every repeat replays the result.
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
//!     ..Call::default()
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
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::decide::ReplyClass;
use crate::executor::{CallerKey, Executor, Keyed, Lease, Settings, Settled, ToolRun};
use crate::key::{Call, CallerKeyError, KeyError, Keyer};
use crate::store::{Store, StoreError};
use crate::telemetry::Outcome;

/// A guarded result.
#[derive(Debug, Clone, PartialEq)]
pub struct Guarded<T> {
    /// The side effect's value, fresh or replayed.
    pub value: T,
    /// [`Outcome::Executed`] when the side effect ran for this call, [`Outcome::Replayed`] or
    /// [`Outcome::Waited`] when a stored result answered.
    pub outcome: Outcome,
    /// The derived key, 32 hex digits.
    pub key: String,
    /// For a replay: when the call first ran (its claim was taken), epoch ms. With `outcome`
    /// and `key`, what Powertools' response hook is handed: the caller holds the value and can
    /// mark or reshape a replayed answer at its one call site.
    pub first_ran_ms: Option<i64>,
}

impl<T> Guarded<T> {
    /// True when the side effect did not run for this call.
    pub fn replayed(&self) -> bool {
        matches!(self.outcome, Outcome::Replayed | Outcome::Waited)
    }
}

/// Why a guarded call returned no value. Only [`GuardError::SideEffect`] and
/// [`GuardError::Unstorable`] mean the side effect ran (and failed, or gave a value that cannot
/// be stored); every other variant means it did not run for this call.
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
    /// The side effect returned an error. `released`: the error said nothing ran (see
    /// [`Dedup::run_with`]), so the claim was released and a retry runs the side effect again;
    /// otherwise the claim is kept until its lease ends.
    #[error("the side effect failed")]
    SideEffect {
        /// The side effect's error.
        #[source]
        error: E,
        /// Whether the claim was released (a retry runs again) rather than kept.
        released: bool,
    },
    /// The side effect ran, but its value cannot be stored as JSON: the claim is kept until its
    /// lease ends, as for an unknown outcome.
    #[error("the side effect ran, but its value cannot be stored as JSON")]
    Unstorable(#[source] serde_json::Error),
    /// A stored result is not a `T`.
    #[error("the stored result is not of the expected type")]
    Result(#[source] serde_json::Error),
    /// An identical call already ran, but its result was too large to store, so it cannot be
    /// returned again.
    #[error("an identical call already ran; its result ({bytes} bytes) was too large to store")]
    ResultNotStored {
        /// Size of the result that was not stored.
        bytes: usize,
    },
    /// The time budget was spent before the side effect could start.
    #[error("no time left to run the side effect")]
    NoTime,
    /// The caller's idempotency key is empty or too long ([`Dedup::run_keyed`]).
    #[error("cannot use the idempotency key: {0}")]
    CallerKey(#[source] CallerKeyError),
    /// The caller's idempotency key was used before with other arguments: the side effect did
    /// not run. `paths` names the arguments that differ (JSON pointers, `tool` for another tool),
    /// when the first call's record could store them.
    #[error(
        "the idempotency key was used before with other arguments{}",
        paths_text(paths)
    )]
    KeyReused {
        /// The differing argument paths, if known.
        paths: Option<Vec<String>>,
    },
    /// An identical call of an `at_most_once` tool may or may not have run, and is never run
    /// again automatically: an operator settles `key` (`dedup settle`).
    #[error(
        "an identical call's outcome is unknown; the tool is at_most_once, so an operator settles key {key}"
    )]
    OutcomeUnknown {
        /// The call's key.
        key: String,
    },
}

/// Builds a [`Dedup`] with settings other than the defaults.
pub struct DedupBuilder<S> {
    store: S,
    keyer: Keyer,
    settings: Settings,
}

impl<S: Store> DedupBuilder<S> {
    /// How long one claim lasts before the margin (default 60 s). It is renewed every third of
    /// it while the side effect runs, so a side effect may run longer than one lease.
    pub fn lease(mut self, length: Duration) -> Self {
        self.settings.default_budget = length;
        self
    }

    /// Added to every lease for clock skew between the processes sharing the store (default 5 s).
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.settings.lease_margin = margin;
        self
    }

    /// How long a result is replayed (default 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl;
        self
    }

    /// How long a repeat waits for an identical call in flight before it answers "in progress"
    /// (default 10 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.settings.wait = wait;
        self
    }

    /// The time kept back at the end of a lease to store the result (default 2.7 s).
    pub fn store_reserve(mut self, reserve: Duration) -> Self {
        self.settings.completion_reserve = reserve;
        self.settings.reply_margin = Duration::ZERO;
        self
    }

    /// Completed results kept in the process, so a repeat costs no store request (default 0).
    pub fn cache_items(mut self, items: usize) -> Self {
        self.settings.local_cache_items = items;
        self
    }

    /// The guard; refused when its settings could never run a side effect: a lease no longer
    /// than the time kept back to store the result would answer every call
    /// [`GuardError::NoTime`].
    pub fn build(self) -> Result<Dedup<S>, GuardSettingsError> {
        let kept_back = self.settings.completion_reserve + self.settings.reply_margin;
        if self.settings.default_budget <= kept_back {
            return Err(GuardSettingsError::LeaseTooShort {
                lease: self.settings.default_budget,
                kept_back,
            });
        }
        Ok(Dedup {
            executor: Executor::new(self.store, self.keyer, self.settings),
        })
    }
}

/// Settings a [`DedupBuilder`] refuses to build a guard with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardSettingsError {
    /// The lease leaves the side effect no time once the result's store reserve is kept back.
    #[error(
        "a lease of {lease:?} leaves no time for the side effect: {kept_back:?} of it is kept back \
         to store the result (raise the lease, or lower store_reserve)"
    )]
    LeaseTooShort {
        /// The lease asked for.
        lease: Duration,
        /// What each call keeps back of it.
        kept_back: Duration,
    },
}

/// Deduplicates side effects in-process. See the module docs for the contract.
pub struct Dedup<S> {
    executor: Executor<S>,
}

impl<S: Store> Dedup<S> {
    /// A guard over `store`, keying with `keyer` (and its policies), with the default settings:
    /// results live 24 h, a claim's lease is 60 s plus a 5 s margin and is renewed every 20 s
    /// while the side effect runs, and a repeat waits up to 10 s for an identical call in flight.
    pub fn new(store: S, keyer: Keyer) -> Dedup<S> {
        Dedup {
            executor: Executor::new(store, keyer, Settings::default()),
        }
    }

    /// A guard with settings other than the defaults of [`Dedup::new`].
    pub fn builder(store: S, keyer: Keyer) -> DedupBuilder<S> {
        DedupBuilder {
            store,
            keyer,
            settings: Settings::default(),
        }
    }

    /// The store the guard claims keys in.
    pub fn store(&self) -> &S {
        self.executor.store()
    }

    /// Runs `side_effect` unless a call with the same key already did, and returns its value
    /// (stored as JSON). An error of the side effect keeps the claim until its lease ends: an
    /// error cannot prove that nothing happened first. See [`Dedup::run_with`] for errors that
    /// can. The call's schema, if any, is overlaid with the keyer's policy schema for the tool.
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
        self.run_with(call, |_: &E| false, side_effect).await
    }

    /// [`Dedup::run`], where `nothing_ran` tells the errors that the side effect raised before
    /// acting (a refused input): those release the claim, so a retry runs it again.
    pub async fn run_with<T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        nothing_ran: impl FnOnce(&E) -> bool,
        side_effect: F,
    ) -> Result<Guarded<T>, GuardError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.guard(call, None, nothing_ran, side_effect).await
    }

    /// [`Dedup::run`] keyed by the caller's own `idempotency_key` (a request id, a workflow
    /// activity id) instead of by the arguments: the key, scoped by the call's namespace, tool and
    /// run, is the call. A repeat with the same key and arguments of the same meaning (as the typed keyer
    /// reads them) replays; with other arguments it is refused with [`GuardError::KeyReused`],
    /// naming the paths that differ, and the side effect does not run.
    pub async fn run_keyed<T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        idempotency_key: &str,
        side_effect: F,
    ) -> Result<Guarded<T>, GuardError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_keyed_with(call, idempotency_key, |_: &E| false, side_effect)
            .await
    }

    /// [`Dedup::run_keyed`] with [`Dedup::run_with`]'s `nothing_ran`.
    pub async fn run_keyed_with<T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        idempotency_key: &str,
        nothing_ran: impl FnOnce(&E) -> bool,
        side_effect: F,
    ) -> Result<Guarded<T>, GuardError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.guard(call, Some(idempotency_key), nothing_ran, side_effect)
            .await
    }

    async fn guard<T, E, F, Fut>(
        &self,
        call: &Call<'_>,
        idempotency_key: Option<&str>,
        nothing_ran: impl FnOnce(&E) -> bool,
        side_effect: F,
    ) -> Result<Guarded<T>, GuardError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let keyer = self.executor.keyer();
        let (key, fingerprint, path_digests) = guard_key(keyer, call, idempotency_key)?;
        if !keyer.dedups(call.tool) {
            // Nothing claimed, nothing stored: a retry runs again, as `released` says.
            return match side_effect().await {
                Ok(value) => Ok(Guarded {
                    value,
                    outcome: Outcome::DedupOff,
                    key,
                    first_ran_ms: None,
                }),
                Err(error) => Err(GuardError::SideEffect {
                    error,
                    released: true,
                }),
            };
        }
        let keyed = Keyed {
            key: &key,
            fingerprint: &fingerprint,
            call,
            delivery: keyer.delivery(call.tool),
            caller: path_digests.as_ref().map(|(digests, arguments)| CallerKey {
                path_digests: digests.as_deref(),
                arguments,
            }),
        };
        let settings = self.executor.settings();
        let end = Instant::now() + settings.default_budget;
        let lease = Lease::Renewed {
            length: settings.default_budget,
        };
        let finished = self
            .executor
            .run(keyed, end, lease, |_timeout| async move {
                match side_effect().await {
                    Ok(value) => match serde_json::to_vec(&value) {
                        Ok(reply) => ToolRun::Replied {
                            reply,
                            class: ReplyClass::Success,
                        },
                        Err(e) => ToolRun::Failed {
                            error: GuardError::Unstorable(e),
                            outcome_unknown: true,
                        },
                    },
                    Err(error) => {
                        let released = nothing_ran(&error);
                        ToolRun::Failed {
                            error: GuardError::SideEffect { error, released },
                            outcome_unknown: !released,
                        }
                    }
                }
            })
            .await;
        let outcome = finished.outcome;
        let (reply, first_ran_ms) = stored_reply(finished.settled, &key)?;
        let value = serde_json::from_slice(&reply).map_err(GuardError::Result)?;
        Ok(Guarded {
            value,
            outcome,
            key,
            first_ran_ms,
        })
    }
}

/// The key, fingerprint and (for a caller's key) leaf digests of `call`.
/// A guarded call's key, fingerprint, and for a caller-keyed call its leaf digests and strict fingerprint.
type GuardKey = (String, String, Option<(Option<String>, String)>);

fn guard_key<E>(
    keyer: &Keyer,
    call: &Call<'_>,
    idempotency_key: Option<&str>,
) -> Result<GuardKey, GuardError<E>> {
    match idempotency_key {
        None => {
            let (key, fingerprint) = keyer.key_and_fingerprint(call)?;
            Ok((key.to_string(), fingerprint.to_string(), None))
        }
        Some(idempotency_key) => match keyer.caller_keyed(call, idempotency_key) {
            Ok(keyed) => Ok((
                keyed.key.to_string(),
                keyed.fingerprint.to_string(),
                Some((keyed.path_digests, keyed.arguments.to_string())),
            )),
            Err(CallerKeyError::Arguments(e)) => Err(GuardError::Key(e)),
            Err(e) => Err(GuardError::CallerKey(e)),
        },
    }
}

/// A stored value, and for a replay when its call first ran (epoch ms).
type StoredReply = (Arc<[u8]>, Option<i64>);

/// The side effect's value as stored (its own, or an identical call's, with when that first
/// ran), or why there is none.
fn stored_reply<E>(
    settled: Settled<GuardError<E>>,
    key: &str,
) -> Result<StoredReply, GuardError<E>> {
    Err(match settled {
        Settled::Executed { reply } => return Ok((Arc::from(reply), None)),
        Settled::Replayed {
            reply,
            first_ran_ms,
        } => return Ok((reply, Some(first_ran_ms))),
        Settled::InProgress { retry_after_ms } => GuardError::InProgress { retry_after_ms },
        Settled::AlreadyRan { bytes } => GuardError::ResultNotStored { bytes },
        Settled::OutcomeUnknown => GuardError::OutcomeUnknown {
            key: key.to_string(),
        },
        Settled::KeyReused { paths } => GuardError::KeyReused { paths },
        Settled::StoreDown(e) => GuardError::Store(e),
        Settled::ToolFailed { error, .. } => error,
        Settled::NoTime => GuardError::NoTime,
    })
}

/// `: /amount, /currency` for a mismatch's known paths.
fn paths_text(paths: &Option<Vec<String>>) -> String {
    match paths {
        Some(paths) if !paths.is_empty() => format!(": {}", paths.join(", ")),
        _ => String::new(),
    }
}
