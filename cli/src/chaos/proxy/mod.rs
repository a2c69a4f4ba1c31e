//! A fault-injecting HTTP/1.1 proxy in front of a DynamoDB-compatible server.
//!
//! It reads each request the SDK sends (headers and a `Content-Length` body), draws a fault from
//! its seeded generator, and then forwards it on a fresh upstream connection, or does not:
//!
//! - **drop before**: the connection is closed without forwarding (the write never happened);
//! - **drop after**: the request is forwarded and the answer thrown away, then the connection is
//!   closed (the write happened, the caller cannot know: an ambiguous failure);
//! - **delay**: the request is forwarded and the answer held past the SDK's attempt timeout;
//! - **deliver late**: the connection is closed at once (the SDK retries) and the request is
//!   delivered anyway, later, after the retry (a stale write arriving out of order: only the lease
//!   token's fence keeps it from touching a record someone else now holds);
//! - **throttle**: the proxy itself answers HTTP 400 with the body DynamoDB sends for
//!   `ProvisionedThroughputExceededException`, `ThrottlingException` or `RequestLimitExceeded`
//!   (never forwarded);
//! - **server error**: HTTP 500 `InternalServerError` or 503 `ServiceUnavailable`, either instead
//!   of forwarding (not applied) or in place of the server's answer after forwarding (applied);
//!   DynamoDB documents that a write answered 500 may have succeeded or failed;
//! - **write conflict**: a PutItem, UpdateItem or DeleteItem answered HTTP 400
//!   `TransactionConflictException` or `ReplicatedWriteConflictException` without forwarding
//!   (documented as not applied; a GetItem is forwarded untouched);
//! - **request timeout**: HTTP 408 `RequestTimeoutException` without forwarding;
//! - **garbled answer**: forwarded, then the answer's body is cut short of its `Content-Length`
//!   and the connection closed, or replaced by a body that is not JSON (its first half);
//! - **stalled body**: forwarded, then the answer's head and half its body are sent and the rest
//!   never comes: the connection stalls past the SDK's attempt timeout, then closes.
//!
//! Besides these random faults, [`KeyedFaults`] hits the requests of one operation on one key for a
//! while (armed by the soak's store wrapper for an invocation's planned store fault): every answer
//! is forwarded and then **held** (past the attempt timeout, or just slow) or **dropped**; or the
//! first matching request is answered HTTP 400 `ValidationException` "Item size has exceeded the
//! maximum allowed size" without forwarding (**item too large**).
//!
//! Windows, switched on and off by the soak:
//!
//! - [`FaultProxy::set_outage`] turns the server "off" as a client sees a crashed process: every
//!   open connection is cut and new ones are accepted and closed at once, until the outage ends.
//! - [`FaultProxy::set_refusing`] closes the proxy's listening socket (every open connection cut),
//!   so that a connect is refused by the kernel (`ECONNREFUSED`: the connect-phase dispatch
//!   failure, nothing sent), and listens again on the same port when the window ends.
//! - [`FaultProxy::set_access_error`] answers every request with HTTP 400
//!   `ResourceNotFoundException`, `AccessDeniedException` or `ExpiredTokenException` without
//!   forwarding (a table deleted or not `ACTIVE`, a role's permission removed, expired
//!   credentials). Its start cuts every open connection, so that a request in flight then (a write
//!   that may apply, unanswered) is retried into the window: the final error after an ambiguous
//!   attempt.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// Probabilities, in per mille of requests, of each per-request fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestFaults {
    pub drop_before: u32,
    pub drop_after: u32,
    pub delay: u32,
    pub throttle_provisioned: u32,
    pub throttle_rate: u32,
    pub deliver_late: u32,
    /// 500 or 503, before or after forwarding (a quarter each).
    pub server_error: u32,
    pub throttle_request_limit: u32,
    /// Drawn for every operation; a GetItem it falls on is forwarded untouched (not counted).
    pub write_conflict: u32,
    pub request_timeout: u32,
    /// Cut short or not JSON (half each).
    pub garbled: u32,
    pub stalled: u32,
    /// How long a delayed answer is held (past the SDK attempt timeout).
    pub delay_by: Duration,
    /// A late request is delivered after a random time below this.
    pub late_by: Duration,
    /// How long a stalled body is held (past the SDK attempt timeout) before the connection closes.
    pub stall_for: Duration,
}

impl RequestFaults {
    pub const NONE: RequestFaults = RequestFaults {
        drop_before: 0,
        drop_after: 0,
        delay: 0,
        throttle_provisioned: 0,
        throttle_rate: 0,
        deliver_late: 0,
        server_error: 0,
        throttle_request_limit: 0,
        write_conflict: 0,
        request_timeout: 0,
        garbled: 0,
        stalled: 0,
        delay_by: Duration::ZERO,
        late_by: Duration::ZERO,
        stall_for: Duration::ZERO,
    };

    /// These faults without `fault` (never drawn; the others keep their rolls).
    pub fn without(mut self, fault: StoreFault) -> RequestFaults {
        if let Some(per_mille) = self.per_mille_mut(fault) {
            *per_mille = 0;
        }
        self
    }

    /// The per mille of a fault drawn per request; `None` for the others.
    fn per_mille_mut(&mut self, fault: StoreFault) -> Option<&mut u32> {
        Some(match fault {
            StoreFault::DropBeforeForward => &mut self.drop_before,
            StoreFault::DropAfterForward => &mut self.drop_after,
            StoreFault::DelayPastTimeout => &mut self.delay,
            StoreFault::ThrottleProvisioned => &mut self.throttle_provisioned,
            StoreFault::ThrottleRate => &mut self.throttle_rate,
            StoreFault::DeliverLate => &mut self.deliver_late,
            StoreFault::ServerError => &mut self.server_error,
            StoreFault::ThrottleRequestLimit => &mut self.throttle_request_limit,
            StoreFault::WriteConflict => &mut self.write_conflict,
            StoreFault::RequestTimeout => &mut self.request_timeout,
            StoreFault::ResponseGarbled => &mut self.garbled,
            StoreFault::BodyStalled => &mut self.stalled,
            StoreFault::OutageRefused
            | StoreFault::KeyedAnswerHeld
            | StoreFault::KeyedAnswerDropped
            | StoreFault::AccessOrTableError
            | StoreFault::ItemTooLarge
            | StoreFault::ItemTooLargeOnClaim => return None,
        })
    }
}

