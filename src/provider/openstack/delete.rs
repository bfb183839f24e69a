//! Deleting one resource. The client retries a DELETE whose outcome is unknown and takes a
//! 404 as done; if it still has no clear answer, [`confirm_gone`] looks the resource up.

use std::collections::BTreeMap;
use std::time::Duration;

use super::settle::confirm_gone;
use super::{OpenStackProvider, META_KEY, ROOT_OF_KEY};
use crate::openstack::{Resource, ServerStatus};
use crate::plan::{Kind, Observed};
use crate::provider::ProviderError;
use crate::wait::{wait_until, Probe, WaitError};

/// How long a deleted server's root volume may take to go.
const ROOT_VOLUME_GONE: Duration = Duration::from_secs(300);
/// How long a deleted share may take to go.
const SHARE_GONE: Duration = Duration::from_secs(300);

impl OpenStackProvider {
    /// Deletes one resource. The client retries a DELETE whose outcome is unknown and takes a
    /// 404 as done; if it still has no clear answer, the resource is looked up: gone is deleted.
    pub async fn delete(&self, old: &Observed) -> Result<(), ProviderError> {
        let net = self.os.network();
        let compute = self.os.compute();
        let id = old.id.as_str();
        let neutron = |r: Resource| {
            let net = net.clone();
            async move {
                confirm_gone(net.delete_resource(r, id), || async {
                    net.exists(r, id).await
                })
                .await
            }
        };
        match old.kind {
            Kind::Keypair => {
                confirm_gone(compute.delete_keypair(id), || async {
                    Ok(compute.get_keypair(id).await?.is_some())
                })
                .await?
            }
            Kind::SecurityGroup => neutron(Resource::SecurityGroup).await?,
            Kind::Network => neutron(Resource::Network).await?,
            Kind::Subnet => neutron(Resource::Subnet).await?,
            Kind::Router => {
                // A router goes only after its interfaces (and gateway) are removed.
                for port in net.list_ports_by_device(id).await? {
                    if port.device_owner.starts_with("network:router_interface") {
                        for ip in &port.fixed_ips {
                            if let Some(subnet) = &ip.subnet_id {
                                let port_id = port.id.as_str();
                                confirm_gone(net.remove_router_interface(id, subnet), || async {
                                    net.exists(Resource::Port, port_id).await
                                })
                                .await?;
                            }
                        }
                    }
                }
                neutron(Resource::Router).await?
            }
            Kind::FloatingIp => neutron(Resource::FloatingIp).await?,
            Kind::Server => {
                let roots = self.mark_root_volumes(id, &old.name).await?;
                confirm_gone(compute.delete_server(id), || async {
                    Ok(compute
                        .get_server(id)
                        .await?
                        .is_some_and(|s| s.status != ServerStatus::Deleted))
                })
                .await?;
                self.delete_shelve_snapshots(&old.name, id).await?;
                self.delete_root_volumes(&old.name, &roots).await?;
            }
            Kind::Share => {
                let api = self.os.share();
                confirm_gone(api.delete_share(id), || async {
                    Ok(api.get_share(id).await?.is_some())
                })
                .await?;
                self.share_gone(&old.name, id).await?;
            }
            Kind::Volume => {
                let api = self.os.volume();
                confirm_gone(api.delete_volume(id), || async {
                    Ok(api.get_volume(id).await?.is_some())
                })
                .await?
            }
            Kind::VolumeAttachment => {
                if let Some((server, volume)) = id.split_once('/') {
                    confirm_gone(compute.detach_volume(server, volume), || async {
                        let found = compute.list_volume_attachments(server).await?;
                        Ok(found.iter().any(|a| a.volume_id == volume))
                    })
                    .await?
                }
            }
        }
        Ok(())
    }

    /// A volume-backed server's root volumes (the ones Nova deletes with it), marked with the
    /// cluster and the server before the server goes: if Nova's delete of one fails, `down`
    /// (or the next `up`) finds it by that mark, even with the state folder lost.
    async fn mark_root_volumes(&self, id: &str, name: &str) -> Result<Vec<String>, ProviderError> {
        let Some(server) = self.os.compute().get_server(id).await? else {
            return Ok(Vec::new());
        };
        let roots: Vec<String> = server
            .volumes_attached
            .iter()
            .filter(|v| v.delete_on_termination)
            .map(|v| v.id.clone())
            .collect();
        let Some(cluster) = server.metadata.get(META_KEY) else {
            return Ok(roots);
        };
        let mark = BTreeMap::from([
            (META_KEY.to_string(), cluster.clone()),
            (ROOT_OF_KEY.to_string(), name.to_string()),
        ]);
        let api = self.os.volume();
        for v in &roots {
            api.add_metadata(v, &mark).await?;
        }
        Ok(roots)
    }

