//! A bake on the cloud: Nova's `createImage` of one of the cluster's servers (a snapshot of its
//! root disk into a private Glance image carrying the bake's properties), waited for until
//! Glance holds the whole image and Nova is done with the server; and the look-up of an
//! earlier bake by its key.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::settle::settle;
use super::OpenStackProvider;
use crate::bake::{TakenBy, KEY_PROPERTY};
use crate::input::shown;
use crate::openstack::compute::{ServerFilter, ServerStatus};
use crate::openstack::image::Image;
use crate::provider::{BakedImage, ProviderError};
use crate::wait::{wait_until, Probe, WaitError};

/// From `createImage` to an active image: the disk read and uploaded (grows with the disk).
const BAKE_DEADLINE: Duration = Duration::from_secs(3600);

fn text<'a>(image: &'a Value, key: &str) -> Option<&'a str> {
    image.get(key).and_then(Value::as_str)
}

fn baked(image: &Value) -> BakedImage {
    let owned = |key: &str| text(image, key).map(str::to_string);
    BakedImage {
        id: text(image, "id").unwrap_or_default().to_string(),
        name: text(image, "name").unwrap_or_default().to_string(),
        size: image.get("size").and_then(Value::as_u64),
        created: owned("created_at"),
        cluster: owned("hvd_bake_cluster"),
        node: owned("hvd_bake_node"),
        holds: owned("hvd_bake_horovod_image"),
    }
}

fn baked_image(image: Image) -> BakedImage {
    BakedImage {
        name: image.name.unwrap_or_default(),
        size: image.size,
        created: image.created_at,
        cluster: image.hvd_bake_cluster,
        node: image.hvd_bake_node,
        holds: image.hvd_bake_horovod_image,
        id: image.id,
    }
}

impl OpenStackProvider {
    /// This project's images carrying the bake `key` (compared here too: a cloud that ignored
    /// the filter sends every image).
    async fn bakes_with_key(&self, key: &str) -> Result<Vec<Value>, ProviderError> {
        let project = self.os.project_id().to_string();
        Ok(self
            .os
            .image()
            .list_by_property(KEY_PROPERTY, key)
            .await?
            .into_iter()
            .filter(|i| text(i, KEY_PROPERTY) == Some(key) && text(i, "owner") == Some(&project))
            .collect())
    }

    pub async fn find_bake(&self, key: &str) -> Result<Option<BakedImage>, ProviderError> {
        let mut found = None;
        for image in self.bakes_with_key(key).await? {
            match text(&image, "status") {
                Some("active") if found.is_none() => found = Some(baked(&image)),
                Some("active") => {}
                // queued or saving with no bake under way (the caller holds the cluster's
                // lock), killed, or deactivated: what an earlier bake left
                _ => {
                    if let Some(id) = text(&image, "id") {
                        self.os.image().delete_image(id).await?;
                    }
                }
            }
        }
        Ok(found)
    }

    /// The profile's image for a kind of server, by its id (a cloud that publishes a new
    /// image under the same name makes another source); `volume` where there is none.
    pub async fn bake_source(&self, image: Option<&str>) -> Result<String, ProviderError> {
        match image {
            Some(name) => Ok(self.os.image().find_image(name).await?.id),
            None => Ok("volume".to_string()),
        }
    }

    /// The project's own images carrying a bake's key, the newest first.
    pub async fn list_bakes(&self) -> Result<Vec<BakedImage>, ProviderError> {
        let project = self.os.project_id().to_string();
        let mut bakes: Vec<BakedImage> = self
            .os
            .image()
            .list_owned(&project)
            .await?
            .into_iter()
            .filter(|i| i.hvd_bake_key.is_some() && i.owner.as_deref() == Some(&project))
            .filter(|i| i.status == "active")
            .map(baked_image)
            .collect();
        bakes.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
        Ok(bakes)
    }

    /// Any image the project sees under `name` (a profile naming the bake would find it too,
    /// or two of that name).
    pub async fn bake_name_taken(&self, name: &str) -> Result<Option<TakenBy>, ProviderError> {
        let project = self.os.project_id().to_string();
        let images = self.os.image().list_by_name(name).await?;
        let Some(image) = images.iter().find(|i| i.name.as_deref() == Some(name)) else {
            return Ok(None);
        };
        let id = shown(&image.id);
        let own = image.owner.as_deref() == Some(project.as_str());
        Ok(Some(if !own {
            TakenBy {
                what: format!("image {id} of another project"),
                own_bake: false,
            }
        } else if image.hvd_bake_key.is_some() {
            TakenBy {
                what: format!(
                    "this project's bake {id}{}, holding another Horovod image, Docker or driver",
                    image
                        .created_at
                        .as_deref()
                        .map(|c| format!(" made {}", shown(c)))
                        .unwrap_or_default()
                ),
                own_bake: true,
            }
        } else {
            TakenBy {
                what: format!("this project's image {id}"),
                own_bake: false,
            }
        }))
    }