/// A fault the proxy injects, as counted in the report (the key of the summary's `faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StoreFault {
    DropBeforeForward,
    DropAfterForward,
    DelayPastTimeout,
    ThrottleProvisioned,
    ThrottleRate,
    DeliverLate,
    /// A connection refused or cut during an outage window.
    OutageRefused,
    /// A request hit by an armed [`KeyedFault::Hold`]: forwarded, its answer held.
    KeyedAnswerHeld,
    /// A request hit by an armed [`KeyedFault::Drop`]: forwarded, its answer dropped.
    KeyedAnswerDropped,
    /// HTTP 500 `InternalServerError` / 503 `ServiceUnavailable`, before or after forwarding.
    ServerError,
    /// HTTP 400 `RequestLimitExceeded`, not forwarded.
    ThrottleRequestLimit,
    /// HTTP 400 `TransactionConflictException` / `ReplicatedWriteConflictException` on a write,
    /// not forwarded.
    WriteConflict,
    /// HTTP 408 `RequestTimeoutException`, not forwarded.
    RequestTimeout,
    /// A request answered in an access-or-table-error window, not forwarded.
    AccessOrTableError,
    /// A request hit by an armed [`KeyedFault::ItemTooLarge`]: HTTP 400 `ValidationException`
    /// "Item size has exceeded the maximum allowed size", not forwarded.
    ItemTooLarge,
    /// The same answer to a claim's `PutItem`.
    ItemTooLargeOnClaim,
    /// Forwarded; the answer's body cut short of its `Content-Length`, or not JSON.
    ResponseGarbled,
    /// Forwarded; the answer's body stalled past the attempt timeout.
    BodyStalled,
}

impl StoreFault {
    pub const ALL: [StoreFault; 18] = [
        StoreFault::DropBeforeForward,
        StoreFault::DropAfterForward,
        StoreFault::DelayPastTimeout,
        StoreFault::ThrottleProvisioned,
        StoreFault::ThrottleRate,
        StoreFault::DeliverLate,
        StoreFault::OutageRefused,
        StoreFault::KeyedAnswerHeld,
        StoreFault::KeyedAnswerDropped,
        StoreFault::ServerError,
        StoreFault::ThrottleRequestLimit,
        StoreFault::WriteConflict,
        StoreFault::RequestTimeout,
        StoreFault::AccessOrTableError,
        StoreFault::ItemTooLarge,
        StoreFault::ItemTooLargeOnClaim,
        StoreFault::ResponseGarbled,
        StoreFault::BodyStalled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StoreFault::DropBeforeForward => "store_drop_before_forward",
            StoreFault::DropAfterForward => "store_drop_after_forward",
            StoreFault::DelayPastTimeout => "store_delay_past_timeout",
            StoreFault::ThrottleProvisioned => "store_throttle_provisioned_throughput",
            StoreFault::ThrottleRate => "store_throttle_rate",
            StoreFault::DeliverLate => "store_request_delivered_late",
            StoreFault::OutageRefused => "store_outage_refused",
            StoreFault::KeyedAnswerHeld => "store_keyed_answer_held",
            StoreFault::KeyedAnswerDropped => "store_keyed_answer_dropped",
            StoreFault::ServerError => "store_server_error",
            StoreFault::ThrottleRequestLimit => "store_throttle_request_limit",
            StoreFault::WriteConflict => "store_write_conflict",
            StoreFault::RequestTimeout => "store_request_timeout_408",
            StoreFault::AccessOrTableError => "store_access_or_table_error",
            StoreFault::ItemTooLarge => "store_item_too_large",
            StoreFault::ItemTooLargeOnClaim => "store_item_too_large_on_claim",
            StoreFault::ResponseGarbled => "store_response_garbled",
            StoreFault::BodyStalled => "store_body_stalled",
        }
    }

    /// Drawn per request from [`RequestFaults`] (so `--without` can leave it out there).
    pub fn is_per_request(self) -> bool {
        let mut faults = RequestFaults::NONE;
        faults.per_mille_mut(self).is_some()
    }
}

/// An answer the proxy writes itself: status, reason phrase, body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canned {
    pub status: u16,
    pub reason: &'static str,
    pub body: &'static str,
}

impl Canned {
    /// An answer with the status the documentation gives it.
    const fn new(status: u16, reason: &'static str, body: &'static str) -> Canned {
        Canned {
            status,
            reason,
            body,
        }
    }

    const fn bad_request(body: &'static str) -> Canned {
        Canned::new(400, "Bad Request", body)
    }

    fn bytes(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {} {}\r\nx-amzn-RequestId: chaos-proxy\r\n\
             Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{}",
            self.status,
            self.reason,
            self.body.len(),
            self.body
        )
        .into_bytes()
    }
}

/// The answer DynamoDB sends when a table's provisioned throughput is exceeded.
pub const PROVISIONED_THROUGHPUT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}"#,
);
/// The answer DynamoDB sends when the account's request rate is throttled.
pub const THROTTLING: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.availability#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#,
);
/// The answer DynamoDB sends when the account's throughput limit is exceeded.
pub const REQUEST_LIMIT_EXCEEDED: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#RequestLimitExceeded","message":"Throughput exceeds the current throughput limit for your account. Please contact AWS Support at https://aws.amazon.com/support request a limit increase"}"#,
);
/// A write refused because a transaction is in progress on the item (not applied).
pub const TRANSACTION_CONFLICT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#,
);
/// A write to a multi-Region strongly consistent table refused because the item is being written
/// in another Region (not applied).
pub const REPLICATED_WRITE_CONFLICT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"The item is being modified by a request in another Region"}"#,
);
pub const INTERNAL_SERVER_ERROR: Canned = Canned {
    status: 500,
    reason: "Internal Server Error",
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#,
};
pub const SERVICE_UNAVAILABLE: Canned = Canned {
    status: 503,
    reason: "Service Unavailable",
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailable","message":"The service is currently unavailable or busy."}"#,
};
pub const REQUEST_TIMEOUT: Canned = Canned {
    status: 408,
    reason: "Request Timeout",
    body: r#"{"__type":"com.amazon.coral.service#RequestTimeoutException","message":"Request timed out"}"#,
};
/// A write whose item would exceed 400 KB (not applied).
pub const ITEM_TOO_LARGE: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"Item size has exceeded the maximum allowed size"}"#,
);
pub const RESOURCE_NOT_FOUND: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
);
pub const ACCESS_DENIED: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:sts::000000000000:assumed-role/dedup-chaos/dedup is not authorized to perform this action on resource: arn:aws:dynamodb:us-east-1:000000000000:table/dedup-chaos because no identity-based policy allows it"}"#,
);
pub const EXPIRED_TOKEN: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#,
);

/// What every request gets during an access-or-table-error window: each failure the DynamoDB and
/// common-errors documentation gives for all four calls that refuses a request without applying it
/// and without a retry (docs/testing.md, "Fault model from the AWS contracts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AccessError {
    ResourceNotFound,
    AccessDenied,
    ExpiredToken,
    UnrecognizedClient,
    MissingAuthenticationToken,
    IncompleteSignature,
    InvalidEndpoint,
    Validation,
    MalformedHttpRequest,
    NotAuthorized,
    OptInRequired,
    UnknownOperation,
    RequestEntityTooLarge,
}

