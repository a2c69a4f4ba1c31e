//! The corpus as Bedrock Agents events: every retry pair (96) and every deliberate repeat (12), one
//! function-details event per side, plus the key policy that gives the executor the tools' schemas.
//!
//! Written under `events/corpus/` by `dedup corpus` and rebuilt byte for byte (`--check`):
//!
//! | file | what |
//! | --- | --- |
//! | `retry/<base>-<class>-a.json`, `-b.json` | retry pair: the original call and its mutated retry |
//! | `deliberate_repeat/<base>-a.json`, `-b.json` | the same call, issued again three steps later |
//! | `policy.json` | `DEDUP_POLICY_FILE` for these events: each tool's JSON Schema |
//!
//! Mapping a corpus side to an event:
//! - `sessionId` is the side's `run_id`; `inputText` is the run's user turn (one per run, so every step
//!   of a run shares it, as in one agent turn); `actionGroup` is `corpus`; `function` the tool.
//! - Retries carry no step attribute: a retry is the same turn, so the default turn scope keys both
//!   sides alike. Deliberate repeats need one: they repeat a call within the same turn, so only
//!   `sessionAttributes.dedup_step` (the side's `step`) tells them apart.
//! - Each top-level argument becomes one parameter, in the side's member order. Its declared type comes
//!   from the tool's schema (the non-null member of a type list): `string`, `integer`, `number`,
//!   `boolean` and `array` as they are; `object` has no Bedrock type, so it is declared `string` and
//!   its value is the object's JSON text. `array` values are JSON text too. Nested JSON text keeps the
//!   side's serializer (`default` for the original, the pair's `serializer` for the retry). A `null`
//!   argument is left out, as Bedrock never sends one. Scalars are their text: a string as is, a
//!   number as written (`4200.0`, or `4200` for a number the mutation turned into a string), a
//!   boolean as `true`/`false`.
//! - A declared `string` is no schema to the key core (issue 12): its JSON object text is read as
//!   JSON and the schema-free rules apply, so every retry here meets its original with no policy
//!   file. `policy.json` overlays the tool's schema (`type: object`, property types, `x-dedup`
//!   modes) for a user who wants it strict: `DEDUP_POLICY_FILE=events/corpus/policy.json`.
//!
//! [`pair_events`] builds the same events for any pair, in either flavour, with types a developer
//! declares from the values ([`DeclaredTypes`]) rather than from a schema: the product path with no
//! policy file, which `tests/it/bedrock_declared.rs` and the score's Bedrock row replay.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::pyjson::{PyJson, Style};
use super::{Pair, spec};

/// Where `dedup corpus` writes the events by default.
pub const DEFAULT_DIR: &str = "events/corpus";

/// The key policy file among the events (not an event).
pub(crate) const POLICY_FILE: &str = "policy.json";

/// The action group every corpus event is addressed to.
pub const ACTION_GROUP: &str = "corpus";

/// One user turn per agent run: what the user asked for that made the agent call the run's tools.
const TURNS: [(&str, &str); 8] = [
    (
        "run-7f3a91c2",
        "Renew Dana's annual Pro plan on her saved card, then email Priya her August invoice.",
    ),
    (
        "run-0b8e2d54",
        "Authorize €1,299 on customer cus_b71e09's card for the oak standing desk, billed to 12 Rue de la Paix, Paris.",
    ),
    (
        "run-c41d7e06",
        "Open a ticket about the printer on floor 3 that keeps jamming, and book room 4b for the checkout design review on 11 August at 09:00 UTC.",
    ),
    (
        "run-5e92a0f7",
        "The customer's refund for order ord-88412 never arrived: open a payments ticket, and refund the $19.99 charge they cancelled.",
    ),
    (
        "run-a3f60b19",
        "Tell on-call about Saturday's database maintenance window, and start a GPU training VM for the fraud model retrain.",
    ),
    (
        "run-19d4b8e3",
        "Book José Álvarez a physiotherapy follow-up on 2 September at 14:15 UTC with a reminder an hour before.",
    ),
    (
        "run-e06c3a71",
        "Refund £64.50 on charge ch_9q1w7z: the tea and the mug never arrived.",
    ),
    (
        "run-2b7f1c88",
        "Start a spot CI runner in us-east-1 with ports 22 and 443 open until tomorrow morning.",
    ),
];

