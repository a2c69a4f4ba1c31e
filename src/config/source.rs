//! Where the config document lives (`DEDUP_CONFIG`): a bundled file, an SSM parameter or an S3
//! object; and the schemas a document points at in S3 (an action group's `apiSchema.s3`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::document::{self, Document, DocumentError};

/// `DEDUP_CONFIG`: `ssm:/name` (or `ssm:name`), `s3://bucket/key`, or a file path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file bundled with the function (or on the operator's disk).
    File(PathBuf),
    /// An SSM parameter (String or SecureString), by name.
    Ssm(String),
    /// An S3 object.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
    },
}

impl FromStr for ConfigSource {
    type Err = String;

    fn from_str(text: &str) -> Result<ConfigSource, String> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix("ssm:") {
            return match name.trim() {
                "" => Err("ssm: needs a parameter name (ssm:/toolcall-dedup/config)".into()),
                name => Ok(ConfigSource::Ssm(name.to_string())),
            };
        }
        if let Some(rest) = text.strip_prefix("s3://") {
            return s3_location(rest).map(|(bucket, key)| ConfigSource::S3 { bucket, key });
        }
        if text.is_empty() {
            return Err("empty".into());
        }
        Ok(ConfigSource::File(PathBuf::from(text)))
    }
}

fn s3_location(rest: &str) -> Result<(String, String), String> {
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(format!("s3://{rest} must be s3://bucket/key")),
    }
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::File(path) => write!(f, "{}", path.display()),
            ConfigSource::Ssm(name) => write!(f, "ssm:{name}"),
            ConfigSource::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

/// Why a document could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The source could not be read.
    #[error("{source_name}: cannot read it: {message}")]
    Read {
        /// The source, as `DEDUP_CONFIG` names it.
        source_name: String,
        /// What the file system or the service said.
        message: String,
    },
    /// The text is not a valid document.
    #[error("{source_name}: {error}")]
    Invalid {
        /// The source, as `DEDUP_CONFIG` names it.
        source_name: String,
        /// What is wrong, and where in the document.
        #[source]
        error: DocumentError,
    },
}

/// Reads documents from their source, with the clients it needs (built once).
#[derive(Debug, Clone)]
pub struct Loader {
    source: ConfigSource,
    ssm: Option<aws_sdk_ssm::Client>,
    s3: Option<aws_sdk_s3::Client>,
}

/// One load: the document, the text it came from, and the version of everything that keys (the
/// text and each schema it keeps in S3).
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The text as read.
    pub text: String,
    /// The parsed document.
    pub document: Document,
    /// A digest of the text and of every S3 schema read into the document: a refresh that finds
    /// the same version changes nothing, and one that finds a schema object changed under the
    /// same text replaces the handler.
    pub version: String,
    /// How many schemas the document keeps in S3: with none, the same text is the same version
    /// and a refresh reads nothing more.
    pub s3_schemas: usize,
}

impl Loader {
    /// A loader for `source`, with AWS clients from the default configuration (S3 at
    /// `s3_endpoint` and SSM at `ssm_endpoint` when given: local servers).
    pub async fn new(
        source: ConfigSource,
        ssm_endpoint: Option<&str>,
        s3_endpoint: Option<&str>,
    ) -> Loader {
        let ssm = match &source {
            ConfigSource::Ssm(_) => {
                let shared = crate::aws::sdk_config(ssm_endpoint).await;
                Some(aws_sdk_ssm::Client::new(&shared))
            }
            _ => None,
        };
        Loader {
            source,
            ssm,
            s3: Some(crate::store::offload::build_client(s3_endpoint).await),
        }
    }

    /// Where documents come from.
    pub fn source(&self) -> &ConfigSource {
        &self.source
    }

    /// Reads the document's text.
    pub async fn read_text(&self) -> Result<String, LoadError> {
        let failed = |message: String| LoadError::Read {
            source_name: self.source.to_string(),
            message,
        };
        match &self.source {
            ConfigSource::File(path) => tokio::fs::read_to_string(path)
                .await
                .map_err(|e| failed(e.to_string())),
            ConfigSource::Ssm(name) => {
                let client = self.ssm.as_ref().expect("built for an SSM source");
                let out = client
                    .get_parameter()
                    .name(name)
                    .with_decryption(true)
                    .send()
                    .await
                    .map_err(|e| failed(error_chain(&e)))?;
                out.parameter()
                    .and_then(|p| p.value())
                    .map(str::to_string)
                    .ok_or_else(|| failed("the parameter has no value".into()))
            }
            ConfigSource::S3 { bucket, key } => self.object(bucket, key).await.map_err(failed),
        }
    }

