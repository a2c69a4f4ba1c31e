//! The `Invoke` path of the soak: the invoke fault classes send the tool call through the
//! product's real [`LambdaDispatcher`] (its SDK client, `did_not_run`, `error_payload` and
//! throttling retries) to a local fake Lambda, which answers as Lambda's `Invoke` contract says it
//! can (docs/testing.md, "Fault model from the AWS contracts") and does the demo tool's side
//! effect only where that answer comes after the function ran.
//!
//! Each invoke names a function of its own (`chaos-<n>`), so the fake knows which invocation, and
//! so which form, a request belongs to. The fake's function has a timeout of its own
//! ([`FUNCTION_TIMEOUT`]): past it, it does no side effect, so that a tool never outlives the
//! lease its dispatcher sized for it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::attempt::{Attempt, ToolFault};
use crate::demo::DemoTool;
use toolcall_dedup::dispatch::{DispatchError, Dispatcher, LambdaDispatcher, build_client};

/// How long the fake's function may run: the lease covers it ([`Dispatcher::max_run_time`]).
pub(crate) const FUNCTION_TIMEOUT: Duration = Duration::from_secs(1);

/// What the fake Lambda answers an invoke with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An `Invoke` error: this status, `X-Amzn-Errortype` this code.
    Error(u16, &'static str),
    /// HTTP 200 with `X-Amz-Function-Error: Unhandled` and an error payload of this `errorType`.
    FunctionError(&'static str),
    /// HTTP 429 `TooManyRequestsException` to this many requests, then the function runs.
    Throttled(u32),
    /// The connection closed without an answer.
    Closed,
    /// The answer's head and half its body, then the connection closed.
    BodyCut,
    /// No connection: the dispatcher's endpoint refuses connects.
    ConnectRefused,
}

/// One form of an invoke fault class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Form {
    /// The form's name in the report's `fault_variants` (`class.label`).
    pub(crate) label: &'static str,
    /// The function runs (and does its side effect) before the answer.
    pub(crate) runs: bool,
    pub(crate) answer: Answer,
    /// What the executor must do with the claim: `Some(true)` release it (the tool provably did
    /// not run), `Some(false)` keep it until its lease ends (it may have run), `None` complete it
    /// (the invoke succeeded).
    pub(crate) release: Option<bool>,
}

const fn refused(label: &'static str, status: u16, code: &'static str) -> Form {
    Form {
        label,
        runs: false,
        answer: Answer::Error(status, code),
        release: Some(true),
    }
}

const fn unknown(label: &'static str, runs: bool, answer: Answer) -> Form {
    Form {
        label,
        runs,
        answer,
        release: Some(false),
    }
}

/// `TooManyRequestsException` once (the dispatcher retries, the function runs), or to every
/// attempt (the dispatcher gives up; the function never started).
const THROTTLED: &[Form] = &[
    Form {
        label: "429_once",
        runs: true,
        answer: Answer::Throttled(1),
        release: None,
    },
    Form {
        label: "429_every_attempt",
        runs: false,
        answer: Answer::Throttled(u32::MAX),
        release: Some(true),
    },
];

/// The `Invoke` errors Lambda answers before the function starts.
const REFUSED: &[Form] = &[
    refused(
        "400_InvalidParameterValueException",
        400,
        "InvalidParameterValueException",
    ),
    refused(
        "400_InvalidRequestContentException",
        400,
        "InvalidRequestContentException",
    ),
    refused(
        "400_RecursiveInvocationException",
        400,
        "RecursiveInvocationException",
    ),
    refused("403_AccessDeniedException", 403, "AccessDeniedException"),
    refused(
        "403_UnrecognizedClientException",
        403,
        "UnrecognizedClientException",
    ),
    refused(
        "403_InvalidSignatureException",
        403,
        "InvalidSignatureException",
    ),
    refused(
        "403_MissingAuthenticationTokenException",
        403,
        "MissingAuthenticationTokenException",
    ),
    refused("403_ExpiredTokenException", 403, "ExpiredTokenException"),
    refused("403_IncompleteSignature", 403, "IncompleteSignature"),
    refused(
        "404_ResourceNotFoundException",
        404,
        "ResourceNotFoundException",
    ),
    refused(
        "409_ResourceConflictException",
        409,
        "ResourceConflictException",
    ),
    refused(
        "413_RequestTooLargeException",
        413,
        "RequestTooLargeException",
    ),
    refused(
        "415_UnsupportedMediaTypeException",
        415,
        "UnsupportedMediaTypeException",
    ),
];