/// The user turn of a run: the spec's text for its runs; for a run of another corpus (`dedup audit
/// --export-corpus`), one text per run id, so that its calls share a turn all the same.
fn turn(run_id: &str) -> String {
    TURNS.iter().find(|(id, _)| *id == run_id).map_or_else(
        || format!("The user's turn of agent run {run_id}."),
        |(_, text)| text.to_string(),
    )
}

/// The Bedrock type a schema property is declared with.
fn declared_type(schema: &PyJson, tool: &str, name: &str) -> &'static str {
    let property = schema
        .get("properties")
        .and_then(|p| p.get(name))
        .unwrap_or_else(|| panic!("{tool}: argument {name} is not in the schema"));
    let types: Vec<&str> = match property.get("type") {
        Some(PyJson::Str(t)) => vec![t.as_str()],
        Some(PyJson::Arr(ts)) => ts
            .iter()
            .filter_map(|t| match t {
                PyJson::Str(t) if t != "null" => Some(t.as_str()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    match types.as_slice() {
        ["string"] | ["object"] => "string",
        ["integer"] => "integer",
        ["number"] => "number",
        ["boolean"] => "boolean",
        ["array"] => "array",
        other => panic!("{tool}.{name}: no Bedrock type for schema type {other:?}"),
    }
}

/// A parameter value as Bedrock sends it: always a string.
fn value_text(value: &PyJson, style: Style) -> String {
    match value {
        PyJson::Str(s) => s.clone(),
        PyJson::Num(n) => n.clone(),
        PyJson::Bool(b) => b.to_string(),
        PyJson::Arr(_) | PyJson::Obj(_) => value.dumps(style, true),
        PyJson::Null => unreachable!("null arguments are left out"),
    }
}

fn agent() -> PyJson {
    PyJson::Obj(vec![
        ("name".into(), PyJson::str("toolcall-dedup-corpus-agent")),
        ("id".into(), PyJson::str("C0RPVS7AGT")),
        ("alias".into(), PyJson::str("TSTALIASID")),
        ("version".into(), PyJson::str("DRAFT")),
    ])
}

/// How a call reaches the executor: Bedrock's two action-group flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// `function` + `parameters`.
    FunctionDetails,
    /// `POST /<tool>`: arguments named `*_id` in `parameters` (query parameters), the rest in
    /// `requestBody.content["application/json"].properties`.
    OpenApi,
}

impl Flavour {
    pub const ALL: [Flavour; 2] = [Flavour::FunctionDetails, Flavour::OpenApi];

    pub fn name(self) -> &'static str {
        match self {
            Flavour::FunctionDetails => "function details",
            Flavour::OpenApi => "OpenAPI",
        }
    }
}

/// One side of a pair as an event; `declared` gives each argument's Bedrock type.
fn event(
    pair: &Pair,
    side: &super::Side,
    style: Style,
    with_step: bool,
    flavour: Flavour,
    declared: impl Fn(&str) -> &'static str,
) -> String {
    let args = PyJson::parse(&side.args);
    let PyJson::Obj(members) = &args else {
        panic!("{}: arguments are not an object", pair.id)
    };
    let (mut parameters, mut properties) = (Vec::new(), Vec::new());
    for (name, value) in members.iter().filter(|(_, v)| *v != PyJson::Null) {
        let parameter = PyJson::Obj(vec![
            ("name".into(), PyJson::Str(name.clone())),
            ("type".into(), PyJson::str(declared(name))),
            ("value".into(), PyJson::Str(value_text(value, style))),
        ]);
        match flavour {
            Flavour::OpenApi if !name.ends_with("_id") => properties.push(parameter),
            _ => parameters.push(parameter),
        }
    }
    let session_attributes = match with_step {
        true => vec![("dedup_step".into(), PyJson::Str(side.step.to_string()))],
        false => Vec::new(),
    };
    let mut event = vec![
        ("messageVersion".into(), PyJson::str("1.0")),
        ("agent".into(), agent()),
        ("inputText".into(), PyJson::Str(turn(&side.run_id))),
        ("sessionId".into(), PyJson::Str(side.run_id.clone())),
        ("actionGroup".into(), PyJson::str(ACTION_GROUP)),
    ];
    match flavour {
        Flavour::FunctionDetails => {
            event.push(("function".into(), PyJson::Str(pair.tool.clone())));
            event.push(("parameters".into(), PyJson::Arr(parameters)));
        }
        Flavour::OpenApi => {
            event.push(("apiPath".into(), PyJson::Str(format!("/{}", pair.tool))));
            event.push(("httpMethod".into(), PyJson::str("POST")));
            event.push(("parameters".into(), PyJson::Arr(parameters)));
            let content = PyJson::Obj(vec![("properties".into(), PyJson::Arr(properties))]);
            let body = PyJson::Obj(vec![(
                "content".into(),
                PyJson::Obj(vec![("application/json".into(), content)]),
            )]);
            event.push(("requestBody".into(), body));
        }
    }
    event.push(("sessionAttributes".into(), PyJson::Obj(session_attributes)));
    event.push(("promptSessionAttributes".into(), PyJson::Obj(Vec::new())));
    let mut text = PyJson::Obj(event).dumps(Style::Indent, false);
    text.push('\n');
    text
}

/// How a pair's sides are sent: the retry side's serializer for nested JSON text, and whether both
/// carry their step (only a deliberate repeat needs it; everything else sits at one step of one turn).
fn sending(pair: &Pair) -> (Style, bool) {
    match (pair.section.as_str(), pair.class.as_str()) {
        // A corpus exported from logs names no serializer: its sides are sent as written.
        ("retries", _) => (
            pair.serializer
                .as_deref()
                .and_then(Style::from_name)
                .unwrap_or(Style::Default),
            false,
        ),
        ("distinct", "deliberate_repeat") => (Style::Default, true),
        _ => (Style::Default, false),
    }
}

/// The Bedrock type a developer declares for a parameter that receives `value`.
fn value_type(value: &PyJson) -> &'static str {
    match value {
        PyJson::Num(text) if text.contains(['.', 'e', 'E']) => "number",
        PyJson::Num(_) => "integer",
        PyJson::Bool(_) => "boolean",
        PyJson::Arr(_) => "array",
        // Bedrock has no object type: an object travels as JSON text in a string.
        PyJson::Str(_) | PyJson::Obj(_) | PyJson::Null => "string",
    }
}

