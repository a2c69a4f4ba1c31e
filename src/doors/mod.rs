//! Which door an invocation came in by: a cheap look at the event (and its client context), then
//! the door's own parse. A recognised event that is malformed is refused in its door's format
//! where the format can carry it.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::agentcore::{self, GatewayCall};
use crate::answer::{HandlerError, Unanswerable, raw};
use crate::bedrock::ActionGroupCall;
use crate::envelope;
use crate::executor::Outcome;
use crate::seam::{EntryPoint, json_type};

/// The `custom` map of a Lambda client context.
type ClientContext = HashMap<String, String>;

/// The member that marks a Gateway interceptor invocation.
pub(crate) const INPUT_VERSION: &str = "interceptorInputVersion";

/// True when `event` is a Gateway interceptor invocation.
pub(crate) fn is_interception(event: &Value) -> bool {
    event.get(INPUT_VERSION).is_some()
}

/// One invocation as seen by the entry point it came in by.
// One per invocation, on the stack and never in a collection: boxing the large variant would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Door<'a> {
    /// A Bedrock Agents action-group event.
    Bedrock(ActionGroupCall<'a>),
    /// An AgentCore Gateway Lambda-target call.
    AgentCore(GatewayCall<'a>),
    /// The harness-neutral invoke envelope.
    Envelope(envelope::Envelope),
}

/// An invocation refused before it had a call: already written in the caller's format.
#[derive(Debug)]
pub struct Refusal {
    /// The answer to send.
    pub response: Result<Box<RawValue>, HandlerError>,
    /// Why the invocation was refused, for the telemetry line.
    pub reason: String,
    /// The tool, when the refusal got that far.
    pub tool: Option<String>,
}

/// The door an event is shaped for, by the same cheap look [`Door::detect`] takes (a client
/// context naming a Gateway tool first, then the interceptor's marker member, then the other
/// doors'). `None`: no door's.
pub fn door_name(event: &Value, client_context: Option<&ClientContext>) -> Option<&'static str> {
    // The client context first: the invoker (a Gateway) writes it, while a Lambda target's event
    // is the tool's arguments, which the MCP client writes, and may be shaped as an interception.
    if agentcore::is_gateway_call(client_context) {
        Some("agentcore")
    } else if is_interception(event) {
        Some("interceptor")
    } else if event
        .as_object()
        .is_some_and(|o| o.contains_key("actionGroup"))
    {
        Some("bedrock")
    } else if envelope::is_envelope(event) {
        Some("envelope")
    } else {
        None
    }
}

impl<'a> Door<'a> {
    /// Flavour detection: the first match wins, in this order (each test is a map lookup):
    /// 1. the client context names an AgentCore Gateway tool (`bedrockAgentCoreToolName`);
    /// 2. the event is an object with `actionGroup` (Bedrock Agents);
    /// 3. the event is an object with `tool` (the invoke envelope).
    ///
    /// A recognised event that is malformed is refused in its own format where it can be.
    pub fn detect(
        event: &'a Value,
        client_context: Option<&'a HashMap<String, String>>,
    ) -> Result<Door<'a>, Refusal> {
        if let Some(custom) = client_context.filter(|c| agentcore::is_gateway_call(Some(c))) {
            return GatewayCall::parse(event, custom)
                .map(Door::AgentCore)
                .map_err(|e| {
                    let notice = agentcore::gateway_refusal(&e);
                    Refusal {
                        response: raw(notice.body_json()),
                        reason: e.to_string(),
                        tool: None,
                    }
                });
        }
        let object = event.as_object();
        if object.is_some_and(|o| o.contains_key("actionGroup")) {
            return ActionGroupCall::parse(event)
                .map(Door::Bedrock)
                .map_err(|e| Refusal {
                    reason: "unrecognised event".into(),
                    response: Err(HandlerError::InvalidEvent(Unanswerable::Bedrock(e))),
                    tool: None,
                });
        }
        if envelope::is_envelope(event) {
            return envelope::Envelope::parse(event)
                .map(Door::Envelope)
                .map_err(|e| {
                    let notice = envelope::envelope_refusal(&e);
                    let dedup = crate::answer::dedup(Outcome::BadRequest, None);
                    Refusal {
                        response: raw(envelope::error(&notice, &dedup)),
                        reason: e.to_string(),
                        tool: None,
                    }
                });
        }
        let what = match event {
            Value::Object(_) => "an object with none of those members".to_string(),
            other => format!("the event is a JSON {}", json_type(other)),
        };
        Err(Refusal {
            reason: "unrecognised event".into(),
            response: Err(HandlerError::InvalidEvent(Unanswerable::NoEntryPoint(what))),
            tool: None,
        })
    }

    /// The parsed call behind the door (for callers that inspect one without running it).
    pub fn entry_point(&self) -> &dyn EntryPoint {
        match self {
            Door::Bedrock(call) => call,
            Door::AgentCore(call) => call,
            Door::Envelope(call) => call,
        }
    }
}

/// The entry points this deployment serves (`DEDUP_DOORS`, comma-separated names; all when unset).
/// The SAM and CDK stacks set it from what they wire, so that a principal allowed to invoke the
/// function cannot pick another door by the shape of its event (an envelope harness sending
/// interceptor-shaped events to write catalogs, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doors {
    /// `bedrock`: Bedrock Agents action groups.
    pub bedrock: bool,
    /// `agentcore`: AgentCore Gateway Lambda targets.
    pub agentcore: bool,
    /// `interceptor`: the AgentCore Gateway interceptor.
    pub interceptor: bool,
    /// `envelope`: the invoke envelope.
    pub envelope: bool,
}

impl Doors {
    /// The environment variable.
    pub const VAR: &'static str = "DEDUP_DOORS";
    /// Every door.
    pub const ALL: Doors = Doors {
        bedrock: true,
        agentcore: true,
        interceptor: true,
        envelope: true,
    };
    const NAMES: [&'static str; 4] = ["bedrock", "agentcore", "interceptor", "envelope"];

    /// Parses a comma-separated list of door names; `none` names no door (a stack that wires
    /// nothing yet writes `none`, and every event is then refused, saying so).
    pub fn parse(text: &str) -> Result<Doors, String> {
        let mut doors = Doors {
            bedrock: false,
            agentcore: false,
            interceptor: false,
            envelope: false,
        };
        for name in crate::seam::comma_list(text) {
            match name.to_ascii_lowercase().as_str() {
                "bedrock" => doors.bedrock = true,
                "agentcore" => doors.agentcore = true,
                "interceptor" => doors.interceptor = true,
                "envelope" => doors.envelope = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "unknown door {other:?}: expected some of {}, or none",
                        Doors::NAMES.join(",")
                    ));
                }
            }
        }
        Ok(doors)
    }

    /// Whether the door named `name` (one of `bedrock`, `agentcore`, `interceptor`, `envelope`) is
    /// served.
    pub fn serves(&self, name: &str) -> bool {
        match name {
            "bedrock" => self.bedrock,
            "agentcore" => self.agentcore,
            "interceptor" => self.interceptor,
            "envelope" => self.envelope,
            _ => false,
        }
    }

    /// The doors served, by name.
    pub fn names(&self) -> Vec<&'static str> {
        Doors::NAMES
            .into_iter()
            .filter(|n| self.serves(n))
            .collect()
    }
}

impl Default for Doors {
    fn default() -> Doors {
        Doors::ALL
    }
}
