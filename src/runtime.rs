//! The Lambda invocation loop on the Runtime API: take the next invocation, hand it to the
//! handler, post its answer.
//!
//! Why not `lambda_runtime::run`: version 1.5 parses the client context before any handler code
//! runs, and a context it cannot parse (`"client": null`, `"custom": null`, `"environment":
//! null`, `"client": {}`, a non-string `custom` value) makes its loop return an error: the process
//! exits and nothing is posted for that invocation. This loop answers every invocation the API
//! hands over. It reads the client context as the doors need it ([`read_client_context`]), answers a payload
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

use crate::doors::port::json_type_phrase;
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
    /// `Lambda-Runtime-Invocation-Id`, echoed on the answer so the API can refuse a stale one (a
    /// timed-out invocation's late answer) instead of matching it to a later invoke.
    pub(crate) invocation_id: Option<http::HeaderValue>,
    pub(crate) tenant_id: Option<String>,
    pub(crate) invocation: Invocation,
    pub(crate) trace_id: Option<String>,
    /// The client context's `custom` map, or why it cannot be read.
    pub(crate) client_context: Result<Option<ClientContext>, String>,
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
    };
    serve_at(&base, handle).await
}

/// [`serve`] on the Runtime API at `base`.
async fn serve_at<F, Fut>(base: &str, handle: F) -> Result<(), RuntimeError>
where
    F: Fn(Value, Invocation, Option<ClientContext>) -> Fut,
    Fut: Future<Output = Result<Box<RawValue>, HandlerError>>,
{
    let base = base
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
            xrayTraceId = tracing::field::Empty,
            tenantId = tracing::field::Empty,
        );
        if let Some(trace_id) = &next.trace_id {
            span.record("xrayTraceId", trace_id.as_str());
        }
        if let Some(tenant_id) = &next.tenant_id {
            span.record("tenantId", tenant_id.as_str());
        }
        let served = async {
            let answer = answer(&handle, next.payload, next.invocation, next.client_context).await;
            post(
                &client,
                &next.request_id,
                next.invocation_id.as_ref(),
                answer,
            )
            .await
        };
        tracing::Instrument::instrument(served, span).await?;
    }
}

