//! The cluster profile: a TOML file parsed into [`Profile`], checked without any network call.
//!
//! The schema is here; `diagnostics` says where an error is (file, line, column, field,
//! the nearest valid key), `validate` holds the checks a parsed profile must pass.

mod diagnostics;
pub mod temporary;
#[cfg(test)]
mod tests;
mod validate;

pub use diagnostics::{nearest, ProfileError};
pub use validate::{parse_cidr, MAX_ROOT_VOLUME_GB};

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::input::ClusterName;
use diagnostics::{locate_field, syntax_error};
use validate::validate;

/// Which kind of machine the nodes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Servers on an OpenStack cloud.
    #[default]
    OpenStack,
    /// Privileged containers on this machine's Docker engine.
    Local,
}

impl ProviderKind {
    /// What `validate` calls it.
    pub fn label(self) -> &'static str {
        match self {
            ProviderKind::OpenStack => "OpenStack",
            ProviderKind::Local => "local Docker",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Cluster name: every resource is named `<name>-<role>[-<i>]` and tagged with it; its
    /// folder is `<state root>/<name>`. Checked while parsing (see [`ClusterName`]).
    pub name: ClusterName,
    #[serde(default)]
    pub provider: ProviderKind,
    /// A clouds.yaml entry; when absent the OS_* variables are used, as the `openstack` CLI does.
    #[serde(default)]
    pub cloud: Option<String>,
    /// Overrides the region of the clouds.yaml entry / OS_REGION_NAME.
    #[serde(default)]
    pub region: Option<String>,
    /// Overrides the endpoint interface (public, internal, admin).
    #[serde(default)]
    pub interface: Option<String>,
    /// The image's login user (cloud images: `debian`, `ubuntu`, `rocky`, ...).
    #[serde(default = "default_ssh_user")]
    pub ssh_user: String,
    pub master: MasterSpec,
    pub workers: WorkerSpec,
    #[serde(default)]
    pub network: NetworkSpec,
    #[serde(default)]
    pub floating_ip: Option<FloatingIpSpec>,
    #[serde(default)]
    pub access: AccessSpec,
    #[serde(default)]
    pub storage: StorageSpec,
    #[serde(default)]
    pub container: ContainerSpec,
    #[serde(default)]
    pub lifecycle: LifecycleSpec,
    /// `[[data]]`: folders or files on this machine, or objects in the cloud's object store,
    /// that `up` copies to /shared, and onto every node's own disk where asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<DataSpec>,
}

/// One `[[data]]` entry: a folder or file here (`local`), or the objects below a prefix of a
/// container in the cloud's object store (`object_store`, copied by the master itself, inside
/// the cloud, with a credential that can only read those containers), that `up` (and
/// `scale`, `start`, which converge as it does) copies to /shared, only what is new or
/// changed; with `stage = true` also onto every node's own disk as `stage` does
/// (`/staged/<name>` in the containers), kept there for the workers added later.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    /// The folder or file on this machine; relative to the profile's folder.
    #[serde(default)]
    pub local: Option<PathBuf>,
    /// `CONTAINER` or `CONTAINER/PREFIX` in the cloud's object store (Swift API): the objects
    /// below that prefix, as folders and files (OpenStack only).
    #[serde(default)]
    pub object_store: Option<String>,
    /// Where it lands: a path below /shared (`/shared/a/b`, or `a/b`); the default is
    /// `/shared/<its name>` (an object store source: the prefix's last part, or the container).
    #[serde(default)]
    pub shared: Option<String>,
    /// Also onto every node's own disk (the flavor's ephemeral disk where it has one), read
    /// in the containers at `/staged/<name of the /shared path>`.
    #[serde(default)]
    pub stage: bool,
}

