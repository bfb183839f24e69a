//! Manila (shared file systems v2, microversion [`super::service::MANILA_MICROVERSION`]).
//!
//! Manila has no tags: shares are marked with metadata and listed with
//! `GET /v2/shares/detail?metadata={"key": "value"}` (manila evaluates the value as a
//! Python literal; JSON objects of strings are one).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::error::{gone, optional, OpenStackError};
use super::http::{Request, Session};
use super::service::Service;
use super::{parse_quota_usages, QuotaUsages};

const S: Service = Service::Share;

#[derive(Clone)]
pub struct ShareApi {
    pub(crate) session: Arc<Session>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Share {
    pub id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    /// `creating`, `available`, `error`, `deleting`, `error_deleting`, `extending`...;
    /// `None` right after create on some releases.
    pub status: Option<String>,
    /// GiB
    pub size: Option<u64>,
    pub share_proto: Option<String>,
    pub share_type: Option<String>,
    pub share_type_name: Option<String>,
    pub share_network_id: Option<String>,
    pub availability_zone: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Summary state of the share's access rules (`active`, `syncing`, `error`).
    pub access_rules_status: Option<String>,
    pub project_id: Option<String>,
    pub created_at: Option<String>,
    pub is_public: Option<bool>,
}

impl Share {
    pub fn is_available(&self) -> bool {
        self.status.as_deref() == Some("available")
    }

    pub fn is_error(&self) -> bool {
        self.status
            .as_deref()
            .is_some_and(|s| s.starts_with("error"))
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AccessRule {
    pub id: String,
    pub share_id: Option<String>,
    /// `ip`, `cert`, `user`, `cephx`.
    pub access_type: String,
    pub access_to: String,
    /// `rw` or `ro`.
    pub access_level: String,
    /// `queued_to_apply`, `applying`, `active`, `error`, `queued_to_deny`, `denying`.
    pub state: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub created_at: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ExportLocation {
    pub id: Option<String>,
    /// For NFS: `host:/path`.
    pub path: String,
    pub preferred: bool,
    /// Only admins see it; `None` otherwise.
    pub is_admin_only: Option<bool>,
}

/// `GET /limits` absolute limits (`-1` = unlimited).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ShareLimits {
    pub max_total_shares: i64,
    pub total_shares_used: i64,
    pub max_total_share_gigabytes: i64,
    pub total_share_gigabytes_used: i64,
    pub max_total_share_networks: i64,
    pub total_share_networks_used: i64,
}

#[derive(Debug, Clone, Default)]
pub struct ShareCreate {
    pub name: String,
    pub description: Option<String>,
    /// GiB
    pub size: u64,
    /// `NFS` unless set.
    pub share_proto: Option<String>,
    /// `None`: the cloud's default share type.
    pub share_type: Option<String>,
    pub share_network_id: Option<String>,
    pub availability_zone: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl ShareCreate {
    pub fn to_body(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("size".into(), json!(self.size));
        m.insert(
            "share_proto".into(),
            json!(self.share_proto.as_deref().unwrap_or("NFS")),
        );
        for (k, v) in [
            ("description", &self.description),
            ("share_type", &self.share_type),
            ("share_network_id", &self.share_network_id),
            ("availability_zone", &self.availability_zone),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.metadata.is_empty() {
            m.insert("metadata".into(), json!(self.metadata));
        }
        json!({ "share": m })
    }
}

/// The query value of a metadata filter: a JSON object (a valid Python literal).
pub fn metadata_filter(metadata: &BTreeMap<String, String>) -> String {
    json!(metadata).to_string()
}

impl ShareApi {
    pub async fn create_share(&self, s: &ShareCreate) -> Result<Share, OpenStackError> {
        self.session
            .send(&Request::post(S, "shares", s.to_body()))
            .await?
            .json_at("share")
    }

    /// `GET /shares/detail?metadata=...`: shares carrying all these metadata items (all
    /// shares of the project if empty).
    pub async fn list_shares(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<Share>, OpenStackError> {
        let mut query = Vec::new();
        if !metadata.is_empty() {
            query.push(("metadata".to_owned(), metadata_filter(metadata)));
        }
        self.session.list(S, "shares/detail", query, "shares").await
    }

    pub async fn get_share(&self, id: &str) -> Result<Option<Share>, OpenStackError> {
        optional(
            self.session
                .send(&Request::get(S, format!("shares/{id}")))
                .await,
        )?
        .map(|r| r.json_at("share"))
        .transpose()
    }

    /// `POST /shares/{id}/metadata`: sets these items, leaving the share's others as they are.
    pub async fn add_metadata(
        &self,
        id: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<(), OpenStackError> {
        self.session
            .send(
                &Request::post(
                    S,
                    format!("shares/{id}/metadata"),
                    json!({ "metadata": metadata }),
                )
                .idempotent(),
            )
            .await
            .map(drop)
    }

    /// `DELETE /shares/{id}/metadata/{key}`; Ok if the item (or the share) is gone.
    pub async fn delete_metadata(&self, id: &str, key: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("shares/{id}/metadata/{key}")))
                .await,
        )
    }

    /// Asynchronous: the share goes `deleting`, then disappears. Ok if already gone.
    pub async fn delete_share(&self, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("shares/{id}")).retry_on_conflict())
                .await,
        )
    }

