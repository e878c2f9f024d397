//! The one table of error codes: every error the service ever answers is a row here.
//!
//! Modules say which row their failures map to; only the HTTP layer turns a row into a status
//! line. `docs/API.md` reproduces this table and a test walks every row.

use axum::http::StatusCode;

macro_rules! registry {
    ($( $name:ident => ($code:expr, $status:ident, $label:expr) ),* $(,)?) => {
        /// A row of the error registry.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $( $name ),* }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$name ),* ];

            /// Numeric code in the `code` field of the envelope.
            pub fn code(self) -> i64 {
                match self { $( ErrorCode::$name => $code ),* }
            }

            pub fn status(self) -> StatusCode {
                match self { $( ErrorCode::$name => StatusCode::$status ),* }
            }

            /// Short meaning, as documented.
            pub fn label(self) -> &'static str {
                match self { $( ErrorCode::$name => $label ),* }
            }
        }
    };
}

registry! {
    BadRequest => (4000, BAD_REQUEST, "the request is malformed or a field is invalid"),
    Unauthorized => (4010, UNAUTHORIZED, "missing, unknown or revoked API key"),
    InsufficientCredits => (4020, PAYMENT_REQUIRED, "the tenant's credits do not cover the operation"),
    Forbidden => (4030, FORBIDDEN, "the key lacks the permission the operation needs"),
    NotFound => (4040, NOT_FOUND, "no such resource, or it belongs to another tenant"),
    MethodNotAllowed => (4050, METHOD_NOT_ALLOWED, "the route exists but not with this method"),
    RequestTimeout => (4080, REQUEST_TIMEOUT, "the request took longer than the configured timeout"),
    Conflict => (4090, CONFLICT, "the request conflicts with the current state"),
    Gone => (4100, GONE, "the resource existed but has expired"),
    PayloadTooLarge => (4130, PAYLOAD_TOO_LARGE, "the request body exceeds the configured limit"),
    UriTooLong => (4140, URI_TOO_LONG, "the request target is longer than the service accepts"),
    UnsupportedMediaType => (4150, UNSUPPORTED_MEDIA_TYPE, "the body must be sent as application/json"),
    RateLimited => (4290, TOO_MANY_REQUESTS, "too many requests for this key; retry later"),
    HeadersTooLarge => (4310, REQUEST_HEADER_FIELDS_TOO_LARGE, "the request's headers are larger than the service accepts"),
    Internal => (5000, INTERNAL_SERVER_ERROR, "internal error; the request id identifies it in the server log"),
    ProviderFailure => (5020, BAD_GATEWAY, "an embedding or extraction provider failed"),
    Unavailable => (5030, SERVICE_UNAVAILABLE, "the service is shutting down or its log cannot accept writes"),
    SubscriptionInactive => (2200, FORBIDDEN, "the audit log function needs an active subscription"),
    ExportRangeExceedsRetention => (2201, BAD_REQUEST, "export time range exceeds the plan retention days"),
    ExportNeedsPro => (2202, FORBIDDEN, "export needs Pro or above"),
    ExportInProgress => (2203, CONFLICT, "an export task is in progress"),
    ExportQuotaExceeded => (2204, TOO_MANY_REQUESTS, "the tenant's export quota is used up; retry later"),
}

impl ErrorCode {
    /// The row for a bare HTTP status produced outside our handlers (router, layers).
    pub fn for_status(status: StatusCode) -> ErrorCode {
        match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::BadRequest,
            StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
            StatusCode::PAYMENT_REQUIRED => ErrorCode::InsufficientCredits,
            StatusCode::FORBIDDEN => ErrorCode::Forbidden,
            StatusCode::NOT_FOUND => ErrorCode::NotFound,
            StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
            StatusCode::REQUEST_TIMEOUT => ErrorCode::RequestTimeout,
            StatusCode::CONFLICT => ErrorCode::Conflict,
            StatusCode::GONE => ErrorCode::Gone,
            StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
            StatusCode::URI_TOO_LONG => ErrorCode::UriTooLong,
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
            StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ErrorCode::HeadersTooLarge,
            StatusCode::BAD_GATEWAY => ErrorCode::ProviderFailure,
            StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
            _ => ErrorCode::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_and_statuses_are_errors() {
        let mut seen = HashSet::new();
        for row in ErrorCode::ALL {
            assert!(seen.insert(row.code()), "duplicate code {}", row.code());
            assert!(row.status().is_client_error() || row.status().is_server_error());
            assert!(!row.label().is_empty());
        }
        assert_eq!(ErrorCode::SubscriptionInactive.code(), 2200);
        assert_eq!(
            ErrorCode::ExportRangeExceedsRetention.status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(ErrorCode::ExportNeedsPro.status(), StatusCode::FORBIDDEN);
        assert_eq!(ErrorCode::ExportInProgress.status(), StatusCode::CONFLICT);
    }

    #[test]
    fn bare_statuses_map_back_to_their_row() {
        for row in ErrorCode::ALL.iter().filter(|r| r.code() >= 4000) {
            assert_eq!(ErrorCode::for_status(row.status()), *row);
        }
    }
}
