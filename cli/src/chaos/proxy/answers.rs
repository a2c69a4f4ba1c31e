//! The answers the proxy writes itself instead of the server's: each error body and status as
//! DynamoDB documents it, byte for byte what the SDK would parse from the real service.

/// An answer the proxy writes itself: status, reason phrase, body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Canned {
    pub(super) status: u16,
    pub(super) reason: &'static str,
    pub(super) body: &'static str,
}

impl Canned {
    /// An answer with the status the documentation gives it.
    const fn new(status: u16, reason: &'static str, body: &'static str) -> Canned {
        Canned {
            status,
            reason,
            body,
        }
    }

    const fn bad_request(body: &'static str) -> Canned {
        Canned::new(400, "Bad Request", body)
    }

    pub(super) fn bytes(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {} {}\r\nx-amzn-RequestId: chaos-proxy\r\n\
             Content-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{}",
            self.status,
            self.reason,
            self.body.len(),
            self.body
        )
        .into_bytes()
    }
}

/// The answer DynamoDB sends when a table's provisioned throughput is exceeded.
pub(super) const PROVISIONED_THROUGHPUT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}"#,
);
/// The answer DynamoDB sends when the account's request rate is throttled.
pub(super) const THROTTLING: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.availability#ThrottlingException","message":"Rate of requests exceeds the allowed throughput."}"#,
);
/// The answer DynamoDB sends when the account's throughput limit is exceeded.
pub(super) const REQUEST_LIMIT_EXCEEDED: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#RequestLimitExceeded","message":"Throughput exceeds the current throughput limit for your account. Please contact AWS Support at https://aws.amazon.com/support request a limit increase"}"#,
);
/// A write refused because a transaction is in progress on the item (not applied).
pub(super) const TRANSACTION_CONFLICT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionConflictException","message":"Transaction is ongoing for the item"}"#,
);
/// A write to a multi-Region strongly consistent table refused because the item is being written
/// in another Region (not applied).
pub(super) const REPLICATED_WRITE_CONFLICT: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ReplicatedWriteConflictException","message":"The item is being modified by a request in another Region"}"#,
);
pub(super) const INTERNAL_SERVER_ERROR: Canned = Canned {
    status: 500,
    reason: "Internal Server Error",
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}"#,
};
pub(super) const SERVICE_UNAVAILABLE: Canned = Canned {
    status: 503,
    reason: "Service Unavailable",
    body: r#"{"__type":"com.amazonaws.dynamodb.v20120810#ServiceUnavailable","message":"The service is currently unavailable or busy."}"#,
};
pub(super) const REQUEST_TIMEOUT: Canned = Canned {
    status: 408,
    reason: "Request Timeout",
    body: r#"{"__type":"com.amazon.coral.service#RequestTimeoutException","message":"Request timed out"}"#,
};
/// A write whose item would exceed 400 KB (not applied).
pub(super) const ITEM_TOO_LARGE: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"Item size has exceeded the maximum allowed size"}"#,
);
pub(super) const RESOURCE_NOT_FOUND: Canned = Canned::bad_request(
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
);
pub(super) const ACCESS_DENIED: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.service#AccessDeniedException","message":"User: arn:aws:sts::000000000000:assumed-role/dedup-chaos/dedup is not authorized to perform this action on resource: arn:aws:dynamodb:us-east-1:000000000000:table/dedup-chaos because no identity-based policy allows it"}"#,
);
pub(super) const EXPIRED_TOKEN: Canned = Canned::bad_request(
    r#"{"__type":"com.amazon.coral.service#ExpiredTokenException","message":"The security token included in the request is expired"}"#,
);

/// What every request gets during an access-or-table-error window: each failure the DynamoDB and
/// common-errors documentation gives for all four calls that refuses a request without applying it
/// and without a retry (docs/testing.md, "Fault model from the AWS contracts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AccessError {
    ResourceNotFound,
    AccessDenied,
    ExpiredToken,
    UnrecognizedClient,
    MissingAuthenticationToken,
    IncompleteSignature,
    InvalidEndpoint,
    Validation,
    MalformedHttpRequest,
    NotAuthorized,
    OptInRequired,
    UnknownOperation,
    RequestEntityTooLarge,
}

