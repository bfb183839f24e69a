//! `status`: what exists and in which state, found by the cluster's tag, and which workers
//! the elastic discovery file lists: as kept in the cluster's folder when hvd-cluster last
//! wrote it (no SSH: a plain `status` asks only the provider), or read from the master with
//! `--live`. What the master's autostop agent last decided comes from the cloud too (a
//! metadata key it sets on the master's server).

use std::time::Duration;

use super::output::{emit, print_status, StatusReport};
use crate::apply::ApplyError;
use crate::bootstrap;
use crate::cluster::{self, Target};
use crate::context::Context;
use crate::error::Error;
use crate::plan::{Health, Role};
use crate::state::{self, ClusterDir};

pub async fn status(ctx: &Context, target: Target, json: bool, live: bool) -> Result<u8, Error> {
    let (name, dir, provider) = cluster::target(ctx, target).await?;
    // One look at the provider (on OpenStack the servers listed once, the other kinds at
    // the same time): a plain status of a large cluster stays near a second.
    let view = provider
        .status_view(&name)
        .await
        .map_err(ApplyError::Observe)?;
    let (observed, mut nodes, autostop) = (view.observed, view.nodes, view.autostop);
    let saved = dir.load().ok();
    // The provider knows a node's GPUs, not the profile's `slots`: the saved state has what
    // `up` and `scale` used (the check's and `run`'s slots), for the nodes it knows.
    if let Some(saved) = &saved {
        for n in &mut nodes {
            if let Some(known) = saved.nodes.iter().find(|k| k.name == n.name) {
                n.slots = known.slots;
            }
        }
    }
    let listed = if live {
        read_discovery(&dir, &nodes).await
    } else {
        saved.and_then(|saved| saved.discovery)
    };
    if let Some(listed) = listed {
        for n in nodes.iter_mut().filter(|n| n.role != Role::Master) {
            n.in_discovery = Some(listed.contains(&n.name));
        }
    }
    let healthy = !observed.is_empty() && observed.iter().all(|o| o.health == Health::Ready);
    let report = StatusReport {
        cluster: &name,
        state: crate::plan::servers_state(&observed),
        resources: &observed,
        nodes: &nodes,
        healthy,
        autostop: autostop.clone(),
    };
    emit(json, &report, || {
        print_status(&name, &observed, &nodes, autostop.as_deref())
    });
    Ok(0)
}

/// The workers the master's discovery file lists; best effort (no SSH, no list).
async fn read_discovery(dir: &ClusterDir, nodes: &[state::Node]) -> Option<Vec<String>> {
    let read = async {
        let ssh = cluster::connect_master_from_folder(dir, nodes)
            .await?
            .ok()?;
        ssh.run(&format!(
            "cat {}/discovery/hosts 2>/dev/null || true",
            bootstrap::NODE_DIR
        ))
        .await
        .ok()
    };
    let listed = tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .ok()??;
    Some(
        listed
            .lines()
            .filter_map(|l| l.split(':').next())
            .map(str::to_string)
            .collect(),
    )
}
