//! The one request path every service goes through: token, endpoint from the catalog,
//! microversion headers, JSON, bounded retries with backoff and jitter, the call counter,
//! error decoding.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::de::DeserializeOwned;

pub use reqwest::Method;

use super::auth::{self, Token};
use super::config::CloudConfig;
use super::error::{self, ApiError, OpenStackError};

/// Nova microversion sent with every compute call. 2.90 is the first with everything we use:
/// tags on create (2.52), embedded flavor with extra_specs in server bodies (2.47),
/// `networks` required (2.37), hostname settable on create and shown to users (2.90).
/// 2026.1 nova supports up to 2.10x; 2.90 keeps us working on clouds back to 2023.1
/// (Antelope, max 2.95). At 2.90 keypairs are still imported only with a public key, which
/// is all we do.
pub const NOVA_MICROVERSION: &str = "2.90";
/// Manila microversion: >= 2.45 for `GET /share-access-rules?share_id=` and access-rule
/// metadata; 2.65 (Wallaby) is old enough for every supported cloud and has the access
/// rule `state` (2.28) and export-location `preferred` (2.14).
pub const MANILA_MICROVERSION: &str = "2.65";
/// Cinder microversion: 3.67 makes the project id in the URL optional, so the catalog's
/// `block-storage` endpoint (`.../v3`, no project) works as well as `volumev3`
/// (`.../v3/{project_id}`); metadata list filters need >= 3.34 anyway.
pub const CINDER_MICROVERSION: &str = "3.67";

/// An OpenStack service the client talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Identity,
    Compute,
    Network,
    Image,
    Share,
    Volume,
}

impl Service {
    /// The project's name, used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Service::Identity => "keystone",
            Service::Compute => "nova",
            Service::Network => "neutron",
            Service::Image => "glance",
            Service::Share => "manila",
            Service::Volume => "cinder",
        }
    }

    /// Catalog service types, preferred first (official type, then aliases).
    pub fn catalog_types(self) -> &'static [&'static str] {
        match self {
            Service::Identity => &["identity"],
            Service::Compute => &["compute"],
            Service::Network => &["network"],
            Service::Image => &["image"],
            Service::Share => &["shared-file-system", "sharev2", "share"],
            Service::Volume => &["block-storage", "volumev3", "volume", "block-store"],
        }
    }

    /// Microversion headers pinned for this service.
    pub fn microversion_headers(self) -> Vec<(&'static str, String)> {
        match self {
            Service::Compute => vec![
                ("X-OpenStack-Nova-API-Version", NOVA_MICROVERSION.to_owned()),
                (
                    "OpenStack-API-Version",
                    format!("compute {NOVA_MICROVERSION}"),
                ),
            ],
            Service::Share => vec![(
                "X-OpenStack-Manila-API-Version",
                MANILA_MICROVERSION.to_owned(),
            )],
            Service::Volume => vec![(
                "OpenStack-API-Version",
                format!("volume {CINDER_MICROVERSION}"),
            )],
            _ => Vec::new(),
        }
    }

    /// Whether a catalog URL serves an API version we speak: a `volume`/`volumev2` entry
    /// pointing at cinder's removed v1/v2 API is skipped.
    pub fn accepts_endpoint(self, url: &str) -> bool {
        match self {
            Service::Volume => !url.split('/').any(|seg| seg == "v1" || seg == "v2"),
            _ => true,
        }
    }

    /// The API root to put request paths under, from a catalog URL: neutron's and glance's
    /// catalog entries usually lack the version (`http://h:9696/` → `http://h:9696/v2.0`,
    /// `http://h:9292` → `http://h:9292/v2`); a manila v1 endpoint is moved to v2.
    pub fn api_root(self, catalog_url: &str) -> String {
        let url = catalog_url.trim_end_matches('/');
        match self {
            Service::Network if !url.ends_with("/v2.0") => format!("{url}/v2.0"),
            Service::Image if !url.ends_with("/v2") => format!("{url}/v2"),
            Service::Share => {
                if let Some(pos) = url.find("/v1/") {
                    format!("{}/v2/{}", &url[..pos], &url[pos + 4..])
                } else if let Some(base) = url.strip_suffix("/v1") {
                    format!("{base}/v2")
                } else {
                    url.to_owned()
                }
            }
            _ => url.to_owned(),
        }
    }
}

