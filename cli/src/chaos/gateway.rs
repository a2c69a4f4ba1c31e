//! The interceptor soak (`dedup chaos --door interceptor`): what changes under a call while it is
//! in flight, thousands of times, through the real handler and the real DynamoDB store (issue 48).
//!
//! A deployment of several containers (handlers over one table) is driven the way an AgentCore
//! Gateway drives its interceptor: a `tools/call` REQUEST to one container, the target run by the
//! soak itself (counted per call), then the RESPONSE to another container. Each distinct call is
//! retried several times, sequentially, as an agent would after a timeout, and many calls are in
//! flight at once. Between a REQUEST and its RESPONSE one fault class acts ([`GatewayFault`]): a
//! config refresh that re-keys the tool, a schema change, a listing change, a REQUEST whose claim
//! answers were all lost and that the Gateway sends again to another container (while the first
//! releases what it remembered), a container restart, or an identical retry sent while the call
//! runs.
//!
//! The oracle: the target runs at most once per call (double executions); every RESPONSE after a
//! run settles the claim and every later send replays the stored text (lost results); at the end
//! a fresh container replays every call that ran (stuck claims). Retries are keyed under the
//! configuration and listing their call was first keyed under: a retry keyed *after* a change
//! that re-keys its tool is a new call by the documented rule (docs/configuration.md), not a
//! double execution, so the soak's config and listing changes last from a REQUEST to its
//! RESPONSE only.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::demo::{DemoTool, Ledger};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{ClientContext, Handled, Handler, Invocation};
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::stand_ins::Faulty;
use toolcall_dedup::stand_ins::events::interceptor_response as response;
use toolcall_dedup::store::table::create_table_with_client;
use toolcall_dedup::store::{DynamoDbConfig, DynamoDbStore};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

use super::{ChaosError, SoakReport};

/// The tool every call names, as the Gateway lists it (target `inventory`).
const TOOL: &str = "inventory___reserve_stock";

/// What acts between a call's REQUEST and its RESPONSE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayFault {
    None,
    /// The RESPONSE reaches a handler rebuilt by a config refresh whose policy re-keys the tool
    /// (`key_fields: ["/sku"]`), carrying on its container's lost claims.
    RefreshRekeys,
    /// The RESPONSE reaches a handler rebuilt by a refresh whose schema types `quantity` as text
    /// (the schema object changed, the document not).
    SchemaChange,
    /// A `tools/list` answer retyping `quantity` is learned before the RESPONSE (and the old
    /// listing after it).
    ListingChange,
    /// The REQUEST's claim applies in one container but every answer to it is lost; the Gateway
    /// sends the same REQUEST (same `REQUEST_ID`) to another container, which goes on under the
    /// claim; the first container's next call releases the token it remembered.
    ResentAfterLostAnswers,
    /// The container the RESPONSE goes to is replaced by a fresh one (a cold start) first.
    ContainerRestart,
    /// An identical retry (a new request) is sent while the call runs.
    RetryInFlight,
}

