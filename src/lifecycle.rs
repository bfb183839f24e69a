//! Stopping a cluster and starting it again, beside [`crate::converge`]: [`stop`] stops every
//! server, workers first (all at once), the master (the NFS server) last, and says what they
//! handed back; [`start_stopped`] starts the stopped servers of an observed cluster, master
//! first, for `start`, `up`, `scale` and `heal`, which then bootstrap and check as always.
//! The provider keeps disks, addresses, the network, the share and the keys.

use crate::context::Context;
use crate::error::Error;
use crate::plan::{Health, Kind, Names, Observed};
use crate::provider::{Freed, Provider};

/// What `stop` did.
#[derive(Debug, Default, serde::Serialize)]
pub struct StopReport {
    /// The servers found running (or on their way) and stopped now.
    pub stopped: Vec<String>,
    /// The servers that were stopped already.
    pub already: Vec<String>,
    pub freed: Freed,
}

/// The servers of a cluster as `stop` orders them: workers (by name), then the master.
/// Pure.
pub fn stop_order(cluster: &str, servers: &[Observed]) -> (Vec<String>, Option<String>) {
    let names = Names(cluster);
    let master = names.master();
    let mut workers: Vec<String> = servers
        .iter()
        .filter(|o| o.kind == Kind::Server && names.worker_index(&o.name).is_some())
        .map(|o| o.name.clone())
        .collect();
    workers.sort();
    workers.dedup();
    let master = servers
        .iter()
        .any(|o| o.kind == Kind::Server && o.name == master)
        .then_some(master);
    (workers, master)
}

/// Stops every server of cluster `name` (`servers`, as the provider listed them): the
/// workers, then the master. Safe to repeat: a stopped server is left alone, one on its way
/// is waited for.
pub async fn stop(
    ctx: &Context,
    provider: &dyn Provider,
    name: &str,
    servers: &[Observed],
) -> Result<StopReport, Error> {
    if servers.is_empty() {
        return Err(Error::Runtime(format!(
            "cluster `{name}` has no servers to stop"
        )));
    }
    let mut report = StopReport::default();
    for o in servers {
        if o.health == Health::Stopped {
            report.already.push(o.name.clone());
        } else {
            report.stopped.push(o.name.clone());
        }
    }
    let (workers, master) = stop_order(name, servers);
    if !workers.is_empty() {
        let spinner = ctx.progress.spinner(&format!(
            "stopping {} worker(s) (shelving: the guest shuts down, its disk is kept)",
            workers.len()
        ));
        let freed = provider.stop(name, &workers).await;
        spinner.finish_and_clear();
        report.freed.add(freed?);
        // those a `stop` before this one (interrupted) stopped already are not said again
        let now: Vec<&str> = workers
            .iter()
            .filter(|w| !report.already.contains(w))
            .map(String::as_str)
            .collect();
        if !now.is_empty() {
            ctx.progress.line(format!("stopped {}", now.join(", ")));
        }
    }
    if let Some(master) = master {
        let spinner = ctx.progress.spinner(&format!(
            "stopping the master {master}, last (it serves /shared)"
        ));
        let freed = provider.stop(name, std::slice::from_ref(&master)).await;
        spinner.finish_and_clear();
        report.freed.add(freed?);
        if !report.already.contains(&master) {
            ctx.progress.line(format!("stopped {master}"));
        }
    }
    Ok(report)
}

/// The servers of `observed` that are stopped (or stopping, or starting): what
/// [`start_stopped`] starts. Pure.
pub fn stopped_servers(observed: &[Observed]) -> impl Iterator<Item = &Observed> {
    observed
        .iter()
        .filter(|o| o.kind == Kind::Server && o.health.is_stopped())
}

/// Starts the servers of `observed` that are stopped (or stopping, or starting), the master
/// first (the workers mount /shared from it), and waits until the provider shows them
/// running. Returns their names; none changes nothing.
pub async fn start_stopped(
    ctx: &Context,
    provider: &dyn Provider,
    name: &str,
    observed: &[Observed],
) -> Result<Vec<String>, Error> {
    let stopped: Vec<Observed> = stopped_servers(observed).cloned().collect();
    if stopped.is_empty() {
        return Ok(Vec::new());
    }
    let (workers, master) = stop_order(name, &stopped);
    ctx.progress.line(format!(
        "cluster `{name}` is stopped: starting {} server(s), the master first",
        stopped.len()
    ));
    let mut done = Vec::new();
    for batch in [master.into_iter().collect::<Vec<_>>(), workers] {
        if batch.is_empty() {
            continue;
        }
        let spinner = ctx
            .progress
            .spinner(&format!("starting {}", batch.join(", ")));
        let started = provider.start(name, &batch).await;
        spinner.finish_and_clear();
        started?;
        ctx.progress.line(format!("started {}", batch.join(", ")));
        done.extend(batch);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, health: Health) -> Observed {
        Observed {
            kind: Kind::Server,
            name: name.into(),
            id: format!("id-{name}"),
            health,
            kept: false,
            called: None,
        }
    }

    #[test]
    fn workers_stop_before_the_master() {
        let servers = vec![
            server("c-master", Health::Ready),
            server("c-worker-2", Health::Ready),
            server("c-worker-1", Health::Stopped),
            // another cluster's name, as a cloud might list it: not ours to stop
            server("other-worker-1", Health::Ready),
            Observed {
                kind: Kind::Network,
                ..server("c-worker-3", Health::Ready)
            },
        ];
        let (workers, master) = stop_order("c", &servers);
        assert_eq!(workers, vec!["c-worker-1", "c-worker-2"]);
        assert_eq!(master.as_deref(), Some("c-master"));
        let (workers, master) = stop_order("c", &servers[1..2]);
        assert_eq!((workers.len(), master), (1, None));
    }
}
