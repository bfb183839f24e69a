//! Rebooting, stopping and starting a local cluster's node containers: `docker restart`,
//! `docker stop` / `docker start` (with [`STOPPED_MARK`] set and cleared), only ever on
//! containers this cluster made; and reading what a node printed (its console).

use super::{docker, LocalProvider, STOPPED_MARK};
use crate::provider::{Freed, ProviderError};

impl LocalProvider {
    /// Restarts the node containers named `nodes`, all at once: what a reboot is for a
    /// container node (its entrypoint drops the last boot's state and starts sshd and Docker
    /// again). `docker restart` returns once the container runs again.
    pub async fn reboot(&self, cluster: &str, nodes: &[String]) -> Result<(), ProviderError> {
        self.check_ours(cluster, nodes).await?;
        futures::future::try_join_all(nodes.iter().map(|name| async move {
            docker(&["restart", name])
                .await
                .map_err(|e| ProviderError::Cloud(format!("restarting node {name}: {e}")))
        }))
        .await?;
        Ok(())
    }

    /// Stops the node containers named `nodes`, all at once, marking each as stopped by
    /// `stop` (see [`STOPPED_MARK`]) first. What they held is not counted: a container has no
    /// flavor.
    pub async fn stop(&self, cluster: &str, nodes: &[String]) -> Result<Freed, ProviderError> {
        self.check_ours(cluster, nodes).await?;
        futures::future::try_join_all(nodes.iter().map(|name| async move {
            docker(&["update", "--restart", STOPPED_MARK, name]).await?;
            // Time for the inner Docker engine to stop its containers cleanly.
            docker(&["stop", "--time", "30", name])
                .await
                .map_err(|e| ProviderError::Cloud(format!("stopping node {name}: {e}")))
        }))
        .await?;
        Ok(Freed {
            servers: nodes.len() as u32,
            ..Freed::default()
        })
    }

    /// Starts the stopped node containers named `nodes`, all at once (their entrypoint starts
    /// sshd and the inner Docker engine again, as after a reboot), and clears the mark.
    pub async fn start(&self, cluster: &str, nodes: &[String]) -> Result<(), ProviderError> {
        self.check_ours(cluster, nodes).await?;
        futures::future::try_join_all(nodes.iter().map(|name| async move {
            docker(&["start", name])
                .await
                .map_err(|e| ProviderError::Cloud(format!("starting node {name}: {e}")))?;
            docker(&["update", "--restart", "no", name]).await
        }))
        .await?;
        Ok(())
    }

    /// The last 1000 lines node container `node` printed: its entrypoint shows the host keys
    /// it made, as cloud-init does on a cloud server's console. None for a name that is not a
    /// node of this cluster.
    pub async fn console(
        &self,
        cluster: &str,
        node: &str,
    ) -> Result<Option<String>, ProviderError> {
        if !self
            .containers(cluster)
            .await?
            .iter()
            .any(|c| c.names == node)
        {
            return Ok(None);
        }
        docker(&["logs", "--tail", "1000", node]).await.map(Some)
    }

    /// Refuses names that are not node containers of this cluster.
    async fn check_ours(&self, cluster: &str, nodes: &[String]) -> Result<(), ProviderError> {
        let ours: Vec<String> = self
            .containers(cluster)
            .await?
            .into_iter()
            .map(|c| c.names)
            .collect();
        match nodes.iter().find(|n| !ours.contains(n)) {
            Some(stranger) => Err(ProviderError::Cloud(format!(
                "no node container {} in cluster {cluster}",
                crate::input::shown(stranger)
            ))),
            None => Ok(()),
        }
    }
}
