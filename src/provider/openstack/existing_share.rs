//! A Manila share that outlives the cluster: one made with `storage.keep`, or one the project
//! already has, taken with `storage.share` (found by id or by its one name, checked, then
//! marked with the cluster and kept, as `storage.volume` is).
//!
//! The share's access rule for the cluster's network is not a resource of the plan: it lives
//! inside the share. `up` grants it (again) after every apply ([`OpenStackProvider::grant_share`])
//! and `down` takes back the one this cluster added ([`OpenStackProvider::release_share`]): the
//! network it names goes with the cluster, and a share left behind must not stay open to it.
//! Which CIDR the cluster granted is written on the share ([`ACCESS_KEY`]) before the grant is
//! sent, so an interrupted `up` leaves nothing `down` cannot find.

use std::collections::BTreeMap;
use std::time::Duration;

use super::existing_volume::{marks, named, refused, NAME_KEY};
use super::settle::settle;
use super::{OpenStackProvider, META_KEY};
use crate::openstack::share::AccessRule;
use crate::openstack::Share;
use crate::plan::Names;
use crate::provider::ProviderError;
use crate::wait::{wait_until, Probe, WaitError};

/// Manila metadata: the CIDR whose access rule this cluster added to a kept or taken share.
pub const ACCESS_KEY: &str = "hvd-access";

/// How long an access rule may take to apply, or to go once denied.
const RULE_ACTIVE: Duration = Duration::from_secs(180);

impl OpenStackProvider {
    /// The share `wanted` names (an id, else exactly one share of that name), checked for
    /// `cluster` (see [`takeable`]).
    pub(super) async fn find_existing_share(
        &self,
        cluster: &str,
        wanted: &str,
    ) -> Result<Share, ProviderError> {
        let all = self.os.share().list_shares(&BTreeMap::new()).await?;
        let one = named(
            FIELD,
            "share",
            &all,
            wanted,
            |s| &s.id,
            |s| s.name.as_deref(),
        )?;
        takeable(one, cluster, self.os.project_id()).map_err(|why| refused(FIELD, wanted, why))?;
        Ok(one.clone())
    }

    /// Takes the share: marks it with the cluster, kept, under `name`; returns its id (the
    /// access rule follows in [`Self::grant_share`]). The one `resolve` found is looked at
    /// again by id, not searched.
    pub(super) async fn take_existing_share(
        &self,
        cluster: &str,
        name: &str,
        wanted: &str,
    ) -> Result<String, ProviderError> {
        let api = self.os.share();
        let s = match &self.resolved.existing_share {
            Some(id) => {
                let s = api.get_share(id).await?.ok_or_else(|| {
                    refused(
                        FIELD,
                        wanted,
                        "it was deleted since it was looked up".into(),
                    )
                })?;
                takeable(&s, cluster, self.os.project_id())
                    .map_err(|why| refused(FIELD, wanted, why))?;
                s
            }
            None => self.find_existing_share(cluster, wanted).await?,
        };
        api.add_metadata(&s.id, &marks(cluster, name)).await?;
        Ok(s.id)
    }

    /// The cluster's share (made, kept or taken), by its mark and the name it goes by in the
    /// cluster.
    pub(super) async fn cluster_share(
        &self,
        cluster: &str,
    ) -> Result<Option<Share>, ProviderError> {
        let meta = BTreeMap::from([(META_KEY.to_string(), cluster.to_string())]);
        let name = Names(cluster).share();
        Ok(self
            .os
            .share()
            .list_shares(&meta)
            .await?
            .into_iter()
            .find(|s| shown_name(s) == name))
    }

