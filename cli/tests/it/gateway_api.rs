//! A local stand-in for the one AgentCore control API operation `dedup config check --gateway`
//! calls: `GetGateway` (`GET /gateways/{gatewayIdentifier}`, aws-sdk-bedrockagentcorecontrol's
//! REST-JSON shape: timestamps as ISO 8601 date-times), answering from gateways held in memory: the members the SDK requires are
//! always present, an unknown gateway is `ResourceNotFoundException`, any other request
//! `ValidationException`.

use serde_json::{Value, json};

use crate::agent_api::{Answer, not_found, refuse, serve_json};

/// A gateway in `GetGateway`'s shape: `id`, authorized by `authorizer`, MCP `mcp` (the
/// `protocolConfiguration.mcp` member, if any) and `interceptors` (the
/// `interceptorConfigurations` member).
pub fn gateway(id: &str, authorizer: &str, mcp: Option<Value>, interceptors: Value) -> Value {
    let mut gateway = json!({
        "gatewayArn": format!("arn:aws:bedrock-agentcore:us-east-1:123456789012:gateway/{id}"),
        "gatewayId": id,
        "gatewayUrl": format!("https://{id}.gateway.bedrock-agentcore.us-east-1.amazonaws.com/mcp"),
        "createdAt": "2025-12-06T05:46:40Z",
        "updatedAt": "2025-12-06T05:46:40Z",
        "status": "READY",
        "name": id,
        "protocolType": "MCP",
        "authorizerType": authorizer,
        "interceptorConfigurations": interceptors,
    });
    if let Some(mcp) = mcp {
        gateway["protocolConfiguration"] = json!({ "mcp": mcp });
    }
    gateway
}

/// One Lambda interceptor of `arn` at `points`, with request headers passed or not.
pub fn interceptor(arn: &str, points: &[&str], pass_request_headers: bool) -> Value {
    json!({"interceptor": {"lambda": {"arn": arn}}, "interceptionPoints": points,
           "inputConfiguration": {"passRequestHeaders": pass_request_headers}})
}

/// Serves `gateways`; returns the endpoint.
pub fn start(gateways: Vec<Value>) -> String {
    serve_json(move |method, path, _body| -> Answer {
        let Some(id) = path.strip_prefix("/gateways/").filter(|_| method == "GET") else {
            return refuse(format!(
                "{method} {path}: not an operation of this stand-in"
            ));
        };
        match gateways.iter().find(|g| g["gatewayId"] == id) {
            Some(gateway) => (200, None, gateway.clone()),
            None => not_found(format!("gateway {id}")),
        }
    })
}
