//! Converging a cluster to its profile, the work `up`, `start`, `scale` and `heal` share, in
//! two halves that return what they did (the command prints it): [`provision`] connects and
//! resolves names, observes (starting a stopped cluster's servers) and plans (with quotas, and for `heal` a probe of the workers
//! over SSH), drains leaving workers from elastic discovery and applies; [`bootstrap_and_check`]
//! bootstraps every node (rebooting, once, the nodes whose GPU driver loads only after a
//! reboot), lists the workers for elastic jobs and runs the acceptance check.

mod data;
mod kept;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::autostop;
use crate::bootstrap::{self, reboot, BootstrapError, RebootRequest};
use crate::check::{self, CheckReport};
use crate::cluster::{self, Reach};
use crate::context::Context;
use crate::error::Error;
use crate::images;
use crate::input;
use crate::jobs::SlotClaim::BesideJobs;
use crate::lifecycle;
use crate::plan::{self, Action, Health, Kind, Plan, Role, Shortfall};
use crate::profile::{self, ImageSource, Profile};
use crate::provider::{self, Place, Provider};
use crate::registry;
use crate::render::HostSlots;
use crate::ssh;
use crate::state::{ClusterDir, ClusterState, LockGuard, Renewal};

/// Connects to the provider a profile names, resolves every name it uses and fills in what
/// the profile leaves to the cloud (said in a line each).
pub async fn connect(ctx: &Context, p: &mut Profile) -> Result<Box<dyn Provider>, Error> {
    let spinner = ctx.progress.spinner("connecting");
    let mut provider = provider::connect(&Place::of(p)).await?;
    spinner.set_message("resolving flavors, images, networks");
    provider.resolve(p).await?;
    spinner.finish_and_clear();
    // The container image's size where this machine has it (it is sent from here).
    let container_bytes = match p.container.source {
        ImageSource::Build | ImageSource::Transfer => {
            images::local_image_bytes(&p.container.image).await
        }
        _ => None,
    };
    for line in provider.complete_profile(p, container_bytes) {
        ctx.progress.line(line);
    }
    Ok(provider)
}

/// What `plan`, `up`, `scale` and `heal` find before changing anything.
pub struct Prepared {
    pub plan: Plan,
    /// The quotas the plan would exceed.
    pub shortfalls: Vec<Shortfall>,
    /// What the profile asks for that works, but not as meant (printed by [`prepare`]).
    pub warnings: Vec<String>,
    /// What the plan was made from.
    pub observed: plan::Observation,
}

/// Warnings about the profile the plan can give before anything runs: nodes with GPUs (the
/// workers' `gpus`, else their flavor's; the master's flavor's, as `flavor_gpus` says) and one
/// of our CPU-only images. Pure.
pub fn profile_warnings(p: &Profile, flavor_gpus: impl Fn(&str) -> u32) -> Vec<String> {
    let master = p.master.flavor.as_deref().map_or(0, &flavor_gpus);
    let worker = p
        .workers
        .gpus
        .unwrap_or_else(|| p.workers.flavor.as_deref().map_or(0, &flavor_gpus));
    images::cpu_build_on_gpus(&p.container.image, master, worker, p.workers.count)
        .into_iter()
        .collect()
}

/// Shows the profile's warnings as progress lines (`plan --json` also carries them in its
/// document). The callers show them, once per command: `heal --watch` plans every round.
pub fn show_warnings(ctx: &Context, warnings: &[String]) {
    for w in warnings {
        ctx.progress.line(format!("warning: {w}"));
    }
}

/// Observes the cluster and plans: the plan, the quotas it would exceed and the profile's
/// warnings (not shown: see [`show_warnings`]).
pub async fn prepare(
    ctx: &Context,
    p: &Profile,
    dir: &ClusterDir,
    provider: &dyn Provider,
) -> Result<Prepared, Error> {
    let spinner = ctx.progress.spinner("looking for the cluster's resources");
    let mut observed = ctx.applier(provider, dir, dir.load()?).observe().await?;
    if ctx.probe_workers {
        spinner.set_message("probing the workers over SSH");
        probe_workers(p, dir, &mut observed).await?;
    }
    if let Some((holder, gb)) = provider.shared_capacity(p) {
        spinner.set_message("measuring the [[data]] bound for /shared");
        data::fits_shared(data::local_bytes(p).await?, &holder, gb).map_err(Error::Usage)?;
    }
    let plan = plan::plan(p, provider.blueprint(), &observed);
    spinner.set_message("checking quotas");
    let shortfalls = provider.shortfalls(&plan).await?;
    spinner.finish_and_clear();
    let warnings = profile_warnings(p, |f| provider.flavor_gpus(f));
    Ok(Prepared {
        plan,
        shortfalls,
        warnings,
        observed,
    })
}

