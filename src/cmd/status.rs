//! `status`: what exists and in which state, found by the cluster's tag, and which workers
//! the elastic discovery file lists.

use std::time::Duration;

use super::output::{emit, print_status, StatusReport};
use super::{Context, Error, Target};
use crate::apply::ApplyError;
use crate::bootstrap;
use crate::cluster::{self, Reach};
use crate::plan::{Health, Role};
use crate::ssh;
use crate::state::{self, ClusterDir};

pub async fn status(ctx: &Context, target: Target, json: bool) -> Result<u8, Error> {
    let (name, dir, provider) = cluster::target(ctx, target).await?;
    let observed = provider.observe(&name).await.map_err(ApplyError::Observe)?;
    let mut nodes = provider.nodes(&name).await?;
    mark_discovery(&dir, &mut nodes).await;
    let healthy = !observed.is_empty() && observed.iter().all(|o| o.health == Health::Ready);
    let report = StatusReport {
        cluster: &name,
        resources: &observed,
        nodes: &nodes,
        healthy,
    };
    emit(json, &report, || print_status(&name, &observed, &nodes));
    Ok(0)
}

/// Marks each worker listed in the master's discovery file; best effort (no SSH, no marks).
async fn mark_discovery(dir: &ClusterDir, nodes: &mut [state::Node]) {
    let Ok(saved) = dir.load() else { return };
    let (Some(user), true) = (saved.ssh_user, dir.private_key().exists()) else {
        return;
    };
    let Some(master) = nodes.iter().find(|n| n.role == Role::Master).cloned() else {
        return;
    };
    let reach = Reach {
        dir,
        user: &user,
        nodes,
    };
    let Ok(config) = reach.ssh_config() else {
        return;
    };
    let read = async {
        let ssh = ssh::Ssh::connect(&config, &master.name).await.ok()?;
        ssh.run(&format!(
            "cat {}/discovery/hosts 2>/dev/null || true",
            bootstrap::NODE_DIR
        ))
        .await
        .ok()
    };
    let Ok(Some(listed)) = tokio::time::timeout(Duration::from_secs(20), read).await else {
        return;
    };
    let listed: Vec<&str> = listed.lines().filter_map(|l| l.split(':').next()).collect();
    for n in nodes.iter_mut().filter(|n| n.role != Role::Master) {
        n.in_discovery = Some(listed.contains(&n.name.as_str()));
    }
}