    /// The project's servers (any cluster's or none) booted from each of `image_ids`: one
    /// listing of the servers for all of them.
    pub async fn servers_booted_from(
        &self,
        image_ids: &[String],
    ) -> Result<BTreeMap<String, Vec<String>>, ProviderError> {
        let servers = self
            .os
            .compute()
            .list_servers(&ServerFilter::default())
            .await?;
        let mut by_image: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for s in servers {
            match s.image_id {
                Some(image) if image_ids.contains(&image) => by_image
                    .entry(image)
                    .or_default()
                    .push(shown(s.name.as_deref().unwrap_or(&s.id))),
                _ => {}
            }
        }
        by_image.values_mut().for_each(|names| names.sort());
        Ok(by_image)
    }

    pub async fn bake(
        &self,
        cluster: &str,
        node: &str,
        name: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<BakedImage, ProviderError> {
        let servers = self.cluster_servers(cluster).await?;
        let server = servers
            .iter()
            .find(|s| s.name.as_deref() == Some(node))
            .ok_or_else(|| ProviderError::Cloud(format!("no server {node} in the cluster")))?;
        if server.status != ServerStatus::Active {
            return Err(ProviderError::Cloud(format!(
                "server {node} is not ACTIVE: a bake needs it running"
            )));
        }
        let key = properties.get(KEY_PROPERTY).cloned().unwrap_or_default();
        let compute = self.os.compute();
        let (compute, id, key) = (&compute, server.id.as_str(), key.as_str());
        let image_id = settle(
            &self.settle,
            || async move { compute.create_image(id, name, properties).await },
            || async move {
                let found = self.os.image().list_by_property(KEY_PROPERTY, key).await?;
                Ok(found
                    .iter()
                    .find(|i| text(i, "name") == Some(name))
                    .and_then(|i| text(i, "id"))
                    .map(str::to_string))
            },
        )
        .await?;
        let image_id = image_id.as_str();
        wait_until(BAKE_DEADLINE, Duration::from_secs(3), move || async move {
            let image = match self.os.image().get_image(image_id).await {
                Ok(Some(i)) => i,
                Ok(None) => {
                    return Probe::Failed(ProviderError::Cloud(format!(
                        "image {image_id} of the bake is gone: the cloud deleted it while it was \
                         made (its compute service's log says why)"
                    )))
                }
                Err(e) => return Probe::Failed(e.into()),
            };
            let task = match compute.get_server(id).await {
                Ok(s) => s.and_then(|s| s.task_state).filter(|t| !t.is_empty()),
                Err(e) => return Probe::Failed(e.into()),
            };
            match (image.status.as_str(), task) {
                ("active", None) => Probe::Ready(baked_image(image)),
                ("killed" | "deleted" | "deactivated", _) => {
                    Probe::Failed(ProviderError::Cloud(format!(
                        "the snapshot of {node} failed: image {image_id} is {} (the compute \
                         service's log says why)",
                        shown(&image.status)
                    )))
                }
                (status, task) => Probe::Waiting(format!(
                    "image {}{}",
                    shown(status),
                    task.map(|t| format!(", server task {}", shown(&t)))
                        .unwrap_or_default()
                )),
            }
        })
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { last, secs } => ProviderError::Cloud(format!(
                "the snapshot of {node} was not done after {secs}s ({last}); `bake` again finds \
                 it once it is, or removes what is left"
            )),
        })
    }
}

/// A kind of server that boots from a bake: `workers: boot from the bake `NAME`: Docker and
/// the Horovod image sha256:0123456789ab on its root disk ...`. On a flavor with an ephemeral
/// disk, where Docker's data goes, the data disk step copies the bake's Docker data onto it.
/// Pure.
pub fn bake_line(role: &str, image: &str, holds: &str, ephemeral: bool) -> String {
    let short = crate::bake::short_image_id(holds);
    let name = shown(image);
    if ephemeral {
        format!(
            "{role}: boot from the bake `{name}`: Docker and the Horovod image {short} on its \
             root disk, copied onto the flavor's ephemeral disk (where Docker's data goes) at \
             the first boot and after each `start` (not installed or sent where that is the \
             profile's image)"
        )
    } else {
        format!(
            "{role}: boot from the bake `{name}`: Docker and the Horovod image {short} on its \
             root disk (not installed or sent where that is the profile's image)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::bake_line;

    #[test]
    fn a_kind_of_server_booted_from_a_bake_says_what_its_disk_holds() {
        let id = "sha256:0123456789abcdef0123";
        assert_eq!(
            bake_line("workers", "hvd-bake", id, false),
            "workers: boot from the bake `hvd-bake`: Docker and the Horovod image \
             sha256:0123456789ab on its root disk (not installed or sent where that is the \
             profile's image)"
        );
        let eph = bake_line("master", "hvd-bake", id, true);
        assert!(
            eph.contains("copied onto the flavor's ephemeral disk")
                && eph.contains("not installed or sent"),
            "{eph}"
        );
        let hostile = bake_line("workers", "a\u{1b}[2J", "\u{7}", false);
        assert!(
            !hostile.contains('\u{1b}') && !hostile.contains('\u{7}'),
            "{hostile}"
        );
    }
}
