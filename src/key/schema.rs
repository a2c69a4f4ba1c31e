//! The subset of JSON Schema that decides how a value is compared: `type`, `enum`, `format`,
//! `properties`, `additionalProperties`, `items`, `anyOf`/`oneOf` of simple types, local `$ref`s, and our
//! own `x-dedup` field mode. Everything else (lengths, patterns, descriptions) does not change meaning.
//!
//! Tool definitions arrive wrapped differently per provider; [`Schema::from_tool_definition`] unwraps
//! Anthropic (`input_schema`), OpenAI (`parameters`, also under `function`), MCP (`inputSchema`) and
//! Bedrock Converse (`toolSpec.inputSchema.json`).

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
    /// Compared without case, even where the schema says plain string.
    Casefold,
}

impl FieldMode {
    fn parse(s: &str) -> Result<Self, SchemaError> {
        match s {
            "ignore" => Ok(Self::Ignore),
            "exact" => Ok(Self::Exact),
            "casefold" => Ok(Self::Casefold),
            other => Err(SchemaError::Invalid(format!(
                "unknown x-dedup mode {other:?} (ignore|exact|casefold)"
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
    fn union(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }
    fn from_name(name: &str) -> Result<Types, SchemaError> {
        Ok(match name {
            "string" => Self::STRING,
            "number" | "integer" => Self::NUMBER,
            "boolean" => Self::BOOLEAN,
            "array" => Self::ARRAY,
            "object" => Self::OBJECT,
            "null" => Self::NULL,
            other => {
                return Err(SchemaError::Invalid(format!(
                    "unknown JSON Schema type {other:?}"
                )));
            }
        })
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
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The schema is not JSON Schema the keyer can read; the text says where.
    #[error("invalid tool schema: {0}")]
    Invalid(String),
}

/// A compiled schema node.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    pub(crate) types: Types,
    pub(crate) format: Format,
    pub(crate) enum_strings: Vec<String>,
    properties: Vec<(String, Schema)>,
    additional: Option<Box<Schema>>,
    pub(crate) items: Option<Box<Schema>>,
    pub(crate) mode: Option<FieldMode>,
}

const MAX_REF_DEPTH: usize = 32;

impl Schema {
    /// Compiles a plain JSON Schema object.
    pub fn from_json(schema: &Value) -> Result<Schema, SchemaError> {
        Self::compile(schema, schema, 0)
    }

    /// Finds the input schema inside a provider's tool definition (or accepts a plain schema).
    /// Returns the tool's name when the definition carries one.
    pub fn from_tool_definition(
        definition: &Value,
    ) -> Result<(Option<String>, Schema), SchemaError> {
        let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_string);
        let candidates: [(Option<&Value>, Option<String>); 5] = [
            (definition.get("input_schema"), name(definition)),
            (
                definition
                    .get("inputSchema")
                    .map(|s| s.get("json").unwrap_or(s)),
                name(definition),
            ),
            (
                definition.pointer("/toolSpec/inputSchema/json"),
                definition.pointer("/toolSpec").and_then(name),
            ),
            (
                definition.pointer("/function/parameters"),
                definition.get("function").and_then(name),
            ),
            (
                definition.get("parameters").filter(|p| p.is_object()),
                name(definition),
            ),
        ];
        for (schema, tool) in candidates {
            if let Some(schema) = schema {
                return Ok((tool, Self::from_json(schema)?));
            }
        }
        if let Some(flat) = openapi_operation(definition) {
            let name = definition.get("operationId").and_then(Value::as_str);
            return Ok((name.map(str::to_string), Self::from_json(&flat)?));
        }
        if definition.get("type").is_some() || definition.get("properties").is_some() {
            return Ok((None, Self::from_json(definition)?));
        }
        Err(SchemaError::Invalid(
            "no input schema found (expected input_schema, inputSchema, parameters, toolSpec.inputSchema.json, \
             an OpenAPI operation or a JSON Schema object)"
                .into(),
        ))
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
            let types = match declared {
                "string" => Types::TEXT,
                other => Types::from_name(other)?,
            };
            properties.push((
                name.to_string(),
                Schema {
                    types,
                    ..Schema::default()
                },
            ));
        }
        properties.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Schema {
            types: Types::OBJECT,
            properties,
            ..Schema::default()
        })
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
                    self.properties[i].1 = merged;
                }
                Err(i) => self.properties.insert(i, (name.clone(), schema.clone())),
            }
        }
        if extra.additional.is_some() {
            self.additional = extra.additional.clone();
        }
        self
    }

    pub(crate) fn property(&self, name: &str) -> Option<&Schema> {
        match self
            .properties
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            Ok(i) => Some(&self.properties[i].1),
            Err(_) => self.additional.as_deref(),
        }
    }

    fn compile(node: &Value, root: &Value, depth: usize) -> Result<Schema, SchemaError> {
        if depth > MAX_REF_DEPTH {
            return Err(SchemaError::Invalid(
                "schema nests or refers too deeply".into(),
            ));
        }
        let Some(obj) = node.as_object() else {
            // `true`/`{}` admit anything.
            return Ok(Schema::default());
        };
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let target = reference
                .strip_prefix('#')
                .and_then(|pointer| root.pointer(pointer))
                .ok_or_else(|| {
                    SchemaError::Invalid(format!(
                        "unresolvable $ref {reference:?} (only local refs)"
                    ))
                })?;
            return Self::compile(target, root, depth + 1);
        }
        let mut schema = Schema::default();
        match obj.get("type") {
            Some(Value::String(t)) => schema.types = Types::from_name(t)?,
            Some(Value::Array(ts)) => {
                for t in ts {
                    let t = t.as_str().ok_or_else(|| {
                        SchemaError::Invalid("type list must hold strings".into())
                    })?;
                    schema.types = schema.types.union(Types::from_name(t)?);
                }
            }
            Some(_) => {
                return Err(SchemaError::Invalid(
                    "type must be a string or a list".into(),
                ));
            }
            None => {}
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = obj.get(key) {
                for branch in branches {
                    let b = Self::compile(branch, root, depth + 1)?;
                    schema.types = schema.types.union(b.types);
                    if schema.format == Format::None {
                        schema.format = b.format;
                    }
                    schema.enum_strings.extend(b.enum_strings);
                    if b.items.is_some() {
                        schema.items = b.items;
                    }
                    if !b.properties.is_empty() {
                        schema.properties = b.properties;
                    }
                }
            }
        }
        if let Some(Value::Array(members)) = obj.get("enum") {
            for m in members {
                match m {
                    Value::String(s) => {
                        schema.enum_strings.push(s.clone());
                        if !obj.contains_key("type") {
                            schema.types = schema.types.union(Types::STRING);
                        }
                    }
                    Value::Number(_) if !obj.contains_key("type") => {
                        schema.types = schema.types.union(Types::NUMBER)
                    }
                    _ => {}
                }
            }
        }
        if let Some(Value::String(s)) = obj.get("const") {
            schema.enum_strings.push(s.clone());
        }
        schema.format = match obj.get("format").and_then(Value::as_str) {
            Some("date-time") => Format::DateTime,
            Some("email" | "idn-email" | "hostname" | "idn-hostname" | "uuid") => {
                Format::CaseInsensitive
            }
            _ => schema.format,
        };
        if let Some(Value::Object(props)) = obj.get("properties") {
            for (name, sub) in props {
                schema
                    .properties
                    .push((name.clone(), Self::compile(sub, root, depth + 1)?));
            }
            schema.properties.sort_by(|a, b| a.0.cmp(&b.0));
            if schema.types.is_unknown() {
                schema.types = schema.types.union(Types::OBJECT);
            }
        }
        if let Some(additional @ Value::Object(_)) = obj.get("additionalProperties") {
            schema.additional = Some(Box::new(Self::compile(additional, root, depth + 1)?));
        }
        if let Some(items) = obj.get("items") {
            schema.items = Some(Box::new(Self::compile(items, root, depth + 1)?));
        }
        if let Some(mode) = obj.get("x-dedup") {
            let mode = mode
                .as_str()
                .ok_or_else(|| SchemaError::Invalid("x-dedup must be a string".into()))?;
            schema.mode = Some(FieldMode::parse(mode)?);
        }
        Ok(schema)
    }
}

/// An OpenAPI operation object (`parameters` list and/or `requestBody`) as the one flat object schema
/// Bedrock's event flattens it into: every parameter's `schema` and every property of the first request
/// body content's schema, by name. `None` when `op` is no operation.
fn openapi_operation(op: &Value) -> Option<Value> {
    let parameters = op.get("parameters").and_then(Value::as_array);
    let body = op
        .pointer("/requestBody/content")
        .and_then(Value::as_object)
        .and_then(|content| content.values().find_map(|media| media.get("schema")));
    if parameters.is_none() && body.is_none() {
        return None;
    }
    let mut properties = serde_json::Map::new();
    for parameter in parameters.into_iter().flatten() {
        if let (Some(name), Some(schema)) = (
            parameter.get("name").and_then(Value::as_str),
            parameter.get("schema"),
        ) {
            properties.insert(name.to_string(), schema.clone());
        }
    }
    if let Some(Value::Object(body_properties)) = body.and_then(|b| b.get("properties")) {
        properties.extend(body_properties.clone());
    }
    Some(serde_json::json!({"type": "object", "properties": properties}))
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
        assert!(
            Schema::from_json(&json!({"$ref": "#"})).is_err(),
            "self-reference is bounded"
        );
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
