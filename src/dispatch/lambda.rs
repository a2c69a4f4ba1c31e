//! [`Dispatcher`] over `aws-sdk-lambda` `Invoke` (RequestResponse), routed by `DEDUP_ROUTES`.
//!
//! The SDK's own retries are off: retrying a synchronous invoke whose response was lost would run
//! the tool twice, which is exactly what this crate exists to prevent. Only throttling
//! (`TooManyRequestsException`: the tool never started) is retried here, within the time left.
//!
//! A failed invoke counts as "did not run" only when the SDK error proves the request never left:
//! it could not be built, or the connection was never made (refused, DNS failure, TLS handshake,
//! connect timeout). A connection that breaks later may have delivered the invoke.
//!
//! Each tool's own timeout bounds how long it can run after we stop waiting; the handler's lease
//! covers it ([`Dispatcher::max_run_time`]). It comes from the route (`timeout_seconds`, which
//! SAM and CDK write), else from `GetFunctionConfiguration` at cold start and every five minutes
//! ([`LambdaDispatcher::keep_timeouts_current`], switched off by `DEDUP_LOOK_UP_TIMEOUTS=false`:
//! that permission also reads the tool's environment variables), else Lambda's maximum.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::retry::RetryConfig;

use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use tokio::time::Instant;

use base64::Engine as _;

use super::Routes;
use super::{DispatchError, Dispatcher, Route};
use crate::backoff::Backoff;
use crate::doors::port::Forward;
use crate::executor::lease::{MAX_TOOL_TIMEOUT, TOOL_START_ALLOWANCE};

/// Attempts on throttling before giving up (the first attempt included).
const THROTTLE_ATTEMPTS: u32 = 3;

/// The pauses between throttled attempts: about 120 ms, then 240 ms (the crate's one backoff).
const THROTTLE_BACKOFF: Backoff = Backoff {
    first: Duration::from_millis(160),
    most: Duration::from_millis(640),
};

/// Bound on looking up one tool's timeout.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// How often looked-up timeouts are read again: a tool redeployed with a longer timeout must not
/// keep the old, shorter lease for the life of this container.
const LOOKUP_REFRESH: Duration = Duration::from_secs(300);

/// Invokes tool Lambdas chosen by the handler's route table.
#[derive(Debug, Clone)]
pub struct LambdaDispatcher {
    client: Client,
    /// Tool timeouts found by [`LambdaDispatcher::look_up_timeouts`] (shared by clones).
    looked_up: Arc<RwLock<HashMap<String, Duration>>>,
    /// Targets routed to whose timeout is neither stated nor looked up yet (shared by clones):
    /// the next lookup reads them, so that a function a config refresh routes to is looked up
    /// like the ones routed to at start-up.
    unknown: Arc<Mutex<HashSet<String>>>,
}

impl LambdaDispatcher {
    /// A dispatcher on `client` (whose retries are switched off here).
    pub fn new(client: &Client) -> LambdaDispatcher {
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        LambdaDispatcher {
            client: Client::from_conf(conf),
            looked_up: Arc::default(),
            unknown: Arc::default(),
        }
    }

    /// Calls [`LambdaDispatcher::look_up_timeouts`] for `routes` now, then every five minutes for
    /// every target routed to since (the Lambda runs it in the background when
    /// `DEDUP_LOOK_UP_TIMEOUTS` is on; a frozen container simply refreshes late).
    pub async fn keep_timeouts_current(&self, routes: Routes) {
        self.look_up_timeouts(&routes).await;
        loop {
            tokio::time::sleep(LOOKUP_REFRESH).await;
            self.look_up_timeouts(&routes).await;
        }
    }

