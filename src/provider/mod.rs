//! Where a cluster lives: the [`Provider`] trait, everything a provider answers, and
//! [`connect`], the one place that turns a [`ProviderKind`] into a provider. Every other
//! module holds a `dyn Provider`, never a kind.
//!
//! A provider knows how a cluster is laid out on it ([`Provider::blueprint`]), resolves the
//! names a profile uses, observes the cluster's resources by its tag, creates or deletes one
//! resource at a time, lists the nodes with their addresses, reboots nodes, checks quotas,
//! and says where Jupyter and the Manila export are. `openstack` talks to a cloud through
//! [`crate::openstack`]; `local` runs each node as a container on this machine's Docker.
//! Adding a provider: a module here implementing [`Provider`] and [`crate::plan::Blueprint`],
//! a [`ProviderKind`] in the profile, and one arm in [`connect`] and [`blueprint`].

pub mod local;
pub mod openstack;
mod screen;

pub use screen::Screen;

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::plan::{Blueprint, Desired, Kind, Observed, Plan, Shortfall};
use crate::profile::{ImageSource, Profile, ProviderKind};
use crate::state::{ClusterState, Node};

/// What `status` shows of a cluster, from one look at the provider.
#[derive(Debug)]
pub struct StatusView {
    pub observed: Vec<Observed>,
    pub nodes: Vec<Node>,
    /// The autostop agent's last word (see [`Provider::autostop_state`]).
    pub autostop: Option<String>,
}

/// A provider failure, already worded for the user.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{0}")]
    Cloud(String),
    #[error("quota exceeded: {0}")]
    Quota(String),
    #[error("{what}: {detail}")]
    Resolve { what: String, detail: String },
    /// A call whose outcome stayed unknown (no answer, a 5xx, a 429) after its retries and
    /// look-ups: `call` names it and says what the cloud said, shortened and escaped.
    #[error(
        "{call}{tries}; the cloud did not answer clearly, running `up` again resumes from what exists"
    )]
    Unsettled { call: String, tries: String },
}

/// A cloud (or the local Docker engine): everything the commands, the apply engine and the
/// bootstrap need to know about where the cluster lives.
pub trait Provider: Send + Sync {
    /// How this provider lays a cluster out (pure; see [`crate::plan::plan`]).
    fn blueprint(&self) -> &'static dyn Blueprint;