/// Bedrock parameter types for every tool's top-level arguments, derived from the values the tool
/// receives, as a developer who writes no JSON Schema declares them in the action group: a number
/// with a fraction or exponent anywhere makes the parameter `number`, integers only make it
/// `integer`; objects are `string`, and so is an argument whose values disagree otherwise (one
/// declaration must fit them all). Read from the original side of every pair (the retry side
/// drifts: `"4200"` for `4200`), and from the other side for an argument only it has. Sides whose
/// arguments are not a JSON object are skipped.
#[derive(Debug, Clone, Default)]
pub struct DeclaredTypes {
    types: BTreeMap<(String, String), &'static str>,
}

impl DeclaredTypes {
    pub fn from_values<'a>(pairs: impl IntoIterator<Item = &'a Pair> + Clone) -> DeclaredTypes {
        let mut declared = DeclaredTypes::default();
        for original in [true, false] {
            for pair in pairs.clone() {
                let side = if original { &pair.a } else { &pair.b };
                let Some(PyJson::Obj(members)) = PyJson::try_parse(&side.args) else {
                    continue;
                };
                for (name, value) in members.iter().filter(|(_, v)| *v != PyJson::Null) {
                    let key = (pair.tool.clone(), name.clone());
                    let found = value_type(value);
                    match declared.types.get(&key).copied() {
                        None => {
                            declared.types.insert(key, found);
                        }
                        Some(_) if !original => {}
                        Some(known) if known == found => {}
                        Some("integer" | "number") if matches!(found, "integer" | "number") => {
                            declared.types.insert(key, "number");
                        }
                        Some(_) => {
                            declared.types.insert(key, "string");
                        }
                    }
                }
            }
        }
        declared
    }

    /// The declared type of `tool`'s argument `name` (`string` for one never seen).
    pub(crate) fn get(&self, tool: &str, name: &str) -> &'static str {
        self.types
            .get(&(tool.to_string(), name.to_string()))
            .copied()
            .unwrap_or("string")
    }
}

