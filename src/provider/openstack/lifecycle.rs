//! Stopping and starting the cluster's servers: Nova's `shelve` (the guest shuts down, its
//! root disk becomes a snapshot, and with the cloud's default `shelved_offload_time = 0` the
//! server is offloaded: on no host, its vCPUs, RAM and GPUs handed back in Placement, its
//! ports, addresses, volumes and tags kept) and `unshelve`. Each action goes through
//! [`settle`] (after an unknown outcome, a server found shelving or unshelving took it), then
//! one list call per tick until every server is where it should be. Both are safe to repeat:
//! a server already there is left alone, one on its way is waited for.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::settle::settle;
use super::{gpus_in_extra_specs, OpenStackProvider};
use crate::input::{shown, shown_message};
use crate::openstack::compute::{Server, ServerStatus};
use crate::openstack::shelve::ShelveAction;
use crate::provider::{Freed, ProviderError};

/// From the shelve to offloaded: the guest's clean shutdown (Nova waits up to its
/// `shutdown_timeout`, 60 s by default) and the snapshot's upload, which grows with the disk.
const STOP_DEADLINE: Duration = Duration::from_secs(1800);
/// From the unshelve to ACTIVE: scheduling, the snapshot's download and the boot.
const START_DEADLINE: Duration = Duration::from_secs(1800);
const TICK: Duration = Duration::from_secs(3);

/// What to do next about one server that should end up stopped.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ToStop {
    /// Running (or SHUTOFF, PAUSED, SUSPENDED): send `shelve`.
    Shelve,
    /// SHELVED with no task: the cloud did not offload it; `shelveOffload` may.
    Offload,
    Done,
    /// On its way: what it shows.
    Wait(String),
    Failed(String),
}

/// What to do next about one server that should end up running.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ToStart {
    Unshelve,
    Done,
    Wait(String),
    Failed(String),
}

fn task_of(s: &Server) -> Option<&str> {
    s.task_state.as_deref().filter(|t| !t.is_empty())
}

fn status_name(status: &ServerStatus) -> String {
    match status {
        ServerStatus::Other(s) => shown(s),
        ServerStatus::ShelvedOffloaded => "SHELVED_OFFLOADED".into(),
        ServerStatus::SoftDeleted => "SOFT_DELETED".into(),
        other => format!("{other:?}").to_uppercase(),
    }
}

fn showing(name: &str, s: &Server) -> String {
    format!(
        "{name}: {}{}",
        status_name(&s.status),
        task_of(s)
            .map(|t| format!(", task {}", shown(t)))
            .unwrap_or_default()
    )
}

fn fault(name: &str, s: &Server) -> String {
    format!(
        "server {name} is in ERROR: {}",
        s.fault.as_ref().map_or("no fault given".to_string(), |f| {
            shown_message(&f.message, 300)
        })
    )
}

/// The next step for a server `stop` wants stopped. `shelved`: this `stop` sent it a
/// shelve, which Nova accepted (its API sets the task before answering), so a server back
/// at ACTIVE or SHUTOFF with no task is one whose shelve failed. `offload_tried`: a
/// `shelveOffload` was sent (or refused) already, so a SHELVED server is as stopped as this
/// cloud makes it.
pub(super) fn to_stop(
    name: &str,
    s: Option<&Server>,
    shelved: bool,
    offload_tried: bool,
) -> ToStop {
    let Some(s) = s else {
        return ToStop::Failed(format!("server {name} is gone"));
    };
    match (&s.status, task_of(s)) {
        (ServerStatus::Error, _) => ToStop::Failed(fault(name, s)),
        (ServerStatus::ShelvedOffloaded, None) => ToStop::Done,
        (ServerStatus::Shelved, None) if offload_tried => ToStop::Done,
        (ServerStatus::Shelved, None) => ToStop::Offload,
        // Nova reverts a shelve whose snapshot could not be made or uploaded (the guest,
        // already shut down for it, is then SHUTOFF), with no fault on the server.
        (ServerStatus::Active | ServerStatus::Shutoff, None) if shelved => ToStop::Failed(format!(
            "Nova could not shelve {name} (its snapshot failed; the server's instance \
                 actions say why) and left it {}: run `stop` again to retry",
            status_name(&s.status)
        )),
        (ServerStatus::Active | ServerStatus::Shutoff, None) => ToStop::Shelve,
        (ServerStatus::Other(st), None) if st == "PAUSED" || st == "SUSPENDED" => ToStop::Shelve,
        (_, Some(_)) | (ServerStatus::Build, None) => ToStop::Wait(showing(name, s)),
        (_, None) => ToStop::Failed(format!(
            "server {name} cannot be shelved from status {}",
            status_name(&s.status)
        )),
    }
}