    /// `allow_access` for an IP or CIDR; the rule starts `queued_to_apply`.
    pub async fn allow_ip_access(
        &self,
        share_id: &str,
        cidr: &str,
        read_write: bool,
    ) -> Result<AccessRule, OpenStackError> {
        let body = json!({
            "allow_access": {
                "access_type": "ip",
                "access_to": cidr,
                "access_level": if read_write { "rw" } else { "ro" },
            }
        });
        self.session
            .send(&Request::post(S, format!("shares/{share_id}/action"), body).retry_on_conflict())
            .await?
            .json_at("access")
    }

    /// `GET /share-access-rules?share_id=...` (2.45+).
    pub async fn list_access_rules(
        &self,
        share_id: &str,
    ) -> Result<Vec<AccessRule>, OpenStackError> {
        self.session
            .list(
                S,
                "share-access-rules",
                vec![("share_id".to_owned(), share_id.to_owned())],
                "access_list",
            )
            .await
    }

    /// `deny_access`; Ok if the rule or share is gone. Sent again after an unknown outcome:
    /// a second deny of a denied rule is a 404, which counts as done.
    pub async fn deny_access(&self, share_id: &str, access_id: &str) -> Result<(), OpenStackError> {
        let body = json!({ "deny_access": { "access_id": access_id } });
        let mut req =
            Request::post(S, format!("shares/{share_id}/action"), body).retry_on_conflict();
        req.replay = super::http::Replay::Safe;
        gone(self.session.send(&req).await)
    }

    /// `GET /shares/{id}/export_locations`.
    pub async fn export_locations(
        &self,
        share_id: &str,
    ) -> Result<Vec<ExportLocation>, OpenStackError> {
        self.session
            .list(
                S,
                &format!("shares/{share_id}/export_locations"),
                Vec::new(),
                "export_locations",
            )
            .await
    }

    pub async fn limits(&self) -> Result<ShareLimits, OpenStackError> {
        #[derive(Deserialize)]
        struct L {
            absolute: ShareLimits,
        }
        let l: L = self
            .session
            .send(&Request::get(S, "limits"))
            .await?
            .json_at("limits")?;
        Ok(l.absolute)
    }

    /// `GET /quota-sets/{project}/detail`: limit, in use, reserved per resource.
    pub async fn quota_usage(&self, project_id: &str) -> Result<QuotaUsages, OpenStackError> {
        let resp = self
            .session
            .send(&Request::get(S, format!("quota-sets/{project_id}/detail")))
            .await?;
        parse_quota_usages(&resp, "quota_set")
    }
}