impl AccessError {
    pub const ALL: [AccessError; 13] = [
        AccessError::ResourceNotFound,
        AccessError::AccessDenied,
        AccessError::ExpiredToken,
        AccessError::UnrecognizedClient,
        AccessError::MissingAuthenticationToken,
        AccessError::IncompleteSignature,
        AccessError::InvalidEndpoint,
        AccessError::Validation,
        AccessError::MalformedHttpRequest,
        AccessError::NotAuthorized,
        AccessError::OptInRequired,
        AccessError::UnknownOperation,
        AccessError::RequestEntityTooLarge,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AccessError::ResourceNotFound => "ResourceNotFoundException",
            AccessError::AccessDenied => "AccessDeniedException",
            AccessError::ExpiredToken => "ExpiredTokenException",
            AccessError::UnrecognizedClient => "UnrecognizedClientException",
            AccessError::MissingAuthenticationToken => "MissingAuthenticationTokenException",
            AccessError::IncompleteSignature => "IncompleteSignature",
            AccessError::InvalidEndpoint => "InvalidEndpointException",
            AccessError::Validation => "ValidationException",
            AccessError::MalformedHttpRequest => "MalformedHttpRequestException",
            AccessError::NotAuthorized => "NotAuthorized",
            AccessError::OptInRequired => "OptInRequired",
            AccessError::UnknownOperation => "UnknownOperationException",
            AccessError::RequestEntityTooLarge => "RequestEntityTooLargeException",
        }
    }

    fn answer(self) -> Canned {
        match self {
            AccessError::ResourceNotFound => RESOURCE_NOT_FOUND,
            AccessError::AccessDenied => ACCESS_DENIED,
            AccessError::ExpiredToken => EXPIRED_TOKEN,
            AccessError::UnrecognizedClient => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
            ),
            AccessError::MissingAuthenticationToken => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#MissingAuthenticationTokenException","message":"Request must contain either a valid (registered) AWS access key ID or X.509 certificate."}"#,
            ),
            AccessError::IncompleteSignature => Canned::new(
                403,
                "Forbidden",
                r#"{"__type":"com.amazon.coral.service#IncompleteSignature","message":"Authorization header requires 'Signature' parameter."}"#,
            ),
            AccessError::InvalidEndpoint => Canned::new(
                421,
                "Misdirected Request",
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InvalidEndpointException","Message":"Operation is not allowed on this endpoint"}"#,
            ),
            AccessError::Validation => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"One or more parameter values were invalid: Missing the key pk in the item"}"#,
            ),
            AccessError::MalformedHttpRequest => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#MalformedHttpRequestException","message":"The request body could not be parsed"}"#,
            ),
            AccessError::NotAuthorized => Canned::new(
                401,
                "Unauthorized",
                r#"{"__type":"com.amazon.coral.service#NotAuthorized","message":"You do not have permission to perform this action."}"#,
            ),
            AccessError::OptInRequired => Canned::new(
                403,
                "Forbidden",
                r#"{"__type":"com.amazon.coral.service#OptInRequired","message":"The AWS access key ID needs a subscription for the service."}"#,
            ),
            AccessError::UnknownOperation => Canned::new(
                404,
                "Not Found",
                r#"{"__type":"com.amazon.coral.service#UnknownOperationException","message":"The action or operation requested is invalid."}"#,
            ),
            AccessError::RequestEntityTooLarge => Canned::new(
                413,
                "Payload Too Large",
                r#"{"__type":"com.amazon.coral.service#RequestEntityTooLargeException","message":"Request entity too large"}"#,
            ),
        }
    }
}

/// What an armed rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedFault {
    /// Forwarded; the answer is held this long (past the attempt timeout: lost to the caller).
    Hold(Duration),
    /// Forwarded; the answer is dropped and the connection closed (the write happened).
    Drop,
    /// Not forwarded; answered [`ITEM_TOO_LARGE`] (the write did not happen).
    ItemTooLarge,
}

#[derive(Debug)]
struct KeyedRule {
    /// The `X-Amz-Target` operation, e.g. `PutItem`.
    operation: &'static str,
    /// Matched as a JSON string anywhere in the request body (keys are 32 hex digits).
    key: String,
    from: Instant,
    until: Instant,
    fault: KeyedFault,
    /// How many more requests it may hit (`None`: any number).
    hits_left: Option<u32>,
    /// The body of the first request the rule hit.
    first_body: Option<Vec<u8>>,
    /// Its requests on their way to the server.
    in_flight: Arc<Flight>,
}

/// A rule's requests that are forwarded and not answered by the server yet, and when the last one
/// was (or its connection to the server ended).
#[derive(Debug, Default)]
pub struct Flight {
    count: std::sync::atomic::AtomicUsize,
    last_done: Mutex<Option<Instant>>,
}

/// Rules that hit one operation on one key for a while; shared by the proxy and whoever arms them.
#[derive(Debug, Default)]
pub struct KeyedFaults {
    rules: Mutex<Vec<KeyedRule>>,
}

impl KeyedFaults {
    /// Hits `operation` requests on `key` that arrive from `after` to `after + length` from now.
    pub fn arm(
        &self,
        operation: &'static str,
        key: &str,
        after: Duration,
        length: Duration,
        fault: KeyedFault,
    ) {
        self.push(operation, key, after, length, fault, None);
    }

    /// Hits the first `operation` request on `key` that arrives within `length` from now.
    pub fn arm_first(
        &self,
        operation: &'static str,
        key: &str,
        length: Duration,
        fault: KeyedFault,
    ) {
        self.push(operation, key, Duration::ZERO, length, fault, Some(1));
    }

    fn push(
        &self,
        operation: &'static str,
        key: &str,
        after: Duration,
        length: Duration,
        fault: KeyedFault,
        hits_left: Option<u32>,
    ) {
        let now = Instant::now();
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.retain(|r| r.until > now);
        rules.push(KeyedRule {
            operation,
            key: format!("\"{key}\""),
            from: now + after,
            until: now + after + length,
            fault,
            hits_left,
            first_body: None,
            in_flight: Arc::default(),
        });
    }

    /// The fault of the first live rule that `request` (head and body) matches.
    fn matching(&self, request: &[u8], target: &str) -> Option<(KeyedFault, Arc<Flight>)> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if rules.is_empty() {
            return None;
        }
        let now = Instant::now();
        let text = String::from_utf8_lossy(request);
        let rule = rules.iter_mut().find(|r| {
            r.from <= now
                && now < r.until
                && r.hits_left != Some(0)
                && r.operation == target
                && text.contains(&r.key)
        })?;
        if let Some(left) = &mut rule.hits_left {
            *left -= 1;
        }
        if rule.first_body.is_none() {
            let body = find(request, b"\r\n\r\n").map_or(&[][..], |i| &request[i + 4..]);
            rule.first_body = Some(body.to_vec());
        }
        rule.in_flight.count.fetch_add(1, Ordering::SeqCst);
        Some((rule.fault, rule.in_flight.clone()))
    }

    /// Requests rules armed for `operation` on `key` forwarded that the server has not answered
    /// yet (writes that may still apply), and when the server last answered one.
    pub fn in_flight(&self, operation: &str, key: &str) -> (usize, Option<Instant>) {
        let quoted = format!("\"{key}\"");
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .filter(|r| r.operation == operation && r.key == quoted)
            .fold((0, None), |(count, last), r| {
                let done = *r
                    .in_flight
                    .last_done
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                (
                    count + r.in_flight.count.load(Ordering::SeqCst),
                    last.max(done),
                )
            })
    }

    /// The body of the first request that a rule armed for `operation` on `key` hit.
    pub fn first_body(&self, operation: &str, key: &str) -> Option<Vec<u8>> {
        let quoted = format!("\"{key}\"");
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .rev()
            .find(|r| r.operation == operation && r.key == quoted)
            .and_then(|r| r.first_body.clone())
    }
}

