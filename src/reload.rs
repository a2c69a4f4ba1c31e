//! A handler that follows its config document (`DEDUP_CONFIG`): the document is read again on a
//! schedule (`DEDUP_CONFIG_REFRESH_SECONDS`), and a changed one that parses and passes the
//! configuration's checks replaces the handler for the invocations after it. A bad one is refused
//! loudly (an ERROR line and a `config_rejected` metric) and the last good one stays.
//!
//! The refresh runs beside an invocation, never in its way: Lambda freezes a container between
//! invocations, so the schedule is "at the first invocation after the period".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ConfigError;
use crate::config::document::Document;
use crate::config::source::{ConfigSource, LoadError, Loaded, Loader};
use crate::dispatch::Dispatcher;
use crate::handler::Handler;
use crate::runtime::RuntimeError;
use crate::store::{Records, Store};
use crate::telemetry::Telemetry;

/// Default for `DEDUP_CONFIG_REFRESH_SECONDS`.
pub(crate) const DEFAULT_REFRESH: Duration = Duration::from_secs(60);

/// Where the config document comes from and how often it is read again: `DEDUP_CONFIG`,
/// `DEDUP_CONFIG_REFRESH_SECONDS` and, for local servers, `DEDUP_SSM_ENDPOINT` and
/// `DEDUP_S3_ENDPOINT`. `None` without `DEDUP_CONFIG`.
pub async fn document_from_env() -> Result<Option<(Loader, Duration)>, ConfigError> {
    let var = |name: &str| {
        debug_assert!(
            crate::config::VARIABLES.contains(&name),
            "{name} is not registered"
        );
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    };
    let Some(text) = var("DEDUP_CONFIG") else {
        return Ok(None);
    };
    let invalid = |name: &'static str, value: &str, reason: String| ConfigError::Invalid {
        var: name,
        value: value.to_string(),
        reason,
    };
    let source: ConfigSource = text
        .parse()
        .map_err(|reason| invalid("DEDUP_CONFIG", &text, reason))?;
    let every = match var("DEDUP_CONFIG_REFRESH_SECONDS") {
        None => DEFAULT_REFRESH,
        Some(seconds) => Duration::from_secs(seconds.trim().parse().map_err(|_| {
            invalid(
                "DEDUP_CONFIG_REFRESH_SECONDS",
                &seconds,
                "expected whole seconds".into(),
            )
        })?),
    };
    let ssm = var("DEDUP_SSM_ENDPOINT");
    let s3 = var("DEDUP_S3_ENDPOINT");
    let loader = Loader::new(source, ssm.as_deref(), s3.as_deref()).await;
    Ok(Some((loader, every)))
}

/// Builds the handler a document describes (its routes, policies and settings).
pub trait Build<S, D>: Fn(&Document) -> Result<Handler<S, D>, ConfigError> + Send + Sync {}
impl<S, D, F> Build<S, D> for F where
    F: Fn(&Document) -> Result<Handler<S, D>, ConfigError> + Send + Sync
{
}

/// Why a refresh kept the last good document.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The document could not be read or parsed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The document parsed, but the configuration it makes cannot work.
    #[error("{source_name}: {error}")]
    Config {
        /// Where the document came from.
        source_name: String,
        /// What the configuration refused.
        #[source]
        error: ConfigError,
    },
}

/// What one refresh did.
#[derive(Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// The same text as in force: nothing to do.
    Unchanged,
    /// A new document is in force.
    Replaced,
}

/// What the document in force was read as.
struct InForce {
    text: String,
    version: String,
    s3_schemas: usize,
}

impl InForce {
    fn of(loaded: &Loaded) -> InForce {
        InForce {
            text: loaded.text.clone(),
            version: loaded.version.clone(),
            s3_schemas: loaded.s3_schemas,
        }
    }
}

/// The handler in force, and how to replace it.
pub struct Reloading<S, D, B> {
    current: RwLock<Arc<Handler<S, D>>>,
    /// What is in force: its text, its version and how many schemas it keeps in S3.
    in_force: Mutex<InForce>,
    loader: Loader,
    build: B,
    every: Duration,
    next_check: Mutex<Instant>,
    refreshing: AtomicBool,
    telemetry: Telemetry,
}

