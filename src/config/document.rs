//! The config document: routes, settings and key policies in one YAML or JSON text, read at start
//! from a file, an SSM parameter or an S3 object ([`super::source`]) and again on a schedule.
//!
//! ```yaml
//! routes:                       # as DEDUP_ROUTES
//!   payments/charge_card: charge-fn
//!   "*": {function: default-fn, timeout_seconds: 30}
//! settings:                     # any behaviour setting, by its variable's name without DEDUP_
//!   mode: shadow
//!   wait_ms: 5000
//! tools:                        # as the policy file: per-tool key_fields, fields, delivery, ttl
//!   charge_card: {delivery: at_most_once}
//! tool_definitions:             # schemas: OpenAPI (YAML or JSON, $refs into components),
//!   - openapi: 3.0.0            # Bedrock action groups (apiSchema.payload as YAML or JSON),
//!     paths: {...}              # function details, MCP listings, provider tool definitions
//! ```
//!
//! A setting the environment also gives is the environment's (the stack's wiring wins). Errors
//! name the path in the document where they are.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::dispatch::Routes;
use crate::key::{PolicyError, PolicySet};

/// The settings a document may give, by their name in it; each is read as `DEDUP_<NAME>`. What a
/// stack wires (the store, its table, the doors, endpoints) stays in the environment.
pub const DOCUMENT_SETTINGS: [&str; 28] = [
    "mode",
    "keyer",
    "scope",
    "step_attribute",
    "run_argument",
    "sessionless",
    "wait_ms",
    "claim_budget_ms",
    "store_breaker_ms",
    "release_on_errors",
    "release_on_rpc_errors",
    "target_key_header",
    "envelope_namespaces",
    "envelope_caller_key_scope",
    "idempotency_key_name",
    "local_cache_items",
    "look_up_timeouts",
    "replay_marker",
    "log_calls",
    "metrics_namespace",
    "metrics_max_tools",
    "trusted_annotations",
    "catalog_ttl_seconds",
    "interceptor_timeout_seconds",
    "ttl_seconds",
    "cache_failures",
    "offload_threshold_bytes",
    "gateway_id",
];

const MEMBERS: [&str; 5] = ["version", "routes", "settings", "tools", "tool_definitions"];

/// A parsed config document.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// `routes`, when the document has them.
    pub routes: Option<Routes>,
    /// `settings`, as the variables they stand for (`DEDUP_MODE` → `shadow`).
    pub settings: BTreeMap<String, String>,
    /// `tools` and `tool_definitions`, as a policy file gives them.
    pub policies: PolicySet,
    /// Where each tool's schema came from (`tools.charge_card.schema`, `tool_definitions[0]`).
    pub schema_sources: BTreeMap<String, String>,
    /// The action group a tool's definition came in (a definition with `actionGroupName`), so
    /// that its routes can be told from other groups'.
    pub action_groups: BTreeMap<String, String>,
    /// What the document gets wrong without it being refused, with its path (logged at load;
    /// `dedup config check` prints them).
    pub warnings: Vec<DocumentError>,
}

/// Why a document was refused, and where in it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DocumentError {
    /// Where in the document (`routes`, `settings.wait_ms`, `tool_definitions[1]`), or `document`
    /// for the text as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn at(path: impl Into<String>, message: impl Into<String>) -> DocumentError {
    DocumentError {
        path: path.into(),
        message: message.into(),
    }
}

/// The document's text (YAML, of which JSON is a subset) as a JSON value; a mapping at the top.
pub fn read_text(text: &str) -> Result<Value, DocumentError> {
    let value: Value = serde_yaml_ng::from_str(text)
        .map_err(|e| at("document", format!("not YAML or JSON: {e}")))?;
    if !value.is_object() {
        return Err(at(
            "document",
            "must be a mapping (routes, settings, tools, tool_definitions)",
        ));
    }
    Ok(value)
}

/// Parses a document.
pub fn parse(text: &str) -> Result<Document, DocumentError> {
    from_value(read_text(text)?)
}

