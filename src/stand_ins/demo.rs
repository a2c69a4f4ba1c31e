//! The demo action-group tool: every call is a side effect appended to a ledger, answered with a
//! receipt. It is the `demo-tool` Lambda, and `dedup replay` and the tests run the same code
//! in-process as a [`Dispatcher`].
//!
//! It accepts any function or `apiPath` and echoes a receipt, so users can replay their own events.
//! The names it knows shape the receipt: `charge_card` / `POST /charges` (a charge; a
//! `customer_id` starting with `cus_declined` is declined with a FAILURE response, which the
//! executor caches like any final answer), `refund` / `…/refunds`, `create_ticket` /
//! `POST /tickets`.
//!
//! Called as an AgentCore Gateway Lambda target, or routed from the invoke envelope, it receives
//! the arguments object and finds the tool's name in the client context
//! (`bedrockAgentCoreToolName`, or the executor's `dedupTool`); it then answers with the receipt
//! object itself, with `"isError": true` on a decline.
//!
//! The ledger is a JSON Lines file (`DEMO_LEDGER`, default `toolcall-dedup-demo-ledger.jsonl` in
//! the temp directory) or, for replays and tests, memory. A ledger line holds the receipt id, the
//! tool, the session, the `dedup_key` the executor passed, and the arguments.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::dispatch::{DispatchError, Dispatcher, Route, Routes};
use crate::doors::bedrock::{
    self, ActionGroupEvent, DEDUP_KEY_ATTRIBUTE, EventError, ResponseState, response,
};
use crate::doors::port::Forward;
use crate::doors::{agentcore, envelope};

/// The default ledger file name (in the temp directory).
pub const DEFAULT_LEDGER_FILE: &str = "toolcall-dedup-demo-ledger.jsonl";

/// Where side effects are recorded.
#[derive(Debug)]
pub enum Ledger {
    File { path: PathBuf, lock: Mutex<()> },
    Memory(Mutex<Vec<Value>>),
}

impl Ledger {
    pub fn file(path: impl Into<PathBuf>) -> Ledger {
        Ledger::File {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    pub fn memory() -> Ledger {
        Ledger::Memory(Mutex::new(Vec::new()))
    }

    /// Appends one entry. A file entry is one `write` of one line with `O_APPEND`, so concurrent
    /// processes (two `demo-tool` instances) do not interleave.
    pub fn append(&self, entry: Value) -> std::io::Result<()> {
        match self {
            Ledger::File { path, lock } => {
                let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let mut line = entry.to_string();
                line.push('\n');
                let mut file = OpenOptions::new().create(true).append(true).open(path)?;
                file.write_all(line.as_bytes())
            }
            Ledger::Memory(entries) => {
                entries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(entry);
                Ok(())
            }
        }
    }

    /// Every entry so far (a missing file is an empty ledger).
    pub fn entries(&self) -> std::io::Result<Vec<Value>> {
        match self {
            Ledger::File { path, .. } => read_ledger(path),
            Ledger::Memory(entries) => {
                Ok(entries.lock().unwrap_or_else(|p| p.into_inner()).clone())
            }
        }
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            Ledger::File { path, .. } => Some(path),
            Ledger::Memory(_) => None,
        }
    }
}

/// Reads a ledger file; a missing file is empty.
pub fn read_ledger(path: &Path) -> std::io::Result<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .collect()
}

/// Why the demo tool could not answer at all (returned to Lambda as an error).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Event(#[from] EventError),
    #[error("cannot write the ledger: {0}")]
    Ledger(#[from] std::io::Error),
}

impl From<DemoError> for lambda_runtime::Diagnostic {
    fn from(e: DemoError) -> Self {
        let error_type = match &e {
            DemoError::Event(_) => "InvalidEvent",
            DemoError::Ledger(_) => "LedgerUnavailable",
        };
        lambda_runtime::Diagnostic {
            error_type: error_type.into(),
            error_message: e.to_string(),
        }
    }
}

