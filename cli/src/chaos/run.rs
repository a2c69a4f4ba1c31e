//! One soak run against one server ([`soak`]): the corpus and the plan, the handler behind the
//! fault proxy, the invocations sent on time with the fault windows alongside, the settling pass,
//! and the oracle over the ledger. Kept apart from the soak's vocabulary and report in the
//! module root.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::demo::{DemoTool, Ledger};
use toolcall_dedup::config::Config;
use toolcall_dedup::handler::{Door, Handler, Invocation};
use toolcall_dedup::internals::port::DedupInfo;
use toolcall_dedup::key::{Delivery, KeyerVersion, OnFailure, PolicySet};
use toolcall_dedup::store::table::create_table_with_client;
use toolcall_dedup::store::{
    ClaimBudget, DynamoDbConfig, DynamoDbStore, MemoryStore, Record, RetryPolicy, SETTLE_MARGIN_MS,
    Store,
};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

use super::attempt::{self, ATTEMPT, Attempt, NotingClock, NotingStore, ToolFault};
use super::lambda::ToolLambda;
use super::oracle::{self, Observed, Verdict};
use super::plan::Windows;
use super::plan::{self, Plan};
use super::proxy::{FaultProxy, RequestFaults, WriteLog};
use super::tool::ChaosTool;
use super::{
    AT_MOST_ONCE_TOOL, ATTEMPT_TIMEOUT, BUDGET, COMPLETION_RESERVE, ChaosError, FINAL_SWEEP_ROUNDS,
    FaultClass, LEASE_MARGIN, MAX_SETTLE_WAIT, READ_BACK_WITHIN, REPLY_MARGIN, SETTLE_CONCURRENCY,
    SETTLE_MARGIN, SETTLE_ROUNDS, SLOW_CLAIM_PROBE_AFTER, STORE_DEADLINE, STORE_FAULTS,
    SWEEP_BUDGET, SWEEP_EVERY, SoakConfig, SoakReport, fault_names, sdk_client,
};

