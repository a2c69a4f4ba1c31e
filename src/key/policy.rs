//! Per-tool key policies, loaded from one JSON or TOML file keyed by tool name:
//!
//! ```toml
//! [tools.charge_card]
//! key_fields = ["customer_id", "amount", "currency"]   # only these fields form the key
//! fields = { memo = "ignore", customer_id = "exact" }  # ignore | exact | casefold
//! schema = { type = "object", properties = { currency = { enum = ["USD", "EUR"] } } }
//! ```
//!
//! Paths are dotted (`shipping.address.zip`) or JSON pointers (`/shipping/address/zip`, where a
//! `.` belongs to the member's name); a path walks through arrays into their elements, so
//! `items.sku` names the `sku` of every element of `items`.
//!
//! `tool_definitions` takes tool definitions as a provider declares them (an AgentCore Gateway
//! Lambda target's inline `toolSchema`, a Bedrock Agents action group's `functionSchema` or
//! `apiSchema`, an OpenAPI document, an MCP `tools/list` result, a Bedrock Converse `toolSpec`, an
//! OpenAI or Anthropic tool): each one's input schema becomes the schema of the tool it names,
//! unless `tools` gives that tool a `schema` of its own.
//!
//! `dedup = "off"` on a tool turns deduplication off for it: every call runs, identical or not.
//! That is for tools whose identical calls are separate actions (a toggle), which no key can tell
//! from a retry when the caller gives no step.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::schema::{FieldMode, Schema, SchemaError, operation_ids, tool_definitions};

/// Why a policy file could not be used. Each names the file or the tool, so the fix is findable.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read policy file {path}: {source}")]
    Read {
        /// The file as given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid JSON or TOML of the policy shape.
    #[error("invalid policy file {path}: {message}")]
    Parse {
        /// The file as given (empty when parsed from text).
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A tool's schema is not one the keyer can read.
    #[error("policy for tool {tool:?}: {source}")]
    Schema {
        /// The tool the schema belongs to.
        tool: String,
        /// What is wrong with the schema.
        source: SchemaError,
    },
    /// A field rule names an empty path.
    #[error("policy for tool {tool:?}: empty field path")]
    EmptyPath {
        /// The tool the rule belongs to.
        tool: String,
    },
    /// `failures: retry` stores no failure, so a failure retention means nothing.
    #[error(
        "policy for tool {tool:?}: failure_ttl_seconds is how long a replayed failure replays; \
         with failures = \"retry\" no failure is stored (use failures = \"replay\")"
    )]
    RetriedFailureTtl {
        /// The tool the rule belongs to.
        tool: String,
    },
    /// A failure replayed for no time is a failure not stored.
    #[error(
        "policy for tool {tool:?}: failure_ttl_seconds is at least 1; for no replay at all, use \
         failures = \"retry\""
    )]
    NoFailureTtl {
        /// The tool the rule belongs to.
        tool: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    tools: BTreeMap<String, ToolPolicySpec>,
    #[serde(default)]
    tool_definitions: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ToolPolicySpec {
    key_fields: Option<Vec<String>>,
    #[serde(default)]
    fields: BTreeMap<String, FieldMode>,
    schema: Option<serde_json::Value>,
    #[serde(default)]
    dedup: DedupSwitch,
    ttl_seconds: Option<u64>,
    /// The tool moves money, deletes or sends: an unknown outcome is never re-run by default.
    #[serde(default)]
    destructive: bool,
    /// What an unknown outcome allows; `None`: as `destructive` says.
    delivery: Option<Delivery>,
    /// `ignore`: members the tool's schema does not declare leave the key, at every depth where
    /// the schema declares properties.
    #[serde(default)]
    undeclared: Undeclared,
    /// What a failure reply does: `replay` it or let the `retry` run (see [`OnFailure`]). Not
    /// part of the policy's fingerprint: it changes no key.
    #[serde(skip_serializing)]
    failures: Option<Failures>,
    /// How long a replayed failure is replayed, when not the whole retention (at least 1).
    #[serde(skip_serializing)]
    failure_ttl_seconds: Option<u64>,
}

/// `failures` in a tool's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
enum Failures {
    Replay,
    Retry,
}

/// How long a failure is replayed by default, for a tool that is not `at_most_once`: long enough to
/// absorb a burst of retries of one failed call, short enough that the agent's next deliberate
/// attempt runs (docs/keys.md, "Failures").
pub const DEFAULT_FAILURE_TTL: Duration = Duration::from_secs(60);

/// What a failure reply (Bedrock `FAILURE`, HTTP 5xx, MCP `isError`) does to the call. Fixed when
/// the call is claimed and stored with the claim, so that whoever settles the claim later (an
/// interceptor RESPONSE, after a config change) applies the rule the call was claimed under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Stored and replayed like a success, for the record's whole retention (an `at_most_once`
    /// tool's default: its failure may have acted halfway).
    #[default]
    Replay,
    /// Stored and replayed for this long, then the call runs again (others' default:
    /// [`DEFAULT_FAILURE_TTL`]).
    ReplayFor(Duration),
    /// Not stored: the claim is released and a retry runs at once (Powertools' rule).
    Retry,
}

