//! The chaos soak: thousands of invocations of hundreds of distinct calls, sent concurrently
//! through the real handler and the real DynamoDB store, with faults on the store path and the
//! tool path, checked at the end against the demo tool's ledger (see [`oracle`]).
//!
//! - **Store path**: a [`proxy::FaultProxy`] sits between the store and the server and drops
//!   connections (before and after forwarding), delays answers past the SDK attempt timeout,
//!   answers with DynamoDB's throttling, write-conflict, 5xx and 408 errors (5xx also in place of
//!   an answer to a request it forwarded), garbles or stalls answers, and has windows: outages
//!   (every connection cut and refused), refusals (the listening socket closed: connects refused),
//!   access-or-table errors (every request answered one of the thirteen documented refusals), and
//!   black holes (connects hang, open connections go silent). The server process itself is paused
//!   (`SIGSTOP`, then `SIGCONT`) in other windows. It is paused rather than restarted because moto
//!   keeps its tables in memory: a restart would lose the table, which no real DynamoDB outage
//!   does. Every class is named in [`FaultClass`]; the report's `faults` has a count for each.
//! - **Tool path**: the tool raises before its effect, crashes after it, hangs past its timeout,
//!   or ignores its timeout until the Lambda deadline kills the invocation; invocations are killed
//!   (their future dropped) while the tool runs or right after its effect, so that later
//!   invocations must take the lease over. The `Invoke` classes go through the real
//!   `LambdaDispatcher` to a fake Lambda ([`lambda`]).
//!
//! Leases are short (an invocation has [`BUDGET`]; its lease ends [`LEASE_MARGIN`] after that),
//! so takeovers happen within seconds. The interleaving (which call is sent when, with which
//! fault) is fixed by the seed; the exact timing against a real server is not.

pub(crate) mod attempt;
pub mod gateway;
pub(crate) mod lambda;
pub(crate) mod oracle;
pub(crate) mod plan;
pub mod proxy;
pub(crate) mod tool;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::demo::{DemoTool, Ledger};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Door, Handler, Invocation};
use toolcall_dedup::key::PolicySet;
use toolcall_dedup::doors::port::DedupInfo;
use toolcall_dedup::store::table::create_table_with_client;
use toolcall_dedup::store::{
    ClaimBudget, DynamoDbConfig, DynamoDbStore, MemoryStore, RetryPolicy, Store,
};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

use attempt::{ATTEMPT, Attempt, NotingClock, NotingStore, ToolFault};
use lambda::ToolLambda;
use oracle::{Observed, Verdict};
use proxy::{AccessError, FaultProxy, RequestFaults, StoreFault};
use tool::ChaosTool;

/// Time each invocation has before its Lambda deadline.
pub(crate) const BUDGET: Duration = Duration::from_millis(3000);
/// The handler keeps this much back before the deadline to store the result; it covers the
/// store's retry deadline, so a completion is not cut by the deadline...
const COMPLETION_RESERVE: Duration = Duration::from_millis(1200);
/// ...and this much to answer.
const REPLY_MARGIN: Duration = Duration::from_millis(100);
/// A lease ends this long after its invocation's deadline.
const LEASE_MARGIN: Duration = Duration::from_millis(500);
/// The store's retries: an attempt slower than this is given up and retried...
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(400);
/// ...until this much time has passed since the call.
pub(crate) const STORE_DEADLINE: Duration = Duration::from_millis(1200);
/// How long the store may take to read back a claim whose every answer was lost.
pub(crate) const READ_BACK_WITHIN: Duration = Duration::from_secs(1);
/// A [`ToolFault::SlowClaim`] invocation is followed by a fault-free repeat this long after the
/// lease sized at its claim would have ended (before its late side effect).
const SLOW_CLAIM_PROBE_AFTER: Duration = Duration::from_millis(100);
/// Waited past the last lease end before the settling pass.
const SETTLE_MARGIN: Duration = Duration::from_millis(500);

/// The settling pass waits for the last lease asked for, but never longer than this.
const MAX_SETTLE_WAIT: Duration = Duration::from_secs(60);

/// The settling pass: invocations in flight, and rounds for calls answered with a store error.
const SETTLE_CONCURRENCY: usize = 4;
const SETTLE_ROUNDS: usize = 3;