/// Both sides of `pair` as the events Bedrock sends for a tool declared per `declared`: what the
/// executor sees with no policy file. Retries keep the pair's serializer for nested JSON text;
/// deliberate repeats carry their steps (`dedup_step`); every other pair sits in one turn.
///
/// # Panics
/// When a side's arguments are not a JSON object (no event can carry them).
pub fn pair_events(pair: &Pair, flavour: Flavour, declared: &DeclaredTypes) -> [String; 2] {
    let (b_style, with_step) = sending(pair);
    let declared = |name: &str| declared.get(&pair.tool, name);
    [
        event(pair, &pair.a, Style::Default, with_step, flavour, declared),
        event(pair, &pair.b, b_style, with_step, flavour, declared),
    ]
}

/// The policy file: every corpus tool's schema, in corpus order.
fn policy() -> String {
    let tools = spec::TOOLS
        .iter()
        .map(|&tool| {
            let schema = PyJson::parse(spec::schema_text(tool));
            (
                tool.to_string(),
                PyJson::Obj(vec![("schema".into(), schema)]),
            )
        })
        .collect();
    let mut text =
        PyJson::Obj(vec![("tools".into(), PyJson::Obj(tools))]).dumps(Style::Indent, false);
    text.push('\n');
    text
}

/// Every event file as `(path relative to the events directory, contents)`. Deterministic.
pub fn generate() -> Vec<(String, String)> {
    let mut files = vec![(POLICY_FILE.to_string(), policy())];
    let schemas: Vec<(&str, PyJson)> = spec::TOOLS
        .iter()
        .map(|&tool| (tool, PyJson::parse(spec::schema_text(tool))))
        .collect();
    let schema_of = |tool: &str| {
        &schemas
            .iter()
            .find(|(t, _)| *t == tool)
            .unwrap_or_else(|| panic!("no schema for {tool}"))
            .1
    };
    for (file, text) in super::generate() {
        if file != "retries.jsonl" && file != "distinct.jsonl" {
            continue;
        }
        for line in text.lines() {
            let pair: Pair = serde_json::from_str(line).expect("the generator's own pair line");
            let stem = match (pair.section.as_str(), pair.class.as_str()) {
                ("retries", class) => format!("retry/{}-{class}", pair.base),
                ("distinct", "deliberate_repeat") => format!("deliberate_repeat/{}", pair.base),
                _ => continue,
            };
            let (b_style, with_step) = sending(&pair);
            let schema = schema_of(&pair.tool);
            let declared = |name: &str| declared_type(schema, &pair.tool, name);
            let fd = Flavour::FunctionDetails;
            files.push((
                format!("{stem}-a.json"),
                event(&pair, &pair.a, Style::Default, with_step, fd, declared),
            ));
            files.push((
                format!("{stem}-b.json"),
                event(&pair, &pair.b, b_style, with_step, fd, declared),
            ));
        }
    }
    files
}

