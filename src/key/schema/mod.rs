//! The subset of JSON Schema that decides how a value is compared: `type` (with the dialects'
//! aliases), `nullable`, `enum`, `const`, `format`, `default`, `required`, `properties`,
//! `patternProperties`, `additionalProperties`, `items`/`prefixItems`, the combinators
//! `allOf`/`anyOf`/`oneOf`, local `$ref`s, and our own `x-dedup` field mode. Everything else
//! (lengths, patterns, descriptions, `not`, `if`/`then`) decides only whether a value is valid, not
//! what it means, and is ignored.
//!
//! Tool definitions arrive wrapped differently per provider; [`Schema::from_tool_definition`]
//! unwraps Anthropic (`input_schema`), OpenAI (`parameters`, also under `function`), MCP
//! (`inputSchema`), Bedrock Converse (`toolSpec.inputSchema.json`), Bedrock Agents function
//! definitions and OpenAPI operations; [`tool_definitions`] also opens the containers they come in
//! (an OpenAPI document, an action group, an AgentCore Gateway target, an MCP `tools/list` result).

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

mod compile;
mod definitions;
#[cfg(test)]
mod tests;

use compile::*;
pub(crate) use definitions::definition_name;
use definitions::*;
pub use definitions::{Definition, operation_ids, operation_names, tool_definitions};

/// How a field is compared, set per field by a policy file or by `"x-dedup"` in the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldMode {
    /// Left out of the key: free text the model rewords between attempts.
    Ignore,
    /// Compared byte for byte: no string rule applies.
    Exact,
    /// Compared byte for byte once the value's outer whitespace is trimmed.
    Trim,
    /// Compared without case, even where the schema says plain string.
    Casefold,
    /// An array compared as a multiset: its items sorted by their canonical text, duplicates
    /// kept (`[a, b, b]` is not `[a, b]`). For a list whose order the tool ignores.
    Unordered,
}

impl FieldMode {
    fn parse(s: &str) -> Result<Self, SchemaError> {
        match s {
            "ignore" => Ok(Self::Ignore),
            "exact" => Ok(Self::Exact),
            "trim" => Ok(Self::Trim),
            "casefold" => Ok(Self::Casefold),
            "unordered" => Ok(Self::Unordered),
            other => Err(SchemaError::invalid(format!(
                "unknown x-dedup mode {other:?} (ignore|exact|trim|casefold|unordered, or \
                 {{\"undeclared\": \"ignore\"}} on an object)"
            ))),
        }
    }
}

/// JSON types a schema admits. Empty means "unknown": schema-free heuristics apply.
///
/// Declared types are evidence of different strength. A JSON Schema's `type` is what the tool's author
/// says the value is, and every rule keyed to it applies. [`Types::TEXT`] is weaker: a transport that
/// carries every value as text (Bedrock Agents' parameter type `string`, its default for anything
/// textual, also for objects, which it has no type for) says nothing about the value, so the value is
/// compared as if there were no schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Types(u8);

impl Types {
    /// `string`.
    pub const STRING: Types = Types(1);
    /// `number` or `integer`.
    pub const NUMBER: Types = Types(2);
    /// `boolean`.
    pub const BOOLEAN: Types = Types(4);
    /// `array`.
    pub const ARRAY: Types = Types(8);
    /// `object`.
    pub const OBJECT: Types = Types(16);
    /// `null`.
    pub const NULL: Types = Types(32);
    /// Declared only as text by a transport (see above): unknown to every typed rule.
    pub const TEXT: Types = Types(64);

