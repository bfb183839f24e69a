//! The OpenStack provider: maps plan resources onto Nova, Neutron, Glance, Manila and Cinder.
//!
//! Every resource is named `<cluster>-<role>[-<i>]` and tagged `hvd-cluster:<cluster>`
//! (Neutron tags, Nova tags + metadata, Manila/Cinder metadata). Neutron sets tags in a second
//! call after create, so observation also looks the fixed names up: a process killed between
//! the two calls leaves nothing that `down` cannot find. Security groups and routers get
//! their tag only once their rules / interface exist, so one left half-made by an
//! interrupted run is seen (by name) as failed and replaced, not kept.

pub mod desired;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::openstack::{
    self, CloudConfig, FloatingIpCreate, Interface, NetworkCreate, OpenStack, OpenStackError,
    Query, Remote, Resource, RouterCreate, RuleCreate, SecurityGroupCreate, Server, ServerCreate,
    ServerFilter, ServerNetwork, ServerStatus, ShareCreate, SubnetCreate, VolumeCreate,
};
use crate::plan::{
    Blueprint, Desired, FlavorSize, Health, Kind, Names, Observed, Plan, Quota, QuotaDelta,
    RuleSource, Shortfall, Spec,
};
use crate::profile::{nearest, Profile};
use crate::provider::{Provider, ProviderError, Screen};
use crate::state::Node;

/// The tag (Nova, Neutron) and metadata key (Nova, Manila, Cinder) that mark a cluster's resources.
pub fn tag(cluster: &str) -> String {
    format!("hvd-cluster:{cluster}")
}
pub const META_KEY: &str = "hvd-cluster";

/// Names the profile uses, resolved to cloud ids before any change is made.
#[derive(Debug, Default, Clone)]
struct Resolved {
    flavors: HashMap<String, openstack::Flavor>,
    images: HashMap<String, String>,
    /// Networks by name: external networks, the floating IP pool, an existing network.
    networks: HashMap<String, String>,
}

pub struct OpenStackProvider {
    os: OpenStack,
    resolved: Resolved,
    public_key: Option<Arc<str>>,
    /// Checks server names and addresses in every reply (see [`Screen`]).
    screen: Screen,
}

