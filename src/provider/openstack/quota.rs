//! The project's limits and usage, named as [`crate::plan::QuotaDelta`] names them.

use std::collections::BTreeMap;

use super::OpenStackProvider;
use crate::plan::Quota;
use crate::provider::ProviderError;

impl OpenStackProvider {
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
}
