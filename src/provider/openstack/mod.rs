//! The OpenStack provider: maps plan resources onto Nova, Neutron, Glance, Manila and Cinder.
//!
//! Every resource is named `<cluster>-<role>[-<i>]` and tagged `hvd-cluster:<cluster>`
//! (Neutron tags, Nova tags + metadata, Manila/Cinder metadata). Neutron sets tags in a second
//! call after create, so observation also looks the fixed names up: a process killed between
//! the two calls leaves nothing that `down` cannot find. Security groups and routers get
//! their tag only once their rules / interface exist, so one left half-made by an
//! interrupted run is seen (by name) as failed and replaced, not kept.
//!
//! [`desired`] lays the cluster out; `resolve` looks the profile's names up, `quota` reads
//! the limits, `observe` finds what exists, `create` makes and deletes one resource at a time,
//! `reboot` reboots servers (a GPU driver that loads only after one), `lifecycle` shelves
//! and unshelves them (`stop`, `start`), `credential` makes the one autostop leaves on the master.

mod bake;
mod create;
pub mod credential;
mod delete;
pub mod desired;
mod existing_share;
mod existing_volume;
mod lifecycle;
mod master_tls;
mod observe;
mod quota;
mod reboot;
mod resolve;
pub mod settle;

pub use observe::pick_export;
pub use resolve::gpus_in_extra_specs;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::openstack::{self, CloudConfig, Interface, OpenStack, OpenStackError};
use crate::plan::{Blueprint, Desired, Kind, Observed, Plan, QuotaDelta, Shortfall};
use crate::profile::Profile;
use crate::provider::{Freed, Provider, ProviderError, Screen};
use crate::state::Node;

/// The tag (Nova, Neutron) and metadata key (Nova, Manila, Cinder) that mark a cluster's resources.
pub fn tag(cluster: &str) -> String {
    format!("hvd-cluster:{cluster}")
}
pub const META_KEY: &str = "hvd-cluster";
/// Cinder metadata that names the server a root volume belongs to (set by `down` before the
/// server goes, so a root volume that outlives it is found again).
pub const ROOT_OF_KEY: &str = "hvd-root-of";
/// Cinder and Manila metadata that marks /shared's volume or share to outlive the cluster
/// (`storage.keep`): `down` and plans leave it; the next `up` finds it by [`META_KEY`].
pub const KEEP_KEY: &str = "hvd-keep";

/// Names the profile uses, resolved to cloud ids before any change is made.
#[derive(Debug, Default, Clone)]
struct Resolved {
    flavors: HashMap<String, openstack::Flavor>,
    images: HashMap<String, String>,
    /// The images that are bakes (`hvd-cluster bake`): the Horovod image's id each holds.
    bakes: HashMap<String, String>,
    /// What a root volume made from each image needs at least (GiB; its min_disk or size).
    image_needs_gb: HashMap<String, u64>,
    /// Networks by name: external networks, the floating IP pool, an existing network.
    networks: HashMap<String, String>,
    /// `storage.volume`'s id, found and checked (one list of the project's volumes).
    existing_volume: Option<String>,
    /// `storage.share`'s id, found and checked (one list of the project's shares).
    existing_share: Option<String>,
    /// Their sizes (GiB), for the room the profile's `[[data]]` needs on /shared.
    existing_volume_gb: Option<u64>,
    existing_share_gb: Option<u64>,
    /// Where the master goes for `storage.volume`'s volume (its availability zone).
    master_zone: Option<resolve::MasterZone>,
}

pub struct OpenStackProvider {
    os: OpenStack,
    resolved: Resolved,
    public_key: Option<Arc<str>>,
    /// Checks server names and addresses in every reply (see [`Screen`]).
    screen: Screen,
    /// Creates and actions with an unknown outcome: looked up, then tried again (bounded).
    settle: settle::SettlePolicy,
}

impl From<OpenStackError> for ProviderError {
    fn from(e: OpenStackError) -> Self {
        ProviderError::from_openstack(&e)
    }
}

