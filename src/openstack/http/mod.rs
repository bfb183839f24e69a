//! The one request path every service goes through: token, endpoint from the catalog,
//! microversion headers, JSON, bounded retries with backoff and jitter, the call counter,
//! error decoding. The requests and replies are here; `session` holds the token and makes
//! the calls, `retry` decides what is tried again.

use std::time::Duration;

use serde::de::DeserializeOwned;

pub use reqwest::Method;

mod retry;
mod session;

pub use retry::{parse_retry_after, Failure, Replay, RetryPolicy};
pub use session::next_page_query;
pub(crate) use session::{build_url, Authenticate, Session};

use super::error::{self, ApiError, OpenStackError};
use super::service::Service;

/// Client-wide settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub retry: RetryPolicy,
    /// Default per-call timeout (a [`Request::timeout`] overrides it).
    pub timeout: Option<Duration>,
    pub connect_timeout: Duration,
    /// Renew the token this long before it expires (at most half its lifetime).
    pub renew_before: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            retry: RetryPolicy::default(),
            timeout: Some(Duration::from_secs(120)),
            connect_timeout: Duration::from_secs(10),
            renew_before: Duration::from_secs(300),
        }
    }
}

/// One call, relative to a service's API root.
#[derive(Debug, Clone)]
pub struct Request {
    pub service: Service,
    pub method: Method,
    /// `/`-separated path under the API root; each segment is percent-encoded as needed.
    pub path: String,
    pub query: Vec<(String, String)>,
    pub body: Option<serde_json::Value>,
    pub retry_on_conflict: bool,
    pub timeout: Option<Duration>,
    /// Whether the call may be sent again after an unknown outcome (by method unless set).
    pub replay: Replay,
}

impl Request {
    pub fn new(service: Service, method: Method, path: impl Into<String>) -> Self {
        Request {
            service,
            replay: Replay::of(&method),
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            retry_on_conflict: false,
            timeout: None,
        }
    }

    pub fn get(service: Service, path: impl Into<String>) -> Self {
        Self::new(service, Method::GET, path)
    }

    pub fn delete(service: Service, path: impl Into<String>) -> Self {
        Self::new(service, Method::DELETE, path)
    }

    pub fn post(service: Service, path: impl Into<String>, body: serde_json::Value) -> Self {
        Self::new(service, Method::POST, path).json(body)
    }

    pub fn put(service: Service, path: impl Into<String>, body: serde_json::Value) -> Self {
        Self::new(service, Method::PUT, path).json(body)
    }

    pub fn json(mut self, body: serde_json::Value) -> Self {
        self.body = Some(body);
        self
    }

    pub fn query(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.query.push((key.into(), value.into()));
        self
    }

    pub fn queries(mut self, pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        self.query.extend(pairs);
        self
    }

    /// Retry on 409 (resource busy or in use: e.g. a subnet whose ports are being released).
    pub fn retry_on_conflict(mut self) -> Self {
        self.retry_on_conflict = true;
        self
    }

    /// May be sent again after an unknown outcome although it is a POST: it sets values and
    /// sending it twice sets them once (Cinder's metadata merge).
    pub fn idempotent(mut self) -> Self {
        self.replay = Replay::Safe;
        self
    }

    /// An action (a PUT that is not a plain replacement): never sent twice blindly, as a
    /// POST; the caller looks its effect up after an unknown outcome.
    pub fn once(mut self) -> Self {
        self.replay = Replay::Once;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub request_id: Option<String>,
    pub body: Vec<u8>,
    service: &'static str,
    method: String,
    path: String,
}

impl Response {
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, OpenStackError> {
        serde_json::from_slice(&self.body).map_err(|e| self.decode_error(e.to_string(), &self.body))
    }

    /// Decodes the body as JSON, then `value[key]` as `T` (most bodies wrap one object).
    pub fn json_at<T: DeserializeOwned>(&self, key: &str) -> Result<T, OpenStackError> {
        let mut value: serde_json::Value = self.json()?;
        let inner = value
            .get_mut(key)
            .map(serde_json::Value::take)
            .ok_or_else(|| self.decode_error(format!("no {key:?} key"), &self.body))?;
        self.decode_value(inner)
    }

    pub(crate) fn decode_value<T: DeserializeOwned>(
        &self,
        value: serde_json::Value,
    ) -> Result<T, OpenStackError> {
        let snippet = value.to_string();
        serde_json::from_value(value)
            .map_err(|e| self.decode_error(e.to_string(), snippet.as_bytes()))
    }

    pub(crate) fn decode_error(&self, message: String, body: &[u8]) -> OpenStackError {
        OpenStackError::Decode {
            service: self.service,
            method: self.method.clone(),
            path: self.path.clone(),
            message,
            snippet: error::redacted_snippet(body, 300),
        }
    }
}

/// What came back from the wire, before success/error handling.
pub(crate) struct RawResponse {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
    /// Calls made for this answer (retries included).
    pub attempts: u32,
}

impl RawResponse {
    pub fn request_id(&self) -> Option<String> {
        [
            "x-openstack-request-id",
            "x-compute-request-id",
            "x-request-id",
        ]
        .iter()
        .find_map(|h| self.headers.get(*h))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    }

    pub fn api_error(&self, service: Service, method: &Method, path: &str) -> ApiError {
        let decoded = error::decode_error_body(&self.body);
        let message = if decoded.message.is_empty() {
            reqwest::StatusCode::from_u16(self.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("(empty body)")
                .to_owned()
        } else {
            decoded.message
        };
        let message = if self.attempts > 1 {
            format!("{message} (after {} attempts)", self.attempts)
        } else {
            message
        };
        ApiError {
            service: service.name(),
            method: method.to_string(),
            path: path.to_owned(),
            status: self.status,
            code: decoded.code,
            message,
            request_id: self.request_id(),
            retry_after: self
                .headers
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after),
        }
    }
}