/// The next step for a server `start` wants running. `sent`: an unshelve was accepted, so a
/// server back at SHELVED_OFFLOADED with no task is one Nova could not place.
pub(super) fn to_start(name: &str, s: Option<&Server>, sent: bool) -> ToStart {
    let Some(s) = s else {
        return ToStart::Failed(format!("server {name} is gone"));
    };
    match (&s.status, task_of(s)) {
        (ServerStatus::Active, None) => ToStart::Done,
        (ServerStatus::Error, _) => ToStart::Failed(fault(name, s)),
        (ServerStatus::Shelved | ServerStatus::ShelvedOffloaded, None) if sent => {
            // Nova's conductor puts the task back and leaves the server shelved, with no
            // fault, when no host has room for it (its NoValidHost).
            ToStart::Failed(format!(
                "Nova found no host for {name} (not enough free vCPUs, RAM or GPUs, or quota); \
                 it stays stopped: run `start` again later, or `down`"
            ))
        }
        (ServerStatus::Shelved | ServerStatus::ShelvedOffloaded, None) => ToStart::Unshelve,
        (_, Some(_)) => ToStart::Wait(showing(name, s)),
        (_, None) => ToStart::Failed(format!(
            "server {name} is {}, which `start` does not undo (it was not stopped by `stop`); \
             `up` replaces it",
            status_name(&s.status)
        )),
    }
}

/// What a server holds on its host, from the flavor Nova embeds in it.
fn holds(s: Option<&Server>) -> Freed {
    let f = s.and_then(|s| s.flavor.as_ref());
    Freed {
        servers: 1,
        vcpus: f.and_then(|f| f.vcpus).unwrap_or(0),
        ram_mib: f.and_then(|f| f.ram).unwrap_or(0),
        gpus: f.map_or(0, |f| gpus_in_extra_specs(&f.extra_specs)),
        kept_on_host: vec![],
    }
}

fn shelving_or_shelved(s: &Server) -> bool {
    matches!(
        s.status,
        ServerStatus::Shelved | ServerStatus::ShelvedOffloaded
    ) || task_of(s).is_some_and(|t| t.starts_with("shelving"))
}

fn unshelving_or_up(s: &Server) -> bool {
    s.status == ServerStatus::Active || task_of(s).is_some()
}