impl ProviderError {
    /// Over quota, a refusal, or (no clear answer after the retries) [`ProviderError::Unsettled`].
    pub fn from_openstack(e: &OpenStackError) -> Self {
        if e.is_quota_exceeded() {
            ProviderError::Quota(e.to_string())
        } else if e.certainty().is_ambiguous() {
            ProviderError::Unsettled {
                call: crate::input::shown_message(&e.to_string(), 400),
                tries: String::new(),
            }
        } else {
            ProviderError::Cloud(e.to_string())
        }
    }
}

impl OpenStackProvider {
    /// Reads the cloud configuration as the `openstack` CLI does and authenticates.
    pub async fn connect(
        cloud: Option<&str>,
        region: Option<&str>,
        interface: Option<&str>,
    ) -> Result<OpenStackProvider, ProviderError> {
        let mut config =
            CloudConfig::load(cloud).map_err(|e| ProviderError::Cloud(e.to_string()))?;
        if let Some(region) = region {
            config.region = Some(region.to_string());
        }
        if let Some(interface) = interface {
            config.interface =
                Interface::parse(interface).ok_or_else(|| ProviderError::Resolve {
                    what: format!("interface `{}`", crate::input::shown(interface)),
                    detail: "must be public, internal or admin".into(),
                })?;
        }
        let os = OpenStack::connect(&config).await?;
        Ok(OpenStackProvider {
            os,
            resolved: Resolved::default(),
            public_key: None,
            screen: Screen::default(),
            settle: settle::SettlePolicy::default(),
        })
    }

    pub fn client(&self) -> &OpenStack {
        &self.os
    }

    /// API calls made so far (for the benchmark).
    pub fn calls(&self) -> u64 {
        self.os.calls()
    }

    pub fn set_public_key(&mut self, key: String) {
        self.public_key = Some(Arc::from(key));
    }
}