    /// Reads and parses the document, with every schema it keeps in S3 read into it.
    pub async fn load(&self) -> Result<Loaded, LoadError> {
        let text = self.read_text().await?;
        self.parse(text).await
    }

    /// Parses `text` as a document from this loader's source, reading the schemas it keeps in S3.
    pub async fn parse(&self, text: String) -> Result<Loaded, LoadError> {
        let invalid = |error| LoadError::Invalid {
            source_name: self.source.to_string(),
            error,
        };
        let mut value = document::read_text(&text).map_err(invalid)?;
        let mut version = Sha256::new();
        version.update(text.as_bytes());
        let mut s3_schemas = 0;
        if let Some(definitions) = value.get_mut("tool_definitions") {
            s3_schemas = self
                .read_s3_schemas(definitions, "tool_definitions", &mut version)
                .await
                .map_err(invalid)?;
        }
        let document = document::from_value(value).map_err(invalid)?;
        Ok(Loaded {
            text,
            document,
            version: hex::encode(&version.finalize()[..16]),
            s3_schemas,
        })
    }

    /// An action group whose OpenAPI schema is in S3 (`apiSchema.s3`, as Bedrock stores it) gets
    /// the object's text as its `apiSchema.payload`.
    async fn read_s3_schemas(
        &self,
        value: &mut Value,
        path: &str,
        version: &mut Sha256,
    ) -> Result<usize, DocumentError> {
        let mut read = 0;
        let mut pending = vec![(path.to_string(), value)];
        while let Some((path, value)) = pending.pop() {
            match value {
                Value::Array(items) => pending.extend(
                    items
                        .iter_mut()
                        .enumerate()
                        .map(|(i, item)| (format!("{path}[{i}]"), item)),
                ),
                Value::Object(map) => {
                    if let Some(schema) = map.get_mut("apiSchema")
                        && let Some(location) = schema.get("s3").cloned()
                    {
                        let at = format!("{path}.apiSchema.s3");
                        let (bucket, key) = match (
                            location.get("s3BucketName").and_then(Value::as_str),
                            location.get("s3ObjectKey").and_then(Value::as_str),
                        ) {
                            (Some(b), Some(k)) => (b.to_string(), k.to_string()),
                            _ => {
                                return Err(DocumentError {
                                    path: at,
                                    message: "needs s3BucketName and s3ObjectKey".into(),
                                });
                            }
                        };
                        let text =
                            self.object(&bucket, &key)
                                .await
                                .map_err(|message| DocumentError {
                                    path: at.clone(),
                                    message: format!("s3://{bucket}/{key}: {message}"),
                                })?;
                        version.update([0]);
                        version.update(text.as_bytes());
                        read += 1;
                        *schema = serde_json::json!({ "payload": text });
                    }
                    for (name, child) in map.iter_mut() {
                        if name == "actionGroups" || name == "actionGroupSummaries" {
                            pending.push((format!("{path}.{name}"), child));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(read)
    }

    async fn object(&self, bucket: &str, key: &str) -> Result<String, String> {
        let client = self.s3.as_ref().expect("always built");
        let out = client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .into_bytes();
        String::from_utf8(bytes.to_vec()).map_err(|_| "not UTF-8 text".to_string())
    }
}

/// An SDK error with its causes, so "dispatch failure" says which.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_read_from_their_spelling() {
        assert_eq!(
            "ssm:/dedup/config".parse(),
            Ok(ConfigSource::Ssm("/dedup/config".into()))
        );
        assert_eq!(
            "s3://b/config/dedup.yaml".parse(),
            Ok(ConfigSource::S3 {
                bucket: "b".into(),
                key: "config/dedup.yaml".into()
            })
        );
        assert_eq!(
            "/opt/dedup.yaml".parse(),
            Ok(ConfigSource::File("/opt/dedup.yaml".into()))
        );
        assert!("s3://bucket".parse::<ConfigSource>().is_err());
        assert!("ssm:".parse::<ConfigSource>().is_err());
    }
}
