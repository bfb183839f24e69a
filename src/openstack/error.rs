//! Errors of the OpenStack client, and the decoder for every service's error envelope.
//!
//! No variant ever carries a token, a password or an application-credential secret: request
//! bodies are never quoted, response snippets are redacted ([`redacted_snippet`]), and paths
//! are shown without their query string.

use std::fmt;
use std::time::Duration;

use super::config::ConfigError;

/// One failed call to an OpenStack API, as the service reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The service's project name: `nova`, `neutron`, `glance`, `manila`, `cinder`, `keystone`.
    pub service: &'static str,
    pub method: String,
    /// URL path of the call, without the query string.
    pub path: String,
    pub status: u16,
    /// The service's own error code: the fault name for nova/cinder/manila (`forbidden`,
    /// `itemNotFound`, `overLimit`...), the `type` for neutron (`OverQuota`, `NetworkInUse`...),
    /// the `title` for keystone (`Unauthorized`).
    pub code: Option<String>,
    /// The service's own message (plus neutron's `detail` when it has one).
    pub message: String,
    /// `x-openstack-request-id` (or `x-compute-request-id`), to quote to the cloud's operators.
    pub request_id: Option<String>,
    /// `Retry-After` of a 429 or 503, when the service sent one.
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}: HTTP {}",
            self.service, self.method, self.path, self.status
        )?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

/// Everything the OpenStack client can fail with.
#[derive(Debug, thiserror::Error)]
pub enum OpenStackError {
    /// The request did not get an HTTP answer (connection refused or reset, timeout, TLS).
    #[error("{service} {method} {url}: {message}")]
    Transport {
        service: &'static str,
        method: String,
        /// Endpoint URL of the call, without the query string.
        url: String,
        message: String,
    },
    /// The service answered with an error status (other than not-found and over-quota).
    #[error("{0}")]
    Api(Box<ApiError>),
    /// The service answered 404.
    #[error("not found: {0}")]
    NotFound(Box<ApiError>),
    /// Over quota: nova 403 "Quota exceeded", neutron 409 `OverQuota`, cinder/manila 413
    /// `overLimit`. The message is the cloud's own (which quota, how much is used).
    #[error("quota exceeded: {0}")]
    QuotaExceeded(Box<ApiError>),
    /// A lookup by name found nothing (flavor, image, network...).
    #[error("{kind} {name:?} not found{available}")]
    NoSuchName {
        kind: &'static str,
        name: String,
        /// Empty, or "; available: a, b, c".
        available: String,
    },
    /// A lookup by name found several candidates and none is preferred.
    #[error("{kind} name {name:?} is ambiguous: {candidates}")]
    Ambiguous {
        kind: &'static str,
        name: String,
        candidates: String,
    },
    /// The answer was not what the API reference says (bad JSON, missing field).
    #[error(
        "{service} {method} {path}: cannot decode the response: {message}; body starts: {snippet}"
    )]
    Decode {
        service: &'static str,
        method: String,
        path: String,
        message: String,
        snippet: String,
    },
    /// Keystone refused the credentials, or its answer was unusable.
    #[error("authentication at {auth_url} failed: {message}")]
    Auth {
        auth_url: String,
        message: String,
        status: Option<u16>,
        request_id: Option<String>,
    },
    /// The token's catalog has no endpoint for a service in the configured region/interface.
    #[error("no endpoint for service {service} in region {region} interface {interface}; catalog has: {available}")]
    Catalog {
        service: String,
        region: String,
        interface: String,
        available: String,
    },
    /// The caller asked for something the client refuses before sending it.
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// What a failed call says about the cloud's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Certainty {
    /// The cloud refused it (4xx other than 409 and 429, a bad configuration, a name that
    /// does not resolve): it did nothing, and doing it again fails again.
    Definite,
    /// Nothing can be said: no answer (connection reset or refused, timeout), a lost or
    /// unreadable answer, a 5xx, a 429, a 409 (busy, or it exists already). A create or an
    /// action may have taken effect: look before doing it again.
    Ambiguous {
        /// The wait the cloud asked for, if any.
        retry_after: Option<Duration>,
    },
}

