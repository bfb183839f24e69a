//! Bootstrap over SSH, one code path for every provider: once a node answers SSH, a list of
//! idempotent steps, each a check and an apply, runs on all nodes in parallel with a bar per
//! node: Docker, the GPU runtime (when the node has GPUs), /shared, the Horovod image, the
//! cluster's keys, and the Horovod container; then the hostfile and the discovery file.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use futures::future::try_join_all;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::profile::{ImageSource, Profile};
use crate::progress::Progress;
use crate::render::{self, HostSlots, RenderError, Renderer};
use crate::ssh::{self, Host, Ssh, SshError};
use crate::state::{ClusterDir, Node, StateError};

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Ssh(#[from] SshError),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{node}: step `{step}` failed: {detail}")]
    Step {
        node: String,
        step: String,
        detail: String,
    },
    #[error("{0}")]
    Other(String),
}

/// Where files live on every node (mounted read-only into the Horovod container).
pub const NODE_DIR: &str = "/etc/hvd-cluster";

/// A connected node and what bootstrap learnt about it.
pub struct NodeSession {
    pub node: Node,
    pub ssh: Ssh,
    /// The interface holding the node's private address (for Gloo / NCCL), never docker0.
    pub iface: String,
    /// The node's name and private address, checked, for the hostfile and discovery.
    pub host: HostSlots,
}

/// Writes the cluster's ssh_config (master by its public address when it has one, workers
/// through the master) and returns its path.
pub fn write_ssh_config(
    dir: &ClusterDir,
    user: &str,
    nodes: &[Node],
) -> Result<std::path::PathBuf, BootstrapError> {
    let master = nodes
        .iter()
        .find(|n| n.role == "master")
        .ok_or_else(|| BootstrapError::Other("the cluster has no master".into()))?;
    let hosts: Vec<Host> = nodes
        .iter()
        .filter_map(|n| {
            let is_master = n.role == "master";
            let address = if is_master {
                n.public_ip.clone().or_else(|| n.private_ip.clone())
            } else {
                n.private_ip.clone()
            }?;
            Some(Host {
                alias: n.name.clone(),
                address,
                user: user.to_string(),
                jump: (!is_master).then(|| master.name.clone()),
            })
        })
        .collect();
    let path = ssh::config_path(&dir.path);
    crate::state::write_atomic(
        &path,
        ssh::render_config(&dir.path, &hosts)?.as_bytes(),
        0o600,
    )?;
    Ok(path)
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
    ordered.sort_by_key(|n| n.role != "master");
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

/// Where the steps' durations go: set once by `bootstrap` (plain lines off a terminal).
static STEP_PROGRESS: std::sync::OnceLock<Progress> = std::sync::OnceLock::new();

fn eprintln_step(node: &str, name: &str, secs: f64) {
    if let Some(p) = STEP_PROGRESS.get() {
        p.line(format!("{node}: {name} applied in {secs:.1}s"));
    }
}

/// Runs `check`; when it fails runs `apply`, then `check` again, which must pass.
async fn step(
    s: &NodeSession,
    name: &str,
    check: &str,
    apply: &str,
    bar: &indicatif::ProgressBar,
) -> Result<bool, BootstrapError> {
    bar.set_message(format!("{name}: checking"));
    if s.ssh.sudo(check).await.is_ok() {
        return Ok(false);
    }
    bar.set_message(format!("{name}: applying"));
    let started = std::time::Instant::now();
    s.ssh.sudo(apply).await.map_err(|e| BootstrapError::Step {
        node: s.node.name.clone(),
        step: name.into(),
        detail: e.to_string(),
    })?;
    s.ssh.sudo(check).await.map_err(|e| BootstrapError::Step {
        node: s.node.name.clone(),
        step: name.into(),
        detail: format!("applied, but the check still fails: {e}"),
    })?;
    eprintln_step(&s.node.name, name, started.elapsed().as_secs_f64());
    Ok(true)
}

/// What the steps need beyond the profile.
pub struct Inputs<'a> {
    pub profile: &'a Profile,
    pub dir: &'a ClusterDir,
    pub jupyter_token: &'a str,
    /// The subnet allowed to mount /shared, e.g. `10.42.0.0/24`.
    pub clients_cidr: String,
    /// `storage.kind = "manila"`: the share's NFS export location (`host:/path`).
    pub share_export: Option<String>,
}