    /// A kept or taken share open to the cluster's network `cidr`, read-write: the rule added
    /// when missing (its CIDR written on the share first), a rule this cluster added for
    /// another CIDR taken back, then waited for until Manila applied it. A line when it changed
    /// something.
    pub(super) async fn grant_share(
        &self,
        cluster: &str,
        cidr: &str,
    ) -> Result<Option<String>, ProviderError> {
        let Some(share) = self.cluster_share(cluster).await? else {
            return Ok(None);
        };
        let api = self.os.share();
        let id = share.id.as_str();
        let rules = api.list_access_rules(id).await?;
        let steps = access_steps(
            &rules,
            share.metadata.get(ACCESS_KEY).map(String::as_str),
            cidr,
        )
        .map_err(|why| ProviderError::Cloud(format!("share {}: {why}", shown_name(&share))))?;
        for rule in &steps.deny {
            api.deny_access(id, rule).await?;
        }
        if steps.grant {
            api.add_metadata(
                id,
                &BTreeMap::from([(ACCESS_KEY.to_string(), cidr.to_string())]),
            )
            .await?;
            self.allow_network(id, cidr).await?;
        } else if !steps.deny.is_empty() {
            api.delete_metadata(id, ACCESS_KEY).await?;
        }
        // Also a rule made with the share a moment ago: the nodes mount only once it applies.
        self.await_rule(&shown_name(&share), id, cidr, false)
            .await?;
        if steps.grant || !steps.deny.is_empty() {
            return Ok(Some(format!(
                "  ~ share {}: open to {cidr} (read-write){}",
                crate::input::shown(&shown_name(&share)),
                if steps.deny.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} older rule(s) of this cluster taken back",
                        steps.deny.len()
                    )
                }
            )));
        }
        Ok(None)
    }

    /// Asks Manila for a read-write rule for `cidr` on share `id`, once (an answer lost on
    /// the way is looked up, not asked again).
    pub(super) async fn allow_network(&self, id: &str, cidr: &str) -> Result<(), ProviderError> {
        let api = self.os.share();
        settle(
            &self.settle,
            || async { api.allow_ip_access(id, cidr, true).await.map(drop) },
            || async {
                let rules = api.list_access_rules(id).await?;
                Ok(rules.iter().any(|r| r.access_to == cidr).then_some(()))
            },
        )
        .await
    }

    /// `down`: the access rule this cluster added to its kept or taken share taken back (the
    /// share stays). A line when there was one.
    pub(super) async fn release_share(
        &self,
        cluster: &str,
    ) -> Result<Option<String>, ProviderError> {
        let Some(share) = self.cluster_share(cluster).await? else {
            return Ok(None);
        };
        let Some(cidr) = share.metadata.get(ACCESS_KEY) else {
            return Ok(None);
        };
        let api = self.os.share();
        let rules = api.list_access_rules(&share.id).await?;
        for r in rules.iter().filter(|r| &r.access_to == cidr) {
            api.deny_access(&share.id, &r.id).await?;
        }
        self.await_rule(&shown_name(&share), &share.id, cidr, true)
            .await?;
        api.delete_metadata(&share.id, ACCESS_KEY).await?;
        Ok(Some(format!(
            "share {}: the cluster's access rule ({}) taken back; the share stays",
            crate::input::shown(&shown_name(&share)),
            crate::input::shown(cidr)
        )))
    }

    /// Until the rule for `cidr` is active (`gone` false) or, a deny being asynchronous,
    /// until Manila has removed every rule for it (`gone` true).
    async fn await_rule(
        &self,
        name: &str,
        id: &str,
        cidr: &str,
        gone: bool,
    ) -> Result<(), ProviderError> {
        let api = &self.os.share();
        let (doing, done) = if gone {
            ("take back", "still there")
        } else {
            ("apply", "not active")
        };
        wait_until(RULE_ACTIVE, Duration::from_secs(2), move || async move {
            let rules = match api.list_access_rules(id).await {
                Ok(rules) => rules,
                Err(e) => return Probe::Failed(e.into()),
            };
            // Waiting for a rule to apply, one on its way out is not it.
            let leaving = |r: &&AccessRule| {
                !gone && matches!(r.state.as_deref(), Some("queued_to_deny" | "denying"))
            };
            match rules.iter().filter(|r| !leaving(r)).find(|r| r.access_to == cidr) {
                None if gone => Probe::Ready(()),
                Some(r) if !gone && r.state.as_deref() == Some("active") => Probe::Ready(()),
                Some(r) if r.state.as_deref() == Some("error") => Probe::Failed(
                    ProviderError::Cloud(format!(
                        "share {name}: Manila could not {doing} the access rule for {cidr} (state error)"
                    )),
                ),
                _ => Probe::Waiting(format!("share {name}'s access rule for {cidr}")),
            }
        })
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { .. } => ProviderError::Cloud(format!(
                "share {name}: its access rule for {cidr} {done} after {}s",
                RULE_ACTIVE.as_secs()
            )),
        })
    }
}

