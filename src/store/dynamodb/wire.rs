//! One DynamoDB request as the store describes it, what can go wrong sending it, and how the SDK's
//! client sends it. The operations build a [`Request`]; the retry loop sends it and classes a
//! [`WireError`] the same way whichever client answered.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use super::{BoxError, Item, Op};

/// What a request does to one item.
#[derive(Debug, Clone)]
pub(super) enum Action {
    /// A consistent read of the item at `key`.
    Get,
    /// Writes this whole item.
    Put(Item),
    /// Applies this update expression to the item at `key`.
    Update(&'static str),
    /// Deletes the item at `key`.
    Delete,
}

/// One request on the store's table.
#[derive(Debug, Clone)]
pub(super) struct Request {
    pub(super) action: Action,
    /// The item's key (unused by a put, whose item holds it).
    pub(super) key: Item,
    pub(super) condition: Option<&'static str>,
    pub(super) names: HashMap<String, String>,
    pub(super) values: Item,
    /// `ReturnValuesOnConditionCheckFailure=ALL_OLD`: a refusal carries the item that refused.
    pub(super) old_on_refusal: bool,
}

impl Request {
    pub(super) fn new(action: Action, key: Item) -> Request {
        Request {
            action,
            key,
            condition: None,
            names: HashMap::new(),
            values: Item::new(),
            old_on_refusal: false,
        }
    }

    /// Fenced by `condition`, whose names and values (and the update's) are given.
    pub(super) fn when(
        mut self,
        condition: &'static str,
        names: HashMap<String, String>,
        values: Item,
    ) -> Request {
        self.condition = Some(condition);
        self.names = names;
        self.values = values;
        self
    }

    /// A refusal reports the item that refused it.
    pub(super) fn old_on_refusal(mut self) -> Request {
        self.old_on_refusal = true;
        self
    }

    pub(super) fn op(&self) -> Op {
        match self.action {
            Action::Get => Op::GetItem,
            Action::Put(_) => Op::PutItem,
            Action::Update(_) => Op::UpdateItem,
            Action::Delete => Op::DeleteItem,
        }
    }

    /// The API operation's name, as DynamoDB and the logs spell it.
    pub(super) fn operation(&self) -> &'static str {
        match self.action {
            Action::Get => "GetItem",
            Action::Put(_) => "PutItem",
            Action::Update(_) => "UpdateItem",
            Action::Delete => "DeleteItem",
        }
    }
}

/// Why one attempt got no usable answer, told apart as the retry loop needs it.
#[derive(Debug)]
pub(super) struct WireError {
    pub(super) kind: WireErrorKind,
    /// The client's own error, kept as the source of the store's error.
    pub(super) error: BoxError,
}

#[derive(Debug)]
pub(super) enum WireErrorKind {
    /// The request could not be built or signed: it was never sent.
    Construction,
    /// It could not be sent, or was cut off while sending; `user` when the request itself was at
    /// fault (it never left).
    Dispatch { user: bool },
    /// No answer in time.
    Timeout,
    /// An answer that could not be read.
    Response,
    /// The service answered with an error.
    Service(ServiceAnswer),
}

/// An error answer from the service.
#[derive(Debug)]
pub(super) struct ServiceAnswer {
    /// The error code (`ConditionalCheckFailedException`), if the answer named one.
    pub(super) code: Option<String>,
    pub(super) message: Option<String>,
    pub(super) server_error: bool,
    /// With a refused condition and `ALL_OLD`: the item that refused it (dynalite sends none).
    pub(super) old: Option<Item>,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl WireError {
    pub(super) fn new(kind: WireErrorKind, error: impl Into<BoxError>) -> WireError {
        WireError {
            kind,
            error: error.into(),
        }
    }

    pub(super) fn service(&self) -> Option<&ServiceAnswer> {
        match &self.kind {
            WireErrorKind::Service(answer) => Some(answer),
            _ => None,
        }
    }

    pub(super) fn code(&self) -> Option<&str> {
        self.service().and_then(|s| s.code.as_deref())
    }

    /// An SDK error, with the refused item `old` finds in its typed service error.
    pub(super) fn from_sdk<E>(
        err: SdkError<E, HttpResponse>,
        old: impl FnOnce(&E) -> Option<Item>,
    ) -> WireError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let kind = match &err {
            SdkError::TimeoutError(_) => WireErrorKind::Timeout,
            SdkError::ResponseError(_) => WireErrorKind::Response,
            SdkError::DispatchFailure(d) => WireErrorKind::Dispatch { user: d.is_user() },
            SdkError::ServiceError(service) => WireErrorKind::Service(ServiceAnswer {
                code: err.code().map(str::to_owned),
                message: err.message().map(str::to_owned),
                server_error: service.raw().status().is_server_error(),
                old: old(service.err()),
            }),
            // ConstructionFailure, and any kind a later SDK adds: final.
            _ => WireErrorKind::Construction,
        };
        WireError::new(kind, err)
    }
}

/// Sends `req` through the SDK's client (one attempt: the client's retries are off).
pub(super) async fn send_with_sdk(
    client: &Client,
    table: &str,
    req: &Request,
) -> Result<Option<Item>, WireError> {
    let names = (!req.names.is_empty()).then(|| req.names.clone());
    let values = (!req.values.is_empty()).then(|| req.values.clone());
    let condition = req.condition.map(str::to_owned);
    let old = req
        .old_on_refusal
        .then_some(ReturnValuesOnConditionCheckFailure::AllOld);
    let key = Some(req.key.clone());
    match &req.action {
        Action::Get => client
            .get_item()
            .table_name(table)
            .set_key(key)
            .consistent_read(true)
            .send()
            .await
            .map(|out| out.item)
            .map_err(|e| WireError::from_sdk(e, |_| None)),
        Action::Put(item) => client
            .put_item()
            .table_name(table)
            .set_item(Some(item.clone()))
            .set_condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .set_return_values_on_condition_check_failure(old)
            .send()
            .await
            .map(|_| None)
            .map_err(|e| {
                WireError::from_sdk(e, |e| match e {
                    PutItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                    _ => None,
                })
            }),
        Action::Update(update) => client
            .update_item()
            .table_name(table)
            .set_key(key)
            .update_expression(*update)
            .set_condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .set_return_values_on_condition_check_failure(old)
            .send()
            .await
            .map(|_| None)
            .map_err(|e| {
                WireError::from_sdk(e, |e| match e {
                    UpdateItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                    _ => None,
                })
            }),
        Action::Delete => client
            .delete_item()
            .table_name(table)
            .set_key(key)
            .set_condition_expression(condition)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .set_return_values_on_condition_check_failure(old)
            .send()
            .await
            .map(|_| None)
            .map_err(|e| {
                WireError::from_sdk(e, |e| match e {
                    DeleteItemError::ConditionalCheckFailedException(c) => c.item().cloned(),
                    _ => None,
                })
            }),
    }
}