/// What the /shared scripts are rendered from.
pub struct SharedInputs<'a> {
    pub storage: crate::profile::StorageKind,
    pub clients: &'a str,
    pub master: &'a str,
    pub master_ip: &'a str,
    pub export: Option<&'a str>,
}

/// The profile's storage kind as the templates name it.
pub fn storage_name(kind: crate::profile::StorageKind) -> &'static str {
    match kind {
        crate::profile::StorageKind::MasterNfs => "master-nfs",
        crate::profile::StorageKind::Manila => "manila",
        crate::profile::StorageKind::None => "none",
    }
}

/// The values of shared.check.sh / shared.apply.sh for a node of `role`. The subnet and the
/// export location are checked here, as they land in /etc/exports, nfs-ganesha's
/// configuration and /etc/fstab (and are shell-quoted in the scripts as well).
pub fn shared_values(
    r: &Renderer,
    s: &SharedInputs<'_>,
    role: &str,
) -> Result<serde_json::Value, BootstrapError> {
    crate::input::check_cidr(s.clients)
        .map_err(|e| BootstrapError::Other(format!("the cluster's subnet: {e}")))?;
    let export = match (s.storage, s.export) {
        (crate::profile::StorageKind::Manila, Some(e)) => {
            crate::input::check_nfs_export(e)
                .map_err(|e| BootstrapError::Other(format!("the Manila share: {e}")))?;
            e
        }
        (crate::profile::StorageKind::Manila, None) => {
            return Err(BootstrapError::Other(
                "the Manila share has no NFS export location yet".into(),
            ))
        }
        _ => "",
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
    }))
}

/// The Horovod hosts: every node, master first, with its slots.
pub fn host_slots(sessions: &[NodeSession]) -> Vec<HostSlots> {
    sessions.iter().map(|s| s.host.clone()).collect()
}

#[derive(Serialize)]
struct ContainerValues<'a> {
    role: &'a str,
    gpus: u32,
    config_hash: &'a str,
    ssh_port: u16,
    image: &'a str,
    hosts: &'a [HostSlots],
}

