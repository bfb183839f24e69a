//! What many commands share about a cluster that exists: its folder and nodes
//! ([`existing`], [`target`] of a [`Target`]), how its nodes are reached ([`Reach`]: the one place the
//! ssh_config is written), and an opened cluster ([`Opened`]: a session to every node, the
//! Jupyter token, the subnet, the Jupyter URL).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bootstrap::{self, BootstrapError, NodeSession, Vouch};
use crate::check;
use crate::context::Context;
use crate::error::Error;
use crate::input::{self, ClusterName, CLUSTER_NAME_RULE};
use crate::jupyter_tls::{self, JupyterTls};
use crate::plan::Role;
use crate::profile::{self, JupyterAccess, Profile};
use crate::provider::{self, Place, Provider};
use crate::ssh::{self, Host};
use crate::state::{self, ClusterDir, Node};

/// The cluster folder's paths go into ssh_config: a state folder ssh_config cannot carry is
/// bad input (exit 2), refused before anything is created.
pub fn check_state_dir_for_ssh(ctx: &Context, cluster: &ClusterName) -> Result<(), String> {
    ssh::config_path_word(&ctx.state_root.join(cluster.as_str()))
        .map(drop)
        .map_err(|e| format!("--state-dir: {e}"))
}

/// A cluster the last `up` made: its profile, folder, provider and nodes (with slots).
pub struct Existing {
    pub profile: Profile,
    pub dir: ClusterDir,
    pub provider: Box<dyn Provider>,
    pub nodes: Vec<Node>,
}

/// Loads the profile and finds the nodes of the cluster it names.
pub async fn existing(ctx: &Context, file: &Path) -> Result<Existing, Error> {
    existing_or(ctx, file, Error::Runtime).await
}

/// As [`existing`], with a stopped cluster refused as `stopped` says (a command for which a
/// running cluster is part of its input refuses it as bad input).
pub async fn existing_or(
    ctx: &Context,
    file: &Path,
    stopped_error: fn(String) -> Error,
) -> Result<Existing, Error> {
    let p = profile::load(file)?;
    check_state_dir_for_ssh(ctx, &p.name).map_err(Error::Usage)?;
    // Reaching the nodes needs the key kept in the folder: without one, say so, make none.
    let dir = ClusterDir::look(&ctx.state_root, &p.name)?.required()?;
    let provider = provider::connect(&Place::of(&p)).await?;
    let nodes = nodes_with_slots(&p, provider.nodes(&p.name).await?);
    if nodes.is_empty() {
        return Err(Error::Runtime(format!(
            "cluster `{}` has no nodes; run `hvd-cluster up {}` first",
            p.name,
            input::shown(&file.to_string_lossy())
        )));
    }
    // A stopped cluster answers no SSH: say so now rather than after the connect timeouts.
    let servers = provider.poll(&p.name, crate::plan::Kind::Server).await?;
    let stopped = servers.iter().filter(|o| o.health.is_stopped()).count();
    if stopped > 0 {
        return Err(stopped_error(format!(
            "cluster `{}` is stopped ({stopped} of {} server(s)); `hvd-cluster start {}` brings \
             it back",
            p.name,
            servers.len(),
            input::shown(&file.to_string_lossy())
        )));
    }
    Ok(Existing {
        profile: p,
        dir,
        provider,
        nodes,
    })
}

impl Existing {
    pub fn reach(&self) -> Reach<'_> {
        Reach {
            dir: &self.dir,
            user: &self.profile.ssh_user,
            nodes: &self.nodes,
        }
    }

    /// A session to every node.
    pub async fn open(&self, ctx: &Context) -> Result<Opened, Error> {
        open(ctx, &self.profile, &self.dir, &self.nodes, None).await
    }
}

/// What `status` and `down` act on.
pub enum Target {
    Profile(PathBuf),
    Cluster { name: String, cloud: Option<String> },
}