/// The demo tool.
#[derive(Debug)]
pub struct DemoTool {
    ledger: Ledger,
}

impl DemoTool {
    pub fn new(ledger: Ledger) -> DemoTool {
        DemoTool { ledger }
    }

    /// The ledger named by `DEMO_LEDGER`, else the default file in the temp directory.
    pub fn from_env() -> DemoTool {
        let path = std::env::var_os("DEMO_LEDGER")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_LEDGER_FILE));
        DemoTool::new(Ledger::file(path))
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Performs the call in `event`: a Bedrock action-group event, or (with a client context that
    /// names the tool) an arguments object.
    pub fn handle_with_context(
        &self,
        event: &Value,
        custom: Option<&HashMap<String, String>>,
    ) -> Result<Value, DemoError> {
        self.perform_with_context(event, custom)
            .map(|done| done.reply)
    }

    /// [`DemoTool::handle_with_context`], also saying which ledger entry (receipt) it wrote.
    pub fn perform_with_context(
        &self,
        event: &Value,
        custom: Option<&HashMap<String, String>>,
    ) -> Result<Performed, DemoError> {
        let tool = custom.and_then(|c| {
            agentcore::context_value(c, agentcore::TOOL_NAME)
                .map(|t| {
                    t.split_once(agentcore::TOOL_NAME_DELIMITER)
                        .map_or(t.as_str(), |(_, tool)| tool)
                })
                .or(c.get(envelope::DEDUP_TOOL_CONTEXT).map(String::as_str))
        });
        match (tool, event.as_object()) {
            (Some(tool), Some(arguments)) => {
                let dedup_key = custom.and_then(|c| c.get(agentcore::DEDUP_KEY_CONTEXT));
                let session =
                    custom.and_then(|c| agentcore::context_value(c, agentcore::SESSION_ID));
                let (mut receipt, declined, receipt_id) = self.record(
                    tool,
                    arguments.clone(),
                    json!({"session_id": session, "dedup_key": dedup_key}),
                )?;
                if declined {
                    receipt["isError"] = json!(true);
                }
                Ok(Performed {
                    reply: receipt,
                    receipt_id: Some(receipt_id),
                })
            }
            _ => self.perform(event),
        }
    }

    /// Performs the call in `event` and returns its Bedrock response.
    pub fn handle(&self, event: &Value) -> Result<Value, DemoError> {
        self.perform(event).map(|done| done.reply)
    }

    /// [`DemoTool::handle`], also saying which ledger entry (receipt) the call wrote, if any: the
    /// chaos soak ties each side effect to the invocation that made it.
    pub fn perform(&self, event: &Value) -> Result<Performed, DemoError> {
        let envelope = ActionGroupEvent::parse(event)?;
        let reply_to = strip_dedup_key(envelope.reply_to.clone());
        let call = match envelope.tool_call() {
            Ok(call) => call,
            Err(EventError::Arguments { message, .. }) => {
                let body = json!({"error": "invalid_arguments", "message": message});
                return Ok(Performed {
                    reply: response::finish(&reply_to, Some(ResponseState::Reprompt), 400, &body),
                    receipt_id: None,
                });
            }
            Err(e) => return Err(e.into()),
        };
        let arguments: Map<String, Value> = call
            .params
            .iter()
            .map(|p| (p.name.to_string(), Value::String(p.value.to_string())))
            .collect();
        let dedup_key = event
            .pointer(&format!("/sessionAttributes/{DEDUP_KEY_ATTRIBUTE}"))
            .and_then(Value::as_str);
        let (receipt, declined, receipt_id) = self.record(
            call.tool(),
            arguments,
            json!({"action_group": call.reply_to.action_group, "session_id": call.session_id,
                   "dedup_key": dedup_key}),
        )?;
        let reply = if declined {
            response::finish(&reply_to, Some(ResponseState::Failure), 402, &receipt)
        } else {
            response::success(&reply_to, &receipt)
        };
        Ok(Performed {
            reply,
            receipt_id: Some(receipt_id),
        })
    }

    /// Records one side effect and builds its receipt: `(receipt, declined, receipt id)`.
    /// `context` (an object) is merged into the ledger entry.
    fn record(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        context: Value,
    ) -> Result<(Value, bool, String), DemoError> {
        let kind = Kind::of(tool);
        let declined = kind == Kind::Charge
            && arguments
                .get("customer_id")
                .and_then(Value::as_str)
                .is_some_and(|c| c.starts_with("cus_declined"));
        let receipt_id = format!("{}_{}", kind.prefix(), uuid::Uuid::new_v4().simple());
        let status = match (kind, declined) {
            (_, true) => "declined",
            (Kind::Ticket, _) => "open",
            _ => "succeeded",
        };
        let mut entry = json!({
            "ts_ms": now_ms(),
            "receipt_id": receipt_id,
            "kind": kind.name(),
            "status": status,
            "tool": tool,
            "arguments": arguments,
        });
        if let (Some(entry), Value::Object(context)) = (entry.as_object_mut(), context) {
            entry.extend(context);
        }
        self.ledger.append(entry)?;
        let mut receipt = json!({"receipt_id": receipt_id, "status": status, "tool": tool});
        for field in [
            "customer_id",
            "amount",
            "currency",
            "charge_id",
            "chargeId",
            "subject",
            "priority",
        ] {
            if let Some(v) = arguments.get(field) {
                receipt[field] = v.clone();
            }
        }
        if kind == Kind::Echo {
            receipt["arguments"] = Value::Object(arguments);
        }
        if declined {
            receipt["decline_code"] = json!("card_declined");
        }
        Ok((receipt, declined, receipt_id))
    }
}

