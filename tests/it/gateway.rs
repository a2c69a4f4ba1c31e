//! What the interceptor suites share: MCP `tools/call` REQUEST and RESPONSE events in the shapes of
//! the AgentCore developer guide's *Types of interceptors*, handlers over a shared store as the
//! containers of one deployment, and sending events to them.

use std::collections::HashMap;

use serde_json::{Value, json};
use toolcall_dedup::config::Config;
use toolcall_dedup::dispatch::Dispatcher;
use toolcall_dedup::handler::{ClientContext, Handled, Handler, Invocation};
use toolcall_dedup::store::Store;

use crate::fixture::{Scripted, handler};

/// A `tools/call` REQUEST of `tool` (as the Gateway lists it) in MCP session `session` (none:
/// sessionless) with JSON-RPC `id`.
pub(crate) fn request(tool: &str, session: Option<&str>, id: u64, arguments: Value) -> Value {
    let mut headers = json!({"content-type": "application/json"});
    if let Some(session) = session {
        headers["Mcp-Session-Id"] = json!(session);
    }
    json!({"interceptorInputVersion": "1.0", "mcp": {"gatewayRequest": {
        "path": "/mcp", "httpMethod": "POST", "headers": headers,
        "body": {"jsonrpc": "2.0", "id": id, "method": "tools/call",
                 "params": {"name": tool, "arguments": arguments}}}}})
}

/// The RESPONSE invocation of a REQUEST after the target answered a text.
pub(crate) use toolcall_dedup::test_util::harness::interceptor_response as response;

/// The RESPONSE invocation of `request` after the target failed with an internal error (a
/// JSON-RPC error): the side effect may have happened, so the outcome is unknown.
pub(crate) fn failed_response(request: &Value) -> Value {
    let mut failed = request.clone();
    let id = request["mcp"]["gatewayRequest"]["body"]["id"].clone();
    failed["mcp"]["gatewayResponse"] = json!({
        "statusCode": 200,
        "body": {"jsonrpc": "2.0", "id": id,
                 "error": {"code": -32603, "message": "Internal error"}},
    });
    failed
}

/// One container of a deployment over `store`: the interceptor never invokes a tool itself, and
/// an identical call in flight is answered at once ("in progress") instead of waited for.
pub(crate) fn container<S: Store>(
    store: S,
    config: &Config,
) -> Handler<S, impl Dispatcher + use<S>> {
    handler(store, Scripted::new(vec![]), config).with_settings(|s| s.wait = Default::default())
}

/// `ev`, invoked with no client context.
pub(crate) async fn send<S: Store, D: Dispatcher>(h: &Handler<S, D>, ev: &Value) -> Handled {
    h.handle_with_context(ev, &Invocation::default(), None)
        .await
}

/// `ev`, invoked with the client context `context`.
pub(crate) async fn send_with<S: Store, D: Dispatcher>(
    h: &Handler<S, D>,
    ev: &Value,
    context: &ClientContext,
) -> Handled {
    h.handle_with_context(ev, &Invocation::default(), Some(context))
        .await
}

/// `ev` as the Gateway invokes it for its request `request_id` (`REQUEST_ID` in the client
/// context), which names one request across the Gateway's invocations of it.
pub(crate) async fn send_as<S: Store, D: Dispatcher>(
    h: &Handler<S, D>,
    ev: &Value,
    request_id: &str,
) -> Handled {
    let context = HashMap::from([("REQUEST_ID".to_string(), request_id.to_string())]);
    send_with(h, ev, &context).await
}
