//! What an operator reads and removes (`dedup list`, `dedup show`, `dedup evict`): a record
//! described in words and ISO 8601 times, one line per record, and an eviction fenced on the
//! version read. Never the call's arguments: records do not hold them.

use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;
use serde_json::{Map, Value, json};

use toolcall_dedup::store::{LeaseToken, Record, RecordState, Records, Status, StoreError};

/// Epoch milliseconds as ISO 8601 in UTC (`2026-12-06T05:59:26.123Z`).
pub(crate) fn iso8601(ms: i64) -> String {
    DateTime::from_millis(ms)
        .fmt(Format::DateTime)
        .unwrap_or_else(|_| format!("epoch ms {ms}"))
}

/// The word [`RecordState`] is listed and filtered by.
pub(crate) fn state_name(state: RecordState) -> &'static str {
    match state {
        RecordState::Unknown => "unknown",
        RecordState::InProgress => "in_progress",
        RecordState::Completed => "completed",
    }
}

/// One record as a listing's line: when, state, tool, where from, key.
pub(crate) fn row(record: &Record, now_ms: i64) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), json!(record.key));
    out.insert(
        "state".into(),
        json!(state_name(RecordState::of(record, now_ms))),
    );
    out.insert("tool".into(), json!(record.tool));
    out.insert("created_at".into(), json!(iso8601(record.created_at_ms)));
    let about = &record.about;
    for (name, value) in [
        ("door", about.door()),
        ("namespace", about.namespace.as_deref()),
        ("run", about.run.as_deref()),
        ("step", about.step.as_deref()),
    ] {
        if let Some(value) = value {
            out.insert(name.into(), json!(value));
        }
    }
    Value::Object(out)
}

/// The record as `dedup show` prints it: who and what (door, namespace, run, step, keyer), when
/// (created, lease end, expiry, in ISO 8601), its state, and the stored reply as JSON when it
/// parses (else as text, or its size when it is not UTF-8). `version` is what
/// [`evict`] can be fenced on.
pub(crate) fn describe(record: &Record, now_ms: i64) -> Value {
    let mut out = row(record, now_ms);
    let fields = out.as_object_mut().expect("a row is an object");
    if let Some(keyer) = &record.about.keyer {
        fields.insert("keyer".into(), json!(keyer));
    }
    if let Some(policy) = &record.about.policy {
        fields.insert("policy".into(), json!(policy));
        fields.insert(
            "policy_covers".into(),
            json!(
                "what the tool's keys depend on in its policy: its entry's key_fields, fields, \
                 undeclared and schema, and the tool_definitions entry that types it (not ttl, \
                 delivery or failures); another fingerprint may mean other keys for the same call \
                 (dedup key --compare-policy)"
            ),
        );
    }
    if let Some(why) = why_unknown(record, now_ms) {
        fields.insert("why_unknown".into(), json!(why));
    }
    fields.insert("version".into(), json!(record.token.as_str()));
    fields.insert("at_most_once".into(), json!(record.at_most_once));
    if record.status == Status::InProgress {
        fields.insert("lease_until".into(), json!(iso8601(record.lease_until_ms)));
    }
    fields.insert(
        "expires_at".into(),
        json!(iso8601(record.expires_at_s.saturating_mul(1000))),
    );
    fields.insert("fingerprint".into(), json!(record.fingerprint));
    if let Some(result) = &record.result {
        let reply = match serde_json::from_slice::<Value>(result) {
            Ok(reply) => reply,
            Err(_) => match std::str::from_utf8(result) {
                Ok(text) => json!(text),
                Err(_) => json!({"bytes": result.len(), "utf8": false}),
            },
        };
        fields.insert("reply".into(), reply);
    }
    if let Some(bytes) = record.omitted_result_bytes {
        fields.insert("reply_omitted_bytes".into(), json!(bytes));
    }
    if let Some(offloaded) = &record.offloaded {
        fields.insert("reply_object".into(), json!(offloaded.object));
    }
    out
}

/// Why a record's outcome is unknown, in the operator's words; `None` when it is not.
fn why_unknown(record: &Record, now_ms: i64) -> Option<&'static str> {
    if RecordState::of(record, now_ms) != RecordState::Unknown {
        return None;
    }
    Some(match record.status {
        Status::InProgress => {
            "an at_most_once claim whose lease ended unsettled: its invocation was killed, or \
             its answer never came back (an interceptor RESPONSE lost), before it said whether \
             the tool acted"
        }
        Status::Completed => {
            "settled as outcome unknown: the tool crashed, timed out or its answer was lost after \
             it may have acted (or the sweep settled an abandoned at_most_once claim)"
        }
    })
}

/// Why an eviction was refused. Nothing was deleted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvictError {
    /// No live record has this key.
    #[error("no live record for key {0}")]
    NotFound(String),
    /// A claim: its call may still be running.
    #[error(
        "the call is in progress (its lease ends {}); a claim is never evicted",
        iso8601(*lease_until_ms)
    )]
    InProgress {
        /// When the claim's lease ends.
        lease_until_ms: i64,
    },
    /// The call's outcome is unknown: whether it ran is for an operator to say.
    #[error(
        "the call's outcome is unknown: settle it instead (`dedup settle KEY --completed FILE` \
         if the side effect happened, `--release` if it did not)"
    )]
    OutcomeUnknown,
    /// The record is not the version the operator read (`--version`), or changed since.
    #[error("the record changed since it was read (now version {now}); nothing was deleted")]
    Changed {
        /// The version the record carries now.
        now: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What an eviction removed.
#[derive(Debug, Clone)]
pub(crate) struct Eviction {
    /// The record as read, before it was deleted.
    pub before: Record,
}

impl Eviction {
    /// The call-log line of the eviction (no reply bytes, no arguments).
    pub(crate) fn log_line(&self, now_ms: i64) -> Value {
        json!({
            "dedup_evict": 1,
            "key": self.before.key,
            "tool": self.before.tool,
            "version": self.before.token.as_str(),
            "before": row(&self.before, now_ms),
            "at": iso8601(now_ms),
        })
    }
}

/// Reads `key` and deletes it if it is completed (with a known outcome) and, when `expected` is
/// given, still the version an operator read: the next identical call then runs the tool again.
pub(crate) async fn evict<S: Records>(
    store: &S,
    key: &str,
    expected: Option<&LeaseToken>,
) -> Result<Eviction, EvictError> {
    let record = store
        .get(key)
        .await?
        .ok_or_else(|| EvictError::NotFound(key.to_string()))?;
    let now_ms = store.now_ms();
    if expected.is_some_and(|v| *v != record.token) {
        return Err(EvictError::Changed {
            now: record.token.as_str().to_string(),
        });
    }
    match RecordState::of(&record, now_ms) {
        RecordState::InProgress => {
            return Err(EvictError::InProgress {
                lease_until_ms: record.lease_until_ms,
            });
        }
        RecordState::Unknown => return Err(EvictError::OutcomeUnknown),
        RecordState::Completed => {}
    }
    match store.evict(key, &record.token).await {
        Ok(()) => Ok(Eviction { before: record }),
        Err(StoreError::LeaseLost) => Err(EvictError::Changed {
            now: match store.get(key).await? {
                Some(r) => r.token.as_str().to_string(),
                None => "none: deleted".to_string(),
            },
        }),
        Err(e) => Err(e.into()),
    }
}