/// Per-request store faults (per mille) during the run.
const STORE_FAULTS: RequestFaults = RequestFaults {
    drop_before: 15,
    drop_after: 10,
    delay: 10,
    throttle_provisioned: 15,
    throttle_rate: 10,
    deliver_late: 15,
    server_error: 16,
    throttle_request_limit: 8,
    write_conflict: 10,
    request_timeout: 5,
    garbled: 8,
    stalled: 8,
    delay_by: Duration::from_millis(600),
    late_by: Duration::from_millis(4000),
    stall_for: Duration::from_millis(700),
};

/// A fault class, by the name the report's `faults` counts it under and `--without` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultClass {
    /// Planned per invocation (the tool's faults, and the store-path faults armed for one key).
    Tool(ToolFault),
    /// Drawn by the fault proxy per request.
    Request(StoreFault),
    /// Outage windows (`store_outage_windows`; their cuts count as `store_outage_refused`).
    Outages,
    /// Server pauses (`SIGSTOP`/`SIGCONT`).
    Pauses,
    /// Access-or-table-error windows (`store_access_or_table_error` counts the requests answered).
    AccessErrors,
    /// Windows in which the proxy does not listen (`store_connect_refused` counts the windows).
    Refusals,
    /// Windows in which connects hang and connections go silent (`store_connect_blackholed`
    /// counts the windows).
    Blackholes,
}

impl FaultClass {
    /// Every class the soak injects.
    pub fn all() -> Vec<FaultClass> {
        let tool = ToolFault::ALL
            .into_iter()
            .filter(|t| *t != ToolFault::None)
            .map(FaultClass::Tool);
        let request = StoreFault::ALL
            .into_iter()
            .filter(|f| f.is_per_request())
            .map(FaultClass::Request);
        let windows = [
            FaultClass::Outages,
            FaultClass::Pauses,
            FaultClass::AccessErrors,
            FaultClass::Refusals,
            FaultClass::Blackholes,
        ];
        tool.chain(request).chain(windows).collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::Tool(t) => t.name(),
            FaultClass::Request(f) => f.name(),
            FaultClass::Outages => "store_outage_windows",
            FaultClass::Pauses => "server_pauses",
            FaultClass::AccessErrors => StoreFault::AccessOrTableError.name(),
            FaultClass::Refusals => "store_connect_refused",
            FaultClass::Blackholes => "store_connect_blackholed",
        }
    }

    /// The class called `name` (`store_outage_refused` names the outages too).
    pub fn from_name(name: &str) -> Option<FaultClass> {
        if name == StoreFault::OutageRefused.name() {
            return Some(FaultClass::Outages);
        }
        FaultClass::all().into_iter().find(|c| c.name() == name)
    }
}

/// Every key of the report's `faults`: each class, and the proxy's own counts (connections cut in
/// outages, keyed answers held or dropped).
pub fn fault_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = FaultClass::all()
        .into_iter()
        .map(FaultClass::name)
        .collect();
    names.extend(StoreFault::ALL.into_iter().map(StoreFault::name));
    names.sort_unstable();
    names.dedup();
    names
}

/// One soak against one server.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub seed: u64,
    pub invocations: usize,
    /// A label for the report (`moto`, `dynalite`).
    pub server: String,
    pub endpoint: String,
    /// The server's process, paused in the pause windows; `None` skips them.
    pub server_pid: Option<u32>,
    /// Invocations in flight at most.
    pub concurrency: usize,
    /// Planned invocations per second.
    pub rate: f64,
    /// `events/` (its `corpus/` holds the corpus events and `policy.json`).
    pub events_dir: PathBuf,
    /// Fault classes left out.
    pub excluded: Vec<FaultClass>,
    /// Where the ledger file goes.
    pub ledger_dir: PathBuf,
}

