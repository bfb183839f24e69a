//! Desired state, observed state, and the ordered actions between them. Pure: no I/O.
//!
//! A provider's [`Blueprint`] lists what a cluster needs (`desired`); a provider observes what
//! exists (found by the cluster's tag); [`plan`] diffs the two into create / keep / replace /
//! delete actions that [`crate::apply`] runs level by level; `quota` says what a plan adds
//! to the project's usage. The model (kinds, specs, actions) is here; `names` says what
//! every resource is called.

mod diff;
mod names;
mod quota;
#[cfg(test)]
mod tests;

pub use diff::{plan, teardown, teardown_summary};
pub use names::Names;
pub use quota::{shortfalls, FlavorSize, Quota, QuotaDelta, Shortfall};

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::profile::Profile;

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

/// A server's part in the cluster (in state and JSON: `master`, `worker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Master,
    #[default]
    Worker,
}

impl Role {
    /// As the templates, the state file and the container's configuration hash spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Master => "master",
            Role::Worker => "worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
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

/// A server that boots from a new Cinder volume made from its image (deleted with it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootVolume {
    pub size_gb: u32,
    /// The cloud's default type when `None`.
    pub volume_type: Option<String>,
}

impl RootVolume {
    /// The root volume a profile's `root_volume_gb` and `volume_type` ask for.
    pub fn of(size_gb: Option<u32>, volume_type: &Option<String>) -> Option<RootVolume> {
        size_gb.map(|size_gb| RootVolume {
            size_gb,
            volume_type: volume_type.clone(),
        })
    }
}

impl fmt::Display for RootVolume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "boots from a {} GB volume", self.size_gb)?;
        if let Some(t) = &self.volume_type {
            write!(f, " of type {}", crate::input::shown(t))?;
        }
        Ok(())
    }
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
        /// `storage.keep`: marked to outlive the cluster.
        keep: bool,
        /// `storage.share`: not made but taken, as the profile names it (marked, kept).
        existing: Option<String>,
    },
    Volume {
        size_gb: u32,
        volume_type: Option<String>,
        /// `storage.keep`: marked to outlive the cluster.
        keep: bool,
        /// `storage.volume`: not made but taken, as the profile names it (marked, kept).
        existing: Option<String>,
    },
    Server {
        role: Role,
        /// Worker number (never reused, so a replacement is a new host to Horovod).
        index: u32,
        flavor: String,
        image: String,
        security_groups: Vec<String>,
        network: String,
        /// `None`: the flavor's own root disk.
        root_volume: Option<RootVolume>,
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
    /// A server `stop` is stopping (shelving): kept; `start` waits for it, then starts it.
    Stopping,
    /// A server `stop` stopped (shelved and offloaded; locally a stopped container): kept,
    /// never replaced; `start` or `up` starts it again.
    Stopped,
    /// A server being started again (unshelving): kept and waited for.
    Starting,
}

impl Health {
    /// Stopped, or on its way down or back up: what `start` (and `up`) start again.
    pub fn is_stopped(&self) -> bool {
        matches!(self, Health::Stopping | Health::Stopped | Health::Starting)
    }
}

/// Where a cluster's servers stand together, for `status`: `absent` (none), `running` (all
/// ready), `stopped` (all stopped), `stopping` / `starting` (any on its way), else
/// `degraded` (building, failed, or some stopped and some not). Pure.
pub fn servers_state(observed: &[Observed]) -> &'static str {
    let servers: Vec<&Health> = observed
        .iter()
        .filter(|o| o.kind == Kind::Server)
        .map(|o| &o.health)
        .collect();
    if servers.is_empty() {
        "absent"
    } else if servers.iter().all(|h| **h == Health::Ready) {
        "running"
    } else if servers.iter().all(|h| **h == Health::Stopped) {
        "stopped"
    } else if servers.iter().any(|h| **h == Health::Stopping) {
        "stopping"
    } else if servers.iter().any(|h| **h == Health::Starting) {
        "starting"
    } else {
        "degraded"
    }
}

/// A resource the provider found, by the cluster's tag or name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observed {
    pub kind: Kind,
    pub name: String,
    pub id: String,
    pub health: Health,
    /// Marked in the cloud to outlive the cluster (`storage.keep`): never deleted by `down`
    /// or a plan, found again by the next `up`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
    /// Its own name in the cloud where the cluster knows it by another (a volume or share
    /// taken by `storage.volume` or `storage.share`): what the user named, shown by `down`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub called: Option<String>,
}

impl Observed {
    /// How the user knows it: its own name where the cluster calls it otherwise.
    pub fn shown_name(&self) -> &str {
        self.called.as_deref().unwrap_or(&self.name)
    }
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

    /// One line: how many resources the plan creates, replaces, deletes and keeps.
    pub fn summary(&self) -> String {
        let c = self.counts();
        format!(
            "{} to create, {} to replace, {} to delete, {} unchanged",
            c.create, c.replace, c.delete, c.keep
        )
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

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sorted: Vec<&Action> = self.actions.iter().collect();
        sorted.sort_by_key(|a| a.kind().level());
        for a in sorted {
            match a {
                Action::Create { desired } => writeln!(
                    f,
                    "  + create  {:<18} {}{}",
                    desired.kind(),
                    desired.name,
                    disk_note(&desired.spec)
                )?,
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

/// `" (boots from a 40 GB volume)"` for a server on a root volume; nothing otherwise.
fn disk_note(spec: &Spec) -> String {
    match spec {
        Spec::Server {
            root_volume: Some(v),
            ..
        } => format!(" ({v})"),
        _ => String::new(),
    }
}

/// How a provider lays a cluster out: its fixed resources and the spec of worker `index`.
/// Pure: the same profile gives the same resources (see `provider::openstack::desired` and
/// `provider::local`).
pub trait Blueprint: Send + Sync {
    /// Everything but the workers, which depend on what exists (numbers are never reused).
    fn fixed(&self, p: &Profile) -> Vec<Desired>;
    /// Worker number `index`.
    fn worker(&self, p: &Profile, index: u32) -> Desired;
}
