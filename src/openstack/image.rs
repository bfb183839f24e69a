//! Glance v2. Bodies are not wrapped in a resource key; lists page with a top-level `next`.

use std::sync::Arc;

use serde::Deserialize;

use super::error::{gone, optional, OpenStackError};
use super::http::{Request, Session};
use super::service::Service;

const S: Service = Service::Image;

#[derive(Clone)]
pub struct ImageApi {
    pub(crate) session: Arc<Session>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Image {
    pub id: String,
    pub name: Option<String>,
    /// `queued`, `saving`, `active`, `killed`, `deleted`, `deactivated`...
    pub status: String,
    pub visibility: Option<String>,
    pub owner: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub disk_format: Option<String>,
    pub container_format: Option<String>,
    pub size: Option<u64>,
    pub min_disk: Option<u64>,
    pub min_ram: Option<u64>,
    pub tags: Vec<String>,
    pub os_hidden: Option<bool>,
    /// The server a snapshot was made from (Nova sets it on shelve snapshots).
    pub instance_uuid: Option<String>,
    /// `snapshot` on images Nova made from a server.
    pub image_type: Option<String>,
    /// A bake's key and the Horovod image it holds (`hvd-cluster bake`'s properties).
    pub hvd_bake_key: Option<String>,
    pub hvd_bake_horovod_image: Option<String>,
    pub hvd_bake_cluster: Option<String>,
    pub hvd_bake_node: Option<String>,
}

/// Picks the image among active candidates with the same name: the one created last wins
/// (a cloud that publishes a refreshed `debian-12` keeps the old one around for a while);
/// two or more sharing the latest `created_at` are ambiguous.
pub fn pick_newest<'a>(name: &str, candidates: &'a [Image]) -> Result<&'a Image, OpenStackError> {
    let active: Vec<&Image> = candidates.iter().filter(|i| i.status == "active").collect();
    let Some(newest) = active
        .iter()
        .map(|i| i.created_at.as_deref().unwrap_or(""))
        .max()
    else {
        return Err(OpenStackError::NoSuchName {
            kind: "active image",
            name: name.to_owned(),
            available: String::new(),
        });
    };
    let top: Vec<&Image> = active
        .into_iter()
        .filter(|i| i.created_at.as_deref().unwrap_or("") == newest)
        .collect();
    match top.as_slice() {
        [one] => Ok(one),
        many => Err(OpenStackError::Ambiguous {
            kind: "image",
            name: name.to_owned(),
            candidates: many
                .iter()
                .map(|i| {
                    format!(
                        "{} (created {})",
                        i.id,
                        i.created_at.as_deref().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

impl ImageApi {
    /// `GET /v2/images/{id}`; `None` if there is none.
    pub async fn get_image(&self, id: &str) -> Result<Option<Image>, OpenStackError> {
        optional(
            self.session
                .send(&Request::get(S, format!("images/{id}")))
                .await,
        )?
        .map(|r| r.json())
        .transpose()
    }

    /// `GET /v2/images?name=...&status=active` (every page).
    pub async fn list_active_by_name(&self, name: &str) -> Result<Vec<Image>, OpenStackError> {
        let query = vec![
            ("name".to_owned(), name.to_owned()),
            ("status".to_owned(), "active".to_owned()),
        ];
        self.session.list(S, "images", query, "images").await
    }

    /// `GET /v2/images?name=...` in any status (every page).
    pub async fn list_by_name(&self, name: &str) -> Result<Vec<Image>, OpenStackError> {
        let query = vec![("name".to_owned(), name.to_owned())];
        self.session.list(S, "images", query, "images").await
    }

    /// `GET /v2/images?KEY=VALUE` in any status (every page), for a custom property: each
    /// image as Glance sends it, its own properties at the top level. A cloud that ignored the
    /// filter would send every image: callers compare the property themselves.
    pub async fn list_by_property(
        &self,
        key: &str,
        value: &str,
    ) -> Result<Vec<serde_json::Value>, OpenStackError> {
        let query = vec![(key.to_owned(), value.to_owned())];
        self.session.list(S, "images", query, "images").await
    }

    /// `GET /v2/images?owner=...` in any status (every page): the project's own images.
    pub async fn list_owned(&self, project_id: &str) -> Result<Vec<Image>, OpenStackError> {
        let query = vec![("owner".to_owned(), project_id.to_owned())];
        self.session.list(S, "images", query, "images").await
    }

    /// `DELETE /v2/images/{id}` (204); an image already gone is not an error.
    pub async fn delete_image(&self, id: &str) -> Result<(), OpenStackError> {
        gone(
            self.session
                .send(&Request::delete(S, format!("images/{id}")))
                .await,
        )
    }

    /// The active image with this id, or else with this exact name (see [`pick_newest`]).
    pub async fn find_image(&self, name_or_id: &str) -> Result<Image, OpenStackError> {
        if looks_like_uuid(name_or_id) {
            if let Some(img) = self.get_image(name_or_id).await? {
                if img.status == "active" {
                    return Ok(img);
                }
            }
        }
        let candidates = self.list_active_by_name(name_or_id).await?;
        pick_newest(name_or_id, &candidates).cloned()
    }
}