    /// Whether this set shares any type with `other`.
    pub fn contains(self, other: Types) -> bool {
        self.0 & other.0 != 0
    }
    /// No type a rule can act on: none at all, only `null`, or transport text.
    pub fn is_unknown(self) -> bool {
        self.0 & !(Self::NULL.0 | Self::TEXT.0) == 0
    }
    pub(crate) fn union(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }
    fn intersection(self, other: Types) -> Types {
        Types(self.0 & other.0)
    }
    /// A type name, with the aliases of the dialects tool schemas are written in: the Berkeley
    /// function-calling set's Python names (`dict`, `float`, `tuple`, `any`, ...).
    fn from_name(name: &str) -> Result<Types, SchemaError> {
        Ok(match name {
            "string" | "str" => Self::STRING,
            "number" | "integer" | "float" | "double" | "int" | "long" => Self::NUMBER,
            "boolean" | "bool" => Self::BOOLEAN,
            "array" | "tuple" | "list" => Self::ARRAY,
            "object" | "dict" => Self::OBJECT,
            "null" => Self::NULL,
            "any" => Types::default(),
            other => {
                return Err(SchemaError::invalid(format!(
                    "unknown JSON Schema type {other:?}"
                )));
            }
        })
    }
    /// The five parameter types of Bedrock Agents (events and function definitions alike).
    fn from_bedrock_name(name: &str) -> Result<Types, SchemaError> {
        match name {
            // Bedrock has no object type, so objects and free text alike are declared `string`.
            "string" => Ok(Self::TEXT),
            "number" | "integer" => Ok(Self::NUMBER),
            "boolean" => Ok(Self::BOOLEAN),
            "array" => Ok(Self::ARRAY),
            other => Err(SchemaError::invalid(format!(
                "unknown Bedrock parameter type {other:?} (string|number|integer|boolean|array)"
            ))),
        }
    }
}

/// String formats that change comparison.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// No format, or one that does not change comparison.
    #[default]
    None,
    /// RFC 3339 date-time: the timestamp rule.
    DateTime,
    /// Case-insensitive by definition (`email`, `idn-email`, `hostname`, `uuid`).
    CaseInsensitive,
}

/// Why a tool schema could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema is not JSON Schema the keyer can read.
    #[error("invalid tool schema{}: {message}", if at.is_empty() { String::new() } else { format!(" at {at}") })]
    Invalid {
        /// Where in the schema, as a JSON pointer (empty at the root).
        at: String,
        /// What is wrong there.
        message: String,
    },
}

impl SchemaError {
    pub(crate) fn invalid(message: impl Into<String>) -> SchemaError {
        SchemaError::Invalid {
            at: String::new(),
            message: message.into(),
        }
    }
    /// The same error, one level further down: `segment` is the pointer step from here to it.
    fn under(self, segment: &str) -> SchemaError {
        let SchemaError::Invalid { at, message } = self;
        SchemaError::Invalid {
            at: format!("{segment}{at}"),
            message,
        }
    }
}

/// A compiled schema node.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    pub(crate) types: Types,
    pub(crate) format: Format,
    pub(crate) enum_strings: Vec<String>,
    properties: Vec<(String, Schema)>,
    patterns: Vec<(Regex, Schema)>,
    additional: Option<Box<Schema>>,
    pub(crate) items: Option<Box<Schema>>,
    pub(crate) mode: Option<FieldMode>,
    /// The enclosing object's `required` names this property.
    pub(crate) required: bool,
    /// `default`, as compact JSON text (never `null`: see `default_null`).
    pub(crate) default: Option<Box<str>>,
    /// `default: null`: a `null` and a left-out member are one value, so both are left out (no
    /// default to fill in on every call).
    default_null: bool,
    /// Some property has a default: an object under this schema is keyed with them filled in.
    pub(crate) fills_defaults: bool,
    /// `"x-dedup": {"undeclared": "ignore"}`: members this object does not declare leave the key.
    pub(crate) ignores_undeclared: bool,
}

/// Bounds on compiling: refs followed in a row, and schema nodes in all (a chain of definitions that
/// each refer to the next twice would otherwise grow exponentially).
const MAX_REF_DEPTH: usize = 32;
const MAX_NODES: usize = 50_000;
/// Levels of a recursive schema that are typed.
const MAX_UNFOLDINGS: usize = 4;

/// Keywords that make an object a JSON Schema (rather than a map of parameters).
const SCHEMA_KEYWORDS: [&str; 8] = [
    "type",
    "properties",
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "$defs",
    "definitions",
];

impl Schema {
    /// Compiles a plain JSON Schema object.
    pub fn from_json(schema: &Value) -> Result<Schema, SchemaError> {
        Compiler::new(schema).compile(schema, 0)
    }

