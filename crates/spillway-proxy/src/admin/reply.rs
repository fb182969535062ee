//! Admin API responses: JSON bodies, and errors that name the field and what it accepts.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;

/// The body type of every admin response.
pub type AdminBody = Full<Bytes>;

/// A refused admin request: status, and a message an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The request field at fault, if one is.
    pub field: Option<String>,
    /// What was wrong.
    pub message: String,
    /// What is accepted (empty when not about a value).
    pub accepts: String,
}

impl ApiError {
    /// 400 about `field`.
    pub fn bad_request(field: &str, message: &str, accepts: &str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            field: Some(field.to_string()),
            message: message.to_string(),
            accepts: accepts.to_string(),
        }
    }

    /// 400: required `field` is missing.
    pub fn missing(field: &str, accepts: &str) -> Self {
        Self::bad_request(field, &format!("missing field {field:?}"), accepts)
    }

    /// 400: `field` had `value`, which is not accepted.
    pub fn invalid(field: &str, value: &str, accepts: &str) -> Self {
        let mut end = value.len().min(64);
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        Self::bad_request(
            field,
            &format!("invalid {field} {:?}", &value[..end]),
            accepts,
        )
    }

    /// Any status with a message and no field.
    pub fn status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            field: None,
            message: message.into(),
            accepts: String::new(),
        }
    }

    /// The JSON response `{"error": ..., "field": ..., "accepts": ...}`.
    pub fn into_response(self) -> Response<AdminBody> {
        #[derive(Serialize)]
        struct E<'a> {
            error: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            field: Option<&'a str>,
            #[serde(skip_serializing_if = "str::is_empty")]
            accepts: &'a str,
        }
        json(
            self.status,
            &E {
                error: &self.message,
                field: self.field.as_deref(),
                accepts: &self.accepts,
            },
        )
    }
}

impl From<spillway_core::ConfigError> for ApiError {
    fn from(e: spillway_core::ConfigError) -> Self {
        ApiError::bad_request(
            e.field,
            &format!("invalid {} {}", e.field, e.value),
            e.expected,
        )
    }
}

/// A JSON response (pretty-printed: people read these with curl).
pub fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<AdminBody> {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            with_type(status, "application/json", body)
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot serialise the response: {e}\n"),
        ),
    }
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<AdminBody> {
    with_type(status, "text/plain; charset=utf-8", body)
}

/// A response with `content_type`, never cached (every read is live state).
pub fn with_type(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<AdminBody> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
