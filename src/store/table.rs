//! Creates the idempotency table for local use (or checks an existing one): `dedup table create`
//! and the tests call it.
//!
//! On-demand billing, a string partition key named by `key_attribute`, and TTL on
//! `ttl_attribute` where the server supports it (dynalite does not; the store never relies on the
//! TTL sweeper anyway).

use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use super::dynamodb::{ATTENTION_INDEX, attr, build_client};
use super::{DynamoDbConfig, StoreError};

/// How long to wait for a new table to become `ACTIVE`.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);

/// What [`create_table`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTableReport {
    /// The table's name.
    pub table: String,
    /// False if the table already existed (with the expected key schema).
    pub created: bool,
    /// Whether TTL is on, and on which attribute.
    pub ttl: TtlState,
    /// Whether the attention index ([`ATTENTION_INDEX`]) was there or was added by this call.
    pub index_added: bool,
}

/// TTL state of the table after [`create_table`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TtlState {
    /// Enabled by this call.
    Enabled {
        /// The TTL attribute.
        attribute: String,
    },
    /// Was already enabled (or being enabled) on this attribute.
    AlreadyEnabled {
        /// The TTL attribute.
        attribute: String,
    },
    /// The server has no `UpdateTimeToLive` (dynalite). Expired records still count as absent.
    Unsupported {
        /// The server's answer.
        reason: String,
    },
}

impl fmt::Display for CreateTableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.created {
            "created"
        } else {
            "already exists"
        };
        write!(f, "table {}: {what}; ", self.table)?;
        if self.index_added && !self.created {
            write!(f, "index {ATTENTION_INDEX} added; ")?;
        }
        match &self.ttl {
            TtlState::Enabled { attribute } => write!(f, "TTL enabled on {attribute}"),
            TtlState::AlreadyEnabled { attribute } => {
                write!(f, "TTL already enabled on {attribute}")
            }
            TtlState::Unsupported { reason } => {
                write!(f, "TTL not supported by this server ({reason})")
            }
        }
    }
}

/// Creates `cfg.table` on the endpoint (default AWS endpoint if `None`) with the attention index,
/// waits until it is active and enables TTL. Idempotent: an existing table with the right key
/// schema is kept, and gets the index if it lacks it (tables made before records had one).
pub async fn create_table(
    endpoint: Option<&str>,
    cfg: &DynamoDbConfig,
) -> Result<CreateTableReport, StoreError> {
    let client = build_client(endpoint).await;
    create_table_with_client(&client, cfg).await
}

/// [`create_table`] with a client built by the caller.
pub async fn create_table_with_client(
    client: &Client,
    cfg: &DynamoDbConfig,
) -> Result<CreateTableReport, StoreError> {
    cfg.validate()?;
    let created = match client
        .create_table()
        .table_name(&cfg.table)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(attribute_definitions(cfg)?))
        .key_schema(key_element(&cfg.key_attribute, KeyType::Hash)?)
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(ATTENTION_INDEX)
                .set_key_schema(Some(attention_key_schema()?))
                .projection(all_attributes())
                .build()
                .map_err(build_error)?,
        )
        .send()
        .await
    {
        Ok(_) => true,
        Err(e) if e.code() == Some("ResourceInUseException") => false,
        Err(e) => return Err(sdk_error("CreateTable", e)),
    };
    let has_index = wait_active_with_key(client, cfg).await?;
    let index_added = if has_index {
        created
    } else {
        add_attention_index(client, cfg).await?;
        wait_active_with_key(client, cfg).await?;
        true
    };
    let ttl = enable_ttl(client, cfg).await?;
    Ok(CreateTableReport {
        table: cfg.table.clone(),
        created,
        ttl,
        index_added,
    })
}

fn key_element(name: &str, key_type: KeyType) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(build_error)
}

fn attribute_definitions(cfg: &DynamoDbConfig) -> Result<Vec<AttributeDefinition>, StoreError> {
    [
        (cfg.key_attribute.as_str(), ScalarAttributeType::S),
        (attr::ATTENTION, ScalarAttributeType::S),
        (attr::CREATED_AT, ScalarAttributeType::N),
    ]
    .into_iter()
    .map(|(name, kind)| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .map_err(build_error)
    })
    .collect()
}

fn attention_key_schema() -> Result<Vec<KeySchemaElement>, StoreError> {
    Ok(vec![
        key_element(attr::ATTENTION, KeyType::Hash)?,
        key_element(attr::CREATED_AT, KeyType::Range)?,
    ])
}