impl Provider for OpenStackProvider {
    fn blueprint(&self) -> &'static dyn Blueprint {
        &desired::OpenStackBlueprint
    }

    fn resolve<'a>(&'a mut self, p: &'a Profile) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenStackProvider::resolve(self, p))
    }

    fn complete_profile(&self, p: &mut Profile, container_bytes: Option<u64>) -> Vec<String> {
        OpenStackProvider::complete_profile(self, p, container_bytes)
    }

    fn disks(&self, p: &Profile) -> Vec<String> {
        OpenStackProvider::disks(self, p)
    }

    fn shared_capacity(&self, p: &Profile) -> Option<(String, u64)> {
        use crate::profile::StorageKind;
        let shown = crate::input::shown;
        match p.storage.kind {
            StorageKind::MasterNfs => match (&p.storage.volume, p.storage.volume_gb) {
                (Some(v), _) => self
                    .resolved
                    .existing_volume_gb
                    .map(|gb| (format!("volume `{}`", shown(v)), gb)),
                (None, Some(gb)) => Some(("its volume (storage.volume_gb)".into(), gb.into())),
                (None, None) => None,
            },
            StorageKind::Manila => match &p.storage.share {
                Some(s) => self
                    .resolved
                    .existing_share_gb
                    .map(|gb| (format!("share `{}`", shown(s)), gb)),
                None => Some((
                    "its share (storage.size_gb)".into(),
                    p.storage.size_gb.unwrap_or(10).into(),
                )),
            },
            StorageKind::None => None,
        }
    }

    fn set_public_key(&mut self, key: String) {
        OpenStackProvider::set_public_key(self, key)
    }

    fn observe<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
        Box::pin(OpenStackProvider::observe(self, cluster))
    }

    fn poll<'a>(
        &'a self,
        cluster: &'a str,
        kind: Kind,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
        Box::pin(OpenStackProvider::poll(self, cluster, kind))
    }

    fn create<'a>(
        &'a self,
        cluster: &'a str,
        desired: &'a Desired,
        ids: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(OpenStackProvider::create(self, cluster, desired, ids))
    }

    fn delete<'a>(&'a self, old: &'a Observed) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenStackProvider::delete(self, old))
    }

    fn nodes<'a>(&'a self, cluster: &'a str) -> BoxFuture<'a, Result<Vec<Node>, ProviderError>> {
        Box::pin(OpenStackProvider::nodes(self, cluster))
    }

    fn reboot<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenStackProvider::reboot(self, cluster, nodes))
    }

    fn console<'a>(
        &'a self,
        cluster: &'a str,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(OpenStackProvider::console(self, cluster, node))
    }

    fn bakes(&self) -> bool {
        true
    }

    fn bake_source<'a>(
        &'a self,
        image: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(OpenStackProvider::bake_source(self, image))
    }

    fn find_bake<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::provider::BakedImage>, ProviderError>> {
        Box::pin(OpenStackProvider::find_bake(self, key))
    }

    fn list_bakes(&self) -> BoxFuture<'_, Result<Vec<crate::provider::BakedImage>, ProviderError>> {
        Box::pin(OpenStackProvider::list_bakes(self))
    }

    fn bake_name_taken<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::bake::TakenBy>, ProviderError>> {
        Box::pin(OpenStackProvider::bake_name_taken(self, name))
    }

    fn servers_booted_from<'a>(
        &'a self,
        image_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, ProviderError>> {
        Box::pin(OpenStackProvider::servers_booted_from(self, image_ids))
    }

    fn delete_bake<'a>(
        &'a self,
        bake: &'a crate::provider::BakedImage,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move { Ok(self.os.image().delete_image(&bake.id).await?) })
    }

    fn bake<'a>(
        &'a self,
        cluster: &'a str,
        node: &'a str,
        name: &'a str,
        properties: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<crate::provider::BakedImage, ProviderError>> {
        Box::pin(OpenStackProvider::bake(
            self, cluster, node, name, properties,
        ))
    }

    fn stop<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<Freed, ProviderError>> {
        Box::pin(OpenStackProvider::stop(self, cluster, nodes))
    }

    fn start<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenStackProvider::start(self, cluster, nodes))
    }

    fn autostop_target<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<crate::provider::AutostopTarget, ProviderError>> {
        Box::pin(OpenStackProvider::autostop_target(self, cluster))
    }

    fn autostop_credential<'a>(
        &'a self,
        cluster: &'a str,
        target: &'a crate::provider::AutostopTarget,
        unrestricted_ok: bool,
    ) -> BoxFuture<'a, Result<crate::provider::MasterCredential, ProviderError>> {
        Box::pin(OpenStackProvider::autostop_credential(
            self,
            cluster,
            target,
            unrestricted_ok,
        ))
    }

    fn autostop_state<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async move {
            Ok(observe::autostop_word(
                cluster,
                &self.servers(cluster).await?,
            ))
        })
    }

    fn status_view<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<crate::provider::StatusView, ProviderError>> {
        Box::pin(OpenStackProvider::status_view(self, cluster))
    }

    fn delete_credentials<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<usize, ProviderError>> {
        Box::pin(async move { Ok(credential::delete_stop_credentials(&self.os, cluster).await?) })
    }

    fn data_target(&self) -> BoxFuture<'_, Result<crate::provider::DataTarget, ProviderError>> {
        Box::pin(async move {
            Ok(crate::provider::DataTarget {
                identity_url: self.os.config().auth_url.clone(),
                object_store_url: self.os.endpoint(openstack::Service::ObjectStore).await?,
                tls: self.master_tls()?,
            })
        })
    }

    fn data_credential<'a>(
        &'a self,
        cluster: &'a str,
        containers: &'a [String],
    ) -> BoxFuture<'a, Result<crate::provider::MasterCredential, ProviderError>> {
        Box::pin(OpenStackProvider::data_credential(
            self, cluster, containers,
        ))
    }

    fn delete_data_credentials<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<usize, ProviderError>> {
        Box::pin(async move {
            Ok(
                credential::delete_credentials_for(&self.os, cluster, credential::Purpose::Data)
                    .await?,
            )
        })
    }

    fn flavor_gpus(&self, flavor: &str) -> u32 {
        OpenStackProvider::flavor_gpus(self, flavor)
    }

    fn shortfalls<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> BoxFuture<'a, Result<Vec<Shortfall>, ProviderError>> {
        Box::pin(async move {
            let delta = QuotaDelta::of(plan, |f| self.flavor_size(f));
            Ok(crate::plan::shortfalls(&delta, &self.quotas().await?))
        })
    }

    fn share_export<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(OpenStackProvider::share_export(self, cluster))
    }

    fn grant_share<'a>(
        &'a self,
        p: &'a Profile,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async move {
            let outlives = p.storage.keep || p.storage.share.is_some();
            if p.storage.kind != crate::profile::StorageKind::Manila || !outlives {
                return Ok(None);
            }
            OpenStackProvider::grant_share(self, &p.name, &desired::share_access_cidr(p)).await
        })
    }

    fn release_share<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(OpenStackProvider::release_share(self, cluster))
    }

    fn calls(&self) -> u64 {
        OpenStackProvider::calls(self)
    }
}

