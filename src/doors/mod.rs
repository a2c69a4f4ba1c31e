//! The doors: every way an invocation comes in, and the port they share.
//!
//! - [`bedrock`], `agentcore`, `envelope`: the doors that invoke the tool themselves (Bedrock
//!   Agents action groups, the AgentCore Gateway Lambda target, the harness-neutral envelope).
//!   Each implements [`port::EntryPoint`].
//! - `interceptor`: the AgentCore Gateway interceptor, which claims at REQUEST and settles at
//!   RESPONSE while the Gateway calls the target.
//! - [`port`]: what every door hands the executor and writes back, format-free.
//! - `refusal`: what an invocation no door can answer gets.
//!
//! [`Door::open`] asks the door question once per invocation: it names the door by a cheap look
//! at the event and its client context, refuses a door this deployment does not serve or one
//! that came through the wrong alias, then parses the event as that door's. A recognised event
//! that is malformed is refused in its door's format where the format can carry it.

pub(crate) mod agentcore;
pub(crate) mod bedrock;
pub(crate) mod envelope;
pub(crate) mod interceptor;
pub(crate) mod port;
pub(crate) mod refusal;

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use agentcore::GatewayCall;
use bedrock::ActionGroupCall;
use interceptor::Intercepted;
use port::{DedupInfo, EntryPoint, json_type};
use refusal::raw;
pub use refusal::{HandlerError, Unanswerable};

/// The `custom` map of a Lambda client context (an AgentCore Gateway names the tool there).
pub type ClientContext = HashMap<String, String>;

/// A door's name, as `DEDUP_DOORS`, the logs and the metrics write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DoorName {
    /// Bedrock Agents action groups.
    Bedrock,
    /// AgentCore Gateway Lambda targets.
    AgentCore,
    /// The AgentCore Gateway interceptor.
    Interceptor,
    /// The invoke envelope.
    Envelope,
}

impl DoorName {
    /// Every door, in the order `DEDUP_DOORS` lists them.
    pub const ALL: [DoorName; 4] = [
        DoorName::Bedrock,
        DoorName::AgentCore,
        DoorName::Interceptor,
        DoorName::Envelope,
    ];

    /// The door's name.
    pub fn as_str(self) -> &'static str {
        match self {
            DoorName::Bedrock => "bedrock",
            DoorName::AgentCore => "agentcore",
            DoorName::Interceptor => "interceptor",
            DoorName::Envelope => "envelope",
        }
    }

    /// The door named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<DoorName> {
        DoorName::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(name))
    }

    /// The door an event is shaped for, by a cheap look (each test is a map lookup; the first
    /// match wins): a client context naming a Gateway tool, then the interceptor's marker member,
    /// then `actionGroup`, then the envelope's `tool`. `None`: no door's.
    pub fn of(event: &Value, client_context: Option<&ClientContext>) -> Option<DoorName> {
        // The client context first: the invoker (a Gateway) writes it, while a Lambda target's
        // event is the tool's arguments, which the MCP client writes, and may be shaped as an
        // interception.
        if agentcore::is_gateway_call(client_context) {
            Some(DoorName::AgentCore)
        } else if interceptor::is_interception(event) {
            Some(DoorName::Interceptor)
        } else if event
            .as_object()
            .is_some_and(|o| o.contains_key("actionGroup"))
        {
            Some(DoorName::Bedrock)
        } else if envelope::is_envelope(event) {
            Some(DoorName::Envelope)
        } else {
            None
        }
    }
}

/// One invocation as seen by the door it came in by.
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
    /// An AgentCore Gateway interceptor invocation (REQUEST or RESPONSE).
    Interceptor(Interception<'a>),
}

/// An interceptor invocation as read ([`interceptor`]'s own type, opaque outside the crate).
#[derive(Debug)]
pub struct Interception<'a>(pub(crate) Intercepted<'a>);

/// Why an invocation was refused before it had a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The event is malformed for its door, or shaped for none.
    BadEvent,
    /// Shaped for a door this deployment does not serve, or sent through the wrong alias.
    DoorRefused,
}