    /// Finds the input schema inside a provider's tool definition (or accepts a plain schema).
    /// Returns the tool's name when the definition carries one.
    pub fn from_tool_definition(
        definition: &Value,
    ) -> Result<(Option<String>, Schema), SchemaError> {
        let tool = definition_name(definition);
        let nested: [(Option<&Value>, &str); 4] = [
            (definition.get("input_schema"), "/input_schema"),
            (
                definition
                    .get("inputSchema")
                    .map(|s| s.get("json").unwrap_or(s)),
                "/inputSchema",
            ),
            (
                definition.pointer("/toolSpec/inputSchema/json"),
                "/toolSpec/inputSchema/json",
            ),
            (
                definition.pointer("/function/parameters"),
                "/function/parameters",
            ),
        ];
        for (schema, at) in nested {
            if let Some(schema) = schema {
                return Ok((tool, Self::from_json(schema).map_err(|e| e.under(at))?));
            }
        }
        if let Some(parameters @ Value::Object(map)) = definition.get("parameters") {
            let schema = if is_parameter_map(map) {
                Self::from_bedrock_function(map)
            } else {
                Self::from_json(parameters)
            };
            return Ok((tool, schema.map_err(|e| e.under("/parameters"))?));
        }
        if is_openapi_operation(definition) {
            let schema = Compiler::new(definition).operation(definition)?;
            return Ok((tool, schema));
        }
        if definition.get("type").is_some() || definition.get("properties").is_some() {
            return Ok((None, Self::from_json(definition)?));
        }
        Err(SchemaError::invalid(
            "no input schema found (expected input_schema, inputSchema, parameters, toolSpec.inputSchema.json, \
             an OpenAPI operation or a JSON Schema object)",
        ))
    }

    /// The schema of `tool` from a definition given inline with a call: a tool definition or plain
    /// JSON Schema (taken whatever it is named), or any container [`tool_definitions`] opens (an
    /// OpenAPI document, an action group, a Gateway target), from which `tool`'s own is picked.
    pub fn for_tool(definition: &Value, tool: &str) -> Result<Schema, SchemaError> {
        if !is_container(definition) {
            return Self::from_tool_definition(definition).map(|(_, schema)| schema);
        }
        let mut named = tool_definitions(definition, "schema")
            .into_iter()
            .filter(|d| match d {
                Ok((name, _)) | Err((name, _)) => name == tool,
            });
        match named.next() {
            Some(Ok((_, schema))) => Ok(schema),
            Some(Err((_, e))) => Err(e),
            None => Err(SchemaError::invalid(format!(
                "the definitions given declare no tool named {tool:?}"
            ))),
        }
    }

    /// A flat object schema from Bedrock's declared parameter types (`string|number|integer|boolean|array`).
    ///
    /// `number`, `integer`, `boolean` and `array` are typed as a JSON Schema would type them. `string` is
    /// [`Types::TEXT`]: Bedrock declares every textual parameter so, whether or not its case matters, and
    /// sends objects that way as JSON text; only a real schema (a policy's, laid over with
    /// [`Schema::overlay`]) can say a string is strict.
    pub fn from_declared_types<'a>(
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Schema, SchemaError> {
        let mut properties = Vec::new();
        for (name, declared) in params {
            properties.push((
                name.to_string(),
                Schema {
                    types: Types::from_bedrock_name(declared)?,
                    ..Schema::default()
                },
            ));
        }
        Ok(Schema::object(properties))
    }

    /// A Bedrock Agents function definition's `parameters` (`{name: {type, required, description}}`),
    /// typed as the action group's events declare them.
    fn from_bedrock_function(
        parameters: &serde_json::Map<String, Value>,
    ) -> Result<Schema, SchemaError> {
        let mut properties = Vec::new();
        for (name, spec) in parameters {
            let declared = spec.get("type").and_then(Value::as_str).unwrap_or("string");
            let types =
                Types::from_bedrock_name(declared).map_err(|e| e.under(&pointer_step(name)))?;
            properties.push((
                name.clone(),
                Schema {
                    types,
                    required: spec.get("required").and_then(Value::as_bool) == Some(true),
                    ..Schema::default()
                },
            ));
        }
        Ok(Schema::object(properties))
    }

    fn object(mut properties: Vec<(String, Schema)>) -> Schema {
        properties.sort_by(|a, b| a.0.cmp(&b.0));
        Schema {
            types: Types::OBJECT,
            properties,
            ..Schema::default()
        }
    }

