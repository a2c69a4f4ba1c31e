//! The Lambda invocation loop on the Runtime API: take the next invocation, hand it to the
//! handler, post its answer.
//!
//! Why not `lambda_runtime::run`: version 1.5 parses the client context before any handler code
//! runs, and a context it cannot parse (`"client": null`, `"custom": null`, `"environment":
//! null`, `"client": {}`, a non-string `custom` value) makes its loop return an error: the process
//! exits and nothing is posted for that invocation. This loop answers every invocation the API
//! hands over. It reads the client context leniently ([`read_client_context`]), answers a payload
//! that is not JSON with an error, and reports a handler panic as an error, as the runtime's own
//! layers do. It is sequential, as `lambda_runtime::run` is without `AWS_LAMBDA_MAX_CONCURRENCY`.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use http::{HeaderMap, Method, StatusCode};
use http_body_util::BodyExt;
use lambda_runtime_api_client::body::Body;
use lambda_runtime_api_client::{Client, build_request};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::doors::{ClientContext, HandlerError};
use crate::handler::Invocation;

/// Why the loop stopped: only the Runtime API itself failing ends it (Lambda then restarts the
/// container), never an invocation.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `AWS_LAMBDA_RUNTIME_API` is missing or not a URI: not running under Lambda.
    #[error("AWS_LAMBDA_RUNTIME_API is not set to the Runtime API's address: {0}")]
    NoRuntimeApi(String),
    /// The Runtime API could not be reached or answered out of contract.
    #[error("the Lambda Runtime API failed: {0}")]
    Api(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// One invocation as the Runtime API hands it over.
#[derive(Debug)]
pub(crate) struct Next {
    pub(crate) request_id: String,
    pub(crate) invocation: Invocation,
    pub(crate) trace_id: Option<String>,
    pub(crate) client_context: Option<ClientContext>,
    pub(crate) payload: bytes::Bytes,
}

/// Serves invocations until the Runtime API fails: `handle` gets each event (parsed), what the
/// runtime says of it and its client context's `custom` map.
pub(crate) async fn serve<F, Fut>(handle: F) -> Result<(), RuntimeError>
where
    F: Fn(Value, Invocation, Option<ClientContext>) -> Fut,
    Fut: Future<Output = Result<Box<RawValue>, HandlerError>>,
{
    let address = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .map_err(|e| RuntimeError::NoRuntimeApi(e.to_string()))?;
    // Lambda sets `host:port`; emulators (cargo lambda watch) set a whole URI with a path.
    let base = if address.contains("://") {
        address
    } else {
        format!("http://{address}")
    }
    .parse()
    .map_err(|e: http::uri::InvalidUri| RuntimeError::NoRuntimeApi(e.to_string()))?;
    let client = Client::builder()
        .with_endpoint(base)
        .build()
        .map_err(|e| RuntimeError::Api(e.into()))?;
    loop {
        let Some(next) = next_invocation(&client).await? else {
            continue;
        };
        set_trace_header(next.trace_id.as_deref());
        let span = tracing::info_span!(
            "Lambda runtime invoke",
            requestId = %next.request_id,
            xrayTraceId = next.trace_id.as_deref().unwrap_or_default()
        );
        let answer = answer(&handle, next.payload, next.invocation, next.client_context);
        let answer = tracing::Instrument::instrument(answer, span).await;
        post(&client, &next.request_id, answer).await?;
    }
}

/// The handler's answer to one invocation; a payload that is not JSON and a panic are answered
/// with an error instead of ending the process.
async fn answer<F, Fut>(
    handle: &F,
    payload: bytes::Bytes,
    invocation: Invocation,
    client_context: Option<ClientContext>,
) -> Result<Box<RawValue>, (&'static str, String)>
where
    F: Fn(Value, Invocation, Option<ClientContext>) -> Fut,
    Fut: Future<Output = Result<Box<RawValue>, HandlerError>>,
{
    let event: Value = serde_json::from_slice(&payload)
        .map_err(|e| ("InvalidEvent", format!("the event is not JSON: {e}")))?;
    let handled = AssertUnwindSafe(handle(event, invocation, client_context));
    match futures_util::FutureExt::catch_unwind(handled).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => {
            let diagnostic = lambda_runtime::Diagnostic::from(e);
            Err((error_type(&diagnostic.error_type), diagnostic.error_message))
        }
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            tracing::error!(panic = %message, "the handler panicked");
            Err(("Internal", format!("internal error: {message}")))
        }
    }
}

/// The error types a Lambda error reports are a closed set (`HandlerError`'s).
fn error_type(name: &str) -> &'static str {
    match name {
        "DoorNotServed" => "DoorNotServed",
        "InvalidEvent" => "InvalidEvent",
        _ => "Internal",
    }
}