/// What [`DemoTool::perform`] did.
#[derive(Debug, Clone)]
pub struct Performed {
    /// The reply: a Bedrock response, or the receipt object for an arguments-object call.
    pub reply: Value,
    /// The receipt of the ledger entry written; `None` when nothing was (invalid arguments).
    pub receipt_id: Option<String>,
}

/// The tool's reply must not carry the executor's key back into the session.
fn strip_dedup_key(mut reply_to: bedrock::ReplyTo) -> bedrock::ReplyTo {
    reply_to.session_attributes.remove(DEDUP_KEY_ATTRIBUTE);
    reply_to
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Charge,
    Refund,
    Ticket,
    Echo,
}

impl Kind {
    fn of(tool: &str) -> Kind {
        let t = tool.to_ascii_lowercase();
        if t == "charge_card" || t == "post /charges" {
            Kind::Charge
        } else if t == "refund" || t.ends_with("/refunds") {
            Kind::Refund
        } else if t == "create_ticket" || t == "post /tickets" {
            Kind::Ticket
        } else {
            Kind::Echo
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::Charge => "ch",
            Kind::Refund => "re",
            Kind::Ticket => "tk",
            Kind::Echo => "rc",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Charge => "charge",
            Kind::Refund => "refund",
            Kind::Ticket => "ticket",
            Kind::Echo => "echo",
        }
    }
}

/// What a stand-in tool does when it is invoked; [`InProcess`] makes it a [`Dispatcher`]. Tests
/// and the peer driver write only this for a tool of their own.
pub trait StandIn: Send + Sync {
    /// Answers one invocation of `target`: the forwarded payload (and client context), within
    /// `timeout`.
    fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, DispatchError>> + Send;
}

/// The demo tool, as the tool behind a stand-in that changes what it answers.
impl StandIn for DemoTool {
    async fn answer(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        Dispatcher::invoke_forward(self, target, forward, timeout).await
    }
}

/// A stand-in tool as a [`Dispatcher`]: every call routes to it, and it runs in-process, so it
/// cannot outlive the invocation, unless [`InProcess::with_max_run_time`] makes it model a tool
/// Lambda with a timeout of its own. It derefs to the tool, for the test's counters.
pub struct InProcess<T> {
    tool: T,
    max_run_time: Duration,
}

