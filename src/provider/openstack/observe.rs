//! What exists: every resource of a cluster found by its tag (and, where Neutron tags come
//! in a second call, by its fixed name), the servers as nodes with their addresses, and the
//! Manila share's export location.

use std::collections::BTreeMap;

use super::{gpus_in_extra_specs, tag, OpenStackProvider, KEEP_KEY, META_KEY, ROOT_OF_KEY};
use crate::openstack::{FloatingIp, OpenStackError, Query, Server, ServerFilter, ServerStatus};
use crate::plan::{Health, Kind, Names, Observed, Role};
use crate::provider::{ProviderError, StatusView};
use crate::state::Node;

impl OpenStackProvider {
    /// The NFS export location of the cluster's Manila share (see [`pick_export`]), `None`
    /// when the cluster has no share or the share has no location yet.
    pub async fn share_export(&self, cluster: &str) -> Result<Option<String>, ProviderError> {
        let Some(share) = self.cluster_share(cluster).await? else {
            return Ok(None);
        };
        let locations = self.os.share().export_locations(&share.id).await?;
        Ok(pick_export(&locations))
    }

    /// Every server of the cluster with its addresses, master first.
    pub async fn nodes(&self, cluster: &str) -> Result<Vec<Node>, ProviderError> {
        let (servers, fips) =
            futures::try_join!(self.servers(cluster), self.floating_ips(cluster))?;
        Ok(self.nodes_of(cluster, &servers, &fips))
    }

    async fn floating_ips(&self, cluster: &str) -> Result<Vec<FloatingIp>, ProviderError> {
        Ok(self
            .os
            .network()
            .list_floating_ips(&Query::new().tags(&[tag(cluster)]))
            .await?)
    }

    /// The nodes these servers are, with their addresses (floating ones from `fips` where
    /// the server's own list lacks them), screened. Pure.
    fn nodes_of(&self, cluster: &str, servers: &[Server], fips: &[FloatingIp]) -> Vec<Node> {
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
                    role: Role::default(),
                    private_ip,
                    public_ip,
                    slots: gpus.max(1),
                    gpus,
                    ephemeral_gb: s
                        .flavor
                        .as_ref()
                        .and_then(|f| f.ephemeral)
                        .map_or(0, |gb| u32::try_from(gb).unwrap_or(u32::MAX)),
                    in_discovery: None,
                }
            })
            .collect();
        self.screen.nodes(cluster, nodes)
    }

    /// What `status` shows, with the cluster's servers listed once: every resource, the
    /// nodes and the autostop agent's word (see [`crate::provider::Provider::status_view`]).
    pub async fn status_view(&self, cluster: &str) -> Result<StatusView, ProviderError> {
        let others = futures::future::try_join_all(
            Kind::ALL
                .iter()
                .filter(|k| **k != Kind::Server)
                .map(|k| self.observe_kind(cluster, *k, false)),
        );
        let (servers, fips, others) =
            futures::try_join!(self.servers(cluster), self.floating_ips(cluster), others)?;
        let mut observed = self.observed_servers(cluster, &servers, false);
        observed.extend(others.into_iter().flatten());
        Ok(StatusView {
            observed,
            nodes: self.nodes_of(cluster, &servers, &fips),
            autostop: autostop_word(cluster, &servers),
        })
    }

    /// The servers as observed resources (`deleting` keeps those Nova lists as DELETED),
    /// screened. Pure.
    fn observed_servers(&self, cluster: &str, servers: &[Server], deleting: bool) -> Vec<Observed> {
        let servers = servers
            .iter()
            .filter(|s| {
                deleting || !matches!(s.status, ServerStatus::Deleted | ServerStatus::SoftDeleted)
            })
            .map(|s| Observed {
                kind: Kind::Server,
                name: s.name.clone().unwrap_or_default(),
                health: server_health(s),
                id: s.id.clone(),
                kept: false,
                called: None,
            })
            .collect();
        self.screen.observed(cluster, servers)
    }

    pub(super) async fn servers(&self, cluster: &str) -> Result<Vec<Server>, ProviderError> {
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
                    kept: false,
                    called: None,
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
                    kept: false,
                    called: None,
                }],
                None => vec![],
            }),
            Kind::Network
            | Kind::Subnet
            | Kind::Router
            | Kind::SecurityGroup
            | Kind::FloatingIp => self.neutron_kind(cluster, kind).await,
            Kind::Server => {
                let servers = self.servers(cluster).await?;
                Ok(self.observed_servers(cluster, &servers, deleting))
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
                    // A kept or taken share's access rule is granted after the apply and
                    // taken back by `down` (existing_share): its health is the share's own.
                    let kept = s.metadata.get(KEEP_KEY).is_some_and(|k| k == "true");
                    let health = match s.status.as_deref() {
                        Some("available") if kept => Health::Ready,
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
                        name: super::existing_share::shown_name(&s),
                        called: super::existing_share::called(&s),
                        id: s.id,
                        health,
                        kept,
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
                    // A server's root volume is the server's while it has one (Nova deletes
                    // it with the server); only one that outlived its server is a resource.
                    if let Some(server) = v.metadata.get(ROOT_OF_KEY) {
                        if kind == Kind::Volume && root_volume_outlived(&v.status) {
                            out.push(Observed {
                                kind,
                                name: format!("{server}-root"),
                                id: v.id.clone(),
                                health: Health::Failed(format!(
                                    "root volume left by its server (status {})",
                                    v.status
                                )),
                                kept: false,
                                called: None,
                            });
                        }
                        continue;
                    }
                    if kind == Kind::Volume {
                        let health = match v.status.as_str() {
                            "available" | "in-use" => Health::Ready,
                            st if st.starts_with("error") => {
                                Health::Failed(format!("volume status {st}"))
                            }
                            "deleting" => continue,
                            _ => Health::Pending,
                        };
                        // A volume taken by storage.volume goes by the cluster's name for it.
                        let name = v
                            .metadata
                            .get(super::existing_volume::NAME_KEY)
                            .or(v.name.as_ref())
                            .cloned()
                            .unwrap_or_default();
                        out.push(Observed {
                            kind,
                            name,
                            id: v.id.clone(),
                            health,
                            kept: v.metadata.get(KEEP_KEY).is_some_and(|k| k == "true"),
                            called: super::existing_volume::called(&v),
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
                            kept: false,
                            called: None,
                        });
                    }
                }
                Ok(out)
            }
        }
    }

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
}

