//! The commands: each reads top to bottom as the flow profile → plan → apply → report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use std::time::Duration;

use crate::apply::{Applier, ApplyError, Provider, ProviderError};
use crate::bootstrap::{self, BootstrapError};
use crate::check::{self, CheckError};
use crate::images::{self, ImageError};
use crate::input::{self, ClusterName, CLUSTER_NAME_RULE};
use crate::plan::{self, Health, Plan, QuotaDelta, Shortfall};
use crate::profile::{self, JupyterAccess, Profile, ProfileError, ProviderKind};
use crate::progress::Progress;
use crate::provider::local::LocalProvider;
use crate::provider::openstack::OpenStackProvider;
use crate::provider::AnyProvider;
use crate::render::HostSlots;
use crate::ssh;
use crate::state::{self, ClusterDir, ClusterState, StateError};

/// Everything a command can fail with, each with one readable message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Provider(#[from] ProviderError),
    #[error("not enough quota for this plan; nothing was created:\n{}", list(.0))]
    Quota(Vec<Shortfall>),
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Images(#[from] ImageError),
    /// Bad arguments: exit 2.
    #[error("{0}")]
    Usage(String),
    /// Something failed while working (a tunnel, ssh, horovodrun, a cloud that kept a
    /// resource): exit 1, like every other runtime failure.
    #[error("{0}")]
    Runtime(String),
    #[error(
        "interrupted; the state is saved: run `up` again to resume, or `down` to remove everything"
    )]
    Interrupted,
}

fn list(items: &[Shortfall]) -> String {
    items
        .iter()
        .map(|s| format!("  {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Profile(_)
            | Error::Usage(_)
            | Error::Provider(ProviderError::Resolve { .. }) => 2,
            Error::Quota(_) | Error::Provider(ProviderError::Quota(_)) => 3,
            Error::Apply(ApplyError::Step {
                source: ProviderError::Quota(_),
                ..
            }) => 3,
            Error::Interrupted => 130,
            _ => 1,
        }
    }
}

/// Options shared by every command.
pub struct Context {
    pub state_root: PathBuf,
    pub progress: Progress,
    pub quiet: bool,
    /// Most concurrent cloud calls inside one dependency level.
    pub parallel: usize,
    /// How long workers dropped from elastic discovery get to leave a job before deletion.
    pub drain_grace: Duration,
    /// `heal`: servers the cloud calls healthy are also probed over SSH (container, sshd).
    pub probe_workers: bool,
}

impl Context {
    pub fn new(state_dir: Option<PathBuf>, quiet: bool, parallel: usize) -> Context {
        Context {
            state_root: state_dir.unwrap_or_else(state::default_root),
            progress: Progress::new(quiet),
            quiet,
            parallel: parallel.max(1),
            drain_grace: Duration::from_secs(20),
            probe_workers: false,
        }
    }

    fn applier<'a, P: Provider>(
        &'a self,
        provider: &'a P,
        dir: &'a ClusterDir,
        state: ClusterState,
    ) -> Applier<'a, P> {
        let mut applier = Applier::new(provider, dir, &self.progress, state);
        applier.deadlines.parallel = self.parallel;
        applier
    }
}

/// What `status` and `down` act on.
pub enum Target {
    Profile(PathBuf),
    Cluster { name: String, cloud: Option<String> },
}

/// `plan` exit code when changes are pending (like `terraform plan -detailed-exitcode`).
pub const PLAN_HAS_CHANGES: u8 = 10;

pub async fn validate(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let p = profile::load(file)?;
    if !ctx.quiet {
        println!(
            "{}: ok — cluster `{}` on {}, a master and {} worker(s)",
            file.display(),
            p.name,
            match p.provider {
                ProviderKind::OpenStack => "OpenStack",
                ProviderKind::Local => "local Docker",
            },
            p.workers.count
        );
    }
    Ok(0)
}