/// Set-up and restore failures before the handler, which the dispatcher cannot tell from a
/// function that started (they are not in `REFUSED_BEFORE_START`).
const PRESTART_UNKNOWN: &[Form] = &[
    unknown(
        "400_SnapStartException",
        false,
        Answer::Error(400, "SnapStartException"),
    ),
    unknown(
        "403_EFSMountFailureException",
        false,
        Answer::Error(403, "EFSMountFailureException"),
    ),
    unknown(
        "408_EFSMountConnectivityException",
        false,
        Answer::Error(408, "EFSMountConnectivityException"),
    ),
    unknown(
        "408_EFSMountTimeoutException",
        false,
        Answer::Error(408, "EFSMountTimeoutException"),
    ),
    unknown(
        "408_SnapStartTimeoutException",
        false,
        Answer::Error(408, "SnapStartTimeoutException"),
    ),
    unknown(
        "409_SnapStartNotReadyException",
        false,
        Answer::Error(409, "SnapStartNotReadyException"),
    ),
];

/// Service errors, before the function ran or after it.
const FIVE_XX: &[Form] = &[
    unknown(
        "500_ServiceException_before_run",
        false,
        Answer::Error(500, "ServiceException"),
    ),
    unknown(
        "500_ServiceException_after_run",
        true,
        Answer::Error(500, "ServiceException"),
    ),
    unknown(
        "503_ServiceUnavailable_after_run",
        true,
        Answer::Error(503, "ServiceUnavailable"),
    ),
    unknown(
        "502_EC2ThrottledException_before_run",
        false,
        Answer::Error(502, "EC2ThrottledException"),
    ),
    unknown(
        "502_ENILimitReachedException_before_run",
        false,
        Answer::Error(502, "ENILimitReachedException"),
    ),
    unknown(
        "502_KMSAccessDeniedException_before_run",
        false,
        Answer::Error(502, "KMSAccessDeniedException"),
    ),
    unknown(
        "502_ResourceNotReadyException_before_run",
        false,
        Answer::Error(502, "ResourceNotReadyException"),
    ),
    unknown(
        "502_InvalidRuntimeException_before_run",
        false,
        Answer::Error(502, "InvalidRuntimeException"),
    ),
];

/// The function's own timeout after its side effect, and an init failure before any.
const SANDBOX: &[Form] = &[
    unknown(
        "Sandbox.Timedout_after_run",
        true,
        Answer::FunctionError("Sandbox.Timedout"),
    ),
    unknown(
        "Runtime.InvalidEntrypoint_before_run",
        false,
        Answer::FunctionError("Runtime.InvalidEntrypoint"),
    ),
];

/// The connection to Lambda: refused at connect (nothing sent), closed after the function ran,
/// or its answer cut short.
const CONNECTION_LOST: &[Form] = &[
    Form {
        label: "connect_refused",
        runs: false,
        answer: Answer::ConnectRefused,
        release: Some(true),
    },
    unknown("closed_after_run", true, Answer::Closed),
    unknown("body_cut_after_run", true, Answer::BodyCut),
];

/// The forms of an invoke fault class; empty for every other fault.
pub(crate) fn forms(fault: ToolFault) -> &'static [Form] {
    match fault {
        ToolFault::InvokeThrottled => THROTTLED,
        ToolFault::InvokeRefused => REFUSED,
        ToolFault::InvokePrestartUnknown => PRESTART_UNKNOWN,
        ToolFault::Invoke5xx => FIVE_XX,
        ToolFault::SandboxTimedout => SANDBOX,
        ToolFault::InvokeConnectionLost => CONNECTION_LOST,
        _ => &[],
    }
}

/// One invoke the fake Lambda expects.
struct Job {
    attempt: Arc<Attempt>,
    target: String,
    form: Form,
    registered: Instant,
    requests: u32,
    /// The last request was answered `TooManyRequestsException`.
    throttled_last: bool,
}

/// The invokes in flight, by id, and the tool their function runs.
struct Jobs {
    pending: Mutex<HashMap<u64, Job>>,
    demo: Arc<DemoTool>,
}

