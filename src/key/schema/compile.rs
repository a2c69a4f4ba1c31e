//! Compiling a JSON Schema (or an OpenAPI operation) into a [`Schema`]: `$ref`s resolved within
//! the document, unions and intersections merged, bounded in depth and size.

use regex::Regex;
use serde_json::Value;

use super::{
    FieldMode, Format, MAX_NODES, MAX_REF_DEPTH, MAX_UNFOLDINGS, Schema, SchemaError, Types,
    pointer_step,
};
use serde_json::Map;

/// One compilation: the document `$ref`s resolve in, and the work done so far.
pub(super) struct Compiler<'d> {
    document: &'d Value,
    /// The refs being followed (to cut cycles) and the nodes compiled (to bound the work).
    refs: Vec<&'d str>,
    nodes: usize,
}

impl<'d> Compiler<'d> {
    pub(super) fn new(document: &'d Value) -> Self {
        Compiler {
            document,
            refs: Vec::new(),
            nodes: 0,
        }
    }

    pub(super) fn resolve(&self, reference: &str) -> Result<&'d Value, SchemaError> {
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

    pub(super) fn compile(&mut self, node: &'d Value, depth: usize) -> Result<Schema, SchemaError> {
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
        read_types(obj, &mut schema)?;
        // Before the members: a type `enum` or `const` implies keeps `properties` from implying
        // an object.
        read_value_keywords(obj, &mut schema)?;
        self.members(obj, depth, &mut schema)?;
        let mut schema = self.combined(obj, depth, schema)?;
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

    /// `properties`, `patternProperties`, `additionalProperties`, `items` and `prefixItems`.
    fn members(
        &mut self,
        obj: &'d Map<String, Value>,
        depth: usize,
        schema: &mut Schema,
    ) -> Result<(), SchemaError> {
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
        Ok(())
    }

    /// `schema` combined with what `$ref`, `allOf`, `anyOf` and `oneOf` say.
    fn combined(
        &mut self,
        obj: &'d Map<String, Value>,
        depth: usize,
        mut schema: Schema,
    ) -> Result<Schema, SchemaError> {
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
        Ok(schema)
    }

    /// Tuple items (`prefixItems`, or a draft-4 `items` list): each position may differ, so an
    /// element is typed by what all positions agree on.
    pub(super) fn tuple(
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
    pub(super) fn operation(&mut self, op: &'d Value) -> Result<Schema, SchemaError> {
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
    pub(super) fn parameters(&mut self, holder: &'d Value) -> Result<Schema, SchemaError> {
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

/// `type` (a name or a list of names).
fn read_types(obj: &Map<String, Value>, schema: &mut Schema) -> Result<(), SchemaError> {
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
    Ok(())
}

/// `enum`, `const` (which imply a type where none is stated), `format`, `x-dedup` and `default`.
fn read_value_keywords(obj: &Map<String, Value>, schema: &mut Schema) -> Result<(), SchemaError> {
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
            literal(m, schema);
        }
    }
    if let Some(value) = obj.get("const") {
        literal(value, schema);
    }
    schema.format = match obj.get("format").and_then(Value::as_str) {
        Some("date-time") => Format::DateTime,
        Some("email" | "idn-email" | "hostname" | "idn-hostname" | "uuid") => {
            Format::CaseInsensitive
        }
        _ => Format::None,
    };
    match obj.get("x-dedup") {
        None => {}
        Some(Value::String(mode)) => {
            schema.mode = Some(FieldMode::parse(mode).map_err(|e| e.under("/x-dedup"))?);
        }
        Some(Value::Object(options)) => {
            for (option, value) in options {
                match (option.as_str(), value.as_str()) {
                    ("undeclared", Some("ignore")) => schema.ignores_undeclared = true,
                    ("undeclared", Some("key")) => {}
                    _ => {
                        return Err(SchemaError::invalid(format!(
                            "unknown x-dedup option {option:?}: {value} (undeclared: ignore|key)"
                        ))
                        .under("/x-dedup"));
                    }
                }
            }
        }
        Some(_) => {
            return Err(
                SchemaError::invalid("x-dedup must be a mode or an object of options")
                    .under("/x-dedup"),
            );
        }
    }
    match obj.get("default") {
        Some(Value::Null) => schema.default_null = true,
        Some(default) => schema.default = Some(default.to_string().into_boxed_str()),
        None => {}
    }
    Ok(())
}