/// Connects to the provider a profile names; for OpenStack also resolves every name it uses.
async fn connect(ctx: &Context, p: &Profile) -> Result<AnyProvider, Error> {
    let spinner = ctx.progress.spinner("connecting");
    let provider = match p.provider {
        ProviderKind::OpenStack => {
            let mut os = OpenStackProvider::connect(
                p.cloud.as_deref(),
                p.region.as_deref(),
                p.interface.as_deref(),
            )
            .await?;
            spinner.set_message("resolving flavors, images, networks");
            os.resolve(p).await?;
            AnyProvider::OpenStack(os)
        }
        ProviderKind::Local => AnyProvider::Local(LocalProvider::connect().await?),
    };
    spinner.finish_and_clear();
    Ok(provider)
}

/// Observes the cluster and plans.
async fn prepare(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    provider: &AnyProvider,
) -> Result<(Plan, Vec<Shortfall>), Error> {
    let spinner = ctx.progress.spinner("looking for the cluster's resources");
    let mut observed = ctx.applier(provider, dir, dir.load()?).observe().await?;
    if ctx.probe_workers {
        spinner.set_message("probing the workers over SSH");
        probe_workers(p, dir, &mut observed).await?;
    }
    let plan = plan::plan(p, &observed);
    let shortfalls = match provider {
        AnyProvider::OpenStack(os) => {
            spinner.set_message("checking quotas");
            let delta = QuotaDelta::of(&plan, |f| os.flavor_size(f));
            plan::shortfalls(&delta, &os.quotas().await?)
        }
        AnyProvider::Local(_) => vec![],
    };
    spinner.finish_and_clear();
    Ok((plan, shortfalls))
}

#[derive(Serialize)]
struct PlanReport<'a> {
    cluster: &'a str,
    plan: &'a Plan,
    counts: plan::PlanCounts,
    quota_shortfalls: &'a [Shortfall],
}

pub async fn plan(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let p = profile::load(file)?;
    // `plan` only looks: a cluster not made yet gets no folder from it.
    let dir = ClusterDir::look(&ctx.state_root, &p.name)?;
    let provider = connect(ctx, &p).await?;
    let (plan, shortfalls) = prepare(ctx, &p, &dir, &provider).await?;
    if json {
        let report = PlanReport {
            cluster: &p.name,
            plan: &plan,
            counts: plan.counts(),
            quota_shortfalls: &shortfalls,
        };
        println!("{}", to_json(&report));
    } else {
        println!("cluster `{}`:\n{plan}", p.name);
    }
    if !shortfalls.is_empty() {
        return Err(Error::Quota(shortfalls));
    }
    Ok(if plan.is_noop() { 0 } else { PLAN_HAS_CHANGES })
}

/// The cluster folder's paths go into ssh_config: a state folder ssh_config cannot carry is
/// bad input (exit 2), refused before anything is created.
fn check_state_dir_for_ssh(ctx: &Context, cluster: &ClusterName) -> Result<(), String> {
    ssh::config_path_word(&ctx.state_root.join(cluster.as_str()))
        .map(drop)
        .map_err(|e| format!("--state-dir: {e}"))
}