/// The fake Lambda and the two dispatchers the soak's tool invokes it through.
pub(crate) struct ToolLambda {
    /// To the fake Lambda.
    dispatcher: LambdaDispatcher,
    /// To a loopback port nobody listens on.
    unreachable: LambdaDispatcher,
    jobs: Arc<Jobs>,
    next: AtomicU64,
    /// Invokes sent, by `class.label`.
    variants: Mutex<BTreeMap<String, u64>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ToolLambda {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ToolLambda {
    /// Starts the fake Lambda on a free loopback port; its function does `demo`'s side effects.
    pub(crate) async fn start(demo: Arc<DemoTool>) -> std::io::Result<ToolLambda> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        // A port that was free a moment ago: connects to it are refused.
        let closed = TcpListener::bind("127.0.0.1:0").await?;
        let closed_url = format!("http://{}", closed.local_addr()?);
        drop(closed);
        let jobs = Arc::new(Jobs {
            pending: Mutex::new(HashMap::new()),
            demo,
        });
        let server = tokio::spawn(serve(listener, jobs.clone()));
        Ok(ToolLambda {
            dispatcher: LambdaDispatcher::new(&build_client(Some(&url)).await),
            unreachable: LambdaDispatcher::new(&build_client(Some(&closed_url)).await),
            jobs,
            next: AtomicU64::new(0),
            variants: Mutex::new(BTreeMap::new()),
            server,
        })
    }

    /// Invokes the tool for `attempt` (an invoke fault class) in one of its forms, drawn here.
    pub(crate) async fn invoke(
        &self,
        attempt: Arc<Attempt>,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let forms = forms(attempt.fault);
        let form = forms[fastrand::usize(..forms.len())];
        self.invoke_form(attempt, form, target, payload, timeout)
            .await
    }

    /// Invokes the tool for `attempt`, the fake Lambda answering in `form`; notes on `attempt`
    /// what the executor must do with the claim after the dispatcher's answer.
    async fn invoke_form(
        &self,
        attempt: Arc<Attempt>,
        form: Form,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.count(attempt.fault, form.label);
        attempt.note(|n| n.invoke_release = Some(form.release));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let function = format!("chaos-{id}");
        let job = Job {
            attempt: attempt.clone(),
            target: target.to_string(),
            form,
            registered: Instant::now(),
            requests: 0,
            throttled_last: false,
        };
        self.jobs
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, job);
        let dispatcher = match form.answer {
            Answer::ConnectRefused => &self.unreachable,
            _ => &self.dispatcher,
        };
        let answered = dispatcher.invoke(&function, payload, timeout).await;
        let throttled_last = self
            .jobs
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .is_some_and(|job| job.throttled_last);
        // A claim that came late leaves the tool little time, and each throttled attempt takes a
        // round trip, so the dispatcher may stop before the form's last answer.
        match &answered {
            Err(DispatchError::Timeout { .. }) => {
                // Its time ran out with a request in flight, which may have been delivered.
                attempt.note(|n| n.invoke_release = Some(Some(false)));
                self.count(attempt.fault, "timed_out");
            }
            Err(_) if throttled_last => {
                // It gave up after a 429 (no time for another attempt): nothing started.
                attempt.note(|n| n.invoke_release = Some(Some(true)));
                self.count(attempt.fault, "given_up_throttled");
            }
            _ => {}
        }
        answered
    }

    fn count(&self, fault: ToolFault, form: &str) {
        *self
            .variants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(format!("{}.{form}", fault.name()))
            .or_default() += 1;
    }

    /// Invokes sent so far, by `class.label`, and those the dispatcher stopped before the form's
    /// last answer (`class.timed_out`, `class.given_up_throttled`).
    pub(crate) fn variants(&self) -> BTreeMap<String, u64> {
        self.variants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

async fn serve(listener: TcpListener, jobs: Arc<Jobs>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(connection(stream, jobs.clone()));
    }
}

/// One connection of the dispatcher's client: requests in turn, until it closes or an answer
/// closes it.
async fn connection(stream: TcpStream, jobs: Arc<Jobs>) {
    let mut reader = BufReader::new(stream);
    loop {
        let Some((path, body)) = read_request(&mut reader).await else {
            return;
        };
        let response = answer(&jobs, &path, &body);
        let stream = reader.get_mut();
        let written = match response {
            Response::Full(bytes) => stream.write_all(&bytes).await,
            Response::Closed => return,
            Response::Cut(bytes) => {
                let _ = stream.write_all(&bytes).await;
                return;
            }
        };
        if written.is_err() {
            return;
        }
    }
}

/// The path and body of one HTTP/1.1 request; `None` when the connection ends.
async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).await.ok()? == 0 {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await.ok()? == 0 {
            return None;
        }
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    let path = request_line.split_whitespace().nth(1)?.to_string();
    Some((path, body))
}

enum Response {
    Full(Vec<u8>),
    /// Close without an answer.
    Closed,
    /// Write these bytes (a cut answer), then close.
    Cut(Vec<u8>),
}

