//! Desired state, observed state, and the ordered actions between them. Pure: no I/O.
//!
//! `desired(profile)` lists what a cluster needs; a provider observes what exists (found by
//! the cluster's tag); [`plan`] diffs the two into create / keep / replace / delete actions
//! that `apply` runs level by level.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::profile::{JupyterAccess, Profile, ProviderKind, StorageKind};

/// Every kind of resource hvd-cluster creates, in dependency order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Keypair,
    SecurityGroup,
    Network,
    Subnet,
    Router,
    Share,
    Volume,
    Server,
    FloatingIp,
    VolumeAttachment,
}

impl Kind {
    /// Creation level: everything in one level may be created in parallel once the levels
    /// before it exist; deletion runs the levels backwards.
    pub fn level(self) -> u8 {
        match self {
            Kind::Keypair | Kind::SecurityGroup | Kind::Network | Kind::Volume => 0,
            Kind::Subnet => 1,
            Kind::Router | Kind::Share => 2,
            Kind::Server => 3,
            Kind::FloatingIp | Kind::VolumeAttachment => 4,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Keypair => "keypair",
            Kind::SecurityGroup => "security group",
            Kind::Network => "network",
            Kind::Subnet => "subnet",
            Kind::Router => "router",
            Kind::Share => "share",
            Kind::Volume => "volume",
            Kind::Server => "server",
            Kind::FloatingIp => "floating IP",
            Kind::VolumeAttachment => "volume attachment",
        }
    }

    pub const ALL: [Kind; 10] = [
        Kind::Keypair,
        Kind::SecurityGroup,
        Kind::Network,
        Kind::Subnet,
        Kind::Router,
        Kind::Share,
        Kind::Volume,
        Kind::Server,
        Kind::FloatingIp,
        Kind::VolumeAttachment,
    ];
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.label())
    }
}

/// A server's part in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Master,
    Worker,
}

/// One firewall rule of a security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// `tcp`, `udp`, `icmp`, or `None` for every protocol.
    pub protocol: Option<String>,
    pub ports: Option<(u16, u16)>,
    pub from: RuleSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleSource {
    Cidr(String),
    /// Members of the named security group (intra-cluster traffic).
    Group(String),
}

/// What a resource should be, independent of any cloud id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Spec {
    Keypair,
    SecurityGroup {
        rules: Vec<Rule>,
    },
    Network,
    Subnet {
        network: String,
        cidr: String,
        dns_nameservers: Vec<String>,
    },
    Router {
        external_network: String,
        subnet: String,
    },
    Share {
        size_gb: u32,
        share_type: Option<String>,
        access_cidr: String,
        network: String,
    },
    Volume {
        size_gb: u32,
    },
    Server {
        role: Role,
        /// Worker number (never reused, so a replacement is a new host to Horovod).
        index: u32,
        flavor: String,
        image: String,
        security_groups: Vec<String>,
        network: String,
    },
    FloatingIp {
        pool: String,
        server: String,
    },
    VolumeAttachment {
        volume: String,
        server: String,
    },
}

impl Spec {
    pub fn kind(&self) -> Kind {
        match self {
            Spec::Keypair => Kind::Keypair,
            Spec::SecurityGroup { .. } => Kind::SecurityGroup,
            Spec::Network => Kind::Network,
            Spec::Subnet { .. } => Kind::Subnet,
            Spec::Router { .. } => Kind::Router,
            Spec::Share { .. } => Kind::Share,
            Spec::Volume { .. } => Kind::Volume,
            Spec::Server { .. } => Kind::Server,
            Spec::FloatingIp { .. } => Kind::FloatingIp,
            Spec::VolumeAttachment { .. } => Kind::VolumeAttachment,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Desired {
    pub name: String,
    pub spec: Spec,
}

impl Desired {
    pub fn kind(&self) -> Kind {
        self.spec.kind()
    }
}

/// How an observed resource is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "kebab-case")]
pub enum Health {
    Ready,
    /// Still being built (BUILD, creating): keep it and wait.
    Pending,
    /// ERROR, SHUTOFF, error_deleting...: replace it. Carries the cloud's own words.
    Failed(String),
}

/// A resource the provider found, by the cluster's tag or name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observed {
    pub kind: Kind,
    pub name: String,
    pub id: String,
    pub health: Health,
}

/// What the cloud holds for one cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Observation {
    pub resources: Vec<Observed>,
    /// The highest worker number ever given out (from local state), so numbers are not reused
    /// even after the worker with it is gone.
    pub highest_worker_index: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    Create {
        desired: Desired,
    },
    Keep {
        desired: Desired,
        id: String,
        pending: bool,
    },
    /// Delete `old`, then create `desired` (a worker replacement gets a new name).
    Replace {
        old: Observed,
        desired: Desired,
        reason: String,
    },
    Delete {
        old: Observed,
    },
}

impl Action {
    pub fn kind(&self) -> Kind {
        match self {
            Action::Create { desired }
            | Action::Keep { desired, .. }
            | Action::Replace { desired, .. } => desired.kind(),
            Action::Delete { old } => old.kind,
        }
    }

