//! The bootstrap as data: [`STEPS`], in the order they run, each naming what it does (its
//! templates, by their names in [`crate::templates`]), where it runs and when it applies.
//! Adding a step is one entry here (and its templates in that table); the runner in
//! [`super::bootstrap`] needs no change unless the step does something new.

pub mod gpu;

use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::{BootstrapError, Inputs, NodeSession, NODE_DIR, RUNTIME_BASE, RUNTIME_DIR};
use crate::images::{self, ContainerRuntime};
use crate::plan::Role;
use crate::profile::{ImageSource, Profile, StorageKind};
use crate::render::{self, HostSlots, Renderer};
use crate::state::Node;
use crate::templates::{self, Template};

/// Where a step runs.
#[derive(Debug, Clone, Copy)]
pub enum Runs {
    /// On every node at once. Consecutive such steps run as one chain per node, so a node
    /// goes on while another is still busy.
    EveryNode,
    /// On the master first, then on the workers at once; every node at once when `together`
    /// says nothing on the master has to come first.
    MasterFirst { together: fn(&Profile) -> bool },
    /// Once for the whole cluster.
    Cluster,
}

/// What a step does.
#[derive(Debug, Clone, Copy)]
pub enum Does {
    /// Runs a script once; it must succeed (it may wait itself, as `cloud-init status --wait`).
    Run(Template),
    /// Runs `check`; when it fails runs `apply`, then `check` again, which must pass. With
    /// `lib`, the node functions of `lib.sh` come before each script.
    CheckApply {
        check: Template,
        apply: Template,
        lib: bool,
    },
    /// Writes the cluster's keys and files onto the node (see [`write_files`]).
    Files,
    /// Gets the Horovod image onto every node (see [`super::image`]).
    Image,
    /// Waits until the master's container reaches sshd in every container (horovodrun's path).
    CollectiveSsh,
}

/// One bootstrap step.
pub struct Step {
    /// As shown on the node's progress line and in errors.
    pub name: &'static str,
    pub runs: Runs,
    pub does: Does,
    /// Whether the step applies to a node (for [`Runs::Cluster`], to the master).
    pub when: fn(&Profile, &Node) -> bool,
    /// The values its templates are rendered with, for one node.
    pub values: fn(&Facts<'_>, &NodeSession) -> Result<Value, BootstrapError>,
}

/// Every step, in order.
pub const STEPS: &[Step] = &[
    Step {
        name: "cloud-init",
        runs: Runs::EveryNode,
        does: Does::Run(templates::CLOUD_INIT_CHECK),
        when: always,
        values: no_values,
    },
    // A node whose flavor has an ephemeral disk keeps Docker's data there: before Docker is
    // installed, so its data lands there from the start.
    Step {
        name: "data disk",
        runs: Runs::EveryNode,
        does: Does::CheckApply {
            check: templates::DATA_DISK_CHECK,
            apply: templates::DATA_DISK_APPLY,
            lib: true,
        },
        when: |_, node| node.ephemeral_gb > 0,
        values: |_, s| Ok(json!({"ephemeral_gb": s.node.ephemeral_gb})),
    },
    // One apt transaction for Docker and what /shared and the image need on this node.
    Step {
        name: "docker",
        runs: Runs::EveryNode,
        does: Does::CheckApply {
            check: templates::DOCKER_CHECK,
            apply: templates::DOCKER_APPLY,
            lib: true,
        },
        when: always,
        values: docker_values,
    },
    Step {
        name: "gpu runtime",
        runs: Runs::EveryNode,
        does: Does::CheckApply {
            check: templates::GPU_CHECK,
            apply: templates::GPU_APPLY,
            lib: true,
        },
        when: has_gpus,
        values: gpu_values,
    },
    // /shared: the master serves it first, then the workers mount it (Manila: every node
    // mounts the share at once).
    Step {
        name: "shared",
        runs: Runs::MasterFirst {
            together: |p| p.storage.kind == StorageKind::Manila,
        },
        does: Does::CheckApply {
            check: templates::SHARED_CHECK,
            apply: templates::SHARED_APPLY,
            lib: true,
        },
        when: |p, _| p.storage.kind != StorageKind::None,
        values: shared_step_values,
    },
    Step {
        name: "image",
        runs: Runs::Cluster,
        does: Does::Image,
        when: always,
        values: no_values,
    },
    // Keys and files, then the container (recreated when its configuration changed).
    Step {
        name: "keys and files",
        runs: Runs::EveryNode,
        does: Does::Files,
        when: always,
        values: no_values,
    },
    // A user's image: what the container needs from outside it, made on the node.
    Step {
        name: "runtime",
        runs: Runs::EveryNode,
        does: Does::CheckApply {
            check: templates::RUNTIME_CHECK,
            apply: templates::RUNTIME_APPLY,
            lib: true,
        },
        when: |p, _| images::runtime_for(&p.container.image) == ContainerRuntime::Tool,
        values: runtime_values,
    },
    Step {
        name: "container",
        runs: Runs::EveryNode,
        does: Does::CheckApply {
            check: templates::CONTAINER_CHECK,
            apply: templates::CONTAINER_APPLY,
            lib: false,
        },
        when: always,
        values: container_values,
    },
    Step {
        name: "collective ssh",
        runs: Runs::Cluster,
        does: Does::CollectiveSsh,
        when: always,
        values: no_values,
    },
];

fn always(_: &Profile, _: &Node) -> bool {
    true
}

fn has_gpus(_: &Profile, n: &Node) -> bool {
    n.gpus > 0
}

fn no_values(_: &Facts<'_>, _: &NodeSession) -> Result<Value, BootstrapError> {
    Ok(json!({}))
}

/// What the steps are rendered from, gathered once for the whole cluster.
pub struct Facts<'a> {
    pub renderer: Renderer,
    pub inputs: &'a Inputs<'a>,
    pub master: &'a NodeSession,
    /// Every node, master first, with its slots.
    pub hosts: Vec<HostSlots>,
    /// The containers' key pair (not the hosts' login key).
    pub private_key: Vec<u8>,
    pub public_key: Vec<u8>,
    pub hostfile: String,
    pub discover: String,
    pub host_names: String,
    /// The image's id on this machine, when it is here (else its reference).
    pub image_id: String,
}