impl Certainty {
    pub fn is_ambiguous(self) -> bool {
        matches!(self, Certainty::Ambiguous { .. })
    }
}

/// By HTTP status alone (see [`Certainty`]): 409, 429 and 5xx but 501 are ambiguous.
pub fn certainty_of_status(status: u16, retry_after: Option<Duration>) -> Certainty {
    match status {
        409 | 429 | 500 | 502..=599 => Certainty::Ambiguous { retry_after },
        _ => Certainty::Definite,
    }
}

impl OpenStackError {
    /// Whether the call that failed so may have taken effect, or may succeed if repeated.
    pub fn certainty(&self) -> Certainty {
        match self {
            Self::Transport { .. } | Self::Decode { .. } => {
                Certainty::Ambiguous { retry_after: None }
            }
            Self::Api(e) => certainty_of_status(e.status, e.retry_after),
            Self::Auth {
                status: Some(s), ..
            } if *s != 409 => certainty_of_status(*s, None),
            Self::NotFound(_)
            | Self::QuotaExceeded(_)
            | Self::NoSuchName { .. }
            | Self::Ambiguous { .. }
            | Self::Auth { .. }
            | Self::Catalog { .. }
            | Self::Invalid(_)
            | Self::Config(_) => Certainty::Definite,
        }
    }

    /// The service's API error, for the three HTTP-error variants.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) | Self::NotFound(e) | Self::QuotaExceeded(e) => Some(e),
            _ => None,
        }
    }

    /// HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Auth { status, .. } => *status,
            _ => self.api().map(|e| e.status),
        }
    }

    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Auth { request_id, .. } => request_id.as_deref(),
            _ => self.api().and_then(|e| e.request_id.as_deref()),
        }
    }

    /// HTTP 404 or a name lookup that found nothing.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_) | Self::NoSuchName { .. })
    }

    pub fn is_quota_exceeded(&self) -> bool {
        matches!(self, Self::QuotaExceeded(_))
    }

    /// HTTP 409 that is not over-quota (resource busy, in use, already exists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api(e) if e.status == 409)
    }
}

/// Turns a decoded API error into the matching variant (not found, over quota, other).
pub fn classify(err: ApiError) -> OpenStackError {
    if err.status == 404 {
        return OpenStackError::NotFound(Box::new(err));
    }
    if is_over_quota(&err) {
        return OpenStackError::QuotaExceeded(Box::new(err));
    }
    OpenStackError::Api(Box::new(err))
}

fn is_over_quota(err: &ApiError) -> bool {
    let message = err.message.to_ascii_lowercase();
    let code = err.code.as_deref().unwrap_or("");
    match err.status {
        // nova: {"forbidden": {"message": "Quota exceeded for instances: ..."}}
        403 => message.contains("quota exceeded"),
        // neutron: {"NeutronError": {"type": "OverQuota", ...}}
        409 => code == "OverQuota" || message.starts_with("quota exceeded"),
        // cinder/manila QuotaError (and nova overLimit): {"overLimit": {...}}
        413 => code == "overLimit" || message.contains("quota"),
        _ => false,
    }
}

/// What a service's error body says, whatever its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBody {
    pub code: Option<String>,
    pub message: String,
}

const MAX_MESSAGE: usize = 600;