/// Brings every node to the profile's state. Returns the number of steps that changed something.
pub async fn bootstrap(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    progress: &Progress,
) -> Result<usize, BootstrapError> {
    let _ = STEP_PROGRESS.set(progress.clone());
    let r = Renderer::new()?;
    let p = inputs.profile;
    let master = sessions
        .first()
        .ok_or_else(|| BootstrapError::Other("no nodes".into()))?;
    let master_ip = master.node.private_ip.clone().unwrap_or_default();
    let hosts = host_slots(sessions);
    let bars: Vec<indicatif::ProgressBar> = sessions
        .iter()
        .map(|s| progress.spinner(&s.node.name))
        .collect();
    let mut changed = 0;

    // Docker and the GPU runtime: independent on every node, once cloud-init is done.
    let cloud_init = r.render("cloud-init.check.sh", &json!({}))?;
    let results = try_join_all(sessions.iter().zip(&bars).map(|(s, bar)| async {
        bar.set_message("waiting for cloud-init");
        s.ssh
            .sudo(&cloud_init)
            .await
            .map_err(|e| BootstrapError::Step {
                node: s.node.name.clone(),
                step: "cloud-init".into(),
                detail: e.to_string(),
            })?;
        // One apt transaction for Docker and what /shared and the image need on this node.
        let values = json!({"role": s.node.role, "storage": storage_name(p.storage.kind)});
        let mut n = step(
            s,
            "docker",
            &r.script("docker.check.sh", &values)?,
            &r.script("docker.apply.sh", &values)?,
            bar,
        )
        .await? as usize;
        if s.node.gpus > 0 {
            n += step(
                s,
                "gpu runtime",
                &r.script("gpu.check.sh", &json!({}))?,
                &r.script("gpu.apply.sh", &json!({}))?,
                bar,
            )
            .await? as usize;
        }
        Ok::<usize, BootstrapError>(n)
    }))
    .await?;
    changed += results.iter().sum::<usize>();

    // /shared: the master serves it first, then the workers mount it (Manila: every node
    // mounts the share at once).
    if p.storage.kind != crate::profile::StorageKind::None {
        let shared = SharedInputs {
            storage: p.storage.kind,
            clients: &inputs.clients_cidr,
            master: &master.node.name,
            master_ip: &master_ip,
            export: inputs.share_export.as_deref(),
        };
        let values = |role: &str| shared_values(&r, &shared, role);
        let first = if p.storage.kind == crate::profile::StorageKind::Manila {
            0
        } else {
            let v = values("master")?;
            changed += step(
                master,
                "shared",
                &r.script("shared.check.sh", &v)?,
                &r.script("shared.apply.sh", &v)?,
                &bars[0],
            )
            .await? as usize;
            1
        };
        let results = try_join_all(
            sessions
                .iter()
                .zip(&bars)
                .skip(first)
                .map(|(s, bar)| async {
                    let v = values(&s.node.role)?;
                    step(
                        s,
                        "shared",
                        &r.script("shared.check.sh", &v)?,
                        &r.script("shared.apply.sh", &v)?,
                        bar,
                    )
                    .await
                }),
        )
        .await?;
        changed += results.into_iter().filter(|c| *c).count();
    }

    // The Horovod image on every node.
    changed += ensure_image(inputs, sessions, &bars, progress).await?;

    // Keys and files, then the container (recreated when its configuration changed).
    let private_key = std::fs::read(inputs.dir.private_key())
        .map_err(|e| BootstrapError::Other(format!("cannot read the cluster key: {e}")))?;
    let public_key = std::fs::read(inputs.dir.public_key_file())
        .map_err(|e| BootstrapError::Other(format!("cannot read the cluster key: {e}")))?;
    let hostfile = r.hostfile(&hosts)?;
    let discover = r.render("discover_hosts.sh", &json!({}))?;
    let host_names = render::ssh_host_names(&hosts);
    let image = &p.container.image;
    let image_id = local_image_id(image).await.unwrap_or_else(|| image.clone());
    let results = try_join_all(sessions.iter().zip(&bars).map(|(s, bar)| {
        let hosts = &hosts;
        let r = &r;
        let private_key = &private_key;
        let public_key = &public_key;
        let hostfile = &hostfile;
        let discover = &discover;
        let host_names = &host_names;
        let image_id = &image_id;
        async move {
            bar.set_message("keys and files");
            let is_master = s.node.role == "master";
            s.ssh
                .write_file(
                    &format!("{NODE_DIR}/ssh/authorized_keys"),
                    public_key,
                    0o600,
                )
                .await?;
            s.ssh
                .write_file(&format!("{NODE_DIR}/ssh/id_ed25519"), private_key, 0o600)
                .await?;
            s.ssh
                .write_file(&format!("{NODE_DIR}/ssh/id_ed25519.pub"), public_key, 0o644)
                .await?;
            s.ssh
                .write_file(
                    &format!("{NODE_DIR}/ssh_config.d/hosts.conf"),
                    host_names.as_bytes(),
                    0o644,
                )
                .await?;
            s.ssh
                .write_file(
                    &format!("{NODE_DIR}/check.py"),
                    render::CHECK_JOB.as_bytes(),
                    0o644,
                )
                .await?;
            if is_master {
                s.ssh
                    .write_file(
                        &format!("{NODE_DIR}/jupyter/token"),
                        inputs.jupyter_token.as_bytes(),
                        0o600,
                    )
                    .await?;
                s.ssh
                    .write_file(&format!("{NODE_DIR}/hostfile"), hostfile.as_bytes(), 0o644)
                    .await?;
                s.ssh
                    .write_file(
                        &format!("{NODE_DIR}/discover_hosts.sh"),
                        discover.as_bytes(),
                        0o755,
                    )
                    .await?;
            }
            // What the container depends on: a change recreates it. The token is hashed, never shown.
            let mut h = Sha256::new();
            for part in [
                // Not the host list: adding a worker must not restart the containers a running job uses.
                image_id.as_bytes(),
                public_key,
                inputs.jupyter_token.as_bytes(),
                s.node.role.as_bytes(),
                // How the container is run: a new mount or flag recreates it.
                render::template_source("container.apply.sh")
                    .unwrap_or_default()
                    .as_bytes(),
            ] {
                h.update(part);
                h.update([0]);
            }
            h.update(p.container.ssh_port.to_string());
            let config_hash = hex::encode(&h.finalize()[..8]);
            let values = ContainerValues {
                role: &s.node.role,
                gpus: s.node.gpus,
                config_hash: &config_hash,
                ssh_port: p.container.ssh_port,
                image,
                hosts,
            };
            let changed = step(
                s,
                "container",
                &r.render("container.check.sh", &values)?,
                &r.render("container.apply.sh", &values)?,
                bar,
            )
            .await?;
            bar.finish_and_clear();
            Ok::<bool, BootstrapError>(changed)
        }
    }))
    .await?;
    changed += results.into_iter().filter(|c| *c).count();

    // Every container's sshd answers the master's container (horovodrun's path).
    wait_collective_ssh(sessions, p.container.ssh_port, Duration::from_secs(90)).await?;
    Ok(changed)
}

