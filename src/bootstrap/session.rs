//! SSH sessions to a cluster's nodes: the master first (workers go through it), each waited
//! for with a deadline, with the interface that holds the node's private address.

use std::path::Path;
use std::time::Duration;

use futures::future::try_join_all;

use super::BootstrapError;
use crate::plan::Role;
use crate::progress::Progress;
use crate::render::HostSlots;
use crate::ssh::Ssh;
use crate::state::Node;

/// A connected node and what bootstrap learnt about it.
pub struct NodeSession {
    pub node: Node,
    pub ssh: Ssh,
    /// The interface holding the node's private address (for Gloo / NCCL), never docker0.
    pub iface: String,
    /// The node's name and private address, checked, for the hostfile and discovery.
    pub host: HostSlots,
}

/// Connects to every node (master first: workers go through it), waiting with a deadline and
/// showing why each is still waited for.
pub async fn connect_all(
    config: &Path,
    nodes: &[Node],
    progress: &Progress,
    deadline: Duration,
) -> Result<Vec<NodeSession>, BootstrapError> {
    let mut ordered: Vec<&Node> = nodes.iter().collect();
    ordered.sort_by_key(|n| n.role != Role::Master);
    let (master, workers) = ordered
        .split_first()
        .ok_or_else(|| BootstrapError::Other("no nodes".into()))?;
    let mut sessions = vec![connect_one(config, master, progress, deadline).await?];
    let rest = try_join_all(
        workers
            .iter()
            .map(|n| connect_one(config, n, progress, deadline)),
    )
    .await?;
    sessions.extend(rest);
    Ok(sessions)
}

async fn connect_one(
    config: &Path,
    node: &Node,
    progress: &Progress,
    deadline: Duration,
) -> Result<NodeSession, BootstrapError> {
    let bar = progress.spinner(&format!("ssh {}", node.name));
    let ssh = Ssh::wait(config, &node.name, deadline, |why| {
        bar.set_message(why.to_string())
    })
    .await?;
    bar.set_message("connected");
    let given = node.private_ip.clone().unwrap_or_default();
    // The cloud's answer reaches shell commands and the hostfile: it must be an address
    // (checked where it entered too; this is the last gate before it is used).
    let Ok(ip) = given.parse::<std::net::IpAddr>() else {
        return Err(BootstrapError::Other(format!(
            "{}: the cloud gave `{}` as its private address",
            crate::input::shown(&node.name),
            crate::input::shown(&given)
        )));
    };
    let host = HostSlots::new(&node.name, ip, node.slots)
        .map_err(|e| BootstrapError::Other(format!("a node from the cloud: {e}")))?;
    // The interface that holds the private address, as Gloo and NCCL need its name.
    let iface = ssh
        .run(&format!("ip -o -4 addr show | awk '{{ split($4, a, \"/\"); if (a[1] == \"{ip}\") print $2 }}' | head -n1"))
        .await?
        .trim()
        .to_string();
    bar.finish_and_clear();
    if iface.is_empty() {
        return Err(BootstrapError::Other(format!(
            "{}: no interface holds its private address {ip}",
            node.name
        )));
    }
    // It goes into `ip ... dev IFACE` and horovodrun's arguments.
    crate::input::check_interface_name(&iface)
        .map_err(|e| BootstrapError::Other(format!("{}: {e}", node.name)))?;
    Ok(NodeSession {
        node: node.clone(),
        ssh,
        iface,
        host,
    })
}