/// What the function of `path` (`/2015-03-31/functions/chaos-<n>/invocations`) answers.
fn answer(jobs: &Jobs, path: &str, payload: &[u8]) -> Response {
    let id = path
        .split('/')
        .nth(3)
        .and_then(|f| f.strip_prefix("chaos-"))
        .and_then(|n| n.parse::<u64>().ok());
    let job = id.and_then(|id| {
        let mut pending = jobs.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.get_mut(&id).map(|job| {
            job.requests += 1;
            job.throttled_last =
                matches!(job.form.answer, Answer::Throttled(times) if job.requests <= times);
            (
                job.attempt.clone(),
                job.target.clone(),
                job.form,
                job.registered,
                job.requests,
            )
        })
    });
    let Some((attempt, target, form, registered, requests)) = job else {
        // Its invoker gave up (or the path names no function): nothing runs.
        return Response::Full(error(404, "ResourceNotFoundException"));
    };
    if let Answer::Throttled(times) = form.answer
        && requests <= times
    {
        return Response::Full(error(429, "TooManyRequestsException"));
    }
    let mut reply = None;
    if form.runs {
        if registered.elapsed() > FUNCTION_TIMEOUT {
            return Response::Full(function_error("Sandbox.Timedout"));
        }
        match super::attempt::effect(&jobs.demo, Some(&attempt), &target, payload) {
            Ok(bytes) => reply = Some(bytes),
            Err(e) => return Response::Full(function_error_with("DemoToolError", &e.to_string())),
        }
    }
    match form.answer {
        Answer::Error(status, code) => Response::Full(error(status, code)),
        Answer::FunctionError(kind) => Response::Full(function_error(kind)),
        Answer::Throttled(_) => Response::Full(http(200, &[], &reply.unwrap_or_default())),
        Answer::Closed | Answer::ConnectRefused => Response::Closed,
        Answer::BodyCut => {
            let body = reply.unwrap_or_else(|| b"{\"response\": {}}".to_vec());
            let mut bytes = head(200, &[], body.len());
            bytes.extend_from_slice(&body[..body.len() / 2]);
            Response::Cut(bytes)
        }
    }
}

fn head(status: u16, headers: &[(&str, &str)], length: usize) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn http(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut bytes = head(status, headers, body.len());
    bytes.extend_from_slice(body);
    bytes
}

/// An `Invoke` error as Lambda's REST JSON protocol answers it.
fn error(status: u16, code: &str) -> Vec<u8> {
    let body = serde_json::json!({"Type": "User", "message": format!("chaos: {code}")});
    http(
        status,
        &[("x-amzn-errortype", code)],
        body.to_string().as_bytes(),
    )
}

fn function_error(kind: &str) -> Vec<u8> {
    function_error_with(kind, &format!("chaos: {kind}"))
}

/// HTTP 200 with the function's error payload.
fn function_error_with(kind: &str, message: &str) -> Vec<u8> {
    let body = serde_json::json!({"errorType": kind, "errorMessage": message});
    http(
        200,
        &[("x-amz-function-error", "Unhandled")],
        body.to_string().as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::Ledger;
    use toolcall_dedup::config::ErrorTypes;

    fn refund() -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "messageVersion": "1.0",
            "agent": {"name": "a", "id": "A", "alias": "B", "version": "DRAFT"},
            "inputText": "refund",
            "sessionId": "s-lambda-forms",
            "actionGroup": "payments",
            "function": "refund",
            "parameters": [
                {"name": "charge_id", "type": "string", "value": "ch_1"},
                {"name": "amount", "type": "number", "value": "5"}
            ]
        }))
        .unwrap()
    }

    /// Every form, sent through the real dispatcher: the claim decision the executor takes from
    /// its error is the one the form's contract asks for, and the side effect happened exactly
    /// when the form says the function ran.
    #[tokio::test]
    async fn every_invoke_form_is_judged_by_the_dispatcher_as_its_contract_says() {
        let demo = Arc::new(DemoTool::new(Ledger::memory()));
        let lambda = ToolLambda::start(demo.clone()).await.unwrap();
        let nothing_ran = ErrorTypes::default();
        for fault in ToolFault::ALL.into_iter().filter(|f| f.is_invoke()) {
            for form in forms(fault) {
                let attempt = Arc::new(Attempt::new(fault));
                let before = demo.ledger().entries().unwrap().len();
                let answered = lambda
                    .invoke_form(
                        attempt.clone(),
                        *form,
                        "demo-tool",
                        refund(),
                        Duration::from_secs(5),
                    )
                    .await;
                let ran = demo.ledger().entries().unwrap().len() - before;
                assert_eq!(ran, usize::from(form.runs), "{}: side effects", form.label);
                let release = match &answered {
                    Ok(_) => None,
                    Err(e) => Some(!e.outcome_unknown(&nothing_ran)),
                };
                assert_eq!(release, form.release, "{}: {answered:?}", form.label);
                assert_eq!(
                    attempt.note(|n| n.receipt_id.is_some()),
                    form.runs,
                    "{}: the receipt is noted on its invocation",
                    form.label
                );
            }
        }
    }

    #[test]
    fn only_the_invoke_classes_have_forms_and_each_has_a_label_of_its_own() {
        let mut labels = std::collections::HashSet::new();
        for fault in ToolFault::ALL {
            for form in forms(fault) {
                assert!(fault.is_invoke(), "{fault:?}");
                assert!(labels.insert((fault, form.label)), "{}", form.label);
            }
            assert_eq!(fault.is_invoke(), !forms(fault).is_empty(), "{fault:?}");
        }
    }
}
