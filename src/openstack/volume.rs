//! Cinder (block storage v3, microversion [`super::service::CINDER_MICROVERSION`]).
//!
//! Volumes have no tags: they are marked with metadata and listed with
//! `GET /volumes/detail?metadata={"key": "value"}`. Attaching goes through nova
//! ([`super::compute::Compute::attach_volume`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::error::{gone, optional, OpenStackError};
use super::http::{Request, Session};
use super::service::Service;
use super::share::metadata_filter;
use super::{parse_quota_usages, QuotaUsages};

const S: Service = Service::Volume;

#[derive(Clone)]
pub struct VolumeApi {
    pub(crate) session: Arc<Session>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct VolumeAttachmentInfo {
    pub server_id: Option<String>,
    pub attachment_id: Option<String>,
    pub device: Option<String>,
    pub volume_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Volume {
    pub id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    /// `creating`, `available`, `reserved`, `attaching`, `in-use`, `detaching`, `error`,
    /// `deleting`, `error_deleting`...
    pub status: String,
    /// GiB
    pub size: u64,
    pub metadata: BTreeMap<String, String>,
    pub attachments: Vec<VolumeAttachmentInfo>,
    pub availability_zone: Option<String>,
    pub volume_type: Option<String>,
    pub created_at: Option<String>,
}

/// `GET /limits` absolute limits (`-1` = unlimited).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct VolumeLimits {
    pub max_total_volumes: i64,
    pub total_volumes_used: i64,
    pub max_total_volume_gigabytes: i64,
    pub total_gigabytes_used: i64,
    pub max_total_snapshots: i64,
    pub total_snapshots_used: i64,
}

#[derive(Debug, Clone, Default)]
pub struct VolumeCreate {
    pub name: String,
    pub description: Option<String>,
    /// GiB
    pub size: u64,
    pub volume_type: Option<String>,
    pub availability_zone: Option<String>,
    pub metadata: BTreeMap<String, String>,
}

impl VolumeCreate {
    pub fn to_body(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("size".into(), json!(self.size));
        for (k, v) in [
            ("description", &self.description),
            ("volume_type", &self.volume_type),
            ("availability_zone", &self.availability_zone),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.metadata.is_empty() {
            m.insert("metadata".into(), json!(self.metadata));
        }
        json!({ "volume": m })
    }
}

impl VolumeApi {
    pub async fn create_volume(&self, v: &VolumeCreate) -> Result<Volume, OpenStackError> {
        self.session
            .send(&Request::post(S, "volumes", v.to_body()))
            .await?
            .json_at("volume")
    }

    /// `GET /volumes/detail?metadata=...`: volumes carrying all these metadata items.
    pub async fn list_volumes(
        &self,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Vec<Volume>, OpenStackError> {
        let mut query = Vec::new();
        if !metadata.is_empty() {
            query.push(("metadata".to_owned(), metadata_filter(metadata)));
        }
        self.session
            .list(S, "volumes/detail", query, "volumes")
            .await
    }

    pub async fn get_volume(&self, id: &str) -> Result<Option<Volume>, OpenStackError> {
        optional(
            self.session
                .send(&Request::get(S, format!("volumes/{id}")))
                .await,
        )?
        .map(|r| r.json_at("volume"))
        .transpose()
    }

    /// `POST /volumes/{id}/metadata`: adds (or changes) these items, keeps the others.
    pub async fn add_metadata(
        &self,
        id: &str,
        metadata: &BTreeMap<String, String>,
    ) -> Result<(), OpenStackError> {
        self.session
            .send(
                &Request::post(
                    S,
                    format!("volumes/{id}/metadata"),
                    json!({ "metadata": metadata }),
                )
                .idempotent(),
            )
            .await
            .map(drop)
    }

    /// Asynchronous (the volume goes `deleting`); retried while busy; Ok if already gone.
    pub async fn delete_volume(&self, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("volumes/{id}")).retry_on_conflict())
                .await,
        )
    }

    pub async fn limits(&self) -> Result<VolumeLimits, OpenStackError> {
        #[derive(Deserialize)]
        struct L {
            absolute: VolumeLimits,
        }
        let l: L = self
            .session
            .send(&Request::get(S, "limits"))
            .await?
            .json_at("limits")?;
        Ok(l.absolute)
    }

    /// Admin: `PUT /os-quota-sets/{project}` with the given limits (`volumes`, `gigabytes`...).
    pub async fn set_quota(
        &self,
        project_id: &str,
        limits: &BTreeMap<String, i64>,
    ) -> Result<(), OpenStackError> {
        self.session
            .send(&Request::put(
                S,
                format!("os-quota-sets/{project_id}"),
                json!({ "quota_set": limits }),
            ))
            .await
            .map(drop)
    }

    /// `GET /os-quota-sets/{project}?usage=True`.
    pub async fn quota_usage(&self, project_id: &str) -> Result<QuotaUsages, OpenStackError> {
        let resp = self
            .session
            .send(&Request::get(S, format!("os-quota-sets/{project_id}")).query("usage", "True"))
            .await?;
        parse_quota_usages(&resp, "quota_set")
    }
}