    pub fn changes(&self) -> bool {
        !matches!(self, Action::Keep { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
}

impl Plan {
    pub fn is_noop(&self) -> bool {
        self.actions.iter().all(|a| !a.changes())
    }

    /// Deletions (the old half of replacements included), last level first.
    pub fn deletions(&self) -> Vec<&Observed> {
        let mut out: Vec<&Observed> = self
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { old } | Action::Replace { old, .. } => Some(old),
                _ => None,
            })
            .collect();
        out.sort_by_key(|o| std::cmp::Reverse(o.kind.level()));
        out
    }

    /// Creations grouped by level, first level first.
    pub fn creation_levels(&self) -> Vec<Vec<&Desired>> {
        let mut levels: BTreeMap<u8, Vec<&Desired>> = BTreeMap::new();
        for a in &self.actions {
            if let Action::Create { desired } | Action::Replace { desired, .. } = a {
                levels
                    .entry(desired.kind().level())
                    .or_default()
                    .push(desired);
            }
        }
        levels.into_values().collect()
    }

    pub fn counts(&self) -> PlanCounts {
        let mut c = PlanCounts::default();
        for a in &self.actions {
            match a {
                Action::Create { .. } => c.create += 1,
                Action::Keep { .. } => c.keep += 1,
                Action::Replace { .. } => c.replace += 1,
                Action::Delete { .. } => c.delete += 1,
            }
        }
        c
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    pub create: usize,
    pub keep: usize,
    pub replace: usize,
    pub delete: usize,
}

/// Names of the cluster's resources: `<cluster>-<role>[-<i>]`.
pub struct Names<'a>(pub &'a str);

impl Names<'_> {
    pub fn keypair(&self) -> String {
        format!("{}-key", self.0)
    }
    pub fn network(&self) -> String {
        format!("{}-net", self.0)
    }
    pub fn subnet(&self) -> String {
        format!("{}-subnet", self.0)
    }
    pub fn router(&self) -> String {
        format!("{}-router", self.0)
    }
    /// Every node: all traffic from other members.
    pub fn nodes_group(&self) -> String {
        format!("{}-nodes", self.0)
    }
    /// The master: SSH (and Jupyter) from the allowed networks.
    pub fn master_group(&self) -> String {
        format!("{}-master-access", self.0)
    }
    pub fn master(&self) -> String {
        format!("{}-master", self.0)
    }
    pub fn worker(&self, index: u32) -> String {
        format!("{}-worker-{index}", self.0)
    }
    pub fn floating_ip(&self) -> String {
        format!("{}-master-fip", self.0)
    }
    pub fn share(&self) -> String {
        format!("{}-share", self.0)
    }
    pub fn volume(&self) -> String {
        format!("{}-shared-volume", self.0)
    }
    pub fn volume_attachment(&self) -> String {
        format!("{}-shared-volume-attachment", self.0)
    }
    /// The worker number in a name like `demo-worker-7`. Only the exact spelling this cluster
    /// gives counts (`demo-worker-07` or `demo-worker-+7` are someone else's names).
    pub fn worker_index(&self, name: &str) -> Option<u32> {
        let index: u32 = name
            .strip_prefix(self.0)?
            .strip_prefix("-worker-")?
            .parse()
            .ok()?;
        (self.worker(index) == name).then_some(index)
    }
    /// The role a server's name gives it by the naming rule (`<cluster>-master`,
    /// `<cluster>-worker-<n>`); `None` for a name this cluster never gives.
    pub fn node_role(&self, name: &str) -> Option<Role> {
        if name == self.master() {
            Some(Role::Master)
        } else {
            self.worker_index(name).map(|_| Role::Worker)
        }
    }
}

/// Everything but the workers, which depend on what exists (numbers are never reused).
fn desired_fixed(p: &Profile) -> Vec<Desired> {
    let n = Names(&p.name);
    if p.provider == ProviderKind::Local {
        // Containers on one Docker network, /shared on one volume they all mount.
        return vec![
            Desired {
                name: n.network(),
                spec: Spec::Network,
            },
            Desired {
                name: n.volume(),
                spec: Spec::Volume { size_gb: 0 },
            },
            Desired {
                name: n.master(),
                spec: Spec::Server {
                    role: Role::Master,
                    index: 0,
                    flavor: String::new(),
                    image: String::new(),
                    security_groups: vec![],
                    network: n.network(),
                },
            },
        ];
    }
    let mut out = vec![Desired {
        name: n.keypair(),
        spec: Spec::Keypair,
    }];

    let nodes = n.nodes_group();
    out.push(Desired {
        name: nodes.clone(),
        spec: Spec::SecurityGroup {
            rules: vec![Rule {
                protocol: None,
                ports: None,
                from: RuleSource::Group(nodes.clone()),
            }],
        },
    });
    let mut master_rules = Vec::new();
    for cidr in &p.access.allowed_cidrs {
        master_rules.push(Rule {
            protocol: Some("tcp".into()),
            ports: Some((22, 22)),
            from: RuleSource::Cidr(cidr.clone()),
        });
        if p.access.jupyter == JupyterAccess::Public {
            master_rules.push(Rule {
                protocol: Some("tcp".into()),
                ports: Some((8888, 8888)),
                from: RuleSource::Cidr(cidr.clone()),
            });
        }
        master_rules.push(Rule {
            protocol: Some("icmp".into()),
            ports: None,
            from: RuleSource::Cidr(cidr.clone()),
        });
    }
    out.push(Desired {
        name: n.master_group(),
        spec: Spec::SecurityGroup {
            rules: master_rules,
        },
    });

    let network = match &p.network.existing {
        Some(existing) => existing.clone(),
        None => {
            out.push(Desired {
                name: n.network(),
                spec: Spec::Network,
            });
            out.push(Desired {
                name: n.subnet(),
                spec: Spec::Subnet {
                    network: n.network(),
                    cidr: p.subnet_cidr().to_string(),
                    dns_nameservers: p.network.dns_nameservers.clone(),
                },
            });
            if let Some(ext) = &p.network.external_network {
                out.push(Desired {
                    name: n.router(),
                    spec: Spec::Router {
                        external_network: ext.clone(),
                        subnet: n.subnet(),
                    },
                });
            }
            n.network()
        }
    };

    match p.storage.kind {
        StorageKind::Manila => out.push(Desired {
            name: n.share(),
            spec: Spec::Share {
                size_gb: p.storage.size_gb.unwrap_or(10),
                share_type: p.storage.share_type.clone(),
                access_cidr: p
                    .network
                    .cidr
                    .clone()
                    .unwrap_or_else(|| p.subnet_cidr().to_string()),
                network: network.clone(),
            },
        }),
        StorageKind::MasterNfs => {
            if let Some(size_gb) = p.storage.volume_gb {
                out.push(Desired {
                    name: n.volume(),
                    spec: Spec::Volume { size_gb },
                });
                out.push(Desired {
                    name: n.volume_attachment(),
                    spec: Spec::VolumeAttachment {
                        volume: n.volume(),
                        server: n.master(),
                    },
                });
            }
        }
        StorageKind::None => {}
    }

    out.push(Desired {
        name: n.master(),
        spec: Spec::Server {
            role: Role::Master,
            index: 0,
            flavor: p.master.flavor.clone().unwrap_or_default(),
            image: p.master.image.clone().unwrap_or_default(),
            security_groups: vec![nodes.clone(), n.master_group()],
            network: network.clone(),
        },
    });
    if let Some(fip) = &p.floating_ip {
        out.push(Desired {
            name: n.floating_ip(),
            spec: Spec::FloatingIp {
                pool: fip.pool.clone(),
                server: n.master(),
            },
        });
    }
    out
}

fn worker_spec(p: &Profile, index: u32) -> Desired {
    let n = Names(&p.name);
    let network = p.network.existing.clone().unwrap_or_else(|| n.network());
    let security_groups = match p.provider {
        ProviderKind::Local => vec![],
        ProviderKind::OpenStack => vec![n.nodes_group()],
    };
    Desired {
        name: n.worker(index),
        spec: Spec::Server {
            role: Role::Worker,
            index,
            flavor: p.workers.flavor.clone().unwrap_or_default(),
            image: p.worker_image().unwrap_or_default().to_string(),
            security_groups,
            network,
        },
    }
}

/// Diffs the profile against what the cloud holds.
pub fn plan(p: &Profile, observed: &Observation) -> Plan {
    let names = Names(&p.name);
    let mut by_name: BTreeMap<(Kind, &str), &Observed> = BTreeMap::new();
    for o in &observed.resources {
        by_name.insert((o.kind, o.name.as_str()), o);
    }
    let mut actions = Vec::new();
    let mut claimed: Vec<(Kind, &str)> = Vec::new();

    for d in desired_fixed(p) {
        let key = (d.kind(), d.name.as_str());
        match by_name.get(&key) {
            Some(o) => {
                claimed.push((o.kind, o.name.as_str()));
                actions.push(match &o.health {
                    Health::Failed(why) => Action::Replace {
                        old: (*o).clone(),
                        desired: d,
                        reason: why.clone(),
                    },
                    Health::Ready => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: false,
                    },
                    Health::Pending => Action::Keep {
                        id: o.id.clone(),
                        desired: d,
                        pending: true,
                    },
                });
            }
            None => actions.push(Action::Create { desired: d }),
        }
    }

