//! Rebooting the cluster's servers: Nova's `reboot` action, SOFT (the guest shuts down and
//! boots again; Nova's API reference allows it only from ACTIVE, HARD is a power cycle), sent
//! through [`settle`] like every action (after an unknown outcome, a server found rebooting
//! took it), then one list call per tick until every one is ACTIVE with no task left.

use std::time::Duration;

use super::settle::settle;
use super::{tag, OpenStackProvider};
use crate::openstack::compute::{RebootType, Server, ServerFilter, ServerStatus};
use crate::provider::ProviderError;
use crate::wait::{wait_until, Probe, WaitError};

/// From the action to ACTIVE again: a guest's shutdown (Nova's `shutdown_timeout` is 60 s by
/// default) and a GPU server's firmware and boot.
const REBOOT_DEADLINE: Duration = Duration::from_secs(600);

/// Where a rebooting server stands in one listing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Back {
    Yes,
    /// Still rebooting: what it shows.
    Not(String),
    /// It will not come back by waiting.
    Failed(String),
}

/// Whether server `name` is back from its reboot, as Nova shows it: ACTIVE and no task
/// (status REBOOT / HARD_REBOOT, task_state `reboot_*`, while it is under way).
pub(super) fn back(name: &str, server: Option<&Server>) -> Back {
    let Some(s) = server else {
        return Back::Failed(format!("server {name} is gone"));
    };
    let task = s.task_state.as_deref().filter(|t| !t.is_empty());
    match (&s.status, task) {
        (ServerStatus::Active, None) => Back::Yes,
        (ServerStatus::Error, _) => Back::Failed(format!(
            "server {name} went to ERROR during its reboot: {}",
            s.fault.as_ref().map_or("no fault given".to_string(), |f| {
                crate::input::shown_message(&f.message, 300)
            })
        )),
        (ServerStatus::Shutoff, None) => Back::Failed(format!(
            "server {name} is SHUTOFF after its reboot (the guest powered itself off)"
        )),
        (status, task) => Back::Not(format!(
            "server {name}: {}{}",
            status_name(status),
            task.map(|t| format!(", task {}", crate::input::shown(t)))
                .unwrap_or_default()
        )),
    }
}

fn status_name(status: &ServerStatus) -> String {
    match status {
        ServerStatus::Other(s) => crate::input::shown(s),
        other => format!("{other:?}").to_uppercase(),
    }
}

/// Whether a server shows a reboot under way: what the action leaves behind, looked for
/// after an unknown outcome.
fn rebooting(s: &Server) -> bool {
    matches!(&s.status, ServerStatus::Other(st) if st == "REBOOT" || st == "HARD_REBOOT")
        || s.task_state
            .as_deref()
            .is_some_and(|t| t.starts_with("reboot"))
}

impl OpenStackProvider {
    pub(super) async fn cluster_servers(
        &self,
        cluster: &str,
    ) -> Result<Vec<Server>, ProviderError> {
        let filter = ServerFilter {
            tags: vec![tag(cluster)],
            name: None,
        };
        Ok(self.os.compute().list_servers(&filter).await?)
    }

    /// SOFT-reboots the servers named `nodes` and waits until every one is ACTIVE again.
    pub async fn reboot(&self, cluster: &str, nodes: &[String]) -> Result<(), ProviderError> {
        let servers = self.cluster_servers(cluster).await?;
        let compute = self.os.compute();
        for name in nodes {
            let id = servers
                .iter()
                .find(|s| s.name.as_deref() == Some(name.as_str()))
                .map(|s| s.id.clone())
                .ok_or_else(|| {
                    ProviderError::Cloud(format!("no server {name} in the cluster to reboot"))
                })?;
            let (compute, id) = (&compute, id.as_str());
            settle(
                &self.settle,
                || async move { compute.reboot_server(id, RebootType::Soft).await },
                || async move { Ok(compute.get_server(id).await?.filter(rebooting).map(drop)) },
            )
            .await?;
        }
        wait_until(
            REBOOT_DEADLINE,
            Duration::from_secs(3),
            move || async move {
                let servers = match self.cluster_servers(cluster).await {
                    Ok(s) => s,
                    Err(e) => return Probe::Failed(e),
                };
                let mut waiting = Vec::new();
                for name in nodes {
                    let found = servers.iter().find(|s| s.name.as_deref() == Some(name));
                    match back(name, found) {
                        Back::Yes => {}
                        Back::Not(why) => waiting.push(why),
                        Back::Failed(why) => return Probe::Failed(ProviderError::Cloud(why)),
                    }
                }
                if waiting.is_empty() {
                    Probe::Ready(())
                } else {
                    Probe::Waiting(format!(
                        "waiting for ACTIVE after the reboot: {}",
                        waiting.join("; ")
                    ))
                }
            },
        )
        .await
        .map_err(|e| match e {
            WaitError::Failed(e) => e,
            WaitError::TimedOut { last, secs } => ProviderError::Cloud(format!(
                "not back from the reboot after {secs}s ({last}); `openstack server reboot --hard` \
                 power-cycles a server whose guest does not shut down, then run `up` again"
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openstack::compute::Fault;

    use crate::provider::openstack::server_in as server;

    #[test]
    fn a_server_is_back_when_active_with_no_task_left() {
        assert_eq!(back("w", Some(&server("ACTIVE", None))), Back::Yes);
        assert_eq!(back("w", Some(&server("ACTIVE", Some("")))), Back::Yes);
        assert_eq!(
            back("w", Some(&server("REBOOT", Some("reboot_started")))),
            Back::Not("server w: REBOOT, task reboot_started".into())
        );
        assert_eq!(
            back(
                "w",
                Some(&server("HARD_REBOOT", Some("reboot_pending_hard")))
            ),
            Back::Not("server w: HARD_REBOOT, task reboot_pending_hard".into())
        );
        // ACTIVE while Nova still has a task on it: not back yet
        assert!(matches!(
            back("w", Some(&server("ACTIVE", Some("rebooting")))),
            Back::Not(_)
        ));
        assert!(matches!(back("w", None), Back::Failed(m) if m == "server w is gone"));
        let mut broken = server("ERROR", None);
        broken.fault = Some(Fault {
            message: "libvirt: domain crashed".into(),
            ..Fault::default()
        });
        assert!(
            matches!(back("w", Some(&broken)), Back::Failed(m) if m.ends_with("libvirt: domain crashed"))
        );
        assert!(matches!(
            back("w", Some(&server("SHUTOFF", None))),
            Back::Failed(_)
        ));
    }

    #[test]
    fn a_reboot_under_way_is_what_an_unknown_outcome_looks_for() {
        assert!(rebooting(&server("REBOOT", Some("reboot_pending"))));
        assert!(rebooting(&server("HARD_REBOOT", None)));
        assert!(rebooting(&server("ACTIVE", Some("reboot_started"))));
        assert!(!rebooting(&server("ACTIVE", None)));
        assert!(!rebooting(&server("SHUTOFF", None)));
    }
}
