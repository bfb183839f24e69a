//! The only code that talks to a cloud. A provider observes a cluster's resources by its tag
//! and creates or deletes one resource at a time (see [`crate::apply::Provider`]).

pub mod local;
pub mod openstack;

use std::collections::BTreeMap;

use crate::apply::{Provider, ProviderError};
use crate::plan::{Desired, Kind, Observed};
use crate::state::Node;

/// The provider a profile names, behind one type the commands use.
pub enum AnyProvider {
    OpenStack(openstack::OpenStackProvider),
    Local(local::LocalProvider),
}

impl AnyProvider {
    pub fn set_public_key(&mut self, key: String) {
        match self {
            AnyProvider::OpenStack(p) => p.set_public_key(key),
            AnyProvider::Local(p) => p.set_public_key(key),
        }
    }

    /// Every node with its addresses, master first.
    pub async fn nodes(&self, cluster: &str) -> Result<Vec<Node>, ProviderError> {
        match self {
            AnyProvider::OpenStack(p) => p.nodes(cluster).await,
            AnyProvider::Local(p) => p.nodes(cluster).await,
        }
    }

    /// API calls made so far (0 for the local provider, which makes none).
    pub fn calls(&self) -> u64 {
        match self {
            AnyProvider::OpenStack(p) => p.calls(),
            AnyProvider::Local(_) => 0,
        }
    }
}

impl Provider for AnyProvider {
    async fn observe(&self, cluster: &str) -> Result<Vec<Observed>, ProviderError> {
        match self {
            AnyProvider::OpenStack(p) => p.observe(cluster).await,
            AnyProvider::Local(p) => p.observe(cluster).await,
        }
    }

    async fn poll(&self, cluster: &str, kind: Kind) -> Result<Vec<Observed>, ProviderError> {
        match self {
            AnyProvider::OpenStack(p) => p.poll(cluster, kind).await,
            AnyProvider::Local(p) => p.poll(cluster, kind).await,
        }
    }

    async fn create(
        &self,
        cluster: &str,
        d: &Desired,
        ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        match self {
            AnyProvider::OpenStack(p) => p.create(cluster, d, ids).await,
            AnyProvider::Local(p) => p.create(cluster, d, ids).await,
        }
    }

    async fn delete(&self, old: &Observed) -> Result<(), ProviderError> {
        match self {
            AnyProvider::OpenStack(p) => p.delete(old).await,
            AnyProvider::Local(p) => p.delete(old).await,
        }
    }
}
