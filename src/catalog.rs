//! What a Gateway's MCP `tools/list` answers teach the interceptor door: each tool's input schema
//! (for typed keying) and its annotations (MCP's `readOnlyHint`, `destructiveHint`,
//! `idempotentHint`).
//!
//! One record per gateway and target, in the idempotency table under `catalog:<hash>` (never a
//! call's key, which is bare hex), written with [`Store::put`] and expiring after
//! `DEDUP_CATALOG_TTL_SECONDS`. Every container keeps what it read or learned for
//! [`CATALOG_REFRESH`], so a warm call costs no request for it.
//!
//! **Why the keys stay stable.** A learned schema changes how a tool's calls are keyed, so a call
//! and its retry must see the same catalog. The RESPONSE invocation of a `tools/list` writes the
//! record before the client receives the list, and a container with nothing cached always reads
//! the store (no negative caching), so every call made after the tools were listed is keyed with
//! what the listing said, in every container. A listing only ever adds or replaces tools (merged
//! into the record, never shrinking it): a client that is shown fewer tools cannot make another
//! client's calls lose their schema. What can still split a call from its retry is a tool whose
//! schema changes between the two, inside the [`CATALOG_REFRESH`] window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::key::schema::Schema;
use crate::key::{Delivery, Key};
use crate::store::{Store, StoreError};

/// How long a container trusts the catalog it read or learned before reading it again.
pub const CATALOG_REFRESH: Duration = Duration::from_secs(60);
/// Default for `DEDUP_CATALOG_TTL_SECONDS`: a learned catalog lives a week after it last changed
/// or was refreshed.
pub const DEFAULT_CATALOG_TTL_SECONDS: u64 = 7 * 86_400;
/// The record's label (its `tool` attribute), which `dedup table` and the call log show.
const LABEL: &str = "mcp tools/list catalog";

/// One tool as a listing described it.
#[derive(Debug, Clone, Default)]
pub struct LearnedTool {
    /// The compiled `inputSchema`; `None` when there was none or it could not be compiled.
    pub schema: Option<Schema>,
    /// `annotations.readOnlyHint`.
    pub read_only: Option<bool>,
    /// `annotations.destructiveHint`.
    pub destructive: Option<bool>,
    /// `annotations.idempotentHint`.
    pub idempotent: Option<bool>,
}

impl LearnedTool {
    /// What an unknown outcome allows: `at_most_once` for a tool listed as destructive
    /// (`destructiveHint: true`) and not idempotent. Only a hint spelled out counts (MCP's
    /// defaults would make every unannotated tool destructive). Acting on it needs no trust: it
    /// only ever makes a call run fewer times.
    pub fn delivery(&self) -> Delivery {
        Delivery::default_for(self.destructive == Some(true) && self.idempotent != Some(true))
    }

    /// Reads one stored entry (`{"inputSchema": ..., "annotations": ...}`).
    fn from_entry(entry: &Value) -> LearnedTool {
        let hint = |name: &str| {
            entry
                .get("annotations")
                .and_then(|a| a.get(name))
                .and_then(Value::as_bool)
        };
        LearnedTool {
            schema: entry
                .get("inputSchema")
                .and_then(|_| Schema::from_tool_definition(entry).ok())
                .map(|(_, schema)| schema),
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
        }
    }
}

/// The tools learned for one gateway and target.
#[derive(Debug, Default)]
pub struct TargetCatalog {
    /// The stored entries, by tool name (without the target prefix).
    entries: Map<String, Value>,
    tools: HashMap<String, LearnedTool>,
    /// When the stored record expires (epoch seconds); 0 when nothing is stored.
    expires_at_s: i64,
}

impl TargetCatalog {
    fn new(entries: Map<String, Value>, expires_at_s: i64) -> TargetCatalog {
        let tools = entries
            .iter()
            .map(|(name, entry)| (name.clone(), LearnedTool::from_entry(entry)))
            .collect();
        TargetCatalog {
            entries,
            tools,
            expires_at_s,
        }
    }

    /// What was learned about `tool`.
    pub fn tool(&self, tool: &str) -> Option<&LearnedTool> {
        self.tools.get(tool)
    }

    /// Number of tools learned.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool was learned.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// These entries with `listed` laid over them, or `None` when that changes nothing.
    fn merged(&self, listed: &Map<String, Value>) -> Option<Map<String, Value>> {
        if listed.iter().all(|(k, v)| self.entries.get(k) == Some(v)) {
            return None;
        }
        let mut merged = self.entries.clone();
        merged.extend(listed.iter().map(|(k, v)| (k.clone(), v.clone())));
        Some(merged)
    }
}

/// The record key of the catalog of `namespace` (the calls' namespace: entry point, gateway and
/// target).
pub fn catalog_key(namespace: &str) -> String {
    format!(
        "catalog:{}",
        Key::from_digest(&Sha256::digest(namespace.as_bytes()))
    )
}

/// Why a catalog could not be read or learned.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The store did not answer.
    #[error("reading or writing the tool catalog: {0}")]
    Store(#[from] StoreError),
}