impl OnFailure {
    /// The default for a tool whose unknown outcomes follow `delivery`.
    pub const fn default_for(delivery: Delivery) -> OnFailure {
        match delivery {
            Delivery::AtMostOnce => OnFailure::Replay,
            Delivery::AtLeastOnce => OnFailure::ReplayFor(DEFAULT_FAILURE_TTL),
        }
    }
}

/// What a member the schema does not declare does to the key (`undeclared` in a tool's policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Undeclared {
    /// Keyed like any member (the default: without a schema that says otherwise, it may matter).
    #[default]
    Key,
    /// Left out: the tool ignores members it does not declare (a model adds echoes of context).
    Ignore,
}

/// What may happen to a call whose outcome is unknown (the tool crashed, timed out or lost its
/// answer, and may or may not have acted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// The claim is kept until its lease ends; a retry after that runs the tool again.
    #[default]
    AtLeastOnce,
    /// The call is settled as outcome unknown and never re-run automatically: every repeat is
    /// told so, naming the key, until an operator settles it (`dedup settle`).
    AtMostOnce,
}

impl Delivery {
    /// The policy file's spelling.
    pub const fn name(self) -> &'static str {
        match self {
            Delivery::AtLeastOnce => "at_least_once",
            Delivery::AtMostOnce => "at_most_once",
        }
    }

    /// The default for a tool: `at_most_once` when it is destructive, else `at_least_once`.
    pub const fn default_for(destructive: bool) -> Delivery {
        if destructive {
            Delivery::AtMostOnce
        } else {
            Delivery::AtLeastOnce
        }
    }
}

/// Whether a tool's identical calls are answered from one another (`dedup = "on"`, the default)
/// or each run (`"off"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DedupSwitch {
    /// A repeat is answered with the first call's result.
    #[default]
    On,
    /// Every call runs; nothing is claimed or stored.
    Off,
}

/// The policy tree for one tool, walked alongside the arguments.
#[derive(Debug, Clone, Default)]
pub(crate) struct PolicyNode {
    pub(crate) mode: Option<FieldMode>,
    /// Only children marked `keyed` (or with keyed descendants) take part in the key.
    pub(crate) restricted: bool,
    /// This whole subtree is named by `key_fields`.
    pub(crate) keyed: bool,
    children: Vec<(String, PolicyNode)>,
}

impl PolicyNode {
    pub(crate) fn child(&self, name: &str) -> Option<&PolicyNode> {
        self.children
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.children[i].1)
    }

    /// Whether a field with this policy child is part of the key under this (possibly restricted) node.
    pub(crate) fn admits(&self, child: Option<&PolicyNode>) -> bool {
        !self.restricted || child.is_some_and(|c| c.keyed || c.restricted)
    }

    fn descend(&mut self, path: &[String]) -> &mut PolicyNode {
        let mut node = self;
        for part in path {
            let i = match node
                .children
                .binary_search_by(|(n, _)| n.as_str().cmp(part))
            {
                Ok(i) => i,
                Err(i) => {
                    node.children
                        .insert(i, (part.clone(), PolicyNode::default()));
                    i
                }
            };
            node = &mut node.children[i].1;
        }
        node
    }
}