/// The name a share goes by in the cluster: a taken share's [`NAME_KEY`], else its own.
pub fn shown_name(s: &Share) -> String {
    s.metadata
        .get(NAME_KEY)
        .or(s.name.as_ref())
        .cloned()
        .unwrap_or_default()
}

/// A taken share's own name, where the cluster calls it by another ([`NAME_KEY`]).
pub fn called(s: &Share) -> Option<String> {
    super::existing_volume::own_name_if_other(&s.metadata, s.name.as_ref())
}

/// The profile's key this module serves.
const FIELD: &str = "storage.share";

/// Whether `cluster` may take this share: the project's own, not marked for another cluster
/// (whose /shared it is), an NFS share, available. The reason, shortened and escaped, when
/// not. Pure.
pub fn takeable(s: &Share, cluster: &str, project: &str) -> Result<(), String> {
    let shown = crate::input::shown;
    if let Some(owner) = s.project_id.as_deref().filter(|o| *o != project) {
        return Err(format!(
            "it is project {}'s (a public share of another project); only this project's shares are taken",
            shown(owner)
        ));
    }
    if let Some(owner) = s.metadata.get(META_KEY).filter(|o| o.as_str() != cluster) {
        return Err(format!(
            "it is cluster `{}`'s (its `{META_KEY}` mark); a share is one cluster's /shared at a time",
            shown(owner)
        ));
    }
    match s.share_proto.as_deref() {
        Some(p) if p.eq_ignore_ascii_case("nfs") => {}
        other => {
            return Err(format!(
                "it is a {} share; the nodes mount NFS",
                shown(other.unwrap_or("?"))
            ))
        }
    }
    match s.status.as_deref() {
        Some("available") => Ok(()),
        other => Err(format!(
            "its status is `{}`, not available",
            shown(other.unwrap_or("?"))
        )),
    }
}

