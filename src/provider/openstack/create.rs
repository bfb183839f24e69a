//! Creating one resource at a time: security groups with their rules, routers
//! with their interface, shares with their access rule, floating IPs, servers (with their
//! cloud-config), volumes and attachments. Tags come last, so a half-made resource is seen as
//! failed and replaced. Every create and action goes through [`settle`]: after a failure
//! with no clear answer the result is looked up and adopted (tagged if its tag was lost)
//! before anything is sent again. Deletes are in delete.rs.

use std::collections::BTreeMap;
use std::time::Duration;

use super::settle::{adoption, rule_matches, settle, Adoption};
use super::{tag, OpenStackProvider, KEEP_KEY, META_KEY};
use crate::openstack::{
    BootVolume, FloatingIpCreate, NetworkCreate, Query, Remote, Resource, RouterCreate, RuleCreate,
    SecurityGroupCreate, ServerCreate, ServerFilter, ServerNetwork, ServerStatus, ShareCreate,
    SubnetCreate, VolumeCreate,
};
use crate::plan::{Names, RuleSource, Spec};
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
        let policy = &self.settle;
        let ours = tag(cluster);
        let group_id = settle(
            policy,
            || async {
                Ok(net
                    .create_security_group(&SecurityGroupCreate {
                        name: name.to_string(),
                        description: Some(format!("hvd-cluster {cluster}")),
                        tags: vec![],
                    })
                    .await?
                    .id)
            },
            || async {
                let found = net.list_security_groups(&Query::new().name(name)).await?;
                Ok(found
                    .into_iter()
                    .find(|g| adoption(&g.tags, &ours) != Adoption::NotOurs)
                    .map(|g| g.id))
            },
        )
        .await?;
        for rule in rules {
            let remote = match &rule.from {
                RuleSource::Cidr(c) => Remote::Cidr(c.clone()),
                RuleSource::Group(g) if g == name => Remote::Group(group_id.clone()),
                RuleSource::Group(g) => Remote::Group(lookup(ids, g)?.to_string()),
            };
            let create = RuleCreate {
                security_group_id: group_id.clone(),
                protocol: rule.protocol.clone(),
                port_range: rule.ports,
                remote,
                description: Some(format!("hvd-cluster {cluster}")),
                ..RuleCreate::default()
            };
            let (create, group_id) = (&create, group_id.as_str());
            settle(
                policy,
                || async { net.create_security_group_rule(create).await.map(|_| ()) },
                || async {
                    let groups = net
                        .list_security_groups(&Query::new().eq("id", group_id))
                        .await?;
                    Ok(groups
                        .iter()
                        .flat_map(|g| &g.security_group_rules)
                        .any(|r| rule_matches(create, r))
                        .then_some(()))
                },
            )
            .await?;
        }
        // The tag last: a group interrupted before all its rules is replaced, not kept.
        net.set_tags(Resource::SecurityGroup, &group_id, &[ours])
            .await?;
        Ok(group_id)
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
        let policy = &self.settle;
        let ours = tag(cluster);
        let router_id = settle(
            policy,
            || async {
                Ok(net
                    .create_router(&RouterCreate {
                        name: name.to_string(),
                        external_network_id: Some(external_id.clone()),
                        tags: vec![],
                        ..RouterCreate::default()
                    })
                    .await?
                    .id)
            },
            || async {
                let found = net.list_routers(&Query::new().name(name)).await?;
                Ok(found
                    .into_iter()
                    .find(|r| adoption(&r.tags, &ours) != Adoption::NotOurs)
                    .map(|r| r.id))
            },
        )
        .await?;
        let (router, subnet_id) = (router_id.as_str(), lookup(ids, subnet)?);
        settle(
            policy,
            || async {
                net.add_router_interface(router, subnet_id)
                    .await
                    .map(|_| ())
            },
            || async {
                let ports = net.list_ports_by_device(router).await?;
                Ok(ports
                    .iter()
                    .any(|p| {
                        p.device_owner.starts_with("network:router_interface")
                            && p.fixed_ips
                                .iter()
                                .any(|ip| ip.subnet_id.as_deref() == Some(subnet_id))
                    })
                    .then_some(()))
            },
        )
        .await?;
        net.set_tags(Resource::Router, router, std::slice::from_ref(&ours))
            .await?;
        Ok(router_id)
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
    /// then grants the subnet read-write NFS access. A kept share carries its mark and the
    /// CIDR of that grant, which `down` takes back (see `existing_share`).
    async fn create_share(
        &self,
        cluster: &str,
        name: &str,
        size_gb: u32,
        share_type: Option<&str>,
        cidr: &str,
        keep: bool,
    ) -> Result<String, ProviderError> {
        let api = self.os.share();
        let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
        let mut marks = meta.clone();
        if keep {
            marks.insert(KEEP_KEY.to_string(), "true".to_string());
            marks.insert(
                super::existing_share::ACCESS_KEY.to_string(),
                cidr.to_string(),
            );
        }
        let share_id = settle(
            &self.settle,
            || async {
                Ok(api
                    .create_share(&ShareCreate {
                        name: name.to_string(),
                        size: u64::from(size_gb),
                        share_proto: Some("NFS".into()),
                        share_type: share_type.map(str::to_string),
                        metadata: marks.clone(),
                        ..ShareCreate::default()
                    })
                    .await?
                    .id)
            },
            || async {
                let found = api.list_shares(&meta).await?;
                Ok(found
                    .into_iter()
                    .find(|s| s.name.as_deref() == Some(name))
                    .map(|s| s.id))
            },
        )
        .await?;
        let (api, id) = (&api, share_id.as_str());
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
        self.allow_network(id, cidr).await?;
        Ok(share_id)
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
        let pool_id = self.network_id(pool)?;
        let ours = tag(cluster);
        let ours = &ours;
        settle(
            &self.settle,
            || async {
                Ok(net
                    .create_floating_ip(&FloatingIpCreate {
                        floating_network_id: pool_id.clone(),
                        port_id: Some(port.id.clone()),
                        description: Some(name.to_string()),
                        tags: vec![ours.clone()],
                        ..FloatingIpCreate::default()
                    })
                    .await?
                    .id)
            },
            || async {
                let found = net.list_floating_ips_by_port(&port.id).await?;
                let Some(fip) = found
                    .into_iter()
                    .find(|f| adoption(&f.tags, ours) != Adoption::NotOurs)
                else {
                    return Ok(None);
                };
                if adoption(&fip.tags, ours) == Adoption::AdoptAndTag {
                    net.set_tags(Resource::FloatingIp, &fip.id, std::slice::from_ref(ours))
                        .await?;
                }
                Ok(Some(fip.id))
            },
        )
        .await
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
            root_volume,
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
        let compute = self.os.compute();
        let server = ServerCreate {
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
            boot_volume: root_volume.as_ref().map(|v| BootVolume {
                size_gb: v.size_gb,
                volume_type: v.volume_type.clone(),
            }),
            availability_zone: match role {
                crate::plan::Role::Master => self.master_zone(),
                crate::plan::Role::Worker => None,
            },
            ..ServerCreate::default()
        };
        let (server, ours) = (&server, tag(cluster));
        settle(
            &self.settle,
            || async { compute.create_server(server).await },
            || async {
                let found = compute
                    .list_servers(&ServerFilter {
                        tags: vec![ours.clone()],
                        name: None,
                    })
                    .await?;
                Ok(found
                    .into_iter()
                    .find(|s| {
                        s.name.as_deref() == Some(d.name.as_str())
                            && !matches!(
                                s.status,
                                ServerStatus::Deleted | ServerStatus::SoftDeleted
                            )
                    })
                    .map(|s| s.id))
            },
        )
        .await
    }

    pub async fn create(
        &self,
        cluster: &str,
        d: &crate::plan::Desired,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let net = self.os.network();
        let policy = &self.settle;
        let ours = tag(cluster);
        let ours = &ours;
        let name = d.name.as_str();
        match &d.spec {
            Spec::Keypair => {
                let key = self
                    .public_key
                    .as_deref()
                    .ok_or_else(|| ProviderError::Cloud("no public key to import".into()))?;
                let compute = self.os.compute();
                settle(
                    policy,
                    || async { Ok(compute.import_keypair(name, key).await?.name) },
                    || async { Ok(compute.get_keypair(name).await?.map(|k| k.name)) },
                )
                .await
            }
            Spec::SecurityGroup { rules } => {
                self.create_security_group(cluster, name, rules, ids).await
            }
            Spec::Network => {
                settle(
                    policy,
                    || async {
                        Ok(net
                            .create_network(&NetworkCreate {
                                name: name.to_string(),
                                tags: vec![ours.clone()],
                                ..NetworkCreate::default()
                            })
                            .await?
                            .id)
                    },
                    || async {
                        let found = net.list_networks(&Query::new().name(name)).await?;
                        adopt(&net, Resource::Network, ours, found, |n| (&n.id, &n.tags)).await
                    },
                )
                .await
            }
            Spec::Subnet {
                network,
                cidr,
                dns_nameservers,
            } => {
                let network_id = lookup(ids, network)?;
                settle(
                    policy,
                    || async {
                        Ok(net
                            .create_subnet(&SubnetCreate {
                                name: name.to_string(),
                                network_id: network_id.to_string(),
                                cidr: cidr.clone(),
                                ip_version: Some(4),
                                dns_nameservers: dns_nameservers.clone(),
                                enable_dhcp: Some(true),
                                tags: vec![ours.clone()],
                                ..SubnetCreate::default()
                            })
                            .await?
                            .id)
                    },
                    || async {
                        let found = net
                            .list_subnets(&Query::new().name(name).eq("network_id", network_id))
                            .await?;
                        adopt(&net, Resource::Subnet, ours, found, |n| (&n.id, &n.tags)).await
                    },
                )
                .await
            }
            Spec::Router {
                external_network,
                subnet,
            } => {
                self.create_router(cluster, name, external_network, subnet, ids)
                    .await
            }
            Spec::Share {
                existing: Some(wanted),
                ..
            } => self.take_existing_share(cluster, name, wanted).await,
            Spec::Share {
                size_gb,
                share_type,
                access_cidr,
                keep,
                existing: None,
                ..
            } => {
                self.create_share(
                    cluster,
                    name,
                    *size_gb,
                    share_type.as_deref(),
                    access_cidr,
                    *keep,
                )
                .await
            }
            Spec::Volume {
                existing: Some(wanted),
                ..
            } => self.take_existing_volume(cluster, name, wanted).await,
            Spec::Volume {
                size_gb,
                volume_type,
                keep,
                existing: None,
            } => {
                let api = self.os.volume();
                let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
                let mut marks = meta.clone();
                if *keep {
                    marks.insert(KEEP_KEY.to_string(), "true".to_string());
                }
                settle(
                    policy,
                    || async {
                        Ok(api
                            .create_volume(&VolumeCreate {
                                name: name.to_string(),
                                size: u64::from(*size_gb),
                                volume_type: volume_type.clone(),
                                metadata: marks.clone(),
                                ..VolumeCreate::default()
                            })
                            .await?
                            .id)
                    },
                    || async {
                        let found = api.list_volumes(&meta).await?;
                        Ok(found
                            .into_iter()
                            .find(|v| v.name.as_deref() == Some(name))
                            .map(|v| v.id))
                    },
                )
                .await
            }
            Spec::Server { .. } => self.create_server(cluster, d, ids).await,
            Spec::FloatingIp { pool, server } => {
                self.create_floating_ip(cluster, name, pool, server, ids)
                    .await
            }
            Spec::VolumeAttachment { volume, server } => {
                let server_id = lookup(ids, server)?;
                let volume_id = lookup(ids, volume)?;
                let compute = self.os.compute();
                settle(
                    policy,
                    || async {
                        compute
                            .attach_volume(server_id, volume_id, None)
                            .await
                            .map(|_| ())
                    },
                    || async {
                        let found = compute.list_volume_attachments(server_id).await?;
                        Ok(found.iter().any(|a| a.volume_id == volume_id).then_some(()))
                    },
                )
                .await?;
                Ok(format!("{server_id}/{volume_id}"))
            }
        }
    }
}

/// The first of `found` that is ours or untagged, tagged now if its tag was lost.
async fn adopt<T>(
    net: &crate::openstack::Network,
    r: Resource,
    ours: &str,
    found: Vec<T>,
    parts: impl Fn(&T) -> (&String, &Vec<String>),
) -> Result<Option<String>, crate::openstack::OpenStackError> {
    for item in &found {
        let (id, tags) = parts(item);
        match adoption(tags, ours) {
            Adoption::NotOurs => continue,
            Adoption::Adopt => return Ok(Some(id.clone())),
            Adoption::AdoptAndTag => {
                net.set_tags(r, id, &[ours.to_string()]).await?;
                return Ok(Some(id.clone()));
            }
        }
    }
    Ok(None)
}

fn lookup<'a>(ids: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, ProviderError> {
    ids.get(name).map(String::as_str).ok_or_else(|| {
        ProviderError::Cloud(format!(
            "{name} does not exist yet (it is created earlier in the plan)"
        ))
    })
}
