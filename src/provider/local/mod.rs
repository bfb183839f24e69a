//! The local provider: each node is a container on this machine's Docker engine with its own
//! address on a per-cluster Docker network, running sshd and its own Docker engine, so the
//! bootstrap over SSH is the same as on a cloud.
//!
//! Every container, network and volume carries the label `hvd-cluster=<cluster>`; `down`
//! removes exactly those.

use std::collections::BTreeMap;
use std::ffi::OsString;

use serde::Deserialize;
use tokio::process::Command;

use futures::future::BoxFuture;
use futures::StreamExt;

use crate::input::CpuShare;
use crate::plan::{Blueprint, Desired, Health, Kind, Names, Observed, Role, Spec};
use crate::profile::Profile;
use crate::provider::{Freed, Provider, ProviderError, Screen};
use crate::state::Node;

mod bake;
mod lifecycle;
mod ps;

use ps::{ps_lines, PsLine, PS_FORMAT};

pub const LABEL: &str = "hvd-cluster";
/// The node image (what a cloud VM looks like): sshd, dockerd, nfs-ganesha.
pub use crate::images::NODE_IMAGE;

/// The environment variable giving every node container created from then on this share of
/// the machine's CPUs (`docker run --cpus`); unset or empty: no limit. Nodes that already exist
/// keep what they were created with.
pub const CPUS_VAR: &str = "HVD_CLUSTER_LOCAL_CPUS";

/// Bad input (exit 2): a local-provider setting from the environment.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    #[error("HVD_CLUSTER_LOCAL_CPUS: {0}")]
    Cpus(String),
}

/// The CPU share named by [`CPUS_VAR`], checked by its grammar against this machine's CPU
/// count (`up` checks it before any file is written; node creation reads it again).
pub fn cpus_from_env() -> Result<Option<CpuShare>, SettingError> {
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus_from(std::env::var_os(CPUS_VAR), machine)
}

fn cpus_from(
    value: Option<OsString>,
    machine_cpus: usize,
) -> Result<Option<CpuShare>, SettingError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(text) = value.to_str() else {
        return Err(SettingError::Cpus("the value is not valid UTF-8".into()));
    };
    if text.is_empty() {
        return Ok(None);
    }
    CpuShare::parse(text, machine_cpus)
        .map(Some)
        .map_err(|e| SettingError::Cpus(e.0))
}

