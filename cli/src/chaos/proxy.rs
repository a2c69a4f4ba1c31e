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
//!   `ProvisionedThroughputExceededException` or `ThrottlingException` (never forwarded).
//!
//! Besides these random faults, [`KeyedFaults`] hits the requests of one operation on one key for a
//! while (armed by the soak's store wrapper for an invocation's planned store fault): every answer
//! is forwarded and then **held** (past the attempt timeout, or just slow) or **dropped**.
//!
//! [`FaultProxy::set_outage`] turns the server "off" as a client sees a crashed process: every open
//! connection is cut and new ones are closed at once, until the outage ends.

use std::collections::BTreeMap;
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
    /// How long a delayed answer is held (past the SDK attempt timeout).
    pub delay_by: Duration,
    /// A late request is delivered after a random time below this.
    pub late_by: Duration,
}

impl RequestFaults {
    pub const NONE: RequestFaults = RequestFaults {
        drop_before: 0,
        drop_after: 0,
        delay: 0,
        throttle_provisioned: 0,
        throttle_rate: 0,
        deliver_late: 0,
        delay_by: Duration::ZERO,
        late_by: Duration::ZERO,
    };
}

/// A per-request fault, as counted in the report.
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
}

impl StoreFault {
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
        }
    }
}

/// The body DynamoDB sends with HTTP 400 when a table's provisioned throughput is exceeded.
pub const PROVISIONED_THROUGHPUT_BODY: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}"#;
/// The body DynamoDB sends with HTTP 400 when the account's request rate is throttled.
pub const THROTTLING_BODY: &str = r#"{"__type":"com.amazon.coral.availability#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#;

/// What an armed rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedFault {
    /// Forwarded; the answer is held this long (past the attempt timeout: lost to the caller).
    Hold(Duration),
    /// Forwarded; the answer is dropped and the connection closed (the write happened).
    Drop,
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
    /// The body of the first request the rule hit.
    first_body: Option<Vec<u8>>,
    /// Requests it hit that are forwarded and not answered by the server yet.
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
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
        let now = Instant::now();
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules.retain(|r| r.until > now);
        rules.push(KeyedRule {
            operation,
            key: format!("\"{key}\""),
            from: now + after,
            until: now + after + length,
            fault,
            first_body: None,
            in_flight: Arc::default(),
        });
    }

    /// The fault of the first live rule that `request` (head and body) matches.
    fn matching(
        &self,
        request: &[u8],
    ) -> Option<(KeyedFault, Arc<std::sync::atomic::AtomicUsize>)> {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        if rules.is_empty() {
            return None;
        }
        let now = Instant::now();
        let text = String::from_utf8_lossy(request);
        let target = text
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("x-amz-target")
                    .then(|| value.trim().rsplit('.').next().unwrap_or("").to_string())
            })
            .unwrap_or_default();
        let rule = rules.iter_mut().find(|r| {
            r.from <= now && now < r.until && r.operation == target && text.contains(&r.key)
        })?;
        if rule.first_body.is_none() {
            let body = find(request, b"\r\n\r\n").map_or(&[][..], |i| &request[i + 4..]);
            rule.first_body = Some(body.to_vec());
        }
        rule.in_flight.fetch_add(1, Ordering::SeqCst);
        Some((rule.fault, rule.in_flight.clone()))
    }

    /// Requests a rule armed for `operation` on `key` forwarded that the server has not answered
    /// yet (a write that may still apply).
    pub fn in_flight(&self, operation: &str, key: &str) -> usize {
        let quoted = format!("\"{key}\"");
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .filter(|r| r.operation == operation && r.key == quoted)
            .map(|r| r.in_flight.load(Ordering::SeqCst))
            .sum()
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

struct Shared {
    upstream: String,
    faults: Mutex<(RequestFaults, fastrand::Rng)>,
    outage: AtomicBool,
    /// Bumped at each outage start; connections watch it and close.
    cut: watch::Sender<u32>,
    counts: Mutex<BTreeMap<StoreFault, u64>>,
    keyed: Arc<KeyedFaults>,
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

    fn draw(&self) -> (Option<StoreFault>, RequestFaults) {
        let mut guard = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let (f, rng) = &mut *guard;
        let roll = rng.u32(0..1000);
        let table = [
            (f.drop_before, StoreFault::DropBeforeForward),
            (f.drop_after, StoreFault::DropAfterForward),
            (f.delay, StoreFault::DelayPastTimeout),
            (f.throttle_provisioned, StoreFault::ThrottleProvisioned),
            (f.throttle_rate, StoreFault::ThrottleRate),
            (f.deliver_late, StoreFault::DeliverLate),
        ];
        let mut acc = 0;
        for (per_mille, fault) in table {
            acc += per_mille;
            if roll < acc {
                return (Some(fault), *f);
            }
        }
        (None, *f)
    }
}

/// The proxy; dropping it stops accepting (open connections end with their tasks).
pub struct FaultProxy {
    url: String,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.shared.cut.send_modify(|n| *n += 1);
    }
}

