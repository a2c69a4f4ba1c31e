//! The lean wire: a [`Request`] as DynamoDB's JSON protocol, signed with SigV4 and sent on the
//! SDK's own HTTP connector, without the SDK's per-request orchestration. Credentials, region and
//! endpoint come from the same AWS configuration the SDK client is built from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_dynamodb::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_http_client::{Connector, tls};
use aws_smithy_runtime_api::client::http::HttpConnector;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::body::SdkBody;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::BodyExt;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use super::wire::{Action, Request, ServiceAnswer, WireError, WireErrorKind};
use super::{Item, RequestCounter, StoreError};

/// Credentials are fetched again this long before they expire.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

/// Signs and sends [`Request`]s; shared by a store's clones.
pub(super) struct SignedWire {
    connector: Connector,
    endpoint: http::Uri,
    host: http::HeaderValue,
    region: String,
    credentials: SharedCredentialsProvider,
    cached: Mutex<Option<Credentials>>,
    counter: Arc<RequestCounter>,
}

impl std::fmt::Debug for SignedWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedWire")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl SignedWire {
    /// From the configuration the SDK client was built from: its region and credentials, and the
    /// endpoint the SDK would resolve (`AWS_ENDPOINT_URL_DYNAMODB`, the configuration's endpoint
    /// URL, or the regional endpoint with its FIPS and dual-stack settings).
    pub(super) async fn new(
        sdk: &SdkConfig,
        counter: Arc<RequestCounter>,
    ) -> Result<SignedWire, StoreError> {
        let config = |message: &str| StoreError::Config {
            message: format!("signed DynamoDB requests: {message}"),
            source: None,
        };
        let region = sdk
            .region()
            .ok_or_else(|| config("no AWS region is configured"))?
            .to_string();
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| config("no credentials provider is configured"))?;
        let endpoint_url = std::env::var("AWS_ENDPOINT_URL_DYNAMODB")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| sdk.endpoint_url().map(str::to_owned));
        let params = Params::builder()
            .region(region.clone())
            .use_fips(sdk.use_fips().unwrap_or(false))
            .use_dual_stack(sdk.use_dual_stack().unwrap_or(false))
            .set_endpoint(endpoint_url)
            .build()
            .map_err(|e| StoreError::Config {
                message: "signed DynamoDB requests: endpoint parameters".into(),
                source: Some(Box::new(e)),
            })?;
        let endpoint = DefaultResolver::new()
            .resolve_endpoint(&params)
            .await
            .map_err(|e| StoreError::Config {
                message: "signed DynamoDB requests: no endpoint".into(),
                source: Some(e),
            })?;
        let endpoint: http::Uri =
            endpoint
                .url()
                .parse()
                .map_err(|e: http::uri::InvalidUri| StoreError::Config {
                    message: format!("signed DynamoDB requests: endpoint {:?}", endpoint.url()),
                    source: Some(Box::new(e)),
                })?;
        let host = endpoint
            .authority()
            .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
            .ok_or_else(|| config("the endpoint has no host"))?;
        let connector = Connector::builder()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::AwsLc,
            ))
            .build();
        Ok(SignedWire {
            connector,
            endpoint,
            host,
            region,
            credentials,
            cached: Mutex::new(None),
            counter,
        })
    }

    /// One attempt: `req` on `table`, signed now.
    pub(super) async fn send(&self, table: &str, req: &Request) -> Result<Option<Item>, WireError> {
        let body = serde_json::to_vec(&Body { table, req })
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?;
        let identity: Identity = self.credentials().await?.into();
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri(self.endpoint.clone())
            .header(http::header::HOST, self.host.clone())
            .header(http::header::CONTENT_TYPE, "application/x-amz-json-1.0")
            .header("x-amz-target", target(req))
            .body(body)
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("dynamodb")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?
            .into();
        let headers = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
        let signable = SignableRequest::new(
            "POST",
            request.uri().to_string(),
            headers,
            SignableBody::Bytes(request.body()),
        )
        .map_err(|e| WireError::new(WireErrorKind::Construction, e))?;
        let (instructions, _signature) = sign(signable, &params)
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?
            .into_parts();
        instructions.apply_to_request_http1x(&mut request);
        let request = aws_smithy_runtime_api::http::Request::try_from(request.map(SdkBody::from))
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?;
        self.counter.record(req.op());
        let response = self.connector.call(request).await.map_err(|e| {
            let kind = if e.is_timeout() {
                WireErrorKind::Timeout
            } else {
                WireErrorKind::Dispatch { user: e.is_user() }
            };
            WireError::new(kind, e)
        })?;
        let status = response.status();
        let error_type = response
            .headers()
            .get("x-amzn-errortype")
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| WireError::new(WireErrorKind::Response, e))?
            .to_bytes();
        if status.is_success() {
            return match req.action {
                Action::Get => read_item(&body),
                _ => Ok(None),
            };
        }
        Err(error_answer(
            status.as_u16(),
            status.is_server_error(),
            error_type,
            &body,
        ))
    }

    /// The cached credentials, fetched again near their expiry.
    async fn credentials(&self) -> Result<Credentials, WireError> {
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_BEFORE_EXPIRY)
        };
        if let Some(c) = self
            .cached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .filter(|c| fresh(c))
        {
            return Ok(c.clone());
        }
        let c = self
            .credentials
            .provide_credentials()
            .await
            .map_err(|e| WireError::new(WireErrorKind::Construction, e))?;
        *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
        Ok(c)
    }
}

