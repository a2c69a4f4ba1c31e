//! `dedup config check --gateway ID`: an existing AgentCore Gateway read through the control API
//! (`GetGateway`), and what its configuration means for dedup: whether it issues MCP sessions
//! (`protocolConfiguration.mcp.sessionConfiguration`; AgentCore developer guide, *Use MCP
//! sessions with your gateway*), whether it speaks the sessionless 2026-07-28, how the function
//! is attached as its interceptor, and what a sessionless call gets under each
//! `DEDUP_SESSIONLESS` choice.

use aws_sdk_bedrockagentcorecontrol::operation::get_gateway::GetGatewayOutput;
use aws_sdk_bedrockagentcorecontrol::types::{AuthorizerType, GatewayInterceptionPoint};
use serde::Serialize;
use toolcall_dedup::config::Sessionless;

use super::CliError;

/// The MCP version that has no session at all (modelcontextprotocol
/// `docs/specification/2026-07-28/changelog.mdx`).
const STATELESS_VERSION: &str = "2026-07-28";

/// What the gateway's configuration says, as dedup reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct GatewayReading {
    pub gateway: String,
    /// `sessionConfiguration.sessionTimeoutInSeconds`, when sessions are on.
    pub(crate) session_timeout_seconds: Option<i32>,
    pub(crate) supported_versions: Vec<String>,
    pub(crate) authorizer: String,
    /// Each Lambda interceptor: its ARN, its points, whether request headers are passed.
    pub(crate) interceptors: Vec<Interceptor>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Interceptor {
    pub(crate) arn: String,
    pub(crate) request: bool,
    pub(crate) response: bool,
    pub(crate) pass_request_headers: bool,
}

/// One finding: `error` when dedup cannot work as attached, `warning` when calls go unprotected
/// or are keyed more loosely than a user would think.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) level: &'static str,
    pub(crate) text: String,
}

impl GatewayReading {
    pub(crate) fn of(output: &GetGatewayOutput) -> GatewayReading {
        let mcp = output
            .protocol_configuration()
            .and_then(|p| p.as_mcp().ok());
        GatewayReading {
            gateway: output.gateway_id().to_string(),
            session_timeout_seconds: mcp
                .and_then(|m| m.session_configuration())
                .and_then(|s| s.session_timeout_in_seconds()),
            supported_versions: mcp
                .map(|m| m.supported_versions().to_vec())
                .unwrap_or_default(),
            authorizer: output.authorizer_type().as_str().to_string(),
            interceptors: output
                .interceptor_configurations()
                .iter()
                .filter_map(|c| {
                    let lambda = c.interceptor()?.as_lambda().ok()?;
                    let at =
                        |point: &GatewayInterceptionPoint| c.interception_points().contains(point);
                    Some(Interceptor {
                        arn: lambda.arn().to_string(),
                        request: at(&GatewayInterceptionPoint::Request),
                        response: at(&GatewayInterceptionPoint::Response),
                        pass_request_headers: c
                            .input_configuration()
                            .is_some_and(|i| i.pass_request_headers()),
                    })
                })
                .collect(),
        }
    }

