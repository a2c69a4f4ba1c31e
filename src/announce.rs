//! Announcements an operator's workflow can start from: with `DEDUP_EVENT_BUS` set, an EventBridge
//! event for each call an invocation left with its outcome unknown (an `at_most_once` call that
//! waits for `dedup settle`). The metric `settled_unknown` and the OutcomeUnknown alarm count such
//! calls; the event names each one, so a rule can open a ticket or page with the key to settle.
//!
//! Best effort: the answer to the caller never waits more than [`SEND_WITHIN`] for it, and a
//! failure is logged, never the caller's problem (the record, the metric and `dedup list --state
//! unknown` still find the call).

use std::time::Duration;

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde_json::json;

/// The events' `source`, what a rule matches on.
pub const SOURCE: &str = "toolcall-dedup";
/// The `detail-type` of the event for a call left with its outcome unknown.
pub const OUTCOME_UNKNOWN: &str = "Tool call outcome unknown";
/// The longest an answer waits for its announcement.
pub(crate) const SEND_WITHIN: Duration = Duration::from_millis(500);

/// An EventBridge bus the function announces to.
#[derive(Debug, Clone)]
pub struct EventBus {
    client: Client,
    bus: String,
    service: String,
}

/// A call an invocation left with its outcome unknown.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnknownOutcome<'a> {
    /// The record's key: what `dedup settle` and `dedup show` take.
    pub(crate) key: &'a str,
    /// The tool called.
    pub(crate) tool: Option<&'a str>,
    /// The entry point the call came in by.
    pub(crate) door: Option<&'a str>,
    /// The Lambda request id of the invocation that left it so.
    pub(crate) request_id: &'a str,
}

impl EventBus {
    /// Announces to `bus` (a name or an ARN) through `client`; `service` (the function's name)
    /// tells deployments apart, as the metrics' `Service` dimension does.
    pub fn new(client: Client, bus: impl Into<String>, service: impl Into<String>) -> EventBus {
        EventBus {
            client,
            bus: bus.into(),
            service: service.into(),
        }
    }

    /// An EventBridge client from the default AWS configuration, or pointed at `endpoint_url`.
    pub async fn build_client(endpoint_url: Option<&str>) -> Client {
        Client::new(&crate::aws::sdk_config(endpoint_url).await)
    }

    /// Sends one event for `call`, waiting at most `within` (and never more than [`SEND_WITHIN`]).
    pub(crate) async fn outcome_unknown(&self, call: &UnknownOutcome<'_>, within: Duration) {
        let detail = json!({
            "key": call.key,
            "tool": call.tool,
            "door": call.door,
            "request_id": call.request_id,
            "service": self.service,
            "settle": format!("dedup settle {} --completed REPLY.json | --release", call.key),
        });
        let entry = PutEventsRequestEntry::builder()
            .source(SOURCE)
            .detail_type(OUTCOME_UNKNOWN)
            .detail(detail.to_string())
            .event_bus_name(&self.bus)
            .build();
        let send = self.client.put_events().entries(entry).send();
        match tokio::time::timeout(within.min(SEND_WITHIN), send).await {
            Ok(Ok(out)) if out.failed_entry_count() == 0 => {
                tracing::info!(key = call.key, bus = %self.bus, "announced an unknown outcome");
            }
            Ok(Ok(out)) => {
                let why = out
                    .entries()
                    .iter()
                    .filter_map(|e| e.error_code())
                    .collect::<Vec<_>>()
                    .join(", ");
                tracing::warn!(key = call.key, bus = %self.bus, why, "EventBridge refused the unknown-outcome event");
            }
            Ok(Err(e)) => tracing::warn!(
                key = call.key,
                bus = %self.bus,
                error = %aws_sdk_eventbridge::error::DisplayErrorContext(&e),
                "could not announce an unknown outcome"
            ),
            Err(_) => tracing::warn!(
                key = call.key,
                bus = %self.bus,
                "announcing an unknown outcome timed out"
            ),
        }
    }
}