    // Workers: keep the healthy ones with the lowest numbers, drop the rest, and give new
    // ones numbers above any ever used.
    let mut workers: Vec<(u32, &Observed)> = observed
        .resources
        .iter()
        .filter(|o| o.kind == Kind::Server)
        .filter_map(|o| names.worker_index(&o.name).map(|i| (i, o)))
        .collect();
    workers.sort_by_key(|(i, _)| *i);
    let mut next = workers
        .iter()
        .map(|(i, _)| *i)
        .max()
        .unwrap_or(0)
        .max(observed.highest_worker_index)
        + 1;
    let mut kept = 0u32;
    for (index, o) in &workers {
        claimed.push((o.kind, o.name.as_str()));
        match &o.health {
            Health::Failed(why) if kept < p.workers.count => {
                actions.push(Action::Replace {
                    old: (*o).clone(),
                    desired: worker_spec(p, next),
                    reason: why.clone(),
                });
                next += 1;
                kept += 1;
            }
            health @ (Health::Ready | Health::Pending) if kept < p.workers.count => {
                actions.push(Action::Keep {
                    id: o.id.clone(),
                    desired: worker_spec(p, *index),
                    pending: *health == Health::Pending,
                });
                kept += 1;
            }
            _ => actions.push(Action::Delete { old: (*o).clone() }),
        }
    }
    while kept < p.workers.count {
        actions.push(Action::Create {
            desired: worker_spec(p, next),
        });
        next += 1;
        kept += 1;
    }

