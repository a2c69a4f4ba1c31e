//! What a Gateway's MCP `tools/list` answers teach the interceptor door: each tool's input schema
//! (for typed keying) and its annotations (MCP's `readOnlyHint`, `destructiveHint`,
//! `idempotentHint`).
//!
//! One record per gateway and target, in the idempotency table under `catalog:<hash>` (never a
//! call's key, which is bare hex), expiring after `DEDUP_CATALOG_TTL_SECONDS`. Every container
//! keeps what it read or learned for [`CATALOG_REFRESH`], so a warm call costs no request for it.
//!
//! **No listing is lost.** Learning reads the record, merges the listing into it and writes it
//! back only if it is still the version read ([`Store::put`] is conditional on the record's
//! token); a write that lost to another container's reads the newer record and merges again. A
//! listing only ever adds or replaces tools (never shrinking the record): a client that is shown
//! fewer tools cannot make another client's calls lose their schema.
//!
//! **One call, one key, in every container.** A learned schema changes how a tool's calls are
//! keyed, and the REQUEST and RESPONSE of one call may be keyed in two containers whose cached
//! catalogs differ. The RESPONSE therefore never derives the key again: it settles the claim its
//! REQUEST noted (the interceptor's `request:<hash>` records). The record still keeps each
//! tool's last [`EARLIER_LISTINGS`] earlier entries ([`TargetCatalog::schemas_of`]), for an
//! operator asking which listings keyed a tool. A *retry* made after a tool's listing changed is
//! keyed with the new schema, so it meets its original only when the change does not alter how
//! its arguments normalize: that window is the price of typing by a schema that can change.
//!
//! **A listing types a tool; it never loosens a key unless trusted.** Types, enums, formats,
//! `required` and defaults are read from every listing; `x-dedup` field modes (which can make
//! different values one key) only from the gateways `DEDUP_TRUSTED_ANNOTATIONS` names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::key::schema::Schema;
use crate::key::{Delivery, Key};
use crate::store::{LeaseToken, Store, StoreError};

/// How long a container trusts the catalog it read or learned before reading it again.
pub(crate) const CATALOG_REFRESH: Duration = Duration::from_secs(60);
/// Default for `DEDUP_CATALOG_TTL_SECONDS`: a learned catalog lives a week after it last changed
/// or was refreshed.
pub(crate) const DEFAULT_CATALOG_TTL_SECONDS: u64 = 7 * 86_400;
/// Earlier entries kept per tool, newest first.
pub(crate) const EARLIER_LISTINGS: usize = 3;
/// Rounds of read, merge, conditional write before learning gives up on a contended record.
const WRITE_ROUNDS: u32 = 4;
/// The record's label (its `tool` attribute), which `dedup table` and the call log show.
const LABEL: &str = "mcp tools/list catalog";
/// The member that marks the stored form (`{"$catalog": 2, "tools": {...}, "earlier": {...}}`);
/// a record without it is the first form, a bare map of tools.
const FORM: &str = "$catalog";

/// One tool as a listing described it.
#[derive(Debug, Clone, Default)]
pub(crate) struct LearnedTool {
    /// The compiled `inputSchema`; `None` when there was none or it could not be compiled.
    pub(crate) schema: Option<Schema>,
    /// `annotations.readOnlyHint`.
    pub(crate) read_only: Option<bool>,
    /// `annotations.destructiveHint`.
    pub(crate) destructive: Option<bool>,
    /// `annotations.idempotentHint`.
    pub(crate) idempotent: Option<bool>,
}

impl LearnedTool {
    /// What an unknown outcome allows: `at_most_once` for a tool listed as destructive
    /// (`destructiveHint: true`) and not idempotent. Only a hint spelled out counts (MCP's
    /// defaults would make every unannotated tool destructive). Acting on it needs no trust: it
    /// only ever makes a call run fewer times.
    pub(crate) fn delivery(&self) -> Delivery {
        Delivery::default_for(self.destructive == Some(true) && self.idempotent != Some(true))
    }

    /// Reads one stored entry (`{"inputSchema": ..., "annotations": ...}`); from an untrusted
    /// gateway, without its `x-dedup` field modes.
    fn from_entry(entry: &Value, trusted: bool) -> LearnedTool {
        let hint = |name: &str| {
            entry
                .get("annotations")
                .and_then(|a| a.get(name))
                .and_then(Value::as_bool)
        };
        LearnedTool {
            schema: compile(entry, trusted),
            read_only: hint("readOnlyHint"),
            destructive: hint("destructiveHint"),
            idempotent: hint("idempotentHint"),
        }
    }
}