fn target(req: &Request) -> &'static str {
    match req.action {
        Action::Get => "DynamoDB_20120810.GetItem",
        Action::Put(_) => "DynamoDB_20120810.PutItem",
        Action::Update(_) => "DynamoDB_20120810.UpdateItem",
        Action::Delete => "DynamoDB_20120810.DeleteItem",
    }
}

/// A GetItem answer: `{"Item": {...}}`, or `{}` when there is none.
fn read_item(body: &[u8]) -> Result<Option<Item>, WireError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Item")]
        item: Option<HashMap<String, serde_json::Value>>,
    }
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| WireError::new(WireErrorKind::Response, e))?;
    answer
        .item
        .map(item_from_json)
        .transpose()
        .map_err(|e| WireError::new(WireErrorKind::Response, e))
}

/// An error answer. The code is the part of `__type` (or the `x-amzn-ErrorType` header) after
/// its namespace, as the SDK reads it; an answer that names none may have been applied.
fn error_answer(status: u16, server_error: bool, header: Option<String>, body: &[u8]) -> WireError {
    #[derive(serde::Deserialize, Default)]
    struct Answer {
        #[serde(rename = "__type")]
        kind: Option<String>,
        #[serde(alias = "Message")]
        message: Option<String>,
        #[serde(rename = "Item")]
        item: Option<HashMap<String, serde_json::Value>>,
    }
    let answer: Answer = serde_json::from_slice(body).unwrap_or_default();
    let code = header
        .or(answer.kind)
        .map(|t| sanitize_code(&t).to_owned())
        .filter(|c| !c.is_empty());
    // An old item that cannot be read is no answer about the item: the store reads it instead.
    let old = answer.item.and_then(|i| item_from_json(i).ok());
    let service = ServiceAnswer {
        code,
        message: answer.message,
        server_error,
        old,
    };
    let error = ServiceError {
        status,
        code: service.code.clone(),
        message: service.message.clone(),
    };
    WireError::new(WireErrorKind::Service(service), error)
}

/// `com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException` and
/// `ValidationException:http://...` both name `...Exception`.
fn sanitize_code(raw: &str) -> &str {
    let raw = raw.split(':').next().unwrap_or(raw);
    raw.rsplit('#').next().unwrap_or(raw)
}

/// The service's error answer, as the store's error source.
#[derive(Debug, thiserror::Error)]
#[error("DynamoDB answered HTTP {status}: {}: {}", .code.as_deref().unwrap_or("(no error code)"), .message.as_deref().unwrap_or("(no message)"))]
pub(super) struct ServiceError {
    status: u16,
    code: Option<String>,
    message: Option<String>,
}