    // Anything else carrying the cluster's tag is no longer wanted.
    for o in &observed.resources {
        if !claimed.contains(&(o.kind, o.name.as_str())) {
            actions.push(Action::Delete { old: o.clone() });
        }
    }
    Plan { actions }
}

/// `down`: every observed resource deleted, last level first.
pub fn teardown(observed: &Observation) -> Plan {
    let mut actions: Vec<Action> = observed
        .resources
        .iter()
        .map(|o| Action::Delete { old: o.clone() })
        .collect();
    actions.sort_by_key(|a| std::cmp::Reverse(a.kind().level()));
    Plan { actions }
}

/// What a plan adds to the project's quota usage (deletions subtract).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuotaDelta {
    pub instances: i64,
    pub cores: i64,
    pub ram_mb: i64,
    pub floating_ips: i64,
    pub networks: i64,
    pub subnets: i64,
    pub routers: i64,
    pub security_groups: i64,
    pub security_group_rules: i64,
    pub shares: i64,
    pub share_gigabytes: i64,
    pub volumes: i64,
    pub volume_gigabytes: i64,
}

/// Size of a flavor, as far as quotas go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlavorSize {
    pub vcpus: u32,
    pub ram_mb: u64,
}

impl QuotaDelta {
    /// `flavor` looks a flavor name up; servers whose flavor is unknown count as one instance.
    pub fn of(plan: &Plan, flavor: impl Fn(&str) -> Option<FlavorSize>) -> QuotaDelta {
        let mut q = QuotaDelta::default();
        let mut add = |d: &Desired, sign: i64| match &d.spec {
            Spec::Server { flavor: f, .. } => {
                q.instances += sign;
                if let Some(size) = flavor(f) {
                    q.cores += sign * i64::from(size.vcpus);
                    q.ram_mb += sign * size.ram_mb as i64;
                }
            }
            Spec::FloatingIp { .. } => q.floating_ips += sign,
            Spec::Network => q.networks += sign,
            Spec::Subnet { .. } => q.subnets += sign,
            Spec::Router { .. } => q.routers += sign,
            Spec::SecurityGroup { rules } => {
                q.security_groups += sign;
                // Neutron adds two default egress rules to every new group.
                q.security_group_rules += sign * (rules.len() as i64 + 2);
            }
            Spec::Share { size_gb, .. } => {
                q.shares += sign;
                q.share_gigabytes += sign * i64::from(*size_gb);
            }
            Spec::Volume { size_gb } => {
                q.volumes += sign;
                q.volume_gigabytes += sign * i64::from(*size_gb);
            }
            Spec::Keypair | Spec::VolumeAttachment { .. } => {}
        };
        for a in &plan.actions {
            if let Action::Create { desired } = a {
                add(desired, 1);
            }
        }
        // A replacement frees its old slot first, so it needs nothing more. Deleted servers
        // free theirs; their flavor is not known here, so only instances are counted back.
        let deleted_servers = plan
            .actions
            .iter()
            .filter(|a| matches!(a, Action::Delete { old } if old.kind == Kind::Server));
        q.instances -= deleted_servers.count() as i64;
        q
    }
}