/// The catalogs a container knows, each kept for [`CATALOG_REFRESH`] (see the module docs).
#[derive(Debug)]
pub struct Catalogs {
    cached: Mutex<HashMap<String, (Instant, Arc<TargetCatalog>)>>,
    ttl: Duration,
}

impl Catalogs {
    /// Catalogs whose records live `ttl` after they last changed.
    pub fn new(ttl: Duration) -> Catalogs {
        Catalogs {
            cached: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// The catalog of `namespace`: this container's copy while fresh, else the store's (one
    /// read). `None` when no listing was learned.
    pub async fn lookup<S: Store>(
        &self,
        store: &S,
        namespace: &str,
    ) -> Result<Option<Arc<TargetCatalog>>, CatalogError> {
        if let Some(fresh) = self.fresh(namespace) {
            return Ok(Some(fresh));
        }
        let Some(record) = store.get(&catalog_key(namespace)).await? else {
            return Ok(None);
        };
        let entries = record
            .result
            .as_deref()
            .and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok())
            .and_then(|v| match v {
                Value::Object(map) => Some(map),
                _ => None,
            })
            .unwrap_or_default();
        let catalog = Arc::new(TargetCatalog::new(entries, record.expires_at_s));
        self.keep(namespace, catalog.clone());
        Ok(Some(catalog))
    }

    /// Learns one target's tools from a listing (`entries` by tool name). Writes the record only
    /// when the listing changes it or the record is past half its life. Returns whether it wrote.
    pub async fn learn<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        listed: &Map<String, Value>,
    ) -> Result<bool, CatalogError> {
        let known = self.lookup(store, namespace).await?;
        let now_s = store.now_ms().div_euclid(1000);
        let ttl_s = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let entries = match known.as_deref() {
            Some(known) => match known.merged(listed) {
                Some(merged) => merged,
                None if known.expires_at_s - now_s > ttl_s / 2 => return Ok(false),
                None => known.entries.clone(),
            },
            None => listed.clone(),
        };
        let expires_at_s = now_s.saturating_add(ttl_s);
        let text = serde_json::to_string(&entries).unwrap_or_default();
        store
            .put(
                &catalog_key(namespace),
                LABEL,
                text.as_bytes(),
                expires_at_s,
            )
            .await?;
        self.keep(
            namespace,
            Arc::new(TargetCatalog::new(entries, expires_at_s)),
        );
        Ok(true)
    }

    fn fresh(&self, namespace: &str) -> Option<Arc<TargetCatalog>> {
        let cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached
            .get(namespace)
            .filter(|(at, _)| at.elapsed() < CATALOG_REFRESH)
            .map(|(_, catalog)| catalog.clone())
    }

    fn keep(&self, namespace: &str, catalog: Arc<TargetCatalog>) {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        cached.insert(namespace.to_string(), (Instant::now(), catalog));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ManualClock, MemoryStore, RequestCounts};
    use serde_json::json;

    fn entries(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn a_listing_is_stored_merged_and_read_back_by_another_container() {
        let store = MemoryStore::new().with_clock(ManualClock::new(1_000_000_000));
        let here = Catalogs::new(Duration::from_secs(3_600));
        let listed = entries(json!({
            "charge": {"inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
                       "annotations": {"destructiveHint": true, "idempotentHint": false}},
            "lookup": {"inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        }));
        assert!(
            here.learn(&store, "interceptor:-/pay", &listed)
                .await
                .unwrap()
        );
        let before = store.requests();
        assert!(
            !here
                .learn(&store, "interceptor:-/pay", &listed)
                .await
                .unwrap(),
            "the same listing writes nothing"
        );
        assert_eq!(
            store.requests() - before,
            RequestCounts::default(),
            "and reads nothing: cached"
        );

        let there = Catalogs::new(Duration::from_secs(3_600));
        let catalog = there
            .lookup(&store, "interceptor:-/pay")
            .await
            .unwrap()
            .unwrap();
        let charge = catalog.tool("charge").unwrap();
        assert!(charge.schema.is_some());
        assert_eq!(
            (charge.destructive, charge.idempotent, charge.read_only),
            (Some(true), Some(false), None)
        );
        assert_eq!(catalog.tool("lookup").unwrap().read_only, Some(true));

        // A shorter listing (another client shown one tool) adds, never removes.
        let one = entries(json!({"refund": {"inputSchema": {"type": "object"}}}));
        assert!(
            there
                .learn(&store, "interceptor:-/pay", &one)
                .await
                .unwrap()
        );
        let third = Catalogs::new(Duration::from_secs(3_600));
        let catalog = third
            .lookup(&store, "interceptor:-/pay")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(catalog.len(), 3);
        assert!(
            third
                .lookup(&store, "interceptor:-/other")
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn catalog_keys_never_look_like_call_keys() {
        let key = catalog_key("interceptor:arn:aws:bedrock-agentcore:us-east-1:1:gateway/g/pay");
        assert!(key.starts_with("catalog:") && key.len() == 40, "{key}");
        assert_ne!(key, catalog_key("interceptor:-/pay"));
    }
}
