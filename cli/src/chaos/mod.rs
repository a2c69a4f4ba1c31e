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
mod run;
pub(crate) mod tool;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use attempt::ToolFault;
use proxy::{RequestFaults, StoreFault};

pub use run::soak;

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
/// The tool whose calls are `at_most_once` in the class [`FaultClass::Sweeps`] (about a quarter of
/// the calls: one of the corpus's six tools, one of the three generated ones).
const AT_MOST_ONCE_TOOL: &str = "refund";
/// How often the sweep runs during a soak (the stacks' schedule: every five minutes).
const SWEEP_EVERY: Duration = Duration::from_millis(1500);
/// A sweep invocation's time (the stacks' function timeout, 30 s by default): not the calls'
/// short [`BUDGET`], under which a sweep starts on claims for under a second.
const SWEEP_BUDGET: Duration = Duration::from_secs(30);
/// The final sweeps go on while one leaves claims for the next, this many rounds at most.
const FINAL_SWEEP_ROUNDS: usize = 5;

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
    /// Every other invocation goes to a second handler on the same table and tool: another
    /// container, of the other build of a canary, its keyer version pinned in its config as a
    /// deployment pins it across an upgrade (`second_build_side_by_side` counts its invocations).
    SecondBuild,
    /// `refund` is `at_most_once` (a claim is never taken over; an unknown outcome blocks the call),
    /// and the scheduled sweep runs beside the calls, on both builds at once, listing the claims
    /// left unsettled and settling them as outcome unknown while other calls claim, complete and
    /// release. `at_most_once_swept` counts the claims the sweeps settled.
    Sweeps,
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
            FaultClass::SecondBuild,
            FaultClass::Sweeps,
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
            FaultClass::SecondBuild => "second_build_side_by_side",
            FaultClass::Sweeps => "at_most_once_swept",
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
    pub(crate) seed: u64,
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
    /// Calls of an `at_most_once` tool (class [`FaultClass::Sweeps`]).
    pub(crate) at_most_once_calls: u64,
    /// Of those, the ones whose record ended settled as outcome unknown.
    pub(crate) at_most_once_unknown: u64,
    /// Calls the store settled as outcome unknown more than once (the executor's settle and the
    /// sweeps' each announce the call): announced twice.
    pub announced_twice: u64,
    /// Calls settled as outcome unknown that the invocation or sweep whose write settled them
    /// did not announce.
    pub unannounced: u64,
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
            && self.announced_twice == 0
            && self.unannounced == 0
    }

    /// Calls of the `at_most_once` tool the soak made.
    pub fn at_most_once_calls(&self) -> u64 {
        self.at_most_once_calls
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
        self.at_most_once_calls += other.at_most_once_calls;
        self.at_most_once_unknown += other.at_most_once_unknown;
        self.announced_twice += other.announced_twice;
        self.unannounced += other.unannounced;
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
        // The verdict and its findings come first: a CI log keeps a failure's opening lines and
        // cuts its middle, and the fault counts are long.
        let mut s = format!(
            "chaos soak, seed {} on {}: {} invocations of {} distinct calls in {:.1} s\n\
             double executions: {}, lost results: {}, stuck claims: {}, key splits: {}, settle failures: {}, \
             claims misjudged: {}, calls announced twice: {}, unannounced: {}\n",
            self.seed,
            self.servers.join(" + "),
            self.invocations,
            self.distinct_calls,
            self.duration_ms as f64 / 1000.0,
            self.double_executions,
            self.lost_results,
            self.stuck_claims,
            self.key_splits,
            self.settle_failures,
            self.claims_misjudged,
            self.announced_twice,
            self.unannounced,
        );
        for f in &self.findings {
            s.push_str("  ");
            s.push_str(f);
            s.push('\n');
        }
        s.push_str(&format!(
            "faults: {}\n\
             fault forms: {}\n\
             store paths: {}\n\
             answers: {}\n\
             side effects: {} ({} re-executions after an unknown outcome, allowed once its lease ended, \
             {} of them claimed by a write applied after it though sent before); \
             {} calls unexecuted before the settling pass; {} late completions refused by the lease token\n\
             at_most_once calls: {} ({} settled as outcome unknown)\n\
             ledger: {}\n",
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
            self.at_most_once_calls,
            self.at_most_once_unknown,
            self.ledgers.join(", "),
        ));
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