pub async fn up(ctx: &Context, file: &Path, infra_only: bool) -> Result<u8, Error> {
    let started = std::time::Instant::now();
    let p = profile::load(file)?;
    check_state_dir_for_ssh(ctx, &p.name).map_err(Error::Usage)?;
    let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
    let _lock = dir.lock()?;
    // Local nodes run the node image; a `build` image is made here and sent to the nodes.
    let targets: &[&str] = match (p.provider, p.container.source) {
        (ProviderKind::Local, _) => &["all"],
        (_, profile::ImageSource::Build) if !infra_only => &["horovod"],
        _ => &[],
    };
    if !targets.is_empty() {
        ctx.progress
            .line("images: building what is missing (the first time takes minutes)");
        images::ensure(&ctx.state_root.join(".images"), targets, &ctx.progress).await?;
    }
    let mut provider = connect(ctx, &p).await?;
    let (plan, shortfalls) = prepare(ctx, &p, &dir, &provider).await?;
    if !shortfalls.is_empty() {
        return Err(Error::Quota(shortfalls));
    }
    let mut saved = dir.load()?;
    saved.cloud = p.cloud.clone();
    saved.provider = Some(p.provider);
    saved.ssh_user = Some(p.ssh_user.clone());
    dir.save(&saved)?;
    provider.set_public_key(dir.ensure_keypair()?);

    let applier = ctx.applier(&provider, &dir, dir.load()?);
    if plan.is_noop() {
        ctx.progress.line(format!(
            "cluster `{}`: every resource exists; nothing to change",
            p.name
        ));
    } else {
        ctx.progress
            .line(format!("cluster `{}`: {}", p.name, summary(&plan)));
        if !infra_only {
            drain_leaving_workers(ctx, &p, &dir, &plan).await?;
        }
        applier.apply(&plan).await?;
    }
    let mut st = applier.state();
    st.nodes = nodes_with_slots(&p, provider.nodes(&p.name).await?);
    dir.save(&st)?;
    ctx.progress.line(format!(
        "resources ready after {:.1}s, {} API calls",
        started.elapsed().as_secs_f64(),
        provider.calls()
    ));
    print_nodes(&p.name, &st);
    if infra_only {
        return Ok(0);
    }
    let mut cluster = open_cluster(ctx, &p, &dir, &st.nodes).await?;
    if p.storage.kind == profile::StorageKind::Manila {
        cluster.share_export = provider.share_export(&p.name).await?;
    }
    let changed =
        bootstrap::bootstrap(&cluster.inputs(&p, &dir), &cluster.sessions, &ctx.progress).await?;
    ctx.progress.line(format!(
        "bootstrap: {changed} step(s) changed something, after {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    let workers: Vec<_> = bootstrap::host_slots(&cluster.sessions)
        .into_iter()
        .skip(1)
        .collect();
    bootstrap::write_discovery(&cluster.sessions[0], &workers).await?;
    let url = cluster.jupyter_url(&p, &provider).await?;
    let report = check::run(&p, &cluster.sessions, Some(&url.reachable)).await?;
    print_check(&report);
    println!("Jupyter Lab: {}", url.shown);
    ctx.progress.line(format!(
        "cluster `{}` ready after {:.1}s",
        p.name,
        started.elapsed().as_secs_f64()
    ));
    Ok(0)
}

/// Workers about to be deleted leave the elastic job first: they are dropped from the
/// discovery file, and Horovod is given `drain_grace` to take them out, before they go.
async fn drain_leaving_workers(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    plan: &Plan,
) -> Result<(), Error> {
    let leaving: Vec<&str> = plan
        .deletions()
        .into_iter()
        .filter(|o| {
            o.kind == plan::Kind::Server && plan::Names(&p.name).worker_index(&o.name).is_some()
        })
        .map(|o| o.name.as_str())
        .collect();
    let known = dir.load()?.nodes;
    let Some(master) = known.iter().find(|n| n.role == "master") else {
        return Ok(());
    };
    if leaving.is_empty() || !known.iter().any(|n| leaving.contains(&n.name.as_str())) {
        return Ok(());
    }
    let config = bootstrap::write_ssh_config(dir, &p.ssh_user, &known)?;
    let sessions = bootstrap::connect_all(
        &config,
        std::slice::from_ref(master),
        &ctx.progress,
        Duration::from_secs(60),
    )
    .await?;
    // From the state file: checked again, like anything read from outside.
    let staying: Vec<HostSlots> = known
        .iter()
        .filter(|n| n.role != "master" && !leaving.contains(&n.name.as_str()))
        .map(|n| {
            let ip = n
                .private_ip
                .as_deref()
                .and_then(|ip| ip.parse().ok())
                .ok_or_else(|| {
                    format!(
                        "the saved node {} has no valid private address",
                        input::shown(&n.name)
                    )
                })?;
            HostSlots::new(&n.name, ip, n.slots).map_err(|e| e.to_string())
        })
        .collect::<Result<_, String>>()
        .map_err(|e| Error::Runtime(format!("{}: {e}", dir.state_file().display())))?;
    bootstrap::write_discovery(&sessions[0], &staying).await?;
    ctx.progress.line(format!(
        "dropped {} from elastic discovery; giving running jobs {}s to let them go",
        leaving.join(", "),
        ctx.drain_grace.as_secs()
    ));
    tokio::time::sleep(ctx.drain_grace).await;
    Ok(())
}

/// Marks as failed every worker whose server looks fine to the cloud but whose node does not
/// answer SSH or whose Horovod container is not running, so the plan replaces it.
async fn probe_workers(
    p: &Profile,
    dir: &ClusterDir,
    observed: &mut plan::Observation,
) -> Result<(), Error> {
    let known = dir.load()?.nodes;
    if !known.iter().any(|n| n.role == "master") || !dir.private_key().exists() {
        return Ok(());
    }
    let config = bootstrap::write_ssh_config(dir, &p.ssh_user, &known)?;
    let names = plan::Names(&p.name);
    for o in observed.resources.iter_mut() {
        if o.kind != plan::Kind::Server
            || o.health != Health::Ready
            || names.worker_index(&o.name).is_none()
        {
            continue;
        }
        let probe = async {
            let ssh = ssh::Ssh::connect(&config, &o.name)
                .await
                .map_err(|e| format!("SSH dead: {e}"))?;
            let running = ssh
                .sudo("docker inspect -f '{{.State.Running}}' hvd")
                .await
                .map_err(|_| "no Horovod container".to_string())?;
            ssh.close().await;
            if running.trim() == "true" {
                Ok(())
            } else {
                Err("Horovod container down".to_string())
            }
        };
        let verdict = match tokio::time::timeout(Duration::from_secs(30), probe).await {
            Ok(result) => result,
            Err(_) => Err("SSH dead: no answer in 30s".to_string()),
        };
        if let Err(why) = verdict {
            o.health = Health::Failed(why);
        }
    }
    Ok(())
}

/// `heal`: finds workers that are gone or broken (server deleted, SHUTOFF or ERROR, container
/// down, SSH dead), drops them from discovery, replaces them under new names, and lists the
/// replacements once they pass the check. `watch` repeats it every interval.
pub async fn heal(ctx: &mut Context, file: &Path, watch: Option<Duration>) -> Result<u8, Error> {
    ctx.probe_workers = true;
    loop {
        let p = profile::load(file)?;
        let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
        let provider = connect(ctx, &p).await?;
        let (plan, _) = prepare(ctx, &p, &dir, &provider).await?;
        let broken: Vec<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                plan::Action::Replace { old, reason, .. } => {
                    Some(format!("{} ({reason})", old.name))
                }
                plan::Action::Create { desired } if desired.kind() == plan::Kind::Server => {
                    Some(format!("{} (missing)", desired.name))
                }
                _ => None,
            })
            .collect();
        if broken.is_empty() {
            println!("heal: every node is healthy");
        } else {
            println!("heal: found {}", broken.join(", "));
            up(ctx, file, false).await?;
            println!("heal: replaced {} node(s)", broken.len());
        }
        match watch {
            Some(every) => tokio::time::sleep(every).await,
            None => return Ok(0),
        }
    }
}