/// A cluster whose resources exist as the profile says, locked against a second `up` until
/// dropped: what [`provision`] returns and [`bootstrap_and_check`] takes.
pub struct Provisioned {
    pub profile: Profile,
    pub dir: ClusterDir,
    pub provider: Box<dyn Provider>,
    /// The saved state, with every node and its slots.
    pub state: ClusterState,
    /// `container.source = "pull"`: the registry's credentials and CA (never saved).
    pub pull_access: Option<registry::PullAccess>,
    /// When the command started (for the times it reports).
    pub started: Instant,
    /// The servers this command started again or made anew, and which of the two: a changed
    /// host key of theirs may be vouched for by their console.
    pub renewed: BTreeMap<String, &'static str>,
    _lock: LockGuard,
}

/// A bootstrapped cluster that passed the acceptance check.
pub struct Ready {
    pub check: CheckReport,
    /// The Jupyter URL as the user is told it (or how to get one).
    pub jupyter_url: String,
    /// HTTPS: the SHA-256 fingerprint of Jupyter's certificate, for the user to compare.
    pub jupyter_fingerprint: Option<String>,
}

/// The first half of `up` (and `scale`, `heal`): the images this machine builds, then create
/// or converge the cloud's resources. Bad input is refused before any file is written.
pub async fn provision(ctx: &Context, file: &Path, infra_only: bool) -> Result<Provisioned, Error> {
    let started = Instant::now();
    let mut p = profile::load(file)?;
    cluster::check_state_dir_for_ssh(ctx, &p.name).map_err(Error::Usage)?;
    let targets = provider::images_to_build(&p, infra_only);
    if !targets.is_empty() {
        images::mirror_from_env()?;
    }
    provider::check_environment(&p)?;
    // The profile's own certificate for a public Jupyter: bad files before anything is made.
    crate::jupyter_tls::user_files(&p)?;
    let pull_access = match p.container.source {
        ImageSource::Pull if !infra_only => Some(registry::pull_access(
            &p.container.image,
            p.container.registry_ca.as_deref(),
            file,
        )?),
        _ => None,
    };
    let dir = ClusterDir::open(&ctx.state_root, &p.name)?;
    let lock = dir.lock()?;
    if !targets.is_empty() {
        ctx.progress
            .line("images: building what is missing (the first time takes minutes)");
        images::ensure(
            &ctx.state_root.join(".images"),
            targets,
            &p.container.image,
            &ctx.progress,
        )
        .await?;
    }
    let mut provider = connect(ctx, &mut p).await?;
    let mut prepared = prepare(ctx, &p, &dir, provider.as_ref()).await?;
    // A stopped cluster (`stop`) is started first, then planned again as it now is. The
    // servers started or made here may come with new host keys: their consoles may vouch.
    // Those an earlier command renewed and stopped before vouching for count as well.
    let mut renewed: BTreeMap<String, &'static str> = dir
        .load()?
        .renewing
        .into_iter()
        .map(|(n, r)| (n, r.by_an_unfinished_command()))
        .collect();
    // Recorded before the calls: a command stopped after them still knows why keys changed.
    let stopped: Vec<String> = lifecycle::stopped_servers(&prepared.observed.resources)
        .map(|o| o.name.clone())
        .collect();
    note_renewing(&dir, &stopped, Renewal::StartedAgain)?;
    let started_again = lifecycle::start_stopped(
        ctx,
        provider.as_ref(),
        &p.name,
        &prepared.observed.resources,
    )
    .await?;
    if !started_again.is_empty() {
        renewed.extend(
            started_again
                .into_iter()
                .map(|n| (n, Renewal::StartedAgain.by_this_command())),
        );
        prepared = prepare(ctx, &p, &dir, provider.as_ref()).await?;
    }
    let Prepared {
        plan,
        shortfalls,
        warnings,
        ..
    } = prepared;
    show_warnings(ctx, &warnings);
    if !shortfalls.is_empty() {
        return Err(Error::Quota(shortfalls));
    }
    let made: Vec<String> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { desired } | Action::Replace { desired, .. }
                if desired.kind() == Kind::Server =>
            {
                Some(desired.name.clone())
            }
            _ => None,
        })
        .collect();
    note_renewing(&dir, &made, Renewal::MadeAnew)?;
    let mut saved = dir.load()?;
    saved.cloud = p.cloud.clone();
    saved.provider = Some(p.provider);
    saved.ssh_user = Some(p.ssh_user.clone());
    dir.save(&saved)?;
    provider.set_public_key(dir.ensure_keypair()?);

    let applier = ctx.applier(provider.as_ref(), &dir, dir.load()?);
    if plan.is_noop() {
        ctx.progress.line(format!(
            "cluster `{}`: every resource exists; nothing to change",
            p.name
        ));
    } else {
        ctx.progress
            .line(format!("cluster `{}`: {}", p.name, plan.summary()));
        if !infra_only {
            drain_leaving_workers(ctx, &p, &dir, &plan).await?;
        }
        applier.apply(&plan).await?;
        for name in made {
            renewed.insert(name, Renewal::MadeAnew.by_this_command());
        }
    }
    // A kept or taken share's access rule is the share's, not the plan's: granted here.
    if let Some(line) = provider.grant_share(&p).await? {
        ctx.progress.line(line);
    }
    let mut state = applier.state();
    state.nodes = cluster::nodes_with_slots(&p, provider.nodes(&p.name).await?);
    dir.save(&state)?;
    ctx.progress.line(format!(
        "resources ready after {:.1}s, {} API calls",
        started.elapsed().as_secs_f64(),
        provider.calls()
    ));
    Ok(Provisioned {
        profile: p,
        dir,
        provider,
        state,
        pull_access,
        started,
        renewed,
        _lock: lock,
    })
}