impl<S, D, B> Reloading<S, D, B>
where
    S: Store + 'static,
    D: Dispatcher + 'static,
    B: Build<S, D> + 'static,
{
    /// Builds the handler of the document `loaded` from `loader` (a first document that cannot be
    /// used is an error: the function must not start on it). `telemetry` reports refusals.
    pub fn start(
        loader: Loader,
        loaded: Loaded,
        build: B,
        every: Duration,
        telemetry: Telemetry,
    ) -> Result<Reloading<S, D, B>, Refused> {
        let handler = build(&loaded.document).map_err(|error| Refused::Config {
            source_name: loader.source().to_string(),
            error,
        })?;
        Ok(Reloading {
            current: RwLock::new(Arc::new(handler)),
            in_force: Mutex::new(InForce::of(&loaded)),
            loader,
            build,
            every,
            next_check: Mutex::new(Instant::now() + every),
            refreshing: AtomicBool::new(false),
            telemetry,
        })
    }

    /// The handler in force.
    pub fn current(&self) -> Arc<Handler<S, D>> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads the document again now, and the schemas it keeps in S3; a changed one that works
    /// replaces the handler, which carries on the container's state (the claims whose answers
    /// were lost, still to be released).
    pub async fn refresh(&self) -> Result<Refreshed, Refused> {
        let text = self.loader.read_text().await?;
        let same_text = {
            let in_force = self.in_force.lock().unwrap_or_else(|p| p.into_inner());
            in_force.text == text && in_force.s3_schemas == 0
        };
        if same_text {
            return Ok(Refreshed::Unchanged);
        }
        let loaded = self.loader.parse(text).await?;
        if self
            .in_force
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .version
            == loaded.version
        {
            return Ok(Refreshed::Unchanged);
        }
        let handler = (self.build)(&loaded.document).map_err(|error| Refused::Config {
            source_name: self.loader.source().to_string(),
            error,
        })?;
        let handler = handler.carrying_on(&self.current());
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(handler);
        *self.in_force.lock().unwrap_or_else(|p| p.into_inner()) = InForce::of(&loaded);
        tracing::info!(source = %self.loader.source(), version = %loaded.version, "config document reloaded");
        Ok(Refreshed::Replaced)
    }

    /// The version of the configuration in force (see [`Loaded::version`]).
    pub fn version(&self) -> String {
        self.in_force
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .version
            .clone()
    }

    /// [`Reloading::refresh`], reporting a refusal (the last good document stays).
    pub async fn refresh_reported(&self) {
        if let Err(e) = self.refresh().await {
            tracing::error!(error = %e, "config document refused; the last good one stays in force");
            self.telemetry.config_rejected();
        }
        *self.next_check.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now() + self.every;
        self.refreshing.store(false, Ordering::Release);
    }

    /// Starts a refresh beside the invocation when one is due and none is running; whether it
    /// started one. [`Reloading::serve`] calls it before each invocation (a runtime loop of one's
    /// own would too).
    pub fn refresh_if_due(self: &Arc<Self>) -> bool {
        let due = Instant::now() >= *self.next_check.lock().unwrap_or_else(|p| p.into_inner());
        if due && !self.refreshing.swap(true, Ordering::AcqRel) {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.refresh_reported().await });
            return true;
        }
        false
    }
}

impl<S, D, B> Reloading<S, D, B>
where
    S: Records + 'static,
    D: Dispatcher + 'static,
    B: Build<S, D> + 'static,
{
    /// Runs on the Lambda Runtime API: each invocation goes to the handler in force.
    pub async fn serve(self) -> Result<(), RuntimeError> {
        let this = Arc::new(self);
        crate::runtime::serve(|event, invocation, client_context| {
            let this = Arc::clone(&this);
            async move {
                this.refresh_if_due();
                this.current()
                    .invoked(&event, &invocation, client_context.as_ref())
                    .await
            }
        })
        .await
    }
}