impl<'a> Facts<'a> {
    pub async fn gather(
        inputs: &'a Inputs<'a>,
        sessions: &'a [NodeSession],
    ) -> Result<Facts<'a>, BootstrapError> {
        let renderer = Renderer::new()?;
        let master = sessions
            .first()
            .ok_or_else(|| BootstrapError::Other("no nodes".into()))?;
        let hosts = super::host_slots(sessions);
        // The containers' own key, never the hosts' login key: from a container (a Jupyter
        // terminal, a rank's code) it opens the other containers' sshd and no host.
        inputs
            .dir
            .ensure_container_keypair()
            .map_err(|e| BootstrapError::Other(format!("the containers' key: {e}")))?;
        let private_key = std::fs::read(inputs.dir.container_key())
            .map_err(|e| BootstrapError::Other(format!("cannot read the containers' key: {e}")))?;
        let public_key = std::fs::read(inputs.dir.container_key_public())
            .map_err(|e| BootstrapError::Other(format!("cannot read the containers' key: {e}")))?;
        let hostfile = renderer.hostfile(&hosts)?;
        let discover = renderer.render("discover_hosts.sh", &json!({}))?;
        let host_names = render::ssh_host_names(&hosts);
        let image = &inputs.profile.container.image;
        // Only an image sent from here has this machine's id; a pulled or remotely built one
        // is named by its reference (the container's check compares ids on the node itself).
        let image_id = match inputs.profile.container.source {
            ImageSource::Build | ImageSource::Transfer => super::image::local_image_id(image).await,
            ImageSource::Pull | ImageSource::BuildRemote => None,
        }
        .unwrap_or_else(|| image.clone());
        Ok(Facts {
            renderer,
            inputs,
            master,
            hosts,
            private_key,
            public_key,
            hostfile,
            discover,
            host_names,
            image_id,
        })
    }
}

/// The GPU runtime's plan table and NVIDIA's repository and key (see [`gpu`]).
fn gpu_values(_: &Facts<'_>, _: &NodeSession) -> Result<Value, BootstrapError> {
    gpu::values(&gpu::ToolkitRepo::nvidia())
        .map_err(|e| BootstrapError::Other(format!("the GPU runtime: {e}")))
}

fn docker_values(f: &Facts<'_>, s: &NodeSession) -> Result<Value, BootstrapError> {
    Ok(json!({"role": s.node.role, "storage": storage_name(f.inputs.profile.storage.kind)}))
}

/// What the /shared scripts are rendered from.
pub struct SharedInputs<'a> {
    pub storage: StorageKind,
    pub clients: &'a str,
    pub master: &'a str,
    pub master_ip: &'a str,
    pub export: Option<&'a str>,
    /// master-nfs with `storage.volume_gb`: the id of the Cinder volume attached to the
    /// master that holds /shared (its disk's serial starts with it).
    pub volume_id: Option<&'a str>,
}

/// The profile's storage kind as the templates name it.
pub fn storage_name(kind: StorageKind) -> &'static str {
    match kind {
        StorageKind::MasterNfs => "master-nfs",
        StorageKind::Manila => "manila",
        StorageKind::None => "none",
    }
}

