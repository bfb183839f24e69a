//! Bootstrap over SSH, one code path for every provider: once a node answers SSH
//! ([`session`]), the steps of [`steps::STEPS`] run in order, each a check and an apply (or
//! one script, or a built-in action such as the image transfer in [`image`]), on all nodes in
//! parallel with a progress line per node: cloud-init, Docker, the GPU runtime (when the node
//! has GPUs), /shared, the Horovod image, the cluster's keys and files, the Horovod container,
//! then every container's sshd. A second run applies nothing.

pub mod archive;
pub mod delivery;
pub mod fanout;
pub mod image;
pub mod layers;
pub mod mirror;
pub mod reboot;
pub mod remote_build;
pub mod room;
pub mod session;
pub mod steps;
pub mod upload;

use std::time::Duration;

use futures::future::try_join_all;

use crate::profile::{ImageSource, Profile};
use crate::progress::Progress;
use crate::render::{self, HostSlots, RenderError};
use crate::ssh::{self, SshError};
use crate::state::{ClusterDir, StateError};
use crate::wait::{wait_until, Probe, WaitError};

pub use archive::{drop_archives_command, ImageFile, ARCHIVES};
pub use image::{local_image_id, worker_fetch_command, Relay, Transfer, IMAGE_PORT};
use reboot::NodePass;
pub use reboot::RebootRequest;
pub use session::{connect_all, NodeSession, Vouch};
pub use steps::{shared_values, storage_name, SharedInputs};
use steps::{Does, Facts, Runs, Step, STEPS};
pub use upload::master_receive_command;

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
    /// Nodes whose step cannot finish before they reboot (the GPU driver loads only after
    /// one); every node that asked in the same pass. `converge` reboots them and runs again.
    #[error("{}", nodes.iter().map(|r| format!("{r}: the node must reboot first")).collect::<Vec<_>>().join("\n"))]
    RebootRequired { nodes: Vec<RebootRequest> },
    /// Asked for a reboot again after one: see [`reboot::to_reboot`].
    #[error("{}", reboot::did_not_help(.nodes, .rebooted))]
    RebootDidNotHelp {
        nodes: Vec<RebootRequest>,
        rebooted: Vec<String>,
    },
    #[error("{node}: not back from its reboot after {secs}s: {last}")]
    NotBack {
        node: String,
        secs: u64,
        last: String,
    },
    /// Nodes without room for the image, a line each (see [`room`]); nothing was sent.
    #[error("not enough room for the image; nothing was sent:\n{}", .0.join("\n"))]
    NoRoom(Vec<String>),
    /// A node that never answered SSH, with what its console showed (read through the cloud):
    /// whether it booted at all, and how far.
    #[error("{error}\n{console}")]
    NoSsh { error: SshError, console: String },
    #[error("{0}")]
    Other(String),
}

/// `node`'s own progress bar: `bars` go with `sessions`, one each, the master's first.
pub(crate) fn bar_of<'a>(
    sessions: &[NodeSession],
    bars: &'a [indicatif::ProgressBar],
    node: &NodeSession,
) -> &'a indicatif::ProgressBar {
    let i = sessions
        .iter()
        .position(|s| s.node.name == node.node.name)
        .unwrap_or(0);
    &bars[i.min(bars.len().saturating_sub(1))]
}

/// Where files live on every node (mounted read-only into the Horovod container).
pub const NODE_DIR: &str = "/etc/hvd-cluster";

/// Where the runtime for a user's image is made on every node (runtime.apply.sh), and mounted
/// read-only into its container at the same path; its parent keeps the containers' host key
/// and, on the master, Jupyter Lab installed for an image without one.
pub const RUNTIME_BASE: &str = "/opt/hvd-cluster";
pub const RUNTIME_DIR: &str = "/opt/hvd-cluster/runtime";

/// What the steps need beyond the profile.
pub struct Inputs<'a> {
    pub profile: &'a Profile,
    pub dir: &'a ClusterDir,
    pub jupyter_token: &'a str,
    /// The subnet allowed to mount /shared, e.g. `10.42.0.0/24`.
    pub clients_cidr: String,
    /// `storage.kind = "manila"`: the share's NFS export location (`host:/path`).
    pub share_export: Option<String>,
    /// Children per node in the image's fan-out tree ([`fanout`]).
    pub fanout: usize,
    /// `container.source = "pull"`: the registry's credentials and CA, for the master's pull.
    pub pull_access: Option<crate::registry::PullAccess>,
    /// A public Jupyter's certificate and key (its HTTPS); `None`: the tunnel's plain HTTP.
    pub jupyter_tls: Option<crate::jupyter_tls::JupyterTls>,
}

/// The Horovod hosts: every node, master first, with its slots.
pub fn host_slots(sessions: &[NodeSession]) -> Vec<HostSlots> {
    sessions.iter().map(|s| s.host.clone()).collect()
}