/// `scale`: writes the new worker count into the profile, then converges as `up` does (new
/// workers are bootstrapped and checked before discovery lists them; leaving ones are
/// dropped from discovery before they are deleted).
pub async fn scale(ctx: &Context, file: &Path, workers: u32) -> Result<u8, Error> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("{}: {e}", shown_path(file))))?;
    let edited = profile::with_worker_count(&text, workers).ok_or_else(|| {
        Error::Usage(format!(
            "{}: no `count = N` line under [workers] to change",
            shown_path(file)
        ))
    })?;
    profile::parse(file, &edited)?;
    if edited != text {
        state::write_atomic(file, edited.as_bytes(), 0o644)?;
        ctx.progress
            .line(format!("{}: workers.count = {workers}", file.display()));
    }
    up(ctx, file, false).await
}

/// Slots per node: stated in the profile, else one per GPU, else one.
fn nodes_with_slots(p: &Profile, mut nodes: Vec<state::Node>) -> Vec<state::Node> {
    for n in &mut nodes {
        let (slots, gpus) = if n.role == "master" {
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

/// A connected cluster: an SSH session to every node.
struct Connected {
    sessions: Vec<bootstrap::NodeSession>,
    token: String,
    clients_cidr: String,
    /// `storage.kind = "manila"`: the share's export location, mounted on every node.
    share_export: Option<String>,
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

async fn open_cluster(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    nodes: &[state::Node],
) -> Result<Connected, Error> {
    let config = bootstrap::write_ssh_config(dir, &p.ssh_user, nodes)?;
    let sessions =
        bootstrap::connect_all(&config, nodes, &ctx.progress, Duration::from_secs(600)).await?;
    let master = &sessions[0];
    let cidr = master
        .ssh
        .run(&format!(
            "ip -o -4 addr show dev {} | awk '{{print $4}}' | head -n1",
            ssh::shell_quote(&master.iface)
        ))
        .await
        .map_err(bootstrap::BootstrapError::from)?;
    let clients_cidr = network_of(cidr.trim()).unwrap_or_else(|| p.subnet_cidr().to_string());
    Ok(Connected {
        sessions,
        token: jupyter_token(dir)?,
        clients_cidr,
        share_export: None,
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

struct JupyterUrl {
    /// What this process fetches for the check.
    reachable: String,
    /// What the user is told.
    shown: String,
}

impl Connected {
    fn inputs<'a>(&'a self, p: &'a Profile, dir: &'a ClusterDir) -> bootstrap::Inputs<'a> {
        bootstrap::Inputs {
            profile: p,
            dir,
            jupyter_token: &self.token,
            clients_cidr: self.clients_cidr.clone(),
            share_export: self.share_export.clone(),
        }
    }

    /// The Jupyter URL: the published port (local), the floating IP when the profile opens
    /// 8888, else an SSH tunnel through the master (`hvd-cluster jupyter` keeps one open).
    async fn jupyter_url(&self, p: &Profile, provider: &AnyProvider) -> Result<JupyterUrl, Error> {
        let token = &self.token;
        if let AnyProvider::Local(local) = provider {
            if let Some(endpoint) = local.jupyter_endpoint(&p.name).await? {
                let url = format!("http://{endpoint}/lab?token={token}");
                return Ok(JupyterUrl {
                    reachable: url.clone(),
                    shown: url,
                });
            }
        }
        let master = &self.sessions[0];
        if p.access.jupyter == JupyterAccess::Public {
            if let Some(ip) = &master.node.public_ip {
                let url = format!("http://{ip}:8888/lab?token={token}");
                return Ok(JupyterUrl {
                    reachable: url.clone(),
                    shown: url,
                });
            }
        }
        let port = free_port()?;
        master
            .ssh
            .session()
            .request_port_forward(
                openssh::ForwardType::Local,
                (
                    "127.0.0.1"
                        .parse::<std::net::IpAddr>()
                        .map_err(|e| Error::Runtime(e.to_string()))?,
                    port,
                ),
                (
                    "127.0.0.1"
                        .parse::<std::net::IpAddr>()
                        .map_err(|e| Error::Runtime(e.to_string()))?,
                    8888,
                ),
            )
            .await
            .map_err(|e| Error::Runtime(format!("cannot open an SSH tunnel to Jupyter: {e}")))?;
        Ok(JupyterUrl {
            reachable: format!("http://127.0.0.1:{port}/lab?token={token}"),
            shown: format!(
                "run `hvd-cluster jupyter {}` for a tunnel, then open the URL it prints",
                p.name
            ),
        })
    }
}

fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::Runtime(format!("no free local port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::Runtime(format!("no free local port: {e}")))
}

fn print_check(r: &check::CheckReport) {
    println!(
        "check: {} container(s) running; /shared read on {}{}; Jupyter answers \"{}\"; {} rank(s) joined on {}",
        r.containers,
        r.shared_read_on.as_deref().unwrap_or("-"),
        if r.shared_kernel_mounts.is_empty() {
            String::new()
        } else {
            format!(", kernel NFS on {}", r.shared_kernel_mounts.join(", "))
        },
        r.jupyter_title.as_deref().unwrap_or("-"),
        r.ranks,
        r.hosts.join(", ")
    );
    for b in &r.bandwidth {
        println!(
            "  allreduce {:>3} MiB: {:>8.1} ms, algbw {:>7.1} MiB/s, busbw {:>7.1} MiB/s",
            b.size_mib, b.ms, b.algbw_mibps, b.busbw_mibps
        );
    }
}

/// Loads the profile and connects to the nodes recorded by the last `up`.
async fn existing_cluster(
    ctx: &Context,
    file: &Path,
) -> Result<(Profile, ClusterDir, AnyProvider, Vec<state::Node>), Error> {
    let p = profile::load(file)?;
    check_state_dir_for_ssh(ctx, &p.name).map_err(Error::Usage)?;
    // Reaching the nodes needs the key kept in the folder: without one, say so, make none.
    let dir = ClusterDir::look(&ctx.state_root, &p.name)?.required()?;
    let provider = match p.provider {
        ProviderKind::OpenStack => AnyProvider::OpenStack(
            OpenStackProvider::connect(
                p.cloud.as_deref(),
                p.region.as_deref(),
                p.interface.as_deref(),
            )
            .await?,
        ),
        ProviderKind::Local => AnyProvider::Local(LocalProvider::connect().await?),
    };
    let nodes = nodes_with_slots(&p, provider.nodes(&p.name).await?);
    if nodes.is_empty() {
        return Err(Error::Runtime(format!(
            "cluster `{}` has no nodes; run `hvd-cluster up {}` first",
            p.name,
            file.display()
        )));
    }
    Ok((p, dir, provider, nodes))
}

pub async fn check(ctx: &Context, file: &Path, json: bool) -> Result<u8, Error> {
    let (p, dir, provider, nodes) = existing_cluster(ctx, file).await?;
    let cluster = open_cluster(ctx, &p, &dir, &nodes).await?;
    let url = cluster.jupyter_url(&p, &provider).await?;
    let report = check::run(&p, &cluster.sessions, Some(&url.reachable)).await?;
    if json {
        println!("{}", to_json(&report));
    } else {
        print_check(&report);
    }
    Ok(0)
}

/// `horovodrun` over every slot (or elastic), from the master's container, output streamed.
pub async fn run(
    ctx: &Context,
    file: &Path,
    elastic: Option<(Option<u32>, Option<u32>)>,
    send: &[PathBuf],
    command: &[String],
) -> Result<u8, Error> {
    let (p, dir, _provider, nodes) = existing_cluster(ctx, file).await?;
    let cluster = open_cluster(ctx, &p, &dir, &nodes).await?;
    for local in send {
        let name = local.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            Error::Usage(format!("--send {}: not a file name", shown_path(local)))
        })?;
        let body = std::fs::read(local)
            .map_err(|e| Error::Usage(format!("--send {}: {e}", shown_path(local))))?;
        cluster.sessions[0]
            .ssh
            .write_file(&format!("/shared/{name}"), &body, 0o644)
            .await
            .map_err(BootstrapError::from)?;
        ctx.progress
            .line(format!("sent {} to /shared/{name}", local.display()));
    }
    let slots: u32 = cluster.sessions.iter().map(|s| s.node.slots.max(1)).sum();
    let elastic = elastic.map(|(min, max)| (min.unwrap_or(1), max.unwrap_or(slots)));
    let mut argv = check::horovodrun_args(&p, &cluster.sessions, elastic);
    argv.extend(command.iter().cloned());
    let quoted: Vec<String> = argv.iter().map(|a| ssh::shell_quote(a)).collect();
    let remote = format!("sudo -n docker exec -w /shared hvd {}", quoted.join(" "));
    ctx.progress.line(format!("$ {}", argv.join(" ")));
    let status = cluster.sessions[0]
        .ssh
        .session()
        .raw_command(remote)
        .stdin(openssh::Stdio::null())
        .stdout(openssh::Stdio::inherit())
        .stderr(openssh::Stdio::inherit())
        .status()
        .await
        .map_err(|e| Error::Runtime(format!("running horovodrun on the master: {e}")))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}

/// Prints the cluster's ssh_config (use with `ssh -F`).
pub async fn ssh_config(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let (p, dir, _provider, nodes) = existing_cluster(ctx, file).await?;
    let path = bootstrap::write_ssh_config(&dir, &p.ssh_user, &nodes)?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::Runtime(format!("reading {}: {e}", path.display())))?;
    print!("{text}");
    Ok(0)
}

/// Opens `ssh` to a node (the master by default) through the cluster's ssh_config.
pub async fn ssh(
    ctx: &Context,
    file: &Path,
    node: Option<&str>,
    command: &[String],
) -> Result<u8, Error> {
    let (p, dir, _provider, nodes) = existing_cluster(ctx, file).await?;
    let path = bootstrap::write_ssh_config(&dir, &p.ssh_user, &nodes)?;
    let target = match node {
        None => plan::Names(&p.name).master(),
        Some(n) if nodes.iter().any(|x| x.name == n) => n.to_string(),
        Some(n) => {
            let prefixed = format!("{}-{n}", p.name);
            if nodes.iter().any(|x| x.name == prefixed) {
                prefixed
            } else {
                let names: Vec<&str> = nodes.iter().map(|x| x.name.as_str()).collect();
                return Err(Error::Usage(format!(
                    "no node `{}`; nodes: {}",
                    input::shown(n),
                    names.join(", ")
                )));
            }
        }
    };
    let status = std::process::Command::new("ssh")
        .arg("-F")
        .arg(&path)
        .arg(&target)
        .args(command)
        .status()
        .map_err(|e| Error::Runtime(format!("cannot run ssh: {e}")))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}

/// Keeps an SSH tunnel to Jupyter open and prints its 127.0.0.1 URL.
pub async fn jupyter(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let (p, dir, provider, nodes) = existing_cluster(ctx, file).await?;
    let cluster = open_cluster(ctx, &p, &dir, &nodes).await?;
    let url = cluster.jupyter_url(&p, &provider).await?;
    let title = check::jupyter_title(&url.reachable).await?;
    println!("{} ({title})", url.reachable);
    if url.reachable != url.shown {
        ctx.progress.line("the tunnel stays open until Ctrl-C");
        std::future::pending::<()>().await;
    }
    Ok(0)
}

fn summary(plan: &Plan) -> String {
    let c = plan.counts();
    format!(
        "{} to create, {} to replace, {} to delete, {} unchanged",
        c.create, c.replace, c.delete, c.keep
    )
}

fn print_nodes(cluster: &str, st: &ClusterState) {
    println!("cluster `{cluster}` resources:");
    for n in &st.nodes {
        println!(
            "  {:<24} {:<7} private {:<15} public {}",
            n.name,
            n.role,
            n.private_ip.as_deref().unwrap_or("-"),
            n.public_ip.as_deref().unwrap_or("-")
        );
    }
}

/// Resolves a `status`/`down` target to a cluster name, its folder and a connected provider.
async fn open_target(
    ctx: &Context,
    target: Target,
) -> Result<(ClusterName, ClusterDir, AnyProvider), Error> {
    let (name, kind, cloud, region, interface) = match target {
        Target::Profile(file) => {
            let p = profile::load(&file)?;
            (
                p.name.clone(),
                p.provider,
                p.cloud.clone(),
                p.region.clone(),
                p.interface.clone(),
            )
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
            // Without state the cluster is looked for on OpenStack, unless it is a local one.
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
            (name, kind, cloud.or(saved.cloud), None, None)
        }
    };
    // `status` and `down` only look: a cluster with no folder here (made elsewhere, or
    // already gone) gets none from them.
    let dir = ClusterDir::look(&ctx.state_root, &name)?;
    let provider = match kind {
        ProviderKind::OpenStack => AnyProvider::OpenStack(
            OpenStackProvider::connect(cloud.as_deref(), region.as_deref(), interface.as_deref())
                .await?,
        ),
        ProviderKind::Local => AnyProvider::Local(LocalProvider::connect().await?),
    };
    Ok((name, dir, provider))
}

#[derive(Serialize)]
struct StatusReport<'a> {
    cluster: &'a str,
    resources: &'a [plan::Observed],
    nodes: &'a [state::Node],
    healthy: bool,
}

/// Marks each worker listed in the master's discovery file; best effort (no SSH, no marks).
async fn mark_discovery(dir: &ClusterDir, nodes: &mut [state::Node]) {
    let Ok(saved) = dir.load() else { return };
    let (Some(user), true) = (saved.ssh_user, dir.private_key().exists()) else {
        return;
    };
    let Some(master) = nodes.iter().find(|n| n.role == "master").cloned() else {
        return;
    };
    let Ok(config) = bootstrap::write_ssh_config(dir, &user, nodes) else {
        return;
    };
    let read = async {
        let ssh = ssh::Ssh::connect(&config, &master.name).await.ok()?;
        ssh.run(&format!(
            "cat {}/discovery/hosts 2>/dev/null || true",
            bootstrap::NODE_DIR
        ))
        .await
        .ok()
    };
    let Ok(Some(listed)) = tokio::time::timeout(Duration::from_secs(20), read).await else {
        return;
    };
    let listed: Vec<&str> = listed.lines().filter_map(|l| l.split(':').next()).collect();
    for n in nodes.iter_mut().filter(|n| n.role != "master") {
        n.in_discovery = Some(listed.contains(&n.name.as_str()));
    }
}

pub async fn status(ctx: &Context, target: Target, json: bool) -> Result<u8, Error> {
    let (name, dir, provider) = open_target(ctx, target).await?;
    let observed = provider.observe(&name).await.map_err(ApplyError::Observe)?;
    let mut nodes = provider.nodes(&name).await?;
    mark_discovery(&dir, &mut nodes).await;
    let healthy = !observed.is_empty() && observed.iter().all(|o| o.health == Health::Ready);
    if json {
        println!(
            "{}",
            to_json(&StatusReport {
                cluster: &name,
                resources: &observed,
                nodes: &nodes,
                healthy
            })
        );
    } else if observed.is_empty() {
        println!("cluster `{name}`: nothing exists");
    } else {
        println!("cluster `{name}`:");
        let mut sorted = observed.clone();
        sorted.sort_by_key(|o| (o.kind.level(), o.name.clone()));
        for o in &sorted {
            let health = match &o.health {
                Health::Ready => "ready".to_string(),
                Health::Pending => "building".to_string(),
                Health::Failed(why) => format!("FAILED: {}", input::shown_message(why, 300)),
            };
            // Names, ids and fault messages are the cloud's words: escaped for the terminal.
            println!(
                "  {:<18} {:<28} {:<38} {health}",
                o.kind,
                input::shown(&o.name),
                input::shown(&o.id)
            );
        }
        for n in &nodes {
            let elastic = match n.in_discovery {
                Some(true) => "  elastic: listed",
                Some(false) => "  elastic: not listed",
                None => "",
            };
            println!(
                "  node {:<23} {:<7} private {:<15} public {}{elastic}",
                n.name,
                n.role,
                n.private_ip.as_deref().unwrap_or("-"),
                n.public_ip.as_deref().unwrap_or("-")
            );
        }
    }
    Ok(0)
}

pub async fn down(ctx: &Context, target: Target) -> Result<u8, Error> {
    let started = std::time::Instant::now();
    let (name, dir, provider) = open_target(ctx, target).await?;
    let lock = dir.lock()?;
    let applier = ctx.applier(&provider, &dir, dir.load()?);
    let observed = applier.observe().await?;
    if observed.resources.is_empty() {
        ctx.progress
            .line(format!("cluster `{name}`: nothing to delete"));
    } else {
        let plan = plan::teardown(&observed);
        ctx.progress.line(format!(
            "cluster `{name}`: deleting {} resources",
            plan.actions.len()
        ));
        applier.apply(&plan).await?;
    }
    // Prove it through the API before forgetting the cluster.
    let left = provider.observe(&name).await.map_err(ApplyError::Observe)?;
    if !left.is_empty() {
        let names: Vec<String> = left
            .iter()
            .map(|o| format!("{} {}", o.kind, input::shown(&o.name)))
            .collect();
        return Err(Error::Runtime(format!(
            "still present after delete: {}",
            names.join(", ")
        )));
    }
    drop(lock);
    dir.remove()?;
    ctx.progress.line(format!(
        "deleted after {:.1}s, {} API calls",
        started.elapsed().as_secs_f64(),
        provider.calls()
    ));
    println!("cluster `{name}`: deleted; nothing tagged with it is left");
    Ok(0)
}

/// A path from the command line, as it may appear in a message (shortened, escaped).
fn shown_path(path: &Path) -> String {
    input::shown(&path.to_string_lossy())
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode output: {e}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_exits_2_and_runtime_failures_exit_1() {
        assert_eq!(Error::Usage("--cluster: bad".into()).exit_code(), 2);
        assert_eq!(
            Error::Runtime("still present after delete: server x".into()).exit_code(),
            1
        );
        assert_eq!(
            Error::Runtime("cannot open an SSH tunnel to Jupyter".into()).exit_code(),
            1
        );
        assert_eq!(Error::Interrupted.exit_code(), 130);
    }
}