/// When and how long to retry.
///
/// Retried: connection refused / not established (any method: nothing reached the
/// server); other transport failures such as a reset mid-call or a timeout, and HTTP 500,
/// for idempotent methods only (GET, PUT, DELETE, HEAD: a POST may have created something);
/// 429, 502, 503, 504 for any method (honouring `Retry-After`); 409 only when the caller
/// opted in ([`Request::retry_on_conflict`]) and it is not over-quota. Nothing else.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest `Retry-After` honoured.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(15),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// How one attempt failed, for the retry decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection was made (refused, DNS, unreachable).
    Connect,
    /// The connection broke or timed out after the request may have been sent.
    Transport,
    Status {
        status: u16,
        retry_after: Option<Duration>,
        over_quota: bool,
    },
}

impl RetryPolicy {
    pub fn is_retryable(method: &Method, failure: &Failure, retry_on_conflict: bool) -> bool {
        let idempotent = !matches!(*method, Method::POST | Method::PATCH);
        match *failure {
            Failure::Connect => true,
            Failure::Transport => idempotent,
            Failure::Status {
                status, over_quota, ..
            } => match status {
                429 | 502 | 503 | 504 => true,
                500 => idempotent,
                409 => retry_on_conflict && !over_quota,
                _ => false,
            },
        }
    }

    /// Exponential backoff for the `attempt`-th retry (1-based), with jitter: a random
    /// duration in [d/2, d] where d = min(max_delay, base_delay * 2^(attempt-1)).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
        let ceiling = self.base_delay.saturating_mul(factor).min(self.max_delay);
        ceiling.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    /// The wait before the next attempt, or `None` to give up. `attempts` is how many were
    /// made so far.
    pub fn next_delay(
        &self,
        attempts: u32,
        method: &Method,
        failure: &Failure,
        retry_on_conflict: bool,
    ) -> Option<Duration> {
        if attempts >= self.max_attempts || !Self::is_retryable(method, failure, retry_on_conflict)
        {
            return None;
        }
        match failure {
            Failure::Status {
                retry_after: Some(d),
                ..
            } => Some((*d).clamp(Duration::from_millis(50), self.max_retry_after)),
            _ => Some(self.backoff(attempts)),
        }
    }
}

/// `Retry-After`: delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let delta = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

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
}

impl Request {
    pub fn new(service: Service, method: Method, path: impl Into<String>) -> Self {
        Request {
            service,
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
        ApiError {
            service: service.name(),
            method: method.to_string(),
            path: path.to_owned(),
            status: self.status,
            code: decoded.code,
            message,
            request_id: self.request_id(),
        }
    }
}

pub(crate) struct TokenState {
    pub token: Token,
    pub renew_at: Instant,
}

/// Shared state behind [`super::OpenStack`].
pub(crate) struct Session {
    pub http: reqwest::Client,
    pub config: CloudConfig,
    pub options: ClientOptions,
    token: tokio::sync::Mutex<Option<Arc<TokenState>>>,
    calls: AtomicU64,
    pub neutron_extensions: tokio::sync::OnceCell<Vec<String>>,
}

/// The message of a transport error and its causes, without the URL.
fn describe(e: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    if e.is_timeout() {
        parts.push("timed out".to_owned());
    }
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        parts.push(e.to_string());
    }
    parts.join(": ")
}