/// The member names a policy path walks, or `None` for a path with an empty one. One syntax
/// wherever a policy names fields (`fields`, `key_fields`): a JSON pointer (`/order/item_ids`,
/// RFC 6901: `~1` is `/`, `~0` is `~`, and a `.` is part of a name, so `/meta.trace_id` is the one
/// member `meta.trace_id`), or a dotted path (`order.item_ids`).
pub fn field_path(path: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = match path.strip_prefix('/') {
        Some(pointer) => pointer
            .split('/')
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None => path.split('.').map(str::to_string).collect(),
    };
    (!path.is_empty() && parts.iter().all(|p| !p.is_empty())).then_some(parts)
}

/// One tool's policy.
#[derive(Debug, Clone, Default)]
pub struct ToolPolicy {
    pub(crate) root: PolicyNode,
    /// The tool's input schema, when the policy file gives one.
    pub schema: Option<Schema>,
    /// Whether the tool's calls are deduplicated at all.
    pub dedup: DedupSwitch,
    /// `ttl_seconds`: how long this tool's completed calls replay, instead of the global TTL.
    /// The configuration refuses one shorter than the longest lease.
    pub ttl: Option<Duration>,
    /// What an unknown outcome allows: `delivery` in the policy file, else `at_most_once` for a
    /// tool marked `destructive`, else `at_least_once`.
    pub delivery: Delivery,
    /// What members the schema does not declare do to the key.
    pub undeclared: Undeclared,
    /// `failures` and `failure_ttl_seconds`, when the policy says; else [`OnFailure::default_for`]
    /// the call's delivery.
    pub on_failure: Option<OnFailure>,
    /// What the tool's keys depend on in the policy (its own entry and the definitions that type
    /// it), hashed: 12 hex digits, stored with each record. Another fingerprint may mean other
    /// keys for the same calls (`dedup key --compare-policy` says which).
    pub fingerprint: String,
}

/// Policies for every tool, by tool name.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    tools: HashMap<String, ToolPolicy>,
}