/// Records in the index carry no result (they have none yet), so projecting everything costs
/// little and lets a listing read them without going back to the table.
fn all_attributes() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::All)
        .build()
}

async fn add_attention_index(client: &Client, cfg: &DynamoDbConfig) -> Result<(), StoreError> {
    let create = CreateGlobalSecondaryIndexAction::builder()
        .index_name(ATTENTION_INDEX)
        .set_key_schema(Some(attention_key_schema()?))
        .projection(all_attributes())
        .build()
        .map_err(build_error)?;
    client
        .update_table()
        .table_name(&cfg.table)
        .set_attribute_definitions(Some(attribute_definitions(cfg)?))
        .global_secondary_index_updates(
            GlobalSecondaryIndexUpdate::builder().create(create).build(),
        )
        .send()
        .await
        .map_err(|e| sdk_error("UpdateTable (adding the index \"attention\")", e))?;
    Ok(())
}

/// Waits until the table and its indexes are active; whether it has the attention index.
async fn wait_active_with_key(client: &Client, cfg: &DynamoDbConfig) -> Result<bool, StoreError> {
    let start = tokio::time::Instant::now();
    loop {
        let out = client
            .describe_table()
            .table_name(&cfg.table)
            .send()
            .await
            .map_err(|e| sdk_error("DescribeTable", e))?;
        let table = out
            .table()
            .ok_or_else(|| StoreError::config("DescribeTable returned no table"))?;
        let keys = table.key_schema();
        let key_ok = keys.len() == 1
            && keys[0].attribute_name() == cfg.key_attribute
            && keys[0].key_type() == &KeyType::Hash
            && table.attribute_definitions().iter().any(|d| {
                d.attribute_name() == cfg.key_attribute
                    && d.attribute_type() == &ScalarAttributeType::S
            });
        if !key_ok {
            return Err(StoreError::config(format!(
                "table {} exists but its key is not a single string partition key named {:?}",
                cfg.table, cfg.key_attribute
            )));
        }
        let indexes = table.global_secondary_indexes();
        let indexes_active = indexes
            .iter()
            .all(|i| i.index_status().is_none_or(|s| s == &IndexStatus::Active));
        if table.table_status() == Some(&TableStatus::Active) && indexes_active {
            return Ok(indexes
                .iter()
                .any(|i| i.index_name() == Some(ATTENTION_INDEX)));
        }
        if start.elapsed() > ACTIVE_TIMEOUT {
            return Err(StoreError::config(format!(
                "table {} not ACTIVE after {ACTIVE_TIMEOUT:?}",
                cfg.table
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn enable_ttl(client: &Client, cfg: &DynamoDbConfig) -> Result<TtlState, StoreError> {
    let described = client
        .describe_time_to_live()
        .table_name(&cfg.table)
        .send()
        .await;
    if let Ok(out) = &described
        && let Some(d) = out.time_to_live_description()
    {
        let enabled = matches!(
            d.time_to_live_status(),
            Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
        );
        match d.attribute_name() {
            Some(a) if enabled && a == cfg.ttl_attribute => {
                return Ok(TtlState::AlreadyEnabled {
                    attribute: a.to_owned(),
                });
            }
            Some(a) if enabled => {
                return Err(StoreError::config(format!(
                    "table {} has TTL on {a:?}, not on {:?}",
                    cfg.table, cfg.ttl_attribute
                )));
            }
            _ => {}
        }
    }
    let spec = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(&cfg.ttl_attribute)
        .build()
        .map_err(build_error)?;
    match client
        .update_time_to_live()
        .table_name(&cfg.table)
        .time_to_live_specification(spec)
        .send()
        .await
    {
        Ok(_) => Ok(TtlState::Enabled {
            attribute: cfg.ttl_attribute.clone(),
        }),
        Err(e) if e.code() == Some("UnknownOperationException") => Ok(TtlState::Unsupported {
            reason: "UpdateTimeToLive is an unknown operation".into(),
        }),
        Err(e) => Err(sdk_error("UpdateTimeToLive", e)),
    }
}

fn build_error(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::InvalidRequest(e.to_string())
}

fn sdk_error<E>(operation: &str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Unavailable(Box::new(e))
        }
        SdkError::ServiceError(s) if s.raw().status().is_server_error() => {
            StoreError::Unavailable(Box::new(e))
        }
        _ => StoreError::Config {
            message: match (e.code(), e.message()) {
                (Some(code), Some(why)) => format!("{operation} failed: {code}: {why}"),
                (Some(code), None) => format!("{operation} failed: {code}"),
                _ => format!("{operation} failed"),
            },
            source: Some(Box::new(e)),
        },
    }
}
