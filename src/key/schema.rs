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

/// How a field is compared, set per field by a policy file or by `"x-dedup"` in the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
}

impl FieldMode {
    fn parse(s: &str) -> Result<Self, SchemaError> {
        match s {
            "ignore" => Ok(Self::Ignore),
            "exact" => Ok(Self::Exact),
            "trim" => Ok(Self::Trim),
            "casefold" => Ok(Self::Casefold),
            other => Err(SchemaError::invalid(format!(
                "unknown x-dedup mode {other:?} (ignore|exact|trim|casefold)"
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
        self
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

/// One compilation: the document `$ref`s resolve in, and the work done so far.
struct Compiler<'d> {
    document: &'d Value,
    /// The refs being followed (to cut cycles) and the nodes compiled (to bound the work).
    refs: Vec<&'d str>,
    nodes: usize,
}

impl<'d> Compiler<'d> {
    fn new(document: &'d Value) -> Self {
        Compiler {
            document,
            refs: Vec::new(),
            nodes: 0,
        }
    }

    fn resolve(&self, reference: &str) -> Result<&'d Value, SchemaError> {
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(SchemaError::invalid(format!(
                "remote $ref {reference:?}: only refs within the definition (\"#/...\") are read; \
                 bundle the referenced schema into it"
            )));
        };
        self.document.pointer(pointer).ok_or_else(|| {
            let hint = if pointer.starts_with("/components/") {
                " (an OpenAPI operation's refs resolve in its whole document: give the document, \
                 with its components)"
            } else {
                ""
            };
            SchemaError::invalid(format!("unresolvable $ref {reference:?}{hint}"))
        })
    }

    fn compile(&mut self, node: &'d Value, depth: usize) -> Result<Schema, SchemaError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(SchemaError::invalid(format!(
                "schema too large (over {MAX_NODES} nodes once its refs are followed)"
            )));
        }
        let Some(obj) = node.as_object() else {
            // `true`/`{}` admit anything.
            return Ok(Schema::default());
        };
        let mut schema = Schema::default();
        match obj.get("type") {
            Some(Value::String(t)) => {
                schema.types = Types::from_name(t).map_err(|e| e.under("/type"))?
            }
            Some(Value::Array(ts)) => {
                for (i, t) in ts.iter().enumerate() {
                    let t = t
                        .as_str()
                        .ok_or_else(|| SchemaError::invalid("type list must hold strings"))
                        .and_then(Types::from_name)
                        .map_err(|e| e.under(&format!("/type/{i}")))?;
                    schema.types = schema.types.union(t);
                }
            }
            Some(_) => {
                return Err(SchemaError::invalid("type must be a string or a list").under("/type"));
            }
            None => {}
        }
        let stated_type = obj.contains_key("type");
        let literal = |value: &Value, schema: &mut Schema| {
            let implied = match value {
                Value::String(s) => {
                    schema.enum_strings.push(s.clone());
                    Types::STRING
                }
                Value::Number(_) => Types::NUMBER,
                Value::Bool(_) => Types::BOOLEAN,
                Value::Null => Types::NULL,
                Value::Array(_) => Types::ARRAY,
                Value::Object(_) => Types::OBJECT,
            };
            if !stated_type {
                schema.types = schema.types.union(implied);
            }
        };
        if let Some(Value::Array(members)) = obj.get("enum") {
            for m in members {
                literal(m, &mut schema);
            }
        }
        if let Some(value) = obj.get("const") {
            literal(value, &mut schema);
        }
        schema.format = match obj.get("format").and_then(Value::as_str) {
            Some("date-time") => Format::DateTime,
            Some("email" | "idn-email" | "hostname" | "idn-hostname" | "uuid") => {
                Format::CaseInsensitive
            }
            _ => Format::None,
        };
        if let Some(Value::Object(props)) = obj.get("properties") {
            for (name, sub) in props {
                let compiled = self
                    .compile(sub, depth + 1)
                    .map_err(|e| e.under(&format!("/properties{}", pointer_step(name))))?;
                schema.properties.push((name.clone(), compiled));
            }
            schema.properties.sort_by(|a, b| a.0.cmp(&b.0));
            if schema.types.is_unknown() {
                schema.types = schema.types.union(Types::OBJECT);
            }
        }
        if let Some(Value::Object(patterns)) = obj.get("patternProperties") {
            for (pattern, sub) in patterns {
                let at = format!("/patternProperties{}", pointer_step(pattern));
                let regex = Regex::new(pattern).map_err(|e| {
                    SchemaError::invalid(format!("pattern is not a regular expression: {e}"))
                        .under(&at)
                })?;
                let compiled = self.compile(sub, depth + 1).map_err(|e| e.under(&at))?;
                schema.patterns.push((regex, compiled));
            }
        }
        if let Some(additional @ Value::Object(_)) = obj.get("additionalProperties") {
            let compiled = self
                .compile(additional, depth + 1)
                .map_err(|e| e.under("/additionalProperties"))?;
            schema.additional = Some(Box::new(compiled));
        }
        match obj.get("items") {
            Some(Value::Array(tuple)) => schema.items = self.tuple(tuple, depth, "/items")?,
            Some(items) => {
                let compiled = self
                    .compile(items, depth + 1)
                    .map_err(|e| e.under("/items"))?;
                schema.items = Some(Box::new(compiled));
            }
            None => {
                if let Some(Value::Array(tuple)) = obj.get("prefixItems") {
                    schema.items = self.tuple(tuple, depth, "/prefixItems")?;
                }
            }
        }
        if let Some(mode) = obj.get("x-dedup") {
            let mode = mode
                .as_str()
                .ok_or_else(|| SchemaError::invalid("x-dedup must be a string"))
                .and_then(FieldMode::parse)
                .map_err(|e| e.under("/x-dedup"))?;
            schema.mode = Some(mode);
        }
        match obj.get("default") {
            Some(Value::Null) => schema.default_null = true,
            Some(default) => schema.default = Some(default.to_string().into_boxed_str()),
            None => {}
        }
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let target = self.resolve(reference).map_err(|e| e.under("/$ref"))?;
            // A ref met again while it is being followed is a recursive schema: it is unfolded a
            // few levels, and past them it types nothing (keying never needs the infinite tree).
            let unfolded = self.refs.iter().filter(|r| **r == reference).count();
            if unfolded < MAX_UNFOLDINGS && depth < MAX_REF_DEPTH {
                self.refs.push(reference);
                let referred = self.compile(target, depth + 1);
                self.refs.pop();
                schema = schema.all_of(referred.map_err(|e| e.under("/$ref"))?);
            }
        }
        if let Some(Value::Array(branches)) = obj.get("allOf") {
            for (i, branch) in branches.iter().enumerate() {
                let b = self
                    .compile(branch, depth + 1)
                    .map_err(|e| e.under(&format!("/allOf/{i}")))?;
                schema = schema.all_of(b);
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = obj.get(key) {
                let mut alternatives: Option<Schema> = None;
                for (i, branch) in branches.iter().enumerate() {
                    let b = self
                        .compile(branch, depth + 1)
                        .map_err(|e| e.under(&format!("/{key}/{i}")))?;
                    alternatives = Some(match alternatives {
                        None => b,
                        Some(a) => a.any_of(b),
                    });
                }
                if let Some(alternatives) = alternatives {
                    schema = schema.all_of(alternatives);
                }
            }
        }
        // OpenAPI 3.0 writes a nullable type as `nullable: true` beside it, also beside a `$ref`.
        if obj.get("nullable").and_then(Value::as_bool) == Some(true) {
            schema.types = schema.types.union(Types::NULL);
        }
        if let Some(Value::Array(required)) = obj.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if let Ok(i) = schema
                    .properties
                    .binary_search_by(|(n, _)| n.as_str().cmp(name))
                {
                    schema.properties[i].1.required = true;
                }
            }
        }
        schema.fills_defaults = schema.properties.iter().any(|(_, s)| s.default.is_some());
        Ok(schema)
    }

    /// Tuple items (`prefixItems`, or a draft-4 `items` list): each position may differ, so an
    /// element is typed by what all positions agree on.
    fn tuple(
        &mut self,
        positions: &'d [Value],
        depth: usize,
        at: &str,
    ) -> Result<Option<Box<Schema>>, SchemaError> {
        let mut merged: Option<Schema> = None;
        for (i, position) in positions.iter().enumerate() {
            let s = self
                .compile(position, depth + 1)
                .map_err(|e| e.under(&format!("{at}/{i}")))?;
            merged = Some(match merged {
                None => s,
                Some(m) => m.any_of(s),
            });
        }
        Ok(merged.map(Box::new))
    }

    /// An OpenAPI operation as the one flat object Bedrock's event flattens it into: every
    /// parameter by name (required where the parameter is), and every member of the request
    /// body's schema (the first media type's). Refs resolve in `self.document`.
    fn operation(&mut self, op: &'d Value) -> Result<Schema, SchemaError> {
        let mut flat = self.parameters(op).map_err(|e| e.under("/parameters"))?;
        if let Some(body) = op.get("requestBody") {
            let body = match body.get("$ref").and_then(Value::as_str) {
                Some(reference) => self
                    .resolve(reference)
                    .map_err(|e| e.under("/requestBody"))?,
                None => body,
            };
            let media = body
                .get("content")
                .and_then(Value::as_object)
                .and_then(|content| {
                    content
                        .iter()
                        .find_map(|(m, media)| Some((m, media.get("schema")?)))
                });
            if let Some((media_type, schema)) = media {
                let at = format!("/requestBody/content{}/schema", pointer_step(media_type));
                let compiled = self.compile(schema, 1).map_err(|e| e.under(&at))?;
                flat = flat.all_of(compiled);
            }
        }
        flat.types = Types::OBJECT;
        Ok(flat)
    }

    /// The `parameters` list of an operation or a path item, as one object schema by name.
    fn parameters(&mut self, holder: &'d Value) -> Result<Schema, SchemaError> {
        let mut flat = Schema::object(Vec::new());
        let Some(Value::Array(parameters)) = holder.get("parameters") else {
            return Ok(flat);
        };
        for (i, parameter) in parameters.iter().enumerate() {
            let at = format!("/{i}");
            let parameter = match parameter.get("$ref").and_then(Value::as_str) {
                Some(reference) => self.resolve(reference).map_err(|e| e.under(&at))?,
                None => parameter,
            };
            let Some(name) = parameter.get("name").and_then(Value::as_str) else {
                continue;
            };
            let mut schema = match parameter.get("schema") {
                Some(s) => self
                    .compile(s, 1)
                    .map_err(|e| e.under(&format!("{at}/schema")))?,
                None => Schema::default(),
            };
            schema.required = parameter.get("required").and_then(Value::as_bool) == Some(true);
            flat = flat.all_of(Schema::object(vec![(name.to_string(), schema)]));
        }
        Ok(flat)
    }
}