impl Profile {
    /// The object store's containers the `[[data]]` entries read, sorted, each once.
    pub fn object_containers(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .data
            .iter()
            .filter_map(|d| match d.source() {
                Ok(DataSource::ObjectStore(o)) => Some(o.container),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Where a `[[data]]` entry comes from, once the profile was validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource<'a> {
    Local(&'a std::path::Path),
    ObjectStore(crate::input::paths::ObjectSource),
}

impl DataSpec {
    /// Its source, by the grammar of each kind; exactly one must be given.
    pub fn source(&self) -> Result<DataSource<'_>, crate::input::Refused> {
        match (&self.local, &self.object_store) {
            (Some(local), None) => Ok(DataSource::Local(local)),
            (None, Some(raw)) => Ok(DataSource::ObjectStore(
                crate::input::paths::ObjectSource::parse(raw)?,
            )),
            (Some(_), Some(_)) => Err(crate::input::Refused(
                "give `local` or `object_store`, not both".into(),
            )),
            (None, None) => Err(crate::input::Refused(
                "give `local` (a folder here) or `object_store` (a container in the cloud's object store)".into(),
            )),
        }
    }

    /// Where the entry lands: `shared` by its grammar, else /shared/<the source's name>.
    pub fn shared_path(&self) -> Result<crate::input::paths::SharedPath, crate::input::Refused> {
        use crate::input::paths::SharedPath;
        if let Some(raw) = &self.shared {
            return SharedPath::parse(raw);
        }
        match self.source()? {
            DataSource::ObjectStore(o) => o.default_place(),
            DataSource::Local(local) => match local.file_name() {
                Some(name) => SharedPath::for_name(name.as_encoded_bytes()),
                None => Err(crate::input::Refused(format!(
                    "`{}` names no folder or file of its own; name it, or set `shared` to where it lands",
                    crate::input::shown(&local.to_string_lossy())
                ))),
            },
        }
    }
}

/// `[lifecycle]`: the cluster stopping itself when idle (OpenStack).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LifecycleSpec {
    /// Idle time after which the master stops the cluster (`"30m"`, `"2h"`, `"90s"`), or
    /// `"off"` (the default). Checked by [`crate::input::parse_idle_time`].
    #[serde(default)]
    pub autostop: Option<String>,
    /// Where the master reaches Keystone's v3 API; default: the cloud's `auth_url`.
    #[serde(default)]
    pub identity_url: Option<String>,
    /// Where the master reaches Nova's API; default: the catalog's compute endpoint.
    #[serde(default)]
    pub compute_url: Option<String>,
    /// Consent to a credential without access rules on a cloud that does not enforce them
    /// (it can then do on the project whatever the user's member role allows).
    #[serde(default)]
    pub unrestricted_credential: bool,
}

impl LifecycleSpec {
    /// The idle time, once the profile was validated; `None` when autostop is off.
    pub fn autostop_after(&self) -> Option<std::time::Duration> {
        self.autostop
            .as_deref()
            .and_then(|v| crate::input::parse_idle_time(v).ok().flatten())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MasterSpec {
    /// Flavor name (OpenStack only).
    #[serde(default)]
    pub flavor: Option<String>,
    /// Image name or id; on the local provider, a bake's name (`hvd-cluster bake`).
    #[serde(default)]
    pub image: Option<String>,
    /// Horovod slots on the master; default: its GPUs, or 1.
    #[serde(default)]
    pub slots: Option<u32>,
    /// Boot from a new Cinder volume of this many GiB, made from the image and deleted with
    /// the server, instead of the flavor's root disk (OpenStack only). A flavor without a
    /// root disk gets one even when this is left out, sized for the image and Docker.
    #[serde(default)]
    pub root_volume_gb: Option<u32>,
    /// The Cinder volume type of the root volume; default: the cloud's default type.
    #[serde(default)]
    pub volume_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    pub count: u32,
    #[serde(default)]
    pub flavor: Option<String>,
    /// Defaults to the master's image.
    #[serde(default)]
    pub image: Option<String>,
    /// GPUs per worker; default: read from the flavor's extra specs.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Horovod slots per worker; default: its GPUs, or 1.
    #[serde(default)]
    pub slots: Option<u32>,
    /// As `[master] root_volume_gb`, for every worker.
    #[serde(default)]
    pub root_volume_gb: Option<u32>,
    /// As `[master] volume_type`, for every worker.
    #[serde(default)]
    pub volume_type: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Use this existing network (by name) and create none.
    #[serde(default)]
    pub existing: Option<String>,
    /// CIDR of the subnet to create (default 10.42.0.0/24).
    #[serde(default)]
    pub cidr: Option<String>,
    /// External network the created router gets its gateway on.
    #[serde(default)]
    pub external_network: Option<String>,
    #[serde(default)]
    pub dns_nameservers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FloatingIpSpec {
    /// The external network the master's floating IP comes from.
    pub pool: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JupyterAccess {
    /// Reach Jupyter through `hvd-cluster jupyter` (an SSH tunnel); port 8888 stays closed.
    #[default]
    Tunnel,
    /// Open port 8888 on the master to `allowed_cidrs`.
    Public,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessSpec {
    /// Who may reach SSH (and Jupyter when public) on the master.
    #[serde(default)]
    pub allowed_cidrs: Vec<String>,
    /// Must be true for `0.0.0.0/0` to be accepted in `allowed_cidrs`.
    #[serde(default)]
    pub open_to_internet: bool,
    #[serde(default)]
    pub jupyter: JupyterAccess,
    /// With `jupyter = "public"`: your own certificate for Jupyter's HTTPS (PEM, the server's
    /// certificate first, then its chain), a path relative to the profile's folder. Without it
    /// the cluster makes one for the master's floating IP. Give `jupyter_key` with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub jupyter_cert: Option<PathBuf>,
    /// The private key of `jupyter_cert` (PEM, not encrypted), relative to the profile's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub jupyter_key: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StorageKind {
    /// An NFS server on the master (userspace NFS), optionally on a Cinder volume.
    #[default]
    MasterNfs,
    /// An NFS share from Manila, mounted on every node.
    Manila,
    /// No shared directory.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StorageSpec {
    #[serde(default)]
    pub kind: StorageKind,
    /// Share size (manila) in GiB; default 10.
    #[serde(default)]
    pub size_gb: Option<u32>,
    /// Manila share type; default: the cloud's default type.
    #[serde(default)]
    pub share_type: Option<String>,
    /// master-nfs: put /shared on a Cinder volume of this size attached to the master.
    #[serde(default)]
    pub volume_gb: Option<u32>,
    /// The Cinder volume type of that volume; default: the cloud's default type.
    #[serde(default)]
    pub volume_type: Option<String>,
    /// Keep the volume (`volume_gb`) or Manila share that holds /shared when the cluster
    /// goes: `down` leaves it, marked for the cluster, and the next `up` of the profile finds
    /// it again with its files.
    #[serde(default)]
    pub keep: bool,
    /// master-nfs: /shared on this existing Cinder volume (name or id) of the project,
    /// attached to the master; never formatted when it holds a file system, never deleted
    /// (`down` leaves it, marked for the cluster, as with `keep`).
    #[serde(default)]
    pub volume: Option<String>,
    /// manila: /shared on this existing NFS share (name or id) of the project, mounted on
    /// every node with an access rule for the cluster's network; never deleted (`down`
    /// leaves it, marked for the cluster, and takes back only the access rule it added).
    #[serde(default)]
    pub share: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImageSource {
    /// Built on this machine from the Dockerfile template shipped with hvd-cluster, then
    /// transferred like `transfer`.
    #[default]
    Build,
    /// `docker pull` on every node.
    Pull,
    /// An image already on this machine: sent once to the master, fanned out from there to
    /// the workers over the private network (air-gapped clouds; no N registry pulls).
    Transfer,
    /// Built on the master from the same shipped recipe (a few kilobytes cross the user's
    /// link, not the image), where the cloud's network reaches the package registries; then
    /// fanned out from the master like `transfer`. For users with a slow uplink.
    #[serde(rename = "build-remote")]
    BuildRemote,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    #[default]
    Gloo,
    Mpi,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    #[serde(default = "default_container_image")]
    pub image: String,
    #[serde(default)]
    pub source: ImageSource,
    /// sshd port inside every Horovod container (horovodrun `-p`).
    #[serde(default = "default_ssh_port")]
    pub ssh_port: u16,
    #[serde(default)]
    pub collective: Collective,
    /// `source = "pull"` from a registry whose TLS certificate a private CA signed: that CA's
    /// PEM file (relative to the profile's folder), installed for that registry on the node
    /// that pulls.
    #[serde(default)]
    pub registry_ca: Option<String>,
    /// `source = "pull"`: which nodes pull from the registry.
    #[serde(default)]
    pub pull: PullFrom,
}

/// Which nodes take a pulled image from the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PullFrom {
    /// Every node pulls at once from a mirror on the master, which takes each blob from the
    /// registry once: one copy from the registry per cluster (by digest, or a master alone:
    /// the master pulls, the workers get its copy down the fan-out tree).
    #[default]
    Master,
    /// Every node pulls for itself (a registry or mirror inside the cloud, where N copies
    /// cost nothing); the credentials reach every node.
    EveryNode,
}

impl Default for ContainerSpec {
    fn default() -> Self {
        ContainerSpec {
            image: default_container_image(),
            source: ImageSource::default(),
            ssh_port: default_ssh_port(),
            collective: Collective::default(),
            registry_ca: None,
            pull: PullFrom::default(),
        }
    }
}

fn default_ssh_user() -> String {
    "debian".to_string()
}

fn default_container_image() -> String {
    "hvd-cluster/horovod:tf2.12.1-hvd0.28.1".to_string()
}

fn default_ssh_port() -> u16 {
    12345
}

/// The subnet CIDR a created network gets when the profile names none.
pub const DEFAULT_CIDR: &str = "10.42.0.0/24";

impl Profile {
    /// The CIDR of the cluster's subnet when hvd-cluster creates the network.
    pub fn subnet_cidr(&self) -> &str {
        self.network.cidr.as_deref().unwrap_or(DEFAULT_CIDR)
    }

    /// True when hvd-cluster creates network, subnet (and router) itself.
    pub fn creates_network(&self) -> bool {
        self.network.existing.is_none()
    }

    pub fn worker_image(&self) -> Option<&str> {
        self.workers
            .image
            .as_deref()
            .or(self.master.image.as_deref())
    }
}

/// The profile's JSON Schema (draft 2020-12), from the same types that parse it: editors
/// (taplo / Even Better TOML) complete and check keys with it. What the schema cannot say
/// (CIDRs, idle times, the checks of `validate`) only `validate` says.
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(Profile).to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "title".into(),
            serde_json::Value::String("hvd-cluster profile".into()),
        );
    }
    schema
}

/// Reads and validates a profile file.
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ProfileError::new(
            path,
            (None, None),
            "",
            &format!("cannot read the profile: {e}"),
            None,
        )
    })?;
    parse(path, &text)
}

/// Parses and validates profile text; `path` is used in messages, and its folder is where
/// the profile's own relative file paths (`access.jupyter_cert`, `jupyter_key`) start.
pub fn parse(path: &Path, text: &str) -> Result<Profile, ProfileError> {
    let mut profile: Profile = toml::from_str(text).map_err(|e| syntax_error(path, text, &e))?;
    validate(&profile).map_err(|issue| {
        ProfileError::new(
            path,
            locate_field(text, &issue.field),
            &issue.field,
            &issue.message,
            issue.help,
        )
    })?;
    let folder = path.parent().unwrap_or(Path::new(""));
    for file in [
        &mut profile.access.jupyter_cert,
        &mut profile.access.jupyter_key,
    ]
    .into_iter()
    .flatten()
    .chain(profile.data.iter_mut().filter_map(|d| d.local.as_mut()))
    {
        if file.is_relative() {
            *file = folder.join(&*file);
        }
    }
    Ok(profile)
}

/// The profile text with `[workers] count` set to `n`, everything else (comments included)
/// untouched; `None` when the text has no such line to edit.
pub fn with_worker_count(text: &str, n: u32) -> Option<String> {
    let (line, _) = locate_field(text, "workers.count");
    let line = line?;
    let mut out = String::with_capacity(text.len());
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let (key, rest) = l.split_once('=')?;
            let comment = rest
                .find('#')
                .map(|at| format!("  {}", rest[at..].trim_end()))
                .unwrap_or_default();
            let newline = if l.ends_with('\n') { "\n" } else { "" };
            out.push_str(&format!("{}= {n}{comment}{newline}", key));
        } else {
            out.push_str(l);
        }
    }
    Some(out)
}