/// The second half of `up`: bootstrap every node, list the workers for elastic jobs, run the
/// acceptance check (a real horovodrun over every slot) and find the Jupyter URL.
pub async fn bootstrap_and_check(ctx: &Context, c: &Provisioned) -> Result<Ready, Error> {
    let (p, provider) = (&c.profile, c.provider.as_ref());
    let vouch = bootstrap::Vouch {
        provider,
        cluster: &p.name,
        renewed: &c.renewed,
        lock: tokio::sync::Mutex::new(()),
    };
    let mut opened = cluster::open(ctx, p, &c.dir, &c.state.nodes, Some(&vouch)).await?;
    // Every node answered with a key pinned or vouched for: nothing is left to vouch for.
    let mut saved = c.dir.load()?;
    if !saved.renewing.is_empty() {
        saved.renewing.clear();
        c.dir.save(&saved)?;
    }
    if p.storage.kind == profile::StorageKind::Manila {
        opened.share_export = provider.share_export(&p.name).await?;
    }
    opened.pull_access = c.pull_access.clone();
    let changed = bootstrap_rebooting(ctx, c, &mut opened).await?;
    ctx.progress.line(format!(
        "bootstrap: {changed} step(s) changed something, after {:.1}s",
        c.started.elapsed().as_secs_f64()
    ));
    // The profile's [[data]] on /shared, then, before discovery lists a new worker, what is
    // staged on the others.
    data::deliver(ctx, p, provider, &c.dir, opened.master()).await?;
    data::restage(ctx, &c.dir, &opened.sessions).await?;
    let workers: Vec<_> = bootstrap::host_slots(&opened.sessions)
        .into_iter()
        .skip(1)
        .collect();
    bootstrap::write_discovery(opened.master(), &workers).await?;
    kept::discovery(&c.dir, &workers)?;
    kept::ifaces(&c.dir, &opened.sessions)?;
    let url = opened.jupyter_url(p, provider).await?;
    // Beside a running job on purpose (`scale` under an elastic job); new jobs wait for it.
    let check = check::run(p, &opened.sessions, Some(url.at()), BesideJobs).await?;
    // After the check: the agent starts counting idle time on a cluster that works.
    let said = match autostop::converge(p, provider, &opened.master().ssh).await? {
        autostop::Outcome::Off | autostop::Outcome::InPlace => None,
        autostop::Outcome::Installed {
            credential,
            restricted,
        } => Some(format!(
            "autostop: the master stops the cluster after {} idle (credential {credential}, {})",
            p.lifecycle.autostop.as_deref().unwrap_or("?"),
            if restricted {
                "limited to this cluster's servers"
            } else {
                "NOT limited to this cluster's servers: this cloud does not enforce access rules; you consented in the profile"
            }
        )),
        autostop::Outcome::Removed { said_off } => Some(format!(
            "autostop: off; the agent and its credential are gone{}",
            if said_off {
                ""
            } else {
                " (the master could not say so to the cloud, so `status` shows the agent's last word)"
            }
        )),
    };
    if let Some(line) = said {
        ctx.progress.line(line);
    }
    Ok(Ready {
        check,
        jupyter_url: url.shown,
        jupyter_fingerprint: url.fingerprint,
    })
}

