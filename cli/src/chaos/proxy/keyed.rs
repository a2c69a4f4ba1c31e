//! Faults aimed at one operation on one key for a while ([`KeyedFaults`]), armed by the soak's
//! store wrapper for an invocation's planned store fault, and the count of their requests still
//! on their way to the server (a write that may yet apply).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::http::{Message, split};

/// What an armed rule does to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyedFault {
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
pub(super) struct Flight {
    count: std::sync::atomic::AtomicUsize,
    last_done: Mutex<Option<Instant>>,
}

/// Rules that hit one operation on one key for a while; shared by the proxy and whoever arms them.
#[derive(Debug, Default)]
pub(crate) struct KeyedFaults {
    rules: Mutex<Vec<KeyedRule>>,
}

impl KeyedFaults {
    /// Hits `operation` requests on `key` that arrive from `after` to `after + length` from now.
    pub(crate) fn arm(
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
    pub(crate) fn arm_first(
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
    pub(super) fn matching(
        &self,
        request: &[u8],
        target: &str,
    ) -> Option<(KeyedFault, Arc<Flight>)> {
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
            rule.first_body = Some(split(request, Message::Request).1.to_vec());
        }
        rule.in_flight.count.fetch_add(1, Ordering::SeqCst);
        Some((rule.fault, rule.in_flight.clone()))
    }

    /// Requests rules armed for `operation` on `key` forwarded that the server has not answered
    /// yet (writes that may still apply), and when the server last answered one.
    pub(crate) fn in_flight(&self, operation: &str, key: &str) -> (usize, Option<Instant>) {
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
    pub(crate) fn first_body(&self, operation: &str, key: &str) -> Option<Vec<u8>> {
        let quoted = format!("\"{key}\"");
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .iter()
            .rev()
            .find(|r| r.operation == operation && r.key == quoted)
            .and_then(|r| r.first_body.clone())
    }
}

/// Counts a keyed request as in flight until dropped (answered, or its connection gone).
pub(super) struct InFlight(pub(super) Arc<Flight>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.last_done.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.0.count.fetch_sub(1, Ordering::SeqCst);
    }
}