fn shared_step_values(f: &Facts<'_>, s: &NodeSession) -> Result<Value, BootstrapError> {
    let master_ip = f.master.node.private_ip.clone().unwrap_or_default();
    let p = f.inputs.profile;
    let volume_id = match (p.storage.kind, p.storage.volume_gb) {
        (StorageKind::MasterNfs, Some(_)) => {
            let name = crate::plan::Names(&p.name).volume();
            let id = f
                .inputs
                .dir
                .load()?
                .resources
                .get(&name)
                .map(|r| r.id.clone());
            Some(id.ok_or_else(|| {
                BootstrapError::Other(format!(
                    "/shared's volume {name} is not in the cluster's state"
                ))
            })?)
        }
        _ => None,
    };
    let shared = SharedInputs {
        storage: p.storage.kind,
        clients: &f.inputs.clients_cidr,
        master: &f.master.node.name,
        master_ip: &master_ip,
        export: f.inputs.share_export.as_deref(),
        volume_id: volume_id.as_deref(),
    };
    shared_values(&f.renderer, &shared, s.node.role.as_str())
}

/// The values of shared.check.sh / shared.apply.sh for a node of `role`. The subnet and the
/// export location are checked here, as they land in /etc/exports, nfs-ganesha's
/// configuration and /etc/fstab (and are shell-quoted in the scripts as well).
pub fn shared_values(
    r: &Renderer,
    s: &SharedInputs<'_>,
    role: &str,
) -> Result<Value, BootstrapError> {
    crate::input::check_cidr(s.clients)
        .map_err(|e| BootstrapError::Other(format!("the cluster's subnet: {e}")))?;
    let export = match (s.storage, s.export) {
        (StorageKind::Manila, Some(e)) => {
            crate::input::check_nfs_export(e)
                .map_err(|e| BootstrapError::Other(format!("the Manila share: {e}")))?;
            e
        }
        (StorageKind::Manila, None) => {
            return Err(BootstrapError::Other(
                "the Manila share has no NFS export location yet".into(),
            ))
        }
        _ => "",
    };
    // The volume's id comes from the cloud: its grammar is checked before it names a disk.
    let volume_serial = match s.volume_id {
        Some(id) => {
            if id.is_empty()
                || id.len() > 64
                || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            {
                return Err(BootstrapError::Other(format!(
                    "/shared's volume: the cloud gave `{}` as its id",
                    crate::input::shown(id)
                )));
            }
            // virtio-blk disks carry the first 20 characters of it as their serial
            id.chars().take(20).collect::<String>()
        }
        None => String::new(),
    };
    let ganesha_conf = r.render("ganesha.conf", &json!({ "clients": s.clients }))?;
    Ok(json!({
        "role": role,
        "storage": storage_name(s.storage),
        "clients": s.clients,
        "master": s.master,
        "master_ip": s.master_ip,
        "export": export,
        "node_dir": NODE_DIR,
        "ganesha_conf": ganesha_conf,
        "volume_serial": volume_serial,
    }))
}

/// The runtime's files rendered for this cluster (base64, for the apply script) and their hash,
/// which the node's stamp of the runtime includes.
fn runtime_values(f: &Facts<'_>, _: &NodeSession) -> Result<Value, BootstrapError> {
    runtime_files(&f.renderer, f.inputs.profile.container.ssh_port)
}

/// The values of runtime.check.sh / runtime.apply.sh. Pure.
pub fn runtime_files(r: &Renderer, ssh_port: u16) -> Result<Value, BootstrapError> {
    use base64::Engine as _;
    let mut h = Sha256::new();
    let mut files = Vec::new();
    for (name, template) in templates::RUNTIME_FILES {
        let text = r.render(template.name, &json!({ "ssh_port": ssh_port }))?;
        h.update(name.as_bytes());
        h.update([0]);
        h.update(text.as_bytes());
        h.update([0]);
        files.push(json!({
            "name": name,
            "b64": base64::engine::general_purpose::STANDARD.encode(text),
        }));
    }
    Ok(json!({
        "kit_dir": RUNTIME_DIR,
        "base_dir": RUNTIME_BASE,
        "files": files,
        "files_hash": hex::encode(&h.finalize()[..8]),
    }))
}

#[derive(Serialize)]
struct ContainerValues<'a> {
    role: &'a str,
    runtime: ContainerRuntime,
    kit_dir: &'a str,
    gpus: u32,
    config_hash: &'a str,
    ssh_port: u16,
    image: &'a str,
    hosts: &'a [HostSlots],
}

