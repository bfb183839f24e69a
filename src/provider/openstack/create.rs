//! Creating and deleting one resource at a time: security groups with their rules, routers
//! with their interface, shares with their access rule, floating IPs, servers (with their
//! cloud-config), volumes and attachments. Tags come last, so a half-made resource is seen as
//! failed and replaced.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{tag, OpenStackProvider, META_KEY};
use crate::openstack::{
    FloatingIpCreate, NetworkCreate, Remote, Resource, RouterCreate, RuleCreate,
    SecurityGroupCreate, ServerCreate, ServerNetwork, ShareCreate, SubnetCreate, VolumeCreate,
};
use crate::plan::{Kind, Names, Observed, RuleSource, Spec};
use crate::provider::ProviderError;
use crate::wait::{wait_until, Probe, WaitError};

impl OpenStackProvider {
    async fn create_security_group(
        &self,
        cluster: &str,
        name: &str,
        rules: &[crate::plan::Rule],
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let net = self.os.network();
        let group = net
            .create_security_group(&SecurityGroupCreate {
                name: name.to_string(),
                description: Some(format!("hvd-cluster {cluster}")),
                tags: vec![],
            })
            .await?;
        for rule in rules {
            let remote = match &rule.from {
                RuleSource::Cidr(c) => Remote::Cidr(c.clone()),
                RuleSource::Group(g) if g == name => Remote::Group(group.id.clone()),
                RuleSource::Group(g) => Remote::Group(lookup(ids, g)?.to_string()),
            };
            net.create_security_group_rule(&RuleCreate {
                security_group_id: group.id.clone(),
                protocol: rule.protocol.clone(),
                port_range: rule.ports,
                remote,
                description: Some(format!("hvd-cluster {cluster}")),
                ..RuleCreate::default()
            })
            .await?;
        }
        net.set_tags(Resource::SecurityGroup, &group.id, &[tag(cluster)])
            .await?;
        Ok(group.id)
    }

    async fn create_router(
        &self,
        cluster: &str,
        name: &str,
        external: &str,
        subnet: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let net = self.os.network();
        let external_id = self.network_id(external)?;
        let router = net
            .create_router(&RouterCreate {
                name: name.to_string(),
                external_network_id: Some(external_id),
                tags: vec![],
                ..RouterCreate::default()
            })
            .await?;
        net.add_router_interface(&router.id, lookup(ids, subnet)?)
            .await?;
        net.set_tags(Resource::Router, &router.id, &[tag(cluster)])
            .await?;
        Ok(router.id)
    }

    fn network_id(&self, name: &str) -> Result<String, ProviderError> {
        self.resolved
            .networks
            .get(name)
            .cloned()
            .ok_or_else(|| ProviderError::Resolve {
                what: format!("network `{name}`"),
                detail: "was not resolved before use".into(),
            })
    }