/// A document from its value, once any schema kept in S3 has been read into it
/// ([`super::source`]).
pub fn from_value(mut value: Value) -> Result<Document, DocumentError> {
    let top = value
        .as_object_mut()
        .expect("read_text checks for a mapping");
    if let Some(unknown) = top.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(at(
            unknown.clone(),
            format!("unknown member; a document has {}", MEMBERS.join(", ")),
        ));
    }
    if let Some(version) = top.get("version").filter(|v| v.as_u64() != Some(1)) {
        return Err(at(
            "version",
            format!("{version} is not a version this reads (1)"),
        ));
    }
    let routes = match top.get("routes") {
        None | Some(Value::Null) => None,
        Some(routes @ Value::Object(_)) => {
            Some(Routes::parse(&routes.to_string()).map_err(|e| at("routes", e))?)
        }
        Some(_) => return Err(at("routes", "must be a mapping of route → function")),
    };
    let settings = settings(top.get("settings"))?;
    if let Some(definitions) = top.get_mut("tool_definitions") {
        read_payloads(definitions, "tool_definitions")?;
    }
    let mut policy = Map::new();
    for member in ["tools", "tool_definitions"] {
        if let Some(v) = top.get(member).filter(|v| !v.is_null()) {
            policy.insert(member.into(), v.clone());
        }
    }
    let schema_sources = schema_sources(&policy);
    let action_groups = action_groups(&policy);
    let policies =
        PolicySet::parse(&Value::Object(policy.clone()).to_string(), false).map_err(|e| {
            let path = match &e {
                PolicyError::Schema { tool, .. } if tool.starts_with("tool_definitions") => {
                    tool.clone()
                }
                PolicyError::Schema { tool, .. } => {
                    definition_of(&policy, tool).unwrap_or_else(|| format!("tools.{tool}"))
                }
                PolicyError::EmptyPath { tool } => format!("tools.{tool}"),
                _ => "tools".to_string(),
            };
            at(path, e.to_string())
        })?;
    let warnings = hazards(&policy, &policies, routes.as_ref(), &schema_sources)?;
    for warning in &warnings {
        tracing::warn!(%warning, "config document");
    }
    Ok(Document {
        routes,
        settings,
        policies,
        schema_sources,
        action_groups,
        warnings,
    })
}

/// What a policy entry can get wrong without failing to parse, refused (or, where the call is
/// still keyed safely, warned) with its path in the document:
/// - an entry that names no tool the document's routes or `tool_definitions` define (Bedrock calls
///   an OpenAPI operation `METHOD /path`: an `operationId` entry reaches it, see
///   [`crate::key::PolicySet`]; a Gateway tool is `target___tool`) is refused when the document
///   defines tools, since it would silently reach nothing;
/// - a `key_fields` path the tool's schema does not declare is refused: every call would key
///   alike on it, so calls that differ only elsewhere would answer each other;
/// - a `fields` path the schema does not declare is warned: the mode reaches nothing.
fn hazards(
    policy: &Map<String, Value>,
    policies: &PolicySet,
    routes: Option<&Routes>,
    schema_sources: &BTreeMap<String, String>,
) -> Result<Vec<DocumentError>, DocumentError> {
    let mut warnings = Vec::new();
    let Some(Value::Object(tools)) = policy.get("tools") else {
        return Ok(warnings);
    };
    let defines_tools = policy.get("tool_definitions").is_some_and(|d| !d.is_null());
    for (tool, spec) in tools {
        let routed = routes.is_some_and(|r| {
            r.candidates(tool)
                .iter()
                .any(|(pattern, _)| pattern.split_once('/').is_some_and(|(_, t)| t == tool))
        });
        let defined = schema_sources.contains_key(tool)
            || tool.contains(crate::doors::agentcore::TOOL_NAME_DELIMITER)
            || routed;
        if defines_tools && !defined {
            return Err(at(
                format!("tools.{tool}"),
                "names no tool the routes or tool_definitions define: Bedrock names an OpenAPI \
                 operation METHOD /path (or write its operationId), a function by its name, and the \
                 Gateway a tool target___tool",
            ));
        }
        let Some(schema) = policies.get(tool).and_then(|p| p.schema.as_ref()) else {
            continue;
        };
        let undeclared = |path: &str| {
            crate::key::field_path(path).is_some_and(|parts| !schema.declares_path(&parts))
        };
        if let Some(Value::Array(keyed)) = spec.get("key_fields") {
            for (i, path) in keyed.iter().enumerate() {
                if let Some(path) = path.as_str().filter(|p| undeclared(p)) {
                    return Err(at(
                        format!("tools.{tool}.key_fields[{i}]"),
                        format!(
                            "{path:?} is no member the tool's schema declares: calls would key \
                             alike on it, so calls that differ elsewhere would answer each other"
                        ),
                    ));
                }
            }
        }
        if let Some(Value::Object(fields)) = spec.get("fields") {
            for path in fields.keys().filter(|p| undeclared(p)) {
                warnings.push(at(
                    format!("tools.{tool}.fields.{path}"),
                    "no member the tool's schema declares: the mode reaches nothing",
                ));
            }
        }
    }
    Ok(warnings)
}

/// The action group each tool of a `tool_definitions` entry naming one belongs to.
fn action_groups(policy: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut groups = BTreeMap::new();
    let Some(Value::Array(containers)) = policy.get("tool_definitions") else {
        return groups;
    };
    for container in containers {
        let Some(group) = container.get("actionGroupName").and_then(Value::as_str) else {
            continue;
        };
        for (tool, _) in crate::key::tool_definitions(container, "")
            .into_iter()
            .flatten()
        {
            groups.entry(tool).or_insert_with(|| group.to_string());
        }
    }
    groups
}

