//! An operator's settlement of one call (`dedup settle`): read the record, then complete it with
//! a reply or release it, fenced by the lease token just read ([`Records::settle`]). Only a call no
//! owner can settle any more is touched: one settled as outcome unknown (an `at_most_once` tool
//! that crashed, timed out or lost its answer), or one whose claim's lease ended. A running owner,
//! a completed call and a record that changed since it was read are refused, never overwritten.

use std::time::Duration;

use serde_json::{Value, json};

use toolcall_dedup::store::{
    Record, Records, SETTLE_MARGIN_MS, SettleAs, Status, Store, StoreError,
};

/// What the operator does with the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// Only read it.
    Show,
    /// The side effect happened and this is its reply (in the caller's format, as the tool would
    /// have answered): every repeat replays it.
    Complete(&'a [u8]),
    /// The side effect did not happen: the record goes and a retry runs the tool.
    Release,
}

impl Action<'_> {
    /// The word the call log records.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Show => "show",
            Action::Complete(_) => "completed",
            Action::Release => "released",
        }
    }
}

/// Why a settlement was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// No live record has this key (never claimed, released, or expired).
    #[error("no live record for key {0}")]
    NotFound(String),
    /// The claim's owner may still be running: its lease ends at `lease_until_ms`, and the
    /// operator waits a clock margin beyond it.
    #[error(
        "the call may still be held by a running owner: its lease ends at {}, and an operator \
         settles it from {} (a {} s margin for clock skew); try after then",
        super::inspect::iso8601(*lease_until_ms),
        super::inspect::iso8601(lease_until_ms.saturating_add(SETTLE_MARGIN_MS)),
        SETTLE_MARGIN_MS / 1000
    )]
    Running {
        /// When the owner's lease ends.
        lease_until_ms: i64,
    },
    /// The call completed with a reply of its own (or its result was too large to store).
    #[error("the call already completed; there is nothing to settle")]
    AlreadyCompleted,
    /// The record changed between the read and the write (its owner settled it, or another
    /// operator did): read it again.
    #[error("the record changed since it was read; nothing was written")]
    Changed,
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

/// What a settlement found and did.
#[derive(Debug, Clone)]
pub struct Settlement {
    /// The record as read, before the action.
    pub before: Record,
    /// The action taken.
    pub(crate) action: &'static str,
}

impl Settlement {
    /// The call-log line of the action (no reply bytes, no arguments).
    pub fn log_line(&self, now_ms: i64) -> Value {
        json!({
            "dedup_settle": 1,
            "key": self.before.key,
            "tool": self.before.tool,
            "action": self.action,
            "before": summary(&self.before),
            "at_ms": now_ms,
        })
    }
}

/// Reads `key` and performs `action` on it (see the module docs). A completed record lives
/// `ttl` from now.
pub async fn settle<S: Store + Records>(
    store: &S,
    key: &str,
    action: Action<'_>,
    ttl: Duration,
) -> Result<Settlement, SettleError> {
    let record = store
        .get(key)
        .await
        .map_err(SettleError::Store)?
        .ok_or_else(|| SettleError::NotFound(key.to_string()))?;
    let settlement = Settlement {
        action: action.name(),
        before: record,
    };
    let settle_as = match action {
        Action::Show => return Ok(settlement),
        Action::Complete(reply) => SettleAs::Complete(reply),
        Action::Release => SettleAs::Release,
    };
    let now_ms = store.now_ms();
    let before = &settlement.before;
    if !before.is_settleable(now_ms) {
        return Err(match before.status {
            Status::InProgress => SettleError::Running {
                lease_until_ms: before.lease_until_ms,
            },
            Status::Completed => SettleError::AlreadyCompleted,
        });
    }
    let expires_at_s = now_ms
        .div_euclid(1000)
        .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX));
    match store
        .settle(key, &before.token, settle_as, expires_at_s)
        .await
    {
        Ok(()) => Ok(settlement),
        Err(StoreError::LeaseLost) => Err(SettleError::Changed),
        Err(e) => Err(SettleError::Store(e)),
    }
}

fn summary(record: &Record) -> Value {
    json!({
        "status": record.status.as_str(),
        "outcome_unknown": record.outcome_unknown,
        "at_most_once": record.at_most_once,
        "lease_until_ms": record.lease_until_ms,
    })
}