/// Writes the elastic discovery file on the master atomically: `host:slots` per ready host.
pub async fn write_discovery(
    master: &NodeSession,
    hosts: &[HostSlots],
) -> Result<(), BootstrapError> {
    master
        .ssh
        .write_file(
            &format!("{NODE_DIR}/discovery/hosts"),
            render::discovery_lines(hosts).as_bytes(),
            0o644,
        )
        .await?;
    Ok(())
}

async fn wait_collective_ssh(
    sessions: &[NodeSession],
    port: u16,
    deadline: Duration,
) -> Result<(), BootstrapError> {
    let master = &sessions[0];
    let started = std::time::Instant::now();
    for s in sessions {
        let ip = s.node.private_ip.clone().unwrap_or_default();
        loop {
            let probe = format!(
                "docker exec hvd ssh -p {port} -o ConnectTimeout=3 -o BatchMode=yes {} true",
                ssh::shell_quote(&ip)
            );
            match master.ssh.sudo(&probe).await {
                Ok(_) => break,
                Err(e) if started.elapsed() > deadline => {
                    return Err(BootstrapError::Step {
                        node: s.node.name.clone(),
                        step: "collective ssh".into(),
                        detail: format!(
                            "the master's container cannot reach sshd on {ip}:{port}: {e}"
                        ),
                    })
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }
    Ok(())
}

/// The id of an image on this machine's Docker engine, if it is there.
pub async fn local_image_id(image: &str) -> Option<String> {
    let out = tokio::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", image])
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Gets the Horovod image onto every node: `pull` on each node, or `transfer`: sent once from
/// this machine to the master, then fanned out from the master to the workers over the
/// private network (one copy over the user's link, not N).
async fn ensure_image(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
) -> Result<usize, BootstrapError> {
    let p = inputs.profile;
    let image = &p.container.image;
    // The image reference passed the reference grammar; it is still quoted wherever a shell sees it.
    let quoted_image = ssh::shell_quote(image);
    let want = local_image_id(image).await;
    let mut missing = Vec::new();
    for s in sessions {
        let id = s
            .ssh
            .sudo(&format!(
                "docker image inspect -f '{{{{.Id}}}}' {quoted_image} 2>/dev/null || true"
            ))
            .await?;
        let present = match &want {
            Some(w) => id.trim() == w,
            None => !id.trim().is_empty(),
        };
        if !present {
            missing.push(s);
        }
    }
    if missing.is_empty() {
        return Ok(0);
    }
    match p.container.source {
        ImageSource::Pull => {
            let quoted_image = &quoted_image;
            try_join_all(missing.iter().zip(bars).map(|(s, bar)| async move {
                bar.set_message(format!("docker pull {image}"));
                s.ssh.sudo(&format!("docker pull {quoted_image}")).await
            }))
            .await?;
        }
        ImageSource::Transfer | ImageSource::Build => {
            if want.is_none() {
                return Err(BootstrapError::Other(format!(
                    "the image {image} is not on this machine; build it first (the local provider does so on `up`), or set container.source = \"pull\""
                )));
            }
            let master = &sessions[0];
            let workers: Vec<&NodeSession> = missing
                .iter()
                .copied()
                .filter(|s| s.node.name != master.node.name)
                .collect();
            // zstd on this machine and on every node that gets the image: the image then crosses
            // every link compressed and the master keeps it compressed for the workers.
            let zstd = local_has_zstd().await
                && try_join_all(missing.iter().map(|s| async move {
                    Ok::<bool, BootstrapError>(s.ssh.run("command -v zstd").await.is_ok())
                }))
                .await?
                .into_iter()
                .all(|has| has);
            let file = ImageFile { zstd };
            let mut received = false;
            if missing.iter().any(|s| s.node.name == master.node.name) {
                bars[0].set_message(format!("sending {image} to the master"));
                // Keep the bytes the master received for the workers (no second `docker save`).
                let keep = !workers.is_empty();
                let sent = send_image_to_master(master, image, file, keep).await?;
                progress.line(format!("{}: {}", master.node.name, sent.describe()));
                received = keep;
            }
            if !workers.is_empty() {
                bars[0].set_message(format!(
                    "serving {image} to {} worker(s) on port {IMAGE_PORT}",
                    workers.len()
                ));
                // The master loads the file it received while the workers fetch it: under
                // emulation `docker load` is the slow part, so the two overlap.
                let master_load = async {
                    if !received {
                        return Ok(None);
                    }
                    let started = std::time::Instant::now();
                    master
                        .ssh
                        .sudo(&format!(
                            "set -e -o pipefail\n{} {} | docker load -q >/dev/null",
                            file.decompress(),
                            file.path()
                        ))
                        .await
                        .map(|_| Some(started.elapsed().as_secs_f64()))
                };
                let (loaded, fanned) = tokio::join!(
                    master_load,
                    fan_out_image(master, &workers, image, file, received)
                );
                let _ = master.ssh.sudo(&format!("rm -f {}", file.path())).await;
                if let Some(secs) = loaded? {
                    progress.line(format!("{}: docker load {secs:.1}s", master.node.name));
                }
                for line in fanned? {
                    progress.line(&line);
                }
            }
        }
    }
    Ok(1)
}

/// The port of the master's one-shot image server (TCP, private address only; the nodes'
/// security group admits every port from its own members).
pub const IMAGE_PORT: u16 = 12346;

/// The image as a file on the master, waiting for the workers: zstd-compressed when every end
/// has zstd (a third of the bytes on every link and on the master's disk), else the plain tar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImageFile {
    pub zstd: bool,
}

impl ImageFile {
    pub fn path(self) -> &'static str {
        if self.zstd {
            "/var/tmp/hvd-cluster-image.tar.zst"
        } else {
            "/var/tmp/hvd-cluster-image.tar"
        }
    }
    /// The command that turns the file's bytes (a path argument or stdin) back into the tar.
    pub fn decompress(self) -> &'static str {
        if self.zstd {
            "zstd -d -q -c"
        } else {
            "cat"
        }
    }
}

async fn local_has_zstd() -> bool {
    tokio::process::Command::new("zstd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false)
}

/// One image transfer: what went over the wire, how long it took, how.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub what: String,
    pub bytes: u64,
    pub secs: f64,
}

impl Transfer {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-6)
    }
    pub fn describe(&self) -> String {
        format!(
            "image {}: {:.1} MB in {:.1}s, {:.1} MB/s",
            self.what,
            self.bytes as f64 / 1e6,
            self.secs,
            self.mb_per_s()
        )
    }
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counting<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let added = buf.filled().len().saturating_sub(before) as u64;
        self.count
            .fetch_add(added, std::sync::atomic::Ordering::Relaxed);
        polled
    }
}

