//! A thin, typed OpenStack client: Keystone v3 (tokens, application credentials), Nova, Neutron, Glance, Manila, Cinder.
//!
//! ```no_run
//! # async fn demo() -> Result<(), hvd_cluster::openstack::OpenStackError> {
//! use hvd_cluster::openstack::{CloudConfig, OpenStack};
//! let cloud = CloudConfig::load(Some("mycloud"))?;
//! let os = OpenStack::connect(&cloud).await?;
//! let flavor = os.compute().find_flavor("m1.small").await?;
//! println!("{} in project {} after {} calls", flavor.id, os.project_id(), os.calls());
//! # Ok(()) }
//! ```
//!
//! How resources are marked and found again, per service:
//! * nova: server `tags` set in the create body (2.52+); `list_servers` filters `tags=`.
//! * neutron: standard-attr tags set right after create (see [`network`]); lists filter
//!   `tags=`.
//! * manila, cinder: no tags; metadata set in the create body; lists filter
//!   `metadata={...}`.
//! * keypairs (nova) and images (glance): by name.
//!
//! Every call goes through one path ([`http`]): token renewed before expiry and once on a
//! 401, microversions pinned, bounded retries with backoff and jitter, a call counter.
//! Deletes are idempotent (404 is success); `get_*` return `Ok(None)` on 404.

pub mod auth;
pub mod compute;
pub mod config;
pub mod error;
pub mod http;
pub mod identity;
pub mod image;
pub mod network;
pub mod server_create;
pub mod service;
pub mod share;
pub mod shelve;
pub mod token;
pub mod volume;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

pub use compute::{
    AttachedVolume, BootVolume, Compute, ComputeLimits, Fault, Flavor, Keypair, PowerState, Server,
    ServerAddress, ServerCreate, ServerFilter, ServerFlavor, ServerNetwork, ServerStatus,
    VolumeAttachment,
};
pub use config::{AuthMethod, CloudConfig, ConfigError, ConfigFiles, Interface, Secret};
pub use error::{ApiError, OpenStackError};
pub use http::{ClientOptions, Method, Request, Response, RetryPolicy};
pub use identity::{
    AppCredential, AppCredentialCreate, CredentialRule, IdentityApi, NewAppCredential, StoredRule,
};
pub use image::{Image, ImageApi};
pub use network::{
    Direction, EtherType, FloatingIp, FloatingIpCreate, Gateway, Network, NetworkCreate,
    NetworkInfo, Port, PortCreate, Query, Remote, Resource, Router, RouterCreate, RouterInterface,
    RuleCreate, SecurityGroup, SecurityGroupCreate, SecurityGroupRule, Subnet, SubnetCreate,
};
pub use service::Service;
pub use share::{AccessRule, ExportLocation, Share, ShareApi, ShareCreate, ShareLimits};
pub use volume::{Volume, VolumeApi, VolumeCreate, VolumeLimits};

use http::Session;

/// A connected client. Cheap to clone (one `Arc`); safe to use from many tasks at once.
#[derive(Clone)]
pub struct OpenStack {
    session: Arc<Session>,
    project_id: Arc<str>,
}

impl std::fmt::Debug for OpenStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenStack")
            .field("origin", &self.session.config.origin)
            .field("project_id", &self.project_id)
            .field("calls", &self.calls())
            .finish()
    }
}

impl OpenStack {
    /// Authenticates (so bad credentials fail here) with default [`ClientOptions`].
    pub async fn connect(cloud: &CloudConfig) -> Result<OpenStack, OpenStackError> {
        Self::connect_with(cloud, ClientOptions::default()).await
    }

    pub async fn connect_with(
        cloud: &CloudConfig,
        options: ClientOptions,
    ) -> Result<OpenStack, OpenStackError> {
        let session = Arc::new(Session::new(cloud.clone(), options, auth::authenticator())?);
        let token = session.token().await?;
        let project_id: Arc<str> = Arc::from(token.token.project_id.as_str());
        Ok(OpenStack {
            session,
            project_id,
        })
    }

    pub fn compute(&self) -> Compute {
        Compute {
            session: self.session.clone(),
        }
    }

    pub fn network(&self) -> Network {
        Network {
            session: self.session.clone(),
        }
    }

    pub fn identity(&self) -> IdentityApi {
        IdentityApi {
            session: self.session.clone(),
        }
    }

    pub fn image(&self) -> ImageApi {
        ImageApi {
            session: self.session.clone(),
        }
    }

    pub fn share(&self) -> ShareApi {
        ShareApi {
            session: self.session.clone(),
        }
    }

    pub fn volume(&self) -> VolumeApi {
        VolumeApi {
            session: self.session.clone(),
        }
    }

    /// The project the token is scoped to.
    pub fn project_id(&self) -> &str {
        &self.project_id
    }

    /// The user the token belongs to (application credentials are made for a user).
    pub async fn user_id(&self) -> Result<String, OpenStackError> {
        let state = self.session.token().await?;
        state
            .token
            .user_id
            .clone()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| OpenStackError::Invalid("Keystone's token names no user".into()))
    }

    /// HTTP requests sent so far (every attempt, token requests included).
    pub fn calls(&self) -> u64 {
        self.session.calls()
    }

    pub fn config(&self) -> &CloudConfig {
        &self.session.config
    }

    /// The API root used for a service (from the token's catalog).
    pub async fn endpoint(&self, service: Service) -> Result<String, OpenStackError> {
        self.session.endpoint(service).await
    }

    /// Any call, through the same path as the typed ones (token, microversion, retries).
    pub async fn request(&self, req: &Request) -> Result<Response, OpenStackError> {
        self.session.send(req).await
    }
}

/// One quota: `-1` limit means unlimited.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct QuotaUsage {
    pub limit: i64,
    /// `in_use` (nova, cinder, manila) or `used` (neutron).
    #[serde(alias = "used")]
    pub in_use: i64,
    pub reserved: i64,
}

impl QuotaUsage {
    /// What is left; `None` when unlimited.
    pub fn available(&self) -> Option<i64> {
        (self.limit >= 0).then(|| (self.limit - self.in_use - self.reserved).max(0))
    }
}

/// Resource name (`instances`, `cores`, `floatingip`, `shares`...) → usage.
pub type QuotaUsages = BTreeMap<String, QuotaUsage>;

/// Reads `body[key]`, keeping the entries that are `{limit, in_use|used, reserved}` objects.
pub(crate) fn parse_quota_usages(
    resp: &Response,
    key: &str,
) -> Result<QuotaUsages, OpenStackError> {
    let body: serde_json::Value = resp.json()?;
    quota_usages_from_json(&body, key).map_err(|e| resp.decode_error(e, &resp.body))
}

/// Parses a quota-usage body (`{"<key>": {"<resource>": {"limit", "in_use"|"used",
/// "reserved"}, "id": ...}}`); entries that are not such objects are skipped.
pub fn quota_usages_from_json(body: &serde_json::Value, key: &str) -> Result<QuotaUsages, String> {
    let map = body
        .get(key)
        .and_then(|v| v.as_object())
        .ok_or_else(|| format!("no {key:?} object"))?;
    let mut out = QuotaUsages::new();
    for (name, value) in map {
        if value.get("limit").is_some() {
            let usage =
                serde_json::from_value(value.clone()).map_err(|e| format!("{key}.{name}: {e}"))?;
            out.insert(name.clone(), usage);
        }
    }
    Ok(out)
}