    /// Overlays `extra` (from a policy file) onto `self` (from declared types): per property, a real
    /// schema's type outranks a declared one, and declared types stay where `extra` states no type.
    pub fn overlay(mut self, extra: &Schema) -> Schema {
        for (name, schema) in &extra.properties {
            match self
                .properties
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
            {
                Ok(i) => {
                    let base = std::mem::take(&mut self.properties[i].1);
                    let mut merged = schema.clone();
                    if merged.types.is_unknown() {
                        merged.types = base.types;
                    }
                    merged.required |= base.required;
                    self.properties[i].1 = merged;
                }
                Err(i) => self.properties.insert(i, (name.clone(), schema.clone())),
            }
        }
        if extra.additional.is_some() {
            self.additional = extra.additional.clone();
        }
        self.patterns.extend(extra.patterns.iter().cloned());
        self.fills_defaults |= extra.fills_defaults;
        self.ignores_undeclared |= extra.ignores_undeclared;
        self
    }

    /// Whether this object names its members (`properties` or `patternProperties`): only then can
    /// a member be undeclared.
    pub(crate) fn declares_properties(&self) -> bool {
        !self.properties.is_empty() || !self.patterns.is_empty()
    }

    /// Whether the member path `parts` (a policy's field path) names a member this schema
    /// declares, walking through arrays into their items. An object that names no members (a free
    /// object) declares whatever it is given: only a named member can be missing.
    pub fn declares_path(&self, parts: &[String]) -> bool {
        let mut schema = self;
        for part in parts {
            while let Some(items) = schema.items.as_deref() {
                if schema.declares_properties() {
                    break;
                }
                schema = items;
            }
            if !schema.declares_properties() && schema.additional.is_none() {
                return true;
            }
            match schema.property(part) {
                Some(child) => schema = child,
                None => return false,
            }
        }
        true
    }