/// The schema of a stored entry, `None` without one (or one that does not compile).
fn compile(entry: &Value, trusted: bool) -> Option<Schema> {
    entry.get("inputSchema")?;
    let compiled = if trusted {
        Schema::from_tool_definition(entry)
    } else {
        let mut entry = entry.clone();
        if let Some(schema) = entry.get_mut("inputSchema") {
            without_key_modes(schema);
        }
        Schema::from_tool_definition(&entry)
    };
    compiled.ok().map(|(_, schema)| schema)
}

/// Removes every `x-dedup` keyword from a schema: the field modes that can make different values
/// one key. Property names (`properties`, `$defs`, ...) and values (`enum`, `const`, `default`)
/// are data, not keywords, so they are kept whatever they are called.
fn without_key_modes(schema: &mut Value) {
    match schema {
        Value::Object(members) => {
            members.remove("x-dedup");
            for (keyword, value) in members.iter_mut() {
                match keyword.as_str() {
                    "enum" | "const" | "default" | "examples" => {}
                    "properties" | "patternProperties" | "$defs" | "definitions"
                    | "dependentSchemas" => {
                        if let Value::Object(named) = value {
                            named.values_mut().for_each(without_key_modes);
                        }
                    }
                    _ => without_key_modes(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(without_key_modes),
        _ => {}
    }
}

/// The tools learned for one gateway and target.
#[derive(Debug, Default)]
pub(crate) struct TargetCatalog {
    /// The stored entries, by tool name (without the target prefix).
    entries: Map<String, Value>,
    /// Each tool's earlier entries, newest first (`null`: not listed then).
    earlier: Map<String, Value>,
    tools: HashMap<String, LearnedTool>,
    /// When the stored record expires (epoch seconds); 0 when nothing is stored.
    expires_at_s: i64,
    /// The stored record's version (its token): a write replaces only this version.
    version: Option<LeaseToken>,
    /// Whether the gateway's listings may loosen keys, for reading the earlier entries again.
    #[cfg_attr(not(test), allow(dead_code))]
    trusted: bool,
}

impl TargetCatalog {
    fn new(
        entries: Map<String, Value>,
        earlier: Map<String, Value>,
        expires_at_s: i64,
        version: Option<LeaseToken>,
        trusted: bool,
    ) -> TargetCatalog {
        let tools = entries
            .iter()
            .map(|(name, entry)| (name.clone(), LearnedTool::from_entry(entry, trusted)))
            .collect();
        TargetCatalog {
            entries,
            earlier,
            tools,
            expires_at_s,
            version,
            trusted,
        }
    }

    /// Reads a stored record's value (either form).
    fn read(value: &[u8], expires_at_s: i64, version: LeaseToken, trusted: bool) -> TargetCatalog {
        let object = |v: Option<Value>| match v {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let mut stored = object(serde_json::from_slice(value).ok());
        let (entries, earlier) = if stored.contains_key(FORM) {
            (
                object(stored.remove("tools")),
                object(stored.remove("earlier")),
            )
        } else {
            (stored, Map::new())
        };
        TargetCatalog::new(entries, earlier, expires_at_s, Some(version), trusted)
    }

    /// What was learned about `tool`.
    pub(crate) fn tool(&self, tool: &str) -> Option<&LearnedTool> {
        self.tools.get(tool)
    }

    /// Every schema `tool` was keyed with that this record remembers: its current listing first,
    /// then its earlier ones, newest first (`None`: no schema, as before it was listed). A
    /// RESPONSE whose own key finds no claim tries the keys these give.
    #[cfg(test)]
    pub(crate) fn schemas_of(&self, tool: &str) -> Vec<Option<Schema>> {
        let current = self.entries.get(tool);
        let earlier = self
            .earlier
            .get(tool)
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        current
            .into_iter()
            .chain(earlier)
            .map(|entry| compile(entry, self.trusted))
            .collect()
    }

    /// Number of tools learned.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool was learned.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// These entries with `listed` laid over them, each replaced entry remembered as an earlier
    /// one; `None` when that changes nothing.
    fn merged(
        &self,
        listed: &Map<String, Value>,
    ) -> Option<(Map<String, Value>, Map<String, Value>)> {
        let changed: Vec<(&String, &Value)> = listed
            .iter()
            .filter(|(k, v)| self.entries.get(*k) != Some(*v))
            .collect();
        if changed.is_empty() {
            return None;
        }
        let (mut entries, mut earlier) = (self.entries.clone(), self.earlier.clone());
        for (name, entry) in changed {
            let before = entries
                .insert(name.clone(), entry.clone())
                .unwrap_or(Value::Null);
            let mut history = match earlier.remove(name) {
                Some(Value::Array(history)) => history,
                _ => Vec::new(),
            };
            history.insert(0, before);
            history.truncate(EARLIER_LISTINGS);
            earlier.insert(name.clone(), Value::Array(history));
        }
        Some((entries, earlier))
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
pub(crate) enum CatalogError {
    /// The store did not answer.
    #[error("reading or writing the tool catalog: {0}")]
    Store(#[from] StoreError),
    /// Every write lost to another container's.
    #[error(
        "the tool catalog kept changing under {WRITE_ROUNDS} writes; the listing is learned at the next one"
    )]
    Contended,
}

/// The catalogs a container knows, each kept for [`CATALOG_REFRESH`] (see the module docs).
#[derive(Debug)]
pub(crate) struct Catalogs {
    cached: Mutex<HashMap<String, (Instant, Arc<TargetCatalog>)>>,
    ttl: Duration,
}

impl Catalogs {
    /// Catalogs whose records live `ttl` after they last changed.
    pub(crate) fn new(ttl: Duration) -> Catalogs {
        Catalogs {
            cached: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// The catalog of `namespace`: this container's copy while fresh, else the store's (one
    /// read). `None` when no listing was learned. `trusted`: the gateway's listings may loosen keys.
    pub(crate) async fn lookup<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        trusted: bool,
    ) -> Result<Option<Arc<TargetCatalog>>, CatalogError> {
        match self.fresh(namespace) {
            Some(fresh) => Ok(Some(fresh)),
            None => self.refresh(store, namespace, trusted).await,
        }
    }

    /// The catalog of `namespace` as the store has it now (one read), kept for later lookups.
    pub(crate) async fn refresh<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        trusted: bool,
    ) -> Result<Option<Arc<TargetCatalog>>, CatalogError> {
        let Some(record) = store.get(&catalog_key(namespace)).await? else {
            return Ok(None);
        };
        let value = record.result.as_deref().unwrap_or_default();
        let catalog = Arc::new(TargetCatalog::read(
            value,
            record.expires_at_s,
            record.token,
            trusted,
        ));
        self.keep(namespace, catalog.clone());
        Ok(Some(catalog))
    }

    /// Learns one target's tools from a listing (`listed` by tool name): read, merge, write if
    /// unchanged, else read again (see the module docs). Writes only when the listing changes the
    /// record or the record is past half its life. Returns whether it wrote.
    pub(crate) async fn learn<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        listed: &Map<String, Value>,
        trusted: bool,
    ) -> Result<bool, CatalogError> {
        let ttl_s = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let mut known = self.lookup(store, namespace, trusted).await?;
        for _round in 0..WRITE_ROUNDS {
            let now_s = store.now_ms().div_euclid(1000);
            let (entries, earlier) = match known.as_deref() {
                Some(known) => match known.merged(listed) {
                    Some(merged) => merged,
                    None if known.expires_at_s - now_s > ttl_s / 2 => return Ok(false),
                    None => (known.entries.clone(), known.earlier.clone()),
                },
                None => (listed.clone(), Map::new()),
            };
            let expires_at_s = now_s.saturating_add(ttl_s);
            let text = json!({FORM: 2, "tools": entries, "earlier": earlier}).to_string();
            let read = known.as_deref().and_then(|k| k.version.as_ref());
            let key = catalog_key(namespace);
            match store
                .put(&key, LABEL, text.as_bytes(), expires_at_s, read)
                .await
            {
                Ok(version) => {
                    let learned =
                        TargetCatalog::new(entries, earlier, expires_at_s, Some(version), trusted);
                    self.keep(namespace, Arc::new(learned));
                    return Ok(true);
                }
                // Another container wrote first: merge into what it wrote.
                Err(StoreError::LeaseLost) => {
                    known = self.refresh(store, namespace, trusted).await?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(CatalogError::Contended)
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
            here.learn(&store, "interceptor:-/pay", &listed, false)
                .await
                .unwrap()
        );
        let before = store.requests();
        assert!(
            !here
                .learn(&store, "interceptor:-/pay", &listed, false)
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
            .lookup(&store, "interceptor:-/pay", false)
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
                .learn(&store, "interceptor:-/pay", &one, false)
                .await
                .unwrap()
        );
        let third = Catalogs::new(Duration::from_secs(3_600));
        let catalog = third
            .lookup(&store, "interceptor:-/pay", false)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(catalog.len(), 3);
        assert!(
            third
                .lookup(&store, "interceptor:-/other", false)
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn only_a_destructive_tool_not_marked_idempotent_is_at_most_once() {
        let tool = |destructive, idempotent| LearnedTool {
            destructive,
            idempotent,
            ..LearnedTool::default()
        };
        assert_eq!(tool(Some(true), None).delivery(), Delivery::AtMostOnce);
        assert_eq!(
            tool(Some(true), Some(false)).delivery(),
            Delivery::AtMostOnce
        );
        assert_eq!(
            tool(Some(true), Some(true)).delivery(),
            Delivery::AtLeastOnce
        );
        assert_eq!(
            tool(Some(false), Some(false)).delivery(),
            Delivery::AtLeastOnce
        );
        assert_eq!(tool(None, None).delivery(), Delivery::AtLeastOnce);
        assert_eq!(DEFAULT_CATALOG_TTL_SECONDS, 604_800, "a week");
    }

    /// An untrusted listing loses every `x-dedup` keyword, wherever it sits (under a combinator's
    /// branches too), and nothing else: a property named `x-dedup` and enum values stay.
    #[test]
    fn key_modes_are_stripped_as_keywords_never_as_data() {
        let mut schema = json!({
            "type": "object",
            "x-dedup": "ignore",
            "properties": {
                "x-dedup": {"type": "string"},
                "amount": {"type": "integer", "x-dedup": "ignore"},
                "kind": {"enum": [{"x-dedup": "data"}], "default": {"x-dedup": "data"}},
            },
            "anyOf": [{"properties": {"note": {"x-dedup": "casefold"}}}],
        });
        without_key_modes(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "x-dedup": {"type": "string"},
                    "amount": {"type": "integer"},
                    "kind": {"enum": [{"x-dedup": "data"}], "default": {"x-dedup": "data"}},
                },
                "anyOf": [{"properties": {"note": {}}}],
            })
        );
    }

    /// Each change of a tool's listing keeps the one it replaced, newest first, up to
    /// [`EARLIER_LISTINGS`]; a listing that changes nothing writes nothing until the record is
    /// past half its life, when it is written again to live on.
    #[tokio::test]
    async fn earlier_listings_are_kept_and_a_record_is_refreshed_past_half_its_life() {
        let clock = ManualClock::new(1_000_000_000);
        let store = MemoryStore::new().with_clock(clock.clone());
        let here = Catalogs::new(Duration::from_secs(1_000));
        let ns = "interceptor:-/pay";
        let listing = |kind: &str| {
            entries(json!({"charge": {"inputSchema": {"type": "object",
                "properties": {"n": {"type": kind}}}}}))
        };
        assert!(
            here.learn(&store, ns, &listing("integer"), false)
                .await
                .unwrap()
        );
        let fresh = here.lookup(&store, ns, false).await.unwrap().unwrap();
        assert!(!fresh.is_empty());
        assert_eq!(
            fresh.schemas_of("charge").len(),
            1,
            "a first listing has no earlier one"
        );
        for kind in ["string", "number", "boolean", "null"] {
            assert!(here.learn(&store, ns, &listing(kind), false).await.unwrap());
        }
        let catalog = here.refresh(&store, ns, false).await.unwrap().unwrap();
        let schemas = catalog.schemas_of("charge");
        assert_eq!(schemas.len(), 1 + EARLIER_LISTINGS, "{schemas:?}");
        assert!(schemas.iter().all(Option::is_some), "{schemas:?}");
        assert!(catalog.schemas_of("refund").is_empty());

        // Unchanged: no write while more than half its life is left, one write after.
        clock.advance(Duration::from_secs(499));
        assert!(
            !here
                .learn(&store, ns, &listing("null"), false)
                .await
                .unwrap()
        );
        // Exactly half its life left (500 of 1,000 s) is past the half: rewritten.
        clock.advance(Duration::from_secs(1));
        assert!(
            here.learn(&store, ns, &listing("null"), false)
                .await
                .unwrap()
        );
        let record = store.get(&catalog_key(ns)).await.unwrap().unwrap();
        assert_eq!(record.expires_at_s, store.now_ms() / 1000 + 1_000);
        assert!(TargetCatalog::default().is_empty());
    }

    #[test]
    fn catalog_keys_never_look_like_call_keys() {
        let key = catalog_key("interceptor:arn:aws:bedrock-agentcore:us-east-1:1:gateway/g/pay");
        assert!(key.starts_with("catalog:") && key.len() == 40, "{key}");
        assert_ne!(key, catalog_key("interceptor:-/pay"));
    }
}