/// The next invocation, or `None` for one that carries no request id (nothing can be posted
/// for it; the API hands over the next one).
async fn next_invocation(client: &Client) -> Result<Option<Next>, RuntimeError> {
    let request = build_request()
        .method(Method::GET)
        .uri("/2018-06-01/runtime/invocation/next")
        .body(Body::empty())
        .map_err(|e| RuntimeError::Api(e.into()))?;
    let response = client.call(request).await.map_err(RuntimeError::Api)?;
    let (parts, body) = response.into_parts();
    let payload = body
        .collect()
        .await
        .map_err(|e| RuntimeError::Api(e.into()))?
        .to_bytes();
    if !parts.status.is_success() {
        return Err(RuntimeError::Api(
            format!("next invocation: HTTP {}", parts.status).into(),
        ));
    }
    let Some(request_id) = header(&parts.headers, "lambda-runtime-aws-request-id") else {
        tracing::error!("an invocation without a request id: nothing can answer it");
        return Ok(None);
    };
    let invocation = Invocation::from_runtime(
        request_id,
        header(&parts.headers, "lambda-runtime-deadline-ms").and_then(|d| d.parse().ok()),
        header(&parts.headers, "lambda-runtime-invoked-function-arn").unwrap_or_default(),
    );
    let client_context = parts
        .headers
        .get("lambda-runtime-client-context")
        .and_then(|value| read_client_context(value.as_bytes()));
    Ok(Some(Next {
        request_id: request_id.to_string(),
        invocation,
        trace_id: header(&parts.headers, "lambda-runtime-trace-id").map(str::to_string),
        client_context,
        payload,
    }))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The client context's `custom` map, read leniently: what Lambda forwards is whatever the
/// invoker sent. `null` anywhere counts as absent; a `custom` member that is not a string keeps its
/// JSON text (the door that reads it then refuses it in its caller's format); a context that is not
/// a JSON object counts as none. An empty `custom` is still a context (an empty map).
pub(crate) fn read_client_context(header: &[u8]) -> Option<ClientContext> {
    let context: Value = match serde_json::from_slice(header) {
        Ok(context) => context,
        Err(e) => {
            tracing::warn!(error = %e, "a client context that is not JSON is ignored");
            return None;
        }
    };
    let context = context.as_object()?;
    let custom = match context.get("custom") {
        Some(Value::Object(custom)) => custom
            .iter()
            .filter(|(_, value)| !value.is_null())
            .map(|(name, value)| {
                let text = match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                (name.clone(), text)
            })
            .collect(),
        _ => ClientContext::new(),
    };
    Some(custom)
}

/// Posts the answer (or the error) for `request_id`.
async fn post(
    client: &Client,
    request_id: &str,
    answer: Result<Box<RawValue>, (&'static str, String)>,
) -> Result<(), RuntimeError> {
    let request = match answer {
        Ok(response) => build_request()
            .method(Method::POST)
            .uri(format!(
                "/2018-06-01/runtime/invocation/{request_id}/response"
            ))
            .header("content-type", "application/json")
            .body(Body::from(response.get().to_string())),
        Err((error_type, message)) => {
            let body = serde_json::json!({"errorType": error_type, "errorMessage": message});
            build_request()
                .method(Method::POST)
                .uri(format!("/2018-06-01/runtime/invocation/{request_id}/error"))
                .header("content-type", "application/json")
                .header("lambda-runtime-function-error-type", error_type)
                .body(Body::from(body.to_string()))
        }
    }
    .map_err(|e| RuntimeError::Api(e.into()))?;
    let response = client.call(request).await.map_err(RuntimeError::Api)?;
    let status = response.status();
    // Drain the body so the connection goes back to the pool.
    let _ = response.into_body().collect().await;
    match status {
        s if s.is_success() => Ok(()),
        // 400/413: the API refused this answer (too large, or the invocation already timed out);
        // the invocation is lost either way, the loop is not.
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => {
            tracing::error!(%status, request_id, "the Runtime API refused the answer");
            Ok(())
        }
        _ => Err(RuntimeError::Api(
            format!("posting the answer: HTTP {status}").into(),
        )),
    }
}

/// The trace header X-Ray and the AWS SDK read for this invocation, as `lambda_runtime` sets it.
fn set_trace_header(trace_id: Option<&str>) {
    // SAFETY: set between invocations, on the one thread that serves them, exactly as
    // `lambda_runtime` 1.5 does; the SDK reads it when it builds a request.
    unsafe {
        match trace_id {
            Some(id) => std::env::set_var("_X_AMZN_TRACE_ID", id),
            None => std::env::remove_var("_X_AMZN_TRACE_ID"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read_client_context;

    /// The contexts `lambda_runtime` 1.5 cannot parse (issue 51), each read here.
    #[test]
    fn odd_client_contexts_are_read_not_fatal() {
        for (header, custom) in [
            (
                r#"{"client": null, "custom": {"a": "b"}, "environment": {}}"#,
                Some(vec![("a", "b")]),
            ),
            (
                r#"{"client": {}, "custom": null, "environment": null}"#,
                Some(vec![]),
            ),
            (
                r#"{"custom": {"n": 5, "t": true, "gone": null, "s": "x"}}"#,
                Some(vec![("n", "5"), ("s", "x"), ("t", "true")]),
            ),
            (
                r#"{"custom": {"nested": {"a": 1}}}"#,
                Some(vec![("nested", r#"{"a":1}"#)]),
            ),
            ("[1, 2]", None),
            ("null", None),
            ("not json", None),
        ] {
            let read = read_client_context(header.as_bytes()).map(|c| {
                let mut entries: Vec<(String, String)> = c.into_iter().collect();
                entries.sort();
                entries
            });
            let expected = custom.map(|pairs| {
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<Vec<_>>()
            });
            assert_eq!(read, expected, "{header}");
        }
    }
}