/// Every write request the proxy sent to the server, by key: what the server did with it, seen
/// from the wire. The soak's oracle takes a claim's time from here (a claim takes the key when
/// the write applies, which a held or late request does well after its condition's clock
/// reading), and a finding prints a key's writes so that it names the writer.
#[derive(Debug)]
pub struct WriteLog {
    key_attribute: String,
    by_key: Mutex<HashMap<String, Vec<WriteSeen>>>,
}

/// One write request sent to the server.
#[derive(Debug, Clone)]
pub struct WriteSeen {
    /// `PutItem`, `UpdateItem` or `DeleteItem`.
    pub operation: String,
    /// The lease token it carried: the item's (a claim) or its condition's (a fenced write).
    pub token: Option<String>,
    /// The condition's clock reading (`:now_ms`), when it has one.
    pub condition_now_ms: Option<i64>,
    /// When the proxy started sending it to the server (system clock, ms).
    pub sent_ms: i64,
    /// When the server answered, and with what status and error type; `None` while unanswered.
    pub answered: Option<(i64, u16, String)>,
    /// What the caller got instead of the server's answer, if a fault took it.
    pub fault: Option<&'static str>,
}

impl WriteSeen {
    /// The server applied it (HTTP 200).
    pub fn applied(&self) -> bool {
        self.answered
            .as_ref()
            .is_some_and(|(_, status, _)| *status == 200)
    }
}

impl std::fmt::Display for WriteSeen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tok={} now_ms={:?} sent={}",
            self.operation,
            self.token.as_deref().unwrap_or("-"),
            self.condition_now_ms,
            self.sent_ms
        )?;
        match &self.answered {
            Some((at, status, error)) => write!(f, " answered={at} {status} {error}")?,
            None => write!(f, " unanswered")?,
        }
        if let Some(fault) = self.fault {
            write!(f, " fault={fault}")?;
        }
        Ok(())
    }
}

/// A write on its way to the server: where its entry is.
struct Sending {
    key: String,
    index: usize,
}

impl WriteLog {
    fn new(key_attribute: &str) -> WriteLog {
        WriteLog {
            key_attribute: key_attribute.to_string(),
            by_key: Mutex::default(),
        }
    }

    /// Notes `request` (a write) as sent now; `None` for a request that is not a keyed write.
    fn sending(&self, request: &[u8], target: &str, fault: Option<StoreFault>) -> Option<Sending> {
        if !is_write(target) {
            return None;
        }
        let (_, body) = split(request);
        let body: serde_json::Value = serde_json::from_slice(body).ok()?;
        let item = body.get("Item").or_else(|| body.get("Key"))?;
        let key = item[&self.key_attribute]["S"].as_str()?.to_string();
        let values = &body["ExpressionAttributeValues"];
        let token = written_token(&body)
            .or_else(|| values[":tok"]["S"].as_str())
            .map(str::to_string);
        let condition_now_ms = values[":now_ms"]["N"].as_str().and_then(|n| n.parse().ok());
        let seen = WriteSeen {
            operation: target.to_string(),
            token,
            condition_now_ms,
            sent_ms: now_ms(),
            answered: None,
            fault: fault.map(StoreFault::name),
        };
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        let writes = by_key.entry(key.clone()).or_default();
        writes.push(seen);
        Some(Sending {
            key,
            index: writes.len() - 1,
        })
    }

    /// Notes the server's answer to a write noted by [`WriteLog::sending`].
    fn answered(&self, sending: &Sending, response: &[u8]) {
        let (head, body) = split(response);
        let status = String::from_utf8_lossy(head)
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let error = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v["__type"]
                    .as_str()
                    .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
            })
            .unwrap_or_default();
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = by_key
            .get_mut(&sending.key)
            .and_then(|w| w.get_mut(sending.index))
        {
            seen.answered = Some((now_ms(), status, error));
        }
    }

    /// The writes sent for `key`, in the order they were sent.
    pub fn of(&self, key: &str) -> Vec<WriteSeen> {
        self.by_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
}

fn now_ms() -> i64 {
    use toolcall_dedup::store::Clock;
    toolcall_dedup::store::SystemClock.now_ms()
}

/// Why open connections were cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Outage,
    AccessWindow,
    Refusing,
    Shutdown,
}

/// How the proxy's listening socket takes connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listening {
    Open,
    /// Closed: connects are refused by the kernel.
    Refusing,
    /// Black-holed: a socket whose accept queue is full, so the kernel drops every SYN and a
    /// connect hangs until the caller's timeout; requests on open connections get no answer.
    Blackholed,
}

struct Shared {
    upstream: String,
    faults: Mutex<(RequestFaults, fastrand::Rng)>,
    outage: AtomicBool,
    /// The error every request gets, in an access-or-table-error window.
    access_error: Mutex<Option<AccessError>>,
    /// Bumped at each cut (outage, access window or refusal start); connections watch it and close.
    cut: watch::Sender<(u32, Cut)>,
    /// In a black-hole window: requests and answers are dropped.
    blackholed: AtomicBool,
    counts: Mutex<BTreeMap<StoreFault, u64>>,
    /// Counts by `class.variant` (which status, which error, before or after forwarding, ...).
    variants: Mutex<BTreeMap<String, u64>>,
    keyed: Arc<KeyedFaults>,
    writes: Arc<WriteLog>,
}

