//! Event files as `dedup replay`, the tests and `cargo lambda invoke` read them: an event, and,
//! beside an AgentCore Gateway event, the client context it is sent with.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::handler::ClientContext;

/// One event file, read and parsed (or why not).
#[derive(Debug, Clone)]
pub struct EventFile {
    pub path: PathBuf,
    pub event: Result<Value, String>,
    /// The client context it is sent with, when a file sits beside it.
    pub client_context: Option<ClientContext>,
}

/// The suffix of a client-context file beside its event (`x.json` → `x.client-context.json`).
pub const CLIENT_CONTEXT_SUFFIX: &str = ".client-context.json";

impl EventFile {
    pub fn read(path: PathBuf) -> Result<EventFile, std::io::Error> {
        let text = std::fs::read_to_string(&path)?;
        let mut event = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"));
        let mut client_context = None;
        let context_path = client_context_path(&path);
        if context_path.is_file() {
            #[derive(serde::Deserialize)]
            struct ClientContext {
                #[serde(default)]
                custom: std::collections::HashMap<String, String>,
            }
            match serde_json::from_str::<ClientContext>(&std::fs::read_to_string(&context_path)?) {
                Ok(context) => client_context = Some(context.custom),
                Err(e) => {
                    event = Err(format!(
                        "{}: not a client context: {e}",
                        context_path.display()
                    ))
                }
            }
        }
        Ok(EventFile {
            path,
            event,
            client_context,
        })
    }
}

/// Where the client context of the event at `path` is kept.
pub fn client_context_path(path: &std::path::Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    path.with_file_name(format!("{stem}{CLIENT_CONTEXT_SUFFIX}"))
}

/// The AgentCore Gateway interceptor's RESPONSE invocation of `request` (a REQUEST event) after
/// the target answered `text` (developer guide, *Types of interceptors*).
pub fn interceptor_response(request: &Value, text: &str) -> Value {
    let mut ev = request.clone();
    let id = request["mcp"]["gatewayRequest"]["body"]["id"].clone();
    ev["mcp"]["gatewayResponse"] = json!({"statusCode": 200, "headers": {},
        "body": {"jsonrpc": "2.0", "id": id,
                 "result": {"content": [{"type": "text", "text": text}]}}});
    ev
}