impl PolicySet {
    /// Loads a `.json` or `.toml` policy file (by extension; other extensions are tried as JSON).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: shown.clone(),
            source,
        })?;
        let is_toml = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
        Self::parse(&text, is_toml).map_err(|e| match e {
            PolicyError::Parse { message, .. } => PolicyError::Parse {
                path: shown,
                message,
            },
            other => other,
        })
    }

    /// Parses policy text (TOML when `is_toml`, JSON otherwise); errors carry no path.
    pub fn parse(text: &str, is_toml: bool) -> Result<Self, PolicyError> {
        let parse_error = |message: String| PolicyError::Parse {
            path: "<input>".into(),
            message,
        };
        let file: PolicyFile = if is_toml {
            toml::from_str(text).map_err(|e| parse_error(e.to_string()))?
        } else {
            serde_json::from_str(text).map_err(|e| parse_error(e.to_string()))?
        };
        let mut tools = HashMap::new();
        let mut inputs: HashMap<String, Vec<String>> = HashMap::new();
        for (tool, spec) in file.tools {
            inputs
                .entry(tool.clone())
                .or_default()
                .push(serde_json::to_string(&spec).unwrap_or_default());
            let mut root = PolicyNode::default();
            if let Some(fields) = &spec.key_fields {
                root.restricted = true;
                for path in fields {
                    let Some(parts) = field_path(path) else {
                        return Err(PolicyError::EmptyPath { tool });
                    };
                    let mut node = &mut root;
                    for (i, part) in parts.iter().enumerate() {
                        node = node.descend(std::slice::from_ref(part));
                        if i + 1 < parts.len() {
                            node.restricted = true;
                        }
                    }
                    node.keyed = true;
                }
            }
            for (path, mode) in &spec.fields {
                let Some(parts) = field_path(path) else {
                    return Err(PolicyError::EmptyPath { tool });
                };
                root.descend(&parts).mode = Some(*mode);
            }
            let schema = match &spec.schema {
                Some(s) => Some(
                    Schema::from_tool_definition(s)
                        .map(|(_, schema)| schema)
                        .map_err(|source| PolicyError::Schema {
                            tool: tool.clone(),
                            source,
                        })?,
                ),
                None => None,
            };
            let on_failure = match (spec.failures, spec.failure_ttl_seconds) {
                (Some(Failures::Retry), Some(_)) => {
                    return Err(PolicyError::RetriedFailureTtl { tool });
                }
                (Some(Failures::Retry), None) => Some(OnFailure::Retry),
                (_, Some(0)) => return Err(PolicyError::NoFailureTtl { tool }),
                (_, Some(seconds)) => Some(OnFailure::ReplayFor(Duration::from_secs(seconds))),
                (Some(Failures::Replay), None) => Some(OnFailure::Replay),
                (None, None) => None,
            };
            tools.insert(
                tool,
                ToolPolicy {
                    root,
                    schema,
                    dedup: spec.dedup,
                    ttl: spec.ttl_seconds.map(Duration::from_secs),
                    delivery: spec
                        .delivery
                        .unwrap_or(Delivery::default_for(spec.destructive)),
                    undeclared: spec.undeclared,
                    on_failure,
                    fingerprint: String::new(),
                },
            );
        }
        // A policy written under an OpenAPI `operationId` reaches the operation as Bedrock calls
        // it (`POST /refunds`), unless that name has an entry of its own.
        for container in &file.tool_definitions {
            for (id, bedrock_name) in operation_ids(container) {
                if tools.contains_key(&bedrock_name) {
                    continue;
                }
                if let Some(policy) = tools.get(&id).cloned() {
                    let spec = inputs.get(&id).cloned().unwrap_or_default();
                    inputs.insert(bedrock_name.clone(), spec);
                    tools.insert(bedrock_name, policy);
                }
            }
        }
        for (i, container) in file.tool_definitions.iter().enumerate() {
            for definition in tool_definitions(container, &format!("tool_definitions[{i}]")) {
                // One bad definition fails the whole file: a tool keyed without its schema would
                // merge what the schema keeps apart, and nobody would notice.
                let (name, schema) =
                    definition.map_err(|(tool, source)| PolicyError::Schema { tool, source })?;
                let policy = tools.entry(name.clone()).or_default();
                if policy.schema.is_none() {
                    policy.schema = Some(schema);
                    inputs.entry(name).or_default().push(container.to_string());
                }
            }
        }
        for (name, policy) in &mut tools {
            policy.fingerprint = fingerprint(inputs.get(name).map_or(&[][..], Vec::as_slice));
        }
        Ok(Self { tools })
    }

    /// Every tool's policy, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolPolicy)> {
        self.tools
            .iter()
            .map(|(name, policy)| (name.as_str(), policy))
    }

    /// The policy for `tool`, if any.
    pub fn get(&self, tool: &str) -> Option<&ToolPolicy> {
        self.tools.get(tool)
    }

    /// Sets `tool`'s policy, replacing any it had.
    pub fn insert(&mut self, tool: impl Into<String>, policy: ToolPolicy) {
        self.tools.insert(tool.into(), policy);
    }

    /// Whether no tool has a policy.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// SHA-256 of the texts a tool's policy was made from, 12 hex digits.
fn fingerprint(texts: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for text in texts {
        hasher.update((text.len() as u64).to_be_bytes());
        hasher.update(text.as_bytes());
    }
    hex::encode(&hasher.finalize()[..6])
}

