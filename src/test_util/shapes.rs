//! The real-shape cases (`tests/cases/real_shapes.json`) and the three ways a schema reaches the
//! keyer: inline with the call, in a policy file's `tool_definitions`, and inside the container a
//! platform declares it in (an AgentCore Gateway target, a Bedrock Agents action group). The CLI
//! suite runs them through `dedup key`, the product suite through the handler.

use serde_json::{Value, json};

use super::harness as fixture;

#[derive(Debug, Clone)]
pub struct Case {
    pub id: String,
    pub tool: String,
    pub definition: Value,
    pub pairs: Vec<Pair>,
    /// The definition must be refused with this text.
    pub error: Option<String>,
    /// The case's `tools` entry in the policy file (`{"dedup": "off"}`), if any.
    pub policy: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct Pair {
    pub a: String,
    pub b: String,
    pub expect: Expect,
    pub why: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// One key: the tool runs once.
    Same,
    /// Two keys: the tool runs twice.
    Distinct,
    /// The policy turns dedup off: one key, and the tool runs each time.
    RunsEach,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Inline,
    PolicyFile,
    Container,
}

pub const WAYS: [Way; 3] = [Way::Inline, Way::PolicyFile, Way::Container];

/// What the definition is, which decides the container it comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    JsonSchema,
    BedrockFunction,
    OpenApi,
}

impl Case {
    pub fn kind(&self) -> Kind {
        if self.definition.get("openapi").is_some() {
            Kind::OpenApi
        } else if self.definition["parameters"]
            .as_object()
            .is_some_and(|p| p.values().all(|v| v.get("required").is_some()))
        {
            Kind::BedrockFunction
        } else {
            Kind::JsonSchema
        }
    }

    /// The definition inside the container its platform declares it in.
    pub fn container(&self) -> Value {
        match self.kind() {
            // A Gateway target as CreateGatewayTarget names it: its tools are listed (and their
            // policy entries named) as `office___<tool>`.
            Kind::JsonSchema => json!({"name": GATEWAY_TARGET,
                "targetConfiguration": {"mcp": {"lambda": {
                "toolSchema": {"inlinePayload": [self.definition]}}}}}),
            Kind::BedrockFunction => {
                json!({"actionGroupName": "rooms", "functionSchema": {"functions": [self.definition]}})
            }
            Kind::OpenApi => json!({"actionGroupName": "notify",
                "apiSchema": {"payload": self.definition.to_string()}}),
        }
    }

    /// The name the policy file gives the tool: a Gateway tool's is the name the Gateway lists.
    pub fn policy_name(&self, way: Way) -> String {
        match (way, self.kind()) {
            (Way::Container, Kind::JsonSchema) => {
                format!("{GATEWAY_TARGET}___{}", self.tool)
            }
            _ => self.tool.clone(),
        }
    }

    /// The schema given with the call, for `way`.
    pub fn inline_schema(&self, way: Way) -> Option<&Value> {
        (way == Way::Inline).then_some(&self.definition)
    }

    /// The policy file for `way`: the case's `tools` entry, and the definition unless it is inline.
    pub fn policy_file(&self, way: Way) -> Value {
        let mut file = json!({});
        if let Some(policy) = &self.policy {
            file["tools"] = json!({ self.policy_name(way): policy });
        }
        match way {
            Way::Inline => {}
            Way::PolicyFile => file["tool_definitions"] = json!([self.definition]),
            Way::Container => file["tool_definitions"] = json!([self.container()]),
        }
        file
    }

    /// The Bedrock parameter type the definition declares for `name`.
    #[allow(dead_code)] // the product suite's; the CLI suite sends no Bedrock events
    pub fn declared_type(&self, name: &str) -> &str {
        self.definition["parameters"][name]["type"]
            .as_str()
            .unwrap_or("string")
    }
}

/// The Gateway target the JSON Schema cases are listed under in their container.
pub const GATEWAY_TARGET: &str = "office";

pub fn cases() -> Vec<Case> {
    let path = fixture::root().join("tests/cases/real_shapes.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let text = |v: &Value, k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("{k} in {v}"))
            .to_string()
    };
    file["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            id: text(c, "id"),
            tool: text(c, "tool"),
            definition: c["definition"].clone(),
            pairs: c["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| Pair {
                    a: text(p, "a"),
                    b: text(p, "b"),
                    expect: match p["expect"].as_str() {
                        Some("same") => Expect::Same,
                        Some("distinct") => Expect::Distinct,
                        Some("runs_each") => Expect::RunsEach,
                        other => panic!("expect {other:?}"),
                    },
                    why: text(p, "why"),
                })
                .collect(),
            error: c.get("error").and_then(Value::as_str).map(str::to_string),
            policy: c.get("policy").cloned(),
        })
        .collect()
}