fn container_values(f: &Facts<'_>, s: &NodeSession) -> Result<Value, BootstrapError> {
    let p = f.inputs.profile;
    // What the container depends on: a change recreates it. The token is hashed, never shown.
    let mut h = Sha256::new();
    for part in [
        // Not the host list: adding a worker must not restart the containers a running job uses.
        f.image_id.as_bytes(),
        &f.public_key,
        f.inputs.jupyter_token.as_bytes(),
        // Jupyter reads its certificate at start: a new one (or none) restarts it.
        f.inputs
            .jupyter_tls
            .as_ref()
            .map(|t| t.fingerprint.as_bytes())
            .unwrap_or_default(),
        s.node.role.as_str().as_bytes(),
        // How the container is run: a new mount or flag recreates it.
        templates::source("container.apply.sh")
            .unwrap_or_default()
            .as_bytes(),
    ] {
        h.update(part);
        h.update([0]);
    }
    h.update(p.container.ssh_port.to_string());
    let config_hash = hex::encode(&h.finalize()[..8]);
    let values = ContainerValues {
        role: s.node.role.as_str(),
        runtime: images::runtime_for(&p.container.image),
        kit_dir: RUNTIME_DIR,
        gpus: s.node.gpus,
        config_hash: &config_hash,
        ssh_port: p.container.ssh_port,
        image: &p.container.image,
        hosts: &f.hosts,
    };
    serde_json::to_value(values)
        .map_err(|e| BootstrapError::Other(format!("the container's values: {e}")))
}

/// The containers' key (both halves), the node-name ssh_config, the check job, and on the master
/// the Jupyter token, the hostfile and the discovery script.
pub async fn write_files(f: &Facts<'_>, s: &NodeSession) -> Result<(), BootstrapError> {
    let is_master = s.node.role == Role::Master;
    s.ssh
        .write_file(
            &format!("{NODE_DIR}/ssh/authorized_keys"),
            &f.public_key,
            0o600,
        )
        .await?;
    s.ssh
        .write_file(&format!("{NODE_DIR}/ssh/id_ed25519"), &f.private_key, 0o600)
        .await?;
    s.ssh
        .write_file(
            &format!("{NODE_DIR}/ssh/id_ed25519.pub"),
            &f.public_key,
            0o644,
        )
        .await?;
    s.ssh
        .write_file(
            &format!("{NODE_DIR}/ssh_config.d/hosts.conf"),
            f.host_names.as_bytes(),
            0o644,
        )
        .await?;
    s.ssh
        .write_file(
            &format!("{NODE_DIR}/check.py"),
            templates::CHECK_JOB.as_bytes(),
            0o644,
        )
        .await?;
    if is_master {
        s.ssh
            .write_file(
                &format!("{NODE_DIR}/jupyter/token"),
                f.inputs.jupyter_token.as_bytes(),
                0o600,
            )
            .await?;
        write_jupyter_tls(f, s).await?;
        s.ssh
            .write_file(
                &format!("{NODE_DIR}/hostfile"),
                f.hostfile.as_bytes(),
                0o644,
            )
            .await?;
        s.ssh
            .write_file(
                &format!("{NODE_DIR}/discover_hosts.sh"),
                f.discover.as_bytes(),
                0o755,
            )
            .await?;
    }
    Ok(())
}

/// A public Jupyter's certificate and key, and the configuration that makes Jupyter serve
/// HTTPS with them (a folder on `JUPYTER_CONFIG_PATH`, which the master's container is given):
/// written on the master, or removed when Jupyter is reached through the tunnel.
async fn write_jupyter_tls(f: &Facts<'_>, s: &NodeSession) -> Result<(), BootstrapError> {
    let (tls_dir, config_dir) = (
        format!("{NODE_DIR}/jupyter/tls"),
        format!("{NODE_DIR}/{JUPYTER_CONFIG}"),
    );
    let Some(tls) = &f.inputs.jupyter_tls else {
        s.ssh
            .sudo(&format!("rm -rf -- {tls_dir} {config_dir}"))
            .await?;
        return Ok(());
    };
    s.ssh
        .write_file(
            &format!("{tls_dir}/tls.crt"),
            tls.cert_pem.as_bytes(),
            0o644,
        )
        .await?;
    s.ssh
        .write_file(&format!("{tls_dir}/tls.key"), tls.key_pem.as_bytes(), 0o600)
        .await?;
    let config = json!({
        "ServerApp": {
            "certfile": format!("{tls_dir}/tls.crt"),
            "keyfile": format!("{tls_dir}/tls.key"),
        }
    });
    s.ssh
        .write_file(
            &format!("{config_dir}/jupyter_server_config.json"),
            config.to_string().as_bytes(),
            0o644,
        )
        .await?;
    Ok(())
}

/// Under [`NODE_DIR`]: the folder the master's container names in `JUPYTER_CONFIG_PATH`.
pub const JUPYTER_CONFIG: &str = "jupyter/config";

#[cfg(test)]
mod tests;