/// The JSON body of a request on `table`.
struct Body<'a> {
    table: &'a str,
    req: &'a Request,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let req = self.req;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("TableName", self.table)?;
        match &req.action {
            Action::Put(item) => map.serialize_entry("Item", &ItemJson(item))?,
            Action::Get => {
                map.serialize_entry("Key", &ItemJson(&req.key))?;
                map.serialize_entry("ConsistentRead", &true)?;
            }
            Action::Update(update) => {
                map.serialize_entry("Key", &ItemJson(&req.key))?;
                map.serialize_entry("UpdateExpression", update)?;
            }
            Action::Delete => map.serialize_entry("Key", &ItemJson(&req.key))?,
        }
        if let Some(condition) = req.condition {
            map.serialize_entry("ConditionExpression", condition)?;
        }
        if !req.names.is_empty() {
            map.serialize_entry("ExpressionAttributeNames", &req.names)?;
        }
        if !req.values.is_empty() {
            map.serialize_entry("ExpressionAttributeValues", &ItemJson(&req.values))?;
        }
        if req.old_on_refusal {
            map.serialize_entry("ReturnValuesOnConditionCheckFailure", "ALL_OLD")?;
        }
        map.end()
    }
}

struct ItemJson<'a>(&'a Item);

impl Serialize for ItemJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, ValueJson(v))))
    }
}

/// An attribute value in DynamoDB's JSON: `{"S": "..."}`, `{"N": "..."}`, `{"B": base64}`, ...
struct ValueJson<'a>(&'a AttributeValue);

impl Serialize for ValueJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        match self.0 {
            AttributeValue::S(v) => map.serialize_entry("S", v)?,
            AttributeValue::N(v) => map.serialize_entry("N", v)?,
            AttributeValue::B(v) => map.serialize_entry("B", &BASE64.encode(v.as_ref()))?,
            AttributeValue::Bool(v) => map.serialize_entry("BOOL", v)?,
            AttributeValue::Null(v) => map.serialize_entry("NULL", v)?,
            AttributeValue::Ss(v) => map.serialize_entry("SS", v)?,
            AttributeValue::Ns(v) => map.serialize_entry("NS", v)?,
            AttributeValue::Bs(v) => map.serialize_entry(
                "BS",
                &v.iter()
                    .map(|b| BASE64.encode(b.as_ref()))
                    .collect::<Vec<_>>(),
            )?,
            AttributeValue::L(v) => {
                map.serialize_entry("L", &v.iter().map(ValueJson).collect::<Vec<_>>())?
            }
            AttributeValue::M(v) => map.serialize_entry("M", &ItemJson(v))?,
            other => {
                return Err(serde::ser::Error::custom(format!(
                    "an attribute value of an unknown type: {other:?}"
                )));
            }
        }
        map.end()
    }
}

fn item_from_json(item: HashMap<String, serde_json::Value>) -> Result<Item, String> {
    item.into_iter()
        .map(|(k, v)| Ok((k, value_from_json(v)?)))
        .collect()
}