/// Resolves a `status`/`down` target to a cluster name, its folder and a connected provider.
pub async fn target(
    ctx: &Context,
    target: Target,
) -> Result<(ClusterName, ClusterDir, Box<dyn Provider>), Error> {
    let (name, place) = match target {
        Target::Profile(file) => {
            let p = profile::load(&file)?;
            (p.name.clone(), Place::of(&p))
        }
        Target::Cluster { name, cloud } => {
            if name.is_empty() {
                return Err(Error::Usage("give a profile FILE or --cluster NAME".into()));
            }
            // Before any file or cloud call: the name becomes a folder, a tag and URL parts.
            let name = ClusterName::parse(&name).map_err(|e| {
                Error::Usage(format!("--cluster: {e}\n  help: {CLUSTER_NAME_RULE}"))
            })?;
            if let Some(cloud) = &cloud {
                input::check_cloud_name(cloud)
                    .map_err(|e| Error::Usage(format!("--cloud: {e}")))?;
            }
            let saved = ClusterDir::look(&ctx.state_root, &name)?.load()?;
            let place = Place::of_saved(&saved, cloud);
            (name, place)
        }
    };
    // `status` and `down` only look: a cluster with no folder here (made elsewhere, or
    // already gone) gets none from them.
    let dir = ClusterDir::look(&ctx.state_root, &name)?;
    let provider = provider::connect(&place).await?;
    Ok((name, dir, provider))
}

/// Slots per node: stated in the profile, else one per GPU, else one.
pub fn nodes_with_slots(p: &Profile, mut nodes: Vec<Node>) -> Vec<Node> {
    for n in &mut nodes {
        let (slots, gpus) = if n.role == Role::Master {
            (p.master.slots, None)
        } else {
            (p.workers.slots, p.workers.gpus)
        };
        if let Some(g) = gpus {
            n.gpus = g;
        }
        n.slots = slots.unwrap_or(n.gpus.max(1));
    }
    nodes
}

/// How a cluster's nodes are reached: through the ssh_config in its folder, as its login
/// user (the master by its public address, workers through the master).
pub struct Reach<'a> {
    pub dir: &'a ClusterDir,
    pub user: &'a str,
    pub nodes: &'a [Node],
}

/// An SSH connection to the master from what the cluster's folder keeps (its login user and
/// key), with no profile at hand (`status --live`, `stop`): `None` when the folder keeps
/// neither or no node is the master; the error of a failed connect, as a line.
pub async fn connect_master_from_folder(
    dir: &ClusterDir,
    nodes: &[Node],
) -> Option<Result<ssh::Ssh, String>> {
    let user = dir.load().ok()?.ssh_user?;
    if !dir.private_key().exists() {
        return None;
    }
    let master = nodes.iter().find(|n| n.role == Role::Master)?;
    let reach = Reach {
        dir,
        user: &user,
        nodes,
    };
    let connected = async {
        let config = reach.ssh_config().map_err(|e| e.to_string())?;
        ssh::Ssh::connect(&config, &master.name).await.map_err(|e| {
            match (&e, reach.renewing(&master.name)) {
                (ssh::SshError::HostKeyChanged { node, offered, .. }, Some(how)) => {
                    unfinished_renewal(node, offered, how)
                }
                _ => e.to_string(),
            }
        })
    };
    Some(connected.await)
}

impl Reach<'_> {
    /// Writes the cluster's ssh_config (master by its public address when it has one, workers
    /// through the master) and returns its path.
    pub fn ssh_config(&self) -> Result<PathBuf, BootstrapError> {
        let master = self
            .nodes
            .iter()
            .find(|n| n.role == Role::Master)
            .ok_or_else(|| BootstrapError::Other("the cluster has no master".into()))?;
        let hosts: Vec<Host> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let is_master = n.role == Role::Master;
                let address = if is_master {
                    n.public_ip.clone().or_else(|| n.private_ip.clone())
                } else {
                    n.private_ip.clone()
                }?;
                Some(Host {
                    alias: n.name.clone(),
                    address,
                    user: self.user.to_string(),
                    jump: (!is_master).then(|| master.name.clone()),
                })
            })
            .collect();
        let path = ssh::config_path(&self.dir.path);
        state::write_atomic(
            &path,
            ssh::render_config(&self.dir.path, &hosts)?.as_bytes(),
            0o600,
        )?;
        Ok(path)
    }

    /// Sessions to `which` of the nodes (master first), each waited for up to `deadline`. A
    /// changed host key stops it, unless `vouch` may vouch for the new one.
    pub async fn connect(
        &self,
        ctx: &Context,
        which: &[Node],
        deadline: Duration,
        vouch: Option<&Vouch<'_>>,
    ) -> Result<Vec<NodeSession>, BootstrapError> {
        let config = self.ssh_config()?;
        let connected =
            bootstrap::connect_all(&config, which, &ctx.progress, deadline, vouch).await;
        if let Err(BootstrapError::Ssh(ssh::SshError::HostKeyChanged { node, offered, .. })) =
            &connected
        {
            if let (None, Some(how)) = (vouch, self.renewing(node)) {
                return Err(BootstrapError::Other(unfinished_renewal(
                    node, offered, how,
                )));
            }
        }
        connected
    }

    /// What an unfinished command did to `node` that may have changed its host key.
    pub fn renewing(&self, node: &str) -> Option<state::Renewal> {
        self.dir.load().ok()?.renewing.get(node).copied()
    }
}