/// The handler's answer to one invocation; a payload that is not JSON, a client context the doors
/// would misread and a panic are answered with an error instead of ending the process.
async fn answer<F, Fut>(
    handle: &F,
    payload: bytes::Bytes,
    invocation: Invocation,
    client_context: Result<Option<ClientContext>, String>,
) -> Result<Box<RawValue>, (&'static str, String)>
where
    F: Fn(Value, Invocation, Option<ClientContext>) -> Fut,
    Fut: Future<Output = Result<Box<RawValue>, HandlerError>>,
{
    let client_context = client_context.map_err(|reason| {
        tracing::error!(%reason, "the client context cannot be read");
        ("InvalidEvent", reason)
    })?;
    let event: Value = serde_json::from_slice(&payload).map_err(|e| {
        tracing::error!(error = %e, "the event is not JSON");
        ("InvalidEvent", format!("the event is not JSON: {e}"))
    })?;
    // The call is inside the guard too: a handler that panics before its first await is caught.
    let handled = futures_util::FutureExt::catch_unwind(AssertUnwindSafe(async move {
        handle(event, invocation, client_context).await
    }));
    match handled.await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(e)) => {
            let (error_type, message) = (e.error_type(), e.to_string());
            tracing::error!(error_type, error = %message, "the invocation is answered with a Lambda error");
            Err((error_type, message))
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
    // `cargo lambda watch` answers 204 when nothing is queued: no invocation, poll again.
    if parts.status == StatusCode::NO_CONTENT {
        return Ok(None);
    }
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
        .map_or(Ok(None), |value| read_client_context(value.as_bytes()));
    Ok(Some(Next {
        request_id: request_id.to_string(),
        invocation_id: parts
            .headers
            .get(INVOCATION_ID)
            .filter(|v| v.to_str().is_ok())
            .cloned(),
        tenant_id: header(&parts.headers, "lambda-runtime-aws-tenant-id").map(str::to_string),
        invocation,
        trace_id: header(&parts.headers, "lambda-runtime-trace-id").map(str::to_string),
        client_context,
        payload,
    }))
}

const INVOCATION_ID: &str = "lambda-runtime-invocation-id";

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The client context's `custom` map, which is all the doors read: `null` anywhere counts as
/// absent (`"client": null`, `"custom": null`, a `null` member), members the doors do not read
/// (`client`, `environment`) are never looked at. What the doors would misread is refused, so the
/// invocation is answered `InvalidEvent` and nothing runs: a context that is not a JSON object, a
/// `custom` that is not an object, a `custom` member that is not a string (a numeric tool name is
/// no tool name).
pub(crate) fn read_client_context(header: &[u8]) -> Result<Option<ClientContext>, String> {
    let context: Value = serde_json::from_slice(header)
        .map_err(|e| format!("the client context is not JSON: {e}"))?;
    let context = match context {
        Value::Object(context) => context,
        Value::Null => return Ok(None),
        other => {
            return Err(format!(
                "the client context is {}, not an object",
                json_type_phrase(&other)
            ));
        }
    };
    let custom = match context.get("custom") {
        None | Some(Value::Null) => return Ok(Some(ClientContext::new())),
        Some(Value::Object(custom)) => custom,
        Some(other) => {
            return Err(format!(
                "the client context's custom is {}, not an object",
                json_type_phrase(other)
            ));
        }
    };
    let mut read = ClientContext::new();
    for (name, value) in custom {
        match value {
            Value::Null => {}
            Value::String(text) => {
                read.insert(name.clone(), text.clone());
            }
            other => {
                return Err(format!(
                    "the client context's custom.{name} is {}, not a string",
                    json_type_phrase(other)
                ));
            }
        }
    }
    Ok(Some(read))
}

/// Posts the answer (or the error) for `request_id`.
async fn post(
    client: &Client,
    request_id: &str,
    invocation_id: Option<&http::HeaderValue>,
    answer: Result<Box<RawValue>, (&'static str, String)>,
) -> Result<(), RuntimeError> {
    let id = path_segment(request_id);
    let (path, body) = match &answer {
        Ok(response) => ("response", response.get().to_string()),
        Err((error_type, message)) => (
            "error",
            serde_json::json!({"errorType": error_type, "errorMessage": message}).to_string(),
        ),
    };
    let mut request = build_request()
        .method(Method::POST)
        .uri(format!("/2018-06-01/runtime/invocation/{id}/{path}"))
        .header("content-type", "application/json");
    if let Err((error_type, _)) = &answer {
        request = request.header("lambda-runtime-function-error-type", *error_type);
    }
    if let Some(invocation_id) = invocation_id {
        request = request.header(INVOCATION_ID, invocation_id);
    }
    let request = request
        .body(Body::from(body))
        .map_err(|e| RuntimeError::Api(e.into()))?;
    let response = client.call(request).await.map_err(RuntimeError::Api)?;
    let status = response.status();
    // Drain the body so the connection goes back to the pool.
    let _ = response.into_body().collect().await;
    match status {
        s if s.is_success() => Ok(()),
        // The API's own failure: the Runtime API's contract says the runtime must exit.
        StatusCode::INTERNAL_SERVER_ERROR => Err(RuntimeError::Api(
            format!("posting the answer: HTTP {status}").into(),
        )),
        // Refused (too large; 410, a timed-out invocation's late answer; an emulator whose invoker
        // left): this invocation is lost either way, the loop is not.
        _ => {
            tracing::error!(%status, request_id, "the Runtime API refused the answer");
            Ok(())
        }
    }
}

/// `id` as one URL path segment: what a URI path cannot carry as is is percent-encoded (Lambda's
/// ids are UUIDs, which pass unchanged).
fn path_segment(id: &str) -> String {
    let mut segment = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    segment
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
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use super::{RuntimeError, read_client_context, serve_at};

    /// A request the stub Runtime API received: method, path, the invocation-id and error-type
    /// headers, body.
    type Seen = (String, String, Option<String>, Option<String>, String);

    /// What the stub answers to one request: status, headers, body.
    type Reply = (u16, Vec<(&'static str, &'static str)>, &'static str);

    /// A Runtime API on loopback that answers each request with the next scripted reply (one
    /// connection each, `Connection: close`) and records what it was sent.
    fn stub_runtime_api(script: Vec<Reply>) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        std::thread::spawn(move || {
            for (reply, stream) in script.into_iter().zip(listener.incoming()) {
                let mut stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap().to_string(),
                    parts.next().unwrap().to_string(),
                );
                let (mut length, mut invocation_id, mut error_type) = (0, None, None);
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    let (name, value) = header.split_once(':').unwrap();
                    let value = value.trim().to_string();
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.parse().unwrap(),
                        "lambda-runtime-invocation-id" => invocation_id = Some(value),
                        "lambda-runtime-function-error-type" => error_type = Some(value),
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                record.lock().unwrap().push((
                    method,
                    path,
                    invocation_id,
                    error_type,
                    String::from_utf8(body).unwrap(),
                ));
                let (status, headers, body) = reply;
                let mut head = format!(
                    "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                    body.len()
                );
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                stream
                    .write_all(format!("{head}\r\n{body}").as_bytes())
                    .unwrap();
            }
        });
        (base, seen)
    }

    fn next(
        id: &'static str,
        extra: Vec<(&'static str, &'static str)>,
        body: &'static str,
    ) -> Reply {
        let mut headers = vec![("lambda-runtime-aws-request-id", id)];
        headers.extend(extra);
        (200, headers, body)
    }

    /// Issue 51: every invocation is answered, and only the API's own failure ends the loop. A
    /// refused answer (410 stale, 404), a 204 with nothing queued, an event that is not JSON, an
    /// odd client context, a handler panic: each is one invocation's, the next is served. The
    /// invocation id is echoed; an id that is not a path segment is encoded.
    #[tokio::test]
    async fn every_invocation_is_answered_and_only_the_apis_failure_stops_the_loop() {
        let accepted = (202, vec![], "");
        let (base, seen) = stub_runtime_api(vec![
            next(
                "a",
                vec![("lambda-runtime-invocation-id", "inv-1")],
                r#"{"echo": 1}"#,
            ),
            (410, vec![], "stale"),
            (204, vec![("lambda-runtime-aws-request-id", "none")], ""),
            next("b c/d", vec![], "not json"),
            (404, vec![], ""),
            next(
                "e",
                vec![(
                    "lambda-runtime-client-context",
                    r#"{"client": null, "custom": null}"#,
                )],
                r#"{"echo": 3}"#,
            ),
            accepted.clone(),
            next("p", vec![], r#"{"panic": true}"#),
            accepted.clone(),
            next("f", vec![], r#"{"echo": 2}"#),
            (500, vec![], "broken"),
        ]);
        let ended = serve_at(&base, |event, invocation, context| async move {
            assert!(event.get("panic").is_none(), "the handler panics on cue");
            let text = serde_json::json!({"event": event, "id": invocation.request_id, "context": context})
                .to_string();
            Ok(serde_json::value::RawValue::from_string(text).unwrap())
        })
        .await;
        assert!(matches!(ended, Err(RuntimeError::Api(_))), "{ended:?}");
        let seen = seen.lock().unwrap().clone();
        let posts: Vec<_> = seen.iter().filter(|s| s.0 == "POST").cloned().collect();
        let paths: Vec<&str> = posts.iter().map(|s| s.1.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/2018-06-01/runtime/invocation/a/response",
                "/2018-06-01/runtime/invocation/b%20c%2Fd/error",
                "/2018-06-01/runtime/invocation/e/response",
                "/2018-06-01/runtime/invocation/p/error",
                "/2018-06-01/runtime/invocation/f/response",
            ],
            "{seen:?}"
        );
        assert_eq!(
            posts[0].2.as_deref(),
            Some("inv-1"),
            "the invocation id is echoed"
        );
        assert_eq!(
            posts[0].4,
            r#"{"context":null,"event":{"echo":1},"id":"a"}"#
        );
        assert_eq!(posts[1].3.as_deref(), Some("InvalidEvent"));
        // `"custom": null` is a context with nothing in it, never a reason to stop.
        assert_eq!(posts[2].4, r#"{"context":{},"event":{"echo":3},"id":"e"}"#);
        assert_eq!(posts[3].3.as_deref(), Some("Internal"));
        assert!(
            posts[3].4.contains("the handler panics on cue"),
            "{}",
            posts[3].4
        );
        assert_eq!(posts[4].2, None, "no invocation id, none echoed");
    }

    /// The contexts `lambda_runtime` 1.5 cannot parse (issue 51): each is read, or refused when a
    /// door would misread it; none is fatal.
    #[test]
    fn odd_client_contexts_are_read_or_refused_never_fatal() {
        let read = |header: &str| {
            read_client_context(header.as_bytes()).map(|c| {
                c.map(|c| {
                    let mut entries: Vec<(String, String)> = c.into_iter().collect();
                    entries.sort();
                    entries
                })
            })
        };
        let pairs = |pairs: &[(&str, &str)]| {
            Ok(Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<Vec<_>>(),
            ))
        };
        assert_eq!(
            read(r#"{"client": null, "custom": {"a": "b"}, "environment": null}"#),
            pairs(&[("a", "b")])
        );
        assert_eq!(read(r#"{"client": {}, "custom": null}"#), pairs(&[]));
        assert_eq!(
            read(r#"{"custom": {"a": "b", "gone": null}}"#),
            pairs(&[("a", "b")])
        );
        assert_eq!(read("null"), Ok(None));
        for (header, reason) in [
            (
                r#"{"custom": {"bedrockAgentCoreToolName": 5}}"#,
                "custom.bedrockAgentCoreToolName is a number",
            ),
            (r#"{"custom": {"t": true}}"#, "custom.t is a boolean"),
            (
                r#"{"custom": {"nested": {"a": "b"}}}"#,
                "custom.nested is an object",
            ),
            (r#"{"custom": "x"}"#, "custom is a string"),
            ("[1, 2]", "is an array"),
            ("not json", "not JSON"),
        ] {
            let refused = read(header).unwrap_err();
            assert!(refused.contains(reason), "{header}: {refused}");
        }
    }
}