impl Shared {
    fn count(&self, fault: StoreFault) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(fault)
            .or_default() += 1;
    }

    fn count_variant(&self, fault: StoreFault, variant: &str) {
        self.count_named(&format!("{}.{variant}", fault.name()));
    }

    fn count_named(&self, name: &str) {
        *self
            .variants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default() += 1;
    }

    /// An open connection closed by a cut.
    fn count_cut(&self, cut: Cut) {
        match cut {
            Cut::Outage => self.count(StoreFault::OutageRefused),
            Cut::AccessWindow => {
                self.count_variant(StoreFault::AccessOrTableError, "in_flight_cut")
            }
            Cut::Refusing => self.count_named("store_connect_refused.open_connections_cut"),
            Cut::Shutdown => {}
        }
    }

    fn cut(&self, why: Cut) {
        self.cut.send_modify(|(n, cut)| {
            *n += 1;
            *cut = why;
        });
    }

    /// The random fault for one request, and a roll that picks its variant.
    fn draw(&self) -> (Option<StoreFault>, u32, RequestFaults) {
        let mut guard = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let (f, rng) = &mut *guard;
        let roll = rng.u32(0..1000);
        let variant = rng.u32(0..4);
        let table = [
            (f.drop_before, StoreFault::DropBeforeForward),
            (f.drop_after, StoreFault::DropAfterForward),
            (f.delay, StoreFault::DelayPastTimeout),
            (f.throttle_provisioned, StoreFault::ThrottleProvisioned),
            (f.throttle_rate, StoreFault::ThrottleRate),
            (f.deliver_late, StoreFault::DeliverLate),
            (f.server_error, StoreFault::ServerError),
            (f.throttle_request_limit, StoreFault::ThrottleRequestLimit),
            (f.write_conflict, StoreFault::WriteConflict),
            (f.request_timeout, StoreFault::RequestTimeout),
            (f.garbled, StoreFault::ResponseGarbled),
            (f.stalled, StoreFault::BodyStalled),
        ];
        let mut acc = 0;
        for (per_mille, fault) in table {
            acc += per_mille;
            if roll < acc {
                return (Some(fault), variant, *f);
            }
        }
        (None, variant, *f)
    }
}

/// The proxy; dropping it stops accepting (open connections end with their tasks).
pub struct FaultProxy {
    url: String,
    shared: Arc<Shared>,
    listening: watch::Sender<Listening>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.cut(Cut::Shutdown);
    }
}

impl FaultProxy {
    /// Listens on a free loopback port in front of `upstream` (`http://host:port`); writes are
    /// logged by the value of their `key_attribute` ([`WriteLog`]).
    pub async fn start(
        upstream: &str,
        seed: u64,
        key_attribute: &str,
    ) -> std::io::Result<FaultProxy> {
        let listener = listen().await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let shared = Arc::new(Shared {
            upstream: upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string(),
            faults: Mutex::new((RequestFaults::NONE, fastrand::Rng::with_seed(seed))),
            outage: AtomicBool::new(false),
            blackholed: AtomicBool::new(false),
            access_error: Mutex::new(None),
            cut: watch::channel((0, Cut::Shutdown)).0,
            counts: Mutex::new(BTreeMap::new()),
            variants: Mutex::new(BTreeMap::new()),
            keyed: Arc::default(),
            writes: Arc::new(WriteLog::new(key_attribute)),
        });
        let (listening, modes) = watch::channel(Listening::Open);
        let accept = tokio::spawn(accept_loop(shared.clone(), listener, addr, modes));
        Ok(FaultProxy {
            url,
            shared,
            listening,
            accept,
        })
    }

    /// The URL clients connect to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The keyed rules this proxy applies (for the store wrapper to arm).
    pub fn keyed(&self) -> Arc<KeyedFaults> {
        self.shared.keyed.clone()
    }

    /// The writes this proxy sent to the server.
    pub fn writes(&self) -> Arc<WriteLog> {
        self.shared.writes.clone()
    }

