//! Keystone v3: the token request (`authenticate`, which the session calls through the
//! function it is handed at its start); the token and its catalog are read in [`super::token`].

use futures::future::BoxFuture;
use serde_json::json;

use super::config::{AppCredentialRef, AuthMethod, DomainRef, ProjectRef, UserRef};
use super::error::{self, OpenStackError};
use super::http::{Authenticate, Session};
use super::service::Service;
pub use super::token::{parse_token, Catalog, CatalogEndpoint, CatalogService, Token};

fn domain_json(d: &DomainRef) -> serde_json::Value {
    match d {
        DomainRef::Id(id) => json!({ "id": id }),
        DomainRef::Name(name) => json!({ "name": name }),
    }
}

fn user_json(u: &UserRef) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match u {
        UserRef::Id(id) => {
            m.insert("id".into(), json!(id));
        }
        UserRef::Name { name, domain } => {
            m.insert("name".into(), json!(name));
            m.insert("domain".into(), domain_json(domain));
        }
    }
    m
}

/// The body of `POST /v3/auth/tokens`. It holds the secret: never log or quote it.
pub fn auth_request_body(method: &AuthMethod) -> serde_json::Value {
    match method {
        AuthMethod::Password {
            user,
            password,
            project,
        } => {
            let mut user = user_json(user);
            user.insert("password".into(), json!(password.expose()));
            let project = match project {
                ProjectRef::Id(id) => json!({ "id": id }),
                ProjectRef::Name { name, domain } => {
                    json!({ "name": name, "domain": domain_json(domain) })
                }
            };
            json!({
                "auth": {
                    "identity": { "methods": ["password"], "password": { "user": user } },
                    "scope": { "project": project }
                }
            })
        }
        AuthMethod::ApplicationCredential { credential, secret } => {
            let cred = match credential {
                AppCredentialRef::Id(id) => json!({ "id": id, "secret": secret.expose() }),
                AppCredentialRef::Name { name, user } => {
                    json!({ "name": name, "secret": secret.expose(), "user": user_json(user) })
                }
            };
            json!({
                "auth": {
                    "identity": {
                        "methods": ["application_credential"],
                        "application_credential": cred
                    }
                }
            })
        }
    }
}

/// Who is authenticating, for messages (no secret).
pub fn describe_method(method: &AuthMethod) -> String {
    fn user(u: &UserRef) -> String {
        match u {
            UserRef::Id(id) => format!("user id {id}"),
            UserRef::Name { name, domain } => format!("user {name:?} ({})", dom(domain)),
        }
    }
    fn dom(d: &DomainRef) -> String {
        match d {
            DomainRef::Id(id) => format!("domain id {id}"),
            DomainRef::Name(n) => format!("domain {n:?}"),
        }
    }
    match method {
        AuthMethod::Password {
            user: u, project, ..
        } => {
            let p = match project {
                ProjectRef::Id(id) => format!("project id {id}"),
                ProjectRef::Name { name, domain } => format!("project {name:?} ({})", dom(domain)),
            };
            format!("password of {} for {p}", user(u))
        }
        AuthMethod::ApplicationCredential { credential, .. } => match credential {
            AppCredentialRef::Id(id) => format!("application credential {id}"),
            AppCredentialRef::Name { name, user: u } => {
                format!("application credential {name:?} of {}", user(u))
            }
        },
    }
}

/// `POST {auth_url}/auth/tokens`, with the session's retry policy.
pub(crate) async fn authenticate(session: &Session) -> Result<Token, OpenStackError> {
    let cfg = &session.config;
    let url = super::http::build_url(&cfg.auth_url, "auth/tokens", &[])?;
    let body = auth_request_body(&cfg.auth);
    let timeout = session.options.timeout;
    let make = || {
        let mut rb = session
            .http
            .post(url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .json(&body);
        if let Some(t) = timeout {
            rb = rb.timeout(t);
        }
        rb
    };
    let method = reqwest::Method::POST;
    let raw = session
        // A token request changes nothing that matters: it may be sent again.
        .exchange(
            Service::Identity,
            &method,
            &url,
            super::http::Replay::Safe,
            false,
            &make,
        )
        .await?;
    let fail = |message: String| OpenStackError::Auth {
        auth_url: cfg.auth_url.clone(),
        message,
        status: Some(raw.status),
        request_id: raw.request_id(),
    };
    let who = describe_method(&cfg.auth);
    if !(200..300).contains(&raw.status) {
        let api = raw.api_error(Service::Identity, &method, url.path());
        let code = api.code.map(|c| format!(" {c}")).unwrap_or_default();
        return Err(fail(format!(
            "{who}: HTTP {}{code}: {}{}",
            raw.status,
            api.message,
            api.request_id
                .map(|id| format!(" (request id {id})"))
                .unwrap_or_default()
        )));
    }
    let subject = raw
        .headers
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| fail(format!("{who}: the answer has no X-Subject-Token header")))?;
    parse_token(&subject, &raw.body).map_err(|e| {
        fail(format!(
            "{who}: cannot read the token: {e}; body starts: {}",
            error::redacted_snippet(&raw.body, 200)
        ))
    })
}

/// [`authenticate`] as the session holds it: the session renews its token through this
/// without knowing how Keystone is asked.
pub(crate) fn authenticator() -> Authenticate {
    fn boxed(session: &Session) -> BoxFuture<'_, Result<Token, OpenStackError>> {
        Box::pin(authenticate(session))
    }
    boxed
}
