//! A Bedrock agent and the dedup function: `dedup config from-agent` writes a config document from
//! the agent's action groups (their executors become the routes, their schemas the tool
//! definitions); `dedup attach` points the action groups at the dedup function and records what
//! it replaced; `dedup detach` restores exactly that. Both print the plan and change nothing
//! without `--yes`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use aws_sdk_bedrockagent::Client;
use aws_sdk_bedrockagent::types::{
    ActionGroupExecutor, AgentActionGroup, ApiSchema, FunctionSchema,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::CliError;
use toolcall_dedup::key::{KeyerVersion, operation_names};

/// Where the Bedrock Agent API is.
#[derive(Debug, clap::Args)]
pub(crate) struct AgentApi {
    /// The agent's id.
    #[arg(long)]
    pub(crate) agent_id: String,
    /// The agent version to read (attach and detach change the working draft, `DRAFT`).
    #[arg(long, default_value = "DRAFT")]
    pub(crate) agent_version: String,
    /// A Bedrock Agent API endpoint (a local stand-in); AWS when absent.
    #[arg(long, env = "DEDUP_BEDROCK_AGENT_ENDPOINT")]
    pub(crate) endpoint: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct FromAgentArgs {
    #[command(flatten)]
    pub(crate) api: AgentApi,
    /// The dedup function (or its alias): an action group already executed by it is refused
    /// rather than routed to itself.
    #[arg(long)]
    pub(crate) function_arn: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct AttachArgs {
    #[command(flatten)]
    pub(crate) api: AgentApi,
    /// The dedup function's alias ARN (the stack's `DedupFunctionAliasArn` output).
    #[arg(long)]
    pub(crate) function_arn: String,
    /// Where to record what was replaced, for `dedup detach`.
    #[arg(long, default_value = "dedup-attach.json")]
    pub(crate) record: PathBuf,
    /// Attach only if the function runs in shadow mode (it keys and reports, and never answers
    /// from a record): its configuration is read first (`lambda:GetFunctionConfiguration`).
    #[arg(long)]
    pub(crate) shadow: bool,
    /// A Lambda API endpoint (a local stand-in) for `--shadow`'s check; AWS when absent.
    #[arg(long, env = "DEDUP_LAMBDA_ENDPOINT")]
    pub(crate) lambda_endpoint: Option<String>,
    /// Make the change (without it, only the plan is printed).
    #[arg(long)]
    pub(crate) yes: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DetachArgs {
    /// The record `dedup attach` wrote.
    #[arg(long, default_value = "dedup-attach.json")]
    pub(crate) record: PathBuf,
    /// A Bedrock Agent API endpoint (a local stand-in); AWS when absent.
    #[arg(long, env = "DEDUP_BEDROCK_AGENT_ENDPOINT")]
    pub(crate) endpoint: Option<String>,
    /// Make the change (without it, only the plan is printed).
    #[arg(long)]
    pub(crate) yes: bool,
}

/// What `attach` replaced: enough for `detach` to put it back.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AttachRecord {
    pub(crate) agent_id: String,
    pub(crate) agent_version: String,
    pub(crate) function_arn: String,
    /// Each action group attached, with the Lambda that executed it before.
    pub(crate) groups: Vec<AttachedGroup>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AttachedGroup {
    pub(crate) action_group_id: String,
    pub(crate) action_group_name: String,
    pub(crate) executor_before: String,
}

async fn client(endpoint: Option<&str>) -> Client {
    Client::new(&sdk_config(endpoint).await)
}

/// The AWS configuration, or one for a local stand-in at `endpoint` (with a region and dummy
/// credentials when none are set).
pub(crate) async fn sdk_config(endpoint: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(url) = endpoint {
        loader = loader.endpoint_url(url);
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            loader = loader.region(aws_config::Region::from_static("us-east-1"));
        }
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && std::env::var_os("AWS_PROFILE").is_none()
        {
            loader = loader.credentials_provider(aws_sdk_bedrockagent::config::Credentials::new(
                "local",
                "local",
                None,
                None,
                "dedup-local",
            ));
        }
    }
    loader.load().await
}

fn api_error(what: &str, e: impl std::error::Error) -> CliError {
    let mut text = format!("{what}: {e}");
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    CliError::Usage(text)
}

/// Every action group of the agent version, in full.
async fn action_groups(client: &Client, api: &AgentApi) -> Result<Vec<AgentActionGroup>, CliError> {
    let mut groups = Vec::new();
    let mut next = None;
    loop {
        let page = client
            .list_agent_action_groups()
            .agent_id(&api.agent_id)
            .agent_version(&api.agent_version)
            .set_next_token(next)
            .send()
            .await
            .map_err(|e| api_error("ListAgentActionGroups", e))?;
        for summary in page.action_group_summaries() {
            let group = client
                .get_agent_action_group()
                .agent_id(&api.agent_id)
                .agent_version(&api.agent_version)
                .action_group_id(summary.action_group_id())
                .send()
                .await
                .map_err(|e| api_error("GetAgentActionGroup", e))?;
            if let Some(group) = group.agent_action_group {
                groups.push(group);
            }
        }
        next = page.next_token().map(str::to_string);
        if next.is_none() {
            return Ok(groups);
        }
    }
}

fn lambda_of(group: &AgentActionGroup) -> Option<&str> {
    match group.action_group_executor() {
        Some(ActionGroupExecutor::Lambda(arn)) => Some(arn),
        _ => None,
    }
}

/// An action group as the config document's `tool_definitions` reads it.
fn definition(group: &AgentActionGroup) -> Value {
    let mut out = Map::new();
    out.insert("actionGroupName".into(), json!(group.action_group_name()));
    match group.api_schema() {
        Some(ApiSchema::Payload(text)) => {
            out.insert("apiSchema".into(), json!({"payload": text}));
        }
        Some(ApiSchema::S3(location)) => {
            out.insert(
                "apiSchema".into(),
                json!({"s3": {"s3BucketName": location.s3_bucket_name(), "s3ObjectKey": location.s3_object_key()}}),
            );
        }
        _ => {}
    }
    if let Some(FunctionSchema::Functions(functions)) = group.function_schema() {
        let functions: Vec<Value> = functions
            .iter()
            .map(|f| {
                let parameters: BTreeMap<&str, Value> = f
                    .parameters()
                    .map(|ps| {
                        ps.iter()
                            .map(|(name, p)| {
                                (
                                    name.as_str(),
                                    json!({
                                        "type": p.r#type().as_str(),
                                        "required": p.required(),
                                        "description": p.description(),
                                    }),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({"name": f.name(), "description": f.description(), "parameters": parameters})
            })
            .collect();
        out.insert("functionSchema".into(), json!({"functions": functions}));
    }
    Value::Object(out)
}

pub(crate) fn from_agent(args: FromAgentArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let groups = runtime.block_on(async {
        let client = client(args.api.endpoint.as_deref()).await;
        action_groups(&client, &args.api).await
    })?;
    let mut routes = Map::new();
    let mut definitions = Vec::new();
    let mut skipped = Vec::new();
    for group in &groups {
        let name = group.action_group_name();
        match lambda_of(group) {
            Some(arn) if Some(arn) == args.function_arn.as_deref() => {
                return Err(CliError::Usage(format!(
                    "action group {name} is already executed by the dedup function: its tool is in the \
                     record `dedup attach` wrote (run from-agent before attaching, or detach first)"
                )));
            }
            Some(arn) => {
                // The namespace the Bedrock door derives today (agent id and group name), stated,
                // so that renaming the group or moving to another agent keeps the calls' keys.
                // A group route catches that group of every agent the function serves, so the
                // document says they share it (`shared`; see the header it prints).
                let namespace = format!("{}/{name}", args.api.agent_id);
                routes.insert(
                    format!("{name}/*"),
                    json!({"function": arn, "namespace": namespace, "shared": true}),
                );
            }
            None => skipped.push(name.to_string()),
        }
        if group.api_schema().is_some() || group.function_schema().is_some() {
            definitions.push(definition(group));
        }
    }
    // A new deployment starts on the newest keyer rules, pinned so the next build keys alike.
    let settings = json!({"keyer": KeyerVersion::NEWEST.name()});
    let document = json!({"settings": settings, "routes": routes, "tool_definitions": definitions});
    let yaml = serde_yaml_ng::to_string(&document).map_err(|e| CliError::Usage(e.to_string()))?;
    println!(
        "# toolcall-dedup config document from agent {} ({}): routes to today's executors.\n\
         # Each group route states this agent's namespace, shared by every agent whose action\n\
         # group has that name: serve other agents from another function, or drop `namespace`.\n\
         # settings.keyer pins the keyer's rules: where this function already serves calls\n\
         # without a pin, write typed/v2 and move it between runs (dedup key --compare-keyer).\n\
         # Check it with `dedup config check`, then put it where the function reads it.",
        args.api.agent_id, args.api.agent_version
    );
    if !skipped.is_empty() {
        println!(
            "# Not routed (no Lambda executor: return of control): {}",
            skipped.join(", ")
        );
    }
    print!("{}", tag_commands(&routes));
    print!("{yaml}");
    print!("{}", tools_skeleton(&groups));
    Ok(ExitCode::SUCCESS)
}

/// The commands that let the dedup function invoke each routed tool function (the stacks grant
/// invoke on functions tagged so), as comments: the installer runs them once.
fn tag_commands(routes: &Map<String, Value>) -> String {
    let mut functions: Vec<&str> = routes
        .values()
        .filter_map(|r| r["function"].as_str())
        .collect();
    functions.sort_unstable();
    functions.dedup();
    let mut out = String::from(
        "# Let the dedup function invoke each routed tool function (once; the stacks grant invoke\n\
         # on functions tagged so):\n",
    );
    for function in functions {
        out.push_str(&format!(
            "#   aws lambda tag-resource --resource {function} --tags toolcall-dedup:tool=true\n"
        ));
    }
    out
}

/// A `tools:` section naming every operation of the agent the way Bedrock calls it (a function's
/// name, an API operation's `METHOD /path`), each with the defaults and a review mark on the
/// methods that remove or replace something.
fn tools_skeleton(groups: &[AgentActionGroup]) -> String {
    let mut lines = vec![
        "# Every tool, as Bedrock names it. `{}` keeps the defaults: at_least_once (a call whose".into(),
        "# outcome is unknown may run again once its lease ends), failures replayed for 60 s,".into(),
        "# records kept DEDUP_TTL_SECONDS. Write `destructive: true` (or `delivery: at_most_once`)".into(),
        "# where a repeat must never run, `key_fields`/`fields` where some arguments are not the call.".into(),
        "tools:".to_string(),
    ];
    let mut named = 0;
    for group in groups {
        if lambda_of(group).is_none() {
            continue;
        }
        let group_name = group.action_group_name();
        if let Some(FunctionSchema::Functions(functions)) = group.function_schema() {
            for f in functions {
                lines.push(format!("  {}: {{}}  # {group_name}", yaml_key(f.name())));
                named += 1;
            }
        }
        match group.api_schema() {
            Some(ApiSchema::Payload(text)) => {
                // YAML or JSON (JSON is YAML): the operations as Bedrock names them.
                let document = serde_yaml_ng::from_str::<Value>(text).unwrap_or_default();
                for name in operation_names(&document) {
                    let method = name.split_once(' ').map_or("", |(method, _)| method);
                    let review = match method {
                        "DELETE" => "; REVIEW: a DELETE removes something: destructive: true?",
                        "PUT" | "PATCH" => "; REVIEW: replaces or changes state: destructive: true?",
                        _ => "",
                    };
                    lines.push(format!("  {}: {{}}  # {group_name}{review}", yaml_key(&name)));
                    named += 1;
                }
            }
            Some(ApiSchema::S3(location)) => lines.push(format!(
                "  # {group_name}: its API schema is in s3://{}/{}: add its operations (METHOD /path)",
                location.s3_bucket_name().unwrap_or("?"),
                location.s3_object_key().unwrap_or("?")
            )),
            _ => {}
        }
    }
    if named == 0 {
        lines.push("  {}".into());
    }
    lines.join("\n") + "\n"
}

/// `name` as a YAML mapping key: quoted (JSON-style, which YAML reads) unless it is a plain word.
fn yaml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        Value::from(name).to_string()
    }
}

/// Points `group` at `executor`, re-sending everything else the update replaces.
async fn point(
    client: &Client,
    agent_id: &str,
    group: &AgentActionGroup,
    executor: &str,
) -> Result<(), CliError> {
    client
        .update_agent_action_group()
        .agent_id(agent_id)
        .agent_version("DRAFT")
        .action_group_id(group.action_group_id())
        .action_group_name(group.action_group_name())
        .set_description(group.description().map(str::to_string))
        .action_group_state(group.action_group_state().clone())
        .set_api_schema(group.api_schema().cloned())
        .set_function_schema(group.function_schema().cloned())
        .set_parent_action_group_signature(group.parent_action_signature().cloned())
        .action_group_executor(ActionGroupExecutor::Lambda(executor.to_string()))
        .send()
        .await
        .map_err(|e| api_error("UpdateAgentActionGroup", e))?;
    Ok(())
}

async fn prepare(client: &Client, agent_id: &str) -> Result<(), CliError> {
    client
        .prepare_agent()
        .agent_id(agent_id)
        .send()
        .await
        .map_err(|e| api_error("PrepareAgent", e))?;
    Ok(())
}

pub(crate) fn attach(args: AttachArgs) -> Result<ExitCode, CliError> {
    if args.api.agent_version != "DRAFT" {
        return Err(CliError::Usage(
            "attach changes the working draft (--agent-version DRAFT); publish a version from it after".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        if args.shadow {
            let lambda =
                aws_sdk_lambda::Client::new(&sdk_config(args.lambda_endpoint.as_deref()).await);
            let mode = function_mode(&lambda, &args.function_arn).await?;
            if mode.as_deref() != Some("shadow") {
                return Err(CliError::Usage(format!(
                    "--shadow: {} runs with DEDUP_MODE={}; deploy it with Mode=shadow \
                     (sam deploy --parameter-overrides Mode=shadow) and attach again",
                    args.function_arn,
                    mode.as_deref().unwrap_or("(unset)")
                )));
            }
            println!("mode: shadow (read from {})", args.function_arn);
        }
        let client = client(args.api.endpoint.as_deref()).await;
        let groups = action_groups(&client, &args.api).await?;
        let to_change: Vec<&AgentActionGroup> = groups
            .iter()
            .filter(|g| lambda_of(g).is_some_and(|arn| arn != args.function_arn))
            .collect();
        println!(
            "plan: agent {} (DRAFT), {} action group(s) to point at {}",
            args.api.agent_id,
            to_change.len(),
            args.function_arn
        );
        for g in &groups {
            match lambda_of(g) {
                Some(arn) if arn == args.function_arn => {
                    println!("  {}: already attached", g.action_group_name())
                }
                Some(arn) => println!(
                    "  {}: executor {arn} -> {}",
                    g.action_group_name(),
                    args.function_arn
                ),
                None => println!(
                    "  {}: return of control, left as it is",
                    g.action_group_name()
                ),
            }
        }
        if !args.yes {
            println!(
                "nothing changed: add --yes to attach (the record goes to {})",
                args.record.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if to_change.is_empty() {
            println!("nothing to attach");
            return Ok(ExitCode::SUCCESS);
        }
        if args.record.exists() {
            return Err(CliError::Usage(format!(
                "{} exists: detach with it first, or pass another --record",
                args.record.display()
            )));
        }
        let record = AttachRecord {
            agent_id: args.api.agent_id.clone(),
            agent_version: args.api.agent_version.clone(),
            function_arn: args.function_arn.clone(),
            groups: to_change
                .iter()
                .map(|g| AttachedGroup {
                    action_group_id: g.action_group_id().to_string(),
                    action_group_name: g.action_group_name().to_string(),
                    executor_before: lambda_of(g).unwrap_or_default().to_string(),
                })
                .collect(),
        };
        // Recorded before the first change: an attach cut short can still be detached.
        std::fs::write(
            &args.record,
            serde_json::to_string_pretty(&record).map_err(std::io::Error::other)?,
        )?;
        for g in &to_change {
            point(&client, &args.api.agent_id, g, &args.function_arn).await?;
            println!("  {}: attached", g.action_group_name());
        }
        prepare(&client, &args.api.agent_id).await?;
        println!("agent prepared; record: {}", args.record.display());
        print!("{}", publish_step(&args.api.agent_id, "attach"));
        Ok(ExitCode::SUCCESS)
    })
}

/// The `DEDUP_MODE` the function (or the version an alias ARN names) runs with.
async fn function_mode(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
) -> Result<Option<String>, CliError> {
    let config = lambda
        .get_function_configuration()
        .function_name(function)
        .send()
        .await
        .map_err(|e| {
            CliError::Usage(format!(
                "--shadow: cannot read {function}'s configuration (GetFunctionConfiguration): {}",
                super::sdk_error_line(&e)
            ))
        })?;
    Ok(config
        .environment()
        .and_then(|env| env.variables())
        .and_then(|vars| vars.get("DEDUP_MODE"))
        .cloned())
}

pub(crate) fn detach(args: DetachArgs) -> Result<ExitCode, CliError> {
    let text = std::fs::read_to_string(&args.record)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.record.display())))?;
    let record: AttachRecord = serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{}: not an attach record: {e}",
            args.record.display()
        ))
    })?;
    let api = AgentApi {
        agent_id: record.agent_id.clone(),
        agent_version: record.agent_version.clone(),
        endpoint: args.endpoint.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(api.endpoint.as_deref()).await;
        let groups = action_groups(&client, &api).await?;
        println!(
            "plan: agent {} (DRAFT), restore {} action group(s)",
            record.agent_id,
            record.groups.len()
        );
        let mut restore = Vec::new();
        for attached in &record.groups {
            let Some(group) = groups
                .iter()
                .find(|g| g.action_group_id() == attached.action_group_id)
            else {
                println!(
                    "  {}: gone from the agent, skipped",
                    attached.action_group_name
                );
                continue;
            };
            match lambda_of(group) {
                Some(arn) if arn == record.function_arn => {
                    println!(
                        "  {}: executor {arn} -> {}",
                        attached.action_group_name, attached.executor_before
                    );
                    restore.push((group, attached));
                }
                other => println!(
                    "  {}: now executed by {}, not the dedup function: left as it is",
                    attached.action_group_name,
                    other.unwrap_or("return of control")
                ),
            }
        }
        if !args.yes {
            println!("nothing changed: add --yes to detach");
            return Ok(ExitCode::SUCCESS);
        }
        for (group, attached) in &restore {
            point(&client, &record.agent_id, group, &attached.executor_before).await?;
            println!("  {}: restored", attached.action_group_name);
        }
        prepare(&client, &record.agent_id).await?;
        let done = args.record.with_extension("detached.json");
        std::fs::rename(&args.record, &done)?;
        println!("agent prepared; record kept as {}", done.display());
        print!("{}", publish_step(&record.agent_id, "detach"));
        Ok(ExitCode::SUCCESS)
    })
}

/// What puts a changed working draft into service: attach and detach change `DRAFT` only, and an
/// alias serves the version it points to. Updating the alias without a routing configuration makes
/// Bedrock snapshot the prepared draft into a new version and point the alias at it (user guide,
/// "Deploy an agent").
fn publish_step(agent_id: &str, what: &str) -> String {
    format!(
        "The {what} changed the working draft (DRAFT) only: the aliases your application calls still \
         serve their versions.\nTo put it into service, point each such alias at a new version of the \
         draft:\n  aws bedrock-agent list-agent-aliases --agent-id {agent_id}\n  aws bedrock-agent \
         update-agent-alias --agent-id {agent_id} --agent-alias-id ALIAS_ID --agent-alias-name \
         ALIAS_NAME\n(no --routing-configuration: Bedrock makes a new version from the prepared draft \
         and points the alias at it)\n"
    )
}