impl FaultProxy {
    /// Listens on a free loopback port in front of `upstream` (`http://host:port`).
    pub async fn start(upstream: &str, seed: u64) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            upstream: upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string(),
            faults: Mutex::new((RequestFaults::NONE, fastrand::Rng::with_seed(seed))),
            outage: AtomicBool::new(false),
            cut: watch::channel(0).0,
            counts: Mutex::new(BTreeMap::new()),
            keyed: Arc::default(),
        });
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    if shared.outage.load(Ordering::SeqCst) {
                        shared.count(StoreFault::OutageRefused);
                        drop(inbound);
                        continue;
                    }
                    tokio::spawn(serve(shared.clone(), inbound));
                }
            }
        });
        Ok(FaultProxy {
            url,
            shared,
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
            self.shared.cut.send_modify(|n| *n += 1);
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
}

/// One client connection: request by request until either side closes, a fault closes it, or an
/// outage cuts it.
async fn serve(shared: Arc<Shared>, mut inbound: TcpStream) {
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let mut buffer = Vec::new();
    loop {
        let request = tokio::select! {
            r = read_message(&mut inbound, &mut buffer, Message::Request) => r,
            _ = cut.changed() => { shared.count(StoreFault::OutageRefused); return; }
        };
        let Ok(Some(request)) = request else { return };
        // An armed rule takes the place of the random draw.
        let keyed = shared.keyed.matching(&request);
        let (keyed, in_flight) = match keyed {
            Some((fault, in_flight)) => (Some(fault), Some(InFlight(in_flight))),
            None => (None, None),
        };
        let (fault, faults) = match keyed {
            Some(KeyedFault::Hold(by)) => (
                Some(StoreFault::KeyedAnswerHeld),
                RequestFaults {
                    delay_by: by,
                    ..RequestFaults::NONE
                },
            ),
            Some(KeyedFault::Drop) => (Some(StoreFault::KeyedAnswerDropped), RequestFaults::NONE),
            None => shared.draw(),
        };
        if let Some(fault) = fault {
            shared.count(fault);
        }
        let body = match fault {
            Some(StoreFault::DropBeforeForward) => return,
            Some(StoreFault::DeliverLate) => {
                let late_by = faults.late_by.mul_f64(fastrand::f64());
                let upstream = shared.upstream.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(late_by).await;
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        if outbound.write_all(&request).await.is_ok() {
                            let _ = read_message(&mut outbound, &mut Vec::new(), Message::Response)
                                .await;
                        }
                    }
                });
                return;
            }
            Some(StoreFault::ThrottleProvisioned) => Some(PROVISIONED_THROUGHPUT_BODY),
            Some(StoreFault::ThrottleRate) => Some(THROTTLING_BODY),
            _ => None,
        };
        if let Some(body) = body {
            let answer = format!(
                "HTTP/1.1 400 Bad Request\r\nx-amzn-RequestId: chaos-proxy\r\n\
                 Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if inbound.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
            continue;
        }
        let forwarded = async {
            let mut outbound = TcpStream::connect(&shared.upstream).await.ok()?;
            outbound.write_all(&request).await.ok()?;
            read_message(&mut outbound, &mut Vec::new(), Message::Response)
                .await
                .ok()
                .flatten()
        };
        let response = tokio::select! {
            r = forwarded => r,
            _ = cut.changed() => { shared.count(StoreFault::OutageRefused); return; }
        };
        drop(in_flight);
        let Some(response) = response else { return };
        match fault {
            Some(StoreFault::DropAfterForward | StoreFault::KeyedAnswerDropped) => return,
            Some(StoreFault::DelayPastTimeout | StoreFault::KeyedAnswerHeld) => {
                tokio::select! {
                    _ = tokio::time::sleep(faults.delay_by) => {}
                    _ = cut.changed() => return,
                }
            }
            _ => {}
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

/// Counts a keyed request as in flight until dropped (answered, or its connection gone).
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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