/// The corpus events (with the corpus policy) that the handler executes with the demo tool;
/// events it rejects or the tool declines to run are left out.
async fn corpus_events(events_dir: &Path) -> Result<(Vec<(String, Value)>, PolicySet), ChaosError> {
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
    let plan = planned(cfg, &corpus);
    let Rig {
        proxy,
        handler,
        second_build,
        lambda,
        ledger_path,
    } = Rig::start(cfg, policies).await?;
    let builds: Vec<Arc<SoakHandler>> = [Some(handler.clone()), second_build]
        .into_iter()
        .flatten()
        .collect();

    // The run, with the fault windows alongside.
    proxy.set_faults(store_faults(cfg));
    let run_start = Instant::now();
    let windows = tokio::spawn(fault_windows(
        run_start,
        plan.windows.clone(),
        cfg.server_pid,
        ProxySwitch(Arc::new(proxy)),
    ));
    let sweeping = !cfg.excluded.contains(&FaultClass::Sweeps);
    let (stop_sweeps, sweeps) = tokio::sync::oneshot::channel();
    let sweeper = sweeping.then(|| tokio::spawn(sweeps_beside(builds.clone(), sweeps)));
    let (tasks, probes) = drive(cfg, &plan, &builds, run_start).await;
    let mut ran = Ran::collect(tasks, probes).await?;
    let _ = stop_sweeps.send(());
    if builds.len() > 1 {
        // Every other planned invocation went to the second build.
        let sent = plan.sends.len() / builds.len();
        ran.faults
            .insert(FaultClass::SecondBuild.name().into(), sent as u64);
    }
    let ProxySwitch(proxy) = windows
        .await
        .map_err(|e| ChaosError::Setup(format!("the fault windows panicked: {e}")))?;
    let mut fault_variants = ran.count_proxy(&proxy, &plan, cfg);
    fault_variants.extend(lambda.variants());

    // Settle: every lease asked for has ended (plus a margin); then one fault-free send per call.
    wait_out_leases(&ran.observed, &handler).await;
    let at_most_once: Vec<bool> = plan
        .calls
        .iter()
        .map(|c| sweeping && c.event["function"] == AT_MOST_ONCE_TOOL)
        .collect();
    let (ids, at_most_once_ids): (Vec<usize>, Vec<usize>) =
        (0..plan.calls.len()).partition(|&id| !at_most_once[id]);
    // The other calls settle now, as they would without the sweeps: waiting for the sweeps first
    // would outlast a failure's replay window (a retry after it runs again, by design).
    let mut records: Vec<Option<Record>> = vec![None; plan.calls.len()];
    let (settled, mut settle_failures) =
        settle_and_read(&builds, &plan.calls, &ran.observed, ids, &mut records).await?;
    let mut swept_keys = Vec::new();
    if let Some(sweeper) = sweeper {
        let during = sweeper
            .await
            .map_err(|e| ChaosError::Setup(format!("the sweeps panicked: {e}")))?;
        // A claim left unsettled can be swept once its lease ended the settle margin ago: then two
        // sweeps run at once, as two containers' schedules may.
        let last_lease = ran
            .observed
            .iter()
            .filter(|o| at_most_once[o.call])
            .filter_map(|o| o.notes.lease_until_ms)
            .max();
        if let Some(last_lease) = last_lease {
            let sweepable_in = last_lease + SETTLE_MARGIN_MS - handler.store().now_ms();
            let wait = Duration::from_millis(u64::try_from(sweepable_in).unwrap_or(0));
            tokio::time::sleep(wait + SETTLE_MARGIN).await;
        }
        // Two sweeps at once, on the two builds (or twice on the one, without that class), again
        // while one leaves claims for the next, as the schedule's next runs would.
        swept_keys = during;
        for _ in 0..FINAL_SWEEP_ROUNDS {
            let mut last = JoinSet::new();
            for n in 0..2 {
                let build = builds[n % builds.len()].clone();
                last.spawn(async move { sweep_once(&build).await });
            }
            let mut left = 0;
            while let Some(swept) = last.join_next().await {
                let (settled, left_for_next) = swept.unwrap_or_default();
                swept_keys.extend(settled);
                left += left_for_next;
            }
            if left == 0 {
                break;
            }
        }
        ran.faults
            .insert(FaultClass::Sweeps.name().into(), swept_keys.len() as u64);
    }
    let (settled_after_sweeps, failures) = settle_and_read(
        &builds,
        &plan.calls,
        &ran.observed,
        at_most_once_ids,
        &mut records,
    )
    .await?;
    settle_failures.extend(failures);
    let mut settles: Vec<Observed> = settled
        .into_iter()
        .zip(settled_after_sweeps)
        .map(|(settled, after_sweeps)| settled.or(after_sweeps).expect("every call was sent"))
        .collect();

    // The oracle. Notes are read again: a tool that outlived its invocation noted its receipt late.
    for o in ran.observed.iter_mut().chain(settles.iter_mut()) {
        o.notes = o.attempt.note(|n| n.clone());
    }
    let writes = proxy.writes();
    let mut verdict = judge(
        &plan,
        &at_most_once,
        &records,
        &ran.observed,
        &settles,
        &writes,
        &ledger_path,
    )
    .await?;
    // Every settlement as outcome unknown is announced (by the executor, or by the sweep whose
    // write settled the claim): a key settled so twice was announced twice.
    let twice = handler.store().settled_unknown_twice();
    if !twice.is_empty() {
        verdict.announced_twice = twice.len() as u64;
        verdict.findings.push(format!(
            "{} calls were settled as outcome unknown, and announced, more than once: {}",
            twice.len(),
            twice.join(", ")
        ));
    }
    if !settle_failures.is_empty() {
        let calls: Vec<String> = settle_failures
            .iter()
            .map(|&id| {
                let last = settles[id].outcome.map_or("killed", Outcome::name);
                format!("call {id}, session {} ({last})", plan.calls[id].session_id)
            })
            .collect();
        verdict.findings.push(format!(
            "{} calls got no answer in {SETTLE_ROUNDS} fault-free settling rounds: {}",
            calls.len(),
            calls.join(", ")
        ));
    }
    verdict.unannounced = unannounced(
        ran.observed.iter().chain(&settles),
        &handler.store().settled_by_sweeps(),
        &swept_keys,
    );
    if !verdict.unannounced.is_empty() {
        verdict.findings.push(format!(
            "{} calls were settled as outcome unknown and announced by nobody: {}",
            verdict.unannounced.len(),
            verdict.unannounced.join(", ")
        ));
    }
    let store_paths = store_paths(&ran, &verdict);
    Ok(SoakReport {
        seed: cfg.seed,
        servers: vec![cfg.server.clone()],
        invocations: ran.planned,
        distinct_calls: plan.calls.len() as u64,
        replayed: ran
            .observed
            .iter()
            .filter(|o| matches!(o.outcome, Some(Outcome::Replayed | Outcome::Waited)))
            .count() as u64,
        faults: ran.faults,
        fault_variants,
        store_paths,
        outcomes: ran.outcomes,
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
        at_most_once_calls: verdict.at_most_once_calls,
        at_most_once_unknown: verdict.at_most_once_unknown,
        announced_twice: verdict.announced_twice,
        unannounced: verdict.unannounced.len() as u64,
        settle_failures: settle_failures.len() as u64,
        duration_ms: started.elapsed().as_millis() as u64,
        ledgers: vec![ledger_path.display().to_string()],
        findings: verdict.findings,
    })
}

