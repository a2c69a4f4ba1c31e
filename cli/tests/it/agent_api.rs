//! A local stand-in for the Bedrock Agent API (the four operations `dedup config from-agent`,
//! `attach` and `detach` call), holding one agent in memory, and for the one Lambda operation
//! `attach --shadow` calls (`GetFunctionConfiguration`, the functions' environments held beside it). Every request is checked against the
//! SDK's shapes (method, path, the members each operation takes and requires, the unions'
//! one-member rule); a request that breaks them is answered `ValidationException` and recorded,
//! so a test sees it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: Value,
    /// Why the stand-in refused it, if it did.
    pub refused: Option<String>,
}

/// The stand-in's agent: action groups by id (each in `GetAgentActionGroup`'s shape).
#[derive(Debug, Default)]
pub struct Agent {
    pub id: String,
    pub groups: BTreeMap<String, Value>,
    pub prepared: u32,
    pub seen: Vec<Seen>,
    /// Lambda functions by name or ARN: their environment variables.
    pub functions: BTreeMap<String, BTreeMap<String, String>>,
}

/// The running stand-in.
pub struct AgentApi {
    pub endpoint: String,
    pub agent: Arc<Mutex<Agent>>,
}

impl AgentApi {
    /// Serves `agent` on a loopback port, in a thread of its own.
    pub fn start(agent: Agent) -> AgentApi {
        let agent = Arc::new(Mutex::new(agent));
        let shared = agent.clone();
        let endpoint = serve_json(move |method, path, body| {
            let (status, error, answered) = answer(&shared, method, path, body);
            shared.lock().unwrap().seen.push(Seen {
                method: method.to_string(),
                path: path.to_string(),
                body: body.clone(),
                refused: error
                    .as_ref()
                    .map(|(_, m)| m.clone())
                    .filter(|_| status == 400),
            });
            (status, error, answered)
        });
        AgentApi { endpoint, agent }
    }

    /// The executors of the agent's groups, by name.
    pub fn executors(&self) -> BTreeMap<String, Value> {
        let agent = self.agent.lock().unwrap();
        agent
            .groups
            .values()
            .map(|g| {
                (
                    g["actionGroupName"].as_str().unwrap().to_string(),
                    g["actionGroupExecutor"].clone(),
                )
            })
            .collect()
    }

    /// The requests seen, and whether any was refused.
    pub fn seen(&self) -> Vec<Seen> {
        self.agent.lock().unwrap().seen.clone()
    }
}

/// Serves a JSON API on a loopback port, in a thread of its own: each request's method, path
/// (without query or trailing slash) and JSON body go to `answer`, whose status, error type
/// (`x-amzn-errortype`, as the SDK reads it) and body are sent back. Returns the endpoint.
pub fn serve_json<F>(answer: F) -> String
where
    F: Fn(&str, &str, &Value) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let endpoint = format!("http://{}", std_listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = TcpListener::from_std(std_listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let answer = answer.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, &*answer).await;
                });
            }
        });
    });
    endpoint
}

async fn serve(
    stream: tokio::net::TcpStream,
    answer: &(dyn Fn(&str, &str, &Value) -> Answer + Send + Sync),
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).await?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).await?;
        let path = target
            .split('?')
            .next()
            .unwrap_or("")
            .trim_end_matches('/')
            .to_string();
        let body: Value = if body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&body).unwrap_or(Value::Null)
        };
        let (status, error, answered) = answer(&method, &path, &body);
        let text = answered.to_string();
        let mut head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            text.len()
        );
        if let Some((code, _)) = error {
            head.push_str(&format!("x-amzn-errortype: {code}\r\n"));
        }
        head.push_str("\r\n");
        let stream = reader.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(text.as_bytes()).await?;
    }
}

pub type Answer = (u16, Option<(&'static str, String)>, Value);

pub fn refuse(message: String) -> Answer {
    (
        400,
        Some(("ValidationException", message.clone())),
        json!({"message": message}),
    )
}

pub fn not_found(what: String) -> Answer {
    (
        404,
        Some(("ResourceNotFoundException", what.clone())),
        json!({"message": what}),
    )
}

/// The members an object may have, and those it must.
fn members(object: &Value, allowed: &[&str], required: &[&str], what: &str) -> Result<(), String> {
    let Some(map) = object.as_object() else {
        return Err(format!("{what} is not an object"));
    };
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("{what}: unknown member {unknown}"));
    }
    if let Some(missing) = required.iter().find(|r| !map.contains_key(**r)) {
        return Err(format!("{what}: missing required member {missing}"));
    }
    Ok(())
}

/// A union: exactly one of its members.
fn union(object: &Value, variants: &[&str], what: &str) -> Result<(), String> {
    members(object, variants, &[], what)?;
    match object.as_object().map(Map::len) {
        Some(1) => Ok(()),
        _ => Err(format!("{what} must set exactly one of {variants:?}")),
    }
}

