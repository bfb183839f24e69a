//! What a plan adds to the project's quota usage, and what would not fit.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use super::{Action, Desired, Kind, Plan, Spec};

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
            Spec::Server {
                flavor: f,
                root_volume,
                ..
            } => {
                q.instances += sign;
                if let Some(v) = root_volume {
                    q.volumes += sign;
                    q.volume_gigabytes += sign * i64::from(v.size_gb);
                }
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
            // A share or volume the profile names as existing is taken, not made: no quota.
            Spec::Share {
                existing: Some(_), ..
            }
            | Spec::Volume {
                existing: Some(_), ..
            } => {}
            Spec::Share { size_gb, .. } => {
                q.shares += sign;
                q.share_gigabytes += sign * i64::from(*size_gb);
            }
            Spec::Volume { size_gb, .. } => {
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