fn url_without_query(url: &url::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// `root` + `/`-separated `path` (segments percent-encoded) + `query`.
pub(crate) fn build_url(
    root: &str,
    path: &str,
    query: &[(String, String)],
) -> Result<url::Url, OpenStackError> {
    let mut url = url::Url::parse(root)
        .map_err(|e| OpenStackError::Invalid(format!("endpoint {root:?} is not a URL: {e}")))?;
    {
        let mut segments = url.path_segments_mut().map_err(|_| {
            OpenStackError::Invalid(format!("endpoint {root:?} cannot take a path"))
        })?;
        segments.pop_if_empty();
        for seg in path.split('/').filter(|s| !s.is_empty()) {
            // The url crate resolves `.` and `..`: a name holding them would address another
            // resource (another cluster's keypair) instead of failing.
            if seg == "." || seg == ".." {
                return Err(OpenStackError::Invalid(format!(
                    "`{}` cannot be part of an API path",
                    crate::input::shown(path)
                )));
            }
            segments.push(seg);
        }
    }
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    Ok(url)
}

/// Query pairs of the next page, from `<key>_links` (nova, cinder, manila, neutron) or a
/// top-level `next` (glance).
pub fn next_page_query(value: &serde_json::Value, key: &str) -> Option<Vec<(String, String)>> {
    let href = value
        .get(format!("{key}_links"))
        .and_then(|l| l.as_array())
        .and_then(|links| {
            links
                .iter()
                .find(|l| l.get("rel").and_then(|r| r.as_str()) == Some("next"))
        })
        .and_then(|l| l.get("href"))
        .and_then(|h| h.as_str())
        .or_else(|| value.get("next").and_then(|n| n.as_str()))?;
    let (_, query) = href.split_once('?')?;
    Some(
        url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

impl Session {
    pub fn new(config: CloudConfig, options: ClientOptions) -> Result<Session, OpenStackError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .user_agent(concat!("hvd-cluster/", env!("CARGO_PKG_VERSION")))
            .danger_accept_invalid_certs(config.insecure);
        if let Some(path) = &config.cacert {
            let pem = std::fs::read(path).map_err(|e| {
                OpenStackError::Invalid(format!(
                    "cannot read CA certificate {}: {e}",
                    path.display()
                ))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                OpenStackError::Invalid(format!(
                    "{} is not a PEM certificate bundle: {e}",
                    path.display()
                ))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|e| {
            OpenStackError::Invalid(format!("cannot set up the HTTP client: {}", describe(&e)))
        })?;
        Ok(Session {
            http,
            config,
            options,
            token: tokio::sync::Mutex::new(None),
            calls: AtomicU64::new(0),
            neutron_extensions: tokio::sync::OnceCell::new(),
        })
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// A valid token, renewed a few minutes before it expires.
    pub async fn token(&self) -> Result<Arc<TokenState>, OpenStackError> {
        let mut guard = self.token.lock().await;
        if let Some(state) = guard.as_ref() {
            if Instant::now() < state.renew_at {
                return Ok(state.clone());
            }
        }
        let token = auth::authenticate(self).await?;
        let lifetime = token.lifetime();
        let margin = self.options.renew_before.min(lifetime / 2);
        let state = Arc::new(TokenState {
            renew_at: Instant::now() + lifetime.saturating_sub(margin),
            token,
        });
        *guard = Some(state.clone());
        Ok(state)
    }

    /// Drops `used` if it is still the current token (after a 401).
    async fn invalidate(&self, used: &Arc<TokenState>) {
        let mut guard = self.token.lock().await;
        if guard.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, used)) {
            *guard = None;
        }
    }

    /// Sends with retries. Ok for any final HTTP answer (success or not); Err for transport
    /// failures that outlasted the retries.
    pub(crate) async fn exchange(
        &self,
        service: Service,
        method: &Method,
        url: &url::Url,
        retry_on_conflict: bool,
        make: &(dyn Fn() -> reqwest::RequestBuilder + Send + Sync),
    ) -> Result<RawResponse, OpenStackError> {
        let policy = &self.options.retry;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            self.calls.fetch_add(1, Ordering::Relaxed);
            let failure = match make().send().await {
                Err(e) => {
                    let failure = if e.is_connect() {
                        Failure::Connect
                    } else {
                        Failure::Transport
                    };
                    (failure, Err(e))
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let headers = resp.headers().clone();
                    match resp.bytes().await {
                        Err(e) => (Failure::Transport, Err(e)),
                        Ok(body) => {
                            let raw = RawResponse {
                                status,
                                headers,
                                body: body.to_vec(),
                            };
                            if (200..300).contains(&status) {
                                return Ok(raw);
                            }
                            let retry_after = raw
                                .headers
                                .get(reqwest::header::RETRY_AFTER)
                                .and_then(|v| v.to_str().ok())
                                .and_then(parse_retry_after);
                            let over_quota = status == 409
                                && error::classify(raw.api_error(service, method, url.path()))
                                    .is_quota_exceeded();
                            (
                                Failure::Status {
                                    status,
                                    retry_after,
                                    over_quota,
                                },
                                Ok(raw),
                            )
                        }
                    }
                }
            };
            let (failure, outcome) = failure;
            match policy.next_delay(attempts, method, &failure, retry_on_conflict) {
                Some(delay) => tokio::time::sleep(delay).await,
                None => {
                    return outcome.map_err(|e| OpenStackError::Transport {
                        service: service.name(),
                        method: method.to_string(),
                        url: url_without_query(url),
                        message: if attempts > 1 {
                            format!("{} (after {attempts} attempts)", describe(&e))
                        } else {
                            describe(&e)
                        },
                    })
                }
            }
        }
    }

    /// The API root of a service, from the current token's catalog.
    pub async fn endpoint(&self, service: Service) -> Result<String, OpenStackError> {
        let state = self.token().await?;
        state.token.catalog.endpoint(
            service,
            self.config.region.as_deref(),
            self.config.interface,
        )
    }

    /// One call: retried as [`RetryPolicy`] says, re-authenticated once on a 401.
    pub async fn send(&self, req: &Request) -> Result<Response, OpenStackError> {
        let mut reauthenticated = false;
        loop {
            let state = self.token().await?;
            let root = state.token.catalog.endpoint(
                req.service,
                self.config.region.as_deref(),
                self.config.interface,
            )?;
            let url = build_url(&root, &req.path, &req.query)?;
            let timeout = req.timeout.or(self.options.timeout);
            let headers = req.service.microversion_headers();
            let make = || {
                let mut rb = self
                    .http
                    .request(req.method.clone(), url.clone())
                    .header("X-Auth-Token", state.token.secret().expose())
                    .header(reqwest::header::ACCEPT, "application/json");
                for (name, value) in &headers {
                    rb = rb.header(*name, value.as_str());
                }
                if let Some(body) = &req.body {
                    rb = rb.json(body);
                }
                if let Some(t) = timeout {
                    rb = rb.timeout(t);
                }
                rb
            };
            let raw = self
                .exchange(req.service, &req.method, &url, req.retry_on_conflict, &make)
                .await?;
            if (200..300).contains(&raw.status) {
                return Ok(Response {
                    status: raw.status,
                    request_id: raw.request_id(),
                    body: raw.body,
                    service: req.service.name(),
                    method: req.method.to_string(),
                    path: url.path().to_owned(),
                });
            }
            if raw.status == 401 && !reauthenticated {
                reauthenticated = true;
                self.invalidate(&state).await;
                continue;
            }
            return Err(error::classify(raw.api_error(
                req.service,
                &req.method,
                url.path(),
            )));
        }
    }

    /// GET a collection, following `next` links, and decode `body[key]` items.
    pub async fn list<T: DeserializeOwned>(
        &self,
        service: Service,
        path: &str,
        query: Vec<(String, String)>,
        key: &str,
    ) -> Result<Vec<T>, OpenStackError> {
        let mut out = Vec::new();
        let mut query = query;
        for _page in 0..1000 {
            let resp = self
                .send(&Request::get(service, path).queries(query.clone()))
                .await?;
            let mut value: serde_json::Value = resp.json()?;
            let next = next_page_query(&value, key);
            let items = match value.get_mut(key).map(serde_json::Value::take) {
                Some(serde_json::Value::Array(items)) => items,
                _ => return Err(resp.decode_error(format!("no {key:?} list"), &resp.body)),
            };
            let page_len = items.len();
            for item in items {
                out.push(resp.decode_value(item)?);
            }
            match next {
                Some(q) if q != query && page_len > 0 => query = q,
                _ => break,
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::build_url;

    #[test]
    fn dot_segments_never_reach_another_resource() {
        let ok = build_url("http://127.0.0.1:1/v2.1", "os-keypairs/demo-key", &[]).unwrap();
        assert_eq!(ok.as_str(), "http://127.0.0.1:1/v2.1/os-keypairs/demo-key");
        for bad in ["os-keypairs/../servers", "os-keypairs/.", "a/../../b-key"] {
            assert!(
                build_url("http://127.0.0.1:1/v2.1", bad, &[]).is_err(),
                "{bad}"
            );
        }
    }
}
