//! `bake`: a node image made from one node of a running cluster (a worker by default), holding
//! what the profile's nodes need before they are a cluster: Docker, the packages the bootstrap
//! installs, the GPU driver where there is one, and the Horovod image. Servers booted from it
//! (a profile's `[workers] image` or `[master] image` naming it) skip the install and the
//! image's delivery: the bootstrap finds them there.
//!
//! The flow: refuse a stopped cluster or one running a job; read what the bake would hold and
//! its key (an earlier bake with the same key is found and kept, nothing made); set aside on
//! the node everything that belongs to this cluster or this boot (`templates/node/bake.sh`, on
//! a tmpfs, never on a disk); the cloud's snapshot of the node's root disk; everything put back;
//! `up` makes the node's containers again and checks the cluster.

use std::path::Path;
use std::time::Instant;

use super::jobs::read_jobs;
use crate::bake::{self, BakeInputs};
use crate::bootstrap::{BootstrapError, NodeSession};
use crate::cluster;
use crate::context::Context;
use crate::error::Error;
use crate::input;
use crate::plan::{self, Role};
use crate::provider::BakedImage;
use crate::ssh::SshError;
use crate::templates;

/// What the bake came to.
#[derive(Debug)]
struct BakeReport {
    image: BakedImage,
    node: String,
    /// An earlier bake with the same key: nothing was made.
    found: bool,
    /// The node's containers are to be made again (`up`).
    restart: bool,
}

pub async fn bake(
    ctx: &Context,
    file: &Path,
    node: Option<&str>,
    name: Option<&str>,
) -> Result<u8, Error> {
    let started = Instant::now();
    check_name_flag(name)?;
    let report = match bake_a_node(ctx, file, node, name).await {
        Err(Error::State(crate::state::StateError::NoFolder { cluster, .. })) => {
            let shown_file = super::shown_path(file);
            return Err(Error::Usage(format!(
                "bake: cluster `{cluster}` is not up on this machine: `hvd-cluster up \
                 {shown_file}` first, or `hvd-cluster bake {shown_file} --temporary` bakes a \
                 server of its own"
            )));
        }
        other => other?,
    };
    if report.restart {
        // The node's containers went with the bake's preparation: `up` makes them again and
        // checks the whole cluster (it takes the folder's lock itself).
        ctx.progress.line(format!(
            "bake: {} set back; `up` makes its containers again",
            report.node
        ));
        super::up::up(ctx, file, false).await?;
    }
    print_made(&report, started);
    Ok(0)
}

/// `bake --temporary`: the bake made on a one-server cluster of its own (`NAME-baking`, its
/// server of the workers' flavor and image: [`crate::profile::Profile::for_a_temporary_bake`]),
/// brought up and checked as any cluster, baked, then deleted, also when the bake fails. Cut
/// short (Ctrl-C, a closed laptop), the cluster stays and says how it goes: the same command
/// again resumes it (`up` is idempotent), bakes and deletes it; `down --cluster` deletes it.
pub async fn temporary(ctx: &Context, file: &Path, name: Option<&str>) -> Result<u8, Error> {
    let started = Instant::now();
    check_name_flag(name)?;
    let (p, provider) = connect_for_bakes(ctx, file).await?;
    let name = name.map_or_else(|| bake::default_name(p.name.as_str()), str::to_string);
    let shown_file = super::shown_path(file);
    // The profile's folder, absolute: the temporary profile lives in another one.
    let folder = std::path::absolute(file)
        .map_err(|e| Error::Usage(format!("bake: {shown_file}: {e}")))?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let temporary = p
        .for_a_temporary_bake(&folder)
        .map_err(|e| Error::Usage(format!("bake --temporary: {e}")))?;
    // Before any server is made: the name must be free for this bake (or hold an earlier one
    // with the same key, which is found once the server says what it holds).
    if let Some(holder) = provider.bake_name_taken(&name).await? {
        if !holder.own_bake {
            return Err(name_taken(&name, &holder.what, &shown_file, false));
        }
    }
    drop(provider);
    let dir = crate::state::ClusterDir::open(&ctx.state_root, &temporary.name)?;
    let temporary_file = dir.temporary_profile();
    let text = temporary
        .to_toml()
        .map_err(|e| Error::Runtime(format!("bake: the temporary profile: {e}")))?;
    crate::state::write_atomic(
        &temporary_file,
        format!(
            "# made by `hvd-cluster bake --temporary` from {shown_file}; deleted with the \
             cluster\n{text}"
        )
        .as_bytes(),
        0o600,
    )?;
    let cluster_name = temporary.name.as_str();
    ctx.progress.line(format!(
        "bake: on a temporary cluster `{cluster_name}` (one server of the workers' flavor and \
         image), deleted after the bake; if this command is cut short, the same command again \
         finishes the bake and deletes it, and `hvd-cluster down --cluster {cluster_name}` \
         deletes it"
    ));
    let made = async {
        {
            let cluster = crate::converge::provision(ctx, &temporary_file, false).await?;
            crate::converge::bootstrap_and_check(ctx, &cluster).await?;
            // the cluster's lock goes with it, before the bake takes it
        }
        ctx.progress.line(format!(
            "bake: `{cluster_name}` is up and passed its check; baking its server"
        ));
        bake_a_node(ctx, &temporary_file, Some("master"), Some(&name)).await
    }
    .await;
    if let Err(Error::Interrupted) = made {
        return Err(Error::Interrupted);
    }
    let removed =
        super::down::down(ctx, cluster::Target::Profile(temporary_file.clone()), true).await;
    let report = made?;
    removed?;
    print_made(&report, started);
    Ok(0)
}