/// Decodes an error body: nova/cinder/manila `{"<faultName>": {"code", "message"}}`,
/// neutron `{"NeutronError": {"type", "message", "detail"}}`, keystone
/// `{"error": {"code", "title", "message"}}`, placement-style `{"errors": [...]}`, a bare
/// `{"message": ...}`, or plain text / HTML (glance, proxies). Never fails: an empty or
/// unreadable body gives an empty message.
pub fn decode_error_body(body: &[u8]) -> ErrorBody {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(found) = decode_json_error(&value) {
            return ErrorBody {
                code: found.code,
                message: truncate(&collapse_ws(&found.message), MAX_MESSAGE),
            };
        }
        return ErrorBody {
            code: None,
            message: redacted_snippet(body, MAX_MESSAGE),
        };
    }
    let text = String::from_utf8_lossy(body);
    ErrorBody {
        code: None,
        message: truncate(&collapse_ws(&strip_tags(&text)), MAX_MESSAGE),
    }
}

fn str_field(obj: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<String> {
    match obj.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn decode_json_error(value: &serde_json::Value) -> Option<ErrorBody> {
    let obj = value.as_object()?;
    // neutron
    if let Some(ne) = obj.get("NeutronError") {
        return Some(match ne {
            serde_json::Value::Object(o) => {
                let mut message = str_field(o, "message").unwrap_or_default();
                if let Some(detail) = str_field(o, "detail").filter(|d| !d.trim().is_empty()) {
                    message = format!("{message} ({detail})");
                }
                ErrorBody {
                    code: str_field(o, "type"),
                    message,
                }
            }
            other => ErrorBody {
                code: None,
                message: other.as_str().map(str::to_owned).unwrap_or_default(),
            },
        });
    }
    // keystone
    if let Some(serde_json::Value::Object(o)) = obj.get("error") {
        return Some(ErrorBody {
            code: str_field(o, "title"),
            message: str_field(o, "message").unwrap_or_default(),
        });
    }
    // placement / newer wsgi: {"errors": [{"title", "detail", "code"}]}
    if let Some(serde_json::Value::Array(errors)) = obj.get("errors") {
        let mut code = None;
        let mut parts = Vec::new();
        for e in errors.iter().filter_map(|e| e.as_object()) {
            if code.is_none() {
                code = str_field(e, "code").or_else(|| str_field(e, "title"));
            }
            if let Some(m) = str_field(e, "detail").or_else(|| str_field(e, "title")) {
                parts.push(m);
            }
        }
        return Some(ErrorBody {
            code,
            message: parts.join("; "),
        });
    }
    // nova/cinder/manila: one key, the fault name, wrapping {code, message}
    for (key, inner) in obj {
        if let serde_json::Value::Object(o) = inner {
            if let Some(message) = str_field(o, "message") {
                return Some(ErrorBody {
                    code: Some(key.clone()),
                    message,
                });
            }
        }
    }
    // bare webob-style {"message": ..., "title"/"type": ...}
    str_field(obj, "message").map(|message| ErrorBody {
        code: str_field(obj, "title").or_else(|| str_field(obj, "type")),
        message,
    })
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

const SECRET_KEYS: &[&str] = &[
    "password",
    "adminpass",
    "secret",
    "token",
    "private_key",
    "access_key",
    "credential",
];

fn redact(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let key = k.to_ascii_lowercase();
                if SECRET_KEYS.iter().any(|s| key.contains(s)) && !v.is_null() {
                    *v = serde_json::Value::String("***".into());
                } else {
                    redact(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The start of a response body, fit for an error message: JSON bodies have every value
/// under a secret-looking key (password, adminPass, secret, token, private_key, access_key,
/// credential) replaced by `***`.
pub fn redacted_snippet(body: &[u8], max: usize) -> String {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(mut value) => {
            redact(&mut value);
            truncate(&value.to_string(), max)
        }
        Err(_) => truncate(&String::from_utf8_lossy(body), max),
    }
}

/// 404 → `Ok(None)`.
pub(crate) fn optional<T>(r: Result<T, OpenStackError>) -> Result<Option<T>, OpenStackError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(OpenStackError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// For deletes: 404 → `Ok(())`.
pub(crate) fn gone<T>(r: Result<T, OpenStackError>) -> Result<(), OpenStackError> {
    optional(r).map(|_| ())
}
