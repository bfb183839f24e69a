//! The commands: each reads top to bottom as the flow profile → plan → apply → report.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::apply::{Applier, ApplyError, Provider, ProviderError};
use crate::plan::{self, Health, Observation, Plan, QuotaDelta, Shortfall};
use crate::profile::{self, Profile, ProfileError, ProviderKind};
use crate::progress::Progress;
use crate::provider::openstack::OpenStackProvider;
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
    #[error("{0}")]
    Usage(String),
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
}

impl Context {
    pub fn new(state_dir: Option<PathBuf>, quiet: bool) -> Context {
        Context {
            state_root: state_dir.unwrap_or_else(state::default_root),
            progress: Progress::new(quiet),
            quiet,
        }
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

fn require_openstack(p: &Profile) -> Result<(), Error> {
    match p.provider {
        ProviderKind::OpenStack => Ok(()),
        ProviderKind::Local => Err(Error::Usage(format!(
            "cluster `{}` uses provider = \"local\", which this build of hvd-cluster cannot run yet",
            p.name
        ))),
    }
}

/// Connects, resolves every name the profile uses, observes the cluster and plans.
async fn prepare(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
) -> Result<(OpenStackProvider, Plan, Observation), Error> {
    require_openstack(p)?;
    let spinner = ctx.progress.spinner("connecting");
    let mut provider = OpenStackProvider::connect(
        p.cloud.as_deref(),
        p.region.as_deref(),
        p.interface.as_deref(),
    )
    .await?;
    spinner.set_message("resolving flavors, images, networks");
    provider.resolve(p).await?;
    spinner.set_message("looking for the cluster's resources");
    let applier = Applier::new(&provider, dir, &ctx.progress, dir.load()?);
    let observed = applier.observe().await?;
    spinner.finish_and_clear();
    let plan = plan::plan(p, &observed);
    Ok((provider, plan, observed))
}

async fn check_quota(provider: &OpenStackProvider, plan: &Plan) -> Result<Vec<Shortfall>, Error> {
    let delta = QuotaDelta::of(plan, |f| provider.flavor_size(f));
    let quotas = provider.quotas().await?;
    Ok(plan::shortfalls(&delta, &quotas))
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
    let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
    let (provider, plan, _) = prepare(ctx, &p, &dir).await?;
    let shortfalls = check_quota(&provider, &plan).await?;
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

pub async fn up(ctx: &Context, file: &Path, infra_only: bool) -> Result<u8, Error> {
    let p = profile::load(file)?;
    let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
    let _lock = dir.lock()?;
    let (mut provider, plan, _) = prepare(ctx, &p, &dir).await?;
    let shortfalls = check_quota(&provider, &plan).await?;
    if !shortfalls.is_empty() {
        return Err(Error::Quota(shortfalls));
    }
    let mut saved = dir.load()?;
    saved.cloud = p.cloud.clone();
    dir.save(&saved)?;
    provider.set_public_key(dir.ensure_keypair()?);

    let applier = Applier::new(&provider, &dir, &ctx.progress, dir.load()?);
    if plan.is_noop() {
        ctx.progress.line(format!(
            "cluster `{}`: every resource exists; nothing to change",
            p.name
        ));
    } else {
        ctx.progress
            .line(format!("cluster `{}`: {}", p.name, summary(&plan)));
        applier.apply(&plan).await?;
    }
    let mut st = applier.state();
    st.nodes = provider.nodes(&p.name).await?;
    dir.save(&st)?;
    print_nodes(&p.name, &st, &dir);
    if !infra_only {
        ctx.progress.line("note: this build stops after the cloud resources (as with --infra-only); node bootstrap is not part of it yet");
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

fn print_nodes(cluster: &str, st: &ClusterState, dir: &ClusterDir) {
    println!("cluster `{cluster}` is up:");
    for n in &st.nodes {
        println!(
            "  {:<24} {:<7} private {:<15} public {}",
            n.name,
            n.role,
            n.private_ip.as_deref().unwrap_or("-"),
            n.public_ip.as_deref().unwrap_or("-")
        );
    }
    if let Some(master) = st.nodes.iter().find(|n| n.role == "master") {
        if let Some(ip) = &master.public_ip {
            println!(
                "reach the master: ssh -i {} <user>@{ip}",
                dir.private_key().display()
            );
        }
    }
}

/// Resolves a `status`/`down` target to a cluster name, its folder and a connected provider.
async fn open_target(
    ctx: &Context,
    target: Target,
) -> Result<(String, ClusterDir, OpenStackProvider), Error> {
    let (name, cloud, region, interface) = match target {
        Target::Profile(file) => {
            let p = profile::load(&file)?;
            require_openstack(&p)?;
            (
                p.name.clone(),
                p.cloud.clone(),
                p.region.clone(),
                p.interface.clone(),
            )
        }
        Target::Cluster { name, cloud } => {
            if name.is_empty() {
                return Err(Error::Usage("give a profile FILE or --cluster NAME".into()));
            }
            let dir = ClusterDir::open(&ctx.state_root, &name)?;
            let saved = dir.load()?.cloud;
            (name, cloud.or(saved), None, None)
        }
    };
    let dir = ClusterDir::open(&ctx.state_root, &name)?;
    let provider =
        OpenStackProvider::connect(cloud.as_deref(), region.as_deref(), interface.as_deref())
            .await?;
    Ok((name, dir, provider))
}

#[derive(Serialize)]
struct StatusReport<'a> {
    cluster: &'a str,
    resources: &'a [plan::Observed],
    nodes: &'a [state::Node],
    healthy: bool,
}

pub async fn status(ctx: &Context, target: Target, json: bool) -> Result<u8, Error> {
    let (name, dir, provider) = open_target(ctx, target).await?;
    let observed = provider.observe(&name).await.map_err(ApplyError::Observe)?;
    let nodes = provider.nodes(&name).await?;
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
                Health::Failed(why) => format!("FAILED: {why}"),
            };
            println!("  {:<18} {:<28} {:<38} {health}", o.kind, o.name, o.id);
        }
        for n in &nodes {
            println!(
                "  node {:<23} {:<7} private {:<15} public {}",
                n.name,
                n.role,
                n.private_ip.as_deref().unwrap_or("-"),
                n.public_ip.as_deref().unwrap_or("-")
            );
        }
    }
    let _ = dir;
    Ok(0)
}

pub async fn down(ctx: &Context, target: Target) -> Result<u8, Error> {
    let (name, dir, provider) = open_target(ctx, target).await?;
    let _lock = dir.lock()?;
    let applier = Applier::new(&provider, &dir, &ctx.progress, dir.load()?);
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
            .map(|o| format!("{} {}", o.kind, o.name))
            .collect();
        return Err(Error::Usage(format!(
            "still present after delete: {}",
            names.join(", ")
        )));
    }
    drop(_lock);
    dir.remove()?;
    println!("cluster `{name}`: deleted; nothing tagged with it is left");
    Ok(0)
}

fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\": \"cannot encode output: {e}\"}}"))
}