    /// The schema of the member `name`: its own, else the first `patternProperties` entry whose
    /// pattern matches, else `additionalProperties`.
    pub(crate) fn property(&self, name: &str) -> Option<&Schema> {
        match self
            .properties
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            Ok(i) => Some(&self.properties[i].1),
            Err(_) => self
                .patterns
                .iter()
                .find(|(pattern, _)| pattern.is_match(name))
                .map(|(_, schema)| schema)
                .or(self.additional.as_deref()),
        }
    }

    /// The declared properties that have a default, in name order.
    pub(crate) fn defaults(&self) -> impl Iterator<Item = (&str, &Schema, &str)> {
        self.properties
            .iter()
            .filter_map(|(name, schema)| Some((name.as_str(), schema, schema.default.as_deref()?)))
    }

    /// Whether `null` is a value of its own here, apart from leaving the member out: the schema
    /// states a type that admits `null`, and the member is not required (a required member cannot
    /// be left out, so there `null` can only mean "none"). A `default: null` makes the two equal
    /// again, since the left-out member keys as its default.
    pub(crate) fn keeps_null(&self) -> bool {
        self.types.contains(Types::NULL) && !self.required && !self.default_null
    }

    /// This member as one that a branch without it does not require.
    fn optional(self) -> Schema {
        Schema {
            required: false,
            ..self
        }
    }

    fn admits(&self, types: Types) -> bool {
        self.types == Types::default() || self.types.contains(types)
    }

    /// `self` and `other` both apply (`allOf`, a `$ref` beside other keywords): types intersect,
    /// members and their requirements add up, and a keyword `self` states wins over `other`'s.
    fn all_of(mut self, other: Schema) -> Schema {
        self.types = match (self.types.is_unknown(), other.types.is_unknown()) {
            (true, true) => self.types.union(other.types),
            (true, false) => other.types,
            (false, true) => self.types,
            (false, false) => {
                let both = self.types.intersection(other.types);
                // Contradicting branches admit no value at all: let nothing be typed by them.
                if both.is_unknown() {
                    Types::default()
                } else {
                    both
                }
            }
        };
        if self.format == Format::None {
            self.format = other.format;
        }
        self.enum_strings = match (self.enum_strings.is_empty(), other.enum_strings.is_empty()) {
            (_, true) => self.enum_strings,
            (true, false) => other.enum_strings,
            (false, false) => self
                .enum_strings
                .into_iter()
                .filter(|m| other.enum_strings.contains(m))
                .collect(),
        };
        for (name, schema) in other.properties {
            match self
                .properties
                .binary_search_by(|(n, _)| n.as_str().cmp(&name))
            {
                Ok(i) => {
                    // `all_of` also makes the member required if either side requires it.
                    let mine = std::mem::take(&mut self.properties[i].1);
                    self.properties[i].1 = mine.all_of(schema);
                }
                Err(i) => self.properties.insert(i, (name, schema)),
            }
        }
        self.patterns.extend(other.patterns);
        self.additional = match (self.additional, other.additional) {
            (Some(a), Some(b)) => Some(Box::new(a.all_of(*b))),
            (a, b) => a.or(b),
        };
        self.items = match (self.items, other.items) {
            (Some(a), Some(b)) => Some(Box::new(a.all_of(*b))),
            (a, b) => a.or(b),
        };
        self.mode = self.mode.or(other.mode);
        if self.default.is_none() && !self.default_null {
            self.default = other.default;
            self.default_null = other.default_null;
        }
        self.required |= other.required;
        self.fills_defaults = self.properties.iter().any(|(_, s)| s.default.is_some());
        self.ignores_undeclared |= other.ignores_undeclared;
        self
    }

    /// The value is one of `self` or `other` (`anyOf`, `oneOf`): types add up, and a refinement
    /// (enum, format, field mode, member schemas) holds only where every branch that admits such a
    /// value agrees on it. A branch that admits no object says nothing about members, and so on.
    fn any_of(mut self, other: Schema) -> Schema {
        let strings = (self.admits(Types::STRING), other.admits(Types::STRING));
        let objects = (self.admits(Types::OBJECT), other.admits(Types::OBJECT));
        let arrays = (self.admits(Types::ARRAY), other.admits(Types::ARRAY));
        self.types = self.types.union(other.types);
        match strings {
            (true, true) => {
                if self.format != other.format {
                    self.format = Format::None;
                }
                if self.enum_strings.is_empty() || other.enum_strings.is_empty() {
                    // A branch that admits any string: a near-miss of a member may be its own value.
                    self.enum_strings.clear();
                } else {
                    for member in other.enum_strings {
                        if !self.enum_strings.contains(&member) {
                            self.enum_strings.push(member);
                        }
                    }
                }
                if self.mode != other.mode {
                    self.mode = None;
                }
            }
            (false, true) => {
                self.format = other.format;
                self.enum_strings = other.enum_strings;
                self.mode = other.mode;
            }
            _ => {}
        }
        match objects {
            (true, true) => self.ignores_undeclared &= other.ignores_undeclared,
            (false, true) => self.ignores_undeclared = other.ignores_undeclared,
            _ => {}
        }
        match objects {
            (true, true) => {
                let mut merged = Vec::new();
                let mut theirs = other.properties.into_iter().peekable();
                for (name, mine) in std::mem::take(&mut self.properties) {
                    while let Some((n, s)) = theirs.next_if(|(n, _)| *n < name) {
                        merged.push((n, s.optional()));
                    }
                    match theirs.peek() {
                        Some((n, _)) if *n == name => {
                            let (_, s) = theirs.next().expect("peeked");
                            let required = mine.required && s.required;
                            merged.push((
                                name,
                                Schema {
                                    required,
                                    ..mine.any_of(s)
                                },
                            ));
                        }
                        _ => merged.push((name, mine.optional())),
                    }
                }
                merged.extend(theirs.map(|(n, s)| (n, s.optional())));
                self.properties = merged;
                self.patterns.extend(other.patterns);
                self.additional = match (self.additional, other.additional) {
                    (Some(a), Some(b)) => Some(Box::new(a.any_of(*b))),
                    _ => None,
                };
            }
            (false, true) => {
                self.properties = other.properties;
                self.patterns = other.patterns;
                self.additional = other.additional;
            }
            _ => {}
        }
        match arrays {
            (true, true) => {
                self.items = match (self.items, other.items) {
                    (Some(a), Some(b)) => Some(Box::new(a.any_of(*b))),
                    _ => None,
                };
            }
            (false, true) => self.items = other.items,
            _ => {}
        }
        if self.default != other.default {
            self.default = None;
        }
        self.default_null &= other.default_null;
        self.fills_defaults = self.properties.iter().any(|(_, s)| s.default.is_some());
        self
    }
}