/// Brings every node to the profile's state by running [`STEPS`] in order. Returns the
/// number of steps that changed something.
pub async fn bootstrap(
    inputs: &Inputs<'_>,
    sessions: &[NodeSession],
    progress: &Progress,
) -> Result<usize, BootstrapError> {
    let facts = Facts::gather(inputs, sessions).await?;
    let bars: Vec<indicatif::ProgressBar> = sessions
        .iter()
        .map(|s| progress.spinner(&s.node.name))
        .collect();
    // The image's first leg (this machine -> the master's disk) needs no Docker: it travels
    // while the nodes install it, and the image step picks it up.
    let (uploaded_tx, uploaded_rx) = tokio::sync::oneshot::channel();
    let upload = async move {
        let uploaded = upload::upload_early(inputs, sessions, progress, true).await?;
        let _ = uploaded_tx.send(uploaded);
        Ok::<(), BootstrapError>(())
    };
    let steps = run_steps(&facts, sessions, &bars, progress, uploaded_rx);
    let ((), changed) = futures::future::try_join(upload, steps).await?;
    Ok(changed)
}

/// Every step of [`STEPS`] in order; the image step waits for the early upload's result.
async fn run_steps(
    facts: &Facts<'_>,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
    uploaded: tokio::sync::oneshot::Receiver<Option<upload::Uploaded>>,
) -> Result<usize, BootstrapError> {
    let p = facts.inputs.profile;
    let mut uploaded = Some(uploaded);
    // A node's line goes once its last per-node step is done.
    let last_on_nodes = STEPS
        .iter()
        .rposition(|s| matches!(s.runs, Runs::EveryNode));
    let mut changed = 0;
    let mut at = 0;
    while at < STEPS.len() {
        match STEPS[at].runs {
            Runs::EveryNode => {
                let end = STEPS[at..]
                    .iter()
                    .position(|s| !matches!(s.runs, Runs::EveryNode))
                    .map_or(STEPS.len(), |n| at + n);
                let chain = &STEPS[at..end];
                let finish = last_on_nodes.is_some_and(|last| last < end);
                let passes = try_join_all(sessions.iter().zip(bars).map(|(s, bar)| async move {
                    let mut n = 0;
                    for step in chain.iter().filter(|step| (step.when)(p, &s.node)) {
                        match run_on(facts, step, s, bar, progress).await {
                            Ok(c) => n += c as usize,
                            // This node stops here; the others finish their chain, so one
                            // reboot round serves every node that asks in this pass.
                            Err(BootstrapError::RebootRequired { nodes }) => {
                                bar.finish_and_clear();
                                return Ok(NodePass::Reboot(nodes));
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    if finish {
                        bar.finish_and_clear();
                    }
                    Ok::<NodePass, BootstrapError>(NodePass::Done(n))
                }))
                .await?;
                changed += reboot::tally(passes)?;
                at = end;
            }
            Runs::MasterFirst { together } => {
                let step = &STEPS[at];
                let mut first = 0;
                if !together(p) {
                    if (step.when)(p, &facts.master.node) {
                        changed +=
                            run_on(facts, step, facts.master, &bars[0], progress).await? as usize;
                    }
                    first = 1;
                }
                let results = try_join_all(
                    sessions
                        .iter()
                        .zip(bars)
                        .skip(first)
                        .filter(|(s, _)| (step.when)(p, &s.node))
                        .map(|(s, bar)| run_on(facts, step, s, bar, progress)),
                )
                .await?;
                changed += results.into_iter().filter(|c| *c).count();
                at += 1;
            }
            Runs::Cluster => {
                let step = &STEPS[at];
                if (step.when)(p, &facts.master.node) {
                    changed +=
                        run_once(facts, step, sessions, bars, progress, &mut uploaded).await?;
                }
                at += 1;
            }
        }
    }
    Ok(changed)
}

/// Runs a per-node step on one node; whether it changed something.
async fn run_on(
    facts: &Facts<'_>,
    step: &Step,
    s: &NodeSession,
    bar: &indicatif::ProgressBar,
    progress: &Progress,
) -> Result<bool, BootstrapError> {
    let r = &facts.renderer;
    match step.does {
        Does::Run(script) => {
            bar.set_message(format!("waiting for {}", step.name));
            let values = (step.values)(facts, s)?;
            s.ssh
                .sudo(&r.render(script.name, &values)?)
                .await
                .map_err(|e| BootstrapError::Step {
                    node: s.node.name.clone(),
                    step: step.name.into(),
                    detail: e.to_string(),
                })?;
            Ok(false)
        }
        Does::CheckApply { check, apply, lib } => {
            let values = (step.values)(facts, s)?;
            let (check, apply) = if lib {
                (
                    r.script(check.name, &values)?,
                    r.script(apply.name, &values)?,
                )
            } else {
                (
                    r.render(check.name, &values)?,
                    r.render(apply.name, &values)?,
                )
            };
            check_apply(s, step.name, &check, &apply, bar, progress).await
        }
        Does::Files => {
            bar.set_message(step.name);
            steps::write_files(facts, s).await?;
            Ok(false)
        }
        Does::Image | Does::CollectiveSsh => Err(BootstrapError::Other(format!(
            "step `{}` runs once for the cluster, not per node",
            step.name
        ))),
    }
}

/// Runs a whole-cluster step; how many changes it made.
async fn run_once(
    facts: &Facts<'_>,
    step: &Step,
    sessions: &[NodeSession],
    bars: &[indicatif::ProgressBar],
    progress: &Progress,
    uploaded: &mut Option<tokio::sync::oneshot::Receiver<Option<upload::Uploaded>>>,
) -> Result<usize, BootstrapError> {
    match step.does {
        Does::Image => {
            let early = match uploaded.take() {
                Some(rx) => rx.await.ok().flatten(),
                None => None,
            };
            let p = facts.inputs.profile;
            if p.container.source == ImageSource::BuildRemote {
                return remote_build::build_on_master(
                    &facts.renderer,
                    &p.container.image,
                    facts.inputs.fanout,
                    sessions,
                    bars,
                    progress,
                )
                .await;
            }
            image::say_baked(&p.container.image, sessions, progress).await?;
            delivery::ensure_image(facts.inputs, sessions, bars, progress, early).await
        }
        Does::CollectiveSsh => {
            let port = facts.inputs.profile.container.ssh_port;
            wait_collective_ssh(sessions, port, Duration::from_secs(90)).await?;
            Ok(0)
        }
        Does::Run(_) | Does::CheckApply { .. } | Does::Files => Err(BootstrapError::Other(
            format!("step `{}` runs on each node, not once", step.name),
        )),
    }
}

/// Runs `check`; when it fails runs `apply`, then `check` again, which must pass.
async fn check_apply(
    s: &NodeSession,
    name: &str,
    check: &str,
    apply: &str,
    bar: &indicatif::ProgressBar,
    progress: &Progress,
) -> Result<bool, BootstrapError> {
    bar.set_message(format!("{name}: checking"));
    if s.ssh.sudo(check).await.is_ok() {
        return Ok(false);
    }
    bar.set_message(format!("{name}: applying"));
    let started = std::time::Instant::now();
    let said =
        s.ssh
            .sudo(apply)
            .await
            .map_err(|e| match reboot::request(&s.node.name, name, &e) {
                Some(asked) => BootstrapError::RebootRequired { nodes: vec![asked] },
                None => BootstrapError::Step {
                    node: s.node.name.clone(),
                    step: name.into(),
                    detail: e.to_string(),
                },
            })?;
    // What an apply script says the user should know (`hvd-note: ...` on its stdout).
    for note in said.lines().filter_map(|l| l.strip_prefix("hvd-note: ")) {
        progress.line(format!(
            "{}: {name}: {}",
            s.node.name,
            crate::input::shown_message(note, 300)
        ));
    }
    s.ssh.sudo(check).await.map_err(|e| BootstrapError::Step {
        node: s.node.name.clone(),
        step: name.into(),
        detail: format!("applied, but the check still fails: {e}"),
    })?;
    progress.line(format!(
        "{}: {name} applied in {:.1}s",
        s.node.name,
        started.elapsed().as_secs_f64()
    ));
    Ok(true)
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

/// Waits until the master's container reaches sshd in every container, all within `deadline`.
async fn wait_collective_ssh(
    sessions: &[NodeSession],
    port: u16,
    deadline: Duration,
) -> Result<(), BootstrapError> {
    let master = &sessions[0];
    let started = std::time::Instant::now();
    for s in sessions {
        let ip = s.node.private_ip.clone().unwrap_or_default();
        let probe = format!(
            "docker exec hvd ssh -p {port} -o ConnectTimeout=3 -o BatchMode=yes {} true",
            ssh::shell_quote(&ip)
        );
        let left = deadline.saturating_sub(started.elapsed());
        let probe = &probe;
        wait_until(left, Duration::from_secs(1), move || async move {
            match master.ssh.sudo(probe).await {
                Ok(_) => Probe::Ready(()),
                Err(e) => Probe::<(), ()>::Waiting(e.to_string()),
            }
        })
        .await
        .map_err(|e| {
            let last = match e {
                WaitError::TimedOut { last, .. } => last,
                WaitError::Failed(()) => String::new(),
            };
            BootstrapError::Step {
                node: s.node.name.clone(),
                step: "collective ssh".into(),
                detail: format!("the master's container cannot reach sshd on {ip}:{port}: {last}"),
            }
        })?;
    }
    Ok(())
}
