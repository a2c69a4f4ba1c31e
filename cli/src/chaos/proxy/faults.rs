//! The faults the proxy draws for each request ([`RequestFaults`], in per mille) and the names
//! it counts every fault by ([`StoreFault`]): the soak's vocabulary, kept apart from how the
//! proxy carries each one out.

use std::time::Duration;

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

    pub(crate) fn name(self) -> &'static str {
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
    pub(crate) fn is_per_request(self) -> bool {
        let mut faults = RequestFaults::NONE;
        faults.per_mille_mut(self).is_some()
    }
}