/// An invocation refused before it had a call: already written in the caller's format.
#[derive(Debug)]
pub struct Refusal {
    /// The door the event is shaped for, if any.
    pub door: Option<DoorName>,
    /// What kind of refusal, for the outcome reported.
    pub kind: RefusalKind,
    /// The answer to send.
    pub response: Result<Box<RawValue>, HandlerError>,
    /// Why the invocation was refused, for the telemetry line.
    pub reason: String,
}

/// Which doors answer, and through which alias: the deployment's gate.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate {
    /// `DEDUP_DOORS`: the doors this deployment serves.
    pub(crate) served: Doors,
    /// `DEDUP_INTERCEPTOR_ALIAS`: the alias that serves the interceptor door alone.
    pub(crate) interceptor_alias: Option<String>,
    /// `DEDUP_GATEWAY_ID`: the gateway's id when an interceptor invocation names none.
    pub(crate) gateway_id: Option<String>,
}

impl Gate {
    /// Why an event shaped for `door` and invoked through `qualifier` may not come in, if it may
    /// not. With `DEDUP_INTERCEPTOR_ALIAS` set, the interceptor door is served through that alias
    /// alone and that alias serves nothing else: the Gateway's role may invoke the alias, a
    /// harness only the function's other alias, so no envelope invoker can write a catalog with
    /// an interceptor-shaped event.
    fn refuses(&self, door: DoorName, qualifier: Option<&str>) -> Option<(Unanswerable, String)> {
        if !self.served.serves(door) {
            tracing::warn!(
                door = door.as_str(),
                "refused an event of a door this deployment does not serve"
            );
            let served = match self.served.names().join(",") {
                none if none.is_empty() => "no".to_string(),
                names => names,
            };
            let why = format!("door {} not served", door.as_str());
            return Some((
                Unanswerable::DoorNotServed {
                    door: door.as_str(),
                    served,
                },
                why,
            ));
        }
        let alias = self.interceptor_alias.as_deref()?;
        if (qualifier == Some(alias)) == (door == DoorName::Interceptor) {
            return None;
        }
        tracing::warn!(
            door = door.as_str(),
            qualifier,
            alias,
            "refused an event that came through the wrong alias for its door"
        );
        let refused = Unanswerable::WrongAlias {
            door: door.as_str(),
            alias: alias.to_string(),
            qualifier: qualifier.unwrap_or("$LATEST").to_string(),
        };
        Some((
            refused,
            format!("door {} through the wrong alias", door.as_str()),
        ))
    }
}