impl<T: StandIn> InProcess<T> {
    /// `tool`, routed to by every call.
    pub fn new(tool: T) -> InProcess<T> {
        InProcess {
            tool,
            max_run_time: Duration::ZERO,
        }
    }

    /// What `max_run_time` reports: the timeout of the tool Lambda this stands in for.
    pub fn with_max_run_time(self, max_run_time: Duration) -> InProcess<T> {
        InProcess {
            max_run_time,
            ..self
        }
    }
}

impl<T> std::ops::Deref for InProcess<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.tool
    }
}

impl<T: StandIn> Dispatcher for InProcess<T> {
    /// Every call routes to the tool.
    fn route(
        &self,
        routes: &Routes,
        action_group: &str,
        tool: &str,
    ) -> Result<Route, DispatchError> {
        Ok(Route {
            max_run_time: self.max_run_time,
            ..Route::in_process("in-process", routes, action_group, tool)
        })
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        let forward = Forward {
            payload,
            client_context: None,
        };
        self.tool.answer(target, forward, timeout).await
    }

    async fn invoke_forward(
        &self,
        target: &str,
        forward: Forward,
        timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.tool.answer(target, forward, timeout).await
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// In-process dispatch: every route leads to this tool.
impl Dispatcher for DemoTool {
    /// In-process: it cannot outlive the invocation.
    fn route(
        &self,
        routes: &Routes,
        action_group: &str,
        tool: &str,
    ) -> Result<Route, DispatchError> {
        Ok(Route::in_process("demo-tool", routes, action_group, tool))
    }

    async fn invoke(
        &self,
        target: &str,
        payload: Vec<u8>,
        _timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.perform_payload(target, &payload)
            .map(|(reply, _receipt)| reply)
    }

    async fn invoke_forward(
        &self,
        target: &str,
        forward: Forward,
        _timeout: Duration,
    ) -> Result<Vec<u8>, DispatchError> {
        self.perform_forward(target, &forward.payload, forward.client_context.as_deref())
            .map(|(reply, _receipt)| reply)
    }
}

impl DemoTool {
    /// What the in-process dispatcher does with a forwarded event: the reply's bytes and the
    /// receipt written, or the error a tool Lambda would raise.
    pub fn perform_payload(
        &self,
        target: &str,
        payload: &[u8],
    ) -> Result<(Vec<u8>, Option<String>), DispatchError> {
        self.perform_forward(target, payload, None)
    }

    /// [`DemoTool::perform_payload`] with the forwarded client context (JSON text), as the Lambda
    /// runtime would hand it to the tool.
    pub fn perform_forward(
        &self,
        target: &str,
        payload: &[u8],
        client_context: Option<&str>,
    ) -> Result<(Vec<u8>, Option<String>), DispatchError> {
        let function_error = |kind: &str, message: String| DispatchError::FunctionError {
            target: target.to_string(),
            kind: kind.to_string(),
            message,
        };
        let event: Value = serde_json::from_slice(payload)
            .map_err(|e| function_error("InvalidEvent", e.to_string()))?;
        // What the Lambda runtime would hand the tool as `Context::client_context.custom`.
        #[derive(serde::Deserialize)]
        struct ClientContext {
            #[serde(default)]
            custom: HashMap<String, String>,
        }
        let context: Option<ClientContext> = match client_context {
            Some(json) => Some(
                serde_json::from_str(json)
                    .map_err(|e| function_error("InvalidClientContext", e.to_string()))?,
            ),
            None => None,
        };
        let done = self
            .perform_with_context(&event, context.as_ref().map(|c| &c.custom))
            .map_err(|e| {
                let d = lambda_runtime::Diagnostic::from(e);
                function_error(&d.error_type, d.error_message)
            })?;
        let reply = serde_json::to_vec(&done.reply)
            .map_err(|e| function_error("Internal", e.to_string()))?;
        Ok((reply, done.receipt_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(function: &str, params: Value) -> Value {
        json!({"messageVersion": "1.0", "agent": {"id": "A"}, "sessionId": "s", "actionGroup": "payments",
               "function": function, "parameters": params, "inputText": "x",
               "sessionAttributes": {"dedup_key": "k1", "tenant": "t"}, "promptSessionAttributes": {}})
    }

    #[test]
    fn a_charge_is_one_ledger_entry_and_a_receipt() {
        let tool = DemoTool::new(Ledger::memory());
        let reply = tool
            .handle(&event("charge_card", json!([{"name": "customer_id", "value": "cus_1"},
                                                  {"name": "amount", "type": "number", "value": "5"}])))
            .unwrap();
        let body: Value = serde_json::from_str(
            reply["response"]["functionResponse"]["responseBody"]["TEXT"]["body"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert!(body["receipt_id"].as_str().unwrap().starts_with("ch_"));
        assert_eq!(body["amount"], "5");
        assert!(
            reply["response"]["functionResponse"]
                .get("responseState")
                .is_none()
        );
        assert_eq!(reply["sessionAttributes"], json!({"tenant": "t"}));
        let entries = tool.ledger().entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["dedup_key"], "k1");
        assert_eq!(entries[0]["kind"], "charge");
    }

    #[test]
    fn any_function_is_echoed_and_declines_are_failures() {
        let tool = DemoTool::new(Ledger::memory());
        let reply = tool
            .handle(&event(
                "lookup_weather",
                json!([{"name": "city", "value": "Oslo"}]),
            ))
            .unwrap();
        let body = reply["response"]["functionResponse"]["responseBody"]["TEXT"]["body"]
            .as_str()
            .unwrap();
        assert!(body.contains("\"rc_") && body.contains("Oslo"), "{body}");
        let declined = tool
            .handle(&event(
                "charge_card",
                json!([{"name": "customer_id", "value": "cus_declined_9"}]),
            ))
            .unwrap();
        assert_eq!(
            declined["response"]["functionResponse"]["responseState"],
            "FAILURE"
        );
        assert_eq!(tool.ledger().entries().unwrap().len(), 2);
    }

    #[test]
    fn an_arguments_object_with_a_named_tool_gets_the_receipt_itself() {
        let tool = DemoTool::new(Ledger::memory());
        let custom: HashMap<String, String> = [
            (agentcore::TOOL_NAME, "payments___charge_card"),
            (agentcore::SESSION_ID, "s-1"),
            (agentcore::DEDUP_KEY_CONTEXT, "k9"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let reply = tool
            .handle_with_context(&json!({"customer_id": "cus_1", "amount": 5}), Some(&custom))
            .unwrap();
        assert!(reply["receipt_id"].as_str().unwrap().starts_with("ch_"));
        assert_eq!(reply["amount"], 5);
        assert!(reply.get("isError").is_none());
        let envelope_call: HashMap<String, String> = [(
            envelope::DEDUP_TOOL_CONTEXT.to_string(),
            "charge_card".to_string(),
        )]
        .into();
        let declined = tool
            .handle_with_context(
                &json!({"customer_id": "cus_declined_1"}),
                Some(&envelope_call),
            )
            .unwrap();
        assert_eq!(declined["isError"], true);
        let entries = tool.ledger().entries().unwrap();
        assert_eq!(entries[0]["dedup_key"], "k9");
        assert_eq!(entries[0]["session_id"], "s-1");
        // Without a named tool, the event must be a Bedrock event.
        assert!(tool.handle_with_context(&json!({"a": 1}), None).is_err());
    }

    #[test]
    fn a_file_ledger_appends_lines() {
        let dir = tempfile::tempdir().unwrap();
        let tool = DemoTool::new(Ledger::file(dir.path().join("ledger.jsonl")));
        for _ in 0..3 {
            tool.handle(&event("refund", json!([]))).unwrap();
        }
        assert_eq!(tool.ledger().entries().unwrap().len(), 3);
        assert!(
            read_ledger(&dir.path().join("missing.jsonl"))
                .unwrap()
                .is_empty()
        );
    }
}