/// `--name`, by the bake's name grammar, before anything is asked of the cloud.
fn check_name_flag(name: Option<&str>) -> Result<(), Error> {
    name.map_or(Ok(()), |n| {
        bake::check_name(n).map_err(|e| Error::Usage(format!("--name: {e}")))
    })
}

/// `bake: NAME (ID), SIZE from NODE in Ns; boot nodes from it ...`, on stdout.
fn print_made(report: &BakeReport, started: Instant) {
    println!(
        "bake: {} ({}){}{} from {} in {:.0}s; boot nodes from it with `image = \"{}\"` under \
         [workers] or [master]",
        input::shown(&report.image.name),
        input::shown(&report.image.id),
        report
            .image
            .size
            .map(|b| format!(", {}", bake::size(b)))
            .unwrap_or_default(),
        if report.found { ", found" } else { "" },
        report.node,
        started.elapsed().as_secs_f64(),
        input::shown(&report.image.name)
    );
}

/// A bake's name held by another image: refused before anything is made.
fn name_taken(name: &str, what: &str, shown_file: &str, own_bake: bool) -> Error {
    let delete = if own_bake {
        format!(
            " or delete that bake (`hvd-cluster bake {shown_file} --delete {}`)",
            input::shown(name)
        )
    } else {
        String::new()
    };
    Error::Usage(format!(
        "bake: the name `{}` is taken by {what}: choose another with --name{delete}; nothing \
         made",
        input::shown(name)
    ))
}

/// A stopped cluster has no node to bake: `start` it, or bake on a server of its own.
fn stopped_for_bake(why: String) -> Error {
    Error::Usage(format!(
        "{why}; or `--temporary` bakes on a server of its own, the cluster left as it is"
    ))
}

