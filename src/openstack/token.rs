//! A Keystone token as the services use it: its secret, lifetime and project, and the
//! service catalog that says where each API lives. Read from Keystone's answer; no I/O.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::config::{Interface, Secret};
use super::error::OpenStackError;
use super::service::Service;

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