    /// Looks up every name the profile uses (flavors, images, networks) before any change;
    /// an unknown one is an error that lists what exists. Nothing to do by default.
    fn resolve<'a>(&'a mut self, _p: &'a Profile) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async { Ok(()) })
    }

    /// What the profile leaves to the cloud, filled in once names are resolved (a root
    /// volume for a flavor without a root disk); one line for the user per change.
    fn complete_profile(&self, _p: &mut Profile, _container_bytes: Option<u64>) -> Vec<String> {
        Vec::new()
    }

    /// Each kind of server's disks as `plan` shows them, once names are resolved.
    fn disks(&self, _p: &Profile) -> Vec<String> {
        Vec::new()
    }

    /// What holds /shared and how many GiB it has, once names are resolved, where the cloud
    /// says (a volume or share, made or taken); `None` for the master's own disk, which the
    /// room check of every push measures.
    fn shared_capacity(&self, _p: &Profile) -> Option<(String, u64)> {
        None
    }

    /// The cluster's public key, installed on every node it creates.
    fn set_public_key(&mut self, key: String);

    /// Every resource of the cluster, found by its tag (or name where the cloud has no tags).
    fn observe<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>>;

    /// The current state of every resource of one kind: one list call, for polling.
    fn poll<'a>(
        &'a self,
        cluster: &'a str,
        kind: Kind,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>>;

    /// Creates one resource; `ids` holds the ids of everything created before it, by name.
    fn create<'a>(
        &'a self,
        cluster: &'a str,
        desired: &'a Desired,
        ids: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, ProviderError>>;

    /// Deletes one resource; a resource already gone is not an error.
    fn delete<'a>(&'a self, old: &'a Observed) -> BoxFuture<'a, Result<(), ProviderError>>;

    /// Every node with its checked addresses (see [`Screen`]), master first.
    fn nodes<'a>(&'a self, cluster: &'a str) -> BoxFuture<'a, Result<Vec<Node>, ProviderError>>;

    /// Reboots these nodes of the cluster (by name) and waits, with a deadline, until the
    /// provider shows them running again (OpenStack: ACTIVE with no task left; locally: the
    /// container restarted). Whether they answer SSH from the new boot is the caller's wait.
    /// A provider without the capability says so, and which nodes to reboot by hand.
    fn reboot<'a>(
        &'a self,
        _cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            Err(ProviderError::Cloud(format!(
                "this provider cannot reboot nodes: reboot {} by hand, then run `up` again",
                nodes.join(", ")
            )))
        })
    }

    /// The last lines node `node`'s console printed, read through the cloud (where
    /// cloud-init shows the host keys it made, see [`crate::host_keys::on_console`]): what
    /// may vouch for a key that changed when the tool started or re-made the server. None when
    /// the provider has no console.
    fn console<'a>(
        &'a self,
        _cluster: &'a str,
        _node: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// Stops these nodes of the cluster (by name) so that they hold no compute resources,
    /// keeping their disks, addresses and everything else, and waits until they are stopped
    /// (OpenStack: shelved and offloaded; locally: the containers stopped). Nodes already
    /// stopped are left as they are. Returns what the nodes it stopped held.
    fn stop<'a>(
        &'a self,
        _cluster: &'a str,
        _nodes: &'a [String],
    ) -> BoxFuture<'a, Result<Freed, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider cannot stop nodes".into(),
            ))
        })
    }

    /// Starts these stopped nodes again and waits until the provider shows them running
    /// (whether they answer SSH is the caller's wait). Nodes already running are left alone.
    fn start<'a>(
        &'a self,
        _cluster: &'a str,
        _nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider cannot start nodes".into(),
            ))
        })
    }

    /// The cluster's servers and the API URLs the master's autostop agent will use (as the
    /// cloud's catalog and auth URL say); an error where the provider cannot stop itself.
    fn autostop_target<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<AutostopTarget, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider's clusters cannot stop themselves".into(),
            ))
        })
    }

    /// Makes the credential the agent stops `target`'s servers with (replacing older ones):
    /// limited by access rules to exactly those servers, or (where the cloud does not
    /// enforce access rules and `unrestricted_ok`) by the user's member role only.
    fn autostop_credential<'a>(
        &'a self,
        _cluster: &'a str,
        _target: &'a AutostopTarget,
        _unrestricted_ok: bool,
    ) -> BoxFuture<'a, Result<MasterCredential, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider's clusters cannot stop themselves".into(),
            ))
        })
    }

    /// Where the master reaches the object store and Keystone for `[[data]] object_store`
    /// copies; an error where the provider has no object store.
    fn data_target(&self) -> BoxFuture<'_, Result<DataTarget, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider has no object store".into(),
            ))
        })
    }

    /// Makes the credential the master reads `containers` of the object store with
    /// (replacing older ones), limited by access rules to listing and reading exactly those,
    /// and tried on the cloud first: a cloud that does not enforce the rules is refused.
    fn data_credential<'a>(
        &'a self,
        _cluster: &'a str,
        _containers: &'a [String],
    ) -> BoxFuture<'a, Result<MasterCredential, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider has no object store".into(),
            ))
        })
    }

    /// Deletes the credentials made by [`Provider::data_credential`] for the cluster (and
    /// the access rules they leave); returns how many.
    fn delete_data_credentials<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<usize, ProviderError>> {
        Box::pin(async { Ok(0) })
    }

    /// What the master's autostop agent last published ("idle since ...; stops after 60s
    /// idle", "busy: ...", "off"), as the cloud keeps it; `None` where none did.
    fn autostop_state<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// What `status` shows: every resource, the nodes and the autostop word. By default the
    /// three looks at once; a provider that can answer them from fewer calls does so
    /// (OpenStack lists the servers once).
    fn status_view<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<StatusView, ProviderError>> {
        Box::pin(async move {
            let (observed, nodes, autostop) = futures::try_join!(
                self.observe(cluster),
                self.nodes(cluster),
                self.autostop_state(cluster)
            )?;
            Ok(StatusView {
                observed,
                nodes,
                autostop,
            })
        })
    }

    /// Deletes the credentials the provider made for the cluster's autostop (OpenStack: the
    /// user's application credentials `hvd-cluster-<cluster>-autostop-<n>` and the access
    /// rules they leave); returns how many. `down` calls it after the resources are gone.
    fn delete_credentials<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<usize, ProviderError>> {
        Box::pin(async { Ok(0) })
    }

    /// GPUs a node of this flavor has, as the provider knows (OpenStack: the flavor's extra
    /// specs, once resolved); 0 where it does not know.
    fn flavor_gpus(&self, _flavor: &str) -> u32 {
        0
    }

    /// The quotas `plan` would exceed; none where there are no quotas.
    fn shortfalls<'a>(
        &'a self,
        _plan: &'a Plan,
    ) -> BoxFuture<'a, Result<Vec<Shortfall>, ProviderError>> {
        Box::pin(async { Ok(vec![]) })
    }

    /// A kept or taken share (`storage.keep`, `storage.share`) open to the cluster's network:
    /// its access rule lives in the share, not in the plan, so every converge grants it again
    /// where it is missing. A line when it changed something.
    fn grant_share<'a>(
        &'a self,
        _p: &'a Profile,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// `down`: the access rule the cluster added to its kept or taken share taken back (the
    /// share stays). A line when there was one.
    fn release_share<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// The NFS export location of the cluster's Manila share, when it has one.
    fn share_export<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// Where this machine reaches Jupyter on the master directly (a published port), if
    /// anywhere; otherwise the floating IP or an SSH tunnel is used.
    fn jupyter_endpoint<'a>(
        &'a self,
        _cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether [`Provider::bake`] can make node images here.
    fn bakes(&self) -> bool {
        false
    }

    /// What a bake's key names as the image a node booted from: the profile's `image` for its
    /// kind of server, else where such a node comes from without one (a volume on a cloud).
    fn bake_source<'a>(
        &'a self,
        image: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(async move { Ok(image.unwrap_or("volume").to_string()) })
    }

    /// The finished bake with this key ([`crate::bake::KEY_PROPERTY`]), if there is one;
    /// unfinished ones an earlier bake left (cut short, or failed) are deleted on the way.
    fn find_bake<'a>(
        &'a self,
        _key: &'a str,
    ) -> BoxFuture<'a, Result<Option<BakedImage>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// Snapshots the root disk of the cluster's server `node` into a private image named
    /// `name` with `properties`, and waits until the image is whole (the node's disk read and
    /// uploaded). The node must have been prepared (see `templates/node/bake.sh`).
    fn bake<'a>(
        &'a self,
        _cluster: &'a str,
        _node: &'a str,
        _name: &'a str,
        _properties: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<BakedImage, ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider cannot bake a node".into(),
            ))
        })
    }

    /// The project's bakes (its own images carrying [`crate::bake::KEY_PROPERTY`]), the
    /// newest first.
    fn list_bakes(&self) -> BoxFuture<'_, Result<Vec<BakedImage>, ProviderError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// What holds the image name `name` already, if any image the project sees does (its
    /// own or another project's).
    fn bake_name_taken<'a>(
        &'a self,
        _name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::bake::TakenBy>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }

    /// The names of the project's servers booted from each of these images, by image id (one
    /// look at the servers for all of them).
    fn servers_booted_from<'a>(
        &'a self,
        _image_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, ProviderError>> {
        Box::pin(async { Ok(BTreeMap::new()) })
    }

    /// Deletes a bake (found by [`Provider::list_bakes`]); one already gone is not an error.
    fn delete_bake<'a>(
        &'a self,
        _bake: &'a BakedImage,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async {
            Err(ProviderError::Cloud(
                "this provider has no bakes to delete".into(),
            ))
        })
    }

    /// API calls made so far (for the benchmark; 0 where there is no API).
    fn calls(&self) -> u64 {
        0
    }
}