fn settings(value: Option<&Value>) -> Result<BTreeMap<String, String>, DocumentError> {
    let map = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(at("settings", "must be a mapping of setting → value")),
    };
    let mut out = BTreeMap::new();
    for (name, value) in map {
        let path = format!("settings.{name}");
        if !DOCUMENT_SETTINGS.contains(&name.as_str()) {
            return Err(at(
                path,
                format!(
                    "not a setting a document gives (one of: {})",
                    DOCUMENT_SETTINGS.join(", ")
                ),
            ));
        }
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(items) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
            _ => {
                return Err(at(
                    path,
                    "must be a string, a number, a boolean or a list of strings",
                ));
            }
        };
        out.insert(format!("DEDUP_{}", name.to_ascii_uppercase()), text);
    }
    Ok(out)
}

/// Bedrock keeps an action group's OpenAPI schema as text (`apiSchema.payload`), in JSON or YAML:
/// read it into the value the key core compiles.
fn read_payloads(value: &mut Value, path: &str) -> Result<(), DocumentError> {
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                read_payloads(item, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(map) => {
            if let Some(payload) = map.get_mut("apiSchema").and_then(|s| s.get_mut("payload"))
                && let Value::String(text) = payload
            {
                *payload = serde_yaml_ng::from_str::<Value>(text).map_err(|e| {
                    at(
                        format!("{path}.apiSchema.payload"),
                        format!("not YAML or JSON: {e}"),
                    )
                })?;
            }
            for list in ["actionGroups", "actionGroupSummaries"] {
                if let Some(items) = map.get_mut(list) {
                    read_payloads(items, &format!("{path}.{list}"))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The `tool_definitions` entry whose definitions name `tool` (its schema failed there), unless
/// the tool's own `schema` is the one.
fn definition_of(policy: &Map<String, Value>, tool: &str) -> Option<String> {
    let own = policy
        .get("tools")
        .and_then(|t| t.get(tool))
        .and_then(|t| t.get("schema"));
    if own.is_some() {
        return None;
    }
    let Some(Value::Array(containers)) = policy.get("tool_definitions") else {
        return None;
    };
    containers.iter().enumerate().find_map(|(i, container)| {
        let label = format!("tool_definitions[{i}]");
        crate::key::tool_definitions(container, &label)
            .into_iter()
            .any(|d| match d {
                Ok((name, _)) | Err((name, _)) => name == tool,
            })
            .then_some(label)
    })
}

/// Where each tool's schema comes from: its own `schema`, else the first definition naming it.
fn schema_sources(policy: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut sources = BTreeMap::new();
    if let Some(Value::Array(containers)) = policy.get("tool_definitions") {
        for (i, container) in containers.iter().enumerate() {
            for definition in
                crate::key::tool_definitions(container, &format!("tool_definitions[{i}]"))
                    .into_iter()
                    .flatten()
            {
                sources
                    .entry(definition.0)
                    .or_insert_with(|| format!("tool_definitions[{i}]"));
            }
        }
    }
    if let Some(Value::Object(tools)) = policy.get("tools") {
        for (tool, spec) in tools {
            if spec.get("schema").is_some() {
                sources.insert(tool.clone(), format!("tools.{tool}.schema"));
            }
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_path_in_the_document() {
        let cases = [
            ("routes: [1]", "routes"),
            ("routes: {'payments': x}", "routes"),
            ("settings: {wait_ms: [1, {a: 1}]}", "settings.wait_ms"),
            ("settings: {table_name: t}", "settings.table_name"),
            (
                "tools: {charge_card: {fields: {'': exact}}}",
                "tools.charge_card",
            ),
            (
                "tool_definitions: [{apiSchema: {payload: 'a: [b'}}]",
                "tool_definitions[0].apiSchema.payload",
            ),
            ("rout: {}", "rout"),
            ("version: 2", "version"),
            ("- a", "document"),
            ("a: [", "document"),
        ];
        for (text, path) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.path, path, "{text}: {e}");
        }
    }

    #[test]
    fn settings_become_their_variables() {
        let doc = parse("settings: {mode: shadow, wait_ms: 2500, look_up_timeouts: false, trusted_annotations: [a, b]}")
            .unwrap();
        assert_eq!(doc.settings["DEDUP_MODE"], "shadow");
        assert_eq!(doc.settings["DEDUP_WAIT_MS"], "2500");
        assert_eq!(doc.settings["DEDUP_LOOK_UP_TIMEOUTS"], "false");
        assert_eq!(doc.settings["DEDUP_TRUSTED_ANNOTATIONS"], "a,b");
    }
}