/// Runs the bootstrap; when nodes must reboot before it can go on (the GPU driver loads only
/// after a reboot), reboots them through the provider, waits for them, reconnects and runs
/// the bootstrap again (its steps are idempotent), once: a second request is an error.
async fn bootstrap_rebooting(
    ctx: &Context,
    c: &Provisioned,
    opened: &mut cluster::Opened,
) -> Result<usize, Error> {
    let mut rebooted: Vec<String> = Vec::new();
    loop {
        let inputs = opened.inputs(&c.profile, &c.dir);
        let asked = match bootstrap::bootstrap(&inputs, &opened.sessions, &ctx.progress).await {
            Err(BootstrapError::RebootRequired { nodes }) => nodes,
            done => return Ok(done?),
        };
        let names = reboot::to_reboot(&asked, &rebooted)?;
        reboot_nodes(ctx, c, opened, &asked, &names).await?;
        rebooted = names;
    }
}

/// Reboots `names` through the provider and waits until each answers SSH from its new boot,
/// all within [`REBOOT_DEADLINE`]; then remakes the sessions the reboot killed (every
/// worker's too when the master rebooted: they are reached through it).
async fn reboot_nodes(
    ctx: &Context,
    c: &Provisioned,
    opened: &mut cluster::Opened,
    asked: &[RebootRequest],
    names: &[String],
) -> Result<(), Error> {
    let started = Instant::now();
    for r in asked {
        ctx.progress
            .line(format!("{r}; rebooting the node, then bootstrapping again"));
    }
    // What each node runs now, to tell its next boot from it.
    let mut before = Vec::new();
    for s in opened
        .sessions
        .iter()
        .filter(|s| names.contains(&s.node.name))
    {
        let mark = reboot::boot_mark(&s.ssh)
            .await
            .map_err(BootstrapError::from)?;
        before.push((s.node.name.clone(), mark));
    }
    let remake = reboot::sessions_to_remake(&c.state.nodes, names);
    let (dead, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut opened.sessions)
        .into_iter()
        .partition(|s| remake.contains(&s.node.name));
    for s in dead {
        s.ssh.close().await;
    }
    opened.sessions = kept;
    let spinner = ctx.progress.spinner("reboot");
    spinner.set_message(format!(
        "{}: waiting for the provider to restart them",
        names.join(", ")
    ));
    let restarted = c.provider.reboot(&c.profile.name, names).await;
    spinner.finish_and_clear();
    restarted?;
    let reach = Reach {
        dir: &c.dir,
        user: &c.profile.ssh_user,
        nodes: &c.state.nodes,
    };
    let config = reach.ssh_config()?;
    futures::future::try_join_all(before.iter().map(|(node, mark)| {
        let config = &config;
        async move {
            let bar = ctx
                .progress
                .spinner(&format!("{node}: SSH after the reboot"));
            let left = REBOOT_DEADLINE.saturating_sub(started.elapsed());
            let back = reboot::wait_back(config, node, mark, left, |why| {
                bar.set_message(why.to_string())
            })
            .await;
            bar.finish_and_clear();
            back
        }
    }))
    .await?;
    let again: Vec<_> = c
        .state
        .nodes
        .iter()
        .filter(|n| remake.contains(&n.name))
        .cloned()
        .collect();
    let left = REBOOT_DEADLINE.saturating_sub(started.elapsed());
    opened
        .sessions
        .extend(reach.connect(ctx, &again, left, None).await?);
    // The order `cluster::open` gives: the master first, then the nodes as the state lists them.
    let place = |name: &str| c.state.nodes.iter().position(|n| n.name == name);
    opened
        .sessions
        .sort_by_key(|s| (s.node.role != Role::Master, place(&s.node.name)));
    ctx.progress.line(format!(
        "rebooted {} in {:.1}s",
        names.join(", "),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// From a reboot request to every rebooted node answering SSH again.
const REBOOT_DEADLINE: Duration = Duration::from_secs(900);

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
    let Some(master) = known.iter().find(|n| n.role == Role::Master) else {
        return Ok(());
    };
    if leaving.is_empty() || !known.iter().any(|n| leaving.contains(&n.name.as_str())) {
        return Ok(());
    }
    let reach = Reach {
        dir,
        user: &p.ssh_user,
        nodes: &known,
    };
    let sessions = reach
        .connect(
            ctx,
            std::slice::from_ref(master),
            Duration::from_secs(60),
            None,
        )
        .await?;
    // From the state file: checked again, like anything read from outside.
    let staying: Vec<HostSlots> = known
        .iter()
        .filter(|n| n.role != Role::Master && !leaving.contains(&n.name.as_str()))
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
    kept::discovery(dir, &staying)?;
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
    if !known.iter().any(|n| n.role == Role::Master) || !dir.private_key().exists() {
        return Ok(());
    }
    let reach = Reach {
        dir,
        user: &p.ssh_user,
        nodes: &known,
    };
    let config = reach.ssh_config()?;
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

/// Records, before the calls, that `servers` are about to be renewed (see
/// [`ClusterState::renewing`]); what an earlier command recorded stays.
fn note_renewing(dir: &ClusterDir, servers: &[String], how: Renewal) -> Result<(), Error> {
    if servers.is_empty() {
        return Ok(());
    }
    let mut saved = dir.load()?;
    for name in servers {
        saved.renewing.entry(name.clone()).or_insert(how);
    }
    dir.save(&saved)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{note_renewing, profile_warnings, ClusterDir, Renewal};
    use crate::images::{HOROVOD_CUDA_IMAGE, HOROVOD_TORCH_IMAGE};
    use crate::profile;

    fn profile(extra_workers: &str, image: &str) -> profile::Profile {
        let text = format!(
            "name = \"gpu\"\ncloud = \"c\"\n[master]\nflavor = \"m1.large\"\nimage = \"debian\"\n\
             [workers]\ncount = 2\nflavor = \"g1.a100x2\"\n{extra_workers}\n\
             [access]\nallowed_cidrs = [\"192.0.2.0/24\"]\n[container]\nimage = \"{image}\"\n"
        );
        match profile::parse(std::path::Path::new("gpu.toml"), &text) {
            Ok(p) => p,
            Err(e) => panic!("{e}\n{text}"),
        }
    }

    /// The workers' GPUs come from the profile, else from their flavor; the master's from its
    /// flavor. A CPU image on them is named with the CUDA image; the CUDA image is not.
    #[test]
    fn gpu_nodes_with_a_cpu_image_are_warned_about() {
        let a100x2 = |f: &str| if f == "g1.a100x2" { 2 } else { 0 };
        let none = |_: &str| 0;
        let w = profile_warnings(&profile("", HOROVOD_TORCH_IMAGE), a100x2);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("the workers have 2 GPU(s) each but image"),
            "{w:?}"
        );
        assert!(w[0].contains(HOROVOD_CUDA_IMAGE), "{w:?}");
        let w = profile_warnings(&profile("gpus = 4", HOROVOD_TORCH_IMAGE), none);
        assert!(w[0].starts_with("the workers have 4 GPU(s) each"), "{w:?}");
        assert!(profile_warnings(&profile("gpus = 0", HOROVOD_TORCH_IMAGE), a100x2).is_empty());
        assert!(profile_warnings(&profile("", HOROVOD_TORCH_IMAGE), none).is_empty());
        assert!(profile_warnings(&profile("gpus = 2", HOROVOD_CUDA_IMAGE), a100x2).is_empty());
        let master_too = |f: &str| if f == "m1.large" { 1 } else { 0 };
        let w = profile_warnings(&profile("", HOROVOD_TORCH_IMAGE), master_too);
        assert!(w[0].starts_with("the master has 1 GPU(s) but"), "{w:?}");
    }

    /// What an earlier command recorded stays as it said (a server it made anew, then stopped,
    /// is still one made anew when the next command starts it), and the record survives a save.
    #[test]
    fn renewals_are_recorded_before_the_calls_and_the_first_word_stays() {
        let root = tempfile::tempdir().unwrap();
        let name = crate::input::ClusterName::parse("demo").unwrap();
        let dir = ClusterDir::open(root.path(), &name).unwrap();
        note_renewing(&dir, &["demo-master".into()], Renewal::MadeAnew).unwrap();
        note_renewing(
            &dir,
            &["demo-master".into(), "demo-worker-1".into()],
            Renewal::StartedAgain,
        )
        .unwrap();
        note_renewing(&dir, &[], Renewal::StartedAgain).unwrap();
        let saved = dir.load().unwrap().renewing;
        assert_eq!(
            saved.into_iter().collect::<Vec<_>>(),
            [
                ("demo-master".to_string(), Renewal::MadeAnew),
                ("demo-worker-1".to_string(), Renewal::StartedAgain)
            ]
        );
    }
}