impl OpenStackProvider {
    fn find<'s>(servers: &'s [Server], name: &str) -> Option<&'s Server> {
        servers.iter().find(|s| s.name.as_deref() == Some(name))
    }

    /// Shelves the servers named `nodes` (all at once) and waits until each is offloaded (or,
    /// on a cloud that keeps shelved servers on their host, shelved). Returns what the
    /// servers it stopped held.
    pub async fn stop(&self, cluster: &str, nodes: &[String]) -> Result<Freed, ProviderError> {
        let compute = self.os.compute();
        let started = Instant::now();
        let mut shelved: BTreeSet<&str> = BTreeSet::new();
        let mut offload_tried: BTreeSet<&str> = BTreeSet::new();
        let mut freed = Freed::default();
        // What each server this call shelved held, handed back unless it stays on its host.
        let mut held: Vec<(&str, Freed)> = Vec::new();
        loop {
            let servers = self.servers(cluster).await?;
            let mut waiting = Vec::new();
            for name in nodes {
                let s = Self::find(&servers, name);
                let sent = shelved.contains(name.as_str());
                match to_stop(name, s, sent, offload_tried.contains(name.as_str())) {
                    ToStop::Done => {}
                    ToStop::Failed(why) => return Err(ProviderError::Cloud(why)),
                    ToStop::Wait(what) => waiting.push(what),
                    ToStop::Shelve => {
                        let id = s.map(|s| s.id.as_str()).unwrap_or_default();
                        let compute = &compute;
                        settle(
                            &self.settle,
                            || async move { compute.shelve_action(id, ShelveAction::Shelve).await },
                            || async move {
                                Ok(compute
                                    .get_server(id)
                                    .await?
                                    .filter(shelving_or_shelved)
                                    .map(drop))
                            },
                        )
                        .await?;
                        shelved.insert(name);
                        held.push((name.as_str(), holds(s)));
                        waiting.push(format!("{name}: shelve sent"));
                    }
                    ToStop::Offload => {
                        let id = s.map(|s| s.id.as_str()).unwrap_or_default();
                        offload_tried.insert(name);
                        // Admin-only by default: a refusal leaves the server shelved on its host.
                        match compute.shelve_action(id, ShelveAction::ShelveOffload).await {
                            Ok(()) => waiting.push(format!("{name}: offload sent")),
                            Err(e) if matches!(e.status(), Some(403 | 409)) => {
                                freed.kept_on_host.push(name.clone())
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
            if waiting.is_empty() {
                for (name, h) in &held {
                    if !freed.kept_on_host.iter().any(|k| k == name) {
                        freed.add(h.clone());
                    }
                }
                return Ok(freed);
            }
            if started.elapsed() > STOP_DEADLINE {
                return Err(ProviderError::Cloud(format!(
                    "not stopped after {}s ({}); run `stop` again to go on waiting",
                    STOP_DEADLINE.as_secs(),
                    waiting.join("; ")
                )));
            }
            tokio::time::sleep(TICK).await;
        }
    }

    /// The last 1000 lines of server `node`'s console (None when the cluster has no such
    /// server).
    pub async fn console(
        &self,
        cluster: &str,
        node: &str,
    ) -> Result<Option<String>, ProviderError> {
        let servers = self.servers(cluster).await?;
        let Some(s) = Self::find(&servers, node) else {
            return Ok(None);
        };
        Ok(Some(self.os.compute().console_output(&s.id, 1000).await?))
    }

    /// Unshelves the servers named `nodes` (all at once) and waits until each is ACTIVE with
    /// no task left. A server still shelving is waited for first.
    pub async fn start(&self, cluster: &str, nodes: &[String]) -> Result<(), ProviderError> {
        let compute = self.os.compute();
        let started = Instant::now();
        let mut sent: BTreeSet<&str> = BTreeSet::new();
        loop {
            let servers = self.servers(cluster).await?;
            let mut waiting = Vec::new();
            for name in nodes {
                let s = Self::find(&servers, name);
                match to_start(name, s, sent.contains(name.as_str())) {
                    ToStart::Done => {}
                    ToStart::Failed(why) => return Err(ProviderError::Cloud(why)),
                    ToStart::Wait(what) => waiting.push(what),
                    ToStart::Unshelve => {
                        let id = s.map(|s| s.id.as_str()).unwrap_or_default();
                        let compute = &compute;
                        settle(
                            &self.settle,
                            || async move {
                                compute.shelve_action(id, ShelveAction::Unshelve).await
                            },
                            || async move {
                                Ok(compute
                                    .get_server(id)
                                    .await?
                                    .filter(unshelving_or_up)
                                    .map(drop))
                            },
                        )
                        .await?;
                        sent.insert(name);
                        waiting.push(format!("{name}: unshelve sent"));
                    }
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if started.elapsed() > START_DEADLINE {
                return Err(ProviderError::Cloud(format!(
                    "not started after {}s ({}); run `start` again to go on waiting",
                    START_DEADLINE.as_secs(),
                    waiting.join("; ")
                )));
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openstack::compute::Fault;

    use crate::provider::openstack::server_in as server;

    #[test]
    fn stop_shelves_running_servers_and_waits_for_the_offload() {
        let s = |st, t| to_stop("w", Some(&server(st, t)), false, false);
        assert_eq!(s("ACTIVE", None), ToStop::Shelve);
        assert_eq!(s("SHUTOFF", None), ToStop::Shelve);
        assert_eq!(s("PAUSED", None), ToStop::Shelve);
        assert_eq!(
            s("ACTIVE", Some("shelving_image_uploading")),
            ToStop::Wait("w: ACTIVE, task shelving_image_uploading".into())
        );
        assert_eq!(
            s("SHELVED", Some("shelving_offloading")),
            ToStop::Wait("w: SHELVED, task shelving_offloading".into())
        );
        assert_eq!(s("SHELVED_OFFLOADED", None), ToStop::Done);
        // a start under way is waited for, then the server is shelved again
        assert!(matches!(
            s("SHELVED_OFFLOADED", Some("spawning")),
            ToStop::Wait(_)
        ));
        // left on its host by the cloud: offload once, then take it as it is
        assert_eq!(s("SHELVED", None), ToStop::Offload);
        assert_eq!(
            to_stop("w", Some(&server("SHELVED", None)), true, true),
            ToStop::Done
        );
        assert!(matches!(s("RESCUE", None), ToStop::Failed(m) if m.contains("RESCUE")));
        assert!(
            matches!(to_stop("w", None, false, false), ToStop::Failed(m) if m == "server w is gone")
        );
        // a shelve Nova accepted, then reverted (seen here: Glance refused the snapshot's
        // upload): one line, not a wait until the deadline
        for status in ["SHUTOFF", "ACTIVE"] {
            assert!(
                matches!(to_stop("w", Some(&server(status, None)), true, false),
                    ToStop::Failed(m) if m.contains("could not shelve w") && m.contains(status))
            );
        }
        assert!(matches!(
            to_stop("w", Some(&server("ACTIVE", Some("shelving"))), true, false),
            ToStop::Wait(_)
        ));
        let mut broken = server("ERROR", None);
        broken.fault = Some(Fault {
            message: "Unshelve attempted but the image \u{1b}[31m cannot be found".into(),
            ..Fault::default()
        });
        assert!(
            matches!(to_stop("w", Some(&broken), false, false), ToStop::Failed(m) if m.contains("cannot be found") && !m.contains('\u{1b}'))
        );
    }

    #[test]
    fn start_unshelves_and_names_a_server_nova_could_not_place() {
        let s = |st, t, sent| to_start("w", Some(&server(st, t)), sent);
        assert_eq!(s("SHELVED_OFFLOADED", None, false), ToStart::Unshelve);
        assert_eq!(s("SHELVED", None, false), ToStart::Unshelve);
        assert!(matches!(
            s("SHELVED_OFFLOADED", Some("unshelving"), true),
            ToStart::Wait(_)
        ));
        assert!(matches!(
            s("SHELVED_OFFLOADED", Some("spawning"), true),
            ToStart::Wait(_)
        ));
        // a stop still under way: waited for, then unshelved
        assert!(matches!(
            s("ACTIVE", Some("shelving"), false),
            ToStart::Wait(_)
        ));
        assert_eq!(s("ACTIVE", None, true), ToStart::Done);
        assert!(
            matches!(s("SHELVED_OFFLOADED", None, true), ToStart::Failed(m) if m.contains("no host for w"))
        );
        assert!(matches!(s("SHUTOFF", None, false), ToStart::Failed(m) if m.contains("SHUTOFF")));
    }

    #[test]
    fn unknown_outcomes_are_settled_by_what_the_server_shows() {
        assert!(shelving_or_shelved(&server("ACTIVE", Some("shelving"))));
        assert!(shelving_or_shelved(&server("SHELVED_OFFLOADED", None)));
        assert!(!shelving_or_shelved(&server("ACTIVE", None)));
        assert!(unshelving_or_up(&server(
            "SHELVED_OFFLOADED",
            Some("unshelving")
        )));
        assert!(unshelving_or_up(&server("ACTIVE", None)));
        assert!(!unshelving_or_up(&server("SHELVED_OFFLOADED", None)));
    }
}