/// The report of one soak (one server), or of several summed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SoakReport {
    pub seed: u64,
    pub(crate) servers: Vec<String>,
    pub invocations: u64,
    pub distinct_calls: u64,
    /// Every fault class (and the proxy's own counts), 0 when not drawn or left out.
    pub faults: BTreeMap<String, u64>,
    /// The forms of the classes that have several, as `class.form` (e.g.
    /// `store_server_error.503_after_forward`), and what the windows cut.
    pub(crate) fault_variants: BTreeMap<String, u64>,
    /// What the store-path faults led to: leases moved, lost claims released (by the store or,
    /// handed back, by the executor), slow completions stored and how close to the deadline.
    pub(crate) store_paths: BTreeMap<String, u64>,
    pub(crate) outcomes: BTreeMap<String, u64>,
    /// Side effects in the ledger.
    pub executed: u64,
    /// Answers replayed from a stored result (after a wait included).
    pub replayed: u64,
    pub double_executions: u64,
    pub lost_results: u64,
    pub stuck_claims: u64,
    pub(crate) reexecutions_after_unknown_outcome: u64,
    /// Of those, the ones whose claim's write applied after the earlier lease ended although its
    /// condition's clock reading came before (a held or retried claim write).
    pub(crate) reexecutions_claimed_by_a_late_write: u64,
    /// Completions refused because they came after their own lease ended and the key had been
    /// taken over: the lease token's fence at work.
    pub(crate) late_completions_refused: u64,
    pub(crate) unexecuted_before_settle: u64,
    /// Invoke faults after which the executor released a claim whose tool may have run, or kept
    /// one whose tool provably never started.
    pub claims_misjudged: u64,
    pub(crate) key_splits: u64,
    settle_failures: u64,
    pub(crate) duration_ms: u64,
    pub(crate) ledgers: Vec<String>,
    pub findings: Vec<String>,
}

impl SoakReport {
    /// True when the oracle found nothing wrong.
    pub fn passed(&self) -> bool {
        self.double_executions == 0
            && self.lost_results == 0
            && self.stuck_claims == 0
            && self.key_splits == 0
            && self.settle_failures == 0
            && self.claims_misjudged == 0
    }

    /// Sums reports of several servers.
    pub(crate) fn merge(mut self, other: SoakReport) -> SoakReport {
        self.servers.extend(other.servers);
        self.invocations += other.invocations;
        self.distinct_calls += other.distinct_calls;
        for (k, v) in other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        for (k, v) in other.fault_variants {
            *self.fault_variants.entry(k).or_default() += v;
        }
        for (k, v) in other.store_paths {
            *self.store_paths.entry(k).or_default() += v;
        }
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        self.executed += other.executed;
        self.replayed += other.replayed;
        self.double_executions += other.double_executions;
        self.lost_results += other.lost_results;
        self.stuck_claims += other.stuck_claims;
        self.reexecutions_after_unknown_outcome += other.reexecutions_after_unknown_outcome;
        self.reexecutions_claimed_by_a_late_write += other.reexecutions_claimed_by_a_late_write;
        self.late_completions_refused += other.late_completions_refused;
        self.unexecuted_before_settle += other.unexecuted_before_settle;
        self.claims_misjudged += other.claims_misjudged;
        self.key_splits += other.key_splits;
        self.settle_failures += other.settle_failures;
        self.duration_ms += other.duration_ms;
        self.ledgers.extend(other.ledgers);
        self.findings.extend(other.findings);
        self
    }

    /// The human summary (several lines).
    pub fn summary(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let mut s = format!(
            "chaos soak, seed {} on {}: {} invocations of {} distinct calls in {:.1} s\n\
             faults: {}\n\
             fault forms: {}\n\
             store paths: {}\n\
             answers: {}\n\
             side effects: {} ({} re-executions after an unknown outcome, allowed once its lease ended, \
             {} of them claimed by a write applied after it though sent before); \
             {} calls unexecuted before the settling pass; {} late completions refused by the lease token\n\
             double executions: {}, lost results: {}, stuck claims: {}, key splits: {}, settle failures: {}, \
             claims misjudged: {}\n\
             ledger: {}\n",
            self.seed,
            self.servers.join(" + "),
            self.invocations,
            self.distinct_calls,
            self.duration_ms as f64 / 1000.0,
            faults.join(", "),
            self.fault_variants
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.store_paths
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            outcomes.join(", "),
            self.executed,
            self.reexecutions_after_unknown_outcome,
            self.reexecutions_claimed_by_a_late_write,
            self.unexecuted_before_settle,
            self.late_completions_refused,
            self.double_executions,
            self.lost_results,
            self.stuck_claims,
            self.key_splits,
            self.settle_failures,
            self.claims_misjudged,
            self.ledgers.join(", "),
        );
        for f in &self.findings {
            s.push_str("  ");
            s.push_str(f);
            s.push('\n');
        }
        s.push_str(if self.passed() { "PASS\n" } else { "FAIL\n" });
        s
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] toolcall_dedup::store::StoreError),
}

