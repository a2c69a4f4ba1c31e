//! The `toolcall-dedup` Lambda: wiring only. Everything else lives in `toolcall_dedup::handler`.
// The handler future nests the AWS SDK futures deeply; computing its layout needs more than 128.
#![recursion_limit = "256"]

use lambda_runtime::{Error, tracing};
use toolcall_dedup::config::document::Document;
use toolcall_dedup::config::source::Loader;
use toolcall_dedup::config::{Config, StoreKind};
use toolcall_dedup::dispatch::{self, LambdaDispatcher};
use toolcall_dedup::handler::{Handler, serve};
use toolcall_dedup::internals::announce::EventBus;
use toolcall_dedup::internals::reload::{Reloading, document_from_env};
use toolcall_dedup::store::{DynamoDbStore, MemoryStore, Records, ResultBucket, dynamodb, offload};
use toolcall_dedup::telemetry::Telemetry;

// One thread: Lambda hands a container one invocation at a time, and a multi-threaded runtime
// only adds cross-thread wake-ups to every store request (docs/performance.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    // Logs as the runtime's default subscriber writes them, and the stage spans to X-Ray.
    toolcall_dedup::internals::xray::init_lambda_subscriber();
    run()
        .await
        .inspect_err(|e| tracing::error!("toolcall-dedup stopped: {e}"))
}

async fn run() -> Result<(), Error> {
    // The config document first (DEDUP_CONFIG): its settings are part of the configuration.
    let document = match document_from_env().await? {
        Some((loader, every)) => {
            let loaded = loader.load().await?;
            Some((loader, loaded, every))
        }
        None => None,
    };
    let config = Config::lambda_with_document(document.as_ref().map(|(_, l, _)| &l.document))?;
    let lambda_client = dispatch::build_client(config.lambda_endpoint.as_deref()).await;
    let dispatcher = LambdaDispatcher::new(&lambda_client);
    // In the background: until a tool's timeout is known, its lease assumes Lambda's maximum.
    if config.look_up_timeouts {
        tokio::spawn({
            let (dispatcher, routes) = (dispatcher.clone(), config.routes.clone());
            async move { dispatcher.keep_timeouts_current(routes).await }
        });
    }
    match config.store {
        StoreKind::DynamoDb => {
            let client = dynamodb::build_client(config.dynamodb_endpoint.as_deref()).await;
            let mut store = DynamoDbStore::new(&client, config.dynamodb()?)?;
            if let Some(bucket) = &config.results_bucket {
                let s3 = offload::build_client(config.s3_endpoint.as_deref()).await;
                store = store.with_result_bucket(ResultBucket::new(s3, bucket));
            }
            run_with(store, dispatcher, config, document).await
        }
        StoreKind::Memory => run_with(MemoryStore::new(), dispatcher, config, document).await,
    }
}

/// Serves the handler `config` describes; with a config document, the one its latest good
/// version describes.
async fn run_with<S: Records + Clone>(
    store: S,
    dispatcher: LambdaDispatcher,
    config: Config,
    document: Option<(
        Loader,
        toolcall_dedup::config::source::Loaded,
        std::time::Duration,
    )>,
) -> Result<(), Error> {
    let telemetry = Telemetry::lambda(&config.metrics, config.log_calls);
    let events = match &config.event_bus {
        Some(bus) => {
            let client = EventBus::build_client(config.events_endpoint.as_deref()).await;
            Some(EventBus::new(client, bus, &config.metrics.service))
        }
        None => None,
    };
    let announcing = move |handler: Handler<S, LambdaDispatcher>| match &events {
        Some(events) => handler.with_event_bus(events.clone()),
        None => handler,
    };
    let Some((loader, loaded, every)) = document else {
        let handler = Handler::new(store, dispatcher, &config, telemetry);
        return Ok(serve(announcing(handler)).await?);
    };
    let build = move |document: &Document| {
        let config = Config::lambda_with_document(Some(document))?;
        let telemetry = Telemetry::lambda(&config.metrics, config.log_calls);
        Ok(announcing(Handler::new(
            store.clone(),
            dispatcher.clone(),
            &config,
            telemetry,
        )))
    };
    Ok(Reloading::start(loader, loaded, build, every, telemetry)?
        .serve()
        .await?)
}