/// The plan of the run, less the windows of excluded classes.
fn planned(cfg: &SoakConfig, corpus: &[(String, Value)]) -> Plan {
    let excluded_tool: Vec<ToolFault> = cfg
        .excluded
        .iter()
        .filter_map(|c| match c {
            FaultClass::Tool(t) => Some(*t),
            _ => None,
        })
        .collect();
    let mut plan = plan::build(cfg.seed, cfg.invocations, cfg.rate, corpus, &excluded_tool);
    let without = |class: FaultClass| cfg.excluded.contains(&class);
    if without(FaultClass::Outages) {
        plan.windows.outages.clear();
    }
    if without(FaultClass::Pauses) {
        plan.windows.pauses.clear();
    }
    if without(FaultClass::AccessErrors) {
        plan.windows.access_errors.clear();
    }
    if without(FaultClass::Refusals) {
        plan.windows.refusals.clear();
    }
    if without(FaultClass::Blackholes) {
        plan.windows.blackholes.clear();
    }
    plan
}

/// The per-request store faults of the run, less the excluded ones.
fn store_faults(cfg: &SoakConfig) -> RequestFaults {
    cfg.excluded.iter().fold(STORE_FAULTS, |f, c| match c {
        FaultClass::Request(fault) => f.without(*fault),
        _ => f,
    })
}

/// The handler the soak drives (one per build; they share the store and its notes).
type SoakHandler = Handler<Arc<NotingStore<DynamoDbStore>>, ChaosTool>;

/// The soak's handler and what it runs on: the fault proxy in front of the server with a fresh
/// table behind it, the chaos tool with its fake Lambda, and the ledger the oracle reads.
struct Rig {
    proxy: FaultProxy,
    handler: Arc<SoakHandler>,
    /// The other build's handler (class [`FaultClass::SecondBuild`]), unless left out.
    second_build: Option<Arc<SoakHandler>>,
    lambda: Arc<ToolLambda>,
    ledger_path: PathBuf,
}

impl Rig {
    async fn start(cfg: &SoakConfig, mut policies: PolicySet) -> Result<Rig, ChaosError> {
        // A failure replays for the record's whole retention: the oracle holds one stored result
        // per call, and a soak longer than the default 60 s window would see a failed call run
        // again by design (its replay window ended) and judge it a double execution.
        let tools: Vec<String> = policies.iter().map(|(tool, _)| tool.to_owned()).collect();
        for tool in tools {
            let mut policy = policies.get(&tool).cloned().unwrap_or_default();
            policy.on_failure = Some(OnFailure::Replay);
            policies.insert(tool, policy);
        }
        if !cfg.excluded.contains(&FaultClass::Sweeps) {
            let mut policy = policies.get(AT_MOST_ONCE_TOOL).cloned().unwrap_or_default();
            policy.delivery = Delivery::AtMostOnce;
            policies.insert(AT_MOST_ONCE_TOOL, policy);
        }
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
        let tool = tool.with_lambda(lambda.clone());
        let store = Arc::new(NotingStore::new(store).with_keyed_faults(proxy.keyed()));
        let build = |config: &Config| {
            Arc::new(
                Handler::new(store.clone(), tool.clone(), config, Telemetry::quiet())
                    .with_settings(|s| {
                        s.completion_reserve = COMPLETION_RESERVE;
                        s.reply_margin = REPLY_MARGIN;
                        s.lease_margin = LEASE_MARGIN;
                        s.default_budget = BUDGET;
                    }),
            )
        };
        let handler = build(&config);
        // The other build keys with the version this build keys with unpinned, pinned in its
        // config: what an upgrade's canary runs beside the old build.
        let second_build = (!cfg.excluded.contains(&FaultClass::SecondBuild)).then(|| {
            build(&Config {
                keyer: KeyerVersion::default(),
                ..config.clone()
            })
        });
        Ok(Rig {
            proxy,
            handler,
            second_build,
            lambda,
            ledger_path,
        })
    }
}

