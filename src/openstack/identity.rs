//! Keystone v3 application credentials and their access rules: what autostop hands the
//! master so that it can stop its own cluster and nothing else. A credential belongs to a
//! user, is scoped to the project of the token that made it, and cannot be changed: new
//! rules mean a new credential. Its secret is shown once, in the create reply.
//!
//! An access rule names a catalog service type, an HTTP method and a path; each service's
//! auth_token middleware refuses (401) a request from such a credential that matches no
//! rule. In a path `*` is one segment and `**` any number of them; rules written here name
//! whole paths, never wildcards.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::config::Secret;
use super::error::{gone, OpenStackError};
use super::http::{Request, Session};
use super::service::Service;

const S: Service = Service::Identity;

#[derive(Clone)]
pub struct IdentityApi {
    pub(crate) session: Arc<Session>,
}

/// One access rule: `GET /v2.1/servers/{id}` of service `compute`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CredentialRule {
    /// The service's catalog type (`compute`), as its middleware's `service_type` says.
    pub service: String,
    pub method: String,
    pub path: String,
}

/// What to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppCredentialCreate {
    pub name: String,
    pub description: String,
    /// Role names the credential carries (of those the user has on the project); empty =
    /// all of the creating token's roles.
    pub roles: Vec<String>,
    /// Empty = no rules: the credential may call everything its roles allow.
    pub access_rules: Vec<CredentialRule>,
}

impl AppCredentialCreate {
    /// The body of `POST /v3/users/{user_id}/application_credentials`. Never `unrestricted`:
    /// such a credential could make more credentials. No `secret`: Keystone makes one.
    pub fn body(&self) -> serde_json::Value {
        let mut cred = json!({
            "name": self.name,
            "description": self.description,
            "unrestricted": false,
        });
        if !self.roles.is_empty() {
            cred["roles"] = self
                .roles
                .iter()
                .map(|name| json!({ "name": name }))
                .collect();
        }
        if !self.access_rules.is_empty() {
            cred["access_rules"] = json!(self.access_rules);
        }
        json!({ "application_credential": cred })
    }
}

/// A credential as Keystone lists it (no secret).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AppCredential {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub project_id: Option<String>,
    pub unrestricted: bool,
    /// `None` from a Keystone older than access rules (Train).
    pub access_rules: Option<Vec<CredentialRule>>,
    pub expires_at: Option<String>,
}

/// An access rule as Keystone keeps it: its own object, left behind when the credential that
/// used it is deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct StoredRule {
    pub id: String,
    pub service: String,
    pub method: String,
    pub path: String,
}

/// A credential just made, with its secret (shown by Keystone this once).
#[derive(Debug, Clone)]
pub struct NewAppCredential {
    pub credential: AppCredential,
    pub secret: Secret,
}

/// Reads a create reply: the credential and its one-time secret.
pub fn parse_created(body: &serde_json::Value) -> Result<NewAppCredential, String> {
    let cred = body
        .get("application_credential")
        .ok_or("no \"application_credential\" object")?;
    let secret = cred
        .get("secret")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .ok_or("no secret in the reply")?;
    let credential: AppCredential =
        serde_json::from_value(cred.clone()).map_err(|e| e.to_string())?;
    if credential.id.is_empty() {
        return Err("no id in the reply".into());
    }
    Ok(NewAppCredential {
        credential,
        secret: Secret::new(secret),
    })
}

impl IdentityApi {
    /// `POST /v3/users/{user_id}/application_credentials` (201). Sent once: after an unknown
    /// outcome the caller looks the name up (the secret of one made then is lost anyway).
    pub async fn create_app_credential(
        &self,
        user_id: &str,
        create: &AppCredentialCreate,
    ) -> Result<NewAppCredential, OpenStackError> {
        let resp = self
            .session
            .send(&Request::post(
                S,
                format!("users/{user_id}/application_credentials"),
                create.body(),
            ))
            .await?;
        let body: serde_json::Value = resp.json()?;
        // the reply holds the secret: a decode error quotes none of it
        parse_created(&body).map_err(|e| resp.decode_error(e, b""))
    }

    /// `GET /v3/users/{user_id}/application_credentials[?name=]`.
    pub async fn app_credentials(
        &self,
        user_id: &str,
        name: Option<&str>,
    ) -> Result<Vec<AppCredential>, OpenStackError> {
        let mut req = Request::get(S, format!("users/{user_id}/application_credentials"));
        if let Some(name) = name {
            req = req.query("name", name);
        }
        self.session
            .send(&req)
            .await?
            .json_at("application_credentials")
    }

    /// `DELETE /v3/users/{user_id}/application_credentials/{id}` (204); one already gone is
    /// not an error.
    pub async fn delete_app_credential(
        &self,
        user_id: &str,
        id: &str,
    ) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(
                    S,
                    format!("users/{user_id}/application_credentials/{id}"),
                ))
                .await,
        )
    }

    /// `GET /v3/users/{user_id}/access_rules`: every rule the user's credentials made.
    pub async fn access_rules(&self, user_id: &str) -> Result<Vec<StoredRule>, OpenStackError> {
        self.session
            .send(&Request::get(S, format!("users/{user_id}/access_rules")))
            .await?
            .json_at("access_rules")
    }

    /// `DELETE /v3/users/{user_id}/access_rules/{id}` (204); Keystone refuses (403) a rule a
    /// credential still uses; one already gone is not an error.
    pub async fn delete_access_rule(&self, user_id: &str, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(
                    S,
                    format!("users/{user_id}/access_rules/{id}"),
                ))
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_body_is_restricted_and_names_roles_and_rules() {
        let create = AppCredentialCreate {
            name: "hvd-cluster-demo-autostop-1".into(),
            description: "d".into(),
            roles: vec!["member".into()],
            access_rules: vec![CredentialRule {
                service: "compute".into(),
                method: "GET".into(),
                path: "/v2.1/servers/abc".into(),
            }],
        };
        assert_eq!(
            create.body(),
            json!({"application_credential": {
                "name": "hvd-cluster-demo-autostop-1",
                "description": "d",
                "unrestricted": false,
                "roles": [{"name": "member"}],
                "access_rules": [{"service": "compute", "method": "GET", "path": "/v2.1/servers/abc"}]
            }})
        );
        let bare = AppCredentialCreate {
            roles: vec![],
            access_rules: vec![],
            ..create
        };
        let body = bare.body();
        assert!(body["application_credential"].get("roles").is_none());
        assert!(body["application_credential"].get("access_rules").is_none());
    }

    #[test]
    fn a_create_reply_without_a_secret_is_refused() {
        let body = json!({"application_credential": {"id": "x", "name": "n"}});
        assert!(parse_created(&body).unwrap_err().contains("secret"));
        let body = json!({"application_credential": {"name": "n", "secret": "s"}});
        assert!(parse_created(&body).unwrap_err().contains("id"));
    }
}
