//! Finding tool definitions in the containers providers write them in (a list, an MCP
//! `tools/list` result, an AgentCore Gateway target, a Bedrock action group, an OpenAPI document).

use serde_json::Value;

use super::{Compiler, SCHEMA_KEYWORDS, Schema, SchemaError};

/// `/name` as a JSON pointer step (`~` and `/` escaped).
pub(super) fn pointer_step(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// A Bedrock Agents function's `parameters`: a map from parameter name to `{type, required,
/// description}`, with none of the keywords that would make it a JSON Schema.
pub(super) fn is_parameter_map(map: &serde_json::Map<String, Value>) -> bool {
    !map.is_empty()
        && !SCHEMA_KEYWORDS.iter().any(|k| map.contains_key(*k))
        && map
            .values()
            .all(|v| v.get("type").is_some_and(Value::is_string))
}

pub(super) fn is_openapi_operation(op: &Value) -> bool {
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
pub(super) const GATEWAY_TOOL_DELIMITER: &str = "___";

/// Where the containers [`tool_definitions`] opens keep their list of definitions.
pub(super) const DEFINITION_LISTS: [&str; 5] = [
    "/tools",
    "/toolSchema/inlinePayload",
    "/targetConfiguration/mcp/lambda/toolSchema/inlinePayload",
    "/functionSchema/functions",
    "/functions",
];

pub(super) fn is_openapi_document(value: &Value) -> bool {
    value.get("paths").is_some_and(Value::is_object)
        && (value.get("openapi").is_some() || value.get("swagger").is_some())
}

/// Whether `value` holds definitions rather than being one.
pub(super) fn is_container(value: &Value) -> bool {
    value.is_array()
        || DEFINITION_LISTS
            .iter()
            .any(|list| value.pointer(list).is_some_and(Value::is_array))
        || value.pointer("/apiSchema/payload").is_some()
        || is_openapi_document(value)
}

pub(super) fn collect_definitions(container: &Value, label: &str, found: &mut Vec<Definition>) {
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
        // The text as Bedrock keeps it, or the document already read (a config document reads
        // YAML payloads and S3 schemas into their value).
        match payload {
            Value::Object(_) => openapi_document(payload, found),
            Value::String(text) => match serde_json::from_str::<Value>(text) {
                Ok(document) => openapi_document(&document, found),
                Err(e) => found.push(named(SchemaError::invalid(format!(
                    "apiSchema.payload is not JSON ({e}); give the OpenAPI document as JSON, or \
                     load it through a config document, which reads YAML"
                )))),
            },
            _ => found.push(named(SchemaError::invalid(
                "apiSchema.payload must be the OpenAPI document or its text",
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

/// The OpenAPI operations `container` defines that have an `operationId`, each as
/// `(operationId, "METHOD /path")`: Bedrock calls an action group's operation by its method and
/// path, so a policy written under the `operationId` must reach that name too. Gateway targets are
/// left out: the Gateway lists an OpenAPI target's tools by their `operationId`.
pub fn operation_ids(container: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut pending = vec![container];
    while let Some(value) = pending.pop() {
        if value.get("targetConfiguration").is_some() {
            continue;
        }
        if let Value::Array(items) = value {
            pending.extend(items);
            continue;
        }
        if let Some(Value::Array(items)) = DEFINITION_LISTS.iter().find_map(|l| value.pointer(l)) {
            pending.extend(items);
            continue;
        }
        let document = match value.pointer("/apiSchema/payload") {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
            Some(payload) => Some(payload.clone()),
            None => is_openapi_document(value).then(|| value.clone()),
        };
        let Some(paths) = document
            .as_ref()
            .and_then(|d| d.get("paths"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (path, item) in paths {
            for method in HTTP_METHODS {
                let id = item
                    .get(method)
                    .and_then(|op| op.get("operationId"))
                    .and_then(Value::as_str);
                if let Some(id) = id {
                    let bedrock_name = bedrock_name(method, path);
                    found.push((id.to_string(), bedrock_name));
                }
            }
        }
    }
    found
}

pub(super) const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// An operation's name as Bedrock calls it: `METHOD /path`.
fn bedrock_name(method: &str, path: &str) -> String {
    format!("{} {path}", method.to_ascii_uppercase())
}

/// Every operation of an OpenAPI `document`, by the name Bedrock calls it (`METHOD /path`), in
/// the document's path order.
pub fn operation_names(document: &Value) -> Vec<String> {
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return Vec::new();
    };
    paths
        .iter()
        .flat_map(|(path, item)| {
            HTTP_METHODS
                .iter()
                .filter(|method| item.get(**method).is_some())
                .map(move |method| bedrock_name(method, path))
        })
        .collect()
}

pub(super) fn openapi_document(document: &Value, found: &mut Vec<Definition>) {
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        return;
    };
    for (path, item) in paths {
        for method in HTTP_METHODS {
            let Some(op) = item.get(method) else { continue };
            let bedrock_name = bedrock_name(method, path);
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
