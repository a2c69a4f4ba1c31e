//! Results past DynamoDB's item limit, in S3. A reply that does not fit in one item even
//! compressed (or that is longer than `DEDUP_OFFLOAD_THRESHOLD_BYTES`) is written to the results
//! bucket under `<prefix><key>/<lease token>` (one object per claim, so a stale owner can never
//! overwrite a newer owner's object), and the record keeps the object's name, its SHA-256 and its
//! size. A replay reads the object back and checks both: a missing or altered object is
//! [`StoreError::ResultUnavailable`], answered as "stored result unavailable", never a re-run.
//!
//! The bucket's lifecycle rule expires objects after the longest record life; a record that
//! expired first leaves its object to that rule.

use std::fmt;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use sha2::{Digest, Sha256};

use super::{LeaseToken, StoreError};

/// Where a result was offloaded, as the record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offloaded {
    /// The object's key in the results bucket.
    pub object: String,
    /// SHA-256 of the result, 64 lowercase hex digits.
    pub sha256: String,
    /// The result's size in bytes.
    pub bytes: usize,
}

/// The results bucket (`DEDUP_RESULTS_BUCKET`).
#[derive(Clone)]
pub struct ResultBucket {
    client: Client,
    bucket: String,
    prefix: String,
}

impl fmt::Debug for ResultBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultBucket")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The prefix every result object is written under (the lifecycle rule's filter).
pub(crate) const RESULTS_PREFIX: &str = "results/";

/// An S3 client for the results bucket; with `endpoint_url` (a local server) it addresses buckets
/// by path, as local servers expect.
pub async fn build_client(endpoint_url: Option<&str>) -> Client {
    let shared = crate::aws::sdk_config(endpoint_url).await;
    let config = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(endpoint_url.is_some())
        .build();
    Client::from_conf(config)
}

impl ResultBucket {
    /// Results go to `bucket` through `client`, under `RESULTS_PREFIX`.
    pub fn new(client: Client, bucket: impl Into<String>) -> ResultBucket {
        ResultBucket {
            client,
            bucket: bucket.into(),
            prefix: RESULTS_PREFIX.into(),
        }
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Writes `result` for the claim `token` holds on `key`.
    pub(crate) async fn put(
        &self,
        key: &str,
        token: &LeaseToken,
        result: &[u8],
    ) -> Result<Offloaded, StoreError> {
        let offloaded = Offloaded {
            object: format!("{}{key}/{token}", self.prefix),
            sha256: sha256_hex(result),
            bytes: result.len(),
        };
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&offloaded.object)
            .content_type("application/json")
            .body(ByteStream::from(result.to_vec()))
            .send()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        Ok(offloaded)
    }

    /// Reads an offloaded result back and checks its size and checksum.
    pub async fn fetch(&self, offloaded: &Offloaded) -> Result<Vec<u8>, StoreError> {
        let unavailable = |why: String| StoreError::ResultUnavailable {
            object: offloaded.object.clone(),
            why,
        };
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&offloaded.object)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(s) if s.is_no_such_key() => unavailable("the object is missing".into()),
                // Without s3:ListBucket, S3 answers a missing object with 403, not 404.
                _ if e.raw_response().is_some_and(|r| r.status().as_u16() == 403) => {
                    unavailable("the object is missing or not readable (403)".into())
                }
                _ => StoreError::Unavailable(Box::new(e)),
            })?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?
            .into_bytes()
            .to_vec();
        check(offloaded, body).map_err(unavailable)
    }
}

/// The object's bytes, if they are the result the record describes.
pub fn check(offloaded: &Offloaded, body: Vec<u8>) -> Result<Vec<u8>, String> {
    if body.len() != offloaded.bytes {
        return Err(format!(
            "the object is {} bytes, the record says {}",
            body.len(),
            offloaded.bytes
        ));
    }
    if sha256_hex(&body) != offloaded.sha256 {
        return Err("the object's SHA-256 is not the record's".into());
    }
    Ok(body)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_described_bytes_pass() {
        let body = b"{\"ok\":true}".to_vec();
        let offloaded = Offloaded {
            object: "results/k/t".into(),
            sha256: sha256_hex(&body),
            bytes: body.len(),
        };
        assert_eq!(check(&offloaded, body.clone()).unwrap(), body);
        let mut flipped = body.clone();
        flipped[3] ^= 1;
        assert!(check(&offloaded, flipped).unwrap_err().contains("SHA-256"));
        assert!(
            check(&offloaded, b"{}".to_vec())
                .unwrap_err()
                .contains("bytes")
        );
    }
}