/// Every `.json` file under `dir`, relative to it, with `/` separators.
fn json_files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "json")
                && let Ok(relative) = path.strip_prefix(root)
            {
                let parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Writes every event file under `dir` and removes `.json` files there that the generator no longer
/// makes (the directory is generated as a whole).
pub fn write(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let files = generate();
    for old in json_files(dir) {
        if !files.iter().any(|(relative, _)| *relative == old) {
            std::fs::remove_file(dir.join(&old))?;
        }
    }
    let mut written = Vec::with_capacity(files.len());
    for (relative, contents) in files {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
        written.push(path);
    }
    Ok(written)
}

/// The files under `dir` that are missing, differ from the generator, or are not generated at all
/// (`<path> (not generated)`).
pub fn stale(dir: &Path) -> Vec<String> {
    let files = generate();
    let mut stale: Vec<String> = files
        .iter()
        .filter(|(relative, contents)| {
            std::fs::read(dir.join(relative)).ok().as_deref() != Some(contents.as_bytes())
        })
        .map(|(relative, _)| relative.clone())
        .collect();
    stale.extend(
        json_files(dir)
            .into_iter()
            .filter(|f| !files.iter().any(|(relative, _)| relative == f))
            .map(|f| format!("{f} (not generated)")),
    );
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_retry_and_deliberate_repeat_becomes_two_events() {
        let files = generate();
        assert_eq!(files.len(), 1 + 2 * (96 + 12));
        assert_eq!(
            files
                .iter()
                .filter(|(f, _)| f.starts_with("retry/"))
                .count(),
            192
        );
        let (_, a) = files
            .iter()
            .find(|(f, _)| f == "deliberate_repeat/charge_card.1-a.json")
            .unwrap();
        let (_, b) = files
            .iter()
            .find(|(f, _)| f == "deliberate_repeat/charge_card.1-b.json")
            .unwrap();
        let a: serde_json::Value = serde_json::from_str(a).unwrap();
        let b: serde_json::Value = serde_json::from_str(b).unwrap();
        assert_eq!(a["sessionAttributes"]["dedup_step"], "4");
        assert_eq!(b["sessionAttributes"]["dedup_step"], "7");
        assert_eq!(a["parameters"], b["parameters"]);
        // Objects are declared string and hold JSON text; nulls are left out.
        let metadata = &a["parameters"].as_array().unwrap()[6];
        assert_eq!(
            (metadata["name"].as_str(), metadata["type"].as_str()),
            (Some("metadata"), Some("string"))
        );
        assert_eq!(
            metadata["value"],
            r#"{"order_id": "ord-10023", "channel": "web"}"#
        );
        assert!(
            a["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["value"].is_string())
        );
    }

    #[test]
    fn retries_carry_no_step_and_keep_the_retry_serializer() {
        let files = generate();
        let event = |name: &str| -> serde_json::Value {
            serde_json::from_str(&files.iter().find(|(f, _)| f == name).unwrap().1).unwrap()
        };
        // refund.2 / key_order: pair 8*9+0 = 72 rotates to the default serializer; line_items is an
        // array of objects with reversed members.
        let b = event("retry/refund.2-key_order-b.json");
        assert_eq!(b["sessionAttributes"], serde_json::json!({}));
        let params = b["parameters"].as_array().unwrap();
        assert_eq!(params[0]["name"], "notify_customer");
        let items = params.iter().find(|p| p["name"] == "line_items").unwrap();
        assert_eq!(items["type"], "array");
        assert!(
            items["value"]
                .as_str()
                .unwrap()
                .starts_with(r#"[{"amount": 12.25, "quantity": 2, "sku": "sku-tea-250g"}"#),
            "{items}"
        );
    }

    #[test]
    fn the_policy_file_loads() {
        let policy = toolcall_dedup::key::PolicySet::parse(&policy(), false).unwrap();
        for tool in spec::TOOLS {
            assert!(policy.get(tool).and_then(|p| p.schema.as_ref()).is_some());
        }
    }
}
