//! What the cluster's folder keeps after a converge, so that `status` and `run` need no SSH
//! round trip to know it.

use crate::bootstrap;
use crate::error::Error;
use crate::render::HostSlots;
use crate::state::ClusterDir;

/// Keeps in the cluster's folder which workers the master's discovery file now lists, so
/// `status` can say it without an SSH round trip.
pub(super) fn discovery(dir: &ClusterDir, listed: &[HostSlots]) -> Result<(), Error> {
    let mut st = dir.load()?;
    st.discovery = Some(listed.iter().map(|h| h.name().to_string()).collect());
    dir.save(&st)?;
    Ok(())
}

/// Keeps every node's interface in the cluster's state (what `run` launches with).
pub(super) fn ifaces(dir: &ClusterDir, sessions: &[bootstrap::NodeSession]) -> Result<(), Error> {
    let mut st = dir.load()?;
    st.ifaces = sessions
        .iter()
        .map(|s| (s.node.name.clone(), s.iface.clone()))
        .collect();
    dir.save(&st)?;
    Ok(())
}
