//! Shared AWS SDK configuration for the DynamoDB and Lambda clients.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

/// The default AWS configuration, optionally pointed at a local endpoint (a DynamoDB-compatible server,
/// `cargo lambda watch`). With an endpoint, and only then, a missing region defaults to `us-east-1` and
/// missing credentials (no `AWS_ACCESS_KEY_ID`, no `AWS_PROFILE`) to dummy static ones, which local
/// servers accept.
pub(crate) async fn sdk_config(endpoint_url: Option<&str>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest());
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            loader = loader.region(Region::from_static("us-east-1"));
        }
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && std::env::var_os("AWS_PROFILE").is_none()
        {
            loader = loader.credentials_provider(Credentials::new(
                "local",
                "local",
                None,
                None,
                "dedup-local",
            ));
        }
    }
    loader.load().await
}