impl<'a> Door<'a> {
    /// The door question, asked once: names the door ([`DoorName::of`]), refuses it at the
    /// `gate` (not served, wrong alias: a Lambda error, touching nothing), then parses the event
    /// as that door's.
    pub(crate) fn open(
        event: &'a Value,
        client_context: Option<&'a ClientContext>,
        qualifier: Option<&str>,
        gate: &Gate,
    ) -> Result<Door<'a>, Refusal> {
        let name = DoorName::of(event, client_context);
        if let Some(door) = name
            && let Some((refused, reason)) = gate.refuses(door, qualifier)
        {
            return Err(Refusal {
                door: name,
                kind: RefusalKind::DoorRefused,
                response: Err(HandlerError::InvalidEvent(refused)),
                reason,
            });
        }
        Door::parse(name, event, client_context, gate.gateway_id.as_deref())
    }

    /// Parses an event as the door it is shaped for, with no gate (for callers that inspect an
    /// event without serving it: the replay corpus, the benches).
    pub fn detect(
        event: &'a Value,
        client_context: Option<&'a ClientContext>,
    ) -> Result<Door<'a>, Refusal> {
        Door::parse(
            DoorName::of(event, client_context),
            event,
            client_context,
            None,
        )
    }

    fn parse(
        name: Option<DoorName>,
        event: &'a Value,
        client_context: Option<&'a ClientContext>,
        gateway_id: Option<&str>,
    ) -> Result<Door<'a>, Refusal> {
        let refused = |response, reason: String| Refusal {
            door: name,
            kind: RefusalKind::BadEvent,
            response,
            reason,
        };
        match (name, client_context) {
            (Some(DoorName::AgentCore), Some(custom)) => GatewayCall::parse(event, custom)
                .map(Door::AgentCore)
                .map_err(|e| {
                    let notice = agentcore::gateway_refusal(&e);
                    refused(raw(notice.body_json()), e.to_string())
                }),
            (Some(DoorName::Interceptor), _) => {
                Intercepted::parse(event, client_context, gateway_id)
                    .map(|read| Door::Interceptor(Interception(read)))
                    .map_err(|e| {
                        let why = Unanswerable::Interceptor(e.reason().to_string());
                        refused(Err(HandlerError::InvalidEvent(why)), e.to_string())
                    })
            }
            (Some(DoorName::Bedrock), _) => ActionGroupCall::parse(event)
                .map(Door::Bedrock)
                .map_err(|e| {
                    let reason = format!("invalid Bedrock Agents event: {e}");
                    refused(
                        Err(HandlerError::InvalidEvent(Unanswerable::Bedrock(e))),
                        reason,
                    )
                }),
            (Some(DoorName::Envelope), _) => envelope::Envelope::parse(event)
                .map(Door::Envelope)
                .map_err(|e| {
                    let notice = envelope::envelope_refusal(&e);
                    let dedup = DedupInfo {
                        outcome: crate::telemetry::Outcome::BadRequest.caller_word(),
                        key: None,
                        first_ran_ms: None,
                        mark: false,
                    };
                    refused(raw(envelope::error(&notice, &dedup)), e.to_string())
                }),
            // `DoorName::of` names the AgentCore door only with a client context.
            (None | Some(DoorName::AgentCore), _) => {
                let what = match event {
                    Value::Object(_) => "an object with none of those members".to_string(),
                    other => format!("the event is a JSON {}", json_type(other)),
                };
                let why = Unanswerable::NoEntryPoint(what);
                Err(refused(
                    Err(HandlerError::InvalidEvent(why)),
                    "unrecognised event".into(),
                ))
            }
        }
    }

    /// The door's name.
    pub fn name(&self) -> DoorName {
        match self {
            Door::Bedrock(_) => DoorName::Bedrock,
            Door::AgentCore(_) => DoorName::AgentCore,
            Door::Envelope(_) => DoorName::Envelope,
            Door::Interceptor(_) => DoorName::Interceptor,
        }
    }

    /// The parsed call behind a door that invokes the tool itself (for callers that inspect one
    /// without running it); `None` for the interceptor, which never invokes the tool.
    pub fn entry_point(&self) -> Option<&dyn EntryPoint> {
        match self {
            Door::Bedrock(call) => Some(call),
            Door::AgentCore(call) => Some(call),
            Door::Envelope(call) => Some(call),
            Door::Interceptor(_) => None,
        }
    }
}

/// The doors this deployment serves (`DEDUP_DOORS`, comma-separated names; all when unset).
/// The SAM and CDK stacks set it from what they wire, so that a principal allowed to invoke the
/// function cannot pick another door by the shape of its event (an envelope harness sending
/// interceptor-shaped events to write catalogs, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doors([bool; 4]);

impl Doors {
    /// The environment variable.
    pub(crate) const VAR: &'static str = "DEDUP_DOORS";
    /// Every door.
    pub const ALL: Doors = Doors([true; 4]);

    /// Parses a comma-separated list of door names; `none` names no door (a stack that wires
    /// nothing yet writes `none`, and every event is then refused, saying so).
    pub fn parse(text: &str) -> Result<Doors, String> {
        let mut doors = Doors([false; 4]);
        for name in crate::text_list::comma_list(text) {
            if name.eq_ignore_ascii_case("none") {
                continue;
            }
            let door = DoorName::parse(&name).ok_or_else(|| {
                let names: Vec<_> = DoorName::ALL.iter().map(|d| d.as_str()).collect();
                format!(
                    "unknown door {:?}: expected some of {}, or none",
                    name.to_ascii_lowercase(),
                    names.join(",")
                )
            })?;
            doors.0[door as usize] = true;
        }
        Ok(doors)
    }

    /// Whether `door` is served.
    pub fn serves(&self, door: DoorName) -> bool {
        self.0[door as usize]
    }

    /// The doors served, by name.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        DoorName::ALL
            .into_iter()
            .filter(|d| self.serves(*d))
            .map(DoorName::as_str)
            .collect()
    }
}

impl Default for Doors {
    fn default() -> Doors {
        Doors::ALL
    }
}