/// What opens a share to `cidr`: the rules to deny (those for a CIDR this cluster granted
/// before, `recorded`, when it is another; or its own rule for `cidr` in error) and whether a
/// rule must be added. A read-only rule for `cidr` that is not this cluster's is refused:
/// Manila keeps one rule per address, and /shared must be writable. Pure.
pub fn access_steps(
    rules: &[AccessRule],
    recorded: Option<&str>,
    cidr: &str,
) -> Result<AccessSteps, String> {
    let going = |r: &AccessRule| matches!(r.state.as_deref(), Some("queued_to_deny" | "denying"));
    let mut deny: Vec<String> = rules
        .iter()
        .filter(|r| !going(r))
        .filter(|r| match recorded {
            Some(c) if c != cidr => r.access_to == c,
            Some(c) => r.access_to == c && r.state.as_deref() == Some("error"),
            None => false,
        })
        .map(|r| r.id.clone())
        .collect();
    deny.sort();
    let standing = rules
        .iter()
        .find(|r| r.access_to == cidr && !going(r) && !deny.contains(&r.id));
    match standing {
        Some(r) if r.access_level != "rw" => Err(format!(
            "an access rule of its own ({}) lets {cidr} only read it; /shared must be writable",
            crate::input::shown(&r.id)
        )),
        Some(r) if r.state.as_deref() == Some("error") => Err(format!(
            "its access rule for {cidr} ({}) is in error and is not this cluster's; deny it first",
            crate::input::shown(&r.id)
        )),
        Some(_) => Ok(AccessSteps { deny, grant: false }),
        None => Ok(AccessSteps { deny, grant: true }),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub struct AccessSteps {
    pub deny: Vec<String>,
    pub grant: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(status: &str, proto: &str, meta: &[(&str, &str)]) -> Share {
        Share {
            id: "s-1".into(),
            name: Some("datasets".into()),
            status: Some(status.into()),
            share_proto: Some(proto.into()),
            project_id: Some("p1".into()),
            metadata: meta
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Share::default()
        }
    }

    fn rule(id: &str, to: &str, level: &str, state: &str) -> AccessRule {
        AccessRule {
            id: id.into(),
            access_type: "ip".into(),
            access_to: to.into(),
            access_level: level.into(),
            state: Some(state.into()),
            ..AccessRule::default()
        }
    }

    #[test]
    fn a_share_is_taken_only_when_ours_free_and_nfs() {
        assert_eq!(
            takeable(&share("available", "NFS", &[]), "demo", "p1"),
            Ok(())
        );
        assert_eq!(
            takeable(
                &share("available", "nfs", &[("hvd-cluster", "demo")]),
                "demo",
                "p1"
            ),
            Ok(())
        );
        let other = takeable(
            &share("available", "NFS", &[("hvd-cluster", "x\u{1b}[2J")]),
            "demo",
            "p1",
        )
        .unwrap_err();
        assert!(
            other.starts_with("it is cluster `x\\u{1b}[2J`'s"),
            "{other}"
        );
        assert!(takeable(&share("available", "CIFS", &[]), "demo", "p1")
            .is_err_and(|e| e.contains("a CIFS share")));
        assert!(takeable(&share("error", "NFS", &[]), "demo", "p1")
            .is_err_and(|e| e.contains("`error`, not available")));
        assert!(takeable(&share("available", "NFS", &[]), "demo", "p2")
            .is_err_and(|e| e.contains("project p1's")));
        assert_eq!(
            marks("demo", "demo-share"),
            BTreeMap::from([
                ("hvd-cluster".to_string(), "demo".to_string()),
                ("hvd-keep".to_string(), "true".to_string()),
                ("hvd-name".to_string(), "demo-share".to_string()),
            ])
        );
        let mut taken = share("available", "NFS", &[("hvd-name", "demo-share")]);
        assert_eq!(shown_name(&taken), "demo-share");
        taken.metadata.clear();
        assert_eq!(shown_name(&taken), "datasets");
    }

    #[test]
    fn the_clusters_rule_is_added_once_moved_with_its_network_and_never_anothers_taken() {
        let net = "10.42.0.0/24";
        // Nothing yet: grant.
        assert_eq!(
            access_steps(&[], None, net),
            Ok(AccessSteps {
                deny: vec![],
                grant: true
            })
        );
        // Ours, standing: nothing to do.
        let ours = [rule("r1", net, "rw", "active")];
        assert_eq!(
            access_steps(&ours, Some(net), net),
            Ok(AccessSteps {
                deny: vec![],
                grant: false
            })
        );
        // Somebody else's rule for the same network: used, never taken back.
        assert_eq!(
            access_steps(&ours, None, net),
            Ok(AccessSteps {
                deny: vec![],
                grant: false
            })
        );
        // The profile moved to another network: ours for the old one goes, one for the new.
        let moved = [
            rule("r1", "10.9.0.0/24", "rw", "active"),
            rule("r2", "192.0.2.7", "ro", "active"),
        ];
        assert_eq!(
            access_steps(&moved, Some("10.9.0.0/24"), net),
            Ok(AccessSteps {
                deny: vec!["r1".into()],
                grant: true
            })
        );
        // Ours in error: denied and made again.
        let broken = [rule("r1", net, "rw", "error")];
        assert_eq!(
            access_steps(&broken, Some(net), net),
            Ok(AccessSteps {
                deny: vec!["r1".into()],
                grant: true
            })
        );
        // Not ours: a read-only rule or one in error is refused, named.
        let ro = access_steps(&[rule("r9", net, "ro", "active")], None, net).unwrap_err();
        assert!(ro.contains("r9") && ro.contains("only read"), "{ro}");
        assert!(access_steps(&[rule("r9", net, "rw", "error")], None, net)
            .is_err_and(|e| e.contains("deny it first")));
        // A rule being denied counts as gone.
        assert_eq!(
            access_steps(&[rule("r1", net, "rw", "denying")], Some(net), net),
            Ok(AccessSteps {
                deny: vec![],
                grant: true
            })
        );
    }
}