/// The command the master runs on the image stream from this machine: kept as it came (the
/// file the workers fetch; the master loads it while it serves them), or decompressed straight
/// into `docker load` when no worker needs it.
pub fn master_load_command(file: ImageFile, keep: bool) -> String {
    let script = if keep {
        format!("set -e -o pipefail; cat > {}", file.path())
    } else {
        format!(
            "set -e -o pipefail; {} | docker load -q >/dev/null",
            file.decompress()
        )
    };
    format!("sudo -n bash -c {}", ssh::shell_quote(&script))
}

/// `docker save` here, over SSH to the master's `docker load`: zstd at a fast level when
/// both ends have it (SSH is the slow part under emulation), else as it is.
async fn send_image_to_master(
    master: &NodeSession,
    image: &str,
    file: ImageFile,
    keep: bool,
) -> Result<Transfer, BootstrapError> {
    let remote_zstd = file.zstd;
    let mut save = tokio::process::Command::new("docker")
        .args(["save", image])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
    let saved = save
        .stdout
        .take()
        .ok_or_else(|| BootstrapError::Other("docker save gave no output".into()))?;
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut compressor = None;
    let stream: Box<dyn tokio::io::AsyncRead + Unpin + Send> = if remote_zstd {
        let into: Stdio = saved
            .try_into()
            .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
        let mut z = tokio::process::Command::new("zstd")
            .args(["-1", "-T0", "-q", "-c"])
            .stdin(into)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| BootstrapError::Other(format!("zstd: {e}")))?;
        let out = z
            .stdout
            .take()
            .ok_or_else(|| BootstrapError::Other("zstd gave no output".into()))?;
        compressor = Some(z);
        Box::new(out)
    } else {
        Box::new(saved)
    };
    let counted = Counting {
        inner: stream,
        count: count.clone(),
    };
    master
        .ssh
        .pipe_into(&master_load_command(file, keep), counted)
        .await?;
    let secs = started.elapsed().as_secs_f64();
    let status = save
        .wait()
        .await
        .map_err(|e| BootstrapError::Other(format!("docker save {image}: {e}")))?;
    if !status.success() {
        return Err(BootstrapError::Other(format!("docker save {image} failed")));
    }
    if let Some(mut z) = compressor {
        let ok = z.wait().await.map(|s| s.success()).unwrap_or(false);
        if !ok {
            return Err(BootstrapError::Other(
                "zstd failed on the image stream".into(),
            ));
        }
    }
    Ok(Transfer {
        what: if remote_zstd {
            "to the master over SSH (zstd -1)".into()
        } else {
            "to the master over SSH (uncompressed: zstd missing here or on a node)".into()
        },
        bytes: count.load(std::sync::atomic::Ordering::Relaxed),
        secs,
    })
}