impl From<OpenStackError> for ProviderError {
    fn from(e: OpenStackError) -> Self {
        if e.is_quota_exceeded() {
            ProviderError::Quota(e.to_string())
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

    /// The NFS export location of the cluster's Manila share (see [`pick_export`]), `None`
    /// when the cluster has no share or the share has no location yet.
    pub async fn share_export(&self, cluster: &str) -> Result<Option<String>, ProviderError> {
        let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
        let name = Names(cluster).share();
        let shares = self.os.share().list_shares(&meta).await?;
        let Some(share) = shares
            .iter()
            .find(|s| s.name.as_deref() == Some(name.as_str()))
        else {
            return Ok(None);
        };
        let locations = self.os.share().export_locations(&share.id).await?;
        Ok(pick_export(&locations))
    }

    /// Looks up every flavor, image and network the profile names; an unknown one is an
    /// error that lists what the cloud has and suggests the nearest.
    pub async fn resolve(&mut self, p: &Profile) -> Result<(), ProviderError> {
        let compute = self.os.compute();
        let flavors = compute.list_flavors().await?;
        let mut wanted_flavors: Vec<&str> = p.master.flavor.iter().map(String::as_str).collect();
        if p.workers.count > 0 {
            wanted_flavors.extend(p.workers.flavor.as_deref());
        }
        for name in wanted_flavors {
            let found = flavors
                .iter()
                .find(|f| f.name == name || f.id == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = flavors.iter().map(|f| f.name.as_str()).collect();
                    not_found("flavor", name, &names)
                })?;
            self.resolved
                .flavors
                .insert(name.to_string(), found.clone());
        }

        let image = self.os.image();
        let mut wanted_images: Vec<&str> = p.master.image.iter().map(String::as_str).collect();
        if p.workers.count > 0 {
            wanted_images.extend(p.worker_image());
        }
        for name in wanted_images {
            if self.resolved.images.contains_key(name) {
                continue;
            }
            match image.find_image(name).await {
                Ok(found) => {
                    self.resolved.images.insert(name.to_string(), found.id);
                }
                Err(e) if e.is_not_found() || matches!(e, OpenStackError::NoSuchName { .. }) => {
                    let all = image.list_active_by_name("").await.unwrap_or_default();
                    let names: Vec<&str> = all.iter().filter_map(|i| i.name.as_deref()).collect();
                    return Err(not_found("image", name, &names));
                }
                Err(e) => return Err(e.into()),
            }
        }

        let network = self.os.network();
        let mut wanted_networks: Vec<&str> = Vec::new();
        wanted_networks.extend(p.network.external_network.as_deref());
        wanted_networks.extend(p.floating_ip.as_ref().map(|f| f.pool.as_str()));
        wanted_networks.extend(p.network.existing.as_deref());
        if !wanted_networks.is_empty() {
            let all = network.list_networks(&Query::new()).await?;
            for name in wanted_networks {
                let found = all
                    .iter()
                    .filter(|n| n.name == name || n.id == name)
                    .collect::<Vec<_>>();
                match found.as_slice() {
                    [one] => {
                        self.resolved
                            .networks
                            .insert(name.to_string(), one.id.clone());
                    }
                    [] => {
                        let names: Vec<&str> = all.iter().map(|n| n.name.as_str()).collect();
                        return Err(not_found("network", name, &names));
                    }
                    many => {
                        return Err(ProviderError::Resolve {
                            what: format!("network `{name}`"),
                            detail: format!("{} networks have this name; use its id", many.len()),
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Quota size of a resolved flavor.
    pub fn flavor_size(&self, name: &str) -> Option<FlavorSize> {
        self.resolved.flavors.get(name).map(|f| FlavorSize {
            vcpus: f.vcpus,
            ram_mb: f.ram,
        })
    }

    /// GPUs a flavor carries, read from its extra specs.
    pub fn flavor_gpus(&self, name: &str) -> u32 {
        self.resolved
            .flavors
            .get(name)
            .map(|f| gpus_in_extra_specs(&f.extra_specs))
            .unwrap_or(0)
    }

    /// The project's limits and usage, named as in [`crate::plan::QuotaDelta`]. Services the
    /// cloud lacks (no Manila, no Cinder) are simply not checked.
    pub async fn quotas(&self) -> Result<BTreeMap<&'static str, Quota>, ProviderError> {
        let project = self.os.project_id().to_string();
        let mut out = BTreeMap::new();
        let limits = self.os.compute().limits().await?;
        out.insert(
            "instances",
            Quota {
                limit: limits.max_total_instances,
                in_use: limits.total_instances_used,
            },
        );
        out.insert(
            "cores",
            Quota {
                limit: limits.max_total_cores,
                in_use: limits.total_cores_used,
            },
        );
        out.insert(
            "ram_mb",
            Quota {
                limit: limits.max_total_ram_size,
                in_use: limits.total_ram_used,
            },
        );
        let net = self.os.network().quota_usage(&project).await?;
        for (ours, theirs) in [
            ("floating_ips", "floatingip"),
            ("networks", "network"),
            ("subnets", "subnet"),
            ("routers", "router"),
            ("security_groups", "security_group"),
            ("security_group_rules", "security_group_rule"),
        ] {
            if let Some(q) = net.get(theirs) {
                out.insert(
                    ours,
                    Quota {
                        limit: q.limit,
                        in_use: q.in_use + q.reserved,
                    },
                );
            }
        }
        if let Ok(share) = self.os.share().limits().await {
            out.insert(
                "shares",
                Quota {
                    limit: share.max_total_shares,
                    in_use: share.total_shares_used,
                },
            );
            out.insert(
                "share_gigabytes",
                Quota {
                    limit: share.max_total_share_gigabytes,
                    in_use: share.total_share_gigabytes_used,
                },
            );
        }
        if let Ok(vol) = self.os.volume().limits().await {
            out.insert(
                "volumes",
                Quota {
                    limit: vol.max_total_volumes,
                    in_use: vol.total_volumes_used,
                },
            );
            out.insert(
                "volume_gigabytes",
                Quota {
                    limit: vol.max_total_volume_gigabytes,
                    in_use: vol.total_gigabytes_used,
                },
            );
        }
        Ok(out)
    }

    /// Every server of the cluster with its addresses, master first.
    pub async fn nodes(&self, cluster: &str) -> Result<Vec<Node>, ProviderError> {
        let servers = self.servers(cluster).await?;
        let fips = self
            .os
            .network()
            .list_floating_ips(&Query::new().tags(&[tag(cluster)]))
            .await?;
        let nodes: Vec<Node> = servers
            .iter()
            .filter(|s| s.status != ServerStatus::Deleted)
            .map(|s| {
                let private_ip = s.addresses_of_kind("fixed").first().map(|a| a.to_string());
                let public_ip = s
                    .addresses_of_kind("floating")
                    .first()
                    .map(|a| a.to_string())
                    .or_else(|| {
                        let fixed = private_ip.as_deref()?;
                        fips.iter()
                            .find(|f| f.fixed_ip_address.as_deref() == Some(fixed))
                            .map(|f| f.floating_ip_address.clone())
                    });
                let gpus = s
                    .flavor
                    .as_ref()
                    .map(|f| gpus_in_extra_specs(&f.extra_specs))
                    .unwrap_or(0);
                Node {
                    name: s.name.clone().unwrap_or_default(),
                    // The screen below gives the role by the name, not by metadata.
                    role: String::new(),
                    private_ip,
                    public_ip,
                    slots: gpus.max(1),
                    gpus,
                    in_discovery: None,
                }
            })
            .collect();
        Ok(self.screen.nodes(cluster, nodes))
    }

    async fn servers(&self, cluster: &str) -> Result<Vec<Server>, ProviderError> {
        let filter = ServerFilter {
            tags: vec![tag(cluster)],
            name: None,
        };
        Ok(self.os.compute().list_servers(&filter).await?)
    }

    /// Neutron resources of one kind: by tag, plus the fixed names (see the module comment).
    async fn neutron_kind(
        &self,
        cluster: &str,
        kind: Kind,
    ) -> Result<Vec<Observed>, ProviderError> {
        let n = Names(cluster);
        let net = self.os.network();
        let by_tag = Query::new().tags(&[tag(cluster)]);
        let mut out: Vec<Observed> = Vec::new();
        let mut push = |name: String, id: String, health: Health| {
            if !out.iter().any(|o: &Observed| o.id == id) {
                out.push(Observed {
                    kind,
                    name,
                    id,
                    health,
                });
            }
        };
        match kind {
            Kind::Network => {
                for q in [by_tag, Query::new().name(&n.network())] {
                    for x in net.list_networks(&q).await? {
                        push(x.name, x.id, Health::Ready);
                    }
                }
            }
            Kind::Subnet => {
                for q in [by_tag, Query::new().name(&n.subnet())] {
                    for x in net.list_subnets(&q).await? {
                        push(x.name, x.id, Health::Ready);
                    }
                }
            }
            Kind::Router => {
                for q in [by_tag, Query::new().name(&n.router())] {
                    for x in net.list_routers(&q).await? {
                        let health = completeness(x.tags.contains(&tag(cluster)));
                        push(x.name, x.id, health);
                    }
                }
            }
            Kind::SecurityGroup => {
                for q in [
                    by_tag,
                    Query::new().name(&n.nodes_group()),
                    Query::new().name(&n.master_group()),
                ] {
                    for x in net.list_security_groups(&q).await? {
                        let health = completeness(x.tags.contains(&tag(cluster)));
                        push(x.name, x.id, health);
                    }
                }
            }
            Kind::FloatingIp => {
                for q in [by_tag, Query::new().eq("description", &n.floating_ip())] {
                    for x in net.list_floating_ips(&q).await? {
                        let name = x
                            .description
                            .clone()
                            .filter(|d| !d.is_empty())
                            .unwrap_or_else(|| n.floating_ip());
                        // Created but not yet on the master's port: replace it.
                        let health = if x.port_id.is_some() {
                            Health::Ready
                        } else {
                            Health::Failed("not associated".into())
                        };
                        push(name, x.id, health);
                    }
                }
            }
            _ => {}
        }
        Ok(out)
    }

    /// One kind's resources. `deleting` keeps servers Nova still lists as DELETED (for a
    /// minute after delete), so a deletion wait ends only when the server is really gone.
    async fn observe_kind(
        &self,
        cluster: &str,
        kind: Kind,
        deleting: bool,
    ) -> Result<Vec<Observed>, ProviderError> {
        let n = Names(cluster);
        match kind {
            Kind::Keypair => Ok(match self.os.compute().get_keypair(&n.keypair()).await? {
                Some(k) => vec![Observed {
                    kind,
                    name: k.name.clone(),
                    id: k.name,
                    health: Health::Ready,
                }],
                None => vec![],
            }),
            Kind::Network
            | Kind::Subnet
            | Kind::Router
            | Kind::SecurityGroup
            | Kind::FloatingIp => self.neutron_kind(cluster, kind).await,
            Kind::Server => {
                let servers = self
                    .servers(cluster)
                    .await?
                    .into_iter()
                    .filter(|s| {
                        deleting
                            || !matches!(
                                s.status,
                                ServerStatus::Deleted | ServerStatus::SoftDeleted
                            )
                    })
                    .map(|s| Observed {
                        kind,
                        name: s.name.clone().unwrap_or_default(),
                        health: server_health(&s),
                        id: s.id,
                    })
                    .collect();
                Ok(self.screen.observed(cluster, servers))
            }
            Kind::Share => {
                let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
                let shares = match self.os.share().list_shares(&meta).await {
                    Ok(s) => s,
                    // A cloud without Manila has no shares of ours.
                    Err(OpenStackError::Catalog { .. }) => return Ok(vec![]),
                    Err(e) => return Err(e.into()),
                };
                let mut out = Vec::new();
                for s in shares {
                    let health = match s.status.as_deref() {
                        Some("available") => {
                            let rules = self.os.share().list_access_rules(&s.id).await?;
                            if rules.iter().any(|r| r.state.as_deref() == Some("active")) {
                                Health::Ready
                            } else if rules.is_empty() {
                                Health::Failed("no access rule".into())
                            } else {
                                Health::Pending
                            }
                        }
                        Some(st) if st.starts_with("error") => {
                            Health::Failed(format!("share status {st}"))
                        }
                        Some("deleting") => continue,
                        _ => Health::Pending,
                    };
                    out.push(Observed {
                        kind,
                        name: s.name.unwrap_or_default(),
                        id: s.id,
                        health,
                    });
                }
                Ok(out)
            }
            Kind::Volume | Kind::VolumeAttachment => {
                let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
                let volumes = match self.os.volume().list_volumes(&meta).await {
                    Ok(v) => v,
                    Err(OpenStackError::Catalog { .. }) => return Ok(vec![]),
                    Err(e) => return Err(e.into()),
                };
                let mut out = Vec::new();
                for v in volumes {
                    if kind == Kind::Volume {
                        let health = match v.status.as_str() {
                            "available" | "in-use" => Health::Ready,
                            st if st.starts_with("error") => {
                                Health::Failed(format!("volume status {st}"))
                            }
                            "deleting" => continue,
                            _ => Health::Pending,
                        };
                        out.push(Observed {
                            kind,
                            name: v.name.clone().unwrap_or_default(),
                            id: v.id.clone(),
                            health,
                        });
                    } else if let Some(a) = v.attachments.first() {
                        let health = if v.status == "in-use" {
                            Health::Ready
                        } else {
                            Health::Pending
                        };
                        let server = a.server_id.clone().unwrap_or_default();
                        out.push(Observed {
                            kind,
                            name: n.volume_attachment(),
                            id: format!("{server}/{}", v.id),
                            health,
                        });
                    }
                }
                Ok(out)
            }
        }
    }

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
        let started = Instant::now();
        loop {
            match api.get_share(&share.id).await? {
                Some(s) if s.is_available() => break,
                Some(s) if s.is_error() => {
                    return Err(ProviderError::Cloud(format!(
                        "share {name} went to status {}",
                        s.status.unwrap_or_default()
                    )))
                }
                _ if started.elapsed() > Duration::from_secs(300) => {
                    return Err(ProviderError::Cloud(format!(
                        "share {name} not available after 300s"
                    )))
                }
                _ => tokio::time::sleep(Duration::from_secs(2)).await,
            }
        }
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
        let role_name = match role {
            crate::plan::Role::Master => "master",
            crate::plan::Role::Worker => "worker",
        };
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
}

/// The provider's own calls, behind [`Provider`] below.
impl OpenStackProvider {
    pub async fn observe(&self, cluster: &str) -> Result<Vec<Observed>, ProviderError> {
        let kinds = crate::plan::Kind::ALL;
        let found = futures::future::try_join_all(
            kinds.iter().map(|k| self.observe_kind(cluster, *k, false)),
        )
        .await?;
        Ok(found.into_iter().flatten().collect())
    }

    pub async fn poll(&self, cluster: &str, kind: Kind) -> Result<Vec<Observed>, ProviderError> {
        self.observe_kind(cluster, kind, true).await
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

/// Ready only once tagged (the tag comes last); otherwise an interrupted create to redo.
fn completeness(tagged: bool) -> Health {
    if tagged {
        Health::Ready
    } else {
        Health::Failed("left incomplete by an interrupted run".into())
    }
}

fn server_health(s: &Server) -> Health {
    match &s.status {
        ServerStatus::Active => Health::Ready,
        ServerStatus::Build
        | ServerStatus::Unknown
        | ServerStatus::Deleted
        | ServerStatus::SoftDeleted => Health::Pending,
        ServerStatus::Error => Health::Failed(
            s.fault
                .as_ref()
                .map(|f| format!("ERROR: {}", f.message))
                .unwrap_or_else(|| "ERROR (no fault given)".into()),
        ),
        ServerStatus::Shutoff => Health::Failed("SHUTOFF".into()),
        other => Health::Failed(format!("{other:?}")),
    }
}

fn lookup<'a>(ids: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, ProviderError> {
    ids.get(name).map(String::as_str).ok_or_else(|| {
        ProviderError::Cloud(format!(
            "{name} does not exist yet (it is created earlier in the plan)"
        ))
    })
}

fn not_found(what: &str, name: &str, available: &[&str]) -> ProviderError {
    let mut detail = String::from("not found on this cloud");
    if let Some(best) = nearest(name, available) {
        detail.push_str(&format!("; did you mean `{best}`?"));
    }
    if !available.is_empty() {
        let mut sorted: Vec<&str> = available.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        detail.push_str(&format!(" (available: {})", sorted.join(", ")));
    }
    ProviderError::Resolve {
        what: format!("{what} `{}`", crate::input::shown(name)),
        detail,
    }
}

/// GPUs named in a flavor's extra specs: `pci_passthrough:alias` ("a100:2,t4:1"),
/// `resources:VGPU` / `resources:PGPU`, or a cloud's own `gpu:count` / `gpus`.
pub fn gpus_in_extra_specs(specs: &BTreeMap<String, String>) -> u32 {
    if let Some(alias) = specs.get("pci_passthrough:alias") {
        let n: u32 = alias
            .split(',')
            .filter_map(|a| {
                a.rsplit_once(':')
                    .and_then(|(_, n)| n.trim().parse::<u32>().ok())
            })
            .sum();
        if n > 0 {
            return n;
        }
    }
    for key in [
        "resources:VGPU",
        "resources:PGPU",
        "gpu:count",
        "gpus",
        "gpu_count",
    ] {
        if let Some(n) = specs.get(key).and_then(|v| v.trim().parse::<u32>().ok()) {
            return n;
        }
    }
    0
}

/// The export location a node mounts: the preferred one Manila reports, else the first;
/// never one only admins see (`is_admin_only`), which a tenant cannot reach.
pub fn pick_export(locations: &[crate::openstack::share::ExportLocation]) -> Option<String> {
    let usable: Vec<_> = locations
        .iter()
        .filter(|l| l.is_admin_only != Some(true) && !l.path.is_empty())
        .collect();
    usable
        .iter()
        .find(|l| l.preferred)
        .or_else(|| usable.first())
        .map(|l| l.path.clone())
}

impl Provider for OpenStackProvider {
    fn blueprint(&self) -> &'static dyn Blueprint {
        &desired::OpenStackBlueprint
    }

    fn resolve<'a>(&'a mut self, p: &'a Profile) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(OpenStackProvider::resolve(self, p))
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

    fn calls(&self) -> u64 {
        OpenStackProvider::calls(self)
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
    use super::*;

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
