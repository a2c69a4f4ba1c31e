//! `dedup list`, `dedup show KEY`, `dedup evict KEY --yes`: the records an operator finds, reads
//! and removes (see [`crate::operator::inspect`]).

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use crate::operator::inspect::{self, describe, evict, row, state_name};
use aws_smithy_types::DateTime;
use aws_smithy_types::date_time::Format;
use toolcall_dedup::store::{
    DEFAULT_MAX_SCANNED, LeaseToken, RecordFilter, RecordState, Records, Store,
};

use super::CliError;
use super::table::TableArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only records in this state. `unknown` (an outcome someone must settle) is read from the
    /// table's attention index, without a scan; the others scan the table.
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
    /// Only this tool's records.
    #[arg(long)]
    pub(crate) tool: Option<String>,
    /// Only records created since this time: ISO 8601 (`2026-12-06T05:00:00Z`) or a span back
    /// from now (`90s`, `30m`, `6h`, `2d`).
    #[arg(long, value_parser = parse_since)]
    pub(crate) since: Option<Since>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: usize,
    /// The states the attention index does not hold (in_progress, completed, any) are found by a
    /// scan, which reads at most this many items of the table: the newest among them are listed.
    /// Narrow a large table with --tool or --since, or raise this.
    #[arg(long, default_value_t = DEFAULT_MAX_SCANNED,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) max_scanned: usize,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

/// A state as `dedup list` prints it (`in_progress`); `in-progress` is read too.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum StateArg {
    Unknown,
    #[value(alias = "in-progress")]
    InProgress,
    Completed,
}

impl From<StateArg> for RecordState {
    fn from(state: StateArg) -> RecordState {
        match state {
            StateArg::Unknown => RecordState::Unknown,
            StateArg::InProgress => RecordState::InProgress,
            StateArg::Completed => RecordState::Completed,
        }
    }
}

/// A `--since` bound: a time, or a span back from when the command runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Since {
    At { ms: i64 },
    Ago { ms: i64 },
}

fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(at) = DateTime::from_str(text, Format::DateTime) {
        return at
            .to_millis()
            .map(|ms| Since::At { ms })
            .map_err(|e| e.to_string());
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<i64>() {
        Ok(n) if seconds > 0 => Ok(Since::Ago {
            ms: n.saturating_mul(seconds * 1000),
        }),
        _ => Err(format!(
            "{text:?} is neither an ISO 8601 time (2026-12-06T05:00:00Z) nor a span (30m, 6h, 2d)"
        )),
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The call's key (32 hex digits), as the call log and `dedup list` print it.
    #[arg(value_parser = parse_key)]
    pub(crate) key: String,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EvictArgs {
    /// The call's key (32 hex digits), as the call log and `dedup list` print it.
    #[arg(value_parser = parse_key)]
    pub(crate) key: String,
    /// Delete only while the record is still this version (the `version` `dedup show` printed).
    #[arg(long)]
    pub(crate) version: Option<String>,
    /// Confirms the deletion: the next identical call runs the tool again.
    #[arg(long)]
    pub(crate) yes: bool,
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

/// A call's key as the executor writes it: 32 lowercase hex digits (or a Gateway catalog's
/// `catalog:` record).
fn parse_key(text: &str) -> Result<String, String> {
    let hex = text.len() == 32
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex || text.starts_with("catalog:") {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a key: keys are 32 lowercase hex digits, as the call log and \
             `dedup list` print them"
        ))
    }
}

pub(crate) fn list(args: ListArgs) -> Result<ExitCode, CliError> {
    args.table.with_store(|store| async move {
        let now = store.now_ms();
        let filter = RecordFilter {
            state: args.state.map(RecordState::from),
            tool: args.tool.clone(),
            since_ms: args.since.map(|since| match since {
                Since::At { ms } => ms,
                Since::Ago { ms } => now.saturating_sub(ms),
            }),
            limit: args.limit,
            max_scanned: args.max_scanned,
            claims_only: false,
        };
        let records = store.list(&filter).await?;
        let mut out = std::io::stdout().lock();
        if args.json {
            for record in &records {
                writeln!(out, "{}", row(record, now))?;
            }
        } else {
            writeln!(
                out,
                "{:<24}  {:<11}  {:<24}  {:<10}  {:<20}  KEY",
                "CREATED", "STATE", "TOOL", "DOOR", "RUN"
            )?;
            for record in &records {
                writeln!(
                    out,
                    "{:<24}  {:<11}  {:<24}  {:<10}  {:<20}  {}",
                    inspect::iso8601(record.created_at_ms),
                    state_name(RecordState::of(record, now)),
                    record.tool,
                    record.about.door().unwrap_or("-"),
                    record.about.run.as_deref().unwrap_or("-"),
                    record.key,
                )?;
            }
            if std::io::stderr().is_terminal() {
                eprintln!("{} record(s)", records.len());
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub(crate) fn show(args: ShowArgs) -> Result<ExitCode, CliError> {
    args.table.with_store(|store| async move {
        match store.get(&args.key).await? {
            Some(record) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&describe(&record, store.now_ms()))?
                );
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!("dedup show: no live record for key {}", args.key);
                Ok(ExitCode::from(1))
            }
        }
    })
}

pub(crate) fn evict_command(args: EvictArgs) -> Result<ExitCode, CliError> {
    if !args.yes {
        return Err(CliError::Usage(format!(
            "evicting {} lets the next identical call run the tool again: add --yes to confirm \
             (see it first with `dedup show {}`)",
            args.key, args.key
        )));
    }
    args.table.with_store(|store| async move {
        let expected = args.version.as_deref().map(LeaseToken::new);
        match evict(&store, &args.key, expected.as_ref()).await {
            Ok(done) => {
                println!("{}", done.log_line(store.now_ms()));
                Ok(ExitCode::SUCCESS)
            }
            Err(inspect::EvictError::Store(e)) => Err(e.into()),
            Err(refused) => {
                eprintln!("dedup evict: {refused}");
                Ok(ExitCode::from(1))
            }
        }
    })
}