/// Parses `key=value` words of a line (the node scripts' reports).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// The master → workers leg over plain TCP inside the cluster: the master keeps what it
/// received (or saves the image, compressed when `file.zstd`) and serves it once to each
/// worker's address on its private address, port [`IMAGE_PORT`]; each worker streams it
/// through zstd straight into `docker load`, with no copy on its disk. The byte count is checked
/// on arrival, the content by zstd's frame checksum and docker's layer digests (a damaged layer
/// fails `docker load` with "invalid diffID"), so no separate sha256 pass, which costs minutes
/// in an emulated guest. Returns a line per transfer.
async fn fan_out_image(
    master: &NodeSession,
    workers: &[&NodeSession],
    image: &str,
    file: ImageFile,
    received: bool,
) -> Result<Vec<String>, BootstrapError> {
    let quoted_image = ssh::shell_quote(image);
    let master_ip = master.host.address().to_string();
    let path = file.path();
    master
        .ssh
        .write_file(
            &format!("{NODE_DIR}/image_serve.py"),
            render::IMAGE_SERVE.as_bytes(),
            0o755,
        )
        .await?;
    // What the master just received is the image; anything else there may be stale.
    let save = if received {
        format!("test -s {path}")
    } else if file.zstd {
        format!("rm -f {path}; docker save {quoted_image} | zstd -1 -T0 -q -c > {path}")
    } else {
        format!("rm -f {path}; docker save -o {path} {quoted_image}")
    };
    let prepared = master
        .ssh
        .sudo(&format!(
            "set -e -o pipefail\n{save}\necho \"bytes=$(stat -c %s {path})\"\n"
        ))
        .await?;
    let Some(bytes) = field(&prepared, "bytes").and_then(|b| b.parse::<u64>().ok()) else {
        return Err(BootstrapError::Other(format!(
            "{}: could not read the image file's size: {}",
            master.node.name,
            prepared.trim()
        )));
    };
    let addresses: Vec<String> = workers
        .iter()
        .map(|w| ssh::shell_quote(&w.host.address().to_string()))
        .collect();
    // One server at a time: a previous one (an interrupted `up`) is stopped first.
    let log = "/var/tmp/hvd-cluster-image-serve.log";
    let pidfile = "/run/hvd-cluster-image-serve.pid";
    master
        .ssh
        .sudo(&format!(
            "set -e\n[ ! -s {pidfile} ] || kill \"$(cat {pidfile})\" 2>/dev/null || true\n\
             setsid nohup python3 {NODE_DIR}/image_serve.py {ip} {IMAGE_PORT} {path} 900 {addrs} > {log} 2>&1 < /dev/null &\n\
             echo $! > {pidfile}\n\
             for _ in $(seq 1 100); do grep -q listening {log} && exit 0; kill -0 \"$(cat {pidfile})\" 2>/dev/null || break; sleep 0.1; done\n\
             cat {log} >&2; exit 1\n",
            ip = ssh::shell_quote(&master_ip),
            addrs = addresses.join(" "),
        ))
        .await?;
    let fetched = try_join_all(workers.iter().map(|w| {
        let master_ip = &master_ip;
        let quoted_image = &quoted_image;
        async move {
            w.ssh
                .write_file(
                    &format!("{NODE_DIR}/image_fetch.py"),
                    render::IMAGE_FETCH.as_bytes(),
                    0o755,
                )
                .await?;
            let out = w
                .ssh
                .sudo(&worker_fetch_command(master_ip, bytes, file, quoted_image))
                .await
                .map_err(|e| BootstrapError::Step {
                    node: w.node.name.clone(),
                    step: "image".into(),
                    detail: e.to_string(),
                })?;
            let got = field(&out, "bytes")
                .and_then(|b| b.parse::<u64>().ok())
                .unwrap_or(0);
            let secs = field(&out, "secs")
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            let t = Transfer {
                what: format!(
                    "master -> {} over plain TCP :{IMAGE_PORT}{}, streamed into docker load",
                    w.node.name,
                    if file.zstd { " (zstd)" } else { "" }
                ),
                bytes: got,
                secs,
            };
            Ok::<String, BootstrapError>(format!("{}: {}", w.node.name, t.describe()))
        }
    }))
    .await;
    // The server exits once every worker was served; stop it anyway (the caller drops the file).
    let _ = master
        .ssh
        .sudo(&format!(
            "[ ! -s {pidfile} ] || kill \"$(cat {pidfile})\" 2>/dev/null || true; rm -f {pidfile}"
        ))
        .await;
    fetched
}