/// Bakes one node of a running cluster (`node`, else the first worker, else the master) into
/// the image `name` (else `CLUSTER-bake`), or finds the earlier bake with the same key; the
/// node is set back but its containers are not made again (the report says whether `up` is
/// needed for that).
async fn bake_a_node(
    ctx: &Context,
    file: &Path,
    node: Option<&str>,
    name: Option<&str>,
) -> Result<BakeReport, Error> {
    // a stopped cluster is bad input here: there is no node to bake
    let existing = cluster::existing_or(ctx, file, stopped_for_bake).await?;
    if !existing.provider.bakes() {
        return Err(not_here());
    }
    let p = &existing.profile;
    let name = name.map_or_else(|| bake::default_name(p.name.as_str()), str::to_string);
    let target = pick_node(p.name.as_str(), &existing.nodes, node)?;
    let shown_file = super::shown_path(file);
    let report = {
        let _lock = existing.dir.lock()?;
        let opened = existing.open(ctx).await?;
        let jobs = read_jobs(opened.master()).await?;
        if let Some(job) = jobs.iter().find(|j| !j.state.ended()) {
            return Err(Error::Usage(format!(
                "bake: job {} is {} on the cluster: a bake takes a node's containers away; wait \
                 for it (`hvd-cluster jobs {shown_file}`) or cancel it",
                job.id,
                job.state.as_str()
            )));
        }
        let session = opened
            .sessions
            .iter()
            .find(|s| s.node.name == target)
            .ok_or_else(|| Error::Runtime(format!("bake: no session to {target}")))?;
        let facts = session
            .ssh
            .sudo(&bake::facts_command(&p.container.image))
            .await
            .map_err(BootstrapError::from)?;
        let Some(facts) = bake::parse_facts(&facts) else {
            return Err(Error::Usage(format!(
                "bake: {target} holds no Docker with the image {}: `hvd-cluster up {shown_file}` \
                 first",
                input::shown(&p.container.image)
            )));
        };
        let role_image = match session.node.role {
            Role::Master => p.master.image.as_deref(),
            Role::Worker => p.worker_image(),
        };
        let image_id = facts.image_id.clone();
        let inputs = BakeInputs {
            source_image: existing.provider.bake_source(role_image).await?,
            horovod_image_id: facts.image_id,
            docker_version: facts.docker_version,
            gpu_driver: facts.gpu_driver,
        };
        let key = inputs.key();
        if let Some(image) = existing.provider.find_bake(&key).await? {
            ctx.progress.line(format!(
                "bake: {} ({}) already holds this node's Docker and image {}: nothing made",
                input::shown(&image.name),
                input::shown(&image.id),
                bake::short_image_id(&image_id)
            ));
            BakeReport {
                image,
                node: target.clone(),
                found: true,
                // a bake cut short after its snapshot left the node without its containers
                restart: facts.containers == 0,
            }
        } else {
            // Before the node is touched: a profile naming the bake must find it alone.
            if let Some(holder) = existing.provider.bake_name_taken(&name).await? {
                return Err(name_taken(
                    &name,
                    &holder.what,
                    &shown_file,
                    holder.own_bake,
                ));
            }
            let properties = inputs.properties(p.name.as_str(), &target);
            let image = snapshot(
                ctx,
                &existing,
                session,
                &target,
                &name,
                &image_id,
                &properties,
            )
            .await?;
            BakeReport {
                image,
                node: target.clone(),
                found: false,
                restart: true,
            }
        }
    };
    Ok(report)
}

/// `bake --list`: the project's bakes, the newest first, with what each holds, where it was
/// baked, which of the profile's kinds of server boot from it, and which servers run from it.
pub async fn list(ctx: &Context, file: &Path) -> Result<u8, Error> {
    let (p, provider) = connect_for_bakes(ctx, file).await?;
    let bakes = provider.list_bakes().await?;
    if bakes.is_empty() {
        println!("no bakes in this project");
        return Ok(0);
    }
    let ids: Vec<String> = bakes.iter().map(|b| b.id.clone()).collect();
    let booted = provider.servers_booted_from(&ids).await?;
    for image in &bakes {
        let servers = booted.get(&image.id).map_or(&[][..], Vec::as_slice);
        println!(
            "{}",
            bake::listing_line(image, &profile_roles(&p, image), servers)
        );
    }
    Ok(0)
}

/// `bake --delete NAME`: one of the project's bakes deleted, after it is shown and confirmed;
/// refused while servers run from it (their `scale` and `heal` would find no image).
pub async fn delete(ctx: &Context, file: &Path, wanted: &str, yes: bool) -> Result<u8, Error> {
    bake::check_name_or_id(wanted).map_err(|e| Error::Usage(format!("--delete: {e}")))?;
    let (p, provider) = connect_for_bakes(ctx, file).await?;
    let bakes = provider.list_bakes().await?;
    let image = bake::pick(&bakes, wanted).map_err(Error::Usage)?;
    let servers = provider
        .servers_booted_from(std::slice::from_ref(&image.id))
        .await?
        .remove(&image.id)
        .unwrap_or_default();
    if !servers.is_empty() {
        return Err(Error::Usage(format!(
            "bake: {} ({}) is the image of {}: their `scale` and `heal` boot from it; `down` \
             their clusters first; nothing deleted",
            input::shown(&image.name),
            input::shown(&image.id),
            servers.join(", ")
        )));
    }
    eprintln!(
        "bake: deletes {}",
        bake::listing_line(image, &profile_roles(&p, image), &[])
    );
    match super::ask("Delete this image?", yes, "bake: nothing deleted")? {
        super::Answer::Yes => {}
        super::Answer::NoTerminal => {
            return Err(Error::Usage(format!(
                "bake: nothing deleted: no terminal to ask on whether to delete {}; pass --yes \
                 to delete without asking",
                input::shown(&image.name)
            )))
        }
        super::Answer::No(answer) => {
            return Err(Error::Runtime(format!(
                "bake: nothing deleted (answered \"{answer}\")"
            )))
        }
    }
    provider.delete_bake(image).await?;
    println!(
        "bake: {} ({}) deleted",
        input::shown(&image.name),
        input::shown(&image.id)
    );
    Ok(0)
}