pub struct LocalProvider {
    public_key: Option<String>,
    /// Checks container names and addresses in every reply (see [`Screen`]).
    screen: Screen,
    /// Docker options that make a node able to run its own Docker engine.
    node_security: Vec<String>,
    /// The bakes the profile's nodes are made from, by kind of server (found by `resolve`).
    bakes: Vec<(&'static str, crate::bake::BakedImage)>,
}

/// How `stop` marks a node container it stopped, so that an exited container tells a stop
/// (kept, started again by `start`) from a crash or a kill (replaced by `up` and `heal`):
/// Docker lets a container's restart policy change, not its labels. Node containers are
/// made with the policy `no`; `unless-stopped` also keeps a stopped node stopped when the
/// Docker engine restarts, and `start` sets `no` again.
pub const STOPPED_MARK: &str = "unless-stopped";

/// Whether an exited node container carries [`STOPPED_MARK`].
async fn stopped_by_us(id: &str) -> bool {
    docker(&["inspect", "-f", "{{.HostConfig.RestartPolicy.Name}}", id])
        .await
        .is_ok_and(|policy| policy.trim() == STOPPED_MARK)
}

/// Runs `docker ARGS`, returning stdout; an error carries docker's own words.
pub async fn docker(args: &[&str]) -> Result<String, ProviderError> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .await
        .map_err(|e| {
            ProviderError::Cloud(format!("cannot run docker: {e} (is Docker installed?)"))
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(ProviderError::Cloud(format!(
            "docker {}: {}",
            args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
            stderr.trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_missing(e: &ProviderError) -> bool {
    let s = e.to_string();
    s.contains("No such") || s.contains("not found") || s.contains("no such")
}

#[derive(Deserialize)]
struct LsLine {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "ID", default)]
    id: String,
}

impl LocalProvider {
    /// Checks the engine answers and finds how to run a node that can run Docker itself.
    pub async fn connect() -> Result<LocalProvider, ProviderError> {
        docker(&["version", "--format", "{{.Server.Version}}"])
            .await
            .map_err(|e| {
                ProviderError::Cloud(format!(
                    "the local provider needs a running Docker engine: {e}"
                ))
            })?;
        Ok(LocalProvider {
            public_key: None,
            screen: Screen::default(),
            node_security: vec![],
            bakes: vec![],
        })
    }

    pub fn set_public_key(&mut self, key: String) {
        self.public_key = Some(key);
    }

    /// `--privileged` where the engine allows it; on hosts whose capability bounding set lacks
    /// some capability it fails ("unable to apply caps"), so the nearest equivalent is used.
    async fn security_options(&self) -> Vec<String> {
        if !self.node_security.is_empty() {
            return self.node_security.clone();
        }
        let probe = docker(&[
            "run",
            "--rm",
            "--privileged",
            "--entrypoint",
            "true",
            NODE_IMAGE,
        ])
        .await;
        if probe.is_ok() {
            return vec!["--privileged".into()];
        }
        [
            "--cap-add=ALL",
            "--cap-drop=SYS_RESOURCE",
            "--security-opt=seccomp=unconfined",
            "--security-opt=apparmor=unconfined",
            "--security-opt=systempaths=unconfined",
            "--device=/dev/fuse",
            "--device-cgroup-rule=a *:* rwm",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    async fn containers(&self, cluster: &str) -> Result<Vec<PsLine>, ProviderError> {
        let filter = format!("label={LABEL}={cluster}");
        let out = docker(&[
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            &filter,
            "--format",
            PS_FORMAT,
        ])
        .await?;
        Ok(ps_lines(&out))
    }

    async fn listed(&self, what: &str, cluster: &str) -> Result<Vec<LsLine>, ProviderError> {
        let filter = format!("label={LABEL}={cluster}");
        let out = docker(&[what, "ls", "--filter", &filter, "--format", "{{json .}}"]).await?;
        Ok(out
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// Every node container with its address on the cluster network, master first.
    pub async fn nodes(&self, cluster: &str) -> Result<Vec<Node>, ProviderError> {
        let net = Names(cluster).network();
        let mut nodes = Vec::new();
        for c in self.containers(cluster).await? {
            // Only containers with a name this cluster gives are asked for their address.
            if self.screen.server_role(cluster, &c.names).is_none() {
                continue;
            }
            let format = format!("{{{{(index .NetworkSettings.Networks \"{net}\").IPAddress}}}}");
            let out = docker(&["inspect", "-f", &format, &c.id]).await?;
            // Not on the cluster network (yet): docker prints `<no value>` or nothing.
            let ip =
                Some(out.trim().to_string()).filter(|s| !s.is_empty() && !s.starts_with("<no"));
            nodes.push(Node {
                name: c.names.clone(),
                // The screen below gives the role by the name, not by a label.
                role: Role::default(),
                private_ip: ip,
                public_ip: None,
                slots: 1,
                gpus: 0,
                ephemeral_gb: 0,
                in_discovery: None,
            });
        }
        Ok(self.screen.nodes(cluster, nodes))
    }

    /// The 127.0.0.1 address Jupyter on the master is published at.
    pub async fn jupyter_endpoint(&self, cluster: &str) -> Result<Option<String>, ProviderError> {
        match docker(&["port", &Names(cluster).master(), "8888/tcp"]).await {
            Ok(out) => Ok(out
                .lines()
                .find(|l| l.starts_with("127.0.0.1:"))
                .map(str::to_string)),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn create_node(
        &self,
        cluster: &str,
        d: &Desired,
        role: Role,
    ) -> Result<String, ProviderError> {
        let n = Names(cluster);
        let key = self
            .public_key
            .as_deref()
            .ok_or_else(|| ProviderError::Cloud("no public key for the node".into()))?;
        // `up` refused a bad value before anything was created; this only reads it again.
        let cpus = cpus_from_env().map_err(|e| ProviderError::Cloud(e.to_string()))?;
        let docker_volume = format!("{}-docker", d.name);
        let label = format!("{LABEL}={cluster}");
        docker(&[
            "volume",
            "create",
            "--label",
            &label,
            "--label",
            &format!("hvd-node={}", d.name),
            &docker_volume,
        ])
        .await?;
        let role_label = format!("hvd-role={role}");
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            d.name.clone(),
            "--hostname".into(),
            d.name.clone(),
            "--label".into(),
            label,
            "--label".into(),
            role_label,
            "--network".into(),
            n.network(),
            "-v".into(),
            format!("{docker_volume}:/var/lib/docker"),
            // No NFS client in this kernel: the nodes see /shared through one volume; the
            // master also serves it over NFS (userspace) and `check` reads it that way.
            "-v".into(),
            format!("{}:/shared", n.volume()),
            "-e".into(),
            format!("SSH_AUTHORIZED_KEYS={key}"),
        ];
        if role == Role::Master {
            args.extend(["-p".into(), "127.0.0.1::8888".into()]);
        }
        if let Some(cpus) = cpus {
            args.extend(["--cpus".into(), cpus.to_string()]);
        }
        args.extend(self.security_options().await);
        // A node of a bake: its image, its Docker data (the Horovod image in it) copied first.
        match &d.spec {
            Spec::Server { image, .. } if !image.is_empty() => {
                bake::seed_node_volume(image, &docker_volume).await?;
                args.push(bake::image_ref(image));
            }
            _ => args.push(NODE_IMAGE.into()),
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = docker(&argv).await?;
        Ok(id.trim().to_string())
    }
}

/// The local layout of a cluster: containers on one Docker network, `/shared` on one volume
/// they all mount; no keypair, security group or floating IP.
pub struct LocalBlueprint;

impl Blueprint for LocalBlueprint {
    fn fixed(&self, p: &Profile) -> Vec<Desired> {
        let n = Names(&p.name);
        // Containers on one Docker network, /shared on one volume they all mount.
        vec![
            Desired {
                name: n.network(),
                spec: Spec::Network,
            },
            Desired {
                name: n.volume(),
                spec: Spec::Volume {
                    size_gb: 0,
                    volume_type: None,
                    keep: false,
                    existing: None,
                },
            },
            Desired {
                name: n.master(),
                spec: Spec::Server {
                    role: Role::Master,
                    index: 0,
                    flavor: String::new(),
                    // a bake's name, or none: the node image
                    image: p.master.image.clone().unwrap_or_default(),
                    security_groups: vec![],
                    network: n.network(),
                    root_volume: None,
                },
            },
        ]
    }

    fn worker(&self, p: &Profile, index: u32) -> Desired {
        let n = Names(&p.name);
        Desired {
            name: n.worker(index),
            spec: Spec::Server {
                role: Role::Worker,
                index,
                flavor: p.workers.flavor.clone().unwrap_or_default(),
                image: p.worker_image().unwrap_or_default().to_string(),
                security_groups: vec![],
                network: p.network.existing.clone().unwrap_or_else(|| n.network()),
                root_volume: None,
            },
        }
    }
}

/// The provider's own calls, behind [`Provider`] below.
impl LocalProvider {
    pub async fn observe(&self, cluster: &str) -> Result<Vec<Observed>, ProviderError> {
        let mut out = Vec::new();
        for k in [Kind::Network, Kind::Volume, Kind::Server] {
            out.extend(self.poll(cluster, k).await?);
        }
        Ok(out)
    }

    pub async fn poll(&self, cluster: &str, kind: Kind) -> Result<Vec<Observed>, ProviderError> {
        match kind {
            Kind::Network => Ok(self
                .listed("network", cluster)
                .await?
                .into_iter()
                .map(|l| Observed {
                    kind,
                    name: l.name,
                    id: l.id,
                    health: Health::Ready,
                    kept: false,
                    called: None,
                })
                .collect()),
            Kind::Volume => {
                // A node's own /var/lib/docker volume goes with its container; listed here only
                // when orphaned, so `down` removes it.
                let containers: Vec<String> = self
                    .containers(cluster)
                    .await?
                    .into_iter()
                    .map(|c| c.names)
                    .collect();
                Ok(self
                    .listed("volume", cluster)
                    .await?
                    .into_iter()
                    .filter(|l| !containers.iter().any(|c| l.name == format!("{c}-docker")))
                    .map(|l| Observed {
                        kind,
                        id: l.name.clone(),
                        name: l.name,
                        health: Health::Ready,
                        kept: false,
                        called: None,
                    })
                    .collect())
            }
            Kind::Server => Ok(self.screen.observed(
                cluster,
                self.containers(cluster)
                    .await?
                    .into_iter()
                    .map(|c| async move {
                        let health = match c.state.as_str() {
                            "running" => Health::Ready,
                            "created" | "restarting" => Health::Pending,
                            "exited" if stopped_by_us(&c.id).await => Health::Stopped,
                            other => Health::Failed(format!("container {other}: {}", c.status)),
                        };
                        Observed {
                            kind,
                            name: c.names,
                            id: c.id,
                            health,
                            kept: false,
                            called: None,
                        }
                    })
                    .collect::<futures::stream::FuturesOrdered<_>>()
                    .collect::<Vec<_>>()
                    .await,
            )),
            _ => Ok(vec![]),
        }
    }

    pub async fn create(
        &self,
        cluster: &str,
        d: &Desired,
        _ids: &BTreeMap<String, String>,
    ) -> Result<String, ProviderError> {
        let label = format!("{LABEL}={cluster}");
        match &d.spec {
            Spec::Network => {
                let out = docker(&["network", "create", "--label", &label, &d.name]).await?;
                Ok(out.trim().to_string())
            }
            Spec::Volume { .. } => {
                docker(&["volume", "create", "--label", &label, &d.name]).await?;
                Ok(d.name.clone())
            }
            Spec::Server { role, .. } => self.create_node(cluster, d, *role).await,
            other => Err(ProviderError::Cloud(format!(
                "the local provider has no {:?}",
                other.kind()
            ))),
        }
    }

    pub async fn delete(&self, old: &Observed) -> Result<(), ProviderError> {
        let result = match old.kind {
            Kind::Network => docker(&["network", "rm", &old.id]).await.map(drop),
            Kind::Volume => docker(&["volume", "rm", "-f", &old.id]).await.map(drop),
            Kind::Server => {
                let rm = docker(&["rm", "-f", "-v", &old.id]).await.map(drop);
                let volume = format!("{}-docker", old.name);
                match docker(&["volume", "rm", "-f", &volume]).await {
                    Err(e) if !is_missing(&e) => return Err(e),
                    _ => rm,
                }
            }
            _ => Ok(()),
        };
        match result {
            Err(e) if is_missing(&e) => Ok(()),
            other => other,
        }
    }
}

impl Provider for LocalProvider {
    fn blueprint(&self) -> &'static dyn Blueprint {
        &LocalBlueprint
    }

    fn set_public_key(&mut self, key: String) {
        LocalProvider::set_public_key(self, key)
    }

    fn observe<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
        Box::pin(LocalProvider::observe(self, cluster))
    }

    fn poll<'a>(
        &'a self,
        cluster: &'a str,
        kind: Kind,
    ) -> BoxFuture<'a, Result<Vec<Observed>, ProviderError>> {
        Box::pin(LocalProvider::poll(self, cluster, kind))
    }

    fn create<'a>(
        &'a self,
        cluster: &'a str,
        desired: &'a Desired,
        ids: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(LocalProvider::create(self, cluster, desired, ids))
    }

    fn delete<'a>(&'a self, old: &'a Observed) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(LocalProvider::delete(self, old))
    }

    fn nodes<'a>(&'a self, cluster: &'a str) -> BoxFuture<'a, Result<Vec<Node>, ProviderError>> {
        Box::pin(LocalProvider::nodes(self, cluster))
    }

    fn reboot<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(LocalProvider::reboot(self, cluster, nodes))
    }

    fn console<'a>(
        &'a self,
        cluster: &'a str,
        node: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(LocalProvider::console(self, cluster, node))
    }

    fn stop<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<Freed, ProviderError>> {
        Box::pin(LocalProvider::stop(self, cluster, nodes))
    }

    fn start<'a>(
        &'a self,
        cluster: &'a str,
        nodes: &'a [String],
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(LocalProvider::start(self, cluster, nodes))
    }

    fn jupyter_endpoint<'a>(
        &'a self,
        cluster: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProviderError>> {
        Box::pin(LocalProvider::jupyter_endpoint(self, cluster))
    }

    /// The profile's `image` of each kind of server names a bake on this machine.
    fn resolve<'a>(&'a mut self, p: &'a Profile) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let mut images = Vec::new();
            if let Some(i) = p.master.image.as_deref() {
                images.push(("master.image", i));
            }
            if let Some(i) = p.workers.image.as_deref() {
                images.push(("workers.image", i));
            }
            let found = bake::check_profile_bakes(&images).await?;
            let of =
                |name: Option<&str>| name.and_then(|n| found.iter().find(|b| b.name == n).cloned());
            self.bakes = [
                ("master", of(p.master.image.as_deref())),
                ("workers", of(p.worker_image())),
            ]
            .into_iter()
            .filter_map(|(role, b)| Some((role, b?)))
            .collect();
            Ok(())
        })
    }

    fn disks(&self, _p: &Profile) -> Vec<String> {
        self.bakes
            .iter()
            .map(|(role, b)| bake::bake_line(role, b))
            .collect()
    }

    fn bakes(&self) -> bool {
        true
    }

    fn bake_source<'a>(
        &'a self,
        image: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, ProviderError>> {
        Box::pin(bake::source(image))
    }

    fn find_bake<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::bake::BakedImage>, ProviderError>> {
        Box::pin(bake::find_bake(key))
    }

    fn bake<'a>(
        &'a self,
        _cluster: &'a str,
        node: &'a str,
        name: &'a str,
        properties: &'a BTreeMap<String, String>,
    ) -> BoxFuture<'a, Result<crate::bake::BakedImage, ProviderError>> {
        Box::pin(bake::bake(node, name, properties))
    }

    fn list_bakes(&self) -> BoxFuture<'_, Result<Vec<crate::bake::BakedImage>, ProviderError>> {
        Box::pin(bake::list_bakes())
    }

    fn bake_name_taken<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::bake::TakenBy>, ProviderError>> {
        Box::pin(bake::bake_name_taken(name))
    }

    fn servers_booted_from<'a>(
        &'a self,
        image_ids: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, ProviderError>> {
        Box::pin(bake::servers_booted_from(image_ids))
    }

    fn delete_bake<'a>(
        &'a self,
        bake: &'a crate::bake::BakedImage,
    ) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(bake::delete_bake(&bake.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_share_from_the_environment() {
        use std::os::unix::ffi::OsStringExt;
        assert_eq!(cpus_from(None, 2).unwrap(), None);
        assert_eq!(cpus_from(Some("".into()), 2).unwrap(), None);
        assert_eq!(
            cpus_from(Some("0.25".into()), 2)
                .unwrap()
                .map(|c| c.to_string()),
            Some("0.25".into())
        );
        let e = cpus_from(Some(OsString::from_vec(b"0.2\xff".to_vec())), 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "HVD_CLUSTER_LOCAL_CPUS: the value is not valid UTF-8"
        );
        let e = cpus_from(Some("0.25; rm -rf /".into()), 2).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("HVD_CLUSTER_LOCAL_CPUS: `0.25; rm -rf /` is not a CPU share"),
            "{e}"
        );
        let e = cpus_from(Some("3".into()), 2).unwrap_err();
        assert!(e.to_string().contains("this machine has 2 CPU(s)"), "{e}");
    }
}