/// What the master's autostop agent last published on its server (the one metadata key its
/// credential may set); `None` where it never did. Pure.
pub(super) fn autostop_word(cluster: &str, servers: &[Server]) -> Option<String> {
    let master = Names(cluster).master();
    servers
        .iter()
        .find(|s| s.name.as_deref() == Some(master.as_str()))
        .and_then(|s| s.metadata.get(super::credential::STATE_KEY).cloned())
}

/// Ready only once tagged (the tag comes last); otherwise an interrupted create to redo.
pub(super) fn completeness(tagged: bool) -> Health {
    if tagged {
        Health::Ready
    } else {
        Health::Failed("left incomplete by an interrupted run".into())
    }
}

pub(super) fn server_health(s: &Server) -> Health {
    let task = s.task_state.as_deref().filter(|t| !t.is_empty());
    match &s.status {
        // `stop` under way: the guest shutting down, its snapshot being uploaded.
        ServerStatus::Active if task.is_some_and(|t| t.starts_with("shelving")) => Health::Stopping,
        ServerStatus::Active => Health::Ready,
        // Offloaded: on no host; `start` unshelves it. While unshelving (task `unshelving`,
        // then `spawning`) it is starting.
        ServerStatus::ShelvedOffloaded if task.is_none() => Health::Stopped,
        ServerStatus::ShelvedOffloaded => Health::Starting,
        // Still on its host: offloading (task `shelving_offloading`), powering on again
        // (`spawning`/`powering-on`), or left there by a cloud whose `shelved_offload_time`
        // is not 0 (no task): stopped, though still holding its host's resources.
        ServerStatus::Shelved => match task {
            None => Health::Stopped,
            Some(t) if t.starts_with("shelving") => Health::Stopping,
            Some(_) => Health::Starting,
        },
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

/// A root volume whose server is gone: detached (`available`) or failed; never one attached,
/// being attached or detached, or on its way out.
fn root_volume_outlived(status: &str) -> bool {
    status == "available" || status.starts_with("error")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::provider::openstack::server_in as server;

    #[test]
    fn the_autostop_word_is_the_masters_only() {
        let mut master = server("ACTIVE", None);
        master.name = Some("c-master".into());
        master
            .metadata
            .insert(super::super::credential::STATE_KEY.into(), "idle".into());
        let mut worker = server("ACTIVE", None);
        worker
            .metadata
            .insert(super::super::credential::STATE_KEY.into(), "busy".into());
        assert_eq!(
            super::autostop_word("c", &[worker.clone(), master]),
            Some("idle".into())
        );
        assert_eq!(super::autostop_word("c", &[worker]), None);
        // another cluster's master is not ours
        assert_eq!(super::autostop_word("cc", &[]), None);
    }

    /// The states Nova shows through a shelve and an unshelve (nova's compute API and
    /// manager): a stopped cluster is kept and started, never replaced.
    #[test]
    fn shelved_servers_are_stopped_not_failed() {
        let h = |st, t| server_health(&server(st, t));
        assert_eq!(h("ACTIVE", None), Health::Ready);
        assert_eq!(h("ACTIVE", Some("shelving")), Health::Stopping);
        assert_eq!(
            h("ACTIVE", Some("shelving_image_uploading")),
            Health::Stopping
        );
        assert_eq!(h("SHELVED", Some("shelving_offloading")), Health::Stopping);
        assert_eq!(h("SHELVED_OFFLOADED", None), Health::Stopped);
        assert_eq!(h("SHELVED", None), Health::Stopped);
        assert_eq!(h("SHELVED_OFFLOADED", Some("unshelving")), Health::Starting);
        assert_eq!(h("SHELVED_OFFLOADED", Some("spawning")), Health::Starting);
        assert_eq!(h("SHELVED", Some("spawning")), Health::Starting);
        // what the user (or a crash) did is still replaced
        assert!(matches!(h("SHUTOFF", None), Health::Failed(_)));
        assert!(matches!(h("ERROR", None), Health::Failed(_)));
        assert_eq!(h("BUILD", Some("spawning")), Health::Pending);
    }
}
