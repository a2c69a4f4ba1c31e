//! The `demo-tool` Lambda: wiring only. The tool is `dedup_cli::demo::DemoTool`.

use dedup_cli::demo::DemoTool;
use lambda_runtime::{Error, LambdaEvent, service_fn, tracing};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing::init_default_subscriber();
    let tool = DemoTool::from_env();
    tracing::info!(ledger = ?tool.ledger().path(), "demo tool ready");
    let tool = &tool;
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move {
        let custom = event.context.client_context.as_ref().map(|c| &c.custom);
        tool.handle_with_context(&event.payload, custom)
    }))
    .await
}