/// What a worker runs (under sudo) to take the image from the master: fetch | decompress |
/// docker load, every stage's failure failing the whole (pipefail); prints `bytes= secs=`.
pub fn worker_fetch_command(
    master_ip: &str,
    bytes: u64,
    file: ImageFile,
    quoted_image: &str,
) -> String {
    let report = "/run/hvd-cluster-image-fetch.report";
    format!(
        "set -e -o pipefail\nrm -f {report}\n\
         python3 {NODE_DIR}/image_fetch.py {ip} {IMAGE_PORT} {bytes} {report} | {decompress} | docker load -q >/dev/null\n\
         docker image inspect {quoted_image} >/dev/null\ncat {report}\n",
        ip = ssh::shell_quote(master_ip),
        decompress = file.decompress(),
    )
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn the_master_keeps_the_stream_as_it_came_or_loads_it() {
        let zstd = ImageFile { zstd: true };
        let plain = ImageFile { zstd: false };
        assert_eq!(
            master_load_command(zstd, true),
            "sudo -n bash -c 'set -e -o pipefail; cat > /var/tmp/hvd-cluster-image.tar.zst'"
        );
        assert_eq!(
            master_load_command(zstd, false),
            "sudo -n bash -c 'set -e -o pipefail; zstd -d -q -c | docker load -q >/dev/null'"
        );
        assert_eq!(
            master_load_command(plain, false),
            "sudo -n bash -c 'set -e -o pipefail; cat | docker load -q >/dev/null'"
        );
        assert_eq!(plain.path(), "/var/tmp/hvd-cluster-image.tar");
        let t = Transfer {
            what: "x".into(),
            bytes: 160_000_000,
            secs: 1.0,
        };
        assert_eq!(t.describe(), "image x: 160.0 MB in 1.0s, 160.0 MB/s");
        assert_eq!(field("report bytes=12 secs=0.5", "bytes"), Some("12"));
        assert_eq!(field("sha256=abc bytes=1", "sha"), None);
    }

    #[test]
    fn a_worker_streams_the_image_into_docker_load_and_fails_with_any_stage() {
        let c = worker_fetch_command("10.0.0.5", 42, ImageFile { zstd: true }, "'img:1'");
        assert!(c.starts_with("set -e -o pipefail\n"), "{c}");
        assert!(
            c.contains("image_fetch.py '10.0.0.5' 12346 42 /run/hvd-cluster-image-fetch.report | zstd -d -q -c | docker load -q"),
            "{c}"
        );
        assert!(c.contains("docker image inspect 'img:1'"), "{c}");
        let plain = worker_fetch_command("10.0.0.5", 42, ImageFile { zstd: false }, "'img:1'");
        assert!(plain.contains("| cat | docker load"), "{plain}");
    }
}