/// The profile's cloud, for the commands on bakes (no cluster needed).
async fn connect_for_bakes(
    ctx: &Context,
    file: &Path,
) -> Result<(crate::profile::Profile, Box<dyn crate::provider::Provider>), Error> {
    let p = crate::profile::load(file)?;
    let spinner = ctx.progress.spinner("connecting");
    let provider = crate::provider::connect(&crate::provider::Place::of(&p)).await?;
    spinner.finish_and_clear();
    if !provider.bakes() {
        return Err(not_here());
    }
    Ok((p, provider))
}

fn not_here() -> Error {
    Error::Usage("bake: this provider cannot make node images".into())
}

/// Which of the profile's kinds of server name this bake as their image.
fn profile_roles(p: &crate::profile::Profile, image: &BakedImage) -> Vec<&'static str> {
    let names = |n: Option<&str>| n.is_some_and(|n| n == image.name || n == image.id);
    let mut roles = Vec::new();
    if names(p.master.image.as_deref()) {
        roles.push("master");
    }
    if names(p.worker_image()) {
        roles.push("workers");
    }
    roles
}

/// Prepares the node, has the cloud snapshot it, and puts everything back whatever the
/// snapshot's outcome.
async fn snapshot(
    ctx: &Context,
    existing: &cluster::Existing,
    session: &NodeSession,
    target: &str,
    name: &str,
    image_id: &str,
    properties: &std::collections::BTreeMap<String, String>,
) -> Result<BakedImage, Error> {
    // Ctrl-C lets the bake end (the snapshot read, the node set back) for up to a minute
    // before the command is dropped (main.rs); after that the node's timer sets it back.
    let Some(_call) = crate::interrupt::GATE.begin() else {
        return Err(Error::Interrupted);
    };
    let ssh = &session.ssh;
    ssh.sudo(&bake::mount_command())
        .await
        .map_err(BootstrapError::from)?;
    ssh.write_file(bake::BAKE_SCRIPT, templates::BAKE_SCRIPT.as_bytes(), 0o700)
        .await
        .map_err(BootstrapError::from)?;
    let freed = match ssh.sudo(&bake::prepare_command(name, image_id)).await {
        Ok(said) => bake::freed_blocks(&said),
        Err(SshError::Command { code, stderr, .. }) if code == "3" => {
            let _ = ssh.sudo(&bake::restore_command()).await;
            return Err(Error::Usage(format!(
                "bake: {target}: {}; bake another node with --node",
                input::shown_message(stderr.trim(), 300)
            )));
        }
        Err(e) => {
            let _ = ssh.sudo(&bake::restore_command()).await;
            return Err(BootstrapError::from(e).into());
        }
    };
    ctx.progress.line(format!(
        "bake: {target} prepared (its cluster's keys, files, containers and logs set aside on a \
         tmpfs{}); the cloud snapshots its root disk into {} (if this command is cut short, the \
         node puts them back by itself within 90 minutes and `up` makes its containers again)",
        freed.map(|f| format!("; {f}")).unwrap_or_default(),
        input::shown(name)
    ));
    let made = existing
        .provider
        .bake(existing.profile.name.as_str(), target, name, properties)
        .await;
    let restored = ssh.sudo(&bake::restore_command()).await;
    let image = made?;
    restored.map_err(BootstrapError::from)?;
    Ok(image)
}

/// The node a bake is made from: the one named (as `ssh` takes it), else the first worker,
/// else the master.
fn pick_node(
    cluster: &str,
    nodes: &[crate::state::Node],
    wanted: Option<&str>,
) -> Result<String, Error> {
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    match wanted {
        Some(n) => {
            let prefixed = format!("{cluster}-{n}");
            names
                .iter()
                .find(|x| **x == n || **x == prefixed)
                .map(|x| x.to_string())
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "bake: no node `{}`; nodes: {}",
                        input::shown(n),
                        names.join(", ")
                    ))
                })
        }
        None => Ok(nodes
            .iter()
            .find(|n| n.role == Role::Worker)
            .map(|n| n.name.clone())
            .unwrap_or_else(|| plan::Names(cluster).master())),
    }
}
