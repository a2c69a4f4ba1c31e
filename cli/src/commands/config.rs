//! `dedup config check FILE`: the function's own reading of a config document, run locally: for
//! each tool its routes, where its schema comes from, its delivery and TTL; an error names the
//! path in the document.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use toolcall_dedup::config::source::{ConfigSource, Loader};
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::key::{DedupSwitch, Delivery};

use super::CliError;

/// `dedup config ...` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConfigCommand {
    /// Read a config document as the function would, and say what it does for each tool.
    Check(CheckArgs),
    /// Write a config document from a Bedrock agent's action groups (routes to today's executors,
    /// their schemas as tool definitions).
    FromAgent(super::agent::FromAgentArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The document: a file, ssm:NAME or s3://bucket/key.
    pub(crate) document: String,
    /// S3 endpoint for schemas kept in S3 (a local server); AWS when absent.
    #[arg(long, env = "DEDUP_S3_ENDPOINT")]
    pub(crate) s3_endpoint: Option<String>,
    /// SSM endpoint for an ssm: document (a local server); AWS when absent.
    #[arg(long, env = "DEDUP_SSM_ENDPOINT")]
    pub(crate) ssm_endpoint: Option<String>,
    /// The dedup function's name or ARN, as Lambda names it to the function
    /// (`AWS_LAMBDA_FUNCTION_NAME`): a route back to it is refused, as the function refuses it.
    #[arg(long, env = "AWS_LAMBDA_FUNCTION_NAME")]
    pub(crate) function: Option<String>,
    /// An existing AgentCore Gateway (id) to read through the control API: whether it issues MCP
    /// sessions, speaks the sessionless 2026-07-28, and has the function attached as it must be.
    #[arg(long)]
    pub gateway: Option<String>,
    /// The AgentCore control API endpoint for --gateway (a local stand-in); AWS when absent.
    #[arg(long, env = "DEDUP_AGENTCORE_CONTROL_ENDPOINT")]
    pub(crate) gateway_endpoint: Option<String>,
    /// The alias the function serves the interceptor door through (`DEDUP_INTERCEPTOR_ALIAS`).
    #[arg(long, env = "DEDUP_INTERCEPTOR_ALIAS")]
    pub(crate) interceptor_alias: Option<String>,
    /// The report as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(command: ConfigCommand) -> Result<ExitCode, CliError> {
    let args = match command {
        ConfigCommand::Check(args) => args,
        ConfigCommand::FromAgent(args) => return super::agent::from_agent(args),
    };
    let source: ConfigSource = args
        .document
        .parse()
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.document)))?;
    if let ConfigSource::File(path) = &source
        && !PathBuf::from(path).exists()
    {
        return Err(CliError::Usage(format!("{}: no such file", path.display())));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let loaded = runtime.block_on(async {
        let loader = Loader::new(
            source,
            args.ssm_endpoint.as_deref(),
            args.s3_endpoint.as_deref(),
        )
        .await;
        loader.load().await
    });
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("dedup config check: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let document = &loaded.document;
    // What the function would run with: the document over the defaults, checked as at start-up.
    let own = |var: &str| (var == "AWS_LAMBDA_FUNCTION_NAME").then(|| args.function.clone())?;
    let config = match Config::from_lookup_and_document(own, Some(document), StoreKind::Memory) {
        Ok(config) => config,
        Err(e) => {
            // A setting the document gave is named where the document gives it.
            let at = match &e {
                toolcall_dedup::config::ConfigError::Invalid { var, .. }
                    if document.settings.contains_key(*var) =>
                {
                    let name = var.trim_start_matches("DEDUP_").to_ascii_lowercase();
                    format!("settings.{name}: ")
                }
                toolcall_dedup::config::ConfigError::Invalid { var, .. }
                    if *var == "DEDUP_ROUTES" && document.routes.is_some() =>
                {
                    "routes: ".to_string()
                }
                _ => String::new(),
            };
            eprintln!("dedup config check: {}: {at}{e}", args.document);
            return Ok(ExitCode::from(1));
        }
    };
    let tools: BTreeSet<&str> = config.policies.iter().map(|(name, _)| name).collect();
    let mut report = Vec::new();
    for tool in &tools {
        let policy = config.policies.get(tool).expect("listed");
        // A tool whose definition names its action group takes that group's routes only.
        let group = document.action_groups.get(*tool);
        let routes: Vec<String> = config
            .routes
            .candidates(tool)
            .into_iter()
            .filter(|(pattern, _)| match (group, pattern.split_once('/')) {
                (Some(group), Some((g, _))) => g == group,
                _ => true,
            })
            .map(
                |(pattern, target)| match config.routes.stated_namespace(&pattern) {
                    Some(namespace) => format!("{pattern} → {target} (namespace {namespace})"),
                    None => format!("{pattern} → {target}"),
                },
            )
            .collect();
        let ttl = policy.ttl.unwrap_or(config.ttl).as_secs();
        report.push(serde_json::json!({
            "tool": tool,
            "routes": routes,
            "schema": document.schema_sources.get(*tool).map(String::as_str).unwrap_or("none (declared types only)"),
            "delivery": match policy.delivery {
                Delivery::AtMostOnce => "at_most_once",
                Delivery::AtLeastOnce => "at_least_once",
            },
            "ttl_seconds": ttl,
            "dedup": policy.dedup == DedupSwitch::On,
        }));
    }
    let settings: Vec<String> = document
        .settings
        .iter()
        .map(|(var, value)| format!("{var}={value}"))
        .collect();
    let mut warnings: Vec<String> = document.warnings.iter().map(ToString::to_string).collect();
    warnings.extend(ssm_size_warning(loaded.text.len()));
    let gateway = match &args.gateway {
        Some(id) => {
            let reading = runtime.block_on(super::gateway_check::read_gateway(
                id,
                args.gateway_endpoint.as_deref(),
            ))?;
            let findings = reading.findings(
                config.sessionless,
                args.function.as_deref(),
                args.interceptor_alias.as_deref(),
            );
            Some((reading, findings))
        }
        None => None,
    };
    let code = match &gateway {
        Some((_, findings)) if findings.iter().any(|f| f.level == "error") => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    };
    if args.json {
        let gateway = gateway.as_ref().map(
            |(reading, findings)| serde_json::json!({"reading": reading, "findings": findings}),
        );
        println!(
            "{}",
            serde_json::json!({"document": args.document, "settings": settings, "tools": report,
                               "warnings": warnings, "gateway": gateway})
        );
        return Ok(code);
    }
    println!("{}: ok", args.document);
    for warning in &warnings {
        println!("warning: {warning}");
    }
    if let Some((reading, findings)) = &gateway {
        println!(
            "gateway {}: sessions {}; MCP {}; authorizer {}",
            reading.gateway,
            reading
                .session_timeout_seconds
                .map_or("off".to_string(), |s| format!("{s} s")),
            reading.supported_versions.join(", "),
            reading.authorizer
        );
        for finding in findings {
            println!("{}: {}", finding.level, finding.text);
        }
    }
    println!(
        "settings: {}",
        if settings.is_empty() {
            "none".into()
        } else {
            settings.join(", ")
        }
    );
    println!("routes: {}", config.routes.targets().join(", "));
    for entry in &report {
        println!(
            "  {}: schema {}; {}; ttl {} s{}\n    routes: {}",
            entry["tool"].as_str().unwrap_or(""),
            entry["schema"].as_str().unwrap_or(""),
            entry["delivery"].as_str().unwrap_or(""),
            entry["ttl_seconds"],
            if entry["dedup"] == true {
                ""
            } else {
                "; dedup off"
            },
            entry["routes"]
                .as_array()
                .map(|r| r
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(", "))
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "none: its calls are answered with a no-route error".into()),
        );
    }
    Ok(code)
}

/// SSM's parameter value limits: 4 KB in the Standard tier, 8 KB in the Advanced tier.
const SSM_STANDARD_BYTES: usize = 4 * 1024;
const SSM_ADVANCED_BYTES: usize = 8 * 1024;

/// What a document of `bytes` meets in SSM, where the stacks read it from by default
/// (`dedup config from-agent` embeds every schema, so a real agent's document outgrows 4 KB fast).
fn ssm_size_warning(bytes: usize) -> Option<String> {
    if bytes > SSM_ADVANCED_BYTES {
        Some(format!(
            "document: {bytes} bytes, over SSM's 8 KB limit (Advanced tier): keep it in S3 \
             (the stacks' ConfigDocumentUri=s3://bucket/key) or a file bundled with the function"
        ))
    } else if bytes > SSM_STANDARD_BYTES {
        Some(format!(
            "document: {bytes} bytes, over SSM's 4 KB Standard tier: put it with \
             `aws ssm put-parameter --tier Intelligent-Tiering` (Advanced up to 8 KB, charged), \
             or keep it in S3"
        ))
    } else {
        None
    }
}