    pub fn set_faults(&self, faults: RequestFaults) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0 = faults;
    }

    /// Starts (cutting every open connection) or ends an outage.
    pub fn set_outage(&self, on: bool) {
        self.shared.outage.store(on, Ordering::SeqCst);
        if on {
            self.shared.cut(Cut::Outage);
        }
    }

    /// Starts (closing the listening socket and cutting every open connection) or ends a window in
    /// which connects are refused.
    pub fn set_refusing(&self, on: bool) {
        if on {
            self.shared.cut(Cut::Refusing);
        }
        self.listening.send_replace(if on {
            Listening::Refusing
        } else {
            Listening::Open
        });
    }

    /// Starts or ends a black-hole window: connects hang (the caller's attempt timeout ends
    /// them), requests on open connections and answers on their way back are dropped.
    pub fn set_blackholed(&self, on: bool) {
        self.shared.blackholed.store(on, Ordering::SeqCst);
        self.listening.send_replace(if on {
            Listening::Blackholed
        } else {
            Listening::Open
        });
    }

    /// Starts (cutting every open connection) or ends an access-or-table-error window.
    pub fn set_access_error(&self, error: Option<AccessError>) {
        *self
            .shared
            .access_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = error;
        if let Some(error) = error {
            self.shared
                .count_variant(StoreFault::AccessOrTableError, "windows");
            self.shared.count_variant(
                StoreFault::AccessOrTableError,
                &format!("windows_{}", error.name()),
            );
            self.shared.cut(Cut::AccessWindow);
        }
    }

    /// Faults injected so far, by kind.
    pub fn counts(&self) -> BTreeMap<StoreFault, u64> {
        self.shared
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Faults injected so far by `class.variant`.
    pub fn variants(&self) -> BTreeMap<String, u64> {
        self.shared
            .variants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Ports below the kernel's ephemeral range (32768-60999 on Linux), where no outgoing connection
/// takes the proxy's port while its listener is closed, and a connect to it cannot connect to itself.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A listener on a free loopback port (outside the ephemeral range when one is free).
async fn listen() -> std::io::Result<TcpListener> {
    for _ in 0..100 {
        let port = fastrand::u16(PORTS);
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return Ok(listener);
        }
    }
    TcpListener::bind("127.0.0.1:0").await
}

/// Accepts connections; while refusing, the listening socket is closed (connects are refused by
/// the kernel), while black-holed it is replaced by one that drops every connect; it is opened
/// again on the same address after.
async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    addr: SocketAddr,
    mut modes: watch::Receiver<Listening>,
) {
    let mut listener = Some(listener);
    loop {
        let mode = *modes.borrow_and_update();
        if mode != Listening::Open {
            listener = None;
            let _hole = match mode {
                Listening::Blackholed => Some(BlackHole::open(addr).await),
                _ => None,
            };
            if modes.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Some(open) = &listener else {
            listener = Some(relisten(addr).await);
            continue;
        };
        tokio::select! {
            accepted = open.accept() => {
                let Ok((inbound, _)) = accepted else { return };
                if shared.outage.load(Ordering::SeqCst) {
                    shared.count(StoreFault::OutageRefused);
                    drop(inbound);
                    continue;
                }
                tokio::spawn(serve(shared.clone(), inbound));
            }
            changed = modes.changed() => if changed.is_err() { return },
        }
    }
}

/// A listening socket on the proxy's address that never accepts, with its one-place accept
/// queue filled by a connection of its own: Linux then drops every further SYN, so a connect
/// neither succeeds nor is refused (what a firewall's DROP rule does, without the privilege).
struct BlackHole {
    _listener: Option<TcpListener>,
    _filler: Option<TcpStream>,
}

impl BlackHole {
    async fn open(addr: SocketAddr) -> BlackHole {
        for _ in 0..50 {
            let socket = match tokio::net::TcpSocket::new_v4() {
                Ok(socket) => socket,
                Err(_) => break,
            };
            let _ = socket.set_reuseaddr(true);
            let Ok(listener) = socket.bind(addr).and_then(|()| socket.listen(0)) else {
                // The port is still taken by a closing connection: try again shortly.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let filler = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok);
            return BlackHole {
                _listener: Some(listener),
                _filler: filler,
            };
        }
        tracing::warn!(%addr, "the fault proxy could not open its black hole; connects are refused");
        BlackHole {
            _listener: None,
            _filler: None,
        }
    }
}

/// Listens on `addr` again, retrying while the port is still taken (a closing connection).
async fn relisten(addr: SocketAddr) -> TcpListener {
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => {
                tracing::debug!(%addr, error = %e, "the fault proxy cannot listen again yet");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// What the proxy does with one request.
enum Action {
    /// Close the connection without forwarding.
    Close,
    /// Close the connection, and deliver the request later.
    Late,
    /// Answer without forwarding.
    Answer(Canned),
    /// Forward, then treat the answer so.
    Forward(After),
}

/// What happens to a forwarded request's answer.
enum After {
    Pass,
    /// Thrown away, the connection closed.
    Drop,
    /// Held this long, then passed on.
    Hold(Duration),
    /// Replaced by this answer.
    Replace(Canned),
    /// Head and half the body sent, then the connection closed.
    CutShort,
    /// The body replaced by its first half (not JSON), `Content-Length` to match.
    NotJson,
    /// Head and half the body sent; the connection stalls this long, then closes.
    Stall(Duration),
}

/// The action for a request hit by `fault` (`variant` picks among its forms) and the name of the
/// form, for the counts.
fn action(
    fault: Option<StoreFault>,
    variant: u32,
    faults: &RequestFaults,
) -> (Action, Option<&'static str>) {
    let Some(fault) = fault else {
        return (Action::Forward(After::Pass), None);
    };
    match fault {
        StoreFault::DropBeforeForward => (Action::Close, None),
        StoreFault::DeliverLate => (Action::Late, None),
        StoreFault::DropAfterForward | StoreFault::KeyedAnswerDropped => {
            (Action::Forward(After::Drop), None)
        }
        StoreFault::DelayPastTimeout | StoreFault::KeyedAnswerHeld => {
            (Action::Forward(After::Hold(faults.delay_by)), None)
        }
        StoreFault::ThrottleProvisioned => (Action::Answer(PROVISIONED_THROUGHPUT), None),
        StoreFault::ThrottleRate => (Action::Answer(THROTTLING), None),
        StoreFault::ThrottleRequestLimit => (Action::Answer(REQUEST_LIMIT_EXCEEDED), None),
        StoreFault::ServerError => match variant % 4 {
            0 => (
                Action::Answer(INTERNAL_SERVER_ERROR),
                Some("500_before_forward"),
            ),
            1 => (
                Action::Answer(SERVICE_UNAVAILABLE),
                Some("503_before_forward"),
            ),
            2 => (
                Action::Forward(After::Replace(INTERNAL_SERVER_ERROR)),
                Some("500_after_forward"),
            ),
            _ => (
                Action::Forward(After::Replace(SERVICE_UNAVAILABLE)),
                Some("503_after_forward"),
            ),
        },
        StoreFault::WriteConflict => match variant % 2 {
            0 => (
                Action::Answer(TRANSACTION_CONFLICT),
                Some("TransactionConflictException"),
            ),
            _ => (
                Action::Answer(REPLICATED_WRITE_CONFLICT),
                Some("ReplicatedWriteConflictException"),
            ),
        },
        StoreFault::RequestTimeout => (Action::Answer(REQUEST_TIMEOUT), None),
        StoreFault::ItemTooLarge | StoreFault::ItemTooLargeOnClaim => {
            (Action::Answer(ITEM_TOO_LARGE), None)
        }
        StoreFault::ResponseGarbled => match variant % 2 {
            0 => (Action::Forward(After::CutShort), Some("body_cut_short")),
            _ => (Action::Forward(After::NotJson), Some("body_not_json")),
        },
        StoreFault::BodyStalled => (Action::Forward(After::Stall(faults.stall_for)), None),
        // Not drawn per request.
        StoreFault::OutageRefused | StoreFault::AccessOrTableError => {
            (Action::Forward(After::Pass), None)
        }
    }
}

/// The `X-Amz-Target` operation of a request (`PutItem`, ...).
fn target(request: &[u8]) -> String {
    let head_end = find(request, b"\r\n\r\n").unwrap_or(request.len());
    String::from_utf8_lossy(&request[..head_end])
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-amz-target")
                .then(|| value.trim().rsplit('.').next().unwrap_or("").to_string())
        })
        .unwrap_or_default()
}

fn is_write(target: &str) -> bool {
    matches!(target, "PutItem" | "UpdateItem" | "DeleteItem")
}

/// One client connection: request by request until either side closes, a fault closes it, or a
/// cut (outage, refusal, access window) closes it.
async fn serve(shared: Arc<Shared>, mut inbound: TcpStream) {
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let mut buffer = Vec::new();
    loop {
        let request = tokio::select! {
            r = read_message(&mut inbound, &mut buffer, Message::Request) => r,
            _ = cut.changed() => { shared.count_cut(cut.borrow().1); return; }
        };
        let Ok(Some(request)) = request else { return };
        if shared.blackholed.load(Ordering::SeqCst) {
            shared.count_named("store_connect_blackholed.requests_dropped");
            hold_while_blackholed(&shared).await;
            return;
        }
        let target = target(&request);
        let access_error = *shared
            .access_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(error) = access_error {
            shared.count(StoreFault::AccessOrTableError);
            shared.count_variant(StoreFault::AccessOrTableError, error.name());
            if inbound.write_all(&error.answer().bytes()).await.is_err() {
                return;
            }
            continue;
        }
        // An armed rule takes the place of the random draw.
        let keyed = shared.keyed.matching(&request, &target);
        let (keyed, in_flight) = match keyed {
            Some((fault, in_flight)) => (Some(fault), Some(InFlight(in_flight))),
            None => (None, None),
        };
        let (fault, variant, faults) = match keyed {
            Some(KeyedFault::Hold(by)) => (
                Some(StoreFault::KeyedAnswerHeld),
                0,
                RequestFaults {
                    delay_by: by,
                    ..RequestFaults::NONE
                },
            ),
            Some(KeyedFault::Drop) => {
                (Some(StoreFault::KeyedAnswerDropped), 0, RequestFaults::NONE)
            }
            Some(KeyedFault::ItemTooLarge) if target == "PutItem" => (
                Some(StoreFault::ItemTooLargeOnClaim),
                0,
                RequestFaults::NONE,
            ),
            Some(KeyedFault::ItemTooLarge) => {
                (Some(StoreFault::ItemTooLarge), 0, RequestFaults::NONE)
            }
            None => shared.draw(),
        };
        // A write conflict is a write's answer: a read it falls on goes through.
        let fault = fault.filter(|f| *f != StoreFault::WriteConflict || is_write(&target));
        let (action, form) = action(fault, variant, &faults);
        if let Some(fault) = fault {
            shared.count(fault);
            if let Some(form) = form {
                shared.count_variant(fault, form);
            }
        }
        let after = match action {
            Action::Close => return,
            Action::Late => {
                let late_by = faults.late_by.mul_f64(fastrand::f64());
                let shared = shared.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(late_by).await;
                    let _ = forward(&shared, &request, &target, fault).await;
                });
                return;
            }
            Action::Answer(canned) => {
                drop(in_flight);
                if inbound.write_all(&canned.bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            Action::Forward(after) => after,
        };
        // Its own task, so that cutting the caller's connection does not unsend the request:
        // the server may have it, and applies it whenever it gets to it (a paused server on
        // resuming). It counts as in flight until the server answers.
        let mut forwarded = tokio::spawn({
            let shared = shared.clone();
            async move {
                let response = forward(&shared, &request, &target, fault).await;
                drop(in_flight);
                response
            }
        });
        let response = tokio::select! {
            r = &mut forwarded => r.ok().flatten(),
            _ = cut.changed() => { shared.count_cut(cut.borrow().1); return; }
        };
        let Some(response) = response else { return };
        if shared.blackholed.load(Ordering::SeqCst) {
            shared.count_named("store_connect_blackholed.answers_dropped");
            hold_while_blackholed(&shared).await;
            return;
        }
        let (head, body) = split(&response);
        match after {
            After::Pass => {}
            After::Drop => return,
            After::Hold(by) => {
                tokio::select! {
                    _ = tokio::time::sleep(by) => {}
                    _ = cut.changed() => return,
                }
            }
            After::Replace(canned) => {
                if inbound.write_all(&canned.bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            After::CutShort => {
                // An empty body is declared one byte long, so that something is still missing.
                let head = if body.is_empty() {
                    with_content_length(head, 1)
                } else {
                    head.to_vec()
                };
                let _ = inbound.write_all(&head).await;
                let _ = inbound.write_all(&body[..body.len() / 2]).await;
                return;
            }
            After::NotJson => {
                let half = &body[..body.len() / 2];
                let garbled: &[u8] = if half.is_empty() { b"<" } else { half };
                let mut answer = with_content_length(head, garbled.len());
                answer.extend_from_slice(garbled);
                if inbound.write_all(&answer).await.is_err() || closes(&response) {
                    return;
                }
                continue;
            }
            After::Stall(by) => {
                let head = if body.is_empty() {
                    with_content_length(head, 1)
                } else {
                    head.to_vec()
                };
                if inbound.write_all(&head).await.is_ok()
                    && inbound.write_all(&body[..body.len() / 2]).await.is_ok()
                {
                    let _ = inbound.flush().await;
                    tokio::select! {
                        _ = tokio::time::sleep(by) => {}
                        _ = cut.changed() => {}
                    }
                }
                return;
            }
        }
        if inbound.write_all(&response).await.is_err() {
            return;
        }
        // moto answers HTTP/1.0 with `Connection: close`: pass the close on.
        if closes(&response) {
            return;
        }
    }
}

/// Keeps a connection silent until the black-hole window ends (its caller gives up first).
async fn hold_while_blackholed(shared: &Shared) {
    while shared.blackholed.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `request` to the server on a fresh connection and reads its answer, noting a write in
/// the [`WriteLog`].
async fn forward(
    shared: &Shared,
    request: &[u8],
    target: &str,
    fault: Option<StoreFault>,
) -> Option<Vec<u8>> {
    let sending = shared.writes.sending(request, target, fault);
    let mut outbound = TcpStream::connect(&shared.upstream).await.ok()?;
    outbound.write_all(request).await.ok()?;
    let response = read_message(&mut outbound, &mut Vec::new(), Message::Response)
        .await
        .ok()
        .flatten()?;
    if let Some(sending) = &sending {
        shared.writes.answered(sending, &response);
    }
    Some(response)
}

/// A message's head (through the blank line) and body.
fn split(message: &[u8]) -> (&[u8], &[u8]) {
    let head_end = find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 4);
    message.split_at(head_end)
}

/// `head` with its `Content-Length` set to `length` (added when it has none).
fn with_content_length(head: &[u8], length: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<String> = text
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        })
        .map(str::to_string)
        .collect();
    lines.push(format!("Content-Length: {length}"));
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// Counts a keyed request as in flight until dropped (answered, or its connection gone).
struct InFlight(Arc<Flight>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_done.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.0.count.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Message {
    Request,
    Response,
}

/// Reads one HTTP/1.x message (head plus `Content-Length` body). `Ok(None)` on a clean close
/// before the first byte. A response without `Content-Length` runs to the end of the stream.
async fn read_message(
    stream: &mut (impl AsyncRead + Unpin),
    buffer: &mut Vec<u8>,
    kind: Message,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(buffer, b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return if buffer.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    match (length, kind) {
        (Some(length), _) => {
            while buffer.len() < head_end + length {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            let message = buffer[..head_end + length].to_vec();
            buffer.drain(..head_end + length);
            Ok(Some(message))
        }
        (None, Message::Request) => {
            let message = buffer[..head_end].to_vec();
            buffer.drain(..head_end);
            Ok(Some(message))
        }
        (None, Message::Response) => {
            stream.read_to_end(buffer).await?;
            Ok(Some(std::mem::take(buffer)))
        }
    }
}

fn closes(response: &[u8]) -> bool {
    let head_end = find(response, b"\r\n\r\n").unwrap_or(response.len());
    let head = String::from_utf8_lossy(&response[..head_end]).to_ascii_lowercase();
    head.starts_with("http/1.0") || head.contains("\r\nconnection: close")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The lease token of the item a `PutItem` body writes (a claim's), if it is one.
pub fn written_token(body: &serde_json::Value) -> Option<&str> {
    body["Item"][toolcall_dedup::store::dynamodb::attr::LEASE_TOKEN]["S"].as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake server: answers every request on a connection with `answer`.
    async fn upstream(answer: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    while let Ok(Some(_)) =
                        read_message(&mut stream, &mut buffer, Message::Request).await
                    {
                        if stream.write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
    const REQUEST: &[u8] = b"POST / HTTP/1.1\r\nX-Amz-Target: DynamoDB_20120810.PutItem\r\n\
        Content-Length: 2\r\n\r\n{}";

    /// Sends one request through the proxy; the raw answer (one message, or what came before the
    /// connection closed).
    async fn send(proxy: &FaultProxy) -> std::io::Result<Vec<u8>> {
        send_request(proxy, REQUEST).await
    }

    async fn send_request(proxy: &FaultProxy, request: &[u8]) -> std::io::Result<Vec<u8>> {
        let addr = proxy.url().trim_start_matches("http://").to_string();
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut buffer = Vec::new();
        let read = read_message(&mut stream, &mut buffer, Message::Response);
        match tokio::time::timeout(Duration::from_secs(2), read).await {
            Ok(Ok(Some(answer))) => Ok(answer),
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => Ok(buffer),
        }
    }

    /// A write request with this body.
    fn write(operation: &str, body: &str) -> Vec<u8> {
        format!(
            "POST / HTTP/1.1\r\nX-Amz-Target: DynamoDB_20120810.{operation}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn the_write_log_keeps_what_the_server_did_even_when_the_caller_got_a_fault() {
        const CONFLICT: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 68\r\n\r\n\
            {\"__type\":\"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailed\"}";
        let applies = FaultProxy::start(&upstream(OK).await, 7, "pk")
            .await
            .unwrap();
        applies.set_faults(RequestFaults {
            server_error: 1000,
            ..RequestFaults::NONE
        });
        let claim = r#"{"Item":{"pk":{"S":"k1"},"lease_token":{"S":"t1"}},
            "ExpressionAttributeValues":{":now_ms":{"N":"1234"}}}"#;
        for _ in 0..8 {
            send_request(&applies, &write("PutItem", claim))
                .await
                .unwrap();
        }
        let release =
            r#"{"Key":{"pk":{"S":"k1"}},"ExpressionAttributeValues":{":tok":{"S":"t1"}}}"#;
        let refused = FaultProxy::start(&upstream(CONFLICT).await, 7, "pk")
            .await
            .unwrap();
        send_request(&refused, &write("DeleteItem", release))
            .await
            .unwrap();
        send_request(&refused, REQUEST).await.unwrap();

        // Half the forms answer 5xx without forwarding (not logged: the server never saw them);
        // the other half replace the server's 200 after forwarding, which the log keeps.
        let claims = applies.writes().of("k1");
        assert!(!claims.is_empty() && claims.len() < 8, "{claims:?}");
        for seen in &claims {
            assert_eq!(seen.operation, "PutItem");
            assert_eq!(seen.token.as_deref(), Some("t1"));
            assert_eq!(seen.condition_now_ms, Some(1234));
            assert_eq!(seen.fault, Some("store_server_error"));
            assert!(seen.applied(), "{seen}");
        }
        let deletes = refused.writes().of("k1");
        assert_eq!(deletes.len(), 1, "a request without a key is not logged");
        assert_eq!(deletes[0].token.as_deref(), Some("t1"));
        assert!(!deletes[0].applied());
        let (_, status, error) = deletes[0].answered.clone().unwrap();
        assert_eq!((status, error.as_str()), (400, "ConditionalCheckFailed"));
    }

    #[tokio::test]
    async fn a_refusal_window_refuses_connects_then_the_proxy_listens_again() {
        let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
            .await
            .unwrap();
        assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
        proxy.set_refusing(true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = send(&proxy).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
        proxy.set_refusing(false);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
    }

    #[tokio::test]
    async fn a_black_hole_window_lets_connects_hang_and_drops_requests_then_listens_again() {
        let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
            .await
            .unwrap();
        let addr = proxy.url().trim_start_matches("http://").to_string();
        // Served once, so the proxy has accepted it (closing the listening socket resets a
        // connection still in its accept queue).
        let mut open = TcpStream::connect(&addr).await.unwrap();
        open.write_all(REQUEST).await.unwrap();
        let mut buffer = Vec::new();
        let served = read_message(&mut open, &mut buffer, Message::Response).await;
        assert!(served.unwrap().unwrap().ends_with(b"{}"));
        proxy.set_blackholed(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let connect = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(&addr));
        assert!(
            connect.await.is_err(),
            "a connect neither succeeds nor is refused: it hangs"
        );
        open.write_all(&write("PutItem", r#"{"pk":{"S":"k"}}"#))
            .await
            .unwrap();
        let mut answer = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_millis(300), open.read(&mut answer));
        assert!(
            read.await.is_err(),
            "a request on an open connection gets no answer"
        );
        proxy.set_blackholed(false);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
        assert_eq!(
            proxy
                .variants()
                .get("store_connect_blackholed.requests_dropped"),
            Some(&1)
        );
    }

    #[tokio::test]
    async fn an_access_window_answers_its_error_without_forwarding() {
        let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
            .await
            .unwrap();
        proxy.set_access_error(Some(AccessError::ExpiredToken));
        let answer = String::from_utf8(send(&proxy).await.unwrap()).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert!(answer.contains("#ExpiredTokenException"), "{answer}");
        proxy.set_access_error(None);
        assert!(send(&proxy).await.unwrap().ends_with(b"{}"));
        assert_eq!(proxy.counts()[&StoreFault::AccessOrTableError], 1);
    }

    /// Each access error is answered with its documented status and its code, which the SDK reads
    /// from `__type` whatever the status.
    #[tokio::test]
    async fn every_access_error_is_answered_with_its_status_and_code() {
        let proxy = FaultProxy::start(&upstream(OK).await, 1, "pk")
            .await
            .unwrap();
        for error in AccessError::ALL {
            proxy.set_access_error(Some(error));
            let answer = String::from_utf8(send(&proxy).await.unwrap()).unwrap();
            let canned = error.answer();
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {} ", canned.status)),
                "{answer}"
            );
            assert!((400..500).contains(&canned.status), "{error:?}");
            assert!(answer.contains(&format!("#{}\"", error.name())), "{answer}");
        }
        assert_eq!(
            proxy.counts()[&StoreFault::AccessOrTableError],
            AccessError::ALL.len() as u64
        );
    }

    #[tokio::test]
    async fn every_form_of_a_garbled_or_server_error_answer_is_what_it_says() {
        let proxy = FaultProxy::start(&upstream(OK).await, 7, "pk")
            .await
            .unwrap();
        proxy.set_faults(RequestFaults {
            garbled: 500,
            server_error: 500,
            ..RequestFaults::NONE
        });
        for _ in 0..40 {
            let before = proxy.variants();
            let answer = send(&proxy).await.unwrap();
            let after = proxy.variants();
            let form = after
                .iter()
                .find(|(k, v)| before.get(*k) != Some(v))
                .map(|(k, _)| k.clone())
                .unwrap();
            let (head, body) = split(&answer);
            let head = String::from_utf8_lossy(head).to_string();
            match form.as_str() {
                "store_response_garbled.body_cut_short" => {
                    assert!(head.contains("Content-Length: 2"), "{head}");
                    assert_eq!(body, b"{");
                }
                "store_response_garbled.body_not_json" => {
                    assert!(head.contains("Content-Length: 1"), "{head}");
                    assert_eq!(body, b"{");
                }
                f if f.starts_with("store_server_error.500") => {
                    assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
                }
                f if f.starts_with("store_server_error.503") => {
                    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
                }
                other => panic!("unexpected form {other}"),
            }
        }
        let forms = proxy.variants();
        assert_eq!(forms.len(), 6, "every form drawn: {forms:?}");
    }
}