    /// What this configuration means under `sessionless`, and for the function `function` (name
    /// or ARN) with its interceptor alias `alias`, when given.
    pub(crate) fn findings(
        &self,
        sessionless: Sessionless,
        function: Option<&str>,
        alias: Option<&str>,
    ) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut say = |level, text: String| findings.push(Finding { level, text });
        let iam = self.authorizer == AuthorizerType::AwsIam.as_str();
        let meaning = sessionless_meaning(sessionless, iam);
        if self.session_timeout_seconds.is_none() {
            say(
                "warning",
                format!(
                    "gateway {} issues no Mcp-Session-Id (no protocolConfiguration.mcp.sessionConfiguration): \
                     every call names no run unless the client sends the AgentCore policy-session header \
                     or _meta[\"toolcall-dedup/run\"]; under DEDUP_SESSIONLESS={} such calls {meaning}. \
                     Set a sessionConfiguration (900-28800 s) on the gateway",
                    self.gateway,
                    sessionless_name(sessionless)
                ),
            );
        }
        if self
            .supported_versions
            .iter()
            .any(|v| v == STATELESS_VERSION)
        {
            say(
                "warning",
                format!(
                    "gateway {} speaks MCP {STATELESS_VERSION}, which has no session: its clients' calls name \
                     no run unless they send the policy-session header or _meta[\"toolcall-dedup/run\"]; \
                     under DEDUP_SESSIONLESS={} they {meaning}",
                    self.gateway,
                    sessionless_name(sessionless)
                ),
            );
        }
        let ours: Vec<&Interceptor> = self
            .interceptors
            .iter()
            .filter(|i| function.is_none_or(|f| names_function(&i.arn, f)))
            .collect();
        match ours.as_slice() {
            [] => say(
                "error",
                match function {
                    Some(f) => format!(
                        "gateway {} has no interceptor that invokes {f}",
                        self.gateway
                    ),
                    None => format!("gateway {} has no Lambda interceptor", self.gateway),
                },
            ),
            found => {
                for interceptor in found {
                    let arn = &interceptor.arn;
                    if !(interceptor.request && interceptor.response) {
                        say(
                            "error",
                            format!(
                                "interceptor {arn} must be attached at REQUEST and RESPONSE: at REQUEST alone \
                                 no result is ever stored, at RESPONSE alone nothing is claimed"
                            ),
                        );
                    }
                    if !interceptor.pass_request_headers {
                        say(
                            "error",
                            format!(
                                "interceptor {arn} is not passed the request headers (passRequestHeaders): it \
                                 never sees Mcp-Session-Id, the policy-session header or the caller, so every \
                                 call is sessionless"
                            ),
                        );
                    }
                    let qualifier = arn.split(':').nth(7);
                    match (alias, qualifier) {
                        (Some(alias), q) if q != Some(alias) => say(
                            "error",
                            format!(
                                "interceptor {arn} does not invoke the alias {alias} that DEDUP_INTERCEPTOR_ALIAS \
                                 names: the function refuses every interceptor event that comes another way"
                            ),
                        ),
                        (None, _) => say(
                            "warning",
                            format!(
                                "no DEDUP_INTERCEPTOR_ALIAS: anyone who may invoke {arn} can teach this \
                                 gateway's catalog with a forged tools/list answer; give the interceptor an \
                                 alias of its own (docs/entry-points.md)"
                            ),
                        ),
                        _ => {}
                    }
                }
            }
        }
        findings
    }
}

/// Whether an interceptor ARN invokes `function` (a name or an ARN, qualified or not).
fn names_function(arn: &str, function: &str) -> bool {
    let name_of = |s: &str| {
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [_, _, "lambda", _, _, "function", name, ..] => name.to_string(),
            _ => s.to_string(),
        }
    };
    name_of(arn) == name_of(function)
}

fn sessionless_name(sessionless: Sessionless) -> &'static str {
    match sessionless {
        Sessionless::PassThrough => "pass_through",
        Sessionless::GatewayScope => "gateway_scope",
        Sessionless::Principal => "principal",
        Sessionless::Refuse => "refuse",
    }
}

/// What a call that names no run gets under `sessionless` (`iam`: the gateway authorizes with
/// AWS_IAM, so no bearer token names a principal).
fn sessionless_meaning(sessionless: Sessionless, iam: bool) -> &'static str {
    match sessionless {
        Sessionless::PassThrough => {
            "run with no dedup at all (a warning and the sessionless metric each time)"
        }
        Sessionless::GatewayScope => {
            "are keyed by gateway and target only: two clients' identical calls are one call"
        }
        Sessionless::Principal if iam => {
            "run with no dedup: principal keys by the bearer JWT's caller, and an AWS_IAM gateway \
             sends none"
        }
        Sessionless::Principal => {
            "are keyed within the caller the gateway verified (the bearer JWT's issuer and subject)"
        }
        Sessionless::Refuse => "are refused (invalid_event) and never run",
    }
}

/// Reads gateway `id` (an id or ARN) through the control API at `endpoint` (a local stand-in;
/// AWS when absent).
pub(crate) async fn read_gateway(
    id: &str,
    endpoint: Option<&str>,
) -> Result<GatewayReading, CliError> {
    let config = super::agent::sdk_config(endpoint).await;
    let client = aws_sdk_bedrockagentcorecontrol::Client::new(&config);
    let output = client
        .get_gateway()
        .gateway_identifier(id)
        .send()
        .await
        .map_err(|e| CliError::Usage(format!("GetGateway {id}: {}", super::sdk_error_line(&e))))?;
    Ok(GatewayReading::of(&output))
}
