//! The log of every write the proxy sent to the server, by key, as seen from the wire: what the
//! server did with it even when the caller got a fault instead ([`WriteLog`]).

use std::collections::HashMap;
use std::sync::Mutex;

use super::StoreFault;
use super::http::{Message, split, status};

/// Every write request the proxy sent to the server, by key: what the server did with it, seen
/// from the wire. The soak's oracle takes a claim's time from here (a claim takes the key when
/// the write applies, which a held or late request does well after its condition's clock
/// reading), and a finding prints a key's writes so that it names the writer.
#[derive(Debug)]
pub(crate) struct WriteLog {
    key_attribute: String,
    by_key: Mutex<HashMap<String, Vec<WriteSeen>>>,
}

/// One write request sent to the server.
#[derive(Debug, Clone)]
pub(crate) struct WriteSeen {
    /// `PutItem`, `UpdateItem` or `DeleteItem`.
    pub(crate) operation: String,
    /// The lease token it carried: the item's (a claim) or its condition's (a fenced write).
    pub(crate) token: Option<String>,
    /// The condition's clock reading (`:now_ms`), when it has one.
    pub(crate) condition_now_ms: Option<i64>,
    /// When the proxy started sending it to the server (system clock, ms).
    pub(crate) sent_ms: i64,
    /// When the server answered, and with what status and error type; `None` while unanswered.
    pub(crate) answered: Option<(i64, u16, String)>,
    /// What the caller got instead of the server's answer, if a fault took it.
    pub(crate) fault: Option<&'static str>,
}

impl WriteSeen {
    /// The server applied it (HTTP 200).
    pub(crate) fn applied(&self) -> bool {
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
pub(super) struct Sending {
    key: String,
    index: usize,
}

impl WriteLog {
    pub(super) fn new(key_attribute: &str) -> WriteLog {
        WriteLog {
            key_attribute: key_attribute.to_string(),
            by_key: Mutex::default(),
        }
    }

    /// Notes `request` (a write) as sent now; `None` for a request that is not a keyed write.
    pub(super) fn sending(
        &self,
        request: &[u8],
        target: &str,
        fault: Option<StoreFault>,
    ) -> Option<Sending> {
        if !is_write(target) {
            return None;
        }
        let (_, body) = split(request, Message::Request);
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
    pub(super) fn answered(&self, sending: &Sending, response: &[u8]) {
        let (_, body) = split(response, Message::Response);
        let status = status(response);
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
    pub(crate) fn of(&self, key: &str) -> Vec<WriteSeen> {
        self.by_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
}

/// Whether an `X-Amz-Target` operation writes an item.
pub(super) fn is_write(target: &str) -> bool {
    matches!(target, "PutItem" | "UpdateItem" | "DeleteItem")
}

fn now_ms() -> i64 {
    use toolcall_dedup::store::Clock;
    toolcall_dedup::store::SystemClock.now_ms()
}

/// The lease token of the item a `PutItem` body writes (a claim's), if it is one.
pub(crate) fn written_token(body: &serde_json::Value) -> Option<&str> {
    body["Item"][toolcall_dedup::store::dynamodb::attr::LEASE_TOKEN]["S"].as_str()
}