pub use crate::bake::BakedImage;

/// What the master's autostop agent stops, and where it reaches the APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutostopTarget {
    /// (server name, server id), the master first, then the workers by name.
    pub servers: Vec<(String, String)>,
    pub identity_url: String,
    pub compute_url: String,
    pub tls: MasterTls,
}

/// Where the master reaches the cloud for `[[data]] object_store` copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataTarget {
    /// Keystone's v3 API (the cloud's auth URL).
    pub identity_url: String,
    /// The object store's account URL (`.../v1/AUTH_<project>`), from the catalog.
    pub object_store_url: String,
    pub tls: MasterTls,
}

/// How the master's own programs (the autostop agent, the object store copy) trust the
/// cloud's HTTPS: as this machine does, by the cloud config's `cacert` bundle (a cloud with
/// a private CA) and its `verify: false` / `insecure`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterTls {
    /// The PEM bundle `cacert` names, as read here.
    pub ca_pem: Option<String>,
    pub insecure: bool,
}

impl MasterTls {
    /// Adds `ca_pem` and `insecure` to a program's config, only when set: a cloud with
    /// neither gives the config (and its fingerprint) it had before they existed.
    pub fn add_to(&self, config: &mut serde_json::Value) {
        if let Some(pem) = &self.ca_pem {
            config["ca_pem"] = serde_json::json!(pem);
        }
        if self.insecure {
            config["insecure"] = serde_json::json!(true);
        }
    }
}