/// Sends the plan's invocations at their planned times (with a probe after each slow claim), at
/// most `cfg.concurrency` at a time; the tasks that run them.
async fn drive(
    cfg: &SoakConfig,
    plan: &Plan,
    builds: &[Arc<SoakHandler>],
    run_start: Instant,
) -> (JoinSet<(ToolFault, Observed)>, JoinSet<Observed>) {
    let gate = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut tasks = JoinSet::new();
    let mut probes = JoinSet::new();
    let progress = crate::progress::bar(
        plan.sends.len() as u64,
        &format!("invocations on {}", cfg.server),
    );
    for (n, send) in plan.sends.iter().enumerate() {
        tokio::time::sleep_until(run_start + send.at).await;
        let permit = gate.clone().acquire_owned().await.expect("never closed");
        let handler = builds[n % builds.len()].clone();
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
    (tasks, probes)
}

/// What the run's invocations saw, before the settling pass.
struct Ran {
    /// The planned invocations, then the slow-claim probes.
    observed: Vec<Observed>,
    planned: u64,
    slow_claim_probes: u64,
    /// The report's `faults` so far: the tool faults that acted.
    faults: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
}

impl Ran {
    /// Waits for every invocation and probe, counting the tool faults that acted and the outcomes.
    async fn collect(
        mut tasks: JoinSet<(ToolFault, Observed)>,
        mut probes: JoinSet<Observed>,
    ) -> Result<Ran, ChaosError> {
        let mut ran = Ran {
            observed: Vec::with_capacity(tasks.len()),
            planned: 0,
            slow_claim_probes: 0,
            faults: fault_names()
                .into_iter()
                .map(|n| (n.to_string(), 0))
                .collect(),
            outcomes: BTreeMap::new(),
        };
        while let Some(joined) = tasks.join_next().await {
            let (fault, o) =
                joined.map_err(|e| ChaosError::Setup(format!("an invocation panicked: {e}")))?;
            if fault != ToolFault::None
                && !fault.counted_by_proxy()
                && (o.notes.invoked || o.notes.lost_claim.is_some())
            {
                *ran.faults.entry(fault.name().into()).or_default() += 1;
            }
            let outcome = o
                .killed
                .unwrap_or_else(|| o.outcome.map_or("none", Outcome::name));
            *ran.outcomes.entry(outcome.into()).or_default() += 1;
            ran.observed.push(o);
        }
        ran.planned = ran.observed.len() as u64;
        while let Some(joined) = probes.join_next().await {
            let o = joined.map_err(|e| ChaosError::Setup(format!("a probe panicked: {e}")))?;
            ran.slow_claim_probes += 1;
            ran.observed.push(o);
        }
        Ok(ran)
    }

    /// Turns the proxy's faults off, and adds its counts and the planned windows to `faults`;
    /// the proxy's counts by variant.
    fn count_proxy(
        &mut self,
        proxy: &FaultProxy,
        plan: &Plan,
        cfg: &SoakConfig,
    ) -> BTreeMap<String, u64> {
        proxy.set_faults(RequestFaults::NONE);
        proxy.set_outage(false);
        proxy.set_refusing(false);
        proxy.set_blackholed(false);
        proxy.set_access_error(None);
        let faults = &mut self.faults;
        for (fault, n) in proxy.counts() {
            faults.insert(fault.name().into(), n);
        }
        faults.insert(
            FaultClass::Outages.name().into(),
            plan.windows.outages.len() as u64,
        );
        if cfg.server_pid.is_some() {
            faults.insert(
                FaultClass::Pauses.name().into(),
                plan.windows.pauses.len() as u64,
            );
        }
        faults.insert(
            FaultClass::Refusals.name().into(),
            plan.windows.refusals.len() as u64,
        );
        faults.insert(
            FaultClass::Blackholes.name().into(),
            plan.windows.blackholes.len() as u64,
        );
        proxy.variants()
    }
}

/// The fault-free settling sends of the calls `ids` ([`settle`]), with each call's record read
/// into `records` as its settling send left it (a failure's record would expire after its replay
/// window, which the sweeps' wait may outlast).
async fn settle_and_read(
    builds: &[Arc<SoakHandler>],
    calls: &[plan::Call],
    observed: &[Observed],
    ids: Vec<usize>,
    records: &mut [Option<Record>],
) -> Result<(Vec<Option<Observed>>, Vec<usize>), ChaosError> {
    let (settled, failures) = settle(builds, calls, ids.clone()).await;
    let handler = &builds[0];
    for id in ids {
        let key = observed
            .iter()
            .filter(|o| o.call == id)
            .chain(settled[id].as_ref())
            .find_map(|o| o.key.clone());
        records[id] = match key {
            Some(key) => handler.store().get(&key).await?,
            None => None,
        };
    }
    Ok((settled, failures))
}

/// The scheduled sweep every [`SWEEP_EVERY`], on each build in turn, until `stop`; the keys of
/// the claims the sweeps settled (and announced).
async fn sweeps_beside(
    builds: Vec<Arc<SoakHandler>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<String> {
    let mut settled = Vec::new();
    for n in 0.. {
        tokio::select! {
            _ = &mut stop => break,
            () = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        settled.extend(sweep_once(&builds[n % builds.len()]).await.0);
    }
    settled
}

/// One scheduled sweep through the handler, with a sweep invocation's time: the keys of the
/// claims it settled, as its answer lists them, and how many it left for the next. A sweep the
/// store fails (a fault window) settles none; the next one goes on, as the schedule's would.
async fn sweep_once(handler: &SoakHandler) -> (Vec<String>, u64) {
    let invocation = Invocation {
        deadline_ms: Some(handler.store().now_ms() + SWEEP_BUDGET.as_millis() as i64),
        ..Invocation::default()
    };
    let Ok(answer) = handler.sweep(&invocation).await else {
        return (Vec::new(), 0);
    };
    let Ok(mut answer) = serde_json::from_str::<Value>(answer.get()) else {
        return (Vec::new(), 0);
    };
    let settled = serde_json::from_value(answer["settled_keys"].take()).unwrap_or_default();
    (settled, answer["left_for_next"].as_u64().unwrap_or(0))
}

/// The calls settled as outcome unknown that nobody announced: an invocation whose settle write
/// applied and was answered announces it unless it was killed first (a crash loses what it did
/// not send); a sweep's settlement is in its answer's `settled_keys`.
fn unannounced<'a>(
    invocations: impl Iterator<Item = &'a Observed>,
    settled_by_sweeps: &[String],
    swept_keys: &[String],
) -> Vec<String> {
    let by_invocations = invocations
        .filter(|o| o.notes.settled_unknown_here && o.killed.is_none() && !o.announced)
        .map(|o| format!("call {} ({})", o.call, o.key.as_deref().unwrap_or("-")));
    let by_sweeps = settled_by_sweeps
        .iter()
        .filter(|k| !swept_keys.contains(k))
        .map(|k| format!("swept {k}"));
    by_invocations.chain(by_sweeps).collect()
}

/// Waits until every lease the run's invocations asked for has ended, plus a margin (at most
/// [`MAX_SETTLE_WAIT`]).
async fn wait_out_leases(observed: &[Observed], handler: &SoakHandler) {
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
}

/// The oracle over every call: its ledger entries, its invocations with its settling one last,
/// its final record and the writes the proxy sent for its key; ledger entries of no planned call
/// are double executions.
async fn judge(
    plan: &Plan,
    at_most_once: &[bool],
    records: &[Option<Record>],
    observed: &[Observed],
    settles: &[Observed],
    writes: &WriteLog,
    ledger_path: &Path,
) -> Result<Verdict, ChaosError> {
    let entries = crate::demo::read_ledger(ledger_path)?;
    let mut by_session: HashMap<&str, Vec<&Value>> = HashMap::new();
    for e in &entries {
        if let Some(s) = e["session_id"].as_str() {
            by_session.entry(s).or_default().push(e);
        }
    }
    let mut by_call: Vec<Vec<&Observed>> = vec![Vec::new(); plan.calls.len()];
    for o in observed {
        by_call[o.call].push(o);
    }
    let mut verdict = Verdict::default();
    for (id, call) in plan.calls.iter().enumerate() {
        let mut invocations = std::mem::take(&mut by_call[id]);
        let settle_index = invocations.len();
        invocations.push(&settles[id]);
        let key = invocations.iter().find_map(|o| o.key.clone());
        let record = records[id].clone();
        if at_most_once[id] {
            verdict.at_most_once_calls += 1;
            verdict.at_most_once_unknown +=
                u64::from(record.as_ref().is_some_and(|r| r.outcome_unknown));
        }
        let entries = by_session
            .remove(call.session_id.as_str())
            .unwrap_or_default();
        let door = Door::detect(&call.event, None).ok();
        let answered_from = |stored: &[u8]| {
            let dedup = DedupInfo {
                outcome: "replayed",
                key: None,
                first_ran_ms: None,
                mark: false,
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
            at_most_once[id],
            &oracle::StoreSeen {
                record: record.as_ref(),
                writes: &key.as_deref().map(|k| writes.of(k)).unwrap_or_default(),
                answered_from: &answered_from,
            },
        );
    }
    let stray: usize = by_session.values().map(Vec::len).sum();
    if stray > 0 {
        verdict.double_executions += stray as u64;
        verdict
            .findings
            .push(format!("{stray} ledger entries belong to no planned call"));
    }
    Ok(verdict)
}

/// Counts what the store-path faults led to (see [`SoakReport::store_paths`]), with the oracle's
/// counts of omitted results and invoke releases.
fn store_paths(ran: &Ran, verdict: &Verdict) -> BTreeMap<String, u64> {
    let mut paths = observed_paths(&ran.observed);
    paths.insert("slow_claim_probes".into(), ran.slow_claim_probes);
    paths.insert("results_omitted".into(), verdict.results_omitted);
    paths.insert("already_ran_answers".into(), verdict.already_ran_answers);
    paths.insert(
        "invoke_claims_released".into(),
        verdict.invoke_claims_released,
    );
    paths.insert("invoke_claims_kept".into(), verdict.invoke_claims_kept);
    paths
}

/// The store paths the invocations took, by what each noted.
fn observed_paths(observed: &[Observed]) -> BTreeMap<String, u64> {
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
/// not turn the settling pass into a store outage), spread over the builds as the run's sends
/// were: each container releases the claims it was handed back at its next call, so a build the
/// settling pass never called would keep the ones it was handed at the end of the run. A call answered with a store error is sent
/// again once the lease its ambiguous claim may have written has ended; an in-progress answer is
/// final (it is a stuck claim). Returns each call's last settling invocation and the calls that
/// never got an answer.
async fn settle<S: Store + 'static, D: toolcall_dedup::dispatch::Dispatcher + 'static>(
    builds: &[Arc<Handler<S, D>>],
    calls: &[plan::Call],
    mut pending: Vec<usize>,
) -> (Vec<Option<Observed>>, Vec<usize>) {
    let mut settled: Vec<Option<Observed>> = (0..calls.len()).map(|_| None).collect();
    let gate = Arc::new(Semaphore::new(SETTLE_CONCURRENCY));
    for round in 0..SETTLE_ROUNDS {
        if round > 0 {
            tokio::time::sleep(BUDGET + LEASE_MARGIN + SETTLE_MARGIN).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (n, &id) in pending.iter().enumerate() {
            let permit = gate.clone().acquire_owned().await.expect("never closed");
            let handler = builds[n % builds.len()].clone();
            let event = calls[id].event.clone();
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
    (settled, pending)
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
            announced: !h.settled_unknown.is_empty(),
        },
        Err(killed) => Observed {
            call,
            outcome: None,
            killed: Some(killed),
            response: None,
            key: None,
            notes,
            attempt,
            announced: false,
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

/// Opens and closes the planned windows from `start` on (a pause only with the server's `pid`),
/// then hands the proxy back.
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
