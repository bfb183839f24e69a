//! Keystone v3: the token request, the token, the service catalog.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use super::config::{
    AppCredentialRef, AuthMethod, DomainRef, Interface, ProjectRef, Secret, UserRef,
};
use super::error::{self, OpenStackError};
use super::http::{Service, Session};

/// A project-scoped Keystone token and what came with it.
#[derive(Debug, Clone)]
pub struct Token {
    secret: Secret,
    pub expires_at: DateTime<Utc>,
    pub issued_at: Option<DateTime<Utc>>,
    pub project_id: String,
    pub project_name: Option<String>,
    pub user_id: Option<String>,
    pub catalog: Catalog,
}

impl Token {
    pub(crate) fn secret(&self) -> &Secret {
        &self.secret
    }

    /// How long the token lives, measured on Keystone's clock (issued → expires) so that a
    /// skewed local clock does not matter; without `issued_at`, until `expires_at` from now.
    pub fn lifetime(&self) -> Duration {
        let from = self.issued_at.unwrap_or_else(Utc::now);
        (self.expires_at - from).to_std().unwrap_or(Duration::ZERO)
    }
}

/// The service catalog of a token.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Catalog {
    pub services: Vec<CatalogService>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CatalogService {
    #[serde(rename = "type")]
    pub service_type: String,
    pub name: Option<String>,
    pub endpoints: Vec<CatalogEndpoint>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CatalogEndpoint {
    pub interface: String,
    pub region: Option<String>,
    pub region_id: Option<String>,
    pub url: String,
}

impl CatalogEndpoint {
    fn region_name(&self) -> Option<&str> {
        self.region_id.as_deref().or(self.region.as_deref())
    }

    fn in_region(&self, region: &str) -> bool {
        self.region_id.as_deref() == Some(region) || self.region.as_deref() == Some(region)
    }
}

impl Catalog {
    /// The API root for `service` (see [`Service::api_root`]): the first catalog type of
    /// the service's list (official type, then aliases) with an endpoint of `interface` in
    /// `region`. With no region configured, the catalog must offer only one.
    pub fn endpoint(
        &self,
        service: Service,
        region: Option<&str>,
        interface: Interface,
    ) -> Result<String, OpenStackError> {
        for wanted in service.catalog_types() {
            for entry in self.services.iter().filter(|s| s.service_type == *wanted) {
                let candidates: Vec<&CatalogEndpoint> = entry
                    .endpoints
                    .iter()
                    .filter(|e| e.interface.eq_ignore_ascii_case(interface.as_str()))
                    .filter(|e| region.is_none_or(|r| e.in_region(r)))
                    .filter(|e| service.accepts_endpoint(&e.url))
                    .collect();
                let Some(first) = candidates.first() else {
                    continue;
                };
                if region.is_none() {
                    let mut regions: Vec<&str> =
                        candidates.iter().filter_map(|e| e.region_name()).collect();
                    regions.sort_unstable();
                    regions.dedup();
                    if regions.len() > 1 {
                        return Err(OpenStackError::Catalog {
                            service: format!("{} ({wanted})", service.name()),
                            region: "(none set)".into(),
                            interface: interface.to_string(),
                            available: format!(
                                "endpoints in several regions ({}): set region_name / OS_REGION_NAME",
                                regions.join(", ")
                            ),
                        });
                    }
                }
                return Ok(service.api_root(&first.url));
            }
        }
        Err(OpenStackError::Catalog {
            service: format!("{} ({})", service.name(), service.catalog_types().join("/")),
            region: region.unwrap_or("(any)").to_owned(),
            interface: interface.to_string(),
            available: self.summary(),
        })
    }

    /// `compute: public@RegionOne internal@RegionOne; network: ...`
    pub fn summary(&self) -> String {
        if self.services.is_empty() {
            return "nothing (empty catalog)".into();
        }
        self.services
            .iter()
            .map(|s| {
                let eps: Vec<String> = s
                    .endpoints
                    .iter()
                    .map(|e| format!("{}@{}", e.interface, e.region_name().unwrap_or("-")))
                    .collect();
                format!("{}: {}", s.service_type, eps.join(" "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

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

#[derive(Deserialize)]
struct TokenBody {
    token: TokenData,
}

#[derive(Deserialize)]
struct TokenData {
    expires_at: String,
    #[serde(default)]
    issued_at: Option<String>,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    user: Option<Named>,
    #[serde(default)]
    catalog: Option<Catalog>,
}

#[derive(Deserialize)]
struct Named {
    id: String,
    #[serde(default)]
    name: Option<String>,
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s.trim_end_matches('Z'), "%Y-%m-%dT%H:%M:%S%.f")
                .map(|n| n.and_utc())
        })
        .map_err(|e| format!("bad time {s:?}: {e}"))
}

/// Parses the body of a token response with its `X-Subject-Token` header.
pub fn parse_token(subject_token: &str, body: &[u8]) -> Result<Token, String> {
    let parsed: TokenBody = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let t = parsed.token;
    let project = t
        .project
        .ok_or("the token is not scoped to a project (no \"project\" in it)")?;
    Ok(Token {
        secret: Secret::new(subject_token),
        expires_at: parse_time(&t.expires_at)?,
        issued_at: t.issued_at.as_deref().map(parse_time).transpose()?,
        project_id: project.id,
        project_name: project.name,
        user_id: t.user.map(|u| u.id),
        catalog: t.catalog.unwrap_or_default(),
    })
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