impl AccessError {
    pub(crate) const ALL: [AccessError; 13] = [
        AccessError::ResourceNotFound,
        AccessError::AccessDenied,
        AccessError::ExpiredToken,
        AccessError::UnrecognizedClient,
        AccessError::MissingAuthenticationToken,
        AccessError::IncompleteSignature,
        AccessError::InvalidEndpoint,
        AccessError::Validation,
        AccessError::MalformedHttpRequest,
        AccessError::NotAuthorized,
        AccessError::OptInRequired,
        AccessError::UnknownOperation,
        AccessError::RequestEntityTooLarge,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            AccessError::ResourceNotFound => "ResourceNotFoundException",
            AccessError::AccessDenied => "AccessDeniedException",
            AccessError::ExpiredToken => "ExpiredTokenException",
            AccessError::UnrecognizedClient => "UnrecognizedClientException",
            AccessError::MissingAuthenticationToken => "MissingAuthenticationTokenException",
            AccessError::IncompleteSignature => "IncompleteSignature",
            AccessError::InvalidEndpoint => "InvalidEndpointException",
            AccessError::Validation => "ValidationException",
            AccessError::MalformedHttpRequest => "MalformedHttpRequestException",
            AccessError::NotAuthorized => "NotAuthorized",
            AccessError::OptInRequired => "OptInRequired",
            AccessError::UnknownOperation => "UnknownOperationException",
            AccessError::RequestEntityTooLarge => "RequestEntityTooLargeException",
        }
    }

    pub(super) fn answer(self) -> Canned {
        match self {
            AccessError::ResourceNotFound => RESOURCE_NOT_FOUND,
            AccessError::AccessDenied => ACCESS_DENIED,
            AccessError::ExpiredToken => EXPIRED_TOKEN,
            AccessError::UnrecognizedClient => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
            ),
            AccessError::MissingAuthenticationToken => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#MissingAuthenticationTokenException","message":"Request must contain either a valid (registered) AWS access key ID or X.509 certificate."}"#,
            ),
            AccessError::IncompleteSignature => Canned::new(
                403,
                "Forbidden",
                r#"{"__type":"com.amazon.coral.service#IncompleteSignature","message":"Authorization header requires 'Signature' parameter."}"#,
            ),
            AccessError::InvalidEndpoint => Canned::new(
                421,
                "Misdirected Request",
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#InvalidEndpointException","Message":"Operation is not allowed on this endpoint"}"#,
            ),
            AccessError::Validation => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"One or more parameter values were invalid: Missing the key pk in the item"}"#,
            ),
            AccessError::MalformedHttpRequest => Canned::bad_request(
                r#"{"__type":"com.amazon.coral.service#MalformedHttpRequestException","message":"The request body could not be parsed"}"#,
            ),
            AccessError::NotAuthorized => Canned::new(
                401,
                "Unauthorized",
                r#"{"__type":"com.amazon.coral.service#NotAuthorized","message":"You do not have permission to perform this action."}"#,
            ),
            AccessError::OptInRequired => Canned::new(
                403,
                "Forbidden",
                r#"{"__type":"com.amazon.coral.service#OptInRequired","message":"The AWS access key ID needs a subscription for the service."}"#,
            ),
            AccessError::UnknownOperation => Canned::new(
                404,
                "Not Found",
                r#"{"__type":"com.amazon.coral.service#UnknownOperationException","message":"The action or operation requested is invalid."}"#,
            ),
            AccessError::RequestEntityTooLarge => Canned::new(
                413,
                "Payload Too Large",
                r#"{"__type":"com.amazon.coral.service#RequestEntityTooLargeException","message":"Request entity too large"}"#,
            ),
        }
    }
}
