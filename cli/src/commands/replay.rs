//! `dedup replay`: runs events of every entry point (Bedrock action groups, AgentCore Gateway
//! calls, invoke envelopes) through the real handler with the demo tool in-process. An AgentCore
//! event's client context is read from `<name>.client-context.json` beside it.
//!
//! All events of one run share one store and are sent in the order given; `--repeat N` sends each
//! event N times in a row, `--concurrency N` keeps N invocations in flight. Configuration comes
//! from the same `DEDUP_*` variables the Lambda reads (flags override them), so a replay behaves
//! like the deployed function; without any, it uses the in-memory store, the typed keyer, turn
//! scope and the demo tool. `DEMO_LEDGER` makes the demo tool write its ledger to a file.
//!
//! Per-file results go to stderr; the last line on stdout is the summary:
//! `{"events","invocations","executed","replayed","waited","in_progress","errors","shadow_replays"}`.
//! With `DEDUP_LOG_CALLS=hashes|full` the tool-call log lines come before it on stdout, and with
//! `--responses` one line per invocation, in the order sent: `{"event","outcome","key","response"}`,
//! where `response` is the Bedrock response exactly as the agent gets it, or `{"event","outcome",
//! "error"}` with the Lambda error (`errorType`, `errorMessage`) Bedrock would get instead.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
pub use toolcall_dedup::stand_ins::events::{
    CLIENT_CONTEXT_SUFFIX, EventFile, client_context_path,
};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::CliError;
use crate::demo::{DemoTool, Ledger};
use toolcall_dedup::config::{Config, ConfigError, StoreKind};
use toolcall_dedup::handler::{Handled, Handler, Invocation};
use toolcall_dedup::internals::reload::document_from_env;
use toolcall_dedup::store::{DynamoDbStore, MemoryStore, Store, dynamodb};
use toolcall_dedup::telemetry::{Outcome, Telemetry};

/// The table `dedup replay --store dynamodb` uses unless told otherwise.
pub(crate) const DEFAULT_REPLAY_TABLE: &str = "toolcall-dedup-replay";

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// Idempotency store [default: DEDUP_STORE, else memory].
    #[arg(long, value_parser = ["memory", "dynamodb"])]
    pub(crate) store: Option<String>,
    /// DynamoDB endpoint URL, e.g. a local server [default: DEDUP_DYNAMODB_ENDPOINT].
    #[arg(long)]
    pub(crate) endpoint: Option<String>,
    /// DynamoDB table [default: DEDUP_TABLE_NAME, else toolcall-dedup-replay].
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// Create the table first (kept if it already exists).
    #[arg(long)]
    pub(crate) create_table: bool,
    /// Invocations in flight at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) concurrency: u32,
    /// Times each event is sent.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) repeat: u32,
    /// Print each invocation's response as the agent gets it, one JSON line each, before the summary.
    #[arg(long)]
    pub(crate) responses: bool,
    /// Event files (JSON): Bedrock action-group events, AgentCore Gateway arguments (with
    /// `<name>.client-context.json` beside them), invoke envelopes.
    #[arg(required = true, value_name = "EVENT_FILES")]
    pub events: Vec<PathBuf>,
}

/// The summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    pub events: u64,
    pub(crate) invocations: u64,
    pub(crate) executed: u64,
    pub(crate) replayed: u64,
    pub(crate) waited: u64,
    pub(crate) in_progress: u64,
    pub(crate) errors: u64,
    pub(crate) shadow_replays: u64,
}

impl Summary {
    fn count(&mut self, outcome: Option<Outcome>) {
        self.invocations += 1;
        match outcome {
            // A tool with `dedup = "off"`, or a sessionless call, ran: it counts as executed.
            Some(Outcome::Executed | Outcome::DedupOff | Outcome::Sessionless) => {
                self.executed += 1
            }
            Some(Outcome::Replayed) => self.replayed += 1,
            Some(Outcome::Waited) => self.waited += 1,
            // An at_most_once repeat answered "outcome unknown", like a call still in flight.
            Some(Outcome::InProgress | Outcome::Unknown) => self.in_progress += 1,
            // A caller key reused with other arguments: refused, nothing ran.
            Some(Outcome::KeyReused) => self.errors += 1,
            Some(Outcome::ShadowReplay) => self.shadow_replays += 1,
            // An interceptor message that is not a call: nothing ran, nothing failed.
            Some(Outcome::PassedOn | Outcome::PassedUnread) => {}
            Some(
                Outcome::ToolError
                | Outcome::StoreError
                | Outcome::BadRequest
                | Outcome::DoorRefused,
            )
            | None => self.errors += 1,
        }
    }
}

/// What happened to each file: outcome name → count, and the first error message.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileReport {
    pub(crate) outcomes: BTreeMap<&'static str, u64>,
    pub(crate) first_error: Option<String>,
}

