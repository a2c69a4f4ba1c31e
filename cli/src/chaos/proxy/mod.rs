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

//!
//! The module is split by concern: the fault vocabulary ([`faults`]), the proxy's own answers
//! ([`answers`]), keyed rules ([`keyed`]), the write log ([`write_log`]), HTTP/1.x message reading
//! ([`http`]), the listening socket and its windows ([`listen`]) and one connection's request loop
//! ([`serve`]); this file holds the state they share and [`FaultProxy`], the handle the soak
//! drives.

mod answers;
mod faults;
mod http;
mod keyed;
mod listen;
mod serve;
#[cfg(test)]
mod tests;
mod write_log;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

pub(crate) use answers::AccessError;
pub use faults::{RequestFaults, StoreFault};
pub(crate) use keyed::{KeyedFault, KeyedFaults};
pub(crate) use write_log::{WriteLog, WriteSeen, written_token};

use listen::{Listening, accept_loop, listen};

/// Why open connections were cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Outage,
    AccessWindow,
    Refusing,
    Shutdown,
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
    pub(crate) fn keyed(&self) -> Arc<KeyedFaults> {
        self.shared.keyed.clone()
    }

    /// The writes this proxy sent to the server.
    pub(crate) fn writes(&self) -> Arc<WriteLog> {
        self.shared.writes.clone()
    }

    /// The per-request faults drawn from now on.
    pub fn set_faults(&self, faults: RequestFaults) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0 = faults;
    }

    /// Starts (cutting every open connection) or ends an outage.
    pub(crate) fn set_outage(&self, on: bool) {
        self.shared.outage.store(on, Ordering::SeqCst);
        if on {
            self.shared.cut(Cut::Outage);
        }
    }

    /// Starts (closing the listening socket and cutting every open connection) or ends a window in
    /// which connects are refused.
    pub(crate) fn set_refusing(&self, on: bool) {
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
    pub(crate) fn set_blackholed(&self, on: bool) {
        self.shared.blackholed.store(on, Ordering::SeqCst);
        self.listening.send_replace(if on {
            Listening::Blackholed
        } else {
            Listening::Open
        });
    }

    /// Starts (cutting every open connection) or ends an access-or-table-error window.
    pub(crate) fn set_access_error(&self, error: Option<AccessError>) {
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
    pub(crate) fn variants(&self) -> BTreeMap<String, u64> {
        self.shared
            .variants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