    /// Waits until Manila has removed a share it accepted to delete (its delete is
    /// asynchronous: a share in `deleting` still counts against the quota, and a later `up`
    /// of the same cluster would find it by its metadata); `error_deleting` is an error.
    async fn share_gone(&self, name: &str, id: &str) -> Result<(), ProviderError> {
        let api = self.os.share();
        let api = &api;
        wait_until(SHARE_GONE, Duration::from_secs(2), || async move {
            match api.get_share(id).await {
                Ok(None) => Probe::Ready(()),
                Ok(Some(s)) if s.is_error() => Probe::Failed(ProviderError::Cloud(format!(
                    "Manila could not delete share {name} ({id}): status {}",
                    s.status.unwrap_or_default()
                ))),
                Ok(Some(_)) => Probe::Waiting(format!("share {name} to go")),
                Err(e) => Probe::Failed(e.into()),
            }
        })
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { .. } => ProviderError::Cloud(format!(
                "share {name} ({id}) is still there {}s after its delete",
                SHARE_GONE.as_secs()
            )),
        })
    }

    /// Waits for Nova to delete a deleted server's root volumes, and deletes any it left
    /// (detached, or failed): nothing of the server outlives `down`.
    async fn delete_root_volumes(&self, server: &str, ids: &[String]) -> Result<(), ProviderError> {
        let api = self.os.volume();
        for id in ids {
            let api = &api;
            wait_until(ROOT_VOLUME_GONE, Duration::from_secs(2), || async move {
                match api.get_volume(id).await {
                    Ok(None) => Probe::Ready(()),
                    Ok(Some(v)) if v.status == "available" || v.status.starts_with("error") => {
                        match api.delete_volume(id).await {
                            Ok(()) => Probe::Waiting(format!("root volume of {server} to go")),
                            Err(e) if released_soon(&e) => Probe::Waiting(format!(
                                "root volume of {server} to be released by its server"
                            )),
                            Err(e) => Probe::Failed(ProviderError::from(e)),
                        }
                    }
                    Ok(Some(v)) => Probe::Waiting(format!(
                        "root volume of {server} to go (status {})",
                        v.status
                    )),
                    Err(e) => Probe::Failed(e.into()),
                }
            })
            .await
            .map_err(|e| match e {
                WaitError::Failed(e) => e,
                WaitError::TimedOut { .. } => ProviderError::Cloud(format!(
                    "the root volume {id} of {server} is still there {}s after its server",
                    ROOT_VOLUME_GONE.as_secs()
                )),
            })?;
        }
        Ok(())
    }

    /// The snapshot `stop` (Nova's shelve) made of a server, once the server is deleted:
    /// Nova deletes it itself on unshelve and on the delete of a shelved server, but a shelve
    /// that failed or was cut short leaves `<server>-shelved` behind. Only images Nova made
    /// from this very server (`instance_uuid`) are deleted.
    async fn delete_shelve_snapshots(&self, server: &str, id: &str) -> Result<(), ProviderError> {
        let images = self.os.image();
        for image in images.list_by_name(&format!("{server}-shelved")).await? {
            if image.instance_uuid.as_deref() == Some(id) {
                images.delete_image(&image.id).await?;
            }
        }
        Ok(())
    }
}

/// A root volume's delete refused while Nova and Cinder still tear down its attachment (or
/// Nova deleting it first): Cinder answers 400 "Invalid volume ... must not be ... attached"
/// for a volume already `available` whose attachment is not gone yet (seen in the test
/// cloud's CI), or 404 once Nova's own delete won. The next look decides; the wait is bounded.
fn released_soon(e: &crate::openstack::OpenStackError) -> bool {
    e.is_not_found() || e.status() == Some(400) || e.is_conflict()
}

#[cfg(test)]
mod release_tests {
    use super::*;
    use crate::openstack::error::{ApiError, OpenStackError};

    fn cinder(status: u16) -> OpenStackError {
        crate::openstack::error::classify(ApiError {
            service: "cinder",
            method: "DELETE".into(),
            path: "/v3/volumes/x".into(),
            status,
            code: Some("badRequest".into()),
            message: "Invalid volume: Volume status must be available ... must not be ... attached"
                .into(),
            request_id: None,
            retry_after: None,
        })
    }

    #[test]
    fn a_root_volume_still_being_released_is_waited_for_not_an_error() {
        assert!(released_soon(&cinder(400)));
        assert!(released_soon(&cinder(404)));
        assert!(released_soon(&cinder(409)));
        assert!(!released_soon(&cinder(403)));
        assert!(!released_soon(&cinder(500)));
    }
}