/// A connected cluster: an SSH session to every node, master first.
pub struct Opened {
    pub sessions: Vec<NodeSession>,
    pub token: String,
    pub clients_cidr: String,
    /// `storage.kind = "manila"`: the share's export location, mounted on every node.
    pub share_export: Option<String>,
    /// Children per node in the image's fan-out tree.
    pub fanout: usize,
    /// A public Jupyter's certificate and key (HTTPS); `None` for the tunnel.
    pub jupyter_tls: Option<JupyterTls>,
    /// `container.source = "pull"`: what the master's pull needs (read by `up`).
    pub pull_access: Option<crate::registry::PullAccess>,
}

/// Generates the Jupyter token once; it lives in the cluster folder (0600), never in output
/// other than the URL printed for the user.
fn jupyter_token(dir: &ClusterDir) -> Result<String, Error> {
    let path = dir.path.join("jupyter_token");
    if let Ok(t) = std::fs::read_to_string(&path) {
        if !t.trim().is_empty() {
            return Ok(t.trim().to_string());
        }
    }
    let token = hex::encode(rand::random::<[u8; 24]>());
    state::write_atomic(&path, token.as_bytes(), 0o600)?;
    Ok(token)
}

/// Connects to every node (waiting up to 10 minutes for SSH) and reads the master's subnet.
/// `vouch`: the nodes whose changed host key their console may vouch for (see
/// [`bootstrap::Vouch`]).
pub async fn open(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    nodes: &[Node],
    vouch: Option<&Vouch<'_>>,
) -> Result<Opened, Error> {
    let reach = Reach {
        dir,
        user: &p.ssh_user,
        nodes,
    };
    let sessions = reach.connect(ctx, nodes, ctx.ssh_wait, vouch).await?;
    let master = &sessions[0];
    let cidr = master
        .ssh
        .run(&format!(
            "ip -o -4 addr show dev {} | awk '{{print $4}}' | head -n1",
            ssh::shell_quote(&master.iface)
        ))
        .await
        .map_err(BootstrapError::from)?;
    let clients_cidr = network_of(cidr.trim()).unwrap_or_else(|| p.subnet_cidr().to_string());
    // The cloud's replies are screened where they enter: a node's addresses are IP addresses.
    let public_ip = master
        .node
        .public_ip
        .as_deref()
        .and_then(|a| a.parse().ok());
    let jupyter_tls = jupyter_tls::for_profile(p, dir, public_ip)?;
    Ok(Opened {
        sessions,
        jupyter_tls,
        token: jupyter_token(dir)?,
        clients_cidr,
        share_export: None,
        fanout: ctx.fanout,
        pull_access: None,
    })
}

/// `172.18.0.5/16` → `172.18.0.0/16`.
fn network_of(addr: &str) -> Option<String> {
    let (ip, len) = addr.split_once('/')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(format!(
        "{}/{len}",
        std::net::Ipv4Addr::from(u32::from(ip) & mask)
    ))
}

pub struct JupyterUrl {
    /// What this process fetches for the check.
    pub reachable: String,
    /// What the user is told.
    pub shown: String,
    /// HTTPS: the SHA-256 fingerprint of Jupyter's certificate, the only one accepted.
    pub fingerprint: Option<String>,
}

impl JupyterUrl {
    /// What the check fetches, and the certificate it accepts there.
    pub fn at(&self) -> check::JupyterAt<'_> {
        check::JupyterAt {
            url: &self.reachable,
            fingerprint: self.fingerprint.as_deref(),
        }
    }
}

impl Opened {
    /// The master's session (`open` connects it first, and fails without one).
    pub fn master(&self) -> &NodeSession {
        &self.sessions[0]
    }