impl GatewayFault {
    pub const ALL: [GatewayFault; 6] = [
        GatewayFault::RefreshRekeys,
        GatewayFault::SchemaChange,
        GatewayFault::ListingChange,
        GatewayFault::ResentAfterLostAnswers,
        GatewayFault::ContainerRestart,
        GatewayFault::RetryInFlight,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GatewayFault::None => "none",
            GatewayFault::RefreshRekeys => "gateway_refresh_rekeys_mid_call",
            GatewayFault::SchemaChange => "gateway_schema_change_mid_call",
            GatewayFault::ListingChange => "gateway_listing_change_mid_call",
            GatewayFault::ResentAfterLostAnswers => "gateway_resent_request_after_lost_answers",
            GatewayFault::ContainerRestart => "gateway_container_restart",
            GatewayFault::RetryInFlight => "gateway_retry_in_flight",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<GatewayFault> {
        GatewayFault::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// One interceptor soak against one server.
#[derive(Debug, Clone)]
pub struct GatewaySoakConfig {
    pub seed: u64,
    /// Interceptor invocations to make, about (the last calls' rounds finish).
    pub invocations: usize,
    /// A label for the report (`moto`, `dynalite`).
    pub server: String,
    pub endpoint: String,
    /// Calls in flight at most.
    pub concurrency: usize,
    /// Containers in the deployment.
    pub containers: usize,
    pub excluded: Vec<GatewayFault>,
}

type Container = Handler<Faulty<DynamoDbStore>, DemoTool>;

/// The deployment: containers over one table, and the configurations a refresh may bring.
struct Deployment {
    store: DynamoDbStore,
    containers: Vec<RwLock<Arc<Container>>>,
    base: Config,
    rekeyed: Config,
    retyped: Config,
}

impl Deployment {
    /// A fresh table on the server, and `cfg.containers` containers over it.
    async fn start(cfg: &GatewaySoakConfig) -> Result<Deployment, ChaosError> {
        let table = format!(
            "dedup-gateway-soak-{}-{}",
            cfg.seed,
            uuid::Uuid::new_v4().simple()
        );
        let store_cfg = DynamoDbConfig::new(table);
        let client = super::sdk_client(&cfg.endpoint);
        create_table_with_client(&client, &store_cfg).await?;
        let store = DynamoDbStore::new(&client, store_cfg)?;
        let base = Config::default();
        let rekeyed = Config {
            policies: policies(json!({"tools": {TOOL: {"key_fields": ["/sku"]}}}))?,
            ..Config::default()
        };
        let retyped = Config {
            policies: policies(json!({"tools": {TOOL: {"schema": {"type": "object",
            "properties": {"sku": {"type": "string"}, "quantity": {"type": "string"}}}}}}))?,
            ..Config::default()
        };
        let mut dep = Deployment {
            store,
            containers: Vec::new(),
            base,
            rekeyed,
            retyped,
        };
        let containers = (0..cfg.containers.max(1))
            .map(|_| RwLock::new(Arc::new(dep.build(&dep.base))))
            .collect();
        dep.containers = containers;
        Ok(dep)
    }

    fn build(&self, config: &Config) -> Container {
        Handler::new(
            Faulty::new(self.store.clone()),
            DemoTool::new(Ledger::memory()),
            config,
            Telemetry::quiet(),
        )
        // An identical call in flight is answered at once, as the interceptor tests do.
        .with_settings(|s| s.wait = Duration::ZERO)
    }

    fn pick(&self, rng: &mut fastrand::Rng) -> (usize, Arc<Container>) {
        let at = rng.usize(..self.containers.len());
        let container = self.containers[at]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (at, container)
    }

    /// Another container than `not`, when there is one.
    fn other(&self, rng: &mut fastrand::Rng, not: usize) -> Arc<Container> {
        let n = self.containers.len();
        let at = if n > 1 {
            (not + 1 + rng.usize(..n - 1)) % n
        } else {
            0
        };
        self.containers[at]
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One distinct call: its own session and its own gateway (so a listing change reaches no other
/// call).
struct Call {
    index: usize,
    sends: Vec<GatewayFault>,
}

impl Call {
    fn gateway(&self) -> String {
        format!("gw{}", self.index)
    }

    fn request(&self, id: u64) -> Value {
        json!({"interceptorInputVersion": "1.0", "mcp": {"gatewayRequest": {
            "path": "/mcp", "httpMethod": "POST",
            "headers": {"content-type": "application/json",
                        "Mcp-Session-Id": format!("session-{}", self.index),
                        "host": format!("{}.gateway.bedrock-agentcore.us-east-1.amazonaws.com",
                                        self.gateway())},
            "body": {"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": TOOL, "arguments": {
                         "sku": format!("SKU-{}", self.index), "quantity": 3}}}}}})
    }

    /// A `tools/list` RESPONSE of this call's gateway typing `quantity` as `kind`.
    fn listing(&self, kind: &str) -> Value {
        let mut ev = self.request(0);
        ev["mcp"]["gatewayRequest"]["body"] =
            json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"});
        ev["mcp"]["gatewayResponse"] = json!({"statusCode": 200, "headers": {},
            "body": {"jsonrpc": "2.0", "id": 0, "result": {"tools": [{"name": TOOL,
                "inputSchema": {"type": "object", "required": ["sku", "quantity"],
                    "properties": {"sku": {"type": "string"}, "quantity": {"type": kind}}}}]}}});
        ev
    }
}

/// The text of a replayed result, if the answer is one.
fn replayed_text(handled: &Handled) -> Option<String> {
    let answer: Value = serde_json::from_str(handled.response.as_ref().ok()?.get()).ok()?;
    let body = &answer["mcp"]["transformedGatewayResponse"]["body"];
    body["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_string)
}

/// What one call's rounds saw.
#[derive(Default)]
struct Seen {
    invocations: u64,
    /// Times the target ran.
    runs: u64,
    replayed: u64,
    /// The text the settled RESPONSE stored.
    stored: Option<String>,
    outcomes: BTreeMap<&'static str, u64>,
    faults: BTreeMap<&'static str, u64>,
    lost_results: u64,
    findings: Vec<String>,
}

impl Seen {
    /// `fault` acted on this call.
    fn acted(&mut self, fault: GatewayFault) {
        *self.faults.entry(fault.name()).or_default() += 1;
    }

    fn saw(&mut self, handled: &Handled) {
        self.invocations += 1;
        *self.outcomes.entry(handled.outcome.name()).or_default() += 1;
    }

    /// Adds what `call`'s rounds saw to the report (`outcomes` by name).
    fn add_to(
        self,
        call: &Call,
        report: &mut SoakReport,
        outcomes: &mut HashMap<&'static str, u64>,
    ) {
        report.invocations += self.invocations;
        report.executed += self.runs;
        report.replayed += self.replayed;
        report.double_executions += self.runs.saturating_sub(1);
        if self.runs > 1 {
            report.findings.push(format!(
                "call {}: the target ran {} times",
                call.index, self.runs
            ));
        }
        report.lost_results += self.lost_results;
        report.findings.extend(self.findings);
        for (name, n) in self.faults {
            *report.faults.entry(name.to_string()).or_default() += n;
        }
        for (name, n) in self.outcomes {
            *outcomes.entry(name).or_default() += n;
        }
    }
}

async fn send(container: &Container, ev: &Value, request_id: &str, seen: &mut Seen) -> Handled {
    let context = ClientContext::from([("REQUEST_ID".to_string(), request_id.to_string())]);
    // Boxed: a debug build's handler future is too deep for a worker's stack, nested in a round.
    let handled =
        Box::pin(container.handle_with_context(ev, &Invocation::default(), Some(&context))).await;
    seen.saw(&handled);
    handled
}

/// The target runs: the ledger's count goes up and its answer names the run.
fn run_target(call: &Call, seen: &mut Seen) -> String {
    seen.runs += 1;
    format!("reserved SKU-{} (run {})", call.index, seen.runs)
}

/// One Gateway round of `call`'s send `attempt` with `fault` between REQUEST and RESPONSE.
async fn round(
    dep: &Deployment,
    call: &Call,
    attempt: u64,
    fault: GatewayFault,
    rng: &mut fastrand::Rng,
    seen: &mut Seen,
) {
    let request = call.request(attempt);
    let request_id = format!("{}-{attempt}", call.index);
    let (at, first) = dep.pick(rng);
    let answered = if fault == GatewayFault::ResentAfterLostAnswers {
        resent_after_lost_answers(dep, call, attempt, &first, seen).await
    } else {
        send(&first, &request, &request_id, seen).await
    };
    match answered.outcome {
        Outcome::Executed => {}
        Outcome::Replayed => {
            seen.replayed += 1;
            let text = replayed_text(&answered);
            if text.is_none() || text != seen.stored {
                seen.lost_results += 1;
                seen.findings.push(format!(
                    "call {} send {attempt}: replayed {text:?}, stored {:?}",
                    call.index, seen.stored
                ));
            }
            return;
        }
        _ => return,
    }
    let text = run_target(call, seen);
    if !matches!(
        fault,
        GatewayFault::None | GatewayFault::ResentAfterLostAnswers
    ) {
        seen.acted(fault);
    }
    let responder = responder_after(dep, call, attempt, fault, at, rng, seen).await;
    let settled = send(&responder, &response(&request, &text), &request_id, seen).await;
    if fault == GatewayFault::ListingChange {
        send(
            &responder,
            &call.listing("integer"),
            &format!("{request_id}-relist"),
            seen,
        )
        .await;
    }
    if settled.outcome == Outcome::Executed {
        seen.stored = Some(text);
    } else {
        seen.lost_results += 1;
        seen.findings.push(format!(
            "call {} send {attempt} ({}): the RESPONSE did not settle: {:?}",
            call.index,
            fault.name(),
            settled.outcome
        ));
    }
}

/// The REQUEST of `call`'s send `attempt` through a container whose claim answers are all lost;
/// when they were, the Gateway sends it again to `first` (another container), while the lossy
/// container's next call releases the token it remembered.
async fn resent_after_lost_answers(
    dep: &Deployment,
    call: &Call,
    attempt: u64,
    first: &Container,
    seen: &mut Seen,
) -> Handled {
    let request = call.request(attempt);
    let request_id = format!("{}-{attempt}", call.index);
    let lossy = dep.build(&dep.base);
    lossy.store().lose_claim_answers.store(1, Ordering::SeqCst);
    let lost = send(&lossy, &request, &request_id, seen).await;
    if lost.outcome != Outcome::StoreError {
        return lost;
    }
    seen.acted(GatewayFault::ResentAfterLostAnswers);
    let resent = send(first, &request, &request_id, seen).await;
    let other = Call {
        index: call.index + 1_000_000_000,
        sends: vec![],
    };
    let next = other.request(attempt);
    let next_id = format!("{}-next-{attempt}", call.index);
    if send(&lossy, &next, &next_id, seen).await.outcome == Outcome::Executed {
        send(&lossy, &response(&next, "noted"), &next_id, seen).await;
    }
    resent
}

/// The container that gets the RESPONSE of a REQUEST answered by container `at`, after `fault`
/// acted in between.
async fn responder_after(
    dep: &Deployment,
    call: &Call,
    attempt: u64,
    fault: GatewayFault,
    at: usize,
    rng: &mut fastrand::Rng,
    seen: &mut Seen,
) -> Arc<Container> {
    let request_id = format!("{}-{attempt}", call.index);
    match fault {
        GatewayFault::RefreshRekeys | GatewayFault::SchemaChange => {
            let config = if fault == GatewayFault::RefreshRekeys {
                &dep.rekeyed
            } else {
                &dep.retyped
            };
            Arc::new(dep.build(config).carrying_on(&dep.other(rng, at)))
        }
        GatewayFault::ListingChange => {
            let learner = dep.other(rng, at);
            send(
                &learner,
                &call.listing("string"),
                &format!("{request_id}-list"),
                seen,
            )
            .await;
            learner
        }
        GatewayFault::ContainerRestart => {
            let replaced = rng.usize(..dep.containers.len());
            let fresh = Arc::new(dep.build(&dep.base));
            *dep.containers[replaced]
                .write()
                .unwrap_or_else(|p| p.into_inner()) = fresh.clone();
            fresh
        }
        GatewayFault::RetryInFlight => {
            let retry = call.request(attempt + 500_000);
            let retry_id = format!("{request_id}-in-flight");
            let dup = send(&dep.other(rng, at), &retry, &retry_id, seen).await;
            if dup.outcome == Outcome::Executed {
                let again = run_target(call, seen);
                send(
                    &dep.other(rng, at),
                    &response(&retry, &again),
                    &retry_id,
                    seen,
                )
                .await;
            }
            dep.other(rng, at)
        }
        GatewayFault::None | GatewayFault::ResentAfterLostAnswers => dep.other(rng, at),
    }
}

fn policies(json: Value) -> Result<PolicySet, ChaosError> {
    PolicySet::parse(&json.to_string(), false)
        .map_err(|e| ChaosError::Setup(format!("the soak's policies: {e}")))
}

/// Draws each call's sends and their faults.
fn plan(cfg: &GatewaySoakConfig) -> Vec<Call> {
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let drawn: Vec<GatewayFault> = GatewayFault::ALL
        .into_iter()
        .filter(|f| !cfg.excluded.contains(f))
        .collect();
    let (mut calls, mut planned) = (Vec::new(), 0usize);
    while planned * 10 < cfg.invocations * 12 {
        let sends: Vec<GatewayFault> = (0..rng.usize(2..=5))
            .map(|_| match rng.u32(..10) {
                0..=3 => GatewayFault::None,
                _ if drawn.is_empty() => GatewayFault::None,
                _ => drawn[rng.usize(..drawn.len())],
            })
            .collect();
        // The first send runs the target (REQUEST and RESPONSE), the rest mostly replay; a
        // fault adds an invocation or two (fewer when it meets a completed call), the settling
        // pass one. About 1.05 of this is made: planned to 1.2 of what is asked.
        planned += 1 + sends.len() + sends.iter().filter(|f| **f != GatewayFault::None).count();
        calls.push(Call {
            index: calls.len(),
            sends,
        });
    }
    calls
}

/// Runs the interceptor soak against one server.
pub async fn gateway_soak(cfg: &GatewaySoakConfig) -> Result<SoakReport, ChaosError> {
    let started = Instant::now();
    let dep = Arc::new(Deployment::start(cfg).await?);
    let calls = plan(cfg);
    let distinct = calls.len() as u64;

    let gate = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let progress = crate::progress::bar(distinct, &format!("interceptor calls on {}", cfg.server));
    for call in calls {
        let permit = gate.clone().acquire_owned().await.expect("never closed");
        let (dep, seed) = (dep.clone(), cfg.seed);
        tasks.spawn(async move {
            let mut rng =
                fastrand::Rng::with_seed(seed ^ (call.index as u64).wrapping_mul(0x9e37_79b9));
            let mut seen = Seen::default();
            for (attempt, fault) in call.sends.iter().enumerate() {
                Box::pin(round(
                    &dep,
                    &call,
                    attempt as u64 + 1,
                    *fault,
                    &mut rng,
                    &mut seen,
                ))
                .await;
            }
            drop(permit);
            (call, seen)
        });
        progress.inc(1);
    }
    progress.finish_and_clear();

    let mut report = SoakReport {
        seed: cfg.seed,
        servers: vec![format!("{} (interceptor)", cfg.server)],
        distinct_calls: distinct,
        faults: GatewayFault::ALL
            .iter()
            .map(|f| (f.name().to_string(), 0))
            .collect(),
        ..SoakReport::default()
    };
    let mut outcomes: HashMap<&'static str, u64> = HashMap::new();
    let settle = dep.build(&dep.base);
    while let Some(joined) = tasks.join_next().await {
        let (call, mut seen) =
            joined.map_err(|e| ChaosError::Setup(format!("a call panicked: {e}")))?;
        if seen.runs > 0 {
            settle_call(&settle, &call, &mut seen, &mut report).await;
        }
        seen.add_to(&call, &mut report, &mut outcomes);
    }
    report.outcomes = outcomes
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The settling pass of a call that ran: a fresh container replays it.
async fn settle_call(settle: &Container, call: &Call, seen: &mut Seen, report: &mut SoakReport) {
    let request = call.request(999);
    let id = format!("{}-settle", call.index);
    let last = send(settle, &request, &id, seen).await;
    match last.outcome {
        Outcome::Replayed if replayed_text(&last) == seen.stored => {}
        Outcome::InProgress => {
            report.stuck_claims += 1;
            report
                .findings
                .push(format!("call {}: still in progress at the end", call.index));
        }
        Outcome::Executed => {
            let text = run_target(call, seen);
            send(settle, &response(&request, &text), &id, seen).await;
        }
        other => {
            seen.lost_results += 1;
            seen.findings.push(format!(
                "call {}: at the end {other:?}, {:?}",
                call.index,
                replayed_text(&last)
            ));
        }
    }
}