    /// Looks up the timeout of every tool `routes` route to whose route does not state one, of
    /// every target routed to whose timeout is not known yet, and of every one looked up before,
    /// with `GetFunctionConfiguration`, for this dispatcher and its clones. Until it is known,
    /// and when its lookup fails (no permission, a local emulator), a tool counts as running up
    /// to Lambda's maximum, so its lease errs on the long side. The Lambda runs this in the
    /// background, so that cold start does not wait for it.
    pub async fn look_up_timeouts(&self, routes: &Routes) {
        let mut targets: HashSet<String> = routes
            .targets()
            .into_iter()
            .filter(|t| routes.stated_timeout(t).is_none())
            .map(str::to_string)
            .collect();
        targets.extend(std::mem::take(
            &mut *self.unknown.lock().unwrap_or_else(|p| p.into_inner()),
        ));
        // Read again what was read before: a tool redeployed with a longer timeout.
        targets.extend(
            (self.looked_up.read().unwrap_or_else(|p| p.into_inner()))
                .keys()
                .cloned(),
        );
        let mut lookups = tokio::task::JoinSet::new();
        for target in targets {
            let request = self
                .client
                .get_function_configuration()
                .function_name(&target)
                .send();
            lookups.spawn(
                async move { (target, tokio::time::timeout(LOOKUP_TIMEOUT, request).await) },
            );
        }
        while let Some(joined) = lookups.join_next().await {
            let Ok((target, found)) = joined else {
                continue;
            };
            match found {
                Ok(Ok(conf)) => match conf.timeout().and_then(|s| u64::try_from(s).ok()) {
                    Some(seconds) if seconds > 0 => {
                        tracing::info!(target_fn = %target, seconds, "tool timeout");
                        self.looked_up
                            .write()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(target, Duration::from_secs(seconds));
                    }
                    _ => tracing::warn!(target_fn = %target, "tool configuration has no timeout"),
                },
                Ok(Err(e)) => tracing::warn!(
                    target_fn = %target,
                    error = %aws_sdk_lambda::error::DisplayErrorContext(&e),
                    "could not look up the tool's timeout; its lease assumes Lambda's maximum (900 s). \
                     State it in DEDUP_ROUTES as {{\"function\": ..., \"timeout_seconds\": N}}"
                ),
                Err(_) => tracing::warn!(
                    target_fn = %target,
                    "looking up the tool's timeout timed out; its lease assumes Lambda's maximum (900 s)"
                ),
            }
        }
    }
}

/// A Lambda client from the default AWS configuration, optionally pointed at a local endpoint
/// (see `aws::sdk_config`).
pub async fn build_client(endpoint_url: Option<&str>) -> Client {
    Client::new(&crate::aws::sdk_config(endpoint_url).await)
}

impl LambdaDispatcher {
    /// The tool's own timeout (stated in `routes`, else looked up), plus how late it may start:
    /// its init phase runs outside the timeout, and a throttled invoke is retried. A target whose
    /// timeout is unknown counts as running up to Lambda's maximum, and is looked up next time.
    fn max_run_time(&self, routes: &Routes, target: &str) -> Duration {
        let timeout = routes.stated_timeout(target).or_else(|| {
            let looked_up = self.looked_up.read().unwrap_or_else(|p| p.into_inner());
            looked_up.get(target).copied()
        });
        let timeout = timeout.unwrap_or_else(|| {
            let mut unknown = self.unknown.lock().unwrap_or_else(|p| p.into_inner());
            // A target whose lookup keeps failing is asked about on every call: no allocation
            // once it is noted.
            if !unknown.contains(target) {
                unknown.insert(target.to_string());
            }
            MAX_TOOL_TIMEOUT
        });
        timeout + TOOL_START_ALLOWANCE
    }
}

impl Dispatcher for LambdaDispatcher {
    fn route(
        &self,
        routes: &Routes,
        action_group: &str,
        tool: &str,
    ) -> Result<Route, DispatchError> {
        let (target, namespace) =
            routes
                .take(action_group, tool)
                .ok_or_else(|| DispatchError::NoRoute {
                    action_group: action_group.to_string(),
                    tool: tool.to_string(),
                })?;
        Ok(Route {
            max_run_time: self.max_run_time(routes, target),
            target: target.to_string(),
            namespace: namespace.map(str::to_string),
        })
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.invoke_with(target, payload, None, timeout).await
    }

    async fn invoke_forward(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        // Lambda takes the client context base64-encoded.
        let context = forward
            .client_context
            .map(|json| base64::engine::general_purpose::STANDARD.encode(json));
        self.invoke_with(target, forward.payload, context, timeout)
            .await
    }
}