pub(crate) fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    init_tracing();
    let files = args
        .events
        .iter()
        // A client context travels with its event; it is not one (`events/agentcore/*.json`).
        .filter(|p| !p.to_string_lossy().ends_with(CLIENT_CONTEXT_SUFFIX))
        .map(|p| {
            EventFile::read(p.clone()).map_err(|e| CliError::Usage(format!("{}: {e}", p.display())))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let config = runtime.block_on(replay_config(&args))?;
    let (summary, reports) = runtime.block_on(run_with_config(&args, &config, files))?;
    for (path, report) in &reports {
        let counts: Vec<String> = report
            .outcomes
            .iter()
            .map(|(o, n)| format!("{o} {n}"))
            .collect();
        match &report.first_error {
            Some(error) => eprintln!("{}: {} ({error})", path.display(), counts.join(", ")),
            None => eprintln!("{}: {}", path.display(), counts.join(", ")),
        }
    }
    println!(
        "{}",
        serde_json::to_string(&summary).map_err(|e| CliError::Usage(e.to_string()))?
    );
    Ok(ExitCode::SUCCESS)
}

/// The environment, with the flags laid over it, and the config document `DEDUP_CONFIG` names
/// (a file, `ssm:` or `s3://`), read as the function reads it: its settings, routes and policies.
async fn replay_config(args: &ReplayArgs) -> Result<Config, CliError> {
    let usage = |e: ConfigError| CliError::Usage(e.to_string());
    let document = match document_from_env().await.map_err(usage)? {
        Some((loader, _)) => Some(
            loader
                .load()
                .await
                .map_err(|e| CliError::Usage(e.to_string()))?
                .document,
        ),
        None => None,
    };
    let lookup = |var: &str| -> Option<String> {
        let flag = match var {
            "DEDUP_STORE" => args.store.clone(),
            "DEDUP_DYNAMODB_ENDPOINT" => args.endpoint.clone(),
            "DEDUP_TABLE_NAME" => args.table.clone(),
            _ => None,
        };
        flag.or_else(|| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
            .or_else(|| (var == "DEDUP_TABLE_NAME").then(|| DEFAULT_REPLAY_TABLE.to_string()))
    };
    Config::from_lookup_and_document(lookup, document.as_ref(), StoreKind::Memory).map_err(usage)
}

async fn run_with_config(
    args: &ReplayArgs,
    config: &Config,
    files: Vec<EventFile>,
) -> Result<(Summary, Vec<(PathBuf, FileReport)>), CliError> {
    let tool = match std::env::var_os("DEMO_LEDGER").filter(|p| !p.is_empty()) {
        Some(path) => DemoTool::new(Ledger::file(path)),
        None => DemoTool::new(Ledger::memory()),
    };
    let telemetry = Telemetry::replay(config.log_calls);
    let progress = crate::progress::bar(files.len() as u64 * u64::from(args.repeat), "invocations");
    match config.store {
        StoreKind::Memory => {
            let handler = Handler::new(MemoryStore::new(), tool, config, telemetry);
            Ok(replay(
                Arc::new(handler),
                files,
                args.repeat,
                args.concurrency,
                progress,
                args.responses,
            )
            .await)
        }
        StoreKind::DynamoDb => {
            let cfg = config
                .dynamodb()
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let client = dynamodb::build_client(config.dynamodb_endpoint.as_deref()).await;
            if args.create_table {
                let report = toolcall_dedup::store::table::create_table_with_client(&client, &cfg)
                    .await
                    .map_err(|e| CliError::Usage(format!("--create-table: {e}")))?;
                eprintln!("{report}");
            }
            let store =
                DynamoDbStore::new(&client, cfg).map_err(|e| CliError::Usage(e.to_string()))?;
            let handler = Handler::new(store, tool, config, telemetry);
            Ok(replay(
                Arc::new(handler),
                files,
                args.repeat,
                args.concurrency,
                progress,
                args.responses,
            )
            .await)
        }
    }
}

/// Sends every event `repeat` times through `handler`, `concurrency` at a time, in order; with
/// `responses`, prints each invocation's [`response_line`] in invocation order.
pub(crate) async fn replay<S: Store + 'static>(
    handler: Arc<Handler<S, DemoTool>>,
    files: Vec<EventFile>,
    repeat: u32,
    concurrency: u32,
    progress: indicatif::ProgressBar,
    responses: bool,
) -> (Summary, Vec<(PathBuf, FileReport)>) {
    let files = Arc::new(files);
    let permits = Arc::new(Semaphore::new(concurrency.max(1) as usize));
    let mut tasks = JoinSet::new();
    let mut summary = Summary {
        events: files.len() as u64,
        ..Summary::default()
    };
    let mut reports: Vec<FileReport> = vec![FileReport::default(); files.len()];
    let mut lines = InOrder::default();
    let mut record = |summary: &mut Summary, (index, outcome, error, line): Done| {
        if let Some((sequence, line)) = line {
            lines.push(sequence, line, &progress);
        }
        summary.count(outcome);
        let report = &mut reports[index];
        *report
            .outcomes
            .entry(outcome.map_or("unreadable", Outcome::name))
            .or_default() += 1;
        if report.first_error.is_none() {
            report.first_error = error;
        }
        progress.inc(1);
    };
    let mut sequence = 0..;
    for index in 0..files.len() {
        for invocation in sequence.by_ref().take(repeat as usize) {
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .expect("semaphore never closes");
            let (handler, files) = (handler.clone(), files.clone());
            tasks.spawn(async move {
                let _permit = permit;
                let file = &files[index];
                match &file.event {
                    Ok(event) => {
                        let handled = handler
                            .handle_with_context(
                                event,
                                &Invocation::default(),
                                file.client_context.as_ref(),
                            )
                            .await;
                        let error = match &handled.response {
                            Err(e) => Some(e.to_string()),
                            Ok(raw) if is_error(handled.outcome) => Some(notice_message(raw.get())),
                            Ok(_) => None,
                        };
                        let outcome = handled.outcome;
                        let line = responses.then(|| response_line(&file.path, handled));
                        (index, Some(outcome), error, line.map(|l| (invocation, l)))
                    }
                    Err(e) => {
                        let line = responses.then(|| (invocation, unreadable_line(&file.path, e)));
                        (index, None, Some(e.clone()), line)
                    }
                }
            });
            while let Some(done) = tasks.try_join_next() {
                record(&mut summary, done.expect("replay task panicked"));
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        record(&mut summary, done.expect("replay task panicked"));
    }
    progress.finish_and_clear();
    let paths = files.iter().map(|f| f.path.clone());
    (summary, paths.zip(reports).collect())
}

/// One `--responses` line: the event file, the outcome, the key, and what the agent receives: the
/// Bedrock response, or the Lambda error the runtime reports for an event no response can answer.
pub(crate) fn response_line(event: &std::path::Path, handled: Handled) -> String {
    let mut line = serde_json::Map::new();
    line.insert("event".into(), event.display().to_string().into());
    line.insert("outcome".into(), handled.outcome.name().into());
    if let Some(key) = handled.key {
        line.insert("key".into(), key.into());
    }
    match handled.response {
        Ok(raw) => {
            let response = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            line.insert("response".into(), response);
        }
        Err(e) => {
            let diagnostic = lambda_runtime::Diagnostic::from(e);
            let error = serde_json::json!({
                "errorType": diagnostic.error_type,
                "errorMessage": diagnostic.error_message,
            });
            line.insert("error".into(), error);
        }
    }
    Value::Object(line).to_string()
}

/// One finished invocation: the file's index, its outcome (`None`: the file is not JSON), the first
/// error, and with `--responses` the invocation's sequence number and line.
type Done = (
    usize,
    Option<Outcome>,
    Option<String>,
    Option<(usize, String)>,
);

/// The `--responses` line of a file that is not JSON: no invocation happened.
fn unreadable_line(event: &std::path::Path, error: &str) -> String {
    serde_json::json!({"event": event.display().to_string(), "outcome": "unreadable", "error": error})
        .to_string()
}

/// Prints `--responses` lines in invocation order, whatever order concurrent invocations end in.
#[derive(Default)]
struct InOrder {
    next: usize,
    pending: BTreeMap<usize, String>,
}

impl InOrder {
    fn push(&mut self, sequence: usize, line: String, progress: &indicatif::ProgressBar) {
        self.pending.insert(sequence, line);
        while let Some(line) = self.pending.remove(&self.next) {
            progress.suspend(|| println!("{line}"));
            self.next += 1;
        }
    }
}

fn is_error(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::ToolError | Outcome::StoreError | Outcome::BadRequest | Outcome::InProgress
    )
}

/// The `message` of a notice the executor wrote, for the per-file error line.
fn notice_message(response: &str) -> String {
    let value: Value = serde_json::from_str(response).unwrap_or_default();
    // An envelope error, or an AgentCore notice, carries its message directly.
    if let Some(message) = value
        .pointer("/error/message")
        .or_else(|| value.get("message"))
        .and_then(Value::as_str)
    {
        return message.to_string();
    }
    let body = value
        .pointer("/response/functionResponse/responseBody/TEXT/body")
        .or_else(|| value.pointer("/response/responseBody/application~1json/body"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|b| b.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| body.to_string())
}

/// Handler logs go to stderr at WARN unless `RUST_LOG` says otherwise; stdout is for results.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