/// One quota that would be exceeded: the numbers a user needs to act.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    pub resource: String,
    pub needed: i64,
    pub in_use: i64,
    pub limit: i64,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: needs {} more, {} of {} in use ({} free)",
            self.resource,
            self.needed,
            self.in_use,
            self.limit,
            (self.limit - self.in_use).max(0)
        )
    }
}

/// A quota as the cloud reports it; `limit < 0` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    pub limit: i64,
    pub in_use: i64,
}

/// Compares what a plan needs with what is free. `quotas` maps resource names
/// (as in [`QuotaDelta`]'s fields) to the cloud's numbers; missing names are not checked.
pub fn shortfalls(delta: &QuotaDelta, quotas: &BTreeMap<&str, Quota>) -> Vec<Shortfall> {
    let needed = [
        ("instances", delta.instances),
        ("cores", delta.cores),
        ("ram_mb", delta.ram_mb),
        ("floating_ips", delta.floating_ips),
        ("networks", delta.networks),
        ("subnets", delta.subnets),
        ("routers", delta.routers),
        ("security_groups", delta.security_groups),
        ("security_group_rules", delta.security_group_rules),
        ("shares", delta.shares),
        ("share_gigabytes", delta.share_gigabytes),
        ("volumes", delta.volumes),
        ("volume_gigabytes", delta.volume_gigabytes),
    ];
    needed
        .iter()
        .filter(|(_, n)| *n > 0)
        .filter_map(|(name, n)| {
            let q = quotas.get(name)?;
            (q.limit >= 0 && q.in_use + n > q.limit).then(|| Shortfall {
                resource: name.to_string(),
                needed: *n,
                in_use: q.in_use,
                limit: q.limit,
            })
        })
        .collect()
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sorted: Vec<&Action> = self.actions.iter().collect();
        sorted.sort_by_key(|a| a.kind().level());
        for a in sorted {
            match a {
                Action::Create { desired } => {
                    writeln!(f, "  + create  {:<18} {}", desired.kind(), desired.name)?
                }
                Action::Keep {
                    desired,
                    id,
                    pending,
                } => writeln!(
                    f,
                    "  = keep    {:<18} {} ({id}{})",
                    desired.kind(),
                    desired.name,
                    if *pending { ", still building" } else { "" }
                )?,
                Action::Replace {
                    old,
                    desired,
                    reason,
                } => writeln!(
                    f,
                    "  ~ replace {:<18} {} → {} ({reason})",
                    desired.kind(),
                    old.name,
                    desired.name
                )?,
                Action::Delete { old } => {
                    writeln!(f, "  - delete  {:<18} {} ({})", old.kind, old.name, old.id)?
                }
            }
        }
        let c = self.counts();
        write!(
            f,
            "{} to create, {} to replace, {} to delete, {} unchanged",
            c.create, c.replace, c.delete, c.keep
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_roles_follow_the_naming_rule_exactly() {
        let n = Names("demo");
        assert_eq!(n.node_role("demo-master"), Some(Role::Master));
        assert_eq!(n.node_role("demo-worker-12"), Some(Role::Worker));
        assert_eq!(n.worker_index("demo-worker-12"), Some(12));
        for foreign in [
            "demo-worker-07",
            "demo-worker-+7",
            "demo-worker-",
            "demo-worker-1 ",
            "demo-master-1",
            "demo-workers-1",
            "other-master",
            "demo-worker-99999999999",
            "demo-worker-1\nHost *",
        ] {
            assert_eq!(n.node_role(foreign), None, "{foreign:?}");
        }
    }
    use crate::profile;
    use std::path::Path;

    fn profile(workers: u32) -> Profile {
        let text = format!(
            r#"
name = "demo"
[master]
flavor = "m1.small"
image = "img"
[workers]
count = {workers}
flavor = "m1.medium"
[network]
external_network = "public"
[floating_ip]
pool = "public"
[access]
allowed_cidrs = ["198.51.100.0/24"]
[storage]
kind = "manila"
"#
        );
        profile::parse(Path::new("t.toml"), &text).unwrap()
    }

    fn observed_all(p: &Profile) -> Observation {
        let plan = plan(p, &Observation::default());
        let resources = plan
            .actions
            .iter()
            .map(|a| match a {
                Action::Create { desired } => Observed {
                    kind: desired.kind(),
                    name: desired.name.clone(),
                    id: format!("id-{}", desired.name),
                    health: Health::Ready,
                },
                other => panic!("fresh plan must only create, got {other:?}"),
            })
            .collect();
        Observation {
            resources,
            highest_worker_index: 0,
        }
    }

    fn names_of(plan: &Plan, f: impl Fn(&Action) -> bool) -> Vec<String> {
        plan.actions
            .iter()
            .filter(|a| f(a))
            .map(|a| match a {
                Action::Create { desired } | Action::Keep { desired, .. } => desired.name.clone(),
                Action::Replace { old, desired, .. } => format!("{}->{}", old.name, desired.name),
                Action::Delete { old } => old.name.clone(),
            })
            .collect()
    }

    #[test]
    fn fresh_cluster_creates_everything_in_levels() {
        let p = profile(3);
        let plan = plan(&p, &Observation::default());
        let c = plan.counts();
        // key, 2 groups, net, subnet, router, share, master, fip, 3 workers
        assert_eq!(
            c,
            PlanCounts {
                create: 12,
                keep: 0,
                replace: 0,
                delete: 0
            }
        );
        let levels = plan.creation_levels();
        let kinds: Vec<Vec<Kind>> = levels
            .iter()
            .map(|l| l.iter().map(|d| d.kind()).collect())
            .collect();
        assert_eq!(
            kinds[0],
            vec![
                Kind::Keypair,
                Kind::SecurityGroup,
                Kind::SecurityGroup,
                Kind::Network
            ]
        );
        assert_eq!(kinds[1], vec![Kind::Subnet]);
        assert_eq!(kinds[2], vec![Kind::Router, Kind::Share]);
        assert_eq!(kinds[3], vec![Kind::Server; 4]);
        assert_eq!(kinds[4], vec![Kind::FloatingIp]);
        let workers = names_of(
            &plan,
            |a| matches!(a, Action::Create { desired } if desired.name.contains("worker")),
        );
        assert_eq!(workers, ["demo-worker-1", "demo-worker-2", "demo-worker-3"]);
    }

    #[test]
    fn complete_cluster_is_a_noop() {
        let p = profile(3);
        let plan = plan(&p, &observed_all(&p));
        assert!(plan.is_noop(), "{plan}");
        assert_eq!(plan.counts().keep, 12);
    }

    #[test]
    fn scale_up_uses_new_numbers_and_scale_down_drops_highest() {
        let p = profile(3);
        let mut obs = observed_all(&p);
        obs.highest_worker_index = 7; // worker 4..7 existed once
        let up = plan(&profile(5), &obs);
        let created = names_of(&up, |a| matches!(a, Action::Create { .. }));
        assert_eq!(created, ["demo-worker-8", "demo-worker-9"]);

        let down = plan(&profile(1), &observed_all(&p));
        let deleted = names_of(&down, |a| matches!(a, Action::Delete { .. }));
        assert_eq!(deleted, ["demo-worker-2", "demo-worker-3"]);
    }

    #[test]
    fn failed_worker_is_replaced_under_a_new_name() {
        let p = profile(2);
        let mut obs = observed_all(&p);
        for o in &mut obs.resources {
            if o.name == "demo-worker-1" {
                o.health = Health::Failed("NoValidHost".into());
            }
        }
        let plan = plan(&p, &obs);
        assert_eq!(
            names_of(&plan, |a| matches!(a, Action::Replace { .. })),
            ["demo-worker-1->demo-worker-3"]
        );
        assert_eq!(plan.deletions().len(), 1);
        assert_eq!(plan.counts().create, 0);
    }

    #[test]
    fn failed_master_is_recreated_with_its_name() {
        let p = profile(1);
        let mut obs = observed_all(&p);
        for o in &mut obs.resources {
            if o.name == "demo-master" {
                o.health = Health::Failed("ERROR".into());
            }
        }
        let plan = plan(&p, &obs);
        assert_eq!(
            names_of(&plan, |a| matches!(a, Action::Replace { .. })),
            ["demo-master->demo-master"]
        );
    }

    #[test]
    fn tagged_leftovers_are_deleted_and_pending_kept() {
        let p = profile(1);
        let mut obs = observed_all(&p);
        obs.resources.push(Observed {
            kind: Kind::Volume,
            name: "demo-shared-volume".into(),
            id: "v".into(),
            health: Health::Ready,
        });
        for o in &mut obs.resources {
            if o.name == "demo-worker-1" {
                o.health = Health::Pending;
            }
        }
        let plan = plan(&p, &obs);
        assert_eq!(
            names_of(&plan, |a| matches!(a, Action::Delete { .. })),
            ["demo-shared-volume"]
        );
        assert!(plan
            .actions
            .iter()
            .any(|a| matches!(a, Action::Keep { pending: true, .. })));
    }

    #[test]
    fn existing_network_creates_no_network() {
        let mut p = profile(1);
        p.network.existing = Some("private".into());
        p.network.external_network = None;
        let plan = plan(&p, &Observation::default());
        assert!(plan
            .actions
            .iter()
            .all(|a| !matches!(a.kind(), Kind::Network | Kind::Subnet | Kind::Router)));
        let server_net = plan.actions.iter().find_map(|a| match a {
            Action::Create {
                desired:
                    Desired {
                        spec: Spec::Server { network, .. },
                        ..
                    },
            } => Some(network.clone()),
            _ => None,
        });
        assert_eq!(server_net.as_deref(), Some("private"));
    }

    #[test]
    fn local_cluster_is_a_network_a_volume_and_containers() {
        let text = "name = \"loc\"\nprovider = \"local\"\n[master]\n[workers]\ncount = 2\n";
        let p = profile::parse(Path::new("l.toml"), text).unwrap();
        let plan = plan(&p, &Observation::default());
        let created = names_of(&plan, |a| matches!(a, Action::Create { .. }));
        assert_eq!(
            created,
            [
                "loc-net",
                "loc-shared-volume",
                "loc-master",
                "loc-worker-1",
                "loc-worker-2"
            ]
        );
        assert!(plan
            .actions
            .iter()
            .all(|a| !matches!(a.kind(), Kind::SecurityGroup | Kind::Keypair)));
    }

    #[test]
    fn teardown_deletes_in_reverse_level_order() {
        let p = profile(1);
        let plan = teardown(&observed_all(&p));
        let levels: Vec<u8> = plan.actions.iter().map(|a| a.kind().level()).collect();
        let mut sorted = levels.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        assert_eq!(levels, sorted);
        assert_eq!(
            plan.actions.first().map(Action::kind),
            Some(Kind::FloatingIp)
        );
    }

    #[test]
    fn quota_shortfall_has_the_numbers() {
        let p = profile(3);
        let plan = plan(&p, &Observation::default());
        let delta = QuotaDelta::of(&plan, |f| match f {
            "m1.small" => Some(FlavorSize {
                vcpus: 1,
                ram_mb: 2048,
            }),
            "m1.medium" => Some(FlavorSize {
                vcpus: 2,
                ram_mb: 4096,
            }),
            _ => None,
        });
        assert_eq!(delta.instances, 4);
        assert_eq!(delta.cores, 7);
        assert_eq!(delta.ram_mb, 2048 + 3 * 4096);
        assert_eq!(delta.security_group_rules, 1 + 2 + 2 * 2);
        let mut quotas = BTreeMap::new();
        quotas.insert(
            "instances",
            Quota {
                limit: 5,
                in_use: 2,
            },
        );
        quotas.insert(
            "cores",
            Quota {
                limit: -1,
                in_use: 100,
            },
        );
        quotas.insert(
            "floating_ips",
            Quota {
                limit: 10,
                in_use: 0,
            },
        );
        let short = shortfalls(&delta, &quotas);
        assert_eq!(short.len(), 1);
        assert_eq!(
            short[0].to_string(),
            "instances: needs 4 more, 2 of 5 in use (3 free)"
        );
    }

    /// The rules of the security group the plan creates under `group`.
    fn created_group_rules(plan: &Plan, group: &str) -> Vec<Rule> {
        plan.actions
            .iter()
            .find_map(|a| match a {
                Action::Create {
                    desired:
                        Desired {
                            name,
                            spec: Spec::SecurityGroup { rules },
                        },
                } if name == group => Some(rules.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("the plan creates no security group {group}"))
    }

    #[test]
    fn master_group_never_opens_to_anyone_else() {
        let p = profile(1);
        let plan = plan(&p, &Observation::default());
        let rules = created_group_rules(&plan, "demo-master-access");
        assert!(rules
            .iter()
            .all(|r| r.from == RuleSource::Cidr("198.51.100.0/24".into())));
        assert!(
            !rules.iter().any(|r| r.ports == Some((8888, 8888))),
            "jupyter is tunnel-only by default"
        );
    }

    #[test]
    fn nodes_group_admits_the_image_port_and_nfs_only_from_its_own_members() {
        // The master's image server (bootstrap::IMAGE_PORT), NFS (2049) and Horovod's ports
        // travel inside the cluster: one rule, every port, from the group itself.
        let p = profile(1);
        let plan = plan(&p, &Observation::default());
        let rules = created_group_rules(&plan, "demo-nodes");
        assert_eq!(
            rules,
            vec![Rule {
                protocol: None,
                ports: None,
                from: RuleSource::Group("demo-nodes".into()),
            }]
        );
        let _ = crate::bootstrap::IMAGE_PORT;
    }

    #[test]
    fn a_manila_share_is_granted_to_the_clusters_subnet() {
        let p = profile(1);
        let share = |p: &Profile| {
            plan(p, &Observation::default())
                .actions
                .iter()
                .find_map(|a| match a {
                    Action::Create {
                        desired:
                            Desired {
                                spec: Spec::Share { access_cidr, .. },
                                ..
                            },
                    } => Some(access_cidr.clone()),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(share(&p), p.subnet_cidr());
        let mut with_cidr = p.clone();
        with_cidr.network.cidr = Some("10.64.0.0/24".into());
        assert_eq!(share(&with_cidr), "10.64.0.0/24");
    }
}