impl LambdaDispatcher {
    async fn invoke_with(
        &self,
        target: &str,
        payload: Vec<u8>,
        client_context: Option<String>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let end = Instant::now() + timeout;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let send = self
                .client
                .invoke()
                .function_name(target)
                .invocation_type(InvocationType::RequestResponse)
                .payload(Blob::new(payload.clone()))
                .set_client_context(client_context.clone())
                .send();
            let result = match tokio::time::timeout_at(end, send).await {
                Ok(result) => result,
                Err(_) => {
                    return Err(DispatchError::Timeout {
                        target: target.to_string(),
                        after: timeout,
                    });
                }
            };
            let out = match result {
                Ok(out) => out,
                Err(SdkError::ServiceError(e))
                    if matches!(e.err(), InvokeError::TooManyRequestsException(_))
                        && attempt < THROTTLE_ATTEMPTS =>
                {
                    let pause = THROTTLE_BACKOFF.jittered(attempt);
                    if Instant::now() + pause >= end {
                        return Err(invoke_error(target, SdkError::ServiceError(e)));
                    }
                    tracing::warn!(
                        target_fn = target,
                        attempt,
                        "tool invoke throttled; retrying"
                    );
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(e) => return Err(invoke_error(target, e)),
            };
            let body = out
                .payload()
                .map(|b| b.as_ref().to_vec())
                .unwrap_or_default();
            if let Some(header) = out.function_error() {
                let (error_type, message) = error_payload(&body);
                return Err(DispatchError::FunctionError {
                    target: target.to_string(),
                    kind: error_type.unwrap_or_else(|| header.to_string()),
                    message,
                });
            }
            return Ok(body);
        }
    }
}

fn invoke_error(target: &str, e: SdkError<InvokeError, HttpResponse>) -> DispatchError {
    DispatchError::Invoke {
        target: target.to_string(),
        outcome_unknown: !did_not_run(&e),
        source: Box::new(e),
    }
}

/// True only when the error proves the tool did not run: the invoke could not be built, no
/// connection was made (hyper's connect phase: refused, DNS, TLS handshake, connect timeout), or
/// Lambda refused it with an error it raises before starting the function
/// ([`REFUSED_BEFORE_START`]). Every other failure (a reset, a read timeout, a cut response, a
/// 5xx, and 4xx answers that can come mid-run, such as `EFSIOException`) may follow a delivered
/// invoke.
fn did_not_run(e: &SdkError<InvokeError, HttpResponse>) -> bool {
    use aws_sdk_lambda::error::ProvideErrorMetadata;
    match e {
        SdkError::ConstructionFailure(_) => true,
        SdkError::DispatchFailure(d) if d.is_user() => true,
        SdkError::DispatchFailure(_) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(err) = source {
                if err
                    .downcast_ref::<hyper_util::client::legacy::Error>()
                    .is_some_and(hyper_util::client::legacy::Error::is_connect)
                {
                    return true;
                }
                source = err.source();
            }
            false
        }
        SdkError::ServiceError(service) => {
            service.raw().status().is_client_error()
                && e.code()
                    .is_some_and(|code| REFUSED_BEFORE_START.contains(&code))
        }
        _ => false,
    }
}

/// `Invoke` errors (HTTP 4xx) that Lambda answers before the function starts: the request was
/// refused as such (throttled, too large, malformed, not found, not allowed, unsigned, a function
/// being updated or in a recursive loop). Any other 4xx, such as `EFSIOException` (410), can
/// come after the function started, so it leaves the outcome unknown.
pub(crate) const REFUSED_BEFORE_START: &[&str] = &[
    "TooManyRequestsException",
    "RequestTooLargeException",
    "InvalidRequestContentException",
    "InvalidParameterValueException",
    "UnsupportedMediaTypeException",
    "ResourceNotFoundException",
    "ResourceConflictException",
    "RecursiveInvocationException",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "MissingAuthenticationTokenException",
    "ExpiredTokenException",
    "IncompleteSignature",
];

/// The `errorType` and `errorMessage` (shortened) of a Lambda error payload; no type and the raw
/// text if it is not one.
fn error_payload(body: &[u8]) -> (Option<String>, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(|m| m.as_str())
            .map(str::to_string)
    };
    let message =
        field("errorMessage").unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let mut short: String = message.chars().take(300).collect();
    if short.len() < message.len() {
        short.push('…');
    }
    (field("errorType").filter(|t| !t.is_empty()), short)
}