    /// Creates the share, waits until it is available (one share: a GET per tick is fine),
    /// then grants the subnet read-write NFS access.
    async fn create_share(
        &self,
        cluster: &str,
        name: &str,
        size_gb: u32,
        share_type: Option<&str>,
        cidr: &str,
    ) -> Result<String, ProviderError> {
        let api = self.os.share();
        let share = api
            .create_share(&ShareCreate {
                name: name.to_string(),
                size: u64::from(size_gb),
                share_proto: Some("NFS".into()),
                share_type: share_type.map(str::to_string),
                metadata: BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]),
                ..ShareCreate::default()
            })
            .await?;
        let (api, id) = (&api, share.id.as_str());
        wait_until(
            Duration::from_secs(300),
            Duration::from_secs(2),
            move || async move {
                match api.get_share(id).await {
                    Ok(Some(s)) if s.is_available() => Probe::Ready(()),
                    Ok(Some(s)) if s.is_error() => Probe::Failed(ProviderError::Cloud(format!(
                        "share {name} went to status {}",
                        s.status.unwrap_or_default()
                    ))),
                    Ok(_) => Probe::Waiting(format!("share {name} to be available")),
                    Err(e) => Probe::Failed(e.into()),
                }
            },
        )
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { .. } => {
                ProviderError::Cloud(format!("share {name} not available after 300s"))
            }
        })?;
        api.allow_ip_access(&share.id, cidr, true).await?;
        Ok(share.id)
    }

    async fn create_floating_ip(
        &self,
        cluster: &str,
        name: &str,
        pool: &str,
        server: &str,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let server_id = lookup(ids, server)?;
        let net = self.os.network();
        let ports = net.list_ports_by_device(server_id).await?;
        let port = ports.first().ok_or_else(|| {
            ProviderError::Cloud(format!(
                "server {server} has no port to put a floating IP on"
            ))
        })?;
        let fip = net
            .create_floating_ip(&FloatingIpCreate {
                floating_network_id: self.network_id(pool)?,
                port_id: Some(port.id.clone()),
                description: Some(name.to_string()),
                tags: vec![tag(cluster)],
                ..FloatingIpCreate::default()
            })
            .await?;
        Ok(fip.id)
    }

    async fn create_server(
        &self,
        cluster: &str,
        d: &crate::plan::Desired,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let Spec::Server {
            role,
            index,
            flavor,
            image,
            security_groups,
            network,
        } = &d.spec
        else {
            return Err(ProviderError::Cloud(format!("{} is not a server", d.name)));
        };
        let flavor_id = self
            .resolved
            .flavors
            .get(flavor)
            .map(|f| f.id.clone())
            .ok_or_else(|| ProviderError::Resolve {
                what: format!("flavor `{flavor}`"),
                detail: "was not resolved before use".into(),
            })?;
        let image_id =
            self.resolved
                .images
                .get(image)
                .cloned()
                .ok_or_else(|| ProviderError::Resolve {
                    what: format!("image `{image}`"),
                    detail: "was not resolved before use".into(),
                })?;
        let network_id = match ids.get(network) {
            Some(id) => id.clone(),
            None => self.network_id(network)?,
        };
        let groups = security_groups
            .iter()
            .map(|g| lookup(ids, g).map(str::to_string))
            .collect::<Result<Vec<_>, _>>()?;
        let role_name = role.as_str();
        let id = self
            .os
            .compute()
            .create_server(&ServerCreate {
                name: d.name.clone(),
                flavor_id,
                image_id,
                networks: vec![ServerNetwork::Network(network_id)],
                key_name: Some(Names(cluster).keypair()),
                security_groups: groups,
                metadata: BTreeMap::from([
                    (META_KEY.to_string(), cluster.to_string()),
                    ("hvd-role".to_string(), role_name.to_string()),
                    ("hvd-index".to_string(), index.to_string()),
                ]),
                tags: vec![tag(cluster)],
                user_data: Some(
                    crate::render::cloud_config(cluster, &d.name, role_name)
                        .map_err(|e| ProviderError::Cloud(e.to_string()))?
                        .into_bytes(),
                ),
                ..ServerCreate::default()
            })
            .await?;
        Ok(id)
    }

    pub async fn create(
        &self,
        cluster: &str,
        d: &crate::plan::Desired,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let net = self.os.network();
        match &d.spec {
            Spec::Keypair => {
                let key = self
                    .public_key
                    .as_deref()
                    .ok_or_else(|| ProviderError::Cloud("no public key to import".into()))?;
                Ok(self.os.compute().import_keypair(&d.name, key).await?.name)
            }
            Spec::SecurityGroup { rules } => {
                self.create_security_group(cluster, &d.name, rules, ids)
                    .await
            }
            Spec::Network => Ok(net
                .create_network(&NetworkCreate {
                    name: d.name.clone(),
                    tags: vec![tag(cluster)],
                    ..NetworkCreate::default()
                })
                .await?
                .id),
            Spec::Subnet {
                network,
                cidr,
                dns_nameservers,
            } => Ok(net
                .create_subnet(&SubnetCreate {
                    name: d.name.clone(),
                    network_id: lookup(ids, network)?.to_string(),
                    cidr: cidr.clone(),
                    ip_version: Some(4),
                    dns_nameservers: dns_nameservers.clone(),
                    enable_dhcp: Some(true),
                    tags: vec![tag(cluster)],
                    ..SubnetCreate::default()
                })
                .await?
                .id),
            Spec::Router {
                external_network,
                subnet,
            } => {
                self.create_router(cluster, &d.name, external_network, subnet, ids)
                    .await
            }
            Spec::Share {
                size_gb,
                share_type,
                access_cidr,
                ..
            } => {
                self.create_share(
                    cluster,
                    &d.name,
                    *size_gb,
                    share_type.as_deref(),
                    access_cidr,
                )
                .await
            }
            Spec::Volume { size_gb } => Ok(self
                .os
                .volume()
                .create_volume(&VolumeCreate {
                    name: d.name.clone(),
                    size: u64::from(*size_gb),
                    metadata: BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]),
                    ..VolumeCreate::default()
                })
                .await?
                .id),
            Spec::Server { .. } => self.create_server(cluster, d, ids).await,
            Spec::FloatingIp { pool, server } => {
                self.create_floating_ip(cluster, &d.name, pool, server, ids)
                    .await
            }
            Spec::VolumeAttachment { volume, server } => {
                let server_id = lookup(ids, server)?;
                let volume_id = lookup(ids, volume)?;
                self.os
                    .compute()
                    .attach_volume(server_id, volume_id, None)
                    .await?;
                Ok(format!("{server_id}/{volume_id}"))
            }
        }
    }

    pub async fn delete(&self, old: &Observed) -> Result<(), ProviderError> {
        let net = self.os.network();
        match old.kind {
            Kind::Keypair => self.os.compute().delete_keypair(&old.id).await?,
            Kind::SecurityGroup => net.delete_security_group(&old.id).await?,
            Kind::Network => net.delete_network(&old.id).await?,
            Kind::Subnet => net.delete_subnet(&old.id).await?,
            Kind::Router => {
                // A router goes only after its interfaces (and gateway) are removed.
                for port in net.list_ports_by_device(&old.id).await? {
                    if port.device_owner.starts_with("network:router_interface") {
                        for ip in &port.fixed_ips {
                            if let Some(subnet) = &ip.subnet_id {
                                net.remove_router_interface(&old.id, subnet).await?;
                            }
                        }
                    }
                }
                net.delete_router(&old.id).await?
            }
            Kind::FloatingIp => net.delete_floating_ip(&old.id).await?,
            Kind::Server => self.os.compute().delete_server(&old.id).await?,
            Kind::Share => self.os.share().delete_share(&old.id).await?,
            Kind::Volume => self.os.volume().delete_volume(&old.id).await?,
            Kind::VolumeAttachment => {
                if let Some((server, volume)) = old.id.split_once('/') {
                    self.os.compute().detach_volume(server, volume).await?;
                }
            }
        }
        Ok(())
    }
}

fn lookup<'a>(ids: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, ProviderError> {
    ids.get(name).map(String::as_str).ok_or_else(|| {
        ProviderError::Cloud(format!(
            "{name} does not exist yet (it is created earlier in the plan)"
        ))
    })
}
