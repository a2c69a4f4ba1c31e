//! [`Dispatcher`] over `aws-sdk-lambda` `Invoke` (RequestResponse), routed by `DEDUP_ROUTES`.
//!
//! The SDK's own retries are off: retrying a synchronous invoke whose response was lost would run
//! the tool twice, which is exactly what this crate exists to prevent. Only throttling
//! (`TooManyRequestsException`: the tool never started) is retried here, within the time left.

use std::time::Duration;

use aws_sdk_lambda::Client;
use aws_sdk_lambda::config::retry::RetryConfig;

use aws_sdk_lambda::error::SdkError;
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use tokio::time::Instant;

use super::{DispatchError, Dispatcher};
use crate::config::Routes;

/// Attempts on throttling before giving up (the first attempt included).
const THROTTLE_ATTEMPTS: u32 = 3;

/// Invokes tool Lambdas chosen by a route table.
#[derive(Debug, Clone)]
pub struct LambdaDispatcher {
    client: Client,
    routes: Routes,
}

impl LambdaDispatcher {
    /// A dispatcher on `client` (whose retries are switched off here).
    pub fn new(client: &Client, routes: Routes) -> LambdaDispatcher {
        let conf = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        LambdaDispatcher {
            client: Client::from_conf(conf),
            routes,
        }
    }

    pub fn routes(&self) -> &Routes {
        &self.routes
    }
}

/// A Lambda client from the default AWS configuration, optionally pointed at a local endpoint
/// (see [`crate::aws::sdk_config`]).
pub async fn build_client(endpoint_url: Option<&str>) -> Client {
    Client::new(&crate::aws::sdk_config(endpoint_url).await)
}

impl Dispatcher for LambdaDispatcher {
    fn route(&self, action_group: &str, tool: &str) -> Result<String, DispatchError> {
        self.routes
            .resolve(action_group, tool)
            .map(str::to_string)
            .ok_or_else(|| DispatchError::NoRoute {
                action_group: action_group.to_string(),
                tool: tool.to_string(),
            })
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
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
                    let pause =
                        Duration::from_millis(50 * 2u64.pow(attempt) + fastrand::u64(0..50));
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
            if let Some(kind) = out.function_error() {
                return Err(DispatchError::FunctionError {
                    target: target.to_string(),
                    kind: kind.to_string(),
                    message: error_message(&body),
                });
            }
            return Ok(body);
        }
    }
}

fn invoke_error<R: std::fmt::Debug + Send + Sync + 'static>(
    target: &str,
    e: SdkError<InvokeError, R>,
) -> DispatchError {
    // A request that timed out or whose response could not be read may have run the tool.
    let outcome_unknown = matches!(e, SdkError::TimeoutError(_) | SdkError::ResponseError(_));
    DispatchError::Invoke {
        target: target.to_string(),
        outcome_unknown,
        source: Box::new(e),
    }
}

/// The `errorMessage` of a Lambda error payload, shortened; the raw text if it is not one.
fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.get("errorMessage"))
        .and_then(|m| m.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let mut short: String = message.chars().take(300).collect();
    if short.len() < message.len() {
        short.push('…');
    }
    short
}