/// A credential made for the master (its autostop agent, its copies from the object store);
/// the secret only ever goes to the master's root-only file.
#[derive(Debug, Clone)]
pub struct MasterCredential {
    pub id: String,
    pub name: String,
    pub secret: crate::openstack::Secret,
    /// Limited by access rules to the cluster's servers (false: by the member role only).
    pub restricted: bool,
}

/// What stopped nodes held and handed back (vCPUs, RAM and GPUs where the provider knows
/// them: OpenStack from each server's flavor).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Freed {
    pub servers: u32,
    pub vcpus: u32,
    pub ram_mib: u64,
    pub gpus: u32,
    /// Shelved but kept on their host by the cloud (its `shelved_offload_time` is not 0 and
    /// offloading is admin-only): still holding their resources.
    pub kept_on_host: Vec<String>,
}

impl Freed {
    /// Adds another batch's.
    pub fn add(&mut self, other: Freed) {
        self.servers += other.servers;
        self.vcpus += other.vcpus;
        self.ram_mib += other.ram_mib;
        self.gpus += other.gpus;
        self.kept_on_host.extend(other.kept_on_host);
    }
}

/// Which provider a cluster lives on and, for OpenStack, which cloud entry, region and
/// endpoint interface.
#[derive(Debug, Clone)]
pub struct Place {
    pub kind: ProviderKind,
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub interface: Option<String>,
}

impl Place {
    /// Where a profile puts its cluster.
    pub fn of(p: &Profile) -> Place {
        Place {
            kind: p.provider,
            cloud: p.cloud.clone(),
            region: p.region.clone(),
            interface: p.interface.clone(),
        }
    }

    /// A cluster named without its profile (`--cluster NAME [--cloud C]`): the provider its
    /// saved state records; without state it is looked for on OpenStack, unless no cloud is
    /// named anywhere (`--cloud`, the saved one, `OS_CLOUD`, `OS_AUTH_URL`): then locally.
    pub fn of_saved(saved: &ClusterState, cloud: Option<String>) -> Place {
        let kind = saved.provider.unwrap_or(
            if cloud.is_none()
                && saved.cloud.is_none()
                && std::env::var_os("OS_CLOUD").is_none()
                && std::env::var_os("OS_AUTH_URL").is_none()
            {
                ProviderKind::Local
            } else {
                ProviderKind::OpenStack
            },
        );
        Place {
            kind,
            cloud: cloud.or_else(|| saved.cloud.clone()),
            region: None,
            interface: None,
        }
    }
}

/// Connects to the provider at `place` (for OpenStack: reads clouds.yaml as the `openstack`
/// CLI does and authenticates; locally: checks that Docker answers). Names are not resolved
/// yet: see [`Provider::resolve`].
pub async fn connect(place: &Place) -> Result<Box<dyn Provider>, ProviderError> {
    Ok(match place.kind {
        ProviderKind::OpenStack => Box::new(
            openstack::OpenStackProvider::connect(
                place.cloud.as_deref(),
                place.region.as_deref(),
                place.interface.as_deref(),
            )
            .await?,
        ),
        ProviderKind::Local => Box::new(local::LocalProvider::connect().await?),
    })
}

/// How a provider kind lays a cluster out, without connecting to it.
pub fn blueprint(kind: ProviderKind) -> &'static dyn Blueprint {
    match kind {
        ProviderKind::OpenStack => &openstack::desired::OpenStackBlueprint,
        ProviderKind::Local => &local::LocalBlueprint,
    }
}

/// Settings the profile's provider reads from this machine's environment, checked before
/// `up` writes anything (bad input: exit 2).
pub fn check_environment(p: &Profile) -> Result<(), local::SettingError> {
    match p.provider {
        ProviderKind::Local => local::cpus_from_env().map(drop),
        ProviderKind::OpenStack => Ok(()),
    }
}

/// How the image reaches the nodes, as far as this machine is concerned: the image targets
/// (`scripts/build-images` names) to build here before `up` connects. Local nodes run the
/// node image; our Horovod image is built too when the profile builds it here; a cloud's
/// nodes get a `build` image sent to them, unless only the infrastructure is wanted.
pub fn images_to_build(p: &Profile, infra_only: bool) -> &'static [&'static str] {
    match (p.provider, p.container.source) {
        (ProviderKind::Local, ImageSource::Build) => &["all"],
        // the Horovod image is built on the master, or is the user's own (pulled, or sent
        // from this machine): here only what the nodes run
        (ProviderKind::Local, _) => &["base", "node"],
        (_, ImageSource::Build) if !infra_only => &["horovod"],
        _ => &[],
    }
}
