//! The schema compiler's tests.

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
    let (name, schema) = Schema::from_tool_definition(&json!({"name": "book_room", "parameters": {
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
    let extra = Schema::from_json(&json!({"properties": {"currency": {"enum": ["USD"]}}})).unwrap();
    let currency = declared.property("currency").unwrap().types;
    assert!(currency.is_unknown() && currency.contains(Types::TEXT));
    let merged = declared.overlay(&extra);
    assert_eq!(merged.property("currency").unwrap().enum_strings, ["USD"]);
    assert_eq!(merged.property("currency").unwrap().types, Types::STRING);
    assert_eq!(merged.property("amount").unwrap().types, Types::NUMBER);
    assert!(Schema::from_declared_types([("x", "float")]).is_err());
}