fn value_from_json(v: serde_json::Value) -> Result<AttributeValue, String> {
    use serde_json::Value;
    let Value::Object(map) = v else {
        return Err("an attribute value is not an object".into());
    };
    let mut entries = map.into_iter();
    let (Some((kind, v)), None) = (entries.next(), entries.next()) else {
        return Err("an attribute value has not exactly one type".into());
    };
    let string = |v: Value| match v {
        Value::String(s) => Ok(s),
        _ => Err(format!("a {kind} value is not a string")),
    };
    let strings = |v: Value| match v {
        Value::Array(items) => items.into_iter().map(string).collect::<Result<Vec<_>, _>>(),
        _ => Err(format!("a {kind} value is not a list")),
    };
    let blob = |s: String| {
        BASE64
            .decode(s)
            .map(Blob::new)
            .map_err(|e| format!("a binary value is not base64: {e}"))
    };
    Ok(match kind.as_str() {
        "S" => AttributeValue::S(string(v)?),
        "N" => AttributeValue::N(string(v)?),
        "B" => AttributeValue::B(blob(string(v)?)?),
        "BOOL" => AttributeValue::Bool(v.as_bool().ok_or("a BOOL value is not a boolean")?),
        "NULL" => AttributeValue::Null(v.as_bool().ok_or("a NULL value is not a boolean")?),
        "SS" => AttributeValue::Ss(strings(v)?),
        "NS" => AttributeValue::Ns(strings(v)?),
        "BS" => AttributeValue::Bs(
            strings(v)?
                .into_iter()
                .map(blob)
                .collect::<Result<_, _>>()?,
        ),
        "L" => match v {
            Value::Array(items) => AttributeValue::L(
                items
                    .into_iter()
                    .map(value_from_json)
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err("an L value is not a list".into()),
        },
        "M" => match v {
            Value::Object(m) => AttributeValue::M(item_from_json(m.into_iter().collect())?),
            _ => return Err("an M value is not a map".into()),
        },
        other => return Err(format!("an attribute value of unknown type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_dynamodb_json() {
        let item = Item::from([
            ("s".to_string(), AttributeValue::S("é\"x".into())),
            ("n".to_string(), AttributeValue::N("-1.5e3".into())),
            (
                "b".to_string(),
                AttributeValue::B(Blob::new(vec![0, 255, 7])),
            ),
            ("t".to_string(), AttributeValue::Bool(true)),
            ("z".to_string(), AttributeValue::Null(true)),
            (
                "ss".to_string(),
                AttributeValue::Ss(vec!["a".into(), "b".into()]),
            ),
            ("ns".to_string(), AttributeValue::Ns(vec!["1".into()])),
            (
                "bs".to_string(),
                AttributeValue::Bs(vec![Blob::new(vec![1])]),
            ),
            (
                "l".to_string(),
                AttributeValue::L(vec![AttributeValue::S("x".into())]),
            ),
            (
                "m".to_string(),
                AttributeValue::M(Item::from([(
                    "k".to_string(),
                    AttributeValue::N("2".into()),
                )])),
            ),
        ]);
        let json = serde_json::to_value(ItemJson(&item)).unwrap();
        assert_eq!(json["b"], serde_json::json!({ "B": "AP8H" }));
        assert_eq!(json["t"], serde_json::json!({ "BOOL": true }));
        let back = item_from_json(serde_json::from_value(json).unwrap()).unwrap();
        assert_eq!(back, item);
    }

    #[test]
    fn error_codes_are_read_as_the_sdk_reads_them() {
        let body = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed","Item":{"pk":{"S":"k"}}}"#;
        let err = error_answer(400, false, None, body);
        let answer = err.service().unwrap();
        assert_eq!(err.code(), Some("ConditionalCheckFailedException"));
        assert_eq!(
            answer.old.as_ref().and_then(|i| i.get("pk")),
            Some(&AttributeValue::S("k".into()))
        );
        let header = error_answer(
            400,
            false,
            Some("ValidationException:http://internal.amazon.com/".into()),
            b"{\"Message\":\"Item size has exceeded the maximum allowed size\"}",
        );
        assert_eq!(header.code(), Some("ValidationException"));
        assert_eq!(
            header.service().unwrap().message.as_deref(),
            Some("Item size has exceeded the maximum allowed size")
        );
        // A garbled answer names no code: the retry loop treats it as maybe applied.
        let garbled = error_answer(400, false, None, b"<html>");
        assert_eq!(garbled.code(), None);
    }

    #[test]
    fn requests_are_written_as_dynamodb_json() {
        let req = Request::new(
            Action::Update("SET #a = :a"),
            Item::from([("pk".to_string(), AttributeValue::S("k".into()))]),
        )
        .when(
            "#a = :b",
            HashMap::from([("#a".to_string(), "a".to_string())]),
            Item::from([(":a".to_string(), AttributeValue::N("1".into()))]),
        )
        .old_on_refusal();
        let json = serde_json::to_value(Body {
            table: "t",
            req: &req,
        })
        .unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "TableName": "t",
                "Key": {"pk": {"S": "k"}},
                "UpdateExpression": "SET #a = :a",
                "ConditionExpression": "#a = :b",
                "ExpressionAttributeNames": {"#a": "a"},
                "ExpressionAttributeValues": {":a": {"N": "1"}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            })
        );
        let get = Request::new(Action::Get, Item::new());
        let json = serde_json::to_value(Body {
            table: "t",
            req: &get,
        })
        .unwrap();
        assert_eq!(json["ConsistentRead"], serde_json::json!(true));
        assert!(json.get("ExpressionAttributeValues").is_none());
    }
}