    pub fn inputs<'a>(&'a self, p: &'a Profile, dir: &'a ClusterDir) -> bootstrap::Inputs<'a> {
        bootstrap::Inputs {
            profile: p,
            dir,
            jupyter_token: &self.token,
            clients_cidr: self.clients_cidr.clone(),
            share_export: self.share_export.clone(),
            fanout: self.fanout,
            pull_access: self.pull_access.clone(),
            jupyter_tls: self.jupyter_tls.clone(),
        }
    }

    /// The Jupyter URL: the provider's published port (local), the floating IP when the
    /// profile opens 8888, else an SSH tunnel through the master (`hvd-cluster jupyter`
    /// keeps one open).
    pub async fn jupyter_url(
        &self,
        p: &Profile,
        provider: &dyn Provider,
    ) -> Result<JupyterUrl, Error> {
        let token = &self.token;
        if let Some(endpoint) = provider.jupyter_endpoint(&p.name).await? {
            let url = format!("http://{endpoint}/lab?token={token}");
            return Ok(JupyterUrl {
                reachable: url.clone(),
                shown: url,
                fingerprint: None,
            });
        }
        let master = self.master();
        if p.access.jupyter == JupyterAccess::Public {
            if let (Some(ip), Some(tls)) = (&master.node.public_ip, &self.jupyter_tls) {
                let host = match ip.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
                    _ => ip.clone(),
                };
                let url = format!("https://{host}:8888/lab?token={token}");
                return Ok(JupyterUrl {
                    reachable: url.clone(),
                    shown: url,
                    fingerprint: Some(tls.fingerprint.clone()),
                });
            }
        }
        let port = tunnel_to(&master.ssh, 8888, "Jupyter").await?;
        Ok(JupyterUrl {
            fingerprint: None,
            reachable: format!("http://127.0.0.1:{port}/lab?token={token}"),
            shown: format!(
                "run `hvd-cluster jupyter {}` for a tunnel, then open the URL it prints",
                p.name
            ),
        })
    }
}

/// An SSH tunnel from a free port of this machine's loopback to `remote_port` on the node's
/// loopback, over the node's kept connection (open while it is); the local port. `what` names
/// the service in the error.
pub async fn tunnel_to(ssh: &ssh::Ssh, remote_port: u16, what: &str) -> Result<u16, Error> {
    let port = free_port()?;
    let loopback = std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    ssh.session()
        .request_port_forward(
            openssh::ForwardType::Local,
            (loopback, port),
            (loopback, remote_port),
        )
        .await
        .map_err(|e| Error::Runtime(format!("cannot open an SSH tunnel to {what}: {e}")))?;
    Ok(port)
}

/// A port free on this machine's loopback now, for a tunnel's local end.
fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Runtime(format!("no free local port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Runtime(format!("no free local port: {e}")))
}

/// A changed host key the tool knows the reason of: a command renewed the server and stopped
/// before its console vouched for the new key. Said instead of the warning of someone between
/// the user and the node, with the command that finishes the job.
pub fn unfinished_renewal(node: &str, offered: &str, how: state::Renewal) -> String {
    format!(
        "{}: its SSH host key changed to {}, as it may: the server was {} before its console \
         vouched for the new key. Run that command again (`hvd-cluster start` or `up` with the \
         cluster's profile finishes any of them): it reads the key from the console through \
         the cloud and pins it; no `ssh-keygen` by hand",
        input::shown(node),
        input::shown(offered),
        how.by_an_unfinished_command()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line names the node and the key, escaped, says what was done and which command
    /// finishes it, and never sends the user to ssh-keygen or warns of an attacker.
    #[test]
    fn an_unfinished_renewal_names_the_command_not_an_attacker() {
        let line = unfinished_renewal(
            "c-worker-1\n\u{1b}[2J",
            "SHA256:abc",
            state::Renewal::StartedAgain,
        );
        assert!(
            line.starts_with("c-worker-1\\n\\u{1b}[2J: its SSH host key changed to SHA256:abc"),
            "{line}"
        );
        assert!(
            line.contains("started again by a command that did not finish"),
            "{line}"
        );
        assert!(line.contains("`hvd-cluster start`"), "{line}");
        assert!(!line.contains('\u{1b}') && !line.contains("someone may be between"));
        let made = unfinished_renewal("c-master", "SHA256:x", state::Renewal::MadeAnew);
        assert!(
            made.contains("made anew by a command that did not finish"),
            "{made}"
        );
    }
}