impl ToolPolicy {
    /// A policy that only carries a schema.
    pub fn with_schema(schema: Schema) -> Self {
        Self {
            root: PolicyNode::default(),
            schema: Some(schema),
            dedup: DedupSwitch::On,
            ttl: None,
            delivery: Delivery::AtLeastOnce,
            undeclared: Undeclared::Key,
            on_failure: None,
            fingerprint: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: `failures` and `failure_ttl_seconds` read as one rule, refuse what means
    /// nothing, and leave the policy's fingerprint alone (they change no key).
    #[test]
    fn the_failure_rule_reads_as_written_and_changes_no_fingerprint() {
        let rule = |spec: &str| {
            PolicySet::parse(&format!(r#"{{"tools": {{"t": {spec}}}}}"#), false)
                .map(|set| set.get("t").unwrap().on_failure)
        };
        assert_eq!(rule("{}").unwrap(), None);
        assert_eq!(
            rule(r#"{"failures": "replay"}"#).unwrap(),
            Some(OnFailure::Replay)
        );
        assert_eq!(
            rule(r#"{"failures": "retry"}"#).unwrap(),
            Some(OnFailure::Retry)
        );
        assert_eq!(
            rule(r#"{"failure_ttl_seconds": 5}"#).unwrap(),
            Some(OnFailure::ReplayFor(Duration::from_secs(5)))
        );
        assert_eq!(
            rule(r#"{"failures": "replay", "failure_ttl_seconds": 5}"#).unwrap(),
            Some(OnFailure::ReplayFor(Duration::from_secs(5)))
        );
        assert!(matches!(
            rule(r#"{"failures": "retry", "failure_ttl_seconds": 5}"#),
            Err(PolicyError::RetriedFailureTtl { .. })
        ));
        assert!(matches!(
            rule(r#"{"failure_ttl_seconds": 0}"#),
            Err(PolicyError::NoFailureTtl { .. })
        ));
        let fingerprint = |spec: &str| {
            let set = PolicySet::parse(&format!(r#"{{"tools": {{"t": {spec}}}}}"#), false).unwrap();
            set.get("t").unwrap().fingerprint.clone()
        };
        assert_eq!(fingerprint("{}"), fingerprint(r#"{"failures": "retry"}"#));
        assert_eq!(
            fingerprint("{}"),
            fingerprint(r#"{"failure_ttl_seconds": 9}"#)
        );
        assert_ne!(fingerprint("{}"), fingerprint(r#"{"key_fields": ["a"]}"#));
    }

    #[test]
    fn tool_definitions_give_schemas_unless_tools_has_one() {
        let json = r#"{
            "tools": {"refund": {"fields": {"memo": "ignore"}},
                      "charge_card": {"schema": {"type": "object", "properties": {"amount": {"type": "number"}}}}},
            "tool_definitions": [
                {"name": "refund", "description": "d", "inputSchema": {"type": "object",
                 "properties": {"amount": {"type": "integer"}}}},
                {"name": "charge_card", "inputSchema": {"type": "object", "properties": {}}},
                {"name": "create_ticket", "inputSchema": {"type": "object", "properties": {"priority": {"type": "integer"}}}}
            ]}"#;
        let set = PolicySet::parse(json, false).unwrap();
        let refund = set.get("refund").unwrap();
        assert!(refund.schema.is_some() && refund.root.child("memo").is_some());
        let charge = set.get("charge_card").unwrap().schema.as_ref().unwrap();
        assert!(
            format!("{charge:?}").contains("amount"),
            "the tools entry's own schema wins"
        );
        assert!(set.get("create_ticket").unwrap().schema.is_some());
        let nameless = r#"{"tool_definitions": [{"inputSchema": {"type": "object"}}]}"#;
        let error = PolicySet::parse(nameless, false).unwrap_err().to_string();
        assert!(
            error.contains("tool_definitions[0]") && error.contains("names no tool"),
            "{error}"
        );
        let bad = r#"{"tool_definitions": [{"name": "ok", "inputSchema": {}},
            {"name": "lookup", "inputSchema": {"properties": {"q": {"type": "text"}}}}]}"#;
        let error = PolicySet::parse(bad, false).unwrap_err().to_string();
        assert!(
            error.contains("\"lookup\"") && error.contains("/inputSchema/properties/q/type"),
            "the error names the tool and the place: {error}"
        );
    }

    #[test]
    fn toml_and_json_agree() {
        let toml = r#"
            [tools.charge_card]
            key_fields = ["customer_id", "shipping.zip"]
            fields = { memo = "ignore", "shipping.zip" = "exact" }
        "#;
        let json = r#"{"tools": {"charge_card": {"key_fields": ["customer_id", "shipping.zip"],
                       "fields": {"memo": "ignore", "shipping.zip": "exact"}}}}"#;
        for set in [
            PolicySet::parse(toml, true).unwrap(),
            PolicySet::parse(json, false).unwrap(),
        ] {
            let root = &set.get("charge_card").unwrap().root;
            assert!(root.restricted);
            assert!(root.admits(root.child("customer_id")));
            assert!(!root.admits(root.child("memo")));
            assert_eq!(root.child("memo").unwrap().mode, Some(FieldMode::Ignore));
            let shipping = root.child("shipping").unwrap();
            assert!(shipping.restricted && root.admits(Some(shipping)));
            assert_eq!(shipping.child("zip").unwrap().mode, Some(FieldMode::Exact));
            assert!(!shipping.admits(shipping.child("street")));
        }
    }

    #[test]
    fn rejects_unknown_modes_and_empty_paths() {
        assert!(
            PolicySet::parse(r#"{"tools": {"t": {"fields": {"a": "fuzzy"}}}}"#, false).is_err()
        );
        assert!(PolicySet::parse(r#"{"tools": {"t": {"key_fields": ["a..b"]}}}"#, false).is_err());
        assert!(PolicySet::parse(r#"{"tools": {"t": {"typo": 1}}}"#, false).is_err());
        assert!(PolicySet::parse(r#"{"tools": {"t": {"dedup": "sometimes"}}}"#, false).is_err());
    }

    #[test]
    fn dedup_can_be_switched_off_per_tool() {
        let set = PolicySet::parse("[tools.toggle]\ndedup = \"off\"\n", true).unwrap();
        assert_eq!(set.get("toggle").unwrap().dedup, DedupSwitch::Off);
        let set = PolicySet::parse(r#"{"tools": {"charge": {}}}"#, false).unwrap();
        assert_eq!(set.get("charge").unwrap().dedup, DedupSwitch::On);
    }

    /// `key_fields` naming a nested member keys by that member alone: its parents keep only it,
    /// and the member itself is keyed whole (an object under it with all its members).
    #[test]
    fn a_nested_key_field_keys_that_member_whole_and_nothing_beside_it() {
        let set = PolicySet::parse(
            r#"{"tools": {"ship": {"key_fields": ["/order/id"]}}}"#,
            false,
        )
        .unwrap();
        let keyer = crate::key::Keyer::new().with_policies(set);
        let key = |args: &str| {
            let call = crate::key::Call {
                tool: "ship",
                args,
                ..crate::key::Call::default()
            };
            keyer
                .explain(crate::key::Strategy::Typed, &call)
                .unwrap()
                .canonical
        };
        assert_eq!(
            key(r#"{"order": {"id": 1, "note": "a"}, "x": 1}"#),
            key(r#"{"order": {"id": 1, "note": "b"}, "x": 2}"#),
            "nothing beside the keyed member counts"
        );
        assert_ne!(
            key(r#"{"order": {"id": 1}}"#),
            key(r#"{"order": {"id": 2}}"#)
        );
        assert_ne!(
            key(r#"{"order": {"id": {"site": 1, "n": 2}}}"#),
            key(r#"{"order": {"id": {"site": 1, "n": 3}}}"#),
            "the keyed member is keyed whole"
        );
    }

    #[test]
    fn a_schema_only_policy_carries_its_schema_and_the_defaults() {
        let policy = ToolPolicy::with_schema(Schema::default());
        assert!(policy.schema.is_some());
        assert_eq!(policy.dedup, DedupSwitch::On);
        assert_eq!(policy.delivery, Delivery::AtLeastOnce);
    }
}
