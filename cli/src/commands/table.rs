//! `dedup table create`: the command line over [`toolcall_dedup::store::table`].

use std::future::Future;
use std::process::ExitCode;

use toolcall_dedup::store::dynamodb::build_client;
use toolcall_dedup::store::table::create_table;
use toolcall_dedup::store::{DynamoDbConfig, DynamoDbStore};

use super::CliError;

/// `dedup table ...` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum TableCommand {
    /// Create the idempotency table (on-demand, TTL where supported), or check an existing one.
    Create(TableCreateArgs),
}

/// The idempotency table on a DynamoDB endpoint, as every table command names it (the Lambda's
/// variables are the defaults).
#[derive(Debug, clap::Args)]
pub(crate) struct TableArgs {
    /// DynamoDB endpoint, e.g. a local server (`http://127.0.0.1:8000`); AWS when absent.
    #[arg(long, env = "DEDUP_DYNAMODB_ENDPOINT")]
    pub(crate) endpoint: Option<String>,
    #[arg(long, env = "DEDUP_TABLE_NAME")]
    pub(crate) table: String,
    #[arg(long, env = "DEDUP_KEY_ATTRIBUTE", default_value = "pk")]
    pub(crate) key_attribute: String,
    #[arg(long, env = "DEDUP_TTL_ATTRIBUTE", default_value = "expires_at")]
    pub(crate) ttl_attribute: String,
}

impl TableArgs {
    /// The store settings these arguments name.
    pub(crate) fn config(&self) -> DynamoDbConfig {
        DynamoDbConfig {
            key_attribute: self.key_attribute.clone(),
            ttl_attribute: self.ttl_attribute.clone(),
            ..DynamoDbConfig::new(self.table.clone())
        }
    }

    /// Runs `command` with the table's store, on a runtime of its own.
    pub(crate) fn with_store<F, Fut>(&self, command: F) -> Result<ExitCode, CliError>
    where
        F: FnOnce(DynamoDbStore) -> Fut,
        Fut: Future<Output = Result<ExitCode, CliError>>,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let client = build_client(self.endpoint.as_deref()).await;
            command(DynamoDbStore::new(&client, self.config())?).await
        })
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct TableCreateArgs {
    #[command(flatten)]
    pub(crate) table: TableArgs,
}

pub(crate) fn run(command: TableCommand) -> Result<ExitCode, CliError> {
    let TableCommand::Create(args) = command;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(create_table(
        args.table.endpoint.as_deref(),
        &args.table.config(),
    ))?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}