/// `/name` as a JSON pointer step (`~` and `/` escaped).
fn pointer_step(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// A Bedrock Agents function's `parameters`: a map from parameter name to `{type, required,
/// description}`, with none of the keywords that would make it a JSON Schema.
fn is_parameter_map(map: &serde_json::Map<String, Value>) -> bool {
    !map.is_empty()
        && !SCHEMA_KEYWORDS.iter().any(|k| map.contains_key(*k))
        && map
            .values()
            .all(|v| v.get("type").is_some_and(Value::is_string))
}

fn is_openapi_operation(op: &Value) -> bool {
    op.get("parameters").is_some_and(Value::is_array) || op.get("requestBody").is_some()
}

/// The name a tool definition gives its tool, in any provider's format.
pub(crate) fn definition_name(definition: &Value) -> Option<String> {
    let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
    definition
        .pointer("/toolSpec")
        .and_then(name)
        .or_else(|| definition.get("function").and_then(name))
        .or_else(|| name(definition))
        .or_else(|| {
            definition
                .get("operationId")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
}

/// One tool named by a definition container, or why it could not be read.
pub type Definition = Result<(String, Schema), (String, SchemaError)>;

/// Every tool a definition container declares, each with its name: a single tool definition (see
/// [`Schema::from_tool_definition`]), a list of them, an MCP `tools/list` result (`tools`), an
/// AgentCore Gateway Lambda target (`toolSchema.inlinePayload`, also under
/// `targetConfiguration.mcp.lambda`), a Bedrock Agents action group (`functionSchema.functions`, or
/// `apiSchema.payload` holding an OpenAPI document as JSON text), or an OpenAPI document, whose
/// operations are named as Bedrock names them (`METHOD /path`) and by their `operationId`. A
/// whole Gateway target (its `name` beside `targetConfiguration`) names its tools as the Gateway
/// lists them: `<target>___<tool>`.
///
/// `label` names the container in errors when no tool name can be found (`tool_definitions[3]`).
pub fn tool_definitions(container: &Value, label: &str) -> Vec<Definition> {
    let mut found = Vec::new();
    collect_definitions(container, label, &mut found);
    found
}

/// Between an AgentCore Gateway target's name and its tool's in the names the Gateway lists.
const GATEWAY_TOOL_DELIMITER: &str = "___";

/// Where the containers [`tool_definitions`] opens keep their list of definitions.
const DEFINITION_LISTS: [&str; 5] = [
    "/tools",
    "/toolSchema/inlinePayload",
    "/targetConfiguration/mcp/lambda/toolSchema/inlinePayload",
    "/functionSchema/functions",
    "/functions",
];

fn is_openapi_document(value: &Value) -> bool {
    value.get("paths").is_some_and(Value::is_object)
        && (value.get("openapi").is_some() || value.get("swagger").is_some())
}

/// Whether `value` holds definitions rather than being one.
fn is_container(value: &Value) -> bool {
    value.is_array()
        || DEFINITION_LISTS
            .iter()
            .any(|list| value.pointer(list).is_some_and(Value::is_array))
        || value.pointer("/apiSchema/payload").is_some()
        || is_openapi_document(value)
}

fn collect_definitions(container: &Value, label: &str, found: &mut Vec<Definition>) {
    // An AgentCore Gateway target (`CreateGatewayTarget`'s `name` and `targetConfiguration`)
    // names its tools as the Gateway lists them, `<target>___<tool>`, so that one target's
    // definitions never type another target's tool of the same name.
    if let (Some(target), Some(configuration)) = (
        container.get("name").and_then(Value::as_str),
        container
            .get("targetConfiguration")
            .filter(|c| c.is_object()),
    ) {
        let mut under = Vec::new();
        let wrapped = serde_json::json!({ "targetConfiguration": configuration });
        collect_definitions(&wrapped, label, &mut under);
        found.extend(under.into_iter().map(|definition| {
            definition
                .map(|(tool, schema)| (format!("{target}{GATEWAY_TOOL_DELIMITER}{tool}"), schema))
        }));
        return;
    }
    if let Value::Array(items) = container {
        for (i, item) in items.iter().enumerate() {
            collect_definitions(item, &format!("{label}[{i}]"), found);
        }
        return;
    }
    for list in DEFINITION_LISTS {
        if let Some(Value::Array(items)) = container.pointer(list) {
            for (i, item) in items.iter().enumerate() {
                collect_definitions(item, &format!("{label}{list}/{i}"), found);
            }
            return;
        }
    }
    if let Some(payload) = container.pointer("/apiSchema/payload") {
        let named = |e: SchemaError| Err((label.to_string(), e));
        match payload.as_str().map(serde_json::from_str::<Value>) {
            Some(Ok(document)) => openapi_document(&document, found),
            Some(Err(e)) => found.push(named(SchemaError::invalid(format!(
                "apiSchema.payload is not JSON ({e}); give the OpenAPI document as JSON"
            )))),
            None => found.push(named(SchemaError::invalid(
                "apiSchema.payload must be the OpenAPI document's text (an S3 location cannot be read here)",
            ))),
        }
        return;
    }
    if is_openapi_document(container) {
        openapi_document(container, found);
        return;
    }
    let name = definition_name(container);
    found.push(match Schema::from_tool_definition(container) {
        Ok((Some(name), schema)) => Ok((name, schema)),
        Ok((None, _)) => Err((
            label.to_string(),
            SchemaError::invalid("the definition names no tool"),
        )),
        Err(e) => Err((name.unwrap_or_else(|| label.to_string()), e)),
    });
}

const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn openapi_document(document: &Value, found: &mut Vec<Definition>) {
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return;
    };
    for (path, item) in paths {
        for method in HTTP_METHODS {
            let Some(op) = item.get(method) else { continue };
            let bedrock_name = format!("{} {path}", method.to_ascii_uppercase());
            let at = format!("/paths{}", pointer_step(path));
            let mut compiler = Compiler::new(document);
            let schema = compiler
                .operation(op)
                .map_err(|e| e.under(&format!("{at}/{method}")))
                .and_then(|own| {
                    // Path-level parameters apply to every operation under the path.
                    let shared = compiler
                        .parameters(item)
                        .map_err(|e| e.under(&format!("{at}/parameters")))?;
                    Ok(own.all_of(shared))
                });
            match schema {
                Ok(schema) => {
                    if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                        found.push(Ok((id.to_string(), schema.clone())));
                    }
                    found.push(Ok((bedrock_name, schema)));
                }
                Err(e) => found.push(Err((bedrock_name, e))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unwraps_every_provider_format() {
        let inner = json!({"type": "object", "properties": {"amount": {"type": "integer"}}});
        for def in [
            json!({"name": "charge", "input_schema": inner}),
            json!({"name": "charge", "inputSchema": inner}),
            json!({"toolSpec": {"name": "charge", "inputSchema": {"json": inner}}}),
            json!({"type": "function", "function": {"name": "charge", "parameters": inner}}),
            json!({"name": "charge", "parameters": inner}),
        ] {
            let (name, schema) = Schema::from_tool_definition(&def).unwrap();
            assert_eq!(name.as_deref(), Some("charge"), "{def}");
            assert_eq!(schema.property("amount").unwrap().types, Types::NUMBER);
        }
        assert!(Schema::from_tool_definition(&inner).unwrap().0.is_none());
        assert!(Schema::from_tool_definition(&json!({"name": "x"})).is_err());
    }

    #[test]
    fn an_openapi_operation_is_flattened_as_bedrock_flattens_its_event() {
        let operation = json!({
            "operationId": "refund",
            "parameters": [{"name": "chargeId", "in": "path", "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
                "amount": {"type": "number"}, "reason": {"enum": ["duplicate", "fraudulent"]}}}}}}
        });
        let (name, schema) = Schema::from_tool_definition(&operation).unwrap();
        assert_eq!(name.as_deref(), Some("refund"));
        assert_eq!(schema.property("chargeId").unwrap().types, Types::STRING);
        assert_eq!(schema.property("amount").unwrap().types, Types::NUMBER);
        assert_eq!(
            schema.property("reason").unwrap().enum_strings,
            ["duplicate", "fraudulent"]
        );
        let body_only = json!({"requestBody": {"content": {"application/json": {"schema": {
            "properties": {"currency": {"type": "string"}}}}}}});
        let (_, schema) = Schema::from_tool_definition(&body_only).unwrap();
        assert_eq!(schema.property("currency").unwrap().types, Types::STRING);
    }

    #[test]
    fn resolves_local_refs_and_unions() {
        let schema = Schema::from_json(&json!({
            "type": "object",
            "$defs": {"Money": {"type": "object", "properties": {"currency": {"enum": ["USD", "EUR"]}}}},
            "properties": {"price": {"$ref": "#/$defs/Money"}, "note": {"type": ["string", "null"]}}
        }))
        .unwrap();
        let currency = schema
            .property("price")
            .unwrap()
            .property("currency")
            .unwrap();
        assert_eq!(currency.enum_strings, ["USD", "EUR"]);
        assert!(currency.types.contains(Types::STRING));
        assert!(schema.property("note").unwrap().types.contains(Types::NULL));
        assert!(Schema::from_json(&json!({"$ref": "#/nowhere"})).is_err());
        // A recursive schema compiles: the cycle is cut where the ref comes round again.
        Schema::from_json(&json!({"$ref": "#"})).unwrap();
        let tree = Schema::from_json(&json!({"$defs": {"Node": {"type": "object", "properties": {
            "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
            "$ref": "#/$defs/Node"}))
        .unwrap();
        let child = tree.property("children").unwrap().items.as_deref().unwrap();
        assert_eq!(child.property("name").unwrap().types, Types::STRING);
        let remote = Schema::from_json(&json!({"properties": {"a": {"$ref": "other.json#/A"}}}));
        let message = remote.unwrap_err().to_string();
        assert!(
            message.contains("remote $ref") && message.contains("/properties/a/$ref"),
            "{message}"
        );
    }

    #[test]
    fn dialect_type_names_are_aliases() {
        let schema = Schema::from_json(&json!({"type": "dict", "properties": {
            "v": {"type": "float"}, "t": {"type": "tuple"}, "x": {"type": "any"}}}))
        .unwrap();
        assert_eq!(schema.types, Types::OBJECT);
        assert_eq!(schema.property("v").unwrap().types, Types::NUMBER);
        assert_eq!(schema.property("t").unwrap().types, Types::ARRAY);
        assert!(schema.property("x").unwrap().types.is_unknown());
        let error = Schema::from_json(&json!({"properties": {"a": {"type": "text"}}})).unwrap_err();
        assert_eq!(
            error,
            SchemaError::Invalid {
                at: "/properties/a/type".into(),
                message: "unknown JSON Schema type \"text\"".into()
            }
        );
    }

    #[test]
    fn null_defaults_and_required_are_read() {
        let schema = Schema::from_json(
            &json!({"type": "object", "required": ["id"], "properties": {
            "id": {"type": ["string", "null"]},
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "limit": {"type": "integer", "default": 5000},
            "cursor": {"type": "string", "nullable": true, "default": null},
            "plain": {"type": "string"}}}),
        )
        .unwrap();
        let p = |n| schema.property(n).unwrap();
        assert!(!p("id").keeps_null(), "required: null can only mean none");
        assert!(
            p("label").keeps_null(),
            "optional and nullable: null clears"
        );
        assert!(!p("plain").keeps_null());
        assert_eq!(p("limit").default.as_deref(), Some("5000"));
        assert!(p("cursor").types.contains(Types::NULL) && !p("cursor").keeps_null());
        assert!(schema.fills_defaults);
        let names: Vec<_> = schema.defaults().map(|(n, _, d)| (n, d)).collect();
        assert_eq!(
            names,
            [("limit", "5000")],
            "a null default is no default to fill in"
        );
    }

    /// A member is required in a union only where every branch requires it, and only then is
    /// its `null` the same as leaving it out; in an intersection, where either branch does.
    #[test]
    fn a_member_required_by_one_branch_only_is_optional_in_the_union() {
        let nullable_note = json!({"type": ["string", "null"]});
        let schema = Schema::from_json(&json!({"properties": {
            "both": {"anyOf": [
                {"type": "object", "required": ["note"], "properties": {"note": nullable_note}},
                {"type": "object", "properties": {"note": nullable_note}}]},
            "first_only": {"anyOf": [
                {"type": "object", "required": ["note"], "properties": {"note": nullable_note}},
                {"type": "object", "properties": {"other": {"type": "string"}}}]},
            "every": {"anyOf": [
                {"type": "object", "required": ["note"], "properties": {"note": nullable_note}},
                {"type": "object", "required": ["note"], "properties": {"note": nullable_note}}]},
            "all": {"allOf": [
                {"type": "object", "properties": {"note": nullable_note}},
                {"type": "object", "required": ["note"], "properties": {"note": nullable_note}}]}}}))
        .unwrap();
        let note = |member: &str| {
            let union = schema.property(member).unwrap();
            union.property("note").unwrap().clone()
        };
        for member in ["both", "first_only"] {
            assert!(!note(member).required, "{member}");
            assert!(note(member).keeps_null(), "{member}: null clears");
        }
        assert!(note("every").required && !note("every").keeps_null());
        assert!(note("all").required && !note("all").keeps_null());
    }

    #[test]
    fn declared_parameters_make_an_object() {
        let declared = Schema::from_declared_types([("amount", "number")]).unwrap();
        assert_eq!(declared.types, Types::OBJECT);
        assert_eq!(declared.property("amount").unwrap().types, Types::NUMBER);
    }

    #[test]
    fn combinators_merge_where_the_branches_agree() {
        let schema = Schema::from_json(&json!({"$defs": {"Base": {"properties": {"id": {"type": "string"}}}},
            "properties": {
                "target": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "user"}, "login": {"type": "string"}}},
                    {"type": "object", "properties": {"kind": {"const": "team"}, "slug": {"type": "string"}}}]},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "money": {"allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"amount": {"type": "number"}}}]},
                "code": {"anyOf": [{"enum": ["A", "B"]}, {"type": "string"}]},
                "level": {"const": 3},
                "flag": {"const": true},
                "tags": {"type": "object", "patternProperties": {"^n_": {"type": "number"}}}}}))
        .unwrap();
        let p = |n| schema.property(n).unwrap();
        let target = p("target");
        assert_eq!(
            target.property("login").unwrap().types,
            Types::STRING,
            "every branch's members"
        );
        assert_eq!(target.property("slug").unwrap().types, Types::STRING);
        assert_eq!(
            target.property("kind").unwrap().enum_strings,
            ["user", "team"]
        );
        assert_eq!(p("either").types, Types::STRING.union(Types::NUMBER));
        assert_eq!(p("money").property("id").unwrap().types, Types::STRING);
        assert_eq!(p("money").property("amount").unwrap().types, Types::NUMBER);
        assert!(
            p("code").enum_strings.is_empty(),
            "a branch admits any string"
        );
        assert_eq!(p("level").types, Types::NUMBER);
        assert_eq!(p("flag").types, Types::BOOLEAN);
        assert_eq!(p("tags").property("n_total").unwrap().types, Types::NUMBER);
        assert!(p("tags").property("other").is_none());
    }

    #[test]
    fn bedrock_function_definitions_are_typed_as_their_events() {
        let (name, schema) =
            Schema::from_tool_definition(&json!({"name": "book_room", "parameters": {
            "nights": {"type": "integer", "required": true, "description": "d"},
            "guest": {"type": "string", "required": false}}}))
            .unwrap();
        assert_eq!(name.as_deref(), Some("book_room"));
        assert_eq!(schema.property("nights").unwrap().types, Types::NUMBER);
        assert!(schema.property("nights").unwrap().required);
        assert_eq!(schema.property("guest").unwrap().types, Types::TEXT);
    }

    #[test]
    fn containers_name_every_tool_and_openapi_refs_resolve_in_the_document() {
        let document = json!({"openapi": "3.0.0",
            "components": {"schemas": {"Note": {"type": "object", "required": ["to"], "properties": {
                "to": {"type": "string", "format": "email"}, "body": {"type": "string"}}}},
                "parameters": {"Id": {"name": "id", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/Id"}}}},
            "paths": {"/notes/{id}": {
                "parameters": [{"$ref": "#/components/parameters/Id"}],
                "post": {"operationId": "sendNote", "requestBody": {"content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Note"}}}}}}}});
        let mut document = document;
        document["components"]["schemas"]["Id"] = json!({"type": "string"});
        let found: Vec<_> = tool_definitions(&document, "doc")
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let names: Vec<_> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["sendNote", "POST /notes/{id}"]);
        let schema = &found[0].1;
        assert_eq!(
            schema.property("to").unwrap().format,
            Format::CaseInsensitive
        );
        assert!(schema.property("to").unwrap().required);
        assert_eq!(schema.property("id").unwrap().types, Types::STRING);
        // The operation alone cannot resolve its components: the error says so, and names the tool.
        let alone = document.pointer("/paths/~1notes~1{id}/post").unwrap();
        let errors = tool_definitions(alone, "tool_definitions[0]");
        let (tool, error) = errors[0].as_ref().unwrap_err();
        assert_eq!(tool, "sendNote");
        assert!(error.to_string().contains("whole document"), "{error}");

        let action_group = json!({"actionGroupName": "hr", "functionSchema": {"functions": [
            {"name": "a", "parameters": {"n": {"type": "integer"}}},
            {"name": "b", "parameters": {"s": {"type": "string"}}}]}});
        let gateway_target = json!({"targetConfiguration": {"mcp": {"lambda": {"toolSchema": {"inlinePayload": [
            {"name": "c", "inputSchema": {"type": "object"}}]}}}}});
        let tools_list = json!({"tools": [{"name": "d", "inputSchema": {"type": "object"}}]});
        let api_payload = json!({"apiSchema": {"payload": document.to_string()}});
        for (container, expected) in [
            (action_group, vec!["a", "b"]),
            (gateway_target, vec!["c"]),
            (tools_list, vec!["d"]),
            (api_payload, vec!["sendNote", "POST /notes/{id}"]),
        ] {
            let names: Vec<_> = tool_definitions(&container, "x")
                .into_iter()
                .map(|d| d.unwrap().0)
                .collect();
            assert_eq!(names, expected, "{container}");
        }
    }

    #[test]
    fn declared_types_and_overlay() {
        let declared =
            Schema::from_declared_types([("amount", "number"), ("currency", "string")]).unwrap();
        let extra =
            Schema::from_json(&json!({"properties": {"currency": {"enum": ["USD"]}}})).unwrap();
        let currency = declared.property("currency").unwrap().types;
        assert!(currency.is_unknown() && currency.contains(Types::TEXT));
        let merged = declared.overlay(&extra);
        assert_eq!(merged.property("currency").unwrap().enum_strings, ["USD"]);
        assert_eq!(merged.property("currency").unwrap().types, Types::STRING);
        assert_eq!(merged.property("amount").unwrap().types, Types::NUMBER);
        assert!(Schema::from_declared_types([("x", "float")]).is_err());
    }
}