/// A server as Nova lists one in a given status and task, for the unit tests of the
/// modules here.
#[cfg(test)]
fn server_in(status: &str, task: Option<&str>) -> openstack::Server {
    openstack::Server {
        id: "abc".into(),
        name: Some("c-worker-1".into()),
        status: openstack::ServerStatus::from(status.to_string()),
        task_state: task.map(str::to_string),
        ..openstack::Server::default()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_preferred_export_a_tenant_can_reach_is_mounted() {
        use crate::openstack::share::ExportLocation;
        let loc = |path: &str, preferred: bool, admin: Option<bool>| ExportLocation {
            id: None,
            path: path.into(),
            preferred,
            is_admin_only: admin,
        };
        assert_eq!(pick_export(&[]), None);
        assert_eq!(
            pick_export(&[
                loc("10.0.0.9:/a", false, None),
                loc("10.0.0.5:/b", true, Some(false))
            ]),
            Some("10.0.0.5:/b".into())
        );
        assert_eq!(
            pick_export(&[
                loc("192.168.0.2:/admin", true, Some(true)),
                loc("10.0.0.9:/a", false, None)
            ]),
            Some("10.0.0.9:/a".into())
        );
    }
    use super::observe::completeness;
    use super::resolve::not_found;
    use super::*;
    use crate::plan::Health;

    #[test]
    fn gpus_from_extra_specs() {
        let specs = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            gpus_in_extra_specs(&specs(&[("pci_passthrough:alias", "a100:2")])),
            2
        );
        assert_eq!(
            gpus_in_extra_specs(&specs(&[("pci_passthrough:alias", "a100:2,t4:1")])),
            3
        );
        assert_eq!(gpus_in_extra_specs(&specs(&[("resources:VGPU", "1")])), 1);
        assert_eq!(
            gpus_in_extra_specs(&specs(&[("gpu:model", "nvidia-a100"), ("gpu:count", "4")])),
            4
        );
        assert_eq!(
            gpus_in_extra_specs(&specs(&[("hw:cpu_policy", "dedicated")])),
            0
        );
    }

    #[test]
    fn unknown_names_suggest_the_nearest() {
        let e = not_found("flavor", "m1.smal", &["m1.small", "m1.medium", "g1.a100"]).to_string();
        assert_eq!(e, "flavor `m1.smal`: not found on this cloud; did you mean `m1.small`? (available: g1.a100, m1.medium, m1.small)");
    }

    #[test]
    fn interrupted_groups_are_not_kept() {
        assert_eq!(completeness(true), Health::Ready);
        assert!(matches!(completeness(false), Health::Failed(_)));
    }
}