/// The corpus events (with the corpus policy) that the handler executes with the demo tool;
/// events it rejects or the tool declines to run are left out.
async fn corpus_events(
    events_dir: &Path,
) -> Result<(Vec<(String, Value)>, PolicySet), ChaosError> {
    let corpus = events_dir.join("corpus");
    let policy_path = corpus.join("policy.json");
    let policies = if policy_path.exists() {
        PolicySet::load(&policy_path).map_err(|e| ChaosError::Setup(e.to_string()))?
    } else {
        PolicySet::default()
    };
    let mut files = Vec::new();
    for sub in ["retry", "deliberate_repeat"] {
        let dir = corpus.join(sub);
        if !dir.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    let config = Config {
        policies: policies.clone(),
        ..Config::default()
    };
    let probe = Handler::new(
        MemoryStore::new(),
        DemoTool::new(Ledger::memory()),
        &config,
        Telemetry::quiet(),
    );
    let mut events = Vec::new();
    for path in files {
        let event: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .map_err(|e| ChaosError::Setup(format!("{}: {e}", path.display())))?;
        let handled = probe.handle(&event, &Invocation::default()).await;
        if handled.outcome == Outcome::Executed {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            events.push((name.unwrap_or_default(), event));
        }
    }
    Ok((events, policies))
}

/// Runs one soak and checks it.
pub async fn soak(cfg: &SoakConfig) -> Result<SoakReport, ChaosError> {
    let started = Instant::now();
    let (corpus, policies) = corpus_events(&cfg.events_dir).await?;
    let excluded_tool: Vec<ToolFault> = cfg
        .excluded
        .iter()
        .filter_map(|c| match c {
            FaultClass::Tool(t) => Some(*t),
            _ => None,
        })
        .collect();
    let mut plan = plan::build(cfg.seed, cfg.invocations, cfg.rate, &corpus, &excluded_tool);
    let without = |class: FaultClass| cfg.excluded.contains(&class);
    if without(FaultClass::Outages) {
        plan.outages.clear();
    }
    if without(FaultClass::Pauses) {
        plan.pauses.clear();
    }
    if without(FaultClass::AccessErrors) {
        plan.access_errors.clear();
    }
    if without(FaultClass::Refusals) {
        plan.refusals.clear();
    }
    if without(FaultClass::Blackholes) {
        plan.blackholes.clear();
    }
    let store_faults = cfg.excluded.iter().fold(STORE_FAULTS, |f, c| match c {
        FaultClass::Request(fault) => f.without(*fault),
        _ => f,
    });

    let table = format!("dedup-chaos-{}-{}", cfg.seed, uuid::Uuid::new_v4().simple());
    let store_cfg = DynamoDbConfig {
        retry: RetryPolicy {
            deadline: STORE_DEADLINE,
            attempt_timeout: ATTEMPT_TIMEOUT,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
        },
        // The fault classes are timed against the store's deadline; claims get it too, and no
        // breaker turns a window's failures into refusals of calls that never reached the store.
        claim: ClaimBudget {
            write_within: STORE_DEADLINE,
            read_back_within: READ_BACK_WITHIN,
            breaker_open_for: Duration::ZERO,
        },
        ..DynamoDbConfig::new(table)
    };
    let proxy = FaultProxy::start(&cfg.endpoint, cfg.seed, &store_cfg.key_attribute).await?;
    let client = sdk_client(proxy.url());
    create_table_with_client(&client, &store_cfg).await?;
    let store = DynamoDbStore::new(&client, store_cfg)?.with_clock(NotingClock);

    let ledger_path = cfg
        .ledger_dir
        .join(format!("dedup-chaos-{}-{}.jsonl", cfg.seed, cfg.server));
    match std::fs::remove_file(&ledger_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let config = Config {
        policies,
        ..Config::default()
    };
    let tool = ChaosTool::new(DemoTool::new(Ledger::file(&ledger_path)));
    let lambda = Arc::new(ToolLambda::start(tool.demo.clone()).await?);
    let handler = Arc::new(
        Handler::new(
            NotingStore::new(store).with_keyed_faults(proxy.keyed()),
            tool.with_lambda(lambda.clone()),
            &config,
            Telemetry::quiet(),
        )
        .with_settings(|s| {
            s.completion_reserve = COMPLETION_RESERVE;
            s.reply_margin = REPLY_MARGIN;
            s.lease_margin = LEASE_MARGIN;
            s.default_budget = BUDGET;
        }),
    );

    // The run, with the fault windows alongside.
    proxy.set_faults(store_faults);
    let run_start = Instant::now();
    let windows = tokio::spawn(fault_windows(
        run_start,
        Windows {
            outages: plan.outages.clone(),
            pauses: plan.pauses.clone(),
            access_errors: plan.access_errors.clone(),
            refusals: plan.refusals.clone(),
            blackholes: plan.blackholes.clone(),
        },
        cfg.server_pid,
        ProxySwitch(Arc::new(proxy)),
    ));
    let gate = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut probes = tokio::task::JoinSet::new();
    let progress = crate::progress::bar(
        plan.sends.len() as u64,
        &format!("invocations on {}", cfg.server),
    );
    for send in &plan.sends {
        tokio::time::sleep_until(run_start + send.at).await;
        let permit = gate.clone().acquire_owned().await.expect("never closed");
        let handler = handler.clone();
        let send = send.clone();
        if send.fault == ToolFault::SlowClaim {
            // A repeat just after the lease sized at the claim would have ended, while the tool
            // still runs: it must find the moved lease, not take the key over.
            let (handler, send) = (handler.clone(), send.clone());
            probes.spawn(async move {
                tokio::time::sleep(BUDGET + LEASE_MARGIN + SLOW_CLAIM_PROBE_AFTER).await;
                invoke(&handler, send.call, &send.event, ToolFault::None).await
            });
        }
        tasks.spawn(async move {
            let observed = invoke(&handler, send.call, &send.event, send.fault).await;
            drop(permit);
            (send.fault, observed)
        });
        progress.inc(1);
    }
    progress.finish_and_clear();
    let mut observed: Vec<Observed> = Vec::with_capacity(plan.sends.len());
    let mut faults: BTreeMap<String, u64> = fault_names()
        .into_iter()
        .map(|n| (n.to_string(), 0))
        .collect();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (fault, o) =
            joined.map_err(|e| ChaosError::Setup(format!("an invocation panicked: {e}")))?;
        if fault != ToolFault::None
            && !fault.counted_by_proxy()
            && (o.notes.invoked || o.notes.lost_claim.is_some())
        {
            *faults.entry(fault.name().into()).or_default() += 1;
        }
        let outcome = o
            .killed
            .unwrap_or_else(|| o.outcome.map_or("none", Outcome::name));
        *outcomes.entry(outcome.into()).or_default() += 1;
        observed.push(o);
    }
    let planned = observed.len() as u64;
    let mut slow_claim_probes = 0;
    while let Some(joined) = probes.join_next().await {
        let o = joined.map_err(|e| ChaosError::Setup(format!("a probe panicked: {e}")))?;
        slow_claim_probes += 1;
        observed.push(o);
    }
    let ProxySwitch(proxy) = windows
        .await
        .map_err(|e| ChaosError::Setup(format!("the fault windows panicked: {e}")))?;
    proxy.set_faults(RequestFaults::NONE);
    proxy.set_outage(false);
    proxy.set_refusing(false);
    proxy.set_blackholed(false);
    proxy.set_access_error(None);
    for (fault, n) in proxy.counts() {
        faults.insert(fault.name().into(), n);
    }
    faults.insert(FaultClass::Outages.name().into(), plan.outages.len() as u64);
    if cfg.server_pid.is_some() {
        faults.insert(FaultClass::Pauses.name().into(), plan.pauses.len() as u64);
    }
    faults.insert(
        FaultClass::Refusals.name().into(),
        plan.refusals.len() as u64,
    );
    faults.insert(
        FaultClass::Blackholes.name().into(),
        plan.blackholes.len() as u64,
    );
    let mut fault_variants = proxy.variants();
    fault_variants.extend(lambda.variants());

    // Settle: every lease asked for has ended (plus a margin); then one fault-free send per call.
    let last_lease = observed
        .iter()
        .filter_map(|o| o.notes.lease_until_ms)
        .max()
        .unwrap_or(0);
    let until_last = u64::try_from(last_lease - handler.store().now_ms()).unwrap_or(0);
    let wait = Duration::from_millis(until_last)
        .max(BUDGET + LEASE_MARGIN)
        .min(MAX_SETTLE_WAIT);
    tokio::time::sleep(wait + SETTLE_MARGIN).await;
    let (mut settles, settle_failures) = settle(&handler, &plan.calls).await;

    // The oracle. Notes are read again: a tool that outlived its invocation noted its receipt late.
    for o in observed.iter_mut().chain(settles.iter_mut()) {
        o.notes = o.attempt.note(|n| n.clone());
    }
    let entries = crate::demo::read_ledger(&ledger_path)?;
    let mut by_session: HashMap<&str, Vec<&Value>> = HashMap::new();
    for e in &entries {
        if let Some(s) = e["session_id"].as_str() {
            by_session.entry(s).or_default().push(e);
        }
    }
    let mut by_call: Vec<Vec<&Observed>> = vec![Vec::new(); plan.calls.len()];
    for o in &observed {
        by_call[o.call].push(o);
    }
    let mut verdict = Verdict::default();
    let writes = proxy.writes();
    for (id, call) in plan.calls.iter().enumerate() {
        let mut invocations = std::mem::take(&mut by_call[id]);
        let settle_index = invocations.len();
        invocations.push(&settles[id]);
        let key = invocations.iter().find_map(|o| o.key.clone());
        let record = match &key {
            Some(key) => handler.store().get(key).await?,
            None => None,
        };
        let entries = by_session
            .remove(call.session_id.as_str())
            .unwrap_or_default();
        let door = Door::detect(&call.event, None).ok();
        let answered_from = |stored: &[u8]| {
            let dedup = DedupInfo {
                outcome: "replayed",
                key: None,
            };
            let stored = std::str::from_utf8(stored).ok()?;
            Some(door.as_ref()?.entry_point()?.result(stored, dedup))
        };
        oracle::check_call(
            &mut verdict,
            &call.session_id,
            &entries,
            &invocations,
            settle_index,
            &oracle::StoreSeen {
                record: record.as_ref(),
                writes: &key.as_deref().map(|k| writes.of(k)).unwrap_or_default(),
                answered_from: &answered_from,
            },
        );
    }
    let mut store_paths = store_paths(&observed);
    store_paths.insert("slow_claim_probes".into(), slow_claim_probes);
    store_paths.insert("results_omitted".into(), verdict.results_omitted);
    store_paths.insert("already_ran_answers".into(), verdict.already_ran_answers);
    store_paths.insert(
        "invoke_claims_released".into(),
        verdict.invoke_claims_released,
    );
    store_paths.insert("invoke_claims_kept".into(), verdict.invoke_claims_kept);
    let stray: usize = by_session.values().map(Vec::len).sum();
    if stray > 0 {
        verdict.double_executions += stray as u64;
        verdict
            .findings
            .push(format!("{stray} ledger entries belong to no planned call"));
    }
    Ok(SoakReport {
        seed: cfg.seed,
        servers: vec![cfg.server.clone()],
        invocations: planned,
        distinct_calls: plan.calls.len() as u64,
        replayed: observed
            .iter()
            .filter(|o| matches!(o.outcome, Some(Outcome::Replayed | Outcome::Waited)))
            .count() as u64,
        faults,
        fault_variants,
        store_paths,
        outcomes,
        executed: verdict.executed,
        double_executions: verdict.double_executions,
        lost_results: verdict.lost_results,
        stuck_claims: verdict.stuck_claims,
        reexecutions_after_unknown_outcome: verdict.reexecutions_after_unknown_outcome,
        reexecutions_claimed_by_a_late_write: verdict.reexecutions_claimed_by_a_late_write,
        late_completions_refused: verdict.late_completions_refused,
        unexecuted_before_settle: verdict.unexecuted_before_settle,
        claims_misjudged: verdict.claims_misjudged,
        key_splits: verdict.key_splits,
        settle_failures,
        duration_ms: started.elapsed().as_millis() as u64,
        ledgers: vec![ledger_path.display().to_string()],
        findings: verdict.findings,
    })
}

/// Counts what the store-path faults led to (see [`SoakReport::store_paths`]).
fn store_paths(observed: &[Observed]) -> BTreeMap<String, u64> {
    let mut paths: BTreeMap<String, u64> = BTreeMap::new();
    let mut count = |name: &str| *paths.entry(name.into()).or_default() += 1;
    let mut closest_ms = i64::MAX;
    for o in observed {
        let fault = o.attempt.fault;
        // Failing closed: a store error answered, the tool not called (by the kind of the claim's
        // error; `other`: no claim error noted, e.g. a read while waiting failed, or the claim was
        // cut at the deadline).
        if o.outcome == Some(Outcome::StoreError) {
            if o.notes.invoked {
                count("store_error_answer_after_tool_called");
            } else {
                count(&format!(
                    "failed_closed.{}",
                    o.notes.claim_error.unwrap_or("other")
                ));
            }
        }
        if let Some(kind) = o.notes.completion_error {
            count(&format!("completion_failed.{kind}"));
        }
        if let Some(kind) = o.notes.claim_written_though_failed {
            count(&format!("claim_failed_but_written.{kind}"));
        }
        if fault == ToolFault::ItemTooLarge && o.notes.invoked {
            count(match o.notes.completion {
                Some(attempt::Completion::ResultOmitted) => "item_too_large_result_omitted",
                Some(attempt::Completion::Stored) => "item_too_large_stored_with_result",
                Some(_) => "item_too_large_completion_refused_or_failed",
                None => "item_too_large_completion_not_sent",
            });
        }
        if fault == ToolFault::SlowClaim && o.notes.invoked {
            count(if o.notes.lease_extended {
                "slow_claim_lease_extended"
            } else {
                "slow_claim_lease_not_extended"
            });
        }
        if let Some(lost) = o.notes.lost_claim {
            count(match lost {
                attempt::LostClaim::ReleasedByStore => "lost_claim_released_by_store",
                attempt::LostClaim::LeftHeld => "lost_claim_left_held",
                attempt::LostClaim::AppliedAfterReadBack => "lost_claim_applied_after_read_back",
                attempt::LostClaim::Unchecked => "lost_claim_unchecked",
                attempt::LostClaim::HandedBack => "lost_claim_handed_back_unreleased",
                attempt::LostClaim::HandedBackReleased => "lost_claim_handed_back_released",
            });
        }
        if fault == ToolFault::SlowCompletionNearDeadline && o.notes.invoked {
            match o.notes.completion {
                Some(attempt::Completion::Stored) => count("slow_completion_stored"),
                Some(_) => count("slow_completion_refused_or_failed"),
                None => count("slow_completion_not_sent"),
            }
            if let (Some(done), Some(deadline)) =
                (o.notes.completion_returned_at_ms, o.notes.deadline_ms)
            {
                closest_ms = closest_ms.min(deadline - done);
                if done > deadline {
                    count("slow_completion_past_deadline");
                }
            }
        }
    }
    if closest_ms != i64::MAX {
        paths.insert(
            "slow_completion_closest_to_deadline_ms".into(),
            u64::try_from(closest_ms).unwrap_or(0),
        );
    }
    paths
}

/// Sends every call once more, fault-free, a few at a time (a loaded single-threaded moto must
/// not turn the settling pass into a store outage). A call answered with a store error is sent
/// again once the lease its ambiguous claim may have written has ended; an in-progress answer is
/// final (it is a stuck claim). Returns each call's last settling invocation and how many calls
/// never got an answer.
async fn settle<S: Store + 'static, D: toolcall_dedup::dispatch::Dispatcher + 'static>(
    handler: &Arc<Handler<S, D>>,
    calls: &[plan::Call],
) -> (Vec<Observed>, u64) {
    let mut settled: Vec<Option<Observed>> = (0..calls.len()).map(|_| None).collect();
    let mut pending: Vec<usize> = (0..calls.len()).collect();
    let gate = Arc::new(Semaphore::new(SETTLE_CONCURRENCY));
    for round in 0..SETTLE_ROUNDS {
        if round > 0 {
            tokio::time::sleep(BUDGET + LEASE_MARGIN + SETTLE_MARGIN).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for &id in &pending {
            let permit = gate.clone().acquire_owned().await.expect("never closed");
            let (handler, event) = (handler.clone(), calls[id].event.clone());
            tasks.spawn(async move {
                let o = invoke(&handler, id, &event, ToolFault::None).await;
                drop(permit);
                o
            });
        }
        pending.clear();
        while let Some(joined) = tasks.join_next().await {
            let o = joined.expect("a settling invocation panicked");
            if o.outcome == Some(Outcome::StoreError) || o.killed.is_some() {
                pending.push(o.call);
            }
            let id = o.call;
            settled[id] = Some(o);
        }
        if pending.is_empty() {
            break;
        }
    }
    let failures = pending.len() as u64;
    let settled = settled
        .into_iter()
        .map(|o| o.expect("every call was sent"))
        .collect();
    (settled, failures)
}

/// One invocation with its deadline, under its tool fault; killed (dropped) when the tool pulls
/// the kill switch or the deadline passes.
async fn invoke<S: Store, D: toolcall_dedup::dispatch::Dispatcher>(
    handler: &Handler<S, D>,
    call: usize,
    event: &Value,
    fault: ToolFault,
) -> Observed {
    let attempt = Arc::new(Attempt::new(fault));
    let invocation = Invocation {
        request_id: uuid::Uuid::new_v4().to_string(),
        deadline_ms: Some(handler.store().now_ms() + BUDGET.as_millis() as i64),
        qualifier: None,
    };
    attempt.note(|n| n.deadline_ms = invocation.deadline_ms);
    let run = ATTEMPT.scope(attempt.clone(), handler.handle(event, &invocation));
    // Lambda kills an invocation at its deadline; the paused one models a host that does not.
    let kill_after = match fault {
        ToolFault::PauseBeforeComplete => BUDGET + LEASE_MARGIN + Duration::from_secs(5),
        _ => BUDGET,
    };
    let handled = tokio::select! {
        handled = tokio::time::timeout(kill_after, run) => handled.map_err(|_| "killed_at_deadline"),
        () = attempt.kill.notified() => Err("killed_by_fault"),
    };
    let notes = attempt.note(|n| n.clone());
    match handled {
        Ok(h) => Observed {
            call,
            outcome: Some(h.outcome),
            killed: None,
            response: h.response.ok().map(|r| r.get().to_string()),
            key: h.key,
            notes,
            attempt,
        },
        Err(killed) => Observed {
            call,
            outcome: None,
            killed: Some(killed),
            response: None,
            key: None,
            notes,
            attempt,
        },
    }
}

/// The proxy, handed to the fault-window task and back.
struct ProxySwitch(Arc<FaultProxy>);

/// Sends `SIGCONT` when dropped, so that a paused server never stays paused.
struct Paused(u32);

impl Paused {
    fn start(pid: u32) -> Paused {
        signal(pid, "-STOP");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status();
    if !status.is_ok_and(|s| s.success()) {
        tracing::warn!(pid, sig, "could not signal the server");
    }
}

/// The planned windows: (start from the run's start, length).
struct Windows {
    outages: Vec<(Duration, Duration)>,
    pauses: Vec<(Duration, Duration)>,
    access_errors: Vec<(Duration, Duration, AccessError)>,
    refusals: Vec<(Duration, Duration)>,
    blackholes: Vec<(Duration, Duration)>,
}

async fn fault_windows(
    start: Instant,
    windows: Windows,
    pid: Option<u32>,
    switch: ProxySwitch,
) -> ProxySwitch {
    let proxy = switch.0.clone();
    let outage = switched(start, windows.outages, |on| proxy.set_outage(on));
    let pause = async {
        let Some(pid) = pid else { return };
        for (at, length) in windows.pauses {
            tokio::time::sleep_until(start + at).await;
            let _paused = Paused::start(pid);
            tokio::time::sleep(length).await;
        }
    };
    let access = async {
        for (at, length, error) in windows.access_errors {
            tokio::time::sleep_until(start + at).await;
            proxy.set_access_error(Some(error));
            tokio::time::sleep(length).await;
            proxy.set_access_error(None);
        }
    };
    let refuse = switched(start, windows.refusals, |on| proxy.set_refusing(on));
    let blackhole = switched(start, windows.blackholes, |on| proxy.set_blackholed(on));
    tokio::join!(outage, pause, access, refuse, blackhole);
    switch
}

/// Switches a fault on at the start of each window, off at its end.
async fn switched(start: Instant, windows: Vec<(Duration, Duration)>, switch: impl Fn(bool)) {
    for (at, length) in windows {
        tokio::time::sleep_until(start + at).await;
        switch(true);
        tokio::time::sleep(length).await;
        switch(false);
    }
}

/// A DynamoDB client for `endpoint` with dummy credentials (local servers only).
fn sdk_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::from_static("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "dedup-chaos"))
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}
