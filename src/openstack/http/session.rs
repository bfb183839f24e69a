//! The session every call goes through: the token (renewed before it expires, again after a
//! 401), the endpoint from the catalog, the URL, the call counter, pagination.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::de::DeserializeOwned;

use super::super::config::CloudConfig;
use super::super::error::{self, OpenStackError};
use super::super::service::Service;
use super::super::token::Token;
use super::{
    parse_retry_after, ClientOptions, Failure, Method, RawResponse, Replay, Request, Response,
};
use futures::future::BoxFuture;

/// How the session gets a new token (Keystone's request lives above this layer, in
/// [`super::super::auth`], and uses the session's own retries).
pub(crate) type Authenticate =
    for<'a> fn(&'a Session) -> BoxFuture<'a, Result<Token, OpenStackError>>;

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
    authenticate: Authenticate,
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
    pub fn new(
        config: CloudConfig,
        options: ClientOptions,
        authenticate: Authenticate,
    ) -> Result<Session, OpenStackError> {
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
            authenticate,
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
        let token = (self.authenticate)(self).await?;
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
        replay: Replay,
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
                                attempts,
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
            match policy.next_delay(attempts, replay, &failure, retry_on_conflict) {
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
                .exchange(
                    req.service,
                    &req.method,
                    &url,
                    req.replay,
                    req.retry_on_conflict,
                    &make,
                )
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