fn check_update(body: &Value) -> Result<(), String> {
    members(
        body,
        &[
            "actionGroupExecutor",
            "actionGroupName",
            "actionGroupState",
            "apiSchema",
            "description",
            "functionSchema",
            "parentActionGroupSignature",
            "parentActionGroupSignatureParams",
        ],
        &["actionGroupName"],
        "UpdateAgentActionGroup",
    )?;
    if let Some(executor) = body.get("actionGroupExecutor") {
        union(
            executor,
            &["lambda", "customControl"],
            "actionGroupExecutor",
        )?;
    }
    if let Some(schema) = body.get("apiSchema") {
        union(schema, &["payload", "s3"], "apiSchema")?;
    }
    if let Some(state) = body.get("actionGroupState")
        && !["ENABLED", "DISABLED"].contains(&state.as_str().unwrap_or(""))
    {
        return Err(format!("actionGroupState {state}"));
    }
    if body.get("apiSchema").is_some() && body.get("functionSchema").is_some() {
        return Err("an action group has an apiSchema or a functionSchema, not both".into());
    }
    Ok(())
}

fn answer(agent: &Mutex<Agent>, method: &str, path: &str, body: &Value) -> Answer {
    let mut agent = agent.lock().unwrap();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["2015-03-31", "functions", name, "configuration"]) => {
            let name = name.replace("%3A", ":").replace("%3a", ":");
            match agent.functions.get(&name) {
                Some(env) => (
                    200,
                    None,
                    json!({"FunctionName": name, "Environment": {"Variables": env}}),
                ),
                None => not_found(format!("function {name}")),
            }
        }
        ("POST", ["agents", id, "agentversions", version, "actiongroups"]) if *id == agent.id => {
            if let Err(e) = members(
                body,
                &["maxResults", "nextToken"],
                &[],
                "ListAgentActionGroups",
            ) {
                return refuse(e);
            }
            let _ = version;
            let summaries: Vec<Value> = agent
                .groups
                .values()
                .map(|g| json!({
                    "actionGroupId": g["actionGroupId"], "actionGroupName": g["actionGroupName"],
                    "actionGroupState": g["actionGroupState"], "updatedAt": g["updatedAt"],
                }))
                .collect();
            (200, None, json!({"actionGroupSummaries": summaries}))
        }
        ("GET", ["agents", id, "agentversions", _, "actiongroups", group]) if *id == agent.id => {
            match agent.groups.get(*group) {
                Some(g) => (200, None, json!({"agentActionGroup": g})),
                None => not_found(format!("action group {group}")),
            }
        }
        (
            "PUT",
            [
                "agents",
                id,
                "agentversions",
                version,
                "actiongroups",
                group,
            ],
        ) if *id == agent.id => {
            if *version != "DRAFT" {
                return refuse(format!("only DRAFT can be updated, not {version}"));
            }
            if let Err(e) = check_update(body) {
                return refuse(e);
            }
            let Some(g) = agent.groups.get_mut(*group) else {
                return not_found(format!("action group {group}"));
            };
            let mut updated = json!({
                "agentId": g["agentId"], "agentVersion": "DRAFT", "actionGroupId": g["actionGroupId"],
                "createdAt": g["createdAt"], "updatedAt": "2026-12-06T12:00:00Z",
                "actionGroupState": body.get("actionGroupState").cloned().unwrap_or(json!("ENABLED")),
            });
            for (k, v) in body.as_object().unwrap() {
                if k != "actionGroupState" {
                    updated[k] = v.clone();
                }
            }
            *g = updated.clone();
            (200, None, json!({"agentActionGroup": updated}))
        }
        ("POST", ["agents", id]) if *id == agent.id => {
            agent.prepared += 1;
            (
                202,
                None,
                json!({"agentId": id, "agentStatus": "PREPARING", "agentVersion": "DRAFT",
                               "preparedAt": "2026-12-06T12:00:01Z"}),
            )
        }
        _ => not_found(format!("{method} {path}")),
    }
}

/// An action group in `GetAgentActionGroup`'s shape.
pub fn group(id: &str, name: &str, executor: Value, schema: (&str, Value)) -> (String, Value) {
    let mut g = json!({
        "agentId": "AGENT0001", "agentVersion": "DRAFT", "actionGroupId": id, "actionGroupName": name,
        "actionGroupState": "ENABLED", "actionGroupExecutor": executor,
        "createdAt": "2026-12-01T09:00:00Z", "updatedAt": "2026-12-01T09:00:00Z",
        "description": format!("{name} tools"),
    });
    if !schema.0.is_empty() {
        g[schema.0] = schema.1;
    }
    (id.to_string(), g)
}
