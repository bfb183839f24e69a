//! What every resource is called: `<cluster>-<role>[-<i>]`, and the role a name gives.

use super::Role;

/// Names of the cluster's resources: `<cluster>-<role>[-<i>]`.
pub struct Names<'a>(pub &'a str);

impl Names<'_> {
    pub fn keypair(&self) -> String {
        format!("{}-key", self.0)
    }
    pub fn network(&self) -> String {
        format!("{}-net", self.0)
    }
    pub fn subnet(&self) -> String {
        format!("{}-subnet", self.0)
    }
    pub fn router(&self) -> String {
        format!("{}-router", self.0)
    }
    /// Every node: all traffic from other members.
    pub fn nodes_group(&self) -> String {
        format!("{}-nodes", self.0)
    }
    /// The master: SSH (and Jupyter) from the allowed networks.
    pub fn master_group(&self) -> String {
        format!("{}-master-access", self.0)
    }
    pub fn master(&self) -> String {
        format!("{}-master", self.0)
    }
    pub fn worker(&self, index: u32) -> String {
        format!("{}-worker-{index}", self.0)
    }
    pub fn floating_ip(&self) -> String {
        format!("{}-master-fip", self.0)
    }
    pub fn share(&self) -> String {
        format!("{}-share", self.0)
    }
    pub fn volume(&self) -> String {
        format!("{}-shared-volume", self.0)
    }
    pub fn volume_attachment(&self) -> String {
        format!("{}-shared-volume-attachment", self.0)
    }
    /// The worker number in a name like `demo-worker-7`. Only the exact spelling this cluster
    /// gives counts (`demo-worker-07` or `demo-worker-+7` are someone else's names).
    pub fn worker_index(&self, name: &str) -> Option<u32> {
        let index: u32 = name
            .strip_prefix(self.0)?
            .strip_prefix("-worker-")?
            .parse()
            .ok()?;
        (self.worker(index) == name).then_some(index)
    }
    /// The role a server's name gives it by the naming rule (`<cluster>-master`,
    /// `<cluster>-worker-<n>`); `None` for a name this cluster never gives.
    pub fn node_role(&self, name: &str) -> Option<Role> {
        if name == self.master() {
            Some(Role::Master)
        } else {
            self.worker_index(name).map(|_| Role::Worker)
        }
    }
}
