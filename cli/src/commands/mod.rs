//! The `dedup` command line. Each subcommand lives in its own module with its clap arguments; the
//! binary only calls [`main`].

pub(crate) mod agent;
pub(crate) mod audit;
pub mod chaos;
pub(crate) mod config;
pub mod corpus;
pub(crate) mod cost;
mod gateway_check;
pub(crate) mod key;
pub(crate) mod records;
pub mod replay;
pub(crate) mod score;
pub mod settle;
pub(crate) mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "dedup",
    version,
    about = "Key, score and replay AI tool calls for idempotency"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Derive keys for tool calls read as JSON Lines on stdin.
    Key(key::KeyArgs),
    /// Find retries and deliberate repeats in tool-call logs and score every keyer on them.
    Audit(audit::AuditArgs),
    /// Model what duplicates waste in tokens against what the store costs.
    Cost(cost::CostArgs),
    /// Check a config document (routes, settings, policies, schemas) as the function reads it.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Point a Bedrock agent's action groups at the dedup function (the plan first; --yes to do it).
    Attach(agent::AttachArgs),
    /// Put back what `dedup attach` replaced.
    Detach(agent::DetachArgs),
    /// Manage the idempotency table on a DynamoDB endpoint.
    #[command(subcommand)]
    Table(table::TableCommand),
    /// Settle a call whose outcome is unknown: store its reply, release it, or show it.
    Settle(settle::SettleArgs),
    /// List the records in the table: by state (`--state unknown` finds what must be settled),
    /// tool and time.
    List(records::ListArgs),
    /// Print one record readably: who and what called, when, its state and its stored reply.
    Show(records::ShowArgs),
    /// Delete a completed record (confirmed with --yes), so that the same call runs again.
    Evict(records::EvictArgs),
    /// Score keyers A–D and ours on the replay corpus (the article's table).
    Score(score::ScoreArgs),
    /// Rebuild the replay corpus files byte for byte.
    Corpus(corpus::CorpusArgs),
    /// Run Bedrock event files through the real handler, with the demo tool in-process.
    Replay(replay::ReplayArgs),
    /// Soak the handler and a local DynamoDB server under random faults; check the demo ledger.
    Chaos(chaos::ChaosArgs),
}

/// Parses the command line and runs the subcommand; the exit code says whether everything succeeded.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Key(args) => key::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Cost(args) => cost::run(args),
        Command::Table(command) => table::run(command),
        Command::Config(command) => config::run(command),
        Command::Attach(args) => agent::attach(args),
        Command::Detach(args) => agent::detach(args),
        Command::Settle(args) => settle::run(args),
        Command::List(args) => records::list(args),
        Command::Show(args) => records::show(args),
        Command::Evict(args) => records::evict_command(args),
        Command::Score(args) => score::run(args),
        Command::Corpus(args) => corpus::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Chaos(args) => chaos::run(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dedup: {}", with_causes(&error));
            ExitCode::from(2)
        }
    }
}

/// The error and every cause under it, so that "store unavailable" says why (a refused
/// connection, an unknown host, a denied request).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// Errors a subcommand can end with (per-line input errors are reported inline instead).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Policy(#[from] toolcall_dedup::key::PolicyError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Store(#[from] toolcall_dedup::store::StoreError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// One line for an AWS SDK error, as an operator reads it: the service's own code and message
/// when it answered, else what kept the request from an answer with its innermost cause (no
/// credentials, a refused connection, a timeout); never the SDK's debug dump.
pub(crate) fn sdk_error_line<E, R>(error: &aws_sdk_lambda::error::SdkError<E, R>) -> String
where
    E: aws_sdk_lambda::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_lambda::error::SdkError;
    if let Some(refused) = error.as_service_error() {
        return match (refused.code(), refused.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.to_string(),
            _ => refused.to_string(),
        };
    }
    let what = match error {
        SdkError::ConstructionFailure(_) => "the request could not be made",
        SdkError::TimeoutError(_) => "no answer in time",
        SdkError::DispatchFailure(_) => "could not reach the service",
        SdkError::ResponseError(_) => "the service's answer could not be read",
        _ => "the request failed",
    };
    let mut cause: &dyn std::error::Error = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    format!("{what}: {cause}")
}
